"""One-hot sums become loads: the sum over a loop r of terms that are x(r) where `k*r + a == e` holds (e free of r) and 0
elsewhere is x at the one r that solves it, or 0 when none in the loop's range does.

This is what a tensor index, `gather` and `Embedding` lower to: `x[idx]` is built (tg.tensor_index) as
sum_j WHERE(idx == j, x[j], 0), a loop over the whole axis for every index read (GPT-2's embedding of 128 tokens
walked 50257 x 768 floats per token). With the one-hot mask computed in the kernel (the scheduler's `_index_math`),
the loop is the same for every element, and the equality names the one iteration whose term is not 0:

  REDUCE(ADD, WHERE(cond, x(r), 0), r in [start, end))  ->  WHERE(valid, x(v), 0)

where cond is a conjunction holding an equality `k*r + a == e` (k a nonzero integer, a and e free of r), v = (e - a) / k,
valid = v is a whole number in [start, end) and the rest of cond holds at r = v, and every load of x(v) that depends
on v reads only where valid (an index out of range read nothing before, and reads nothing now: its error is the
index guard's, tg.divcheck). A sum of such terms (an unrolled loop) becomes the sum of their loads. A reduce over
several loops loses each loop that an equality solves. A vector whose lanes select at indices of their own (a
gather along the kernel's vector axis) is selected lane by lane, each lane a scalar load. Any other reduce is left
as it is.
"""
from __future__ import annotations

from tg.codegen.uops import UOp, UOps, fold, rewrite_reduces
from tg.dtype import DType, dtypes
from tg.ops import BinaryOps, BufferOps, LazyOp, ReduceOps, TernaryOps, UnaryOps


class _Unsolvable(Exception):
  """A term that can't be selected (a loop of its own inside it, a read after a barrier)."""


class _Deps:
  """Which nodes depend on a given RANGE: memoized over the kernel's graph (a toposort per question is quadratic)."""

  def __init__(self, r: UOp) -> None:
    self.r, self.memo = r, {r: True}

  def __call__(self, u: UOp) -> bool:
    if (d := self.memo.get(u)) is None:
      for x in u.toposort():  # sources first: each node asks only about answered ones
        if x not in self.memo:
          self.memo[x] = any(self.memo[s] for s in x.src)
      d = self.memo[u]
    return d


def _scalar(u: UOp) -> UOp | None:
  """A condition as one scalar: itself, or the scalar a vector broadcasts; None when its lanes differ."""
  if u.count == 1:
    return u
  return u.src[0] if u.op is UOps.VECTORIZE and all(s is u.src[0] for s in u.src) else None


def _conjuncts(cond: UOp) -> list[UOp]:
  if cond.op is UOps.ALU and cond.arg is BinaryOps.AND and cond.dtype == dtypes.bool:
    return _conjuncts(cond.src[0]) + _conjuncts(cond.src[1])
  if cond.op is UOps.CAST and cond.dtype == dtypes.bool and (i := cond.src[0]).op is UOps.CAST and i.dtype is not None and \
     dtypes.is_int(i.dtype) and i.src[0].dtype == dtypes.bool:
    return _conjuncts(i.src[0])  # a bool made an int and back (one_hot(...).cast(bool): a loss's class mask)
  return [cond]


def _not_equal(c: UOp) -> UOp | None:
  """The CMPNE that `c` negates (`a == b` is built as `(a != b) != True`, or a NEG of the CMPNE), else None."""
  if c.op is not UOps.ALU:
    return None
  if c.arg is UnaryOps.NEG:
    inner = c.src[0]
  elif c.arg is BinaryOps.CMPNE and c.src[1].op is UOps.CONST and c.src[1].arg is True:
    inner = c.src[0]
  else:
    return None
  return inner if inner.op is UOps.ALU and inner.arg is BinaryOps.CMPNE else None


def _linear(u: UOp, r: UOp, deps: _Deps, dt: DType) -> tuple[int, UOp] | None:
  """(k, a) with u == k*r + a in the integer dtype dt (a free of r), when u is linear in r; a widening CAST of a linear
  expression (an int32 position compared in int64) is linear too."""
  if u is r:
    return 1, UOp.const(dt, 0)
  if not deps(u):
    return 0, u.cast(dt)
  if u.op is UOps.CAST and u.src[0].dtype is not None and dtypes.is_int(u.src[0].dtype) and \
     u.src[0].dtype.itemsize <= (u.dtype.itemsize if u.dtype is not None else 0):
    return _linear(u.src[0], r, deps, dt)
  if u.op is not UOps.ALU:
    return None
  if u.arg is BinaryOps.ADD:
    x, y = _linear(u.src[0], r, deps, dt), _linear(u.src[1], r, deps, dt)
    return (x[0] + y[0], x[1] + y[1]) if x is not None and y is not None else None
  if u.arg is BinaryOps.MUL:
    for s, c in (u.src, u.src[::-1]):
      if c.op is UOps.CONST and (x := _linear(s, r, deps, dt)) is not None:
        return x[0] * c.arg, x[1] * c.arg
  if u.arg is UnaryOps.NEG and (x := _linear(u.src[0], r, deps, dt)) is not None:
    return -x[0], -x[1]
  return None


def _solve(cond: UOp, r: UOp, deps: _Deps) -> tuple[UOp, UOp, list[UOp]] | None:
  """(v, valid, rest): the r where cond's equality on r holds (v, in r's dtype), when it is a whole number in r's range
  (valid), and cond's other conjuncts; None without such an equality."""
  parts = _conjuncts(cond)
  for i, c in enumerate(parts):
    if (ne := _not_equal(c)) is None:
      continue
    a, b = ne.src
    if deps(b):  # the side with r on the left
      a, b = b, a
    dt = a.dtype
    if deps(b) or not deps(a) or dt is None or dt.count > 1 or not dtypes.is_int(dt) or (lin := _linear(a, r, deps, dt)) is None:
      continue
    k, off = lin
    if k == 0:
      continue
    assert r.dtype is not None
    diff = b + -off  # k*r == e - a
    start, end = (x.cast(dt) for x in r.src)
    if abs(k) == 1:
      w, whole = (diff if k == 1 else -diff), None
    else:
      w, whole = diff // k, (diff % k).alu(BinaryOps.CMPNE, UOp.const(dt, 0)).alu(UnaryOps.NEG)
    valid = w.lt(start).alu(UnaryOps.NEG).logical_and(w.lt(end))
    if whole is not None:
      valid = valid.logical_and(whole)
    return w.cast(r.dtype), valid, parts[:i] + parts[i + 1:]
  return None


def _select(term: UOp, r: UOp, deps: _Deps) -> UOp | None:
  """The one-hot term WHERE(cond, x, 0) (or its widening CAST) as x at the r its equality picks, else None."""
  cast = None
  if term.op is UOps.CAST:
    cast, term = term.dtype, term.src[0]
  if not (term.op is UOps.ALU and term.arg is TernaryOps.WHERE):
    return None
  cond = _scalar(term.src[0])
  if term.src[2].is_zero():
    x = term.src[1]
  elif term.src[1].is_zero() and cond is not None and cond.op is UOps.ALU and cond.arg is BinaryOps.CMPNE:
    x, cond = term.src[2], cond.alu(UnaryOps.NEG)  # WHERE(a != b, 0, x): folded from WHERE(a == b, x, 0) (uops.fold)
  else:
    return None
  if cond is None or (solved := _solve(cond, r, deps)) is None:
    return None
  v, valid, rest = solved
  memo: dict[UOp, UOp] = {r: v}

  def sub(u: UOp) -> UOp:  # u with r := v; a load whose index depends on r reads only where valid
    if (ret := memo.get(u)) is not None:
      return ret
    if not deps(u):
      ret = u
    elif u.op in (UOps.REDUCE, UOps.RANGE, UOps.STORE):  # a loop of its own inside the term: left as it is
      raise _Unsolvable
    else:
      src = tuple(sub(s) for s in u.src)
      if u.op is UOps.LOAD and len(src) == 2:
        assert u.dtype is not None
        src = (src[0], src[1], valid, UOp.const(u.dtype, 0))
      elif u.op is UOps.LOAD and len(src) == 4:
        src = (src[0], src[1], src[2].alu(BinaryOps.AND, valid), src[3])
      elif u.op is UOps.LOAD:  # a read of local memory after a barrier: every thread must reach it, not gated
        raise _Unsolvable
      ret = UOp(u.op, u.dtype, src, u.arg)
      if u.op in (UOps.ALU, UOps.CAST, UOps.GEP):
        ret = fold(ret)
    memo[u] = ret
    return ret
  try:
    xv = sub(x)
    keep = valid
    for c in rest:
      keep = keep.logical_and(sub(c))
  except _Unsolvable:
    return None
  if term.dtype is None:
    return None
  if xv.op is UOps.LOAD and len(xv.src) == 4 and xv.src[2] is keep and xv.src[3].is_zero():
    out = xv  # the selected load is gated by the whole condition already (an index, an Embedding)
  else:
    out = keep.alu(TernaryOps.WHERE, xv, UOp.const(term.dtype, 0))
  return out.cast(cast) if cast is not None else out


def _lane(u: UOp, i: int, memo: dict[UOp, UOp]) -> UOp:
  """Lane i of the vector value u as a scalar graph: a vector LOAD of consecutive elements becomes the load of its
  i-th element (what a gather at a per-lane index needs: each lane loads from its own row). `memo`: lane i of the
  nodes done (the graph is a DAG: shared nodes are split once)."""
  if u.count == 1:
    return u
  if (ret := memo.get(u)) is not None:
    return ret
  assert u.dtype is not None
  if u.op is UOps.VECTORIZE:
    ret = u.src[i]
  elif u.op in (UOps.ALU, UOps.CAST, UOps.BITCAST):
    ret = fold(UOp(u.op, u.dtype.scalar(), tuple(_lane(s, i, memo) for s in u.src), u.arg))
  elif u.op is UOps.LOAD and len(u.src) in (2, 4) and u.src[0].op is UOps.DEFINE_GLOBAL:
    src = (u.src[0], u.src[1] + i) + ((_lane(u.src[2], i, memo), _lane(u.src[3], i, memo)) if len(u.src) == 4 else ())
    ret = UOp(UOps.LOAD, u.dtype.scalar(), src)
  else:
    raise _Unsolvable
  memo[u] = ret
  return ret


def _select_term(term: UOp, r: UOp, deps: _Deps) -> UOp | None:
  """_select, lane by lane for a vector whose lanes select at indices of their own (a gather along the vector axis)."""
  if (ret := _select(term, r, deps)) is not None or term.count == 1 or term.dtype is None:
    return ret
  w = term.src[0] if term.op is UOps.CAST else term
  if not (w.op is UOps.ALU and w.arg is TernaryOps.WHERE and (w.src[1].is_zero() or w.src[2].is_zero()) and
          any(u.op is UOps.ALU and u.arg is BinaryOps.CMPNE and deps(u) for u in w.src[0].toposort())):
    return None  # no comparison with r to select by: not worth splitting the lanes
  try:
    lanes = [_select(_lane(term, i, {}), r, deps) for i in range(term.count)]
  except _Unsolvable:
    return None
  return None if any(x is None for x in lanes) else UOp(UOps.VECTORIZE, term.dtype, tuple(x for x in lanes if x is not None))


def _terms(u: UOp) -> list[UOp]:
  if u.op is UOps.ALU and u.arg is BinaryOps.ADD:
    return _terms(u.src[0]) + _terms(u.src[1])
  return [u]


def _select_reduce(red: UOp) -> UOp | None:
  """`red` with every loop an equality solves gone (see the module docstring), or None when none is."""
  if red.arg is not BinaryOps.ADD or red.dtype is None:
    return None
  val, ranges, changed = red.src[0], list(red.src[1:]), False
  for r in list(ranges):
    deps, terms = _Deps(r), _terms(val)
    picked = [p for t in terms if (p := _select_term(t, r, deps)) is not None]
    if len(picked) != len(terms):
      continue
    val = picked[0]
    for p in picked[1:]:
      val = val + p
    ranges.remove(r)
    changed = True
  if not changed:
    return None
  return UOp(UOps.REDUCE, red.dtype, (val, *ranges), red.arg) if ranges else val


def select_one_hot(sink: UOp) -> UOp:
  """`sink` with every one-hot sum replaced by the load it selects (see the module docstring)."""
  return rewrite_reduces(sink, _select_reduce)


def one_hot_sum(ast_reduce: LazyOp | None, reduce_axes: list[int]) -> bool:
  """Whether the kernel's reduction is a sum over a one-hot mask of positions along its reduce axes, WHERE(cond, x, 0)
  with cond comparing (==) something with positions that move along a reduce axis: after select_one_hot its loop is
  gone and each output one load, so the heuristics should lay it out as an elementwise kernel (vectors along the
  rows it copies: an Embedding's 768 floats per token), not as a reduction over an axis it no longer walks."""
  if ast_reduce is None or ast_reduce.op is not ReduceOps.SUM or not reduce_axes:
    return False
  w = ast_reduce.src[0]
  w = w.src[0] if w.op is UnaryOps.CAST else w
  if w.op is not TernaryOps.WHERE or not (w.src[2].op is BufferOps.CONST and w.src[2].arg.val == 0):
    return False
  cond = list(w.src[0].lazyops())
  equality = any(op.op is BinaryOps.CMPNE and op.src[1].op is BufferOps.CONST and op.src[1].arg.val is True and
                 op.src[0].op is BinaryOps.CMPNE for op in cond)
  positions = any(op.op is BufferOps.IOTA and any(op.arg.st.real_strides()[r] != 0 for r in reduce_axes) for op in cond)
  return equality and positions
