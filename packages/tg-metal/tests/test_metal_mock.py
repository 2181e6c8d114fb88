"""METAL_MOCK=1's CPU run: hand-written MSL kernels (threadgroup memory with barriers, 3d indices, int arguments, buffer
views) and tg's own tensor-core kernels (simdgroup_matrix 8x8, the fragments exchanged between the 32 threads) give
numpy's numbers. These drive the mock directly (MockDriver, MetalCompiler(mock=True)) and need no METAL_MOCK."""
from __future__ import annotations

import numpy as np
import pytest

from tg import Tensor
from tg.codegen.kernel import Kernel, Opt, OptOps
from tg.codegen.uops import UOps
from tg.dtype import dtypes
from tg.engine.schedule import create_schedule
from tg.runtime.gpu_mock import host_cxx
from tg_metal.compiler import MetalCompiler
from tg_metal.mock.check import check_cxx
from tg_metal.mock.driver import MockDriver
from tg_metal.program import MetalProgram
from tg_metal.renderer import MetalRenderer
from tg_metal.runtime import MetalBuffer, MetalError

pytestmark = pytest.mark.skipif(check_cxx() is None or host_cxx() is None, reason="METAL_MOCK=1 needs clang++ and a C++ compiler")
HEAD = "#include <metal_stdlib>\nusing namespace metal;\n"
IDX = "uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]"

# a threadgroup tree reduction: every step halves the live threads, with a barrier between steps
BLOCK_SUM = HEAD + f"""kernel void block_sum(device float* out [[buffer(0)]], const device float* x [[buffer(1)]],
                      constant int& n [[buffer(2)]], {IDX}) {{
  threadgroup float part[128];
  int i = gid.x * 128 + lid.x;
  part[lid.x] = i < n ? x[i] : 0.0f;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint step = 64; step > 0; step /= 2) {{
    if (lid.x < step) part[lid.x] += part[lid.x + step];
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }}
  if (lid.x == 0) out[gid.x] = part[0];
}}"""

# every thread writes where it is: (threadgroup, thread) indices of a 3d grid of 3d threadgroups
WHERE = HEAD + f"""kernel void where(device int* out [[buffer(0)]], {IDX}) {{
  int g = (gid.z * 3 + gid.y) * 2 + gid.x;
  int t = (lid.z * 3 + lid.y) * 4 + lid.x;
  out[g * 24 + t] = g * 1000 + t;
}}"""


@pytest.fixture(scope="module")
def driver() -> MockDriver:
  return MockDriver()


def _program(driver: MockDriver, src: str, name: str) -> MetalProgram:
  return MetalProgram(driver, name, MetalCompiler(mock=True).compile(src))


def _upload(driver: MockDriver, a: np.ndarray) -> MetalBuffer:
  buf = driver.alloc(a.nbytes)
  driver.copyin(buf, memoryview(np.ascontiguousarray(a)).cast("B"))
  return buf


def _download(driver: MockDriver, buf: MetalBuffer, like: np.ndarray) -> np.ndarray:
  out = np.empty_like(like)
  driver.copyout(memoryview(out).cast("B"), buf)
  return out


def test_threadgroup_reduction_with_barriers(driver: MockDriver) -> None:
  x = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
  prg = _program(driver, BLOCK_SUM, "block_sum")
  out = driver.alloc(8 * 4)
  prg(out, _upload(driver, x), global_size=(8,), local_size=(128,), vals=(1000,), wait=True)
  got = _download(driver, out, np.zeros(8, np.float32))
  ref = np.pad(x, (0, 24)).reshape(8, 128).sum(axis=1)
  np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_3d_indices_are_the_kernels_last_parameters(driver: MockDriver) -> None:
  prg = _program(driver, WHERE, "where")
  out = driver.alloc(24 * 24 * 4)
  prg(out, global_size=(2, 3, 4), local_size=(4, 3, 2))
  got = _download(driver, out, np.zeros(24 * 24, np.int32)).reshape(24, 24)
  assert (got == np.arange(24)[:, None] * 1000 + np.arange(24)[None, :]).all()


def test_buffer_views_start_at_their_offset(driver: MockDriver) -> None:
  src = HEAD + f"kernel void k(device float* out [[buffer(0)]], const device float* x [[buffer(1)]], {IDX}) {{ out[lid.x] = x[lid.x] * 2.0f; }}"
  prg = _program(driver, src, "k")
  x = np.arange(16, dtype=np.float32)
  buf, out = _upload(driver, x), driver.alloc(16 * 4)
  prg(out.view(8 * 4), buf.view(4 * 4), global_size=(1,), local_size=(8,))
  got = _download(driver, out, np.zeros(16, np.float32))
  np.testing.assert_array_equal(got[8:], x[4:12] * 2)


def test_launch_limits_are_an_apple_gpus(driver: MockDriver) -> None:
  prg = _program(driver, WHERE, "where")
  out = driver.alloc(4)
  with pytest.raises(MetalError, match="1024"):
    prg(out, global_size=(1,), local_size=(1024, 2))


def _tc_matmul(driver: MockDriver, a: np.ndarray, b: np.ndarray, amt: int) -> tuple[np.ndarray, str]:
  t = Tensor(a, device="PYTHON") @ Tensor(b, device="PYTHON")
  si = create_schedule([t.lazydata])[-1]
  p = Kernel(si.ast, MetalRenderer()).apply_opts([Opt(OptOps.TC, None, amt)]).to_program()
  assert any(u.op is UOps.WMMA for u in p.uops)
  prg = MetalProgram(driver, p.function_name, MetalCompiler(mock=True).compile(p.src))
  out = driver.alloc(si.bufs[0].nbytes)
  # the inputs as the kernel's parameters order them: the PYTHON buffers hold a's and b's data
  bufs = [out, *[_upload(driver, np.frombuffer(bytes(x.ensure_allocated().as_buffer()), np.uint8)) for x in si.bufs[1:]]]
  gs, ls = p.launch_dims({})
  prg(*bufs, global_size=gs, local_size=ls, wait=True)
  return _download(driver, out, np.zeros(a.shape[0] * b.shape[1], a.dtype)).reshape(a.shape[0], b.shape[1]), p.src


@pytest.mark.parametrize("dt, amt", [(np.float16, 0), (np.float32, 1)])
def test_simdgroup_matmul_matches_numpy(driver: MockDriver, dt: type, amt: int) -> None:
  rng = np.random.default_rng(1)
  a, b = rng.standard_normal((16, 24)).astype(dt), rng.standard_normal((24, 32)).astype(dt)
  got, src = _tc_matmul(driver, a, b, amt)
  assert "simdgroup_multiply_accumulate" in src
  np.testing.assert_allclose(got.astype(np.float32), a.astype(np.float32) @ b.astype(np.float32), rtol=1e-2, atol=2e-2)


def test_half_bfloat_and_int64_kernels_run(driver: MockDriver) -> None:
  src = HEAD + f"""kernel void k(device float* out [[buffer(0)]], const device half* h [[buffer(1)]], const device bfloat* b [[buffer(2)]],
  const device long* l [[buffer(3)]], {IDX}) {{
  half x = h[lid.x] * (half)(2.0f);
  bfloat y = (bfloat)((float)(b[lid.x]) + 1.0f);
  long z = l[lid.x] * 3l;
  out[lid.x] = (float)(x) + (float)(y) + (float)(z) + (float)(as_type<ushort>(b[lid.x]) == as_type<ushort>(b[lid.x]));
}}"""
  prg = _program(driver, src, "k")
  h = np.arange(4, dtype=np.float16)
  bf = (np.arange(4, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)  # 0, 1, 2, 3 as bfloat16
  lv = np.array([2**40, -3, 5, 7], dtype=np.int64)
  out = driver.alloc(16)
  prg(out, _upload(driver, h), _upload(driver, bf), _upload(driver, lv), global_size=(1,), local_size=(4,))
  got = _download(driver, out, np.zeros(4, np.float32))
  np.testing.assert_allclose(got, h.astype(np.float32) * 2 + np.arange(4) + 1 + lv.astype(np.float32) * 3 + 1, rtol=1e-6)


def test_dtype_of_outputs() -> None:
  assert dtypes.float64 in MetalRenderer().missing_dtypes


JIT = """
import numpy as np
from tg import Device, Tensor, TinyJit
from tg_metal.device import get_driver
drv = get_driver(0)
calls = []
run = drv.run
drv.run = lambda launches, wait: calls.append(len(launches)) or run(launches, wait)
@TinyJit
def f(a, b):
  return (a * (a + b).sum(axis=1, keepdim=True)).realize()  # a reduce, then an elementwise kernel
for i in range(4):
  a, b = Tensor(np.full((4, 8), i, np.float32)), Tensor(np.ones((4, 8), np.float32))
  out = f(a, b).numpy()
  assert (out == i * (i + 1) * 8).all(), out
print(calls)
"""


def test_jit_replays_as_one_command_buffer(tmp_path: str) -> None:
  import os
  import subprocess
  import sys
  env = {**os.environ, "METAL_MOCK": "1", "DEVICE": "METAL", "CACHEDB": os.path.join(str(tmp_path), "c.db")}
  p = subprocess.run([sys.executable, "-c", JIT], capture_output=True, text=True, env=env, timeout=300, check=False)
  assert p.returncode == 0, p.stderr
  calls = eval(p.stdout.strip().splitlines()[-1])
  # captured at the second call; the replays are one run of all the function's kernels each
  assert calls[-1] > 1 and calls.count(calls[-1]) >= 2, calls
