"""The linearizer: a UOp graph -> an ordered program with explicit loops.

Every uop is emitted once, after its sources, at the loop depth it needs: output loops (RANGE with
is_reduce False) open at the start and enclose everything; a REDUCE becomes an accumulator defined
before its loops, an ASSIGN inside them and an ENDRANGE after. Before a reduce's loops open, the parts
of its input that don't depend on them are emitted outside, so loop-invariant work is hoisted and
every value is defined in a scope that encloses all its uses (which C-family languages require).
A DEFINE_ACC's arg is its REDUCE: after the loops, uses of the REDUCE mean the accumulator.

A STORE that references an IF goes in that IF's block (IF ... ENDIF, inside the output loops). Every other store and
the IF's own sources (its condition, the barriers it follows) are emitted first, so what is left for the block is
only what its stores need: a value also used outside exists before the block, and nothing defined in the block is
used after it. A value that several blocks need is computed before the first of them.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from tg.codegen.uops import UOp, UOps
from tg.dtype import dtypes
from tg.ops import BinaryOps, TernaryOps


def _identity(op: BinaryOps, u: UOp) -> UOp:
  assert u.dtype is not None
  return UOp.const(u.dtype, {BinaryOps.ADD: 0, BinaryOps.MUL: 1}.get(op, dtypes.min(u.dtype.scalar())))


def _accumulating_wmma(r: UOp) -> bool:
  """r sums WMMAs that start from a zero accumulator (what the lowerer builds for tensor cores)."""
  w = r.src[0]
  return r.arg is BinaryOps.ADD and w.op is UOps.WMMA and w.src[2].is_zero()


def _product(x: UOp) -> UOp | None:
  """x, when it is a float32/float64 MUL: adding it to an accumulator can be one fused multiply-add."""
  if x.op is UOps.ALU and x.arg is BinaryOps.MUL and x.dtype is not None and x.dtype.scalar() in (dtypes.float32, dtypes.float64):
    return x
  return None


def _chain(x: UOp, op: object, users: Counter[UOp], done: set[UOp]) -> tuple[list[UOp], list[UOp]]:
  """The operands (left to right) and the links of the tree of binary `op` ALUs rooted at x, the reduce's input. A
  link is an ALU that is not emitted yet and that has one user (the reduce, or the link above it)."""
  terms: list[UOp] = []
  links: list[UOp] = []
  def rec(u: UOp) -> None:
    if u.op is UOps.ALU and u.arg is op and len(u.src) == 2 and u not in done and users[u] == 1:
      links.append(u)
      rec(u.src[0])
      rec(u.src[1])
    else:
      terms.append(u)
  rec(x)
  return terms, links


def linearize(sink: UOp, fuse_mulacc: bool = False, buffers: Iterable[UOp] = ()) -> list[UOp]:
  """`fuse_mulacc`: a sum of products accumulates as acc = MULACC(a, b, acc) (Renderer.fused_mulacc). `buffers`: every
  buffer's DEFINE_GLOBAL, emitted even where folding left a buffer unread (a where on a constant condition): the kernel's
  arguments are the schedule item's buffers by position, so none may go missing from its signature."""
  program: list[UOp] = []
  done: set[UOp] = set()
  uses_range: dict[UOp, frozenset[UOp]] = {}
  graph = sink.toposort()
  reduces = [x for x in graph if x.op is UOps.REDUCE]
  users = Counter(s for x in graph for s in x.src)

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

  def visit_reduces(loops: tuple[UOp, ...]) -> None:
    # every REDUCE over the same loops shares them: one loop nest updates all the accumulators, and the
    # loads they have in common are done once per iteration (this is what makes UPCAST pay)
    group = [r for r in reduces if r.src[1:] == loops and r not in done]
    for r in group:  # hoist what needs no loop that isn't open yet (these, or another reduce's still to come)
      for x in r.src[0].toposort():
        if x not in done and x.op is not UOps.RANGE and ranges_of(x) <= done:
          visit(x)
    accs = []
    for r in group:
      init = _identity(r.arg, r)
      visit(init)
      acc = UOp(UOps.DEFINE_ACC, r.dtype, (init,), r)
      emit(acc)
      accs.append(acc)
    for lp in loops:
      visit(lp)
    # the value a reduce adds in each iteration is often a chain of the same op (the lowerer combines unrolled
    # elements so): it goes into the accumulator term by term, acc = ((acc + t0) + t1) + ..., so that each product
    # term is one fused multiply-add and the terms need no sum of their own first. Only a link nothing else uses is
    # split up; it and a product folded into a MULACC are done, so nothing emits them again later
    chains = {r: ([r.src[0]], []) if _accumulating_wmma(r) else _chain(r.src[0], r.arg, users, done) for r in group}
    terms = {r: ts for r, (ts, _) in chains.items()}
    fused = {t for r, ts in terms.items() if fuse_mulacc and r.arg is BinaryOps.ADD for t in ts if _product(t) is not None and users[t] == 1}
    done.update(fused, *(links for _, links in chains.values()))
    for r in group:
      for t in terms[r]:
        for x in (t.src[:2] if _accumulating_wmma(r) or t in fused else (t,)):
          visit(x)
    for r, acc in zip(group, accs):
      update = acc
      for t in terms[r]:
        if _accumulating_wmma(r):  # a sum of WMMAs accumulates in the WMMA itself: acc = A @ B + acc
          update = UOp(UOps.WMMA, r.dtype, (*t.src[:2], update), t.arg)
        elif t in fused:
          update = UOp(UOps.ALU, r.dtype, (*t.src, update), TernaryOps.MULACC)
        else:
          update = UOp(UOps.ALU, r.dtype, (update, t), r.arg)
        emit(update)
      emit(UOp(UOps.ASSIGN, r.dtype, (acc, update)))
    for lp in reversed(loops):
      emit(UOp(UOps.ENDRANGE, None, (lp,)))
    done.update(group)  # after the loops, a REDUCE's value is its accumulator

  def visit(u: UOp) -> None:
    if u in done:
      return
    if u.op is UOps.REDUCE:
      visit_reduces(u.src[1:])
      return
    for s in u.src:
      visit(s)
    emit(u)

  outer = sorted({x for x in graph if x.op is UOps.RANGE and not x.arg[1]}, key=lambda x: x.arg[0])
  for u in sorted({x for x in graph if x.op is UOps.DEFINE_GLOBAL} | set(buffers), key=lambda x: x.arg):
    emit(u)  # kernel arguments first: buffers in order, then symbolic sizes by name
  for u in sorted((x for x in graph if x.op is UOps.DEFINE_VAR), key=lambda x: x.arg.expr):
    emit(u)
  for r in outer:
    visit(r)
  blocks: dict[UOp, list[UOp]] = {}  # IF -> the stores in its block
  for st in sink.src:
    if st.src[-1].op is UOps.IF:
      blocks.setdefault(st.src[-1], []).append(st)
    else:
      visit(st)
  for b in blocks:
    assert ranges_of(b) <= set(outer), "an IF block can't open inside a reduce loop"
    for x in (*b.src[1:], b.src[0]):  # the barriers in order, then the condition, right before the block
      visit(x)
  if len(blocks) > 1:  # what several blocks need comes first (a loop's body is emitted with its REDUCE, not alone)
    needs = Counter(x for sts in blocks.values() for x in set().union(*(st.toposort() for st in sts)))
    for x in graph:
      if needs[x] > 1 and x.op is not UOps.RANGE and ranges_of(x) <= done:
        visit(x)
  for b, sts in blocks.items():
    emit(b)
    for st in sts:
      visit(st)
    emit(UOp(UOps.ENDIF, None, (b,)))
  for r in reversed(outer):
    emit(UOp(UOps.ENDRANGE, None, (r,)))
  return program
