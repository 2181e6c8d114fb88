"""Building a kernel's CUDA C++ for the CPU (CUDA_MOCK=1): the host C++ compiler, tg_cuda_mock.h force-included.

The build runs as a separate process while NVRTC and ptxas work on the same source, so mock mode costs little
more wall time than compiling for a GPU. TG_CUDA_MOCK_CXX picks the compiler (default: g++, else clang++).
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile

from tg.settings import Setting

TG_CUDA_MOCK_CXX = Setting("TG_CUDA_MOCK_CXX", "", "the C++ compiler `CUDA_MOCK=1` builds kernels with (unset: g++, else clang++, else c++)")
MOCK_DIR = os.path.dirname(os.path.abspath(__file__))
SHIM = os.path.join(MOCK_DIR, "tg_cuda_mock.h")
INCLUDE_DIR = os.path.join(os.path.dirname(MOCK_DIR), "include")
# Building dominates mock mode's cost (a test suite builds thousands of small kernels, each run a few times), so:
# -O0 (a quarter less build time than -O1) and -nostdlib (no C runtime startup files to link: these objects have no
# constructors; libc, libm and libgcc are still linked, but not libstdc++: -fno-threadsafe-statics, as a __shared__
# array of half is a function static that C++17 initializes "dynamically" under a guard). -fwrapv: int overflow wraps
# as on the GPU; -ffp-contract=off: no fused multiply-adds, as NVRTC is told too (compiler.py).
FLAGS = ["-std=c++17", "-O0", "-shared", "-fPIC", "-nostdlib", "-fno-threadsafe-statics", "-fno-exceptions", "-fno-rtti", "-fwrapv",
         "-fno-math-errno", "-fvisibility=hidden", "-ffp-contract=off", "-w", "-x", "c++"]
LIBS = ["-lm", "-lc", "-lgcc"]
_KERNEL = re.compile(r"__global__\s+void\s+(?:__launch_bounds__\((\d+)\)\s+)?(\w+)\s*\(")


class MockBuildError(RuntimeError):
  pass


@functools.cache
def host_cxx() -> str | None:
  """The C++ compiler mock kernels are built with, or None."""
  for cxx in ([TG_CUDA_MOCK_CXX.value] if TG_CUDA_MOCK_CXX.value else ["g++", "clang++", "c++"]):
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


def kernel_signature(src: str) -> tuple[str, int]:
  """(name, max threads per block) of the one __global__ function in `src`."""
  m = _KERNEL.search(src)
  if m is None:
    raise MockBuildError("no `__global__ void name(...)` kernel in the source")
  return m.group(2), int(m.group(1)) if m.group(1) else 1024


class MockBuild:
  """One build, started at construction; `result()` waits for it and returns the shared object's bytes."""

  def __init__(self, src: str) -> None:
    cxx = host_cxx()
    if cxx is None:
      raise MockBuildError("CUDA_MOCK=1 builds kernels for the CPU with a C++ compiler: install g++ (or set TG_CUDA_MOCK_CXX)")
    name, max_threads = kernel_signature(src)
    self.src = src
    self.dir = tempfile.TemporaryDirectory(prefix="tg_cuda_mock_")
    self.out = os.path.join(self.dir.name, "kernel.so")
    # tensor-core kernels need the barriers too: the mock's mma is a warp-wide exchange through shared tiles (tg_mma.h)
    defines = ["-DTG_MOCK_BARRIERS"] if "__syncthreads" in src or "__tg_mma" in src else []
    path = os.path.join(self.dir.name, "kernel.cu")
    with open(path, "w") as f:
      f.write(f"{src}\n\nTG_MOCK_KERNEL({name}, {max_threads})\n")
    cmd = [cxx, *FLAGS, *defines, "-I", INCLUDE_DIR, "-include", SHIM, path, "-o", self.out, *LIBS]
    self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

  def result(self) -> bytes:
    try:
      _, err = self.proc.communicate()
      if self.proc.returncode != 0:
        raise MockBuildError(f"the CPU build of a CUDA kernel (CUDA_MOCK=1) failed:\n{err.decode(errors='replace')}\n--- source ---\n{self.src}")
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
