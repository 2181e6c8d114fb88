"""Loading and calling compiled kernels through cffi (ABI mode)."""
from __future__ import annotations

import concurrent.futures
import functools
import os
import tempfile
import time
from typing import Any

import cffi

ffi = cffi.FFI()
CPU_THREADS = int(os.getenv("CPU_THREADS", os.cpu_count() or 1))
_pool: concurrent.futures.ThreadPoolExecutor | None = None


def _thread_pool() -> concurrent.futures.ThreadPoolExecutor:
  global _pool
  if _pool is None:
    _pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, CPU_THREADS - 1), thread_name_prefix="tg_clang")
  return _pool


class ClangProgram:
  """One kernel from a shared object: `void name(T* data0, T* data1, ...)`."""

  def __init__(self, name: str, lib: bytes) -> None:
    self.name = name
    # dlopen needs a file; it is unlinked right after loading (the mapping stays valid)
    fd, path = tempfile.mkstemp(prefix="tg_clang_", suffix=".so")
    try:
      with os.fdopen(fd, "wb") as f:
        f.write(lib)
      self.ffi = cffi.FFI()
      self.lib = self.ffi.dlopen(path)
    finally:
      os.unlink(path)
    self.fxn: Any = None

  def _load(self, n_bufs: int, n_vals: int) -> None:
    try:  # a kernel split across threads exports its outer loop's length (see renderer.py)
      self.ffi.cdef(f"extern int {self.name}_tg_outer;")  # not const: cffi reads a variable from the library
      self.outer: int | None = int(getattr(self.lib, f"{self.name}_tg_outer"))
    except (AttributeError, KeyError, OSError, NotImplementedError):  # not split: no such symbol
      self.outer = None
    n_ints = n_vals + (2 if self.outer is not None else 0)
    self.ffi.cdef(f"void {self.name}({', '.join(['void*'] * n_bufs + ['int'] * n_ints)});")
    self.fxn = getattr(self.lib, self.name)

  def __call__(self, *bufs: Any, global_size: tuple[int, ...] = (), local_size: tuple[int, ...] = (),
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    if self.fxn is None:
      self._load(len(bufs), len(vals))
    args = [self.ffi.from_buffer(b) for b in bufs]
    st = time.perf_counter()
    if self.outer is None:
      self.fxn(*args, *vals)
    else:
      # contiguous slices of the outer loop, one per thread; cffi releases the GIL while C runs
      n = min(CPU_THREADS, self.outer)
      cuts = [self.outer * k // n for k in range(n + 1)]
      futures = [_thread_pool().submit(functools.partial(self.fxn, *args, *vals, cuts[k], cuts[k + 1])) for k in range(1, n)]
      self.fxn(*args, *vals, cuts[0], cuts[1])
      for f in futures:
        f.result()
    return time.perf_counter() - st if wait else None

  def call_raw(self, table: Any, vals: Any) -> None:
    """Call a batch function `void name(void** bufs, const int* vals)` (see graph.py)."""
    if self.fxn is None:
      self.ffi.cdef(f"void {self.name}(void** bufs, const int* vals);")
      self.fxn = getattr(self.lib, self.name)
    self.fxn(table, vals)
