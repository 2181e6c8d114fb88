"""The scheduler: a lazy graph -> an ordered list of ScheduleItems, one kernel (or copy) each.

Which buffers must exist in memory:
  - the outputs asked for, and buffers already realized;
  - every reduction (a later kernel loads its result), CONTIGUOUS, COPY and ASSIGN;
  - an elementwise base read through a padded (masked) view, because values in the pad must be 0
    whatever the op computes there (log, exp, 1/x are not 0 at 0);
  - an elementwise base read through a broadcast (a stride-0 axis), which would otherwise be
    recomputed for every copy.
Everything else is elementwise and is inlined into its consumers: chains of elementwise ops become
one kernel, and elementwise ops feeding a reduction fuse into the reduction's kernel. Movement ops
are folded into the loads' ShapeTrackers.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tg.device import Buffer
from tg.helpers import prod
from tg.lazy import LazyBuffer
from tg.ops import BufferOps, ConstBuffer, LazyOp, MemBuffer, MetaOps, ReduceOps, UnaryOps
from tg.shape.shapetracker import ShapeTracker
from tg.shape.symbolic import Variable


@dataclass(frozen=True)
class ScheduleItem:
  ast: LazyOp                # a STORE-rooted kernel AST, or a MetaOps (COPY, EMPTY) op
  bufs: tuple[Buffer, ...]   # outputs first, then inputs in kernel argument order
  var_vals: dict[Variable, int] = field(default_factory=dict)  # values of the AST's symbolic sizes for this run

  @property
  def outputs(self) -> tuple[Buffer, ...]:
    return self.bufs[:1]

  @property
  def inputs(self) -> tuple[Buffer, ...]:
    return self.bufs[1:]


def _expands(st: ShapeTracker) -> bool:
  """Whether the tracker reads some element more than once (an expanded, stride-0 axis of size > 1)."""
  return any(st_ == 0 and s != 1 for v in st.views for s, st_ in zip(v.shape, v.strides))


def _needs_realize(outs: list[LazyBuffer]) -> list[LazyBuffer]:
  """Every unrealized base that gets a buffer, in an order where sources come before users."""
  realize: dict[LazyBuffer, None] = {}
  visited: set[LazyBuffer] = set()
  out_bases = {o.base for o in outs}

  def visit(x: LazyBuffer) -> None:
    b = x.base
    if b.realized is not None:
      return
    if x is not b and b.op is not MetaOps.CONST:
      if any(v.mask is not None for v in x.st.views):
        realize[b] = None  # unsafe pad: see module docstring
      elif _expands(x.st):
        realize[b] = None  # read through a broadcast: computing it inline would repeat the work per copy
    if b in visited:
      return
    visited.add(b)
    for s in b.srcs:
      visit(s)
      if b.op is MetaOps.COPY and s.base.realized is None:
        realize[s.base] = None  # a copy moves whole buffers
    if b in out_bases or b.forced_realize or isinstance(b.op, ReduceOps):
      realize[b] = None
  for o in outs:
    visit(o)
  # `realize` was filled in discovery order; put each base after the bases it reads
  order: dict[LazyBuffer, None] = {}

  def place(b: LazyBuffer, seen: set[LazyBuffer]) -> None:
    if b in seen:
      return
    seen.add(b)
    for s in b.srcs:
      place(s.base, seen)
    if b in realize:
      order[b] = None
  seen: set[LazyBuffer] = set()
  for b in realize:
    place(b, seen)
  return list(order)


class _KernelBuilder:
  """Builds the AST of the kernel that computes `out` (a base), inlining every unrealized elementwise source."""

  def __init__(self, out: LazyBuffer, realized: set[LazyBuffer]) -> None:
    self.out, self.realized = out, realized
    self.bufs: list[Buffer] = [out.buffer]
    self.buf_index: dict[LazyBuffer, int] = {}
    self.memo: dict[tuple[LazyBuffer, ShapeTracker | None], LazyOp] = {}
    self.var_vals: dict[Variable, int] = {}

  def unbound(self, st: ShapeTracker) -> ShapeTracker:
    """The kernel is built over unbound Variables, so one compiled kernel serves every value."""
    st, var_vals = st.unbind()
    self.var_vals.update(var_vals)
    return st

  def load(self, b: LazyBuffer, st: ShapeTracker) -> LazyOp:
    if b not in self.buf_index:
      # an ASSIGN reads its target through its own output buffer
      self.buf_index[b] = 0 if b.buffer is self.out.buffer else len(self.bufs)
      if self.buf_index[b] != 0:
        self.bufs.append(b.buffer)
    return LazyOp(BufferOps.LOAD, (), MemBuffer(self.buf_index[b], b.dtype, self.unbound(st)))

  def value(self, x: LazyBuffer, top: ShapeTracker | None) -> LazyOp:
    """The value of `x` at the kernel's index, where `top` maps the kernel's index to x's index."""
    key = (x, top)
    if (ret := self.memo.get(key)) is not None:
      return ret
    st = x.st + top if top is not None else x.st
    b = x.base
    if b is not self.out and (b.realized is not None or b in self.realized):
      ret = self.load(b, st)
    elif b.op is MetaOps.CONST:
      ret = LazyOp(BufferOps.CONST, (), ConstBuffer(b.arg, b.dtype, self.unbound(st)))
    elif b.op in (MetaOps.CONTIGUOUS, MetaOps.ASSIGN):
      ret = self.value(b.srcs[0], st)
    elif isinstance(b.op, ReduceOps):
      assert b is self.out and top is None, "a reduction is only computed by its own kernel"
      ret = LazyOp(b.op, (self.value(b.srcs[0], None),), b.arg)
    elif b.op in (UnaryOps.CAST, UnaryOps.BITCAST):
      ret = LazyOp(b.op, (self.value(b.srcs[0], st),), b.arg)
    else:
      assert b.op is not None
      ret = LazyOp(b.op, tuple(self.value(s, st) for s in b.srcs), b.arg)
    self.memo[key] = ret
    return ret

  def build(self) -> ScheduleItem:
    b = self.out
    val = self.value(b, None)
    ast = LazyOp(BufferOps.STORE, (val,), MemBuffer(0, b.dtype, self.unbound(ShapeTracker.from_shape(b.shape))))
    return ScheduleItem(ast, tuple(self.bufs), self.var_vals)


def create_schedule(outs: list[LazyBuffer]) -> list[ScheduleItem]:
  bases = _needs_realize(outs)
  realized = set(bases)
  items: dict[LazyBuffer, ScheduleItem] = {}
  reads: dict[LazyBuffer, set[LazyBuffer]] = {}  # which bases each item loads
  for b in bases:
    if prod(b.shape) == 0:
      continue  # nothing to compute: an empty buffer
    if b.op is MetaOps.COPY:
      items[b], reads[b] = ScheduleItem(LazyOp(MetaOps.COPY, (), b.buffer.nbytes), (b.buffer, b.srcs[0].base.buffer)), {b.srcs[0].base}
    elif b.op is MetaOps.EMPTY:
      items[b], reads[b] = ScheduleItem(LazyOp(MetaOps.EMPTY), (b.buffer,)), set()
    else:
      builder = _KernelBuilder(b, realized)
      items[b], reads[b] = builder.build(), set(builder.buf_index)
  schedule = _order(items, reads)
  for b in bases:  # the schedule now owns the work: drop the graph so memory is freed as it runs
    b.op, b.srcs = None, ()
  return schedule


def _order(items: dict[LazyBuffer, ScheduleItem], reads: dict[LazyBuffer, set[LazyBuffer]]) -> list[ScheduleItem]:
  """Items after the items whose outputs they read, and each ASSIGN after every item that reads the old value of
  the buffer it overwrites (in place, so those reads must happen first)."""
  deps: dict[LazyBuffer, set[LazyBuffer]] = {b: {r for r in rs if r in items} for b, rs in reads.items()}
  for a in items:
    if a.op is MetaOps.ASSIGN:
      old = a.srcs[1].base
      deps[a] |= {r for r, rs in reads.items() if old in rs and r is not a}
  done: dict[LazyBuffer, None] = {}

  def visit(b: LazyBuffer, path: set[LazyBuffer]) -> None:
    if b in done:
      return
    if b in path:
      raise RuntimeError("the schedule has a cycle: a buffer is overwritten (assign) while a value that depends on the new data reads the old")
    path.add(b)
    for d in sorted(deps[b], key=list(items).index):
      visit(d, path)
    path.discard(b)
    done[b] = None
  for b in items:
    visit(b, set())
  return [items[b] for b in done]
