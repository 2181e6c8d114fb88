"""Kernel: one kernel AST on its way to source for one renderer (lower -> rewrite -> linearize -> render).

Optimization actions (UPCAST, LOCAL, ...) will live here; this version lowers the AST as it is.
"""
from __future__ import annotations

from tg.codegen.linearize import linearize
from tg.codegen.lowerer import Lowerer
from tg.codegen.uops import UOp, UOps
from tg.helpers import DEBUG, prod, to_function_name
from tg.ops import BufferOps, LazyOp, ReduceOps
from tg.renderer import Program, Renderer
from tg.shape.symbolic import Node


class Kernel:
  def __init__(self, ast: LazyOp, renderer: Renderer) -> None:
    if ast.op is not BufferOps.STORE:
      raise ValueError(f"a kernel AST is rooted at a STORE, not {ast.op}")
    self.ast, self.renderer = ast, renderer
    self.lowerer = Lowerer(ast, renderer)
    self.full_shape = self.lowerer.full_shape

  @property
  def name(self) -> str:
    kind = "r" if any(op.op in ReduceOps for op in self.ast.lazyops()) else "E"
    dims = "_".join(str(s.render()) if isinstance(s, Node) else str(s) for s in self.full_shape)
    return to_function_name(f"{kind}_{dims}") if self.full_shape else f"{kind}_0"

  def linearize(self) -> list[UOp]:
    self.uops = linearize(self.lowerer.lower())
    if DEBUG >= 5:
      for i, u in enumerate(self.uops):
        print(f"{i:4d} {u.op!s:20s} {u.dtype!s:20s} {[self.uops.index(s) if s in self.uops else s.op for s in u.src]} {u.arg!r}")
    return self.uops

  def to_program(self) -> Program:
    uops = self.linearize()
    src = self.renderer.render(self.name, uops)
    if DEBUG >= 4:
      print(src)
    global_size = tuple(self.lowerer.global_size) if self.renderer.global_ids else ()
    mem = sum(op.arg.dtype.itemsize * op.arg.st.real_size() for op in self.ast.lazyops() if op.op is BufferOps.LOAD)
    mem += self.ast.arg.dtype.itemsize * prod(self.ast.arg.st.shape)
    # napkin math for DEBUG=2: one op per ALU/reduce node per point of the iteration space
    ops = prod(self.full_shape) * sum(1 for op in self.ast.lazyops() if op.op not in BufferOps)
    buf_count = len({u.arg for u in uops if u.op is UOps.DEFINE_GLOBAL})
    variables = tuple(u.arg for u in uops if u.op is UOps.DEFINE_VAR)
    return Program(self.name, src, self.renderer.device, global_size, (), variables, buf_count, ops, mem, uops)
