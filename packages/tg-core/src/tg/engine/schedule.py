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

import functools
import itertools
import weakref
from collections.abc import Hashable
from dataclasses import dataclass, field

from tg.device import Buffer
from tg.dtype import dtypes
from tg.engine import graphviz, memory, packing, pending, schedule_cache
from tg.helpers import prod
from tg.interrupts import hold_sigint
from tg.lazy import LazyBuffer, add_reader, live_readers, pack_candidates
from tg.ops import BinaryOps, BufferOps, ConstBuffer, LazyOp, MemBuffer, MetaOps, ReduceOps, TernaryOps, UnaryOps
from tg.settings import FUSE_REDUCE, GRAPH, NEST_ASSIGN, NEST_REDUCE
from tg.shape.shapetracker import ShapeTracker
from tg.shape.symbolic import Variable


@dataclass(frozen=True)
class ScheduleItem:
  ast: LazyOp                # a kernel AST rooted at a STORE (or a SINK of STOREs: several outputs), or a COPY or EMPTY
  bufs: tuple[Buffer, ...]   # outputs first, then inputs in kernel argument order
  var_vals: dict[Variable, int] = field(default_factory=dict)  # values of the AST's symbolic sizes for this run

  @functools.cached_property  # (read several times per item as a schedule runs; it writes the instance's __dict__)
  def outputs(self) -> tuple[Buffer, ...]:
    return self.bufs[:len(self.ast.src) if self.ast.op is MetaOps.SINK else 1]

  @property
  def inputs(self) -> tuple[Buffer, ...]:
    return self.bufs[1:]


_NO_DATA = (MetaOps.CONST, MetaOps.IOTA)  # bases a kernel computes where it reads them: never a buffer of their own unless asked


def _expands(st: ShapeTracker) -> bool:
  """Whether the tracker reads some element more than once (an expanded, stride-0 axis of size > 1)."""
  return any(st_ == 0 and s != 1 for v in st.views for s, st_ in zip(v.shape, v.strides))


def _fusion_target(r: LazyBuffer, children: dict[LazyBuffer, list[tuple[LazyBuffer, LazyBuffer]]],
                   realize: dict[LazyBuffer, None]) -> LazyBuffer | None:
  """The kernel that can compute reduction `r` along with its elementwise users: follow the users, read element for
  element (same size, in order), up to the one that gets a buffer. The users may branch and meet again (relu's
  x < 0 ? 0 : x reads x twice) where every path ends in that one kernel. None when there is none."""
  target: LazyBuffer | None = None
  inlined, stack = {r}, [r]
  while stack:
    if not (users := children.get(stack.pop(), [])):
      return None
    for consumer, view in users:
      if not _fuses(r, consumer, view):
        return None
      if consumer.op is MetaOps.ASSIGN or consumer in realize:
        if target not in (None, consumer):
          return None  # two kernels would need the reduction
        target = consumer
      elif consumer not in inlined:  # an elementwise op computed in the target's kernel
        inlined.add(consumer)
        stack.append(consumer)
  return target


def _fuses(r: LazyBuffer, consumer: LazyBuffer, view: LazyBuffer) -> bool:
  """Whether `consumer`, reading `view` of reduction r's value, can be in r's kernel: an elementwise op of r's size
  reading it in order, or a whole assign of it (b.assign(r + b), one kernel as in tinygrad) unless r reads the buffer
  the assign overwrites (every output would read elements others already wrote)."""
  if not view.st.contiguous or view.size != r.size:
    return False
  if consumer.op is MetaOps.ASSIGN:
    return consumer.arg is None and view is consumer.srcs[0] and not _reads_buffer(r, consumer.buffer)
  return isinstance(consumer.op, (UnaryOps, BinaryOps, TernaryOps))


def _reads_buffer(r: LazyBuffer, buf: Buffer) -> bool:
  """Whether computing `r` reads `buf` (through its unrealized graph)."""
  stack, seen = [r], set()
  while stack:
    b = stack.pop().base
    if id(b) in seen:
      continue
    seen.add(id(b))
    if b.buffer is buf:
      return True
    if b.realized is None:
      stack.extend(b.srcs)
  return False


# The graph walks below are module functions, not recursive closures: a closure that calls itself is a reference cycle,
# which would keep every LazyBuffer it saw alive until the next gc pass, and the memory planner reuses the memory
# of LazyBuffers only once they are gone.

def _visit(x: LazyBuffer, realize: dict[LazyBuffer, None], visited: set[LazyBuffer],
           children: dict[LazyBuffer, list[tuple[LazyBuffer, LazyBuffer]]], out_bases: set[LazyBuffer]) -> None:
  b = x.base
  if b.realized is not None:
    return
  if x is not b and b.op not in _NO_DATA:
    if any(v.mask is not None for v in x.st.views):
      realize[b] = None  # unsafe pad: see module docstring
    elif _expands(x.st) and not _cast_of_loaded(b) and not _index_math(b):
      realize[b] = None  # read through a broadcast: computing it inline would repeat the work per copy
  if b in visited:
    return
  visited.add(b)
  for s in b.srcs:
    _visit(s, realize, visited, children, out_bases)
    children.setdefault(s.base, []).append((b, s))
    if b.op is MetaOps.COPY and s.base.realized is None:
      realize[s.base] = None  # a copy moves whole buffers
  if b in out_bases or b.forced_realize:
    realize[b] = None


def _cast_of_loaded(b: LazyBuffer) -> bool:
  """Casts of a realized (or empty: Tensor.empty) buffer or a constant: read through a broadcast they cost a convert per copy, less than a
  buffer of their own would (a half matmul's operands, cast to float32 for its products, were copied out whole first)."""
  while b.op in (UnaryOps.CAST, UnaryOps.BITCAST):
    b = b.srcs[0].base
  return b.realized is not None or b.op in (MetaOps.CONST, MetaOps.IOTA, MetaOps.EMPTY)


MAX_INDEX_MATH = 24  # nodes: an arange and a compare with it are 5-10; a hash (Tensor.rand's) is far more


def _index_math(b: LazyBuffer) -> bool:
  """Whether b is a little integer arithmetic (ints and bools only, at most MAX_INDEX_MATH elementwise nodes) over
  positions, constants and buffers: an arange with a step, a causal mask, a tensor index's one-hot mask. Read through
  a broadcast, such a value is computed again in each copy rather than stored:
  - a tensor index's mask, stored, was (indices x axis) bools (15 GB to index an axis of 2^31 elements); computed in
    the kernel that sums over it, the sum is one load at the index (codegen/one_hot_select.py: GPT-2's embedding of
    128 tokens went from 5 s to 0.3 ms);
  - one computed from positions alone is a kernel of its own saved."""
  stack, seen = [b], set()
  while stack:
    n = stack.pop()
    if n.op in _NO_DATA or id(n) in seen:
      continue
    if n.realized is not None or isinstance(n.op, ReduceOps):  # (a reduction gets a buffer of its own whatever this says)
      continue
    if not isinstance(n.op, (UnaryOps, BinaryOps, TernaryOps)) or not (n.dtype is dtypes.bool or dtypes.is_int(n.dtype)):
      return False
    seen.add(id(n))
    if len(seen) > MAX_INDEX_MATH:
      return False
    stack.extend(s.base for s in n.srcs)
  return True


def _place(b: LazyBuffer, seen: set[LazyBuffer], realize: dict[LazyBuffer, None], order: dict[LazyBuffer, None]) -> None:
  if b in seen:
    return
  seen.add(b)
  for s in b.srcs:
    _place(s.base, seen, realize, order)
  if b in realize:
    order[b] = None


def _needs_realize(outs: list[LazyBuffer]) -> tuple[list[LazyBuffer], dict[LazyBuffer, LazyBuffer], dict[LazyBuffer, LazyBuffer]]:
  """Every unrealized base that gets a buffer, in an order where sources come before users; the reductions fused
  into the kernel of an elementwise user; and the reductions computed in the kernel of another (inner -> outer)."""
  realize: dict[LazyBuffer, None] = {}
  visited: set[LazyBuffer] = set()
  out_bases = {o.base for o in outs}
  children: dict[LazyBuffer, list[tuple[LazyBuffer, LazyBuffer]]] = {}  # base -> (consumer base, the view it reads)
  fused: dict[LazyBuffer, LazyBuffer] = {}  # kernel base -> the reduction it computes too
  for o in outs:
    _visit(o, realize, visited, children, out_bases)
  # a reduction gets its own buffer, unless its one consumer is an elementwise op of the reduction's shape
  # that has a kernel anyway: then that kernel computes the reduction and the op in one (e.g. conv + bias + relu)
  lone: list[LazyBuffer] = []  # reductions that got a kernel of their own, not being in realize already
  for b in [b for b in visited if isinstance(b.op, ReduceOps)]:
    if b in realize or not FUSE_REDUCE.value or (k := _fusion_target(b, children, realize)) is None or k in fused:
      if b not in realize and FUSE_REDUCE.value:
        lone.append(b)
      realize[b] = None
    else:
      fused[k] = b
  siblings = _assign_siblings(lone, children, realize, fused)
  # `realize` was filled in discovery order; put each base after the bases it reads
  order: dict[LazyBuffer, None] = {}
  seen: set[LazyBuffer] = set()
  for b in realize:
    _place(b, seen, realize, order)
  nested = {**_nest_reductions(realize, fused), **siblings}
  nested.update(_nest_assigns(realize, fused, nested, children))
  return list(order), fused, nested


def _assign_chain(r: LazyBuffer, consumer: LazyBuffer, view: LazyBuffer, children: dict[LazyBuffer, list[tuple[LazyBuffer, LazyBuffer]]],
                  realize: dict[LazyBuffer, None]) -> LazyBuffer | None:
  """The whole assign that takes `r`'s value through `consumer` and single-user elementwise ops read in order, or None."""
  while True:
    if consumer.op is MetaOps.ASSIGN and consumer.arg is None and view is consumer.srcs[0] and view.st.contiguous and view.size == r.size:
      return consumer
    if not isinstance(consumer.op, (UnaryOps, BinaryOps, TernaryOps)) or not view.st.contiguous or view.size != r.size or consumer in realize:
      return None
    if len(users := children.get(consumer, [])) != 1:
      return None
    consumer, view = users[0]


def _assign_siblings(lone: list[LazyBuffer], children: dict[LazyBuffer, list[tuple[LazyBuffer, LazyBuffer]]], realize: dict[LazyBuffer, None],
                     fused: dict[LazyBuffer, LazyBuffer]) -> dict[LazyBuffer, LazyBuffer]:
  """Reductions whose every user ends in a whole assign of its value (b.assign(r + b); c.assign(r + c)): one kernel
  computes the reduction and stores every assign, as tinygrad's multi-output kernels do. Returns each further assign ->
  the first one, whose kernel (in `fused`) computes it. Not when the reduction or one assign reads a buffer another
  assign of the group overwrites, or one needs another's result."""
  out: dict[LazyBuffer, LazyBuffer] = {}
  for r in lone:
    group = [_assign_chain(r, c, v, children, realize) for c, v in children.get(r, [])]
    if len(group) < 2 or any(k is None for k in group) or len({id(k) for k in group}) != len(group):
      continue
    ks: list[LazyBuffer] = group  # type: ignore[assignment]
    if any(k in fused or k in out or k in out.values() for k in ks) or any(_reads_buffer(r, k.buffer) for k in ks):
      continue
    if any(_reads_buffer(k.srcs[0], o.buffer) for k in ks for o in ks if o is not k):
      continue
    del realize[r]
    memo: dict[LazyBuffer, set[LazyBuffer]] = {}
    if any(o in _reach(k, realize, memo) for k in ks for o in ks if o is not k):
      realize[r] = None
      continue
    fused[ks[0]] = r
    out.update({k: ks[0] for k in ks[1:]})
  return out


def _nest_reductions(realize: dict[LazyBuffer, None], fused: dict[LazyBuffer, LazyBuffer]) -> dict[LazyBuffer, LazyBuffer]:
  """Reductions computed inside another reduction's kernel: inner -> outer.

  When a reduction reads another one over the same loops through a broadcast along the reduced axes (softmax's sum
  of exp(x - max), a variance's sum of (x - mean)^2), the outer kernel computes the inner one first, in loops of
  its own, and stores it as a second output: one kernel instead of two. The inner one may be a reduction followed
  by elementwise ops of its shape (mean = sum * 1/n). One level deep: an outer is not nested, an inner nests nothing."""
  if not NEST_REDUCE.value or any(b.op is MetaOps.ASSIGN for b in realize):
    # an in-place write orders every reader of the old value before it, an order the data edges below don't
    # show: kernels merged across it could need to run both before and after it
    return {}
  nested: dict[LazyBuffer, LazyBuffer] = {}
  reach: dict[LazyBuffer, set[LazyBuffer]] = {}
  direct: dict[LazyBuffer, set[LazyBuffer]] = {}  # (_acyclic's memo)
  # (the base whose kernel computes a reduction, the reduction): itself, or the elementwise user it is fused into
  kernels = [(b, b if isinstance(b.op, ReduceOps) else fused[b]) for b in realize if isinstance(b.op, ReduceOps) or b in fused]
  for kernel, outer in kernels:
    if kernel in nested or kernel in nested.values() or outer.realized is not None:
      continue
    full = outer.srcs[0].shape
    found: dict[LazyBuffer, bool] = {}  # candidate inner -> every read of it fits
    stack, seen = [outer.srcs[0]], set()
    while stack:
      x = stack.pop()
      if id(x) in seen:
        continue
      seen.add(id(x))
      b = x.base
      if b.realized is not None or b.op in _NO_DATA:
        continue
      if b in realize:
        reduce = b if isinstance(b.op, ReduceOps) else fused.get(b)
        fits = reduce is not None and reduce.arg == outer.arg and reduce.srcs[0].shape == full and b.shape == outer.shape and \
          x.st == ShapeTracker.from_shape(b.shape).expand(full)
        found[b] = found.get(b, True) and fits
        continue
      if x is not b or b.shape != full or not isinstance(b.op, (UnaryOps, BinaryOps, TernaryOps)):
        continue  # only follow values inlined element for element
      stack.extend(b.srcs)
    group = {kernel}
    for inner, ok in found.items():
      if not ok or inner in group or inner in nested or inner in nested.values() or not _joins(group, inner, realize, reach):
        continue
      if any(inner in _reach(m, realize, reach) for m in group if m is not kernel):
        continue  # only the outer reduction reads it (two levels of nesting are not built)
      nested[inner] = kernel
      if _acyclic(realize, nested, direct):
        group.add(inner)
      else:
        del nested[inner]
  # siblings: another reduction over the same input shape and axes that neither kernel depends on shares the loops
  for kernel, outer in kernels:
    for other, r in kernels:
      if other is kernel or other in nested or other in nested.values() or kernel in nested or r.realized is not None:
        continue
      if r.arg != outer.arg or r.srcs[0].shape != outer.srcs[0].shape or not (other.shape == r.shape == outer.shape) or r.device != outer.device:
        continue  # (a kernel runs on one device: the parts of a sharded reduction are never siblings)
      group = {kernel, *(i for i, k in nested.items() if k is kernel)}
      if other not in _needs(group, realize, reach) and _joins(group, other, realize, reach):
        nested[other] = kernel
        if not _acyclic(realize, nested, direct):
          del nested[other]
  return nested


def _nest_assigns(realize: dict[LazyBuffer, None], fused: dict[LazyBuffer, LazyBuffer], nested: dict[LazyBuffer, LazyBuffer],
                  children: dict[LazyBuffer, list[tuple[LazyBuffer, LazyBuffer]]]) -> dict[LazyBuffer, LazyBuffer]:
  """Whole elementwise assigns computed in the kernel of another whole elementwise assign that reads their new values
  element for element: inner -> outer. An optimizer step is the case: Adam's m.assign(b1 * m + (1 - b1) * g) and
  v.assign(...) are read by p.assign(p - lr * m / (v.sqrt() + eps)), so p's kernel computes the new m and v itself
  (inlined, as any elementwise source) and stores them too: one kernel of three outputs instead of three kernels, with
  m and v read and written once.

  Each element is then read and written by the same iteration, so nothing may read a written buffer at another element:
  every read of the inner's new value, and of any buffer the group overwrites, is element for element. The inner's old
  value has no reader outside its own assign (else that reader would have to run before the whole group). One level
  deep, and only while the kernels stay acyclic, counting the in-place writes: a kernel that reads the old value of a
  buffer the group overwrites runs before the group's kernel, so it may not need the group's results. The inner reads
  nothing that another assign of the schedule overwrites: its reads happen when the outer's kernel runs, later than its
  own kernel would have."""
  if not NEST_ASSIGN.value:
    return {}
  out: dict[LazyBuffer, LazyBuffer] = {}
  reach: dict[LazyBuffer, set[LazyBuffer]] = {}
  direct: dict[LazyBuffer, set[LazyBuffer]] = {}  # (_acyclic's memo)
  taken = set(nested) | set(nested.values())
  overwritten: dict[Buffer, list[LazyBuffer]] = {}  # buffer -> the assigns of this schedule that write it
  for b in realize:
    if b.op is MetaOps.ASSIGN:
      overwritten.setdefault(b.buffer, []).append(b)
  def plain(b: LazyBuffer) -> bool:  # a whole assign whose kernel is elementwise
    return b.op is MetaOps.ASSIGN and b.arg is None and b not in fused and b not in taken
  for k in [b for b in realize if plain(b)]:
    if k in out:
      continue
    inners: dict[LazyBuffer, bool] = {}  # assign read by k's value -> every read of it is element for element
    if not _inlined_reads(k.srcs[0], k, realize, inners) or not inners:
      continue
    group = {k}
    for a, in_order in inners.items():
      if not in_order or not plain(a) or a in out or a.shape != k.shape or a.device != k.device:
        continue
      old = a.srcs[1].base
      readers: dict[LazyBuffer, bool] = {}
      loaded: set[Buffer] = set()
      if any(c is not a and not _inside(c, a, realize) for c, _ in children.get(old, [])) or \
         not _inlined_reads(a.srcs[0], a, realize, readers, written={k.buffer, *(g.buffer for g in group)}, loaded=loaded):
        continue
      # a's reads move to k's kernel, after everything k needs: none may be of a buffer another assign overwrites
      # (it would be read after that write, or the schedule would need k's kernel both before and after it)
      if any(w is not a and w not in group for buf in loaded for w in overwritten.get(buf, ())):
        continue
      if not _joins(group, a, realize, reach) or any(a in _reach(m, realize, reach) for m in group if m is not k):
        continue
      # a kernel that reads an old value of the group's buffers runs before the group's kernel: it must not need it
      members = group | {a}
      if any(members & _reach(x, realize, reach) for g in members for x in _kernels_reading(g.srcs[1].base, children, realize) - members):
        continue
      out[a] = k
      group.add(a)
    if len(group) > 1 and not _inlined_reads(k.srcs[0], k, realize, {}, written={a.buffer for a in group if a is not k}):
      for a in group - {k}:  # k reads an inner's buffer at another element (an older value of it, through a view)
        del out[a]
    elif len(group) > 1:
      taken |= group
  # each group alone is acyclic (_joins); groups that are each fine can together make kernels need each other: then
  # keep them one at a time while the kernels stay acyclic (one check for all is linear in the graph, one per group isn't)
  if out and not _acyclic(realize, {**nested, **out}, direct):
    kept: dict[LazyBuffer, LazyBuffer] = {}
    for k in dict.fromkeys(out.values()):
      trial = {**kept, **{a: o for a, o in out.items() if o is k}}
      if _acyclic(realize, {**nested, **trial}, direct):
        kept = trial
    out = kept
  return out


def _inlined_reads(value: LazyBuffer, owner: LazyBuffer, realize: dict[LazyBuffer, None], found: dict[LazyBuffer, bool],
                   written: set[Buffer] | None = None, loaded: set[Buffer] | None = None) -> bool:
  """Walk the part of `owner`'s kernel that `value` inlines. Every assign in `realize` it reads goes into `found`, with
  whether each read is element for element, and every buffer it loads into `loaded`. False when a buffer in `written`
  is read at another element (through a view that isn't the identity)."""
  stack: list[tuple[LazyBuffer, bool]] = [(value, True)]
  seen: set[tuple[int, bool]] = set()
  while stack:
    x, in_order = stack.pop()
    if (id(x), in_order) in seen:
      continue
    seen.add((id(x), in_order))
    b = x.base
    here = in_order and (x is b or (x.st.contiguous and x.shape == b.shape))
    if b.op in _NO_DATA and b.realized is None:
      continue
    if b.realized is not None or b in realize:
      if written is not None and not here and b.buffer in written:
        return False
      if loaded is not None:
        loaded.add(b.buffer)
      if b.op is MetaOps.ASSIGN and b in realize and b is not owner:
        found[b] = found.get(b, True) and here and b.shape == owner.shape
      continue
    stack.extend((s, here) for s in b.srcs)
  return True


def _kernels_reading(node: LazyBuffer, children: dict[LazyBuffer, list[tuple[LazyBuffer, LazyBuffer]]],
                     realize: dict[LazyBuffer, None]) -> set[LazyBuffer]:
  """The bases in `realize` whose kernels read base `node`: its users, or the kernels that inline them."""
  out: set[LazyBuffer] = set()
  stack, seen = [node], set()
  while stack:
    for c, _ in children.get(stack.pop(), []):
      if id(c) not in seen:
        seen.add(id(c))
        if c in realize:
          out.add(c)
        else:
          stack.append(c)
  return out


def _inside(c: LazyBuffer, a: LazyBuffer, realize: dict[LazyBuffer, None]) -> bool:
  """Whether base `c` is part of the value that assign `a` inlines into its kernel."""
  stack, seen = [a.srcs[0]], set()
  while stack:
    b = stack.pop().base
    if b is c:
      return True
    if id(b) in seen or b.realized is not None or b in realize:
      continue
    seen.add(id(b))
    stack.extend(b.srcs)
  return False


def _acyclic(realize: dict[LazyBuffer, None], nested: dict[LazyBuffer, LazyBuffer], direct: dict[LazyBuffer, set[LazyBuffer]]) -> bool:
  """Whether the kernels still form a DAG with every nested reduction counted as part of its kernel: merges that
  are each fine alone can together make two kernels need each other. Over the direct needs (`_direct`, memoized in
  `direct`): the transitive ones found the same cycles in time quadratic in the graph, per call."""
  edges: dict[LazyBuffer, set[LazyBuffer]] = {}
  for b in realize:
    k = nested.get(b, b)
    edges.setdefault(k, set()).update(d for d in (nested.get(x, x) for x in _direct(b, realize, direct)) if d is not k)
  state: dict[LazyBuffer, int] = {}  # 1: on the current path, 2: done
  for start in edges:
    if start in state:
      continue
    stack = [(start, iter(edges[start]))]
    state[start] = 1
    while stack:
      node, it = stack[-1]
      nxt = next(it, None)
      if nxt is None:
        state[node] = 2
        stack.pop()
      elif state.get(nxt) == 1:
        return False
      elif nxt not in state:
        state[nxt] = 1
        stack.append((nxt, iter(edges.get(nxt, ()))))
  return True


def _direct(b: LazyBuffer, realize: dict[LazyBuffer, None], memo: dict[LazyBuffer, set[LazyBuffer]]) -> set[LazyBuffer]:
  """The bases with a buffer in this schedule that b's kernel reads itself (through the values it inlines)."""
  if (ret := memo.get(b)) is not None:
    return ret
  ret = memo[b] = set()
  stack, seen = list(b.srcs), set()
  while stack:
    x = stack.pop().base
    if id(x) in seen or x.realized is not None:
      continue
    seen.add(id(x))
    if x in realize:
      ret.add(x)
    else:
      stack.extend(x.srcs)
  return ret


def _needs(group: set[LazyBuffer], realize: dict[LazyBuffer, None], reach: dict[LazyBuffer, set[LazyBuffer]]) -> set[LazyBuffer]:
  return set().union(*(_reach(m, realize, reach) for m in group)) - group


def _joins(group: set[LazyBuffer], c: LazyBuffer, realize: dict[LazyBuffer, None], reach: dict[LazyBuffer, set[LazyBuffer]]) -> bool:
  """Whether `c` can be computed in the one kernel of `group`: it needs none of the group's results, and nothing
  else the group needs needs it (the group may read `c` itself: a nested reduction is read where it is computed)."""
  if group & _reach(c, realize, reach):
    return False
  return not any(c in _reach(d, realize, reach) for d in _needs(group, realize, reach) if d is not c)


def _reach(b: LazyBuffer, realize: dict[LazyBuffer, None], memo: dict[LazyBuffer, set[LazyBuffer]]) -> set[LazyBuffer]:
  """Every base with a buffer in this schedule that computing `b` needs, directly or through others."""
  if (ret := memo.get(b)) is not None:
    return ret
  ret = memo[b] = set()
  for s in b.srcs:
    if s.base.realized is None:
      if s.base in realize:
        ret.add(s.base)
      ret |= _reach(s.base, realize, memo)
  return ret


class _KernelBuilder:
  """Builds the AST of the kernel that computes `out` (a base), inlining every unrealized elementwise source."""

  def __init__(self, out: LazyBuffer, realized: set[LazyBuffer], fused: LazyBuffer | None = None, nested: tuple[LazyBuffer, ...] = ()) -> None:
    self.out, self.realized, self.fused, self.nested = out, realized, fused, nested
    self.bufs: list[Buffer] = [out.buffer] + [n.buffer for n in nested]  # outputs first
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
      outputs = self.bufs[:1 + len(self.nested)]
      self.buf_index[b] = next((i for i, o in enumerate(outputs) if o is b.buffer), len(self.bufs))
      if self.buf_index[b] == len(self.bufs):
        self.bufs.append(b.buffer)
    return LazyOp(BufferOps.LOAD, (), MemBuffer(self.buf_index[b], b.dtype, self.unbound(st)))

  def value(self, x: LazyBuffer, top: ShapeTracker | None) -> LazyOp:
    """The value of `x` at the kernel's index, where `top` maps the kernel's index to x's index."""
    key = (x, top)
    if (ret := self.memo.get(key)) is not None:
      return ret
    st = x.st + top if top is not None else x.st
    b = x.base
    if b is not self.out and b not in self.nested and (b.realized is not None or b in self.realized):
      ret = self.load(b, st)
    elif b.op is MetaOps.CONST:
      ret = LazyOp(BufferOps.CONST, (), ConstBuffer(b.arg, b.dtype, self.unbound(st)))
    elif b.op is MetaOps.IOTA:
      ret = LazyOp(BufferOps.IOTA, (), ConstBuffer(0, b.dtype, self.unbound(st)))
    elif b.op in (MetaOps.CONTIGUOUS, MetaOps.ASSIGN):
      ret = self.value(b.srcs[0], st)
    elif isinstance(b.op, ReduceOps):
      # its own kernel's reduction, one fused into the elementwise op that consumes it (same shape, read in order),
      # or one nested in this kernel's reduction (read through a broadcast along its reduced axes)
      assert b is self.out or st.contiguous or st == ShapeTracker.from_shape(b.shape).expand(b.srcs[0].shape), "a reduction read out of order"
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
    # with a fused reduction the kernel iterates in the reduction's output shape (reduced axes kept as 1s)
    top = ShapeTracker.from_shape(b.shape).reshape(self.fused.shape) if self.fused is not None and self.fused.shape != b.shape else None
    if b.op is MetaOps.ASSIGN and b.arg is not None:  # an assign into a view: the kernel iterates over the view and stores through it
      val, out_st = self.value(b.srcs[0], top), b.arg if top is None else b.arg + top
    else:
      val = self.value(b, top)
      out_st = ShapeTracker.from_shape(b.shape) + top if top is not None else ShapeTracker.from_shape(b.shape)
    ast = LazyOp(BufferOps.STORE, (val,), MemBuffer(0, b.dtype, self.unbound(out_st)))
    if self.nested:  # the nested reductions (or the other assigns of a shared reduction) are stored too, as outputs 1, 2, ...
      stores = [LazyOp(BufferOps.STORE, (self.value(n, top if n.op is MetaOps.ASSIGN else None),),
                       MemBuffer(i + 1, n.dtype, self.unbound(ShapeTracker.from_shape(n.shape) + top if n.op is MetaOps.ASSIGN and top is not None
                                                              else ShapeTracker.from_shape(n.shape))))
                for i, n in enumerate(self.nested)]
      ast = LazyOp(MetaOps.SINK, (ast, *stores))
    return ScheduleItem(ast, tuple(self.bufs), self.var_vals)


# a graph's structure, its bases as the structure numbers them, and the values its Variables are bound to
_Found = tuple[Hashable, list[LazyBuffer], dict[Variable, int]]


def create_schedule(outs: list[LazyBuffer]) -> list[ScheduleItem]:
  return schedule_found(outs, *lookup_plan(outs))


def lookup_plan(outs: list[LazyBuffer]) -> tuple[_Found | None, schedule_cache.Plan | None]:
  """Get the graph ready to schedule, and find the plan of its structure: (its structure, the plan), either None when
  the structure can't be cached or wasn't scheduled before."""
  # (both sets are WeakSets, tested by their own set: a WeakSet's __len__ is Python, and this runs on every realize)
  if pending._open.data:  # type: ignore[attr-defined]  # what a failed run left to do that this graph reads or overwrites
    pending.settle_graph(outs)
  if pack_candidates.data:  # type: ignore[attr-defined]  # large matmul-like sums: their device lays out their operands (engine/packing.py)
    packing.pack_noted()
  found = schedule_cache.structure(outs) if not GRAPH.value else None  # (GRAPH: graphviz draws the graph as scheduled)
  return found, schedule_cache.lookup(found[0]) if found is not None else None


def schedule_found(outs: list[LazyBuffer], found: _Found | None, plan: schedule_cache.Plan | None) -> list[ScheduleItem]:
  """The schedule of `outs`, from lookup_plan's answer for them."""
  if found is not None and plan is not None:
    return _from_plan(plan, found[1], found[2])
  bases, fused, nested = _needs_realize(outs)
  realized = set(bases)
  items: dict[LazyBuffer, ScheduleItem] = {}
  reads: dict[LazyBuffer, set[LazyBuffer]] = {}  # which bases each item loads
  slots: dict[LazyBuffer, dict[LazyBuffer, int]] = {}  # ... and at which argument index
  inners: dict[LazyBuffer, tuple[LazyBuffer, ...]] = {}
  for inner, outer in nested.items():
    inners[outer] = (*inners.get(outer, ()), inner)
  for b in bases:
    if prod(b.shape) == 0 or b in nested:
      continue  # nothing to compute (an empty buffer), or computed in another reduction's kernel
    if b.op is MetaOps.COPY:
      items[b], reads[b] = ScheduleItem(LazyOp(MetaOps.COPY, (), b.buffer.nbytes), (b.buffer, b.srcs[0].base.buffer)), {b.srcs[0].base}
      slots[b] = {b.srcs[0].base: 1}
    elif b.op is MetaOps.EMPTY:
      items[b], reads[b], slots[b] = ScheduleItem(LazyOp(MetaOps.EMPTY), (b.buffer,)), set(), {}
    else:
      builder = _KernelBuilder(b, realized, fused.get(b), inners.get(b, ()))
      items[b], reads[b], slots[b] = builder.build(), set(builder.buf_index), dict(builder.buf_index)
      del builder
  if graphviz.enabled():  # a nested reduction is drawn as its own node, read by the kernel that computes it
    graphviz.add_schedule({**reads, **{inner: set() for inner in nested}})
  # reading a nested reduction means waiting for the kernel that computes it
  reads = {b: {nested.get(r, r) for r in rs} for b, rs in reads.items()}
  keeps: dict[LazyBuffer, Buffer] = {}  # old value -> the copy of it a cycle made _order keep
  schedule = _order(items, reads, inners, slots, keeps)
  olds = [(items[a], weakref.ref(a.srcs[1].base), keeps.get(a.srcs[1].base), a.arg is not None) for a in items if a.op is MetaOps.ASSIGN]
  olds += [(items[k], weakref.ref(n.srcs[1].base), keeps.get(n.srcs[1].base), n.arg is not None)
           for k, ns in inners.items() for n in ns if n.op is MetaOps.ASSIGN]
  if found is not None:
    position = {id(si): p for p, si in enumerate(schedule)}
    schedule_cache.record(found[0], found[1], [(si.ast, si.bufs, si.var_vals) for si in schedule], bases,
                          [(position[id(si)], ref, kept, view) for si, ref, kept, view in olds])
    found[1].clear()
  # with the builders' memos and the numbered bases: nothing here may keep a value alive past this point
  del items, fused, reads, slots, keeps, nested, inners, realized, found
  return _finish(schedule, bases, olds)


def _from_plan(plan: schedule_cache.Plan, nodes: list[LazyBuffer], binds: dict[Variable, int]) -> list[ScheduleItem]:
  """The schedule of a graph whose structure was scheduled before: the plan's items over this graph's buffers, with
  the values this graph binds its Variables to."""
  temps = [Buffer(*spec) for spec in plan.temps]  # fresh each time, as the scheduler makes them
  schedule = [ScheduleItem(ast, tuple(nodes[n].buffer if n >= 0 else temps[-1 - n] for n in bufs), {v: binds[v] for v in vs})
              for ast, bufs, vs in plan.items]
  bases = [nodes[n] for n in plan.bases]
  olds = [(schedule[p], weakref.ref(nodes[n]), temps[-1 - k] if k is not None else None, view) for p, n, k, view in plan.olds]
  nodes.clear()  # the caller's reference to the list must not keep the old values alive either
  return _finish(schedule, bases, olds)


# an ASSIGN's item, its old value, a copy of it made already, whether it writes through a view (t.reshape(4).assign(x))
_Old = tuple[ScheduleItem, weakref.ref[LazyBuffer], Buffer | None, bool]


def _finish(schedule: list[ScheduleItem], bases: list[LazyBuffer], olds: list[_Old]) -> list[ScheduleItem]:
  with hold_sigint():  # a Ctrl-C in here would leave a base with neither its graph nor its work
    # the schedule now owns the work: its buffers are pending until their items ran, and the graph is dropped so
    # memory is freed as it runs
    work = pending.PendingWork(schedule)
    for b in bases:
      memory.track(b)
      b.op, b.srcs = None, ()
    return _keep_old_values(work, olds)


def _keep_old_values(work: pending.PendingWork, olds: list[_Old]) -> list[ScheduleItem]:
  """An in-place ASSIGN overwrites its target's buffer. If something not computed in this schedule still reads
  the old value (a loss computed lazily before an optimizer step, a view a user holds, a tensor that is the old
  value itself), the old value moves to a buffer of its own first, so every lazy value keeps meaning what it
  meant when it was built.

  Runs after the scheduled graph is dropped, so only what is held from outside is still alive: the `w + 1` inlined
  into the kernel of `w.assign(w + 1)` is gone unless someone holds it, and so is the old value itself. So the old
  value is held exactly when its LazyBuffer is alive (a reference cycle not yet collected only costs a copy). When _order
  already copied the old value to break a cycle, that copy serves."""
  for si, ref, made, through_view in olds:
    if (old := ref()) is None:
      continue  # nobody can ask for the old value any more
    readers: list[LazyBuffer] = []
    if through_view or _writes_part(si, old):
      # an assign into a view (t[1:3] = v, a KV cache at start_pos, also a view as large as the buffer: t.reshape(4)) writes
      # a buffer others hold as theirs: as in tinygrad and torch, the tensors over it and their views see the write; only
      # values computed from the old one keep it
      if not (readers := [r for r in live_readers(old) if r.op is not None and r.op is not MetaOps.ASSIGN]):
        continue
    if (keep := made) is None:
      keep = Buffer(old.buffer.device, old.buffer.size, old.buffer.dtype)
      work.add(ScheduleItem(LazyOp(MetaOps.COPY, (), keep.nbytes), (keep, old.buffer)), before=si)
    if not readers:
      old.set_buffer(keep)
    else:
      kept = LazyBuffer.from_buffer(keep, old.shape)
      for r in readers:
        r.srcs = tuple(s if s.base is not old else kept if s is old else LazyBuffer(s.device, s.st, s.dtype, base=kept) for s in r.srcs)
        add_reader(kept, weakref.ref(r))
    del old, readers
  return list(work.items)  # type: ignore[arg-type]  # create_schedule's PendingWork holds only ScheduleItems


def _writes_part(si: ScheduleItem, old: LazyBuffer) -> bool:
  """Whether the assign `si` writes only part of (or not in order) the buffer of `old`, its target."""
  stores = si.ast.src if si.ast.op is MetaOps.SINK else (si.ast,)
  st = next((x.arg.st for x in stores if si.bufs[x.arg.idx] is old.buffer), None)
  return st is not None and not (st.contiguous and st.size == old.st.size)


def _span(st: ShapeTracker) -> tuple[int, int] | None:
  """The lowest and highest element a view reaches (bounds over every value of its Variables: never too narrow); None
  when it reaches none."""
  idx, valid = st.expr_idxs()
  return None if valid.max == 0 else (int(idx.min), int(idx.max))


def _reads_apart(si: ScheduleItem, arg: int, written: tuple[int, int] | None) -> bool:
  """Whether kernel `si` reads argument `arg` only at elements outside `written` (an inclusive range), so an assign that
  writes those elements may run before or after it."""
  if written is None:
    return True
  loads, stack = [], [si.ast]
  while stack:
    op = stack.pop()
    if op.op is BufferOps.LOAD and op.arg.idx == arg:
      loads.append(op.arg.st)
    stack.extend(op.src)
  if not loads or arg < len(si.outputs):  # (a kernel writing the buffer too: left to the data edges)
    return False
  for st in loads:
    if (span := _span(st)) is not None and span[0] <= written[1] and written[0] <= span[1]:
      return False
  return True


class _Keep:
  """A node of the ordering graph for a COPY that keeps an old value (see _order)."""

  def __init__(self, si: ScheduleItem) -> None:
    self.si = si


_Node = LazyBuffer | _Keep


def _toposort(deps: dict[_Node, set[_Node]], rank: dict[_Node, int]) -> list[_Node] | list[tuple[_Node, _Node]]:
  """Every node after the nodes it depends on (visited in `rank` order), or, when there is none, the edges of a cycle
  as (node, the node it needs) pairs. Iterative: a schedule can be longer than Python's recursion limit."""
  done: dict[_Node, None] = {}
  on_path: set[_Node] = set()
  for start in sorted(deps, key=rank.__getitem__):
    if start in done:
      continue
    stack = [(start, iter(sorted(deps[start], key=rank.__getitem__)))]
    on_path.add(start)
    while stack:
      node, it = stack[-1]
      if (nxt := next(it, None)) is None:
        stack.pop()
        on_path.discard(node)
        done[node] = None
      elif nxt in on_path:
        path = [n for n, _ in stack]
        cycle = path[path.index(nxt):]
        return [*itertools.pairwise(cycle), (node, nxt)]
      elif nxt not in done:
        on_path.add(nxt)
        stack.append((nxt, iter(sorted(deps[nxt], key=rank.__getitem__))))
  return list(done)


def _order(items: dict[LazyBuffer, ScheduleItem], reads: dict[LazyBuffer, set[LazyBuffer]],
           inners: dict[LazyBuffer, tuple[LazyBuffer, ...]], slots: dict[LazyBuffer, dict[LazyBuffer, int]],
           keeps: dict[LazyBuffer, Buffer]) -> list[ScheduleItem]:
  """Items after the items whose outputs they read, and each ASSIGN (also one stored by another's kernel) after every
  item that reads the old value of the buffer it overwrites (in place, so those reads must happen first).

  Assigns whose kernels read each other's old values (an optimizer step where x's update reads W and W's reads x, a
  swap, a ring) can't all run before each other: one reader then reads a COPY of the old value made before the
  overwrite instead (a rewritten ScheduleItem in `items`), which breaks the cycle. `slots` gives each item's argument
  index per base it loads; `keeps` gets each copied old value's copy."""
  data: dict[_Node, set[_Node]] = {b: {r for r in rs if r in items} for b, rs in reads.items()}
  olds: dict[LazyBuffer, dict[LazyBuffer, set[LazyBuffer]]] = {}  # assign item -> reader item -> the old bases it reads
  writers: dict[LazyBuffer, set[LazyBuffer]] = {}  # old base -> the items that overwrite its buffer
  for a in items:
    for w in (a, *inners.get(a, ())):
      if w.op is MetaOps.ASSIGN:
        old = w.srcs[1].base
        writers.setdefault(old, set()).add(a)
        written = _span(w.arg) if w.arg is not None else (0, old.buffer.size - 1)  # the elements the assign writes
        for r, rs in reads.items():
          # (a reader of other elements of the buffer, e.g. another parameter in one flat buffer, may run before or after)
          if old in rs and r is not a and not _reads_apart(items[r], slots[r][old], written):
            olds.setdefault(a, {}).setdefault(r, set()).add(old)
  kept: dict[LazyBuffer, _Keep] = {}  # old base -> the copy of it made before it is overwritten
  rank: dict[_Node, int] = {b: i for i, b in enumerate(items)}
  while True:
    deps = {b: ds | set(olds.get(b, {})) if isinstance(b, LazyBuffer) else ds for b, ds in data.items()}  # type: ignore[arg-type]
    found = _toposort(deps, rank)
    if not found or not isinstance(found[0], tuple):
      keeps.update({o: k.si.bufs[0] for o, k in kept.items()})
      return [n.si if isinstance(n, _Keep) else items[n] for n in found]  # type: ignore[union-attr,index]
    _break_cycle(found, items, data, olds, writers, kept, rank, slots)  # type: ignore[arg-type]


def _needs_data(r: _Node, a: _Node, data: dict[_Node, set[_Node]]) -> bool:
  """Whether item r needs item a's result, directly or through others."""
  stack, seen = [r], {r}
  while stack:
    for d in data[stack.pop()]:
      if d is a:
        return True
      if d not in seen:
        seen.add(d)
        stack.append(d)
  return False


def _break_cycle(cycle: list[tuple[_Node, _Node]], items: dict[LazyBuffer, ScheduleItem], data: dict[_Node, set[_Node]],
                 olds: dict[LazyBuffer, dict[LazyBuffer, set[LazyBuffer]]], writers: dict[LazyBuffer, set[LazyBuffer]],
                 kept: dict[LazyBuffer, _Keep], rank: dict[_Node, int], slots: dict[LazyBuffer, dict[LazyBuffer, int]]) -> None:
  """Make one reader on `cycle` that must run before an assign only to read the old value, read a copy of it instead."""
  for a, r in cycle:
    if not isinstance(a, LazyBuffer) or not isinstance(r, LazyBuffer) or r in data[a] or r not in olds.get(a, {}):
      continue  # a data edge: r's result is needed
    if _needs_data(r, a, data):
      # r reads the buffer's old value and (through others) its new one: tinygrad raises for this diamond, and so do we
      continue
    si = items[r]
    bases = [o for o in olds[a][r] if slots[r][o] >= len(si.outputs)]
    if not bases:
      continue
    bufs = list(si.bufs)
    for o in bases:
      if (k := kept.get(o)) is None:
        keep = Buffer(o.buffer.device, o.buffer.size, o.buffer.dtype)
        k = kept[o] = _Keep(ScheduleItem(LazyOp(MetaOps.COPY, (), keep.nbytes), (keep, o.buffer)))
        data[k], rank[k] = set(), -1
        for w in writers[o]:
          data[w].add(k)  # the copy reads the old value: before every kernel that overwrites it
      bufs[slots[r][o]] = k.si.bufs[0]
      data[r].add(k)
      for rd in olds.values():  # r reads the old value no more
        if (got := rd.get(r)) is not None:
          got.discard(o)
          if not got:
            del rd[r]
    items[r] = ScheduleItem(si.ast, tuple(bufs), si.var_vals)
    return
  raise RuntimeError("the schedule has a cycle: a buffer is overwritten (assign) while a value that depends on the new data reads the old")
