"""The CPU build of METAL_MOCK=1: a kernel's MSL built by the host C++ compiler on run/metal_stdlib (on tg-core's
tg.runtime.gpu_mock), to a shared object whose tg_mock_launch runs the kernel's threads on the CPU."""
from __future__ import annotations

import os
import re

from tg.runtime.gpu_mock import MockBuild, build_key
from tg_metal.mock.check import MOCK_DIR, mock_source

RUN_INCLUDE = os.path.join(MOCK_DIR, "run")
SHIM = os.path.join(RUN_INCLUDE, "metal_stdlib")
MAX_THREADS = 1024  # maxTotalThreadsPerThreadgroup of a pipeline (Apple GPUs: 1024)
_KERNEL = re.compile(r"\bkernel\s+void\s+(\w+)\s*\(")


def kernel_name(src: str) -> str:
  """The name of the one `kernel void` function in `src`."""
  if (m := _KERNEL.search(src)) is None:
    raise ValueError("no `kernel void name(...)` function in the MSL")
  return m.group(1)


def cpu_build(src: str) -> MockBuild:
  """Start the CPU build of `src` (MockBuild.result() waits for the shared object's bytes). Kernels that wait at a
  barrier, which the simdgroup matrix multiply does too, are built with fibers."""
  barriers = "threadgroup_barrier" in src or "simdgroup_multiply_accumulate" in src
  epilogue = f"TG_MOCK_EXPORT_LAUNCHER({kernel_name(src)}, {MAX_THREADS}, tg_metal_limits, tg_metal_call)"
  return MockBuild(mock_source(src), SHIM, epilogue, barriers=barriers, include_dirs=[RUN_INCLUDE], what="a Metal kernel (METAL_MOCK=1)")


def cpu_build_key() -> str:
  return build_key(SHIM)
