"""ClangGraph: a TinyJit capture as C functions that call its kernels, compiled once.

Replaying N kernels then costs one call from Python instead of N: the buffers live in one pointer
table (inputs are swapped in before each call) and the symbolic sizes in one int table. A kernel big enough
to be split across CPU threads runs on its own, through its threaded runner (inside one C function it would
run on one thread, and the launch cost it would save is nothing next to its run time); each run of small
kernels between them is one C function.
"""
from __future__ import annotations

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
    defs: list[str] = []
    # the replay in order: ("batch", calls of small kernels) or ("kernel", index of a thread-split kernel)
    self.steps: list[tuple[str, Any]] = []
    for j, (ei, r) in enumerate(zip(jit_cache, runners)):
      if outer_symbol(r.p.function_name) in r.p.src:
        self.steps.append(("kernel", j))
        continue
      if r.p.src not in names:
        names[r.p.src] = f"k{len(names)}"
        defs.append(r.p.src.replace(f"void {r.p.function_name}(", f"static void {names[r.p.src]}(", 1))
      args = [f"bufs[{self.slots[id(b)]}]" for b in ei.bufs] + [f"vals[{self.vars.index(v)}]" for v in r.p.vars]
      if not self.steps or self.steps[-1][0] != "batch":
        self.steps.append(("batch", []))
      self.steps[-1][1].append(f"  {names[r.p.src]}({', '.join(args)});")
    batches = [calls for kind, calls in self.steps if kind == "batch"]
    src = "\n\n".join(defs) + "".join(f"\n\nvoid batch{n}(void** bufs, const int* vals) {{\n" + "\n".join(calls) + "\n}"
                                      for n, calls in enumerate(batches)) + "\n"
    self.prg = ClangProgram("batch", ClangCompiler().compile_cached(src))
    fns = iter([self.prg.batch_function(f"batch{n}") for n in range(len(batches))])
    self.steps = [(kind, next(fns) if kind == "batch" else arg) for kind, arg in self.steps]
    self.ffi = self.prg.ffi  # the tables must be cdata of the FFI that declares the batch functions
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
    for kind, step in self.steps:
      if kind == "batch":
        step(self.table, self.vals)
      else:
        ei = self.jit_cache[step]
        ei.prg(ei.bufs, var_vals)
    GlobalCounters.kernel_count += len(self.jit_cache)
