"""LLVMProgram: a compiled kernel loaded from its object file into this process, called through cffi.

Each program gets its own MCJIT engine: kernels of different shapes can share a name, and one engine would
resolve both to whichever it loaded first. The engine owns the code; it is freed with the program.
"""
from __future__ import annotations

import functools
import time
from typing import Any

import cffi
import llvmlite.binding as llvm

from tg.interrupts import hold_sigint
from tg.renderer.cpu import outer_symbol
from tg.runtime.cpu import run_split
from tg_llvm.objfile import missing_symbols
from tg_llvm.target import host_target_machine

ffi = cffi.FFI()


class LLVMProgram:
  """One kernel: `void name(T* data0, ..., int var0, ...[, int tg_start, int tg_end])`."""

  def __init__(self, name: str, lib: bytes) -> None:
    self.name = name
    if missing := missing_symbols(lib):
      raise RuntimeError(f"kernel {name} calls {', '.join(missing)}, which this process doesn't provide: an LLVM renderer bug, please report it")
    with hold_sigint():  # as in LLVMCompiler.compile: llvmlite's ownership hand-offs must not be cut by a KeyboardInterrupt
      self.engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), host_target_machine())
      self.engine.add_object_file(llvm.ObjectFileRef.from_data(lib))
      self.engine.finalize_object()
    self.addr = self.engine.get_function_address(name)
    if self.addr == 0:
      raise RuntimeError(f"the compiled object has no function {name!r}")
    # a kernel split across threads exports its outer loop's length (see tg.renderer.cpu); 0: not split
    outer_addr = self.engine.get_global_value_address(outer_symbol(name))
    self.outer: int | None = int(ffi.cast("int*", outer_addr)[0]) if outer_addr else None
    self.fxn: Any = None

  def _load(self, n_bufs: int, n_vals: int) -> None:
    n_ints = n_vals + (2 if self.outer is not None else 0)
    self.fxn = ffi.cast(f"void(*)({', '.join(['void*'] * n_bufs + ['int'] * n_ints) or 'void'})", self.addr)

  def __call__(self, *bufs: Any, global_size: tuple[int, ...] = (), local_size: tuple[int, ...] = (),
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    if self.fxn is None:
      self._load(len(bufs), len(vals))
    args = [ffi.from_buffer(b) for b in bufs]
    st = time.perf_counter()
    if self.outer is None:
      self.fxn(*args, *vals)
    else:
      run_split(functools.partial(self.fxn, *args, *vals), self.outer)  # cffi releases the GIL while the kernel runs
    return time.perf_counter() - st if wait else None
