"""Building a kernel's CUDA C++ for the CPU (CUDA_MOCK=1): tg.runtime.gpu_mock's build, with tg_cuda_mock.h
force-included.

The build runs as a separate process while NVRTC and ptxas work on the same source, so mock mode costs little
more wall time than compiling for a GPU. TG_GPU_MOCK_CXX picks the compiler (default: g++, else clang++).
"""
from __future__ import annotations

import os
import re

from tg.runtime.gpu_mock import MockBuild, MockBuildError, build_key, host_cxx, host_cxx_version

__all__ = ["MockBuildError", "cuda_mock_build", "host_cxx", "host_cxx_version", "kernel_signature", "mock_build_key"]

MOCK_DIR = os.path.dirname(os.path.abspath(__file__))
SHIM = os.path.join(MOCK_DIR, "tg_cuda_mock.h")
INCLUDE_DIR = os.path.join(os.path.dirname(MOCK_DIR), "include")
_KERNEL = re.compile(r"__global__\s+void\s+(?:__launch_bounds__\((\d+)\)\s+)?(\w+)\s*\(")


def kernel_signature(src: str) -> tuple[str, int]:
  """(name, max threads per block) of the one __global__ function in `src`."""
  m = _KERNEL.search(src)
  if m is None:
    raise MockBuildError("no `__global__ void name(...)` kernel in the source")
  return m.group(2), int(m.group(1)) if m.group(1) else 1024


def cuda_mock_build(src: str) -> MockBuild:
  """Start the CPU build of one CUDA kernel."""
  name, max_threads = kernel_signature(src)
  # tensor-core kernels need the barriers too: the mock's mma is a warp-wide exchange through shared tiles (tg_mma.h)
  barriers = "__syncthreads" in src or "__tg_mma" in src
  return MockBuild(src, SHIM, f"TG_MOCK_KERNEL({name}, {max_threads})", barriers=barriers, include_dirs=[INCLUDE_DIR],
                   what="a CUDA kernel (CUDA_MOCK=1)")


def mock_build_key() -> str:
  """What the compile cache's key must cover for the CPU builds (see gpu_mock.build_key)."""
  return build_key(SHIM, *(os.path.join(INCLUDE_DIR, n) for n in sorted(os.listdir(INCLUDE_DIR))))
