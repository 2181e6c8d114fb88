"""LLVMGraph: a TinyJit capture as LLVM functions that call its kernels, compiled once.

Replaying N kernels then costs one call from Python instead of N: the buffers live in one pointer table
(inputs are swapped in before each call) and the symbolic sizes in one int table. Each kernel's IR is
reused as it was rendered, renamed to an internal function. A kernel big enough to be split across CPU
threads runs on its own, through its threaded runner (inside a batch function it would run on one thread);
each run of small kernels between them is one batch function.
"""
from __future__ import annotations

import re
from typing import Any

from tg.device import Buffer
from tg.engine.realize import CompiledRunner, ExecItem
from tg.helpers import GlobalCounters
from tg.renderer.cpu import outer_symbol
from tg.shape.symbolic import Variable
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


class LLVMGraph:
  def __init__(self, jit_cache: list[ExecItem], input_replace: dict[tuple[int, int], int]) -> None:
    self.jit_cache, self.input_replace = jit_cache, input_replace
    runners: list[CompiledRunner] = [ei.prg for ei in jit_cache if isinstance(ei.prg, CompiledRunner)]
    assert len(runners) == len(jit_cache), "LLVMGraph replays compiled kernels only"
    # one table slot per distinct buffer; input slots are refilled on every call
    self.slots: dict[int, int] = {}
    for ei in jit_cache:
      for b in ei.bufs:
        self.slots.setdefault(id(b), len(self.slots))
    self.input_slots = {self.slots[id(jit_cache[j].bufs[k])]: (j, k) for (j, k) in input_replace}
    self.vars: list[Variable] = sorted({v for r in runners for v in r.p.vars}, key=lambda v: v.expr)
    # the replay in order: ("batch", its function) or ("kernel", index of a thread-split kernel)
    kinds = [("kernel" if outer_symbol(r.p.function_name) in r.p.src else "batch") for r in runners]
    self.prg = LLVMProgram("batch0", LLVMCompiler().compile_cached(self._module(runners, kinds)))
    self.steps: list[tuple[str, Any]] = []
    for j, kind in enumerate(kinds):
      if kind == "kernel":
        self.steps.append(("kernel", j))
      elif not self.steps or self.steps[-1][0] != "batch":
        addr = self.prg.engine.get_function_address(f"batch{sum(1 for k, _ in self.steps if k == 'batch')}")
        self.steps.append(("batch", ffi.cast("void(*)(void**, int*)", addr)))
    self.table = ffi.new("void*[]", max(1, len(self.slots)))
    self.vals = ffi.new("int[]", max(1, len(self.vars)))
    self.keep: dict[int, Any] = {}
    for ei in jit_cache:
      for b in ei.bufs:
        self._set(self.slots[id(b)], b)

  def _module(self, runners: list[CompiledRunner], kinds: list[str]) -> str:
    funcs: dict[str, tuple[str, int | None]] = {}  # each distinct kernel source once
    lines: list[str] = []
    shared: dict[str, None] = {}
    head = []  # every batch function starts by reading the tables
    for slot in range(len(self.slots)):
      head += [f"  %s{slot}.p = getelementptr ptr, ptr %bufs, i64 {slot}", f"  %s{slot} = load ptr, ptr %s{slot}.p"]
    for n in range(len(self.vars)):
      head += [f"  %v{n}.p = getelementptr i32, ptr %vals, i64 {n}", f"  %v{n} = load i32, ptr %v{n}.p"]
    calls: list[str] = []
    n_batches = 0
    for ei, r, kind in zip(self.jit_cache, runners, kinds):
      if kind == "kernel":
        if calls and calls[-1] != "}":  # close the batch function this kernel interrupts
          calls += ["  ret void", "}"]
        continue
      if not calls or calls[-1] == "}":
        calls += [f"define void @batch{n_batches}(ptr %bufs, ptr %vals) #0 {{", "entry:", *head]
        n_batches += 1
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
    if calls and calls[-1] != "}":
      calls += ["  ret void", "}"]
    if n_batches == 0:  # every kernel runs on its own: the module still needs the function the program loads
      calls += ["define void @batch0(ptr %bufs, ptr %vals) {", "entry:", "  ret void", "}"]
    return "\n".join([*lines, *calls, *shared]) + "\n"

  def _set(self, slot: int, b: Buffer) -> None:
    ptr = ffi.from_buffer(b.ensure_allocated()._buf)
    self.keep[slot] = ptr  # the table holds raw pointers: keep what they point into alive
    self.table[slot] = ffi.cast("void*", ptr)

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
