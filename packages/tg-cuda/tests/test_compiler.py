"""NVRTC and ptxas: PTX and cubins are made, errors carry the compiler's log, ptxas is used only when it can read
NVRTC's PTX, and the 16-bit float headers convert exactly like the GPU."""
from __future__ import annotations

import numpy as np
import pytest

from tg_cuda import ptxas
from tg_cuda.bundle import CUDABinary
from tg_cuda.compiler import CUDACompiler
from tg_cuda.mock.build import MockBuildError
from tg_cuda.mock.driver import MockDriver
from tg_cuda.nvrtc import NVRTCError
from tg_cuda.program import CUDAProgram

ADD = 'extern "C" __global__ void __launch_bounds__(1) add(float* a, const float* b) { a[blockIdx.x] += b[blockIdx.x]; }'


def test_ptx_and_cubin() -> None:
  b = CUDABinary.unpack(CUDACompiler("sm_80").compile(ADD))
  assert b".target sm_80" in b.ptx and b".entry add" in b.ptx
  assert b.cubin[:4] == b"\x7fELF", "a cubin, from ptxas or else from NVRTC"
  assert b.mock == b"" and b.image() == b.cubin


def test_without_ptxas_nvrtc_assembles(monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.setattr("tg_cuda.compiler.usable_ptxas", lambda nvrtc: None)
  b = CUDABinary.unpack(CUDACompiler("sm_86").compile(ADD))
  assert b.cubin[:4] == b"\x7fELF" and b".target sm_86" in b.ptx


def test_an_old_ptxas_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.setattr(ptxas, "ptxas_release", lambda: ("/old/ptxas", (12, 4)))
  ptxas.usable_ptxas.cache_clear()
  try:
    assert ptxas.usable_ptxas((12, 9)) is None
    monkeypatch.setattr(ptxas, "ptxas_release", lambda: ("/new/ptxas", (13, 0)))
    ptxas.usable_ptxas.cache_clear()
    assert ptxas.usable_ptxas((12, 9)) == ("/new/ptxas", (13, 0))
  finally:
    ptxas.usable_ptxas.cache_clear()


def test_compile_error_shows_nvrtc_log() -> None:
  with pytest.raises(NVRTCError, match="undefined") as e:
    CUDACompiler("sm_80").compile('extern "C" __global__ void broken(float* a) { a[0] = nope; }')
  assert "--- source ---" in str(e.value)


def test_mock_build_error_shows_source() -> None:
  with pytest.raises(MockBuildError, match="no `__global__"):
    CUDACompiler("sm_80", mock=True).compile("int x;")


# half and bfloat16 round trips through tg_fp16.h / tg_bf16.h on the CPU: these are the conversions the GPU does
CONVERT = """
#include "tg_fp16.h"
#include "tg_bf16.h"
extern "C" __global__ void __launch_bounds__(1) convert(unsigned short* h, unsigned short* bf, float* back, const float* x) {
  int i = blockIdx.x;
  half a = x[i];
  __nv_bfloat16 b = x[i];
  h[i] = a.x; bf[i] = b.x;
  back[i] = (float)a;
}
"""


def test_half_and_bfloat16_conversions_round_to_nearest_even() -> None:
  rng = np.random.default_rng(0)
  special = [0.0, -0.0, 65504.0, 65519.99, 65520.0, 1e9, -1e9, 6e-8, 3e-8, 2.9e-8, 6.1e-5, 1e-10, np.inf, -np.inf, np.nan, 1.0009765625]
  x = np.concatenate([np.array(special, np.float32), rng.standard_normal(2000).astype(np.float32) * np.float32(10.0) ** rng.integers(-9, 6, 2000)])
  x = x.astype(np.float32)
  driver = MockDriver()
  prg = CUDAProgram(driver, "convert", CUDACompiler("sm_80", mock=True).compile_cached(CONVERT))
  bufs = [driver.alloc(x.size * n) for n in (2, 2, 4, 4)]
  driver.copyin(bufs[3], memoryview(x).cast("B"))
  prg(*bufs, global_size=(x.size,))
  h, bf, back = np.empty(x.size, np.uint16), np.empty(x.size, np.uint16), np.empty(x.size, np.float32)
  for out, ptr in zip((h, bf, back), bufs):
    driver.copyout(memoryview(out).cast("B"), ptr)
  with np.errstate(over="ignore"):
    want_h = x.astype(np.float16)
  nan = np.isnan(x)
  np.testing.assert_array_equal(h[~nan], want_h.view(np.uint16)[~nan])
  np.testing.assert_array_equal(back[~nan], want_h.astype(np.float32)[~nan])
  assert np.isnan(h[nan].view(np.float16)).all() and np.isnan(back[nan]).all()
  # bfloat16 reference: round the float32 bits to nearest even
  bits = x.view(np.uint32).astype(np.uint64)
  want_bf = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
  np.testing.assert_array_equal(bf[~nan], want_bf[~nan])
  assert np.isnan((bf[nan].astype(np.uint32) << 16).view(np.float32)).all()


def test_ptxas_newer_than_the_driver_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.setattr("tg_cuda.compiler.usable_ptxas", lambda nvrtc: ("/cuda13/ptxas", (13, 0)))
  assert CUDACompiler("sm_80", driver_cuda=(12, 8)).ptxas is None, "a CUDA 13 cubin may not load on a CUDA 12 driver"
  assert CUDACompiler("sm_80", driver_cuda=(13, 1)).ptxas == ("/cuda13/ptxas", (13, 0))
  assert CUDACompiler("sm_80", mock=True).ptxas == ("/cuda13/ptxas", (13, 0)), "the mock loads no cubin: any ptxas checks the PTX"
