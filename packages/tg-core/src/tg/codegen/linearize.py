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


class Linearizer:
  """The state of one linearization: the program so far, what is emitted (`done`), the loops each uop needs."""

  def __init__(self, sink: UOp, fuse_mulacc: bool) -> None:
    self.sink, self.fuse_mulacc = sink, fuse_mulacc
    self.program: list[UOp] = []
    self.done: set[UOp] = set()
    self._ranges: dict[UOp, frozenset[UOp]] = {}
    self.graph = sink.toposort()
    self.reduces = [x for x in self.graph if x.op is UOps.REDUCE]
    self.users = Counter(s for x in self.graph for s in x.src)

  def ranges_of(self, u: UOp) -> frozenset[UOp]:
    """The loops `u` depends on (a REDUCE doesn't depend on the loops it reduces over)."""
    if (r := self._ranges.get(u)) is not None:
      return r
    r = frozenset().union(*(self.ranges_of(s) for s in u.src)) if u.src else frozenset()
    if u.op is UOps.RANGE:
      r = r | {u}
    if u.op is UOps.REDUCE:
      r = r - set(u.src[1:])
    self._ranges[u] = r
    return r

  def emit(self, u: UOp) -> None:
    self.program.append(u)
    self.done.add(u)

  def visit(self, u: UOp) -> None:
    """Emit `u` after its sources; a REDUCE emits the loop nest it shares with the reduces over the same loops."""
    if u in self.done:
      return
    if u.op is UOps.REDUCE:
      self.visit_reduces(u.src[1:])
      return
    for s in u.src:
      self.visit(s)
    self.emit(u)

  # ---------- reduce loops ----------
  def visit_reduces(self, loops: tuple[UOp, ...]) -> None:
    """Every REDUCE over the same loops shares them: one loop nest updates all the accumulators, and the loads they
    have in common are done once per iteration (this is what makes UPCAST pay)."""
    group = [r for r in self.reduces if r.src[1:] == loops and r not in self.done]
    for r in group:  # hoist what needs no loop that isn't open yet (these, or another reduce's still to come)
      for x in r.src[0].toposort():
        if x not in self.done and x.op is not UOps.RANGE and self.ranges_of(x) <= self.done:
          self.visit(x)
    accs = [self.define_acc(r) for r in group]
    for lp in loops:
      self.visit(lp)
    terms, fused = self.split_terms(group)
    for r in group:
      for t in terms[r]:
        for x in (t.src[:2] if _accumulating_wmma(r) or t in fused else (t,)):
          self.visit(x)
    for r, acc in zip(group, accs):
      self.emit_update(r, acc, terms[r], fused)
    for lp in reversed(loops):
      self.emit(UOp(UOps.ENDRANGE, None, (lp,)))
    self.done.update(group)  # after the loops, a REDUCE's value is its accumulator

  def define_acc(self, r: UOp) -> UOp:
    """The accumulator of reduce `r`, defined (with its identity) before the loops."""
    init = _identity(r.arg, r)
    self.visit(init)
    acc = UOp(UOps.DEFINE_ACC, r.dtype, (init,), r)
    self.emit(acc)
    return acc

  def split_terms(self, group: list[UOp]) -> tuple[dict[UOp, list[UOp]], set[UOp]]:
    """The terms each reduce adds per iteration, and the products among them that become fused multiply-adds.

    The value a reduce adds in each iteration is often a chain of the same op (the lowerer combines unrolled elements
    so): it goes into the accumulator term by term, acc = ((acc + t0) + t1) + ..., so that each product term is one
    fused multiply-add and the terms need no sum of their own first. Only a link nothing else uses is split up; it
    and a product folded into a MULACC are marked done, so nothing emits them again later."""
    chains = {r: ([r.src[0]], []) if _accumulating_wmma(r) else _chain(r.src[0], r.arg, self.users, self.done) for r in group}
    terms = {r: ts for r, (ts, _) in chains.items()}
    fused = {t for r, ts in terms.items() if self.fuse_mulacc and r.arg is BinaryOps.ADD for t in ts
             if _product(t) is not None and self.users[t] == 1}
    self.done.update(fused, *(links for _, links in chains.values()))
    return terms, fused

  def emit_update(self, r: UOp, acc: UOp, terms: list[UOp], fused: set[UOp]) -> None:
    """acc = acc (op) t for each term t of reduce `r`, then the ASSIGN that closes the iteration."""
    update = acc
    for t in terms:
      if _accumulating_wmma(r):  # a sum of WMMAs accumulates in the WMMA itself: acc = A @ B + acc
        update = UOp(UOps.WMMA, r.dtype, (*t.src[:2], update), t.arg)
      elif t in fused:
        update = UOp(UOps.ALU, r.dtype, (*t.src, update), TernaryOps.MULACC)
      else:
        update = UOp(UOps.ALU, r.dtype, (update, t), r.arg)
      self.emit(update)
    self.emit(UOp(UOps.ASSIGN, r.dtype, (acc, update)))

  # ---------- the kernel ----------
  def emit_arguments(self, buffers: Iterable[UOp]) -> None:
    """Kernel arguments first: buffers in order, then symbolic sizes by name."""
    for u in sorted({x for x in self.graph if x.op is UOps.DEFINE_GLOBAL} | set(buffers), key=lambda x: x.arg):
      self.emit(u)
    for u in sorted((x for x in self.graph if x.op is UOps.DEFINE_VAR), key=lambda x: x.arg.expr):
      self.emit(u)

  def emit_blocks(self, blocks: dict[UOp, list[UOp]], outer: list[UOp]) -> None:
    """Each IF block with its stores: the IF's sources first, what several blocks need before the first of them."""
    for b in blocks:
      assert self.ranges_of(b) <= set(outer), "an IF block can't open inside a reduce loop"
      for x in (*b.src[1:], b.src[0]):  # the barriers in order, then the condition, right before the block
        self.visit(x)
    if len(blocks) > 1:  # what several blocks need comes first (a loop's body is emitted with its REDUCE, not alone)
      needs = Counter(x for sts in blocks.values() for x in set().union(*(st.toposort() for st in sts)))
      for x in self.graph:
        if needs[x] > 1 and x.op is not UOps.RANGE and self.ranges_of(x) <= self.done:
          self.visit(x)
    for b, sts in blocks.items():
      self.emit(b)
      for st in sts:
        self.visit(st)
      self.emit(UOp(UOps.ENDIF, None, (b,)))


def linearize(sink: UOp, fuse_mulacc: bool = False, buffers: Iterable[UOp] = ()) -> list[UOp]:
  """`fuse_mulacc`: a sum of products accumulates as acc = MULACC(a, b, acc) (Renderer.fused_mulacc). `buffers`: every
  buffer's DEFINE_GLOBAL, emitted even where folding left a buffer unread (a where on a constant condition): the kernel's
  arguments are the schedule item's buffers by position, so none may go missing from its signature."""
  lin = Linearizer(sink, fuse_mulacc)
  lin.emit_arguments(buffers)
  outer = sorted({x for x in lin.graph if x.op is UOps.RANGE and not x.arg[1]}, key=lambda x: x.arg[0])
  for r in outer:  # the output loops enclose everything
    lin.visit(r)
  blocks: dict[UOp, list[UOp]] = {}  # IF -> the stores in its block
  for st in sink.src:
    if st.src[-1].op is UOps.IF:
      blocks.setdefault(st.src[-1], []).append(st)
    else:
      lin.visit(st)
  lin.emit_blocks(blocks, outer)
  for r in reversed(outer):
    lin.emit(UOp(UOps.ENDRANGE, None, (r,)))
  return lin.program
