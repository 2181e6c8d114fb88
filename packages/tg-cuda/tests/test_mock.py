"""The CPU mock of CUDA (tg_cuda_mock.h + MockDriver) on hand-written kernels: thread and block indices, __shared__
memory with __syncthreads, the hardware's launch limits, and kernel arguments passed as a GPU launch passes them.
These need no GPU and no CUDA_MOCK: they drive the mock directly."""
from __future__ import annotations

import numpy as np
import pytest

from tg_cuda.bundle import CUDABinary
from tg_cuda.compiler import CUDACompiler
from tg_cuda.driver import CUDAError
from tg_cuda.mock.driver import MockDriver
from tg_cuda.program import CUDAProgram

# a block-level tree reduction: every step halves the live threads, with a barrier between steps
BLOCK_SUM = """
extern "C" __global__ void __launch_bounds__(256) block_sum(float* __restrict__ out, const float* __restrict__ x, const int n) {
  __shared__ float part[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  part[threadIdx.x] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (int step = blockDim.x / 2; step > 0; step /= 2) {
    if ((int)threadIdx.x < step) part[threadIdx.x] += part[threadIdx.x + step];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = part[0];
}
"""

# every thread writes where it is: (block, thread) indices of a 3d grid of 3d blocks
WHERE = """
extern "C" __global__ void __launch_bounds__(24) where(int* __restrict__ out) {
  int block = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  int thread = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  int n = blockDim.x * blockDim.y * blockDim.z;
  out[block * n + thread] = block * 1000 + thread;
}
"""


@pytest.fixture(scope="module")
def driver() -> MockDriver:
  return MockDriver()


def _program(driver: MockDriver, src: str, name: str) -> CUDAProgram:
  return CUDAProgram(driver, name, CUDACompiler("sm_80", mock=True).compile_cached(src))


def _upload(driver: MockDriver, a: np.ndarray) -> int:
  ptr = driver.alloc(a.nbytes)
  driver.copyin(ptr, memoryview(a).cast("B"))
  return ptr


def _download(driver: MockDriver, ptr: int, like: np.ndarray) -> np.ndarray:
  out = np.empty_like(like)
  driver.copyout(memoryview(out).cast("B"), ptr)
  return out


def test_shared_memory_and_syncthreads(driver: MockDriver) -> None:
  x = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
  blocks = -(-x.size // 256)
  prg = _program(driver, BLOCK_SUM, "block_sum")
  out, xs = _upload(driver, np.zeros(blocks, np.float32)), _upload(driver, x)
  prg(out, xs, global_size=(blocks,), local_size=(256,), vals=(x.size,))
  want = np.pad(x, (0, blocks * 256 - x.size)).reshape(blocks, 256).sum(1)
  np.testing.assert_allclose(_download(driver, out, np.zeros(blocks, np.float32)), want, rtol=1e-5)


# shared memory of a 16-bit type: a reversal through a __shared__ half array
HALF_REVERSE = """
#include "tg_fp16.h"
extern "C" __global__ void __launch_bounds__(32) half_reverse(half* __restrict__ out, const half* __restrict__ x) {
  __shared__ half buf[32];
  buf[threadIdx.x] = x[blockIdx.x * 32 + threadIdx.x];
  __syncthreads();
  out[blockIdx.x * 32 + threadIdx.x] = buf[31 - threadIdx.x] * (half)2.0f;
}
"""


def test_shared_half_array(driver: MockDriver) -> None:
  x = np.arange(64, dtype=np.float16)
  prg = _program(driver, HALF_REVERSE, "half_reverse")
  out, xs = _upload(driver, np.zeros_like(x)), _upload(driver, x)
  prg(out, xs, global_size=(2,), local_size=(32,))
  np.testing.assert_array_equal(_download(driver, out, x), x.reshape(2, 32)[:, ::-1].reshape(-1) * 2)


def test_grid_and_block_indices(driver: MockDriver) -> None:
  grid, block = (3, 2, 2), (4, 3, 2)
  n = int(np.prod(grid) * np.prod(block))
  prg = _program(driver, WHERE, "where")
  out = _upload(driver, np.full(n, -1, np.int32))
  prg(out, global_size=grid, local_size=block)
  got = _download(driver, out, np.zeros(n, np.int32))
  want = np.array([b * 1000 + t for b in range(int(np.prod(grid))) for t in range(int(np.prod(block)))], np.int32)
  np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("grid,block,why", [
  ((1, 70000, 1), (1, 1, 1), r"grid \(1, 70000, 1\) is more than the device.s \(2147483647, 65535, 65535\)"),
  ((0, 1, 1), (1, 1, 1), "is 0"),
  ((1, 1, 1), (1, 1, 65), "block .1, 1, 65. is more than"),
  ((1, 1, 1), (32, 32, 2), "2048 threads, more than the device's 1024"),
  ((1, 1, 1), (25, 1, 1), "more than the 24 the kernel was compiled for"),
])
def test_launch_limits_are_the_hardware_ones(driver: MockDriver, grid: tuple[int, ...], block: tuple[int, ...], why: str) -> None:
  prg = _program(driver, WHERE, "where")
  out = driver.alloc(4)
  with pytest.raises(CUDAError, match=why):
    prg(out, global_size=grid, local_size=block)


def test_compiled_binary_has_ptx_cubin_and_cpu_build() -> None:
  b = CUDABinary.unpack(CUDACompiler("sm_80", mock=True).compile(BLOCK_SUM))
  assert b.arch == "sm_80" and b".entry block_sum" in b.ptx and b"bar.sync" in b.ptx
  assert b.mock[:4] == b"\x7fELF"
  from tg_cuda.ptxas import ptxas_release
  if ptxas_release() is not None:
    assert b.cubin[:4] == b"\x7fELF", "ptxas is on PATH: the PTX is assembled"


def test_memory_is_checked_like_the_driver(driver: MockDriver) -> None:
  ptr = driver.alloc(16)
  driver.free(ptr)
  with pytest.raises(CUDAError, match="not an allocation"):
    driver.free(ptr)


AXPB = """
extern "C" __global__ void __launch_bounds__(64) axpb(float* __restrict__ out, const float* __restrict__ x, const int a, const int b) {
  int i = blockIdx.x * 64 + threadIdx.x;
  out[i] = x[i] * a + b;
}
"""


def test_a_program_relaunched_gets_each_launch_s_own_arguments(driver: MockDriver) -> None:
  """A program refills one set of kernelParams launch after launch; threads launching it at once pack their own, so
  no launch ever sees another's buffers or values."""
  import threading
  prg = _program(driver, AXPB, "axpb")
  x = np.arange(128, dtype=np.float32)
  xs = _upload(driver, x)
  errors: list[str] = []

  def worker(t: int) -> None:
    out = driver.alloc(x.nbytes)
    for j in range(30):
      prg(out, xs, global_size=(2,), local_size=(64,), vals=(t + 2, j))
      got = _download(driver, out, x)
      if not np.array_equal(got, x * (t + 2) + j):
        errors.append(f"thread {t} launch {j}: {got[:3]}")
  threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
  for th in threads:
    th.start()
  for th in threads:
    th.join()
  assert not errors, errors[:3]
  worker(7)  # and one thread alone, reusing the arrays every launch
  assert not errors, errors[:3]
