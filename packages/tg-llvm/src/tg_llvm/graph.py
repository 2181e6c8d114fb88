"""LLVMGraph: a TinyJit capture as LLVM batch functions that call its kernels, compiled once (see tg.runtime.graph).

Each kernel's IR is reused as it was rendered, renamed to an internal function.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from tg.renderer.cpu import outer_symbol
from tg.runtime.graph import BatchGraph
from tg_llvm.compiler import LLVMCompiler
from tg_llvm.runtime import LLVMProgram, ffi


def _as_internal(src: str, name: str, new: str) -> tuple[list[str], list[str], int | None]:
  """A kernel's IR as an internal function `@new`: (its lines, its module-level declarations, its split loop's length)."""
  body, shared, outer = [], [], None
  for line in src.splitlines():
    if line.startswith(("declare ", "attributes ")):
      shared.append(line)
    elif (m := re.fullmatch(rf"@\"?{re.escape(outer_symbol(name))}\"? = constant i32 (\d+)", line)) is not None:
      outer = int(m.group(1))
    elif line.startswith("define void @"):
      body.append(re.sub(r"^define void @(\"[^\"]*\"|[\w.]+)\(", f"define internal void @{new}(", line))
    else:
      body.append(line)
  return body, shared, outer


class LLVMGraph(BatchGraph):
  def compile_batches(self, batches: list[list[int]]) -> list[Callable[[Any, Any], None]]:
    self.prg = LLVMProgram("batch0", LLVMCompiler().compile_cached(self._module(batches)))
    self.ffi = ffi
    return [ffi.cast("void(*)(void**, int*)", self.prg.engine.get_function_address(f"batch{n}")) for n in range(len(batches))]

  def _module(self, batches: list[list[int]]) -> str:
    funcs: dict[str, tuple[str, int | None]] = {}  # each distinct kernel source once
    lines: list[str] = []
    shared: dict[str, None] = {}
    head = []  # every batch function starts by reading the tables
    for slot in range(len(self.slots)):
      head += [f"  %s{slot}.p = getelementptr ptr, ptr %bufs, i64 {slot}", f"  %s{slot} = load ptr, ptr %s{slot}.p"]
    for n in range(len(self.vars)):
      head += [f"  %v{n}.p = getelementptr i32, ptr %vals, i64 {n}", f"  %v{n} = load i32, ptr %v{n}.p"]
    calls: list[str] = []
    for n, js in enumerate(batches):
      calls += [f"define void @batch{n}(ptr %bufs, ptr %vals) #0 {{", "entry:", *head]
      for j in js:
        r, ei = self.runners[j], self.jit_cache[j]
        if r.p.src not in funcs:
          new = f"k{len(funcs)}"
          body, decls, outer = _as_internal(r.p.src, r.p.function_name, new)
          funcs[r.p.src] = (new, outer)
          lines += body
          shared.update(dict.fromkeys(decls))
        new, outer = funcs[r.p.src]
        args = [f"ptr %s{self.slots[id(b)]}" for b in ei.bufs] + [f"i32 %v{self.vars.index(v)}" for v in r.p.vars]
        args += [f"i32 0, i32 {outer}"] if outer is not None else []
        calls.append(f"  call void @{new}({', '.join(args)})")
      calls += ["  ret void", "}"]
    if not batches:  # every kernel runs on its own: the module still needs the function the program loads
      calls += ["define void @batch0(ptr %bufs, ptr %vals) {", "entry:", "  ret void", "}"]
    return "\n".join([*lines, *calls, *shared]) + "\n"
