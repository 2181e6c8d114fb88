"""Loading and calling compiled kernels through cffi (ABI mode)."""
from __future__ import annotations

import os
import tempfile
import time
from typing import Any

import cffi

ffi = cffi.FFI()


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

  def __call__(self, *bufs: Any, global_size: tuple[int, ...] = (), local_size: tuple[int, ...] = (),
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    if self.fxn is None:
      self.ffi.cdef(f"void {self.name}({', '.join(['void*'] * len(bufs) + ['int'] * len(vals))});")
      self.fxn = getattr(self.lib, self.name)
    args = [self.ffi.from_buffer(b) for b in bufs]
    st = time.perf_counter()
    self.fxn(*args, *vals)
    return time.perf_counter() - st if wait else None

  def call_raw(self, table: Any, vals: Any) -> None:
    """Call a batch function `void name(void** bufs, const int* vals)` (see graph.py)."""
    if self.fxn is None:
      self.ffi.cdef(f"void {self.name}(void** bufs, const int* vals);")
      self.fxn = getattr(self.lib, self.name)
    self.fxn(table, vals)
