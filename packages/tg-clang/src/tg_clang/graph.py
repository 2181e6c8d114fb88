"""ClangGraph: a TinyJit capture as C batch functions that call its kernels, compiled once (see tg.runtime.graph)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tg.runtime.graph import BatchGraph
from tg_clang.compiler import ClangCompiler
from tg_clang.runtime import ClangProgram


class ClangGraph(BatchGraph):
  def compile_batches(self, batches: list[list[int]]) -> list[Callable[[Any, Any], None]]:
    names: dict[str, str] = {}  # each distinct kernel source once, renamed so equal names of different kernels can't clash
    defs, funcs = [], []
    for n, js in enumerate(batches):
      calls = []
      for j in js:
        r, ei = self.runners[j], self.jit_cache[j]
        if r.p.src not in names:
          names[r.p.src] = f"k{len(names)}"
          defs.append(r.p.src.replace(f"void {r.p.function_name}(", f"static void {names[r.p.src]}(", 1))
        args = [f"bufs[{self.slots[id(b)]}]" for b in ei.bufs] + [f"vals[{self.vars.index(v)}]" for v in r.p.vars]
        calls.append(f"  {names[r.p.src]}({', '.join(args)});")
      funcs.append(f"void batch{n}(void** bufs, const int* vals) {{\n" + "\n".join(calls) + "\n}")
    self.prg = ClangProgram("batch", ClangCompiler().compile_cached("\n\n".join(defs + funcs) + "\n"))
    self.ffi = self.prg.ffi  # the tables must be cdata of the FFI that declares the batch functions
    return [self.prg.batch_function(f"batch{n}") for n in range(len(batches))]
