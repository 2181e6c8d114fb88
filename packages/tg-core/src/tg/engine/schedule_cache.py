"""The schedule cache: a lazy graph built again with the same structure is scheduled once.

An eager training loop or a model called on new data builds the same graph on every call, only over other realized
buffers (and new unrealized bases, each with a new Buffer). What the scheduler decides (which bases get a buffer,
the kernels' ASTs, their order) depends only on that structure, so it is kept as a Plan keyed by the structure,
with every buffer named by the number of the base that owns it. A later graph of the same structure gets its
ScheduleItems from the Plan: no graph walks, no kernel building, the same AST objects (whose compiled kernels are
then found at once).

The structure (see `structure`) is each base's op, arg, dtype, device and shape and the views it reads its sources
through; for a realized base, its dtype, device and size and which other bases share its Buffer. A graph with
symbolic shapes (a decode step's position) has the structure of every binding of its Variables (a bound Variable
equals the same Variable bound to another value), and the values it is bound to now are collected beside it: the
plan's kernels are over unbound Variables, and each item gets the values of the Variables its kernel uses. Not cached:
an unbound Variable, one Variable bound to two values, a symbolic constant, and a symbolic plan with temporary buffers
(their sizes would be the first binding's). What depends on who holds a value from outside (an ASSIGN's old value, see
schedule._keep_old_values) is decided again on every call. SCHEDULE_CACHE=0 turns the cache off.
"""
from __future__ import annotations

import functools
import weakref
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from tg.dtype import DType
from tg.lazy import LazyBuffer
from tg.ops import LazyOp, MetaOps
from tg.settings import FUSE_REDUCE, NEST_ASSIGN, NEST_REDUCE, SCHEDULE_CACHE
from tg.shape.shapetracker import ShapeTracker
from tg.shape.symbolic import Node, Variable

MAX_PLANS = 4096  # distinct structures kept (the oldest goes first): a model has a few per step


@dataclass(frozen=True)
class Plan:
  items: tuple[tuple[LazyOp, tuple[int, ...], tuple[Variable, ...]], ...]  # each ScheduleItem's AST, the numbers of the bases
  # owning its buffers (a negative number -1-k: the k-th temporary, a buffer no base owns, e.g. a copy that keeps an old
  # value for a reader), and the Variables its kernel takes values of
  bases: tuple[int, ...]                              # the bases the schedule computes: their graphs are dropped
  olds: tuple[tuple[int, int, int | None, bool], ...]  # per ASSIGN: its item's position, the number of the old value's base and
                                                      # of the temporary that already holds a copy of it (or None), whether
                                                      # it writes through a view
  temps: tuple[tuple[str, int, DType], ...] = ()      # each temporary's device, size and dtype: a new Buffer per use

  @functools.cached_property
  def eager(self) -> tuple[LazyOp, tuple[int, ...]] | None:
    """The item (AST, buffer numbers) of the one kernel that is all this plan does, with no in-place write and no
    temporary (an eager op's plan: engine/realize.py runs it without a ScheduleItem), else None."""
    if len(self.items) != 1 or self.olds or self.temps or self.items[0][2] or self.items[0][0].op in (MetaOps.COPY, MetaOps.EMPTY):
      return None
    return self.items[0][:2]


_plans: dict[Hashable, Plan] = {}


def _bound(st: ShapeTracker, binds: dict[Variable, int]) -> bool:
  """Note the values of st's Variables in binds; False when one is unbound or bound to another value there."""
  for v in st.vars():
    if (val := v.val) is None or binds.setdefault(v, val) != val:
      return False
  return True


def structure(outs: Sequence[LazyBuffer]) -> tuple[Hashable, list[LazyBuffer], dict[Variable, int]] | None:
  """The structure of the graph that computes `outs`, its bases in the order the structure numbers them (the
  outputs' bases first, then each base's sources as they are first seen), and the values its Variables are bound to.
  None when it can't be cached."""
  if not SCHEDULE_CACHE.value:
    return None
  # this runs on every realize (an eager op is one), so it is written for speed: locals, no helper calls on concrete graphs
  number: dict[LazyBuffer, int] = {}
  nodes: list[LazyBuffer] = []
  buffers: dict[int, int] = {}  # id(Buffer) -> its number: bases that share a Buffer (an ASSIGN and its target)
  binds: dict[Variable, int] = {}
  for o in outs:
    if not o.st.concrete and not _bound(o.st, binds):
      return None
    if (ob := o._base or o) not in number:
      number[ob] = len(nodes)
      nodes.append(ob)
  parts: list[Any] = []
  append = parts.append
  for b in nodes:  # (grows as sources are first seen)
    if (op := b.op) is None:  # realized: a leaf
      buf = b.buffer
      append((b.dtype, b.device, buf.size, buffers.setdefault(id(buf), len(buffers))))
      continue
    if op is MetaOps.CONST and (part := b.__dict__.get("_structure")) is not None:  # (kept: see below)
      append(part)
      continue
    # which Buffer a node shares matters only for leaves and ASSIGNs (which write their target's): any other node made
    # a Buffer of its own when it was built, which nothing else can hold (schedule._keep_old_values gives a leaf a new one)
    shared = buffers.setdefault(id(b.buffer), len(buffers)) if op is MetaOps.ASSIGN else -1
    arg = b.arg
    if not b.st.concrete and not _bound(b.st, binds):
      return None
    if arg is None:  # (most ops: an elementwise op has no arg)
      pass
    elif type(arg) is float:  # a float constant by its bits: -0.0 == 0.0 and nan != nan, but a kernel must keep the one it was given
      arg = arg.hex()
    elif isinstance(arg, Node) or (isinstance(arg, ShapeTracker) and not arg.concrete and not _bound(arg, binds)):  # (an assign's view)
      return None
    srcs = []
    for s in b.srcs:
      sb = s._base or s
      if (n := number.get(sb)) is None:
        n = number[sb] = len(nodes)
        nodes.append(sb)
      st = s.st
      if not st.concrete and not _bound(st, binds):
        return None
      srcs.append((n, st))
    part = (op, arg, b.dtype, b.device, b.shape, b.forced_realize, shared, tuple(srcs))
    if op is MetaOps.CONST:  # a constant's part never changes (no sources, never forced), and a scalar operand's
      b._structure = part    # constant is one node read by every op with its value (LazyBuffer.operand)
    append(part)
  # the scheduler's switches are part of the key: a plan made under one doesn't hold under another
  config = (FUSE_REDUCE.value, NEST_REDUCE.value, NEST_ASSIGN.value)
  if len(outs) == 1:  # (an eager op: a comprehension is a function call)
    o = outs[0]
    return (tuple(parts), ((number[o._base or o], o.st),), config), nodes, binds
  return (tuple(parts), tuple([(number[o._base or o], o.st) for o in outs]), config), nodes, binds


_asts: dict[LazyOp, LazyOp] = {}


def _interned(ast: LazyOp) -> LazyOp:
  """One AST object for all equal ones in plans. The kernel cache finds a kernel by its AST: an equal AST that is
  another object is compared node by node (two same-shaped Adam updates in one step alternated, and each lookup walked
  the whole AST), the same object at once."""
  if (got := _asts.get(ast)) is None:
    if len(_asts) >= 4 * MAX_PLANS:
      _asts.clear()
    got = _asts[ast] = ast
  return got


def lookup(key: Hashable) -> Plan | None:
  return _plans.get(key)


def record(key: Hashable, nodes: list[LazyBuffer], items: Sequence[tuple[LazyOp, Sequence[Any], dict[Any, int]]],
           bases: Sequence[LazyBuffer], olds: Sequence[tuple[int, weakref.ref[LazyBuffer], Any, bool]]) -> None:
  """Keep the schedule just made for `nodes` (numbered as `structure` numbered them) as the Plan for `key`. `items`:
  each ScheduleItem's (ast, bufs, var_vals); `olds`: per ASSIGN, its item's position, its old value's base (weakly:
  nothing here may hold it once this returns, see schedule._keep_old_values), the Buffer of a copy of it or None, and
  whether the ASSIGN writes through a view."""
  owner: dict[int, int] = {}  # id(Buffer) -> the first base that owns it
  for n, b in enumerate(nodes):
    owner.setdefault(id(b.buffer), n)
  number = {b: n for n, b in enumerate(nodes)}
  temps: list[tuple[str, int, DType]] = []
  for _, bufs, _ in items:
    # a temporary is first written by an item of the schedule (any other buffer no base owns can't be named: no plan)
    if id(bufs[0]) not in owner:
      owner[id(bufs[0])] = -1 - len(temps)
      temps.append((bufs[0].device, bufs[0].size, bufs[0].dtype))
  if temps and any(var_vals for _, _, var_vals in items):
    return  # a temporary's size may depend on the Variables' values: made for this binding only
  try:
    plan = Plan(tuple((_interned(ast), tuple(owner[id(buf)] for buf in bufs), tuple(var_vals)) for ast, bufs, var_vals in items),
                tuple(number[b] for b in bases),
                tuple((pos, number[ref()], None if kept is None else owner[id(kept)], view) for pos, ref, kept, view in olds),  # type: ignore[index]
                tuple(temps))
  except KeyError:  # a buffer read that neither a base of the graph owns nor an earlier item writes: nothing to name it by, so no plan
    return
  if len(_plans) >= MAX_PLANS:
    del _plans[next(iter(_plans))]
  _plans[key] = plan
