"""On a real NVIDIA GPU: memory, a kernel launch with timing, and a CUDA graph through the driver API.
Skipped where libcuda can't be loaded (no driver) or has no GPU."""
from __future__ import annotations

import numpy as np
import pytest

from tg_cuda.compiler import CUDACompiler
from tg_cuda.driver import CUDADriver, ffi, load_libcuda
from tg_cuda.program import CUDAProgram, pack_params


@pytest.fixture(scope="module")
def gpu() -> CUDADriver:
  try:
    load_libcuda()
  except Exception as e:
    pytest.skip(f"libcuda cannot be loaded: {str(e).split('.  Additionally')[0]}")  # cffi appends a find_library note
  return CUDADriver()


SCALE = 'extern "C" __global__ void __launch_bounds__(64) scale(float* a, const float* b, const int n) ' \
        '{ int i = blockIdx.x * 64 + threadIdx.x; if (i < n) a[i] = b[i] * 3.0f; }'


def _program(gpu: CUDADriver) -> CUDAProgram:
  return CUDAProgram(gpu, "scale", CUDACompiler(gpu.arch).compile(SCALE))


def test_memory_round_trip(gpu: CUDADriver) -> None:
  x = np.arange(1000, dtype=np.float32)
  ptr = gpu.alloc(x.nbytes)
  gpu.copyin(ptr, memoryview(x).cast("B"))
  out = np.zeros_like(x)
  gpu.copyout(memoryview(out).cast("B"), ptr)
  gpu.free(ptr)
  np.testing.assert_array_equal(out, x)


def test_launch_and_time(gpu: CUDADriver) -> None:
  x = np.arange(1000, dtype=np.float32)
  a, b = gpu.alloc(x.nbytes), gpu.alloc(x.nbytes)
  gpu.copyin(b, memoryview(x).cast("B"))
  tm = _program(gpu)(a, b, global_size=(16,), local_size=(64,), vals=(x.size,), wait=True)
  assert tm is not None and tm > 0
  out = np.zeros_like(x)
  gpu.copyout(memoryview(out).cast("B"), a)
  np.testing.assert_array_equal(out, x * 3)


def test_graph_launch_and_update(gpu: CUDADriver) -> None:
  prg = _program(gpu)
  x = np.arange(100, dtype=np.float32)
  a, b, c = (gpu.alloc(x.nbytes) for _ in range(3))
  gpu.copyin(b, memoryview(x).cast("B"))
  gpu.copyin(c, memoryview(x + 1).cast("B"))

  def node(src: int) -> tuple[object, object]:
    # the struct only points at kernelParams: the array itself must stay alive too (it was freed here once: a segfault
    # in cuGraphAddKernelNode on a real GPU, which the mock driver, reading it later, never showed)
    params, alive = pack_params([a, src], [x.size])
    return ffi.new("CUDA_KERNEL_NODE_PARAMS*", {"func": prg.fn, "gridDimX": 2, "gridDimY": 1, "gridDimZ": 1, "blockDimX": 64, "blockDimY": 1,
                                                "blockDimZ": 1, "kernelParams": params}), (params, alive)
  graph = gpu.graph_create()
  p, _alive = node(b)
  n = gpu.graph_add_kernel(graph, [], p)
  ex = gpu.graph_instantiate(graph)
  out = np.zeros_like(x)
  gpu.graph_launch(ex)
  gpu.copyout(memoryview(out).cast("B"), a)
  np.testing.assert_array_equal(out, x * 3)
  p, _alive = node(c)
  gpu.graph_set_kernel(ex, n, p)
  gpu.graph_launch(ex)
  gpu.copyout(memoryview(out).cast("B"), a)
  np.testing.assert_array_equal(out, (x + 1) * 3)
