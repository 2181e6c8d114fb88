"""The linearizer: a UOp graph -> an ordered program with explicit loops.

Every uop is emitted once, after its sources, at the loop depth it needs: output loops (RANGE with
is_reduce False) open at the start and enclose everything; a REDUCE becomes an accumulator defined
before its loops, an ASSIGN inside them and an ENDRANGE after. Before a reduce's loops open, the parts
of its input that don't depend on them are emitted outside, so loop-invariant work is hoisted and
every value is defined in a scope that encloses all its uses (which C-family languages require).
A DEFINE_ACC's arg is its REDUCE: after the loops, uses of the REDUCE mean the accumulator.
"""
from __future__ import annotations

from tg.codegen.uops import UOp, UOps
from tg.dtype import dtypes
from tg.ops import BinaryOps


def _identity(op: BinaryOps, u: UOp) -> UOp:
  assert u.dtype is not None
  return UOp.const(u.dtype, {BinaryOps.ADD: 0, BinaryOps.MUL: 1}.get(op, dtypes.min(u.dtype)))


def linearize(sink: UOp) -> list[UOp]:
  program: list[UOp] = []
  done: set[UOp] = set()
  uses_range: dict[UOp, frozenset[UOp]] = {}

  def ranges_of(u: UOp) -> frozenset[UOp]:
    """The loops `u` depends on (a REDUCE doesn't depend on the loops it reduces over)."""
    if (r := uses_range.get(u)) is not None:
      return r
    r = frozenset().union(*(ranges_of(s) for s in u.src)) if u.src else frozenset()
    if u.op is UOps.RANGE:
      r = r | {u}
    if u.op is UOps.REDUCE:
      r = r - set(u.src[1:])
    uses_range[u] = r
    return r

  def emit(u: UOp) -> None:
    program.append(u)
    done.add(u)

  def visit(u: UOp) -> None:
    if u in done:
      return
    if u.op is UOps.REDUCE:
      val, loops = u.src[0], u.src[1:]
      # hoist what doesn't depend on this reduce's loops
      for x in val.toposort():
        if x not in done and not (ranges_of(x) & set(loops)) and x.op is not UOps.RANGE:
          visit(x)
      assert u.dtype is not None
      init = _identity(u.arg, u)
      visit(init)
      acc = UOp(UOps.DEFINE_ACC, u.dtype, (init,), u)
      emit(acc)
      for r in loops:
        visit(r)
      visit(val)
      update = UOp(UOps.ALU, u.dtype, (acc, val), u.arg)
      emit(update)
      emit(UOp(UOps.ASSIGN, u.dtype, (acc, update)))
      for r in reversed(loops):
        emit(UOp(UOps.ENDRANGE, None, (r,)))
      # after the loops, users of the REDUCE read the accumulator: renderers name the REDUCE after its DEFINE_ACC
      done.add(u)
      return
    for s in u.src:
      visit(s)
    emit(u)

  outer = sorted({x for x in sink.toposort() if x.op is UOps.RANGE and not x.arg[1]}, key=lambda x: x.arg[0])
  for u in sorted((x for x in sink.toposort() if x.op is UOps.DEFINE_GLOBAL), key=lambda x: x.arg):
    emit(u)  # kernel arguments first: buffers in order, then symbolic sizes by name
  for u in sorted((x for x in sink.toposort() if x.op is UOps.DEFINE_VAR), key=lambda x: x.arg.expr):
    emit(u)
  for r in outer:
    visit(r)
  visit(sink)
  program.pop()  # the SINK itself is not an instruction
  for r in reversed(outer):
    emit(UOp(UOps.ENDRANGE, None, (r,)))
  return program
