"""ClangGraph: a TinyJit capture as one C function that calls every kernel, compiled once.

Replaying N kernels then costs one call from Python instead of N: the buffers live in one pointer
table (inputs are swapped in before each call) and the symbolic sizes in one int table.
"""
from __future__ import annotations

import re
from typing import Any

from tg.device import Buffer
from tg.engine.realize import CompiledRunner, ExecItem
from tg.helpers import GlobalCounters
from tg.renderer.cpu import outer_symbol
from tg.shape.symbolic import Variable
from tg_clang.compiler import ClangCompiler
from tg_clang.runtime import ClangProgram


class ClangGraph:
  def __init__(self, jit_cache: list[ExecItem], input_replace: dict[tuple[int, int], int]) -> None:
    self.jit_cache, self.input_replace = jit_cache, input_replace
    runners: list[CompiledRunner] = [ei.prg for ei in jit_cache if isinstance(ei.prg, CompiledRunner)]
    assert len(runners) == len(jit_cache), "ClangGraph replays compiled kernels only"
    # one table slot per distinct buffer; input slots are refilled on every call
    self.slots: dict[int, int] = {}
    for ei in jit_cache:
      for b in ei.bufs:
        self.slots.setdefault(id(b), len(self.slots))
    self.input_slots = {self.slots[id(jit_cache[j].bufs[k])]: (j, k) for (j, k) in input_replace}
    self.vars: list[Variable] = sorted({v for r in runners for v in r.p.vars}, key=lambda v: v.expr)
    # each distinct kernel source once, renamed so equal names of different kernels can't clash
    names: dict[str, str] = {}
    defs, calls = [], []
    for ei, r in zip(jit_cache, runners):
      if r.p.src not in names:
        names[r.p.src] = f"k{len(names)}"
        defs.append(r.p.src.replace(f"void {r.p.function_name}(", f"static void {names[r.p.src]}(", 1)
                    .replace(f"const int {outer_symbol(r.p.function_name)}", f"static const int {outer_symbol(names[r.p.src])}", 1))
      args = [f"bufs[{self.slots[id(b)]}]" for b in ei.bufs] + [f"vals[{self.vars.index(v)}]" for v in r.p.vars]
      if (m := re.search(rf"const int {re.escape(outer_symbol(r.p.function_name))} = (\d+);", r.p.src)) is not None:
        args += ["0", m.group(1)]  # a kernel split for threads runs whole here: the batch is one thread
      calls.append(f"  {names[r.p.src]}({', '.join(args)});")
    src = "\n\n".join(defs) + "\n\nvoid batch(void** bufs, const int* vals) {\n" + "\n".join(calls) + "\n}\n"
    self.prg = ClangProgram("batch", ClangCompiler().compile_cached(src))
    self.ffi = self.prg.ffi  # the table must be cdata of the FFI that declares batch()
    self.table = self.ffi.new("void*[]", max(1, len(self.slots)))
    self.vals = self.ffi.new("int[]", max(1, len(self.vars)))
    self.keep: dict[int, Any] = {}
    for ei in jit_cache:
      for b in ei.bufs:
        self._set(self.slots[id(b)], b)

  def _set(self, slot: int, b: Buffer) -> None:
    ptr = self.ffi.from_buffer(b.ensure_allocated()._buf)
    self.keep[slot] = ptr  # the table holds raw pointers: keep what they point into alive
    self.table[slot] = self.ffi.cast("void*", ptr)

  def __call__(self, var_vals: dict[Variable, int]) -> None:
    for slot, (j, k) in self.input_slots.items():
      self._set(slot, self.jit_cache[j].bufs[k])
    for n, v in enumerate(self.vars):
      self.vals[n] = var_vals[v]
    self.prg.call_raw(self.table, self.vals)
    GlobalCounters.kernel_count += len(self.jit_cache)
