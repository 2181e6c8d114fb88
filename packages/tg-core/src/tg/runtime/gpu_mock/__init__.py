"""Running a GPU kernel's own source on the CPU: the shared part of the mock modes of GPU devices (CUDA_MOCK=1,
AMD_MOCK=1, METAL_MOCK=1), which check every kernel's numbers on a machine without the GPU.

A device's mock compiles the kernel's source, unchanged, with the host C++ compiler and a header of its own
force-included: that header defines the language's names (threadIdx, __shared__, threadgroup_barrier, ...) on top of
tg_gpu_mock.h (this directory), which runs the threads (fibers when the kernel has barriers; see the header).
The pieces here:

  MockBuild(src, shim, epilogue, ...)  starts the host compiler on one kernel in a background process (so it runs
                                       while the device's own compiler works on the same source); result() gives
                                       the shared object's bytes, which go into the device's binary and its cache
  MockKernel(name, so)                 loads such a shared object; launch(params, grid, block) runs the kernel with
                                       a GPU driver's argument layout (`params`: the address of an array of
                                       pointers, one to each argument's value) and raises MockLaunchError on launch
                                       dims the device's limits refuse
  build_key(*headers)                  the text a device's compile-cache key must cover: the host compiler's
                                       version, the flags, this header and the device's headers

TG_GPU_MOCK_CXX picks the host compiler (default: g++, else clang++, else c++).
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence

from tg.settings import Setting

TG_GPU_MOCK_CXX = Setting("TG_GPU_MOCK_CXX", "", "the C++ compiler GPU mock modes (CUDA_MOCK=1, ...) build kernels with "
                          "(unset: g++, else clang++, else c++)")
HEADER_DIR = os.path.dirname(os.path.abspath(__file__))
HEADER = os.path.join(HEADER_DIR, "tg_gpu_mock.h")
# Building dominates mock mode's cost (a test suite builds thousands of small kernels, each run a few times), so:
# -O0 (a quarter less build time than -O1) and -nostdlib (no C runtime startup files to link: these objects have no
# constructors; libc, libm and libgcc are still linked, but not libstdc++: -fno-threadsafe-statics, as a workgroup
# array of half is a function static that C++17 initializes "dynamically" under a guard). -fwrapv: int overflow wraps
# as on a GPU; -ffp-contract=off: no fused multiply-adds the GPU's compiler wasn't allowed either.
FLAGS = ("-std=c++17", "-O0", "-shared", "-fPIC", "-nostdlib", "-fno-threadsafe-statics", "-fno-exceptions", "-fno-rtti", "-fwrapv",
         "-fno-math-errno", "-fvisibility=hidden", "-ffp-contract=off", "-w", "-x", "c++")
LIBS = ("-lm", "-lc", "-lgcc")
# tg_mock_launch's status codes (tg_gpu_mock.h)
INVALID_VALUE, OUT_OF_RESOURCES = 1, 2


class MockBuildError(RuntimeError):
  pass


class MockLaunchError(RuntimeError):
  """A launch the device's limits refuse: `code` is INVALID_VALUE or OUT_OF_RESOURCES, the message says why."""

  def __init__(self, code: int, message: str) -> None:
    super().__init__(message)
    self.code = code


@functools.cache
def host_cxx() -> str | None:
  """The C++ compiler mock kernels are built with, or None."""
  for cxx in ([TG_GPU_MOCK_CXX.value] if TG_GPU_MOCK_CXX.value else ["g++", "clang++", "c++"]):
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


def build_key(*headers: str) -> str:
  """A short hash of everything a CPU build depends on besides the kernel's source: the host compiler, the flags,
  tg_gpu_mock.h and the device's `headers` (paths). A device puts it in its compile-cache key."""
  text = " ".join((host_cxx_version(), *FLAGS, *LIBS))
  for path in (HEADER, *headers):
    with open(path) as f:
      text += f.read()
  return hashlib.sha256(text.encode()).hexdigest()[:12]


class MockBuild:
  """One CPU build of one kernel, started at construction; `result()` waits for it and returns the shared object's
  bytes. `shim` is the device's mock header (force-included), `epilogue` the text appended after the source (its
  TG_MOCK_EXPORT_LAUNCHER line); `barriers` builds with fibers (the kernel, or a header it uses, waits at
  tg_mock::barrier()). `what` names the device in errors."""

  def __init__(self, src: str, shim: str, epilogue: str, *, barriers: bool, include_dirs: Sequence[str] = (), what: str = "a GPU kernel") -> None:
    cxx = host_cxx()
    if cxx is None:
      raise MockBuildError(f"the CPU build of {what} needs a C++ compiler: install g++ (or set TG_GPU_MOCK_CXX)")
    self.src, self.what = src, what
    self.dir = tempfile.TemporaryDirectory(prefix="tg_gpu_mock_")
    self.out = os.path.join(self.dir.name, "kernel.so")
    path = os.path.join(self.dir.name, "kernel.cc")
    with open(path, "w") as f:
      f.write(f"{src}\n\n{epilogue}\n")
    includes = [arg for d in (HEADER_DIR, *include_dirs) for arg in ("-I", d)]
    cmd = [cxx, *FLAGS, *(["-DTG_MOCK_BARRIERS"] if barriers else []), *includes, "-include", shim, path, "-o", self.out, *LIBS]
    self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

  def result(self) -> bytes:
    try:
      _, err = self.proc.communicate()
      if self.proc.returncode != 0:
        raise MockBuildError(f"the CPU build of {self.what} failed:\n{err.decode(errors='replace')}\n--- source ---\n{self.src}")
      with open(self.out, "rb") as f:
        return f.read()
    finally:
      self.dir.cleanup()

  def cancel(self) -> None:
    """Stop a build whose result isn't wanted (the device's own compile failed)."""
    if self.proc.poll() is None:
      self.proc.kill()
    self.proc.communicate()
    self.dir.cleanup()


MAX_PARAMS = 256


class MockKernel:
  """A kernel's CPU build, loaded."""

  def __init__(self, name: str, so: bytes) -> None:
    # dlopen needs a file; it is unlinked right after loading (the mapping stays valid)
    fd, path = tempfile.mkstemp(prefix="tg_gpu_mock_", suffix=".so")
    try:
      with os.fdopen(fd, "wb") as f:
        f.write(so)
      try:
        self.lib = ctypes.CDLL(path)
      except OSError as e:
        raise MockBuildError(f"the CPU build of kernel {name} does not load: {e}") from None
    finally:
      os.unlink(path)
    self.name = name
    self._launch = self.lib.tg_mock_launch
    self._launch.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint), ctypes.c_char_p, ctypes.c_ulong]
    self._launch.restype = ctypes.c_int
    sizes = (ctypes.c_uint * MAX_PARAMS)()
    n = self.lib.tg_mock_param_sizes(sizes, MAX_PARAMS)
    self.param_sizes: list[int] = list(sizes[:n])

  def launch(self, params: int, grid: Sequence[int], block: Sequence[int]) -> None:
    """Run the kernel on a grid of `grid` workgroups of `block` threads (x, y, z); `params` is the address of the
    argument pointer array."""
    err = ctypes.create_string_buffer(256)
    status = self._launch(params, (ctypes.c_uint * 6)(*grid, *block), err, len(err))
    if status != 0:
      raise MockLaunchError(status, err.value.decode(errors="replace"))
