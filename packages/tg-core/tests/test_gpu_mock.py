"""tg.runtime.gpu_mock, the CPU harness of the GPU devices' mock modes, driven directly with a minimal device header:
barriers between the threads of a workgroup, indices as globals or as trailing kernel parameters (Metal's way),
the device's launch limits, and clean Python errors for builds that fail or can't load."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from tg.runtime.gpu_mock import INVALID_VALUE, OUT_OF_RESOURCES, MockBuild, MockBuildError, MockKernel, MockLaunchError, host_cxx

pytestmark = pytest.mark.skipif(host_cxx() is None, reason="no C++ compiler for the CPU builds")

# a made-up device: 64 threads per workgroup, grids up to 1000 in x
SHIM = r"""
#include "tg_gpu_mock.h"
static const tg_mock::Limits toy_limits = {{1000u, 10u, 10u}, {64u, 64u, 4u}, 64u};
"""

BLOCK_SUM = r"""
extern "C" void block_sum(float* out, const float* x) {
  static float part[64];
  const unsigned t = tg_mock::thread_idx.x, n = tg_mock::block_dim.x, i = tg_mock::block_idx.x * n + t;
  part[t] = x[i];
  tg_mock::barrier();
  for (unsigned step = n / 2; step > 0; step /= 2) {
    if (t < step) part[t] += part[t + step];
    tg_mock::barrier();
  }
  if (t == 0) out[tg_mock::block_idx.x] = part[0];
}
"""

INDEXED = r"""
void where(int* out, int scale, tg_mock::idx3 gid, tg_mock::idx3 lid) { out[gid.x * 8 + lid.x] = scale * gid.x + lid.x; }
"""


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> str:
  path = tmp_path_factory.mktemp("gpu_mock") / "toy_mock.h"
  path.write_text(SHIM)
  return str(path)


def _kernel(shim: str, src: str, name: str, max_threads: int, caller: str = "tg_mock::call", barriers: bool = False) -> MockKernel:
  build = MockBuild(src, shim, f"TG_MOCK_EXPORT_LAUNCHER({name}, {max_threads}, toy_limits, {caller})", barriers=barriers, what="a toy kernel")
  return MockKernel(name, build.result())


def _params(*values: ctypes._SimpleCData) -> tuple[int, object]:
  """The address of a kernelParams-style array (one pointer per argument value), and what keeps it alive."""
  ptrs = (ctypes.c_void_p * len(values))(*(ctypes.addressof(v) for v in values))
  return ctypes.addressof(ptrs), (ptrs, values)


def _ptr(a: np.ndarray) -> ctypes.c_void_p:
  return ctypes.c_void_p(a.ctypes.data)


def test_barriers_order_the_threads_of_a_workgroup(shim: str) -> None:
  k = _kernel(shim, BLOCK_SUM, "block_sum", 64, barriers=True)
  x = np.random.default_rng(0).standard_normal(5 * 64).astype(np.float32)
  out = np.zeros(5, np.float32)
  params, _keep = _params(_ptr(out), _ptr(x))
  k.launch(params, (5, 1, 1), (64, 1, 1))
  np.testing.assert_allclose(out, x.reshape(5, 64).sum(1), rtol=1e-5)
  assert k.param_sizes == [8, 8]


def test_indices_can_be_trailing_kernel_parameters(shim: str) -> None:
  k = _kernel(shim, INDEXED, "where", 8, caller="tg_mock::call_indexed")
  out = np.full(24, -1, np.int32)
  params, _keep = _params(_ptr(out), ctypes.c_int(100))
  k.launch(params, (3, 1, 1), (8, 1, 1))
  np.testing.assert_array_equal(out, [100 * g + t for g in range(3) for t in range(8)])


@pytest.mark.parametrize("grid,block,code,why", [
  ((1001, 1, 1), (1, 1, 1), INVALID_VALUE, r"grid \(1001, 1, 1\) is more than the device's \(1000, 10, 10\)"),
  ((0, 1, 1), (1, 1, 1), INVALID_VALUE, "is 0"),
  ((1, 1, 1), (1, 1, 5), INVALID_VALUE, r"block \(1, 1, 5\) is more than"),
  ((1, 1, 1), (16, 8, 1), INVALID_VALUE, "128 threads, more than the device's 64"),
  ((1, 1, 1), (9, 1, 1), OUT_OF_RESOURCES, "more than the 8 the kernel was compiled for"),
])
def test_launch_dims_are_checked_against_the_limits(shim: str, grid: tuple[int, ...], block: tuple[int, ...], code: int, why: str) -> None:
  k = _kernel(shim, INDEXED, "where", 8, caller="tg_mock::call_indexed")
  out = np.zeros(1, np.int32)
  params, _keep = _params(_ptr(out), ctypes.c_int(0))
  with pytest.raises(MockLaunchError, match=why) as e:
    k.launch(params, grid, block)
  assert e.value.code == code
  assert out[0] == 0, "a refused launch runs nothing"


def test_a_barrier_in_a_build_without_fibers_is_an_error_not_a_crash(shim: str) -> None:
  with pytest.raises(MockBuildError):
    _kernel(shim, BLOCK_SUM, "block_sum", 64, barriers=False)


def test_a_build_error_shows_the_compiler_output_and_the_source(shim: str) -> None:
  why = r"(?s)the CPU build of a toy kernel failed:.*not_a_thing.*(not declared|undeclared).*--- source ---.*not_a_thing"
  with pytest.raises(MockBuildError, match=why):
    _kernel(shim, "extern \"C\" void broken(int* out) { out[0] = not_a_thing; }", "broken", 1)


def test_a_damaged_shared_object_is_an_error_not_a_crash() -> None:
  with pytest.raises(MockBuildError, match="does not load"):
    MockKernel("k", b"\x7fELF" + b"\0" * 60)
