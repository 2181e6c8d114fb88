"""Building a kernel's HIP source for the CPU (AMD_MOCK=1) with tg-core's GPU mock harness (tg.runtime.gpu_mock):
the host C++ compiler, tg_amd_mock.h force-included, in a background process while clang and lld make the code
object from the same source. TG_GPU_MOCK_CXX picks the compiler (default: g++, else clang++)."""
from __future__ import annotations

import os
import re

from tg.runtime.gpu_mock import MockBuild, MockBuildError, build_key

MOCK_DIR = os.path.dirname(os.path.abspath(__file__))
SHIM = os.path.join(MOCK_DIR, "tg_amd_mock.h")
INCLUDE_DIR = os.path.join(os.path.dirname(MOCK_DIR), "include")
_KERNEL = re.compile(r"__attribute__\(\(global\)\)\s+void\s+__attribute__\(\(amdgpu_flat_work_group_size\(1,\s*(\d+)\)\)\)\s+(\w+)\s*\(")
# what needs the fibers: a barrier, or the WMMA's exchange of fragments through tiles its wave shares
_BARRIER_NAMES = ("__builtin_amdgcn_s_barrier", "__builtin_amdgcn_wmma_")


def kernel_signature(src: str) -> tuple[str, int]:
  """(name, max work-items per workgroup) of the one kernel in `src`."""
  m = _KERNEL.search(src)
  if m is None:
    raise MockBuildError("no `__attribute__((global)) void __attribute__((amdgpu_flat_work_group_size(1, N))) name(...)` kernel in the source")
  return m.group(2), int(m.group(1))


def mock_build(src: str) -> MockBuild:
  """Start the CPU build of one kernel; its result() is the shared object tg.runtime.gpu_mock.MockKernel loads."""
  name, max_threads = kernel_signature(src)
  return MockBuild(src, SHIM, f"TG_MOCK_EXPORT_LAUNCHER({name}, {max_threads}, tg_amd_mock::LIMITS, tg_mock::call)",
                   barriers=any(n in src for n in _BARRIER_NAMES), include_dirs=(INCLUDE_DIR,), what="an AMD kernel (AMD_MOCK=1)")


def mock_key() -> str:
  """What a mock binary depends on besides its source (host compiler, flags, headers), for the compile cache key."""
  headers = [os.path.join(INCLUDE_DIR, name) for name in sorted(os.listdir(INCLUDE_DIR))]
  return build_key(SHIM, *headers)
