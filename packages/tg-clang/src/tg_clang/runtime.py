"""Loading and calling compiled kernels: through cffi (ABI mode), or in cross mode through the aarch64 harness."""
from __future__ import annotations

import functools
import time
from typing import Any

import cffi

from tg.renderer.cpu import outer_symbol
from tg.runtime.cpu import run_split, thread_budget
from tg.settings import CPU_THREADS
from tg_clang import pool
from tg_clang.dlopen import dlopen_bytes
from tg_clang.harness import Harness
from tg_clang.renderer import slice_symbol

# cffi imports its C parser (pycparser) at the first FFI() and builds it at the first cdef. Both happen here, at
# import, not in a kernel's first load: a Ctrl-C landing inside a first import leaves a half-made module behind
# (pycparser without c_ast), and every kernel loaded after it would fail.
cffi.FFI().cdef("void tg_clang_warmup(void);")

C_POOL = True  # split kernels run on the C thread pool (pool.py); False: on tg.runtime.cpu's Python threads, as LLVM's do

# a kernel's buffers are passed as `char[]` views of their memory (any FFI's char[] fits a `void*` parameter), made by
# the backend's from_buffer itself: FFI.from_buffer is a Python wrapper around it, and an eager op makes one per buffer
_chars_of = functools.partial(cffi.FFI()._backend.from_buffer, cffi.FFI().typeof("char[]"))


class ClangProgram:
  """One kernel from a shared object: `void name(T* data0, T* data1, ...)`."""

  def __init__(self, name: str, lib: bytes) -> None:
    self.name = name
    self.ffi = cffi.FFI()
    self.lib = dlopen_bytes(self.ffi, lib, "tg_clang_")
    self.fxn: Any = None

  def _load(self, n_bufs: int, n_vals: int) -> None:
    try:  # a kernel split across threads exports its outer loop's length (see renderer.py)
      self.ffi.cdef(f"extern int {outer_symbol(self.name)};")  # not const: cffi reads a variable from the library
      self.outer: int | None = int(getattr(self.lib, outer_symbol(self.name)))
    except (AttributeError, KeyError, OSError, NotImplementedError):  # not split: no such symbol
      self.outer = None
    n_ints = n_vals + (2 if self.outer is not None else 0)
    self.ffi.cdef(f"void {self.name}({', '.join(['void*'] * n_bufs + ['int'] * n_ints)});")
    self.fxn = getattr(self.lib, self.name)
    self.slice_fn: int | None = None  # the address of the split kernel's <name>_tg_slice, which the C pool calls
    if self.outer is not None:
      try:
        self.ffi.cdef(f"void {slice_symbol(self.name)}(void**, const int*, int, int);")
        self.slice_fn = int(self.ffi.cast("uintptr_t", self.ffi.addressof(self.lib, slice_symbol(self.name))))
      except (AttributeError, KeyError, OSError, NotImplementedError):  # a library rendered without one: Python's threads
        pass

  def __call__(self, *bufs: Any, global_size: tuple[int, ...] = (), local_size: tuple[int, ...] = (),
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    if self.fxn is None:
      self._load(len(bufs), len(vals))
    args = list(map(_chars_of, bufs))
    st = time.perf_counter() if wait else 0.0
    if self.outer is None:
      self.fxn(*args, *vals)
    elif C_POOL and self.slice_fn is not None and (n := min(CPU_THREADS.value, self.outer)) > 1 and thread_budget() is None:
      pool.run(self.slice_fn, args, vals, self.outer, n)  # threads of C: see pool.py
    else:
      run_split(functools.partial(self.fxn, *args, *vals), self.outer)  # cffi releases the GIL while C runs
    return time.perf_counter() - st if wait else None

  def batch_function(self, name: str) -> Any:
    """The library's batch function `void name(void** bufs, const int* vals)` (see graph.py)."""
    self.ffi.cdef(f"void {name}(void** bufs, const int* vals);")
    return getattr(self.lib, name)


class CrossProgram:
  """One kernel built for another architecture (CPU_TARGET=aarch64 here), run by the device's harness under qemu-user
  (tg_clang.harness): the renderer gave it `tg_entry(void** bufs, const int* vals)`, which calls the kernel, a split
  one over its whole outer loop (one call, one thread: emulation is for numbers, not speed)."""
  handle: tuple[int, int] | None = None  # (a class default: __del__ of one whose __init__ a Ctrl-C cut short finds it)

  def __init__(self, harness: Harness, name: str, lib: bytes) -> None:
    self.harness, self.name, self.lib = harness, name, lib
    self.handle = harness.load(lib, name)  # loaded now, so a bad object fails here, as dlopen does

  def __call__(self, *bufs: Any, global_size: tuple[int, ...] = (), local_size: tuple[int, ...] = (),
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    st = time.perf_counter()
    self.harness.run(self, bufs, vals)
    return time.perf_counter() - st if wait else None

  def __del__(self) -> None:
    if self.handle is not None:
      self.harness.free(self.handle)


class CrossPrograms:
  """The ProgramFactory of one CLANG instance in cross mode: its kernels share one harness, made with the first."""

  def __init__(self) -> None:
    self._harness: Harness | None = None

  @property
  def harness(self) -> Harness:
    if self._harness is None:
      self._harness = Harness()
    return self._harness

  def __call__(self, name: str, lib: bytes) -> CrossProgram:
    return CrossProgram(self.harness, name, lib)
