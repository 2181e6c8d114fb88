"""BatchGraph: TinyJit replay for CPU devices, the device-independent half.

The captured kernels' buffers live in one pointer table (inputs are swapped in before each call) and the
symbolic sizes in one int table. Each run of small kernels becomes one native batch function
`void batch<n>(void** bufs, const int* vals)` that calls them in order, so N kernels cost one call from Python.
A kernel big enough to be split across CPU threads replays through its own threaded runner instead: inside a
batch function it would run on one thread, and the launch cost it would save is nothing next to its run time.
A device subclasses this and implements `compile_batches` (see tg_clang.graph, tg_llvm.graph).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tg.device import Buffer
from tg.engine.jit import GraphRunner
from tg.engine.realize import CompiledRunner, ExecItem, check_args
from tg.renderer.cpu import outer_symbol
from tg.shape.symbolic import Variable


class BatchGraph(GraphRunner):
  def __init__(self, jit_cache: list[ExecItem], input_replace: dict[tuple[int, int], int]) -> None:
    super().__init__(jit_cache, input_replace)
    self.runners: list[CompiledRunner] = [ei.prg for ei in jit_cache if isinstance(ei.prg, CompiledRunner)]
    assert len(self.runners) == len(jit_cache), f"{type(self).__name__} replays compiled kernels only"
    for r, ei in zip(self.runners, jit_cache):
      check_args(r.p, ei.bufs)  # kernel j's arguments are jit_cache[j].bufs, every one a parameter (tg.renderer.Program)
    self.slots: dict[int, int] = {}  # one table slot per distinct buffer (by identity)
    for ei in jit_cache:
      for b in ei.bufs:
        self.slots.setdefault(id(b), len(self.slots))
    self.input_slots = {self.slots[id(jit_cache[j].bufs[k])]: (j, k) for (j, k) in input_replace}
    self.vars: list[Variable] = sorted({v for r in self.runners for v in r.p.vars}, key=lambda v: v.expr)
    # the replay in order: ("batch", indices of small kernels) or ("kernel", index of a thread-split kernel)
    plan: list[tuple[str, Any]] = []
    for j, r in enumerate(self.runners):
      if outer_symbol(r.p.function_name) in r.p.src:
        plan.append(("kernel", j))
      elif plan and plan[-1][0] == "batch":
        plan[-1][1].append(j)
      else:
        plan.append(("batch", [j]))
    fns = iter(self.compile_batches([js for kind, js in plan if kind == "batch"]))
    self.steps: list[tuple[str, Any]] = [(kind, next(fns) if kind == "batch" else arg) for kind, arg in plan]
    self.table = self.ffi.new("void*[]", max(1, len(self.slots)))
    self.vals = self.ffi.new("int[]", max(1, len(self.vars)))
    self.keep: dict[int, Any] = {}
    for ei in jit_cache:
      for b in ei.bufs:
        self._set(self.slots[id(b)], b)

  ffi: Any  # the cffi FFI the batch functions are declared in (the tables are its cdata); set by compile_batches

  def compile_batches(self, batches: list[list[int]]) -> list[Callable[[Any, Any], None]]:
    """One native function `batch<n>(bufs, vals)` per list of kernel indices; kernel j's buffers are
    `bufs[self.slots[id(b)]]` for b in jit_cache[j].bufs and its symbolic sizes `vals[self.vars.index(v)]`."""
    raise NotImplementedError(type(self))

  def _set(self, slot: int, b: Buffer) -> None:
    ptr = self.ffi.from_buffer(b.ensure_allocated()._buf)
    self.keep[slot] = ptr  # the table holds raw pointers: keep what they point into alive
    self.table[slot] = self.ffi.cast("void*", ptr)

  def __call__(self, bufs: list[Buffer], var_vals: dict[Variable, int], wait: bool = False) -> float | None:
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
    return None
