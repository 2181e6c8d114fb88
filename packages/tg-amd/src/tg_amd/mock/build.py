"""Building a kernel's HIP source for the CPU (AMD_MOCK=1): the host C++ compiler, tg_amd_mock.h force-included
(which brings tg-core's tg_gpu_mock.h: the launch loop, fibers for barriers, parameter passing).

The build runs as a separate process while clang and lld make the code object from the same source, so mock mode
costs little more wall time than compiling for a GPU. TG_AMD_MOCK_CXX picks the compiler (default: g++, else clang++).
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile

import tg.runtime
from tg.settings import Setting

TG_AMD_MOCK_CXX = Setting("TG_AMD_MOCK_CXX", "", "the C++ compiler `AMD_MOCK=1` builds kernels with (unset: g++, else clang++, else c++)")
MOCK_DIR = os.path.dirname(os.path.abspath(__file__))
SHIM = os.path.join(MOCK_DIR, "tg_amd_mock.h")
INCLUDE_DIR = os.path.join(os.path.dirname(MOCK_DIR), "include")
GPU_MOCK_DIR = os.path.join(os.path.dirname(os.path.abspath(tg.runtime.__file__)), "gpu_mock")
# as tg-cuda's mock: -O0 (building dominates), no C runtime startup files (libc, libm and libgcc, for _Float16's
# conversions, are linked), no thread-safe statics (workgroup arrays are function statics), int overflow wraps as on
# the GPU (-fwrapv), no fused multiply-adds but the written ones (-ffp-contract=off, as clang is told)
FLAGS = ["-std=c++17", "-O0", "-shared", "-fPIC", "-nostdlib", "-fno-threadsafe-statics", "-fno-exceptions", "-fno-rtti", "-fwrapv",
         "-fno-math-errno", "-fvisibility=hidden", "-ffp-contract=off", "-w", "-x", "c++"]
LIBS = ["-lm", "-lc", "-lgcc"]
_KERNEL = re.compile(r"__attribute__\(\(global\)\)\s+void\s+__attribute__\(\(amdgpu_flat_work_group_size\(1,\s*(\d+)\)\)\)\s+(\w+)\s*\(")
# what needs the fibers: a barrier, or the WMMA's exchange of fragments through tiles its wave shares
_BARRIER_NAMES = ("__builtin_amdgcn_s_barrier", "__builtin_amdgcn_wmma_")


class MockBuildError(RuntimeError):
  pass


@functools.cache
def host_cxx() -> str | None:
  """The C++ compiler mock kernels are built with, or None."""
  for cxx in ([TG_AMD_MOCK_CXX.value] if TG_AMD_MOCK_CXX.value else ["g++", "clang++", "c++"]):
    if (path := shutil.which(cxx)) is not None:
      return path
  return None


@functools.cache
def host_cxx_version() -> str:
  cxx = host_cxx()
  if cxx is None:
    return "none"
  out = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=False).stdout
  return out.splitlines()[0] if out else "unknown"


def shim_files() -> str:
  """The text of every header a mock build includes: part of the compile cache key."""
  out = []
  for path in (SHIM, os.path.join(GPU_MOCK_DIR, "tg_gpu_mock.h")):
    with open(path) as f:
      out.append(f.read())
  return "".join(out)


def kernel_signature(src: str) -> tuple[str, int]:
  """(name, max work-items per workgroup) of the one kernel in `src`."""
  m = _KERNEL.search(src)
  if m is None:
    raise MockBuildError("no `__attribute__((global)) void __attribute__((amdgpu_flat_work_group_size(1, N))) name(...)` kernel in the source")
  return m.group(2), int(m.group(1))


class MockBuild:
  """One build, started at construction; `result()` waits for it and returns the shared object's bytes."""

  def __init__(self, src: str) -> None:
    cxx = host_cxx()
    if cxx is None:
      raise MockBuildError("AMD_MOCK=1 builds kernels for the CPU with a C++ compiler: install g++ (or set TG_AMD_MOCK_CXX)")
    name, max_threads = kernel_signature(src)
    self.src = src
    self.dir = tempfile.TemporaryDirectory(prefix="tg_amd_mock_")
    self.out = os.path.join(self.dir.name, "kernel.so")
    defines = ["-DTG_MOCK_BARRIERS"] if any(n in src for n in _BARRIER_NAMES) else []
    path = os.path.join(self.dir.name, "kernel.hip")
    with open(path, "w") as f:
      f.write(f"{src}\n\nTG_MOCK_EXPORT_LAUNCHER({name}, {max_threads}, tg_amd_mock::LIMITS, tg_mock::call)\n")
    cmd = [cxx, *FLAGS, *defines, "-I", INCLUDE_DIR, "-I", GPU_MOCK_DIR, "-include", SHIM, path, "-o", self.out, *LIBS]
    self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

  def result(self) -> bytes:
    try:
      _, err = self.proc.communicate()
      if self.proc.returncode != 0:
        raise MockBuildError(f"the CPU build of an AMD kernel (AMD_MOCK=1) failed:\n{err.decode(errors='replace')}\n--- source ---\n{self.src}")
      with open(self.out, "rb") as f:
        return f.read()
    finally:
      self.dir.cleanup()

  def cancel(self) -> None:
    """Stop a build whose result isn't wanted (the GPU side of the compile failed)."""
    if self.proc.poll() is None:
      self.proc.kill()
    self.proc.communicate()
    self.dir.cleanup()
