"""Loop collapse: a sum over a loop of terms that are a constant where a linear condition on the loop index
holds and 0 elsewhere is a count, computed without the loop.

This is what arange-like kernels (a sum of ones over a sliding window, see `Tensor._arange_small`) and
cumulative masks lower to: REDUCE(ADD, sum_i WHERE(cond_i(r), x_i, 0)) over one RANGE r in [start, end),
where each x_i doesn't depend on r (a term free of r counts end - start times) and each cond_i is a conjunction of comparisons `k*r + a < b` (or their
negation, `>=`) with a constant integer k and a, b free of r. Each comparison bounds r from one side, so the
r that satisfy cond_i form an interval [lo, hi) and the sum is  sum_i x_i * max(0, min(hi, end) - max(lo, start)).
A reduce that has any other shape is left as it is.
"""
from __future__ import annotations

from tg.codegen.uops import UOp, UOps, rewrite_reduces
from tg.dtype import dtypes
from tg.ops import BinaryOps, TernaryOps, UnaryOps

i32 = dtypes.int32


def _depends_on(u: UOp, r: UOp) -> bool:
  return r in u.toposort()


def _linear(u: UOp, r: UOp) -> tuple[int, UOp] | None:
  """(k, a) with u == k*r + a and a free of r, when u is linear in r with a constant integer k."""
  if u is r:
    return 1, UOp.const(i32, 0)
  if not _depends_on(u, r):
    return 0, u
  if u.op is UOps.ALU and u.arg is BinaryOps.ADD:
    x, y = _linear(u.src[0], r), _linear(u.src[1], r)
    return (x[0] + y[0], x[1] + y[1]) if x is not None and y is not None else None
  if u.op is UOps.ALU and u.arg is BinaryOps.MUL:
    for s, c in (u.src, u.src[::-1]):
      if c.op is UOps.CONST and (x := _linear(s, r)) is not None:
        return x[0] * c.arg, x[1] * c.arg
  if u.op is UOps.ALU and u.arg is UnaryOps.NEG and (x := _linear(u.src[0], r)) is not None:
    return -x[0], -x[1]
  return None


def _floor_div(x: UOp, d: int) -> UOp:
  """floor(x / d) for a constant d > 0 (IDIV truncates toward zero, which differs for negative x)."""
  q = x.alu(BinaryOps.IDIV, UOp.const(i32, d))
  inexact_negative = x.lt(0).logical_and((q * d).alu(BinaryOps.CMPNE, x))
  return inexact_negative.alu(TernaryOps.WHERE, q + (-1), q)


def _max(a: UOp, b: UOp) -> UOp:
  return a.alu(BinaryOps.MAX, b)


def _min(a: UOp, b: UOp) -> UOp:
  return -_max(-a, -b)


def _interval(cond: UOp, r: UOp, start: UOp, end: UOp) -> tuple[UOp, UOp] | None:
  """[lo, hi): the r in [start, end) where `cond` holds, or None when cond is not of the collapsible form."""
  if cond.op is UOps.CONST:  # decided when the graph was built
    return (start, end) if cond.arg else (start, start)
  if cond.op is UOps.ALU and cond.arg is BinaryOps.AND:
    x, y = _interval(cond.src[0], r, start, end), _interval(cond.src[1], r, start, end)
    return (_max(x[0], y[0]), _min(x[1], y[1])) if x is not None and y is not None else None
  negated = cond.op is UOps.ALU and cond.arg is UnaryOps.NEG
  cmp = cond.src[0] if negated else cond
  if not (cmp.op is UOps.ALU and cmp.arg is BinaryOps.CMPLT and all(s.dtype == i32 for s in cmp.src)):
    return None
  lhs, rhs = _linear(cmp.src[0], r), _linear(cmp.src[1], r)
  if lhs is None or rhs is None or lhs[0] == rhs[0]:
    return None
  k, a = lhs[0] - rhs[0], lhs[1] + -rhs[1]  # k*r + a < 0
  m = abs(k)
  if k > 0:  # r < -a/k: r <= floor((-a - 1)/k); negated: r >= that + 1
    bound = _floor_div(-a + (-1), m) + 1
    return (start, _min(bound, end)) if not negated else (_max(bound, start), end)
  # -m*r + a < 0: r > a/m, r >= floor(a/m) + 1; negated: r <= floor(a/m)
  bound = _floor_div(a, m) + 1
  return (_max(bound, start), end) if not negated else (start, _min(bound, end))


def _collapse(red: UOp) -> UOp | None:
  if red.arg is not BinaryOps.ADD or len(red.src) != 2 or red.dtype is None:
    return None
  r = red.src[1]
  start, end = r.src
  terms, stack = [], [red.src[0]]
  while stack:  # the sum's terms
    t = stack.pop()
    if t.op is UOps.ALU and t.arg is BinaryOps.ADD:
      stack.extend(t.src)
    else:
      terms.append(t)
  out: UOp | None = None
  for t in terms:
    if not _depends_on(t, r):  # the same every iteration
      val = t * _max(end + -start, UOp.const(i32, 0)).cast(red.dtype)
      out = val if out is None else out + val
      continue
    w = t.src[0] if t.op is UOps.CAST else t  # a widened count (an int32 sum accumulated in int64): cast the term instead
    if not (w.op is UOps.ALU and w.arg is TernaryOps.WHERE):
      return None
    if w.src[2].op is UOps.CONST and w.src[2].arg == 0:
      cond, x = w.src[0], w.src[1]
    elif w.src[1].op is UOps.CONST and w.src[1].arg == 0:  # where(c, 0, x): where(not c, x, 0) folded (uops.fold)
      cond, x = UOp(UOps.ALU, dtypes.bool, (w.src[0],), UnaryOps.NEG), w.src[2]
    else:
      return None
    if w is not t:
      assert t.dtype is not None
      x = x.cast(t.dtype)
    if _depends_on(x, r) or (iv := _interval(cond, r, start, end)) is None:
      return None
    count = _max(iv[1] + -iv[0], UOp.const(i32, 0))
    val = x * count.cast(red.dtype)
    out = val if out is None else out + val
  return out


def collapse_loops(sink: UOp) -> UOp:
  """`sink` with every collapsible REDUCE replaced by its closed form (see the module docstring)."""
  return rewrite_reduces(sink, _collapse)
