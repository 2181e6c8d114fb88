"""Running a split kernel's slices on threads of C (pool.c), not Python's: tg.runtime.cpu.run_split hands each slice
to a Python thread, which must wake up and take the GIL before it calls the kernel: 30-53 us per launch on a 2-core VM,
against ~1 us here when the pool's threads are still spinning from the kernel before (they spin 200 us, then sleep).

Each split kernel exports `<name>_tg_slice(void** bufs, const int* vals, int start, int end)` (renderer.py), one
signature the pool calls for every kernel. The pool is built with the device's compiler the first time a split kernel
runs (and cached on disk like a kernel). One kernel at a time uses it; a thread with a thread budget (CPU instances
side by side, tg.engine.streams) splits on its own Python workers instead (tg.runtime.cpu)."""
from __future__ import annotations

import os
import threading
from importlib import resources
from typing import Any

import cffi

from tg_clang.dlopen import dlopen_bytes

_ffi = cffi.FFI()
_ffi.cdef("int tg_pool_run(void* fn, void** bufs, const int* vals, int outer, int n);")
_lib: Any = None
_lock = threading.Lock()  # one job at a time (the C call releases the GIL, so other threads could come in)


def _reset_after_fork() -> None:
  global _lock
  _lock = threading.Lock()  # a forked child may have a lock another thread of the parent held


os.register_at_fork(after_in_child=_reset_after_fork)


def _load() -> Any:
  from tg_clang.compiler import ClangCompiler
  return dlopen_bytes(_ffi, ClangCompiler().compile_cached(resources.files("tg_clang").joinpath("pool.c").read_text()), "tg_clang_pool_")


def run(slice_fn: int, bufs: list[Any], vals: tuple[int, ...], outer: int, n: int) -> None:
  """Call slice_fn (the address of a `<name>_tg_slice`) over [0, outer) in n slices, the first on this thread. `bufs`
  are cffi views of the buffers (char[]), which the caller keeps alive."""
  global _lib
  arrays = (_ffi.new("void*[]", bufs), _ffi.new("int[]", list(vals)) if vals else _ffi.NULL)
  with _lock:
    if _lib is None:
      _lib = _load()
    _lib.tg_pool_run(_ffi.cast("void*", slice_fn), arrays[0], arrays[1], outer, n)
