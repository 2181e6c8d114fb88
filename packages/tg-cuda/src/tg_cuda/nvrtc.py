"""NVRTC, CUDA's runtime compiler, from the `nvidia-cuda-nvrtc-cu12` wheel, loaded with cffi (ABI mode).

The wheel puts libnvrtc.so.12 and libnvrtc-builtins.so.12.x under site-packages/nvidia/cuda_nvrtc/lib; they are
found through the installed distribution's file list, so no CUDA toolkit or LD_LIBRARY_PATH is needed.
TG_NVRTC=/path/to/libnvrtc.so overrides the choice.
"""
from __future__ import annotations

import functools
import glob
import importlib.metadata
import importlib.util
import os
from typing import Any

import cffi

from tg.settings import Setting

NVRTC_DIST = "nvidia-cuda-nvrtc-cu12"
TG_NVRTC = Setting("TG_NVRTC", "", "the libnvrtc.so CUDA compiles with (unset: the one from the nvidia-cuda-nvrtc-cu12 wheel)",
                   read_once="when NVRTC is loaded")

ffi = cffi.FFI()
ffi.cdef("""
typedef int nvrtcResult;
typedef struct _nvrtcProgram *nvrtcProgram;
const char *nvrtcGetErrorString(nvrtcResult result);
nvrtcResult nvrtcVersion(int *major, int *minor);
nvrtcResult nvrtcCreateProgram(nvrtcProgram *prog, const char *src, const char *name, int numHeaders,
                               const char * const *headers, const char * const *includeNames);
nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog);
nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int numOptions, const char * const *options);
nvrtcResult nvrtcGetPTXSize(nvrtcProgram prog, size_t *ptxSizeRet);
nvrtcResult nvrtcGetPTX(nvrtcProgram prog, char *ptx);
nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t *cubinSizeRet);
nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char *cubin);
nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t *logSizeRet);
nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char *log);
""")


class NVRTCError(RuntimeError):
  pass


def _wheel_libraries() -> list[str]:
  """libnvrtc.so.* inside installed NVIDIA wheels: ours first, then any other in the `nvidia` namespace package."""
  found: list[str] = []
  try:
    for f in importlib.metadata.distribution(NVRTC_DIST).files or []:
      if os.path.basename(str(f)).startswith("libnvrtc.so"):
        found.append(str(f.locate()))
  except importlib.metadata.PackageNotFoundError:
    pass
  spec = importlib.util.find_spec("nvidia")
  for root in (spec.submodule_search_locations or []) if spec is not None else []:
    found += sorted(glob.glob(os.path.join(root, "*", "lib", "libnvrtc.so.*")))
  return found


def find_nvrtc() -> str | None:
  """The path of the libnvrtc to load, or None."""
  if (path := TG_NVRTC.value):
    return path
  return next(iter(_wheel_libraries()), None)


@functools.cache
def load_nvrtc() -> Any:
  """The NVRTC library (cffi lib object). Raises NVRTCError saying what to install when it can't be loaded."""
  path = find_nvrtc()
  if path is None:
    raise NVRTCError(f"NVRTC not found: install it with `pip install {NVRTC_DIST}` (a dependency of tg-cuda) or set TG_NVRTC")
  # libnvrtc dlopens its builtins library by soname; loading it first from the same folder makes that work
  # whatever the wheel's rpath says
  for builtins in glob.glob(os.path.join(os.path.dirname(path), "libnvrtc-builtins.so.*")):
    if ".alt." not in builtins:
      ffi.dlopen(builtins)
  try:
    return ffi.dlopen(path)
  except OSError as e:
    raise NVRTCError(f"NVRTC at {path} could not be loaded: {e}") from e


@functools.cache
def nvrtc_version() -> tuple[int, int]:
  lib = load_nvrtc()
  major, minor = ffi.new("int*"), ffi.new("int*")
  _check(lib.nvrtcVersion(major, minor), "nvrtcVersion")
  return major[0], minor[0]


def _check(status: int, what: str) -> None:
  if status != 0:
    raise NVRTCError(f"{what} failed: {ffi.string(load_nvrtc().nvrtcGetErrorString(status)).decode()}")


def _read(prog: Any, size_fn: Any, get_fn: Any) -> bytes:
  size = ffi.new("size_t*")
  _check(size_fn(prog, size), "reading NVRTC's output")
  buf = ffi.new("char[]", size[0])
  _check(get_fn(prog, buf), "reading NVRTC's output")
  return bytes(ffi.buffer(buf, size[0]))


_first_compile_done = False


def first_compile(virtual_arch: str) -> None:
  """Compile a trivial kernel, once per process. NVRTC's first compile in a process puts its own SIGINT handler in
  place for about 20 ms, and that handler calls exit(4) from inside the signal handler (where exit can deadlock in
  malloc: a hang). Doing that compile when the CUDA device opens moves the window out of the user's first realize:
  a Ctrl-C in a later compile is Python's KeyboardInterrupt, as anywhere else.
  `virtual_arch` is the device's own (compute_XX): a fixed old one may be gone from a newer NVRTC."""
  global _first_compile_done
  if not _first_compile_done:
    compile_cuda('extern "C" __global__ void tg_first_compile(float *a) { a[0] = 0.0f; }', virtual_arch, {})
    _first_compile_done = True


def compile_cuda(src: str, arch: str, headers: dict[str, str], options: tuple[str, ...] = ()) -> tuple[bytes, bytes]:
  """Compile CUDA C++ `src` for `arch`: "compute_80" gives PTX only, "sm_80" PTX and a cubin (NVRTC assembles it).
  `headers` are files the source may #include, by name. Returns (ptx without its trailing NUL, cubin or b"")."""
  lib = load_nvrtc()
  prog = ffi.new("nvrtcProgram*")
  names = [ffi.new("char[]", k.encode()) for k in headers]
  texts = [ffi.new("char[]", v.encode()) for v in headers.values()]
  _check(lib.nvrtcCreateProgram(prog, src.encode(), b"kernel.cu", len(headers), ffi.new("char*[]", texts), ffi.new("char*[]", names)),
         "nvrtcCreateProgram")
  try:
    opts = [ffi.new("char[]", o.encode()) for o in (f"--gpu-architecture={arch}", *options)]
    status = lib.nvrtcCompileProgram(prog[0], len(opts), ffi.new("char*[]", opts))
    if status != 0:
      log = _read(prog[0], lib.nvrtcGetProgramLogSize, lib.nvrtcGetProgramLog).rstrip(b"\0").decode(errors="replace")
      raise NVRTCError(f"NVRTC failed to compile a kernel for {arch}:\n{log}\n--- source ---\n{src}")
    ptx = _read(prog[0], lib.nvrtcGetPTXSize, lib.nvrtcGetPTX).rstrip(b"\0")
    cubin = _read(prog[0], lib.nvrtcGetCUBINSize, lib.nvrtcGetCUBIN) if arch.startswith("sm_") else b""
    return ptx, cubin
  finally:
    lib.nvrtcDestroyProgram(prog)
