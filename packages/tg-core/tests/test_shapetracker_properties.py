"""Property tests of ShapeTracker against numpy (hypothesis).

Random shapes and random sequences of movement ops are applied both to a ShapeTracker and to
`np.arange(n).reshape(shape)` (padding with -1). Evaluating the tracker's `expr_idxs` for every element must give
the flat index numpy holds there, and validity 0 exactly where numpy holds -1. The evaluator and the numpy
reference follow test_shapetracker.py (copied, so that file stays independent).
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from st_helpers import apply_np, apply_st, check_st, indexes

from tg.helpers import prod
from tg.shape.shapetracker import ShapeTracker
from tg.shape.symbolic import Node, Variable

MAX_NUMEL = 160  # keeps every example cheap to enumerate
SETTINGS = {"deadline": None, "database": None, "suppress_health_check": [HealthCheck.too_slow]}

def check_ops(shape, ops):
  """Apply `ops` to a fresh tracker of `shape` and to numpy; they must agree. Returns the tracker."""
  tracker = apply_st(ShapeTracker.from_shape(shape), ops)
  check_st(tracker, apply_np(np.arange(prod(shape)).reshape(shape), ops))
  return tracker


# ---------- strategies ----------


def _divisors(n):
  return [d for d in range(1, n + 1) if n % d == 0]


@st.composite
def reshape_targets(draw, shape):
  """A new shape of the same size: a merge or split of neighbouring axes, a size-1 axis added or removed, or a
  random factorization."""
  kinds = ["factorize", "add1"]
  if len(shape) >= 2:
    kinds.append("merge")
  if any(len(_divisors(s)) > 2 for s in shape):
    kinds.append("split")
  if 1 in shape:
    kinds.append("remove1")
  kind = draw(st.sampled_from(kinds))
  if kind == "merge":
    i = draw(st.integers(0, len(shape) - 2))
    return shape[:i] + (shape[i] * shape[i + 1],) + shape[i + 2:]
  if kind == "split":
    i = draw(st.sampled_from([i for i, s in enumerate(shape) if len(_divisors(s)) > 2]))
    d = draw(st.sampled_from(_divisors(shape[i])[1:-1]))
    return shape[:i] + (d, shape[i] // d) + shape[i + 1:]
  if kind == "add1":
    i = draw(st.integers(0, len(shape)))
    return shape[:i] + (1,) + shape[i:]
  if kind == "remove1":
    i = draw(st.sampled_from([i for i, s in enumerate(shape) if s == 1]))
    return shape[:i] + shape[i + 1:]
  n, dims = prod(shape), []
  while n > 1 and len(dims) < 3:
    d = draw(st.sampled_from(_divisors(n)))
    dims.append(d)
    n //= d
  dims.append(n)
  if draw(st.booleans()):
    dims.insert(draw(st.integers(0, len(dims))), 1)
  return tuple(dims)


@st.composite
def movement_op(draw, shape, force_reshape=False):
  """One valid movement op for `shape`, or None when the one drawn would make the tensor too big."""
  nd, numel = len(shape), prod(shape)
  if force_reshape or nd == 0:  # a 0-dim tensor (all size-1 axes removed) can only be reshaped
    ops = ["reshape"]
  else:
    ops = ["reshape", "permute", "pad", "shrink", "stride"] + (["expand"] if 1 in shape else [])
  op = draw(st.sampled_from(ops))
  if op == "reshape":
    return op, draw(reshape_targets(shape))
  if op == "permute":
    return op, tuple(draw(st.permutations(range(nd))))
  if op == "expand":
    new = tuple(draw(st.integers(1, 4)) if s == 1 else s for s in shape)
    return (op, new) if prod(new) <= MAX_NUMEL else None
  if op == "pad":
    arg = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in shape)
    return (op, arg) if prod(s + b + a for s, (b, a) in zip(shape, arg)) <= MAX_NUMEL else None
  if op == "shrink":
    arg = []
    for s in shape:
      b = draw(st.integers(0, s - 1))
      arg.append((b, draw(st.integers(b + 1, s))))
    return op, tuple(arg)
  assert op == "stride" and numel > 0
  return op, tuple(draw(st.sampled_from([1, -1, 2, -2])) for _ in shape)


def _next_shape(shape, o):
  return apply_np(np.zeros(shape, dtype=np.int8), [o]).shape


@st.composite
def movement_cases(draw):
  """(shape, ops): 1-4 dims of size 1..6 and 1-7 movement ops; after a pad or shrink a reshape is likely."""
  shape = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=4)))
  n_ops = draw(st.integers(1, 7))
  ops, cur = [], shape
  for _ in range(3 * n_ops):
    if len(ops) == n_ops:
      break
    after_pad_or_shrink = bool(ops) and ops[-1][0] in ("pad", "shrink")
    o = draw(movement_op(cur, force_reshape=after_pad_or_shrink and draw(st.booleans())))
    if o is not None:
      ops.append(o)
      cur = _next_shape(cur, o)
  return shape, ops


@st.composite
def pad_shrink_reshape_cases(draw):
  """A pad and/or a shrink, then 1-3 reshapes (merges, splits, size-1 axes), then maybe one more op."""
  shape = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=3)))
  ops, cur = [], shape
  for op in draw(st.sampled_from([["pad"], ["shrink"], ["pad", "shrink"], ["shrink", "pad"]])):
    if op == "pad":
      arg = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in cur)
      if prod(s + b + a for s, (b, a) in zip(cur, arg)) > MAX_NUMEL:
        continue
    else:
      arg = []
      for s in cur:
        b = draw(st.integers(0, s - 1))
        arg.append((b, draw(st.integers(b + 1, s))))
      arg = tuple(arg)
    ops.append((op, arg))
    cur = _next_shape(cur, ops[-1])
  for _ in range(draw(st.integers(1, 3))):
    ops.append(("reshape", draw(reshape_targets(cur))))
    cur = ops[-1][1]
  if draw(st.booleans()) and (o := draw(movement_op(cur))) is not None:
    ops.append(o)
  return shape, ops


# ---------- properties: concrete shapes ----------


@settings(max_examples=400, **SETTINGS)
@given(movement_cases())
def test_movement_ops_match_numpy(case):
  shape, ops = case
  check_ops(shape, ops)


@settings(max_examples=150, **SETTINGS)
@given(pad_shrink_reshape_cases())
def test_reshape_after_pad_and_shrink_matches_numpy(case):
  shape, ops = case
  check_ops(shape, ops)


@settings(max_examples=150, **SETTINGS)
@given(movement_cases(), st.data())
def test_view_of_view_matches_numpy(case, data):
  """st_a + st_b (st_b's ops read through st_a, merged into fewer Views where possible) indexes like all the ops."""
  shape, ops = case
  k = data.draw(st.integers(0, len(ops)), label="split")
  st_a = apply_st(ShapeTracker.from_shape(shape), ops[:k])
  st_b = apply_st(ShapeTracker.from_shape(st_a.shape), ops[k:])
  check_st(st_a + st_b, apply_np(np.arange(prod(shape)).reshape(shape), ops))


# ---------- property: a symbolic axis ----------

N = "N"  # stands for the symbolic size in op arguments: the bound Variable for tg, its value for numpy


def _materialize(x, val):
  if x == N:
    return val
  if isinstance(x, tuple):
    return tuple(_materialize(y, val) for y in x)
  return x


@st.composite
def symbolic_cases(draw):
  """(k, shape, ops): shape has N at axis 0; the ops keep N's size (it moves with permutes, size-1 axes come and go)."""
  k = draw(st.integers(1, 6))
  shape = (N, *draw(st.lists(st.integers(1, 5), min_size=0, max_size=3)))
  ops, cur, sa = [], shape, 0  # sa: where the symbolic axis is now
  for _ in range(draw(st.integers(1, 6))):
    nd = len(cur)
    conc = tuple(6 if s == N else s for s in cur)  # sizes with N at its max, for the size limit
    op = draw(st.sampled_from(["reshape", "permute", "pad", "shrink", "stride"] + (["expand"] if 1 in cur else [])))
    if op == "reshape":
      if 1 in cur and draw(st.booleans()):
        i = draw(st.sampled_from([i for i, s in enumerate(cur) if s == 1]))
        new = cur[:i] + cur[i + 1:]
        sa -= i < sa
      else:
        i = draw(st.integers(0, nd))
        new = cur[:i] + (1,) + cur[i:]
        sa += i <= sa
      arg = new
    elif op == "permute":
      arg = tuple(draw(st.permutations(range(nd))))
      sa = arg.index(sa)
    elif op == "expand":
      arg = tuple(draw(st.integers(1, 4)) if s == 1 else s for s in cur)
      if prod(6 if s == N else s for s in arg) > MAX_NUMEL:
        continue
    elif op == "pad":
      arg = tuple((0, 0) if s == N else (draw(st.integers(0, 2)), draw(st.integers(0, 2))) for s in cur)
      if prod(s + b + a for s, (b, a) in zip(conc, arg)) > MAX_NUMEL:
        continue
    elif op == "shrink":
      arg = []
      for s in cur:
        if s == N:
          arg.append((0, N))
        else:
          b = draw(st.integers(0, s - 1))
          arg.append((b, draw(st.integers(b + 1, s))))
      arg = tuple(arg)
    else:
      arg = tuple(draw(st.sampled_from([1, -1])) if s == N else draw(st.sampled_from([1, -1, 2, -2])) for s in cur)
    ops.append((op, arg))
    cur = tuple(N if i == sa else s for i, s in enumerate(_next_shape(_materialize(cur, 1), (op, _materialize(arg, 1)))))
    assert cur.count(N) == 1 and cur[sa] == N
  return k, shape, ops


def check_symbolic(k, shape, ops):
  """Apply `ops` (N in them standing for the symbolic size) to a tracker whose shape has Variable n bound to k, and
  to numpy with k. The unbound tracker, evaluated with n = k, must index like numpy."""
  n = Variable("n", 1, 6)
  bound = n.bind(k)
  tracker = apply_st(ShapeTracker.from_shape(_materialize(shape, bound)), [(op, _materialize(arg, bound)) for op, arg in ops])
  assert N not in tracker.shape and any(isinstance(s, Node) and s.vars() == {n} for s in tracker.shape)
  unbound, var_vals = tracker.unbind()
  assert var_vals == {n: k}
  assert all(v.val is None for v in unbound.vars())
  concrete = _materialize(shape, k)
  check_st(unbound, apply_np(np.arange(prod(concrete)).reshape(concrete), [(op, _materialize(arg, k)) for op, arg in ops]), var_vals)


@settings(max_examples=200, **SETTINGS)
@given(symbolic_cases())
def test_symbolic_axis_matches_numpy(case):
  check_symbolic(*case)


def test_symbolic_axis_fixed_cases():
  check_symbolic(3, (N, 4), [("shrink", ((0, N), (1, 3))), ("reshape", (1, N, 2)), ("permute", (2, 0, 1)), ("stride", (-1, 1, -1))])
  check_symbolic(2, (N, 1), [("expand", (N, 3)), ("pad", ((0, 0), (1, 2))), ("stride", (-1, 2))])
  check_symbolic(6, (N, 2, 3), [("pad", ((0, 0), (1, 0), (0, 2))), ("permute", (2, 0, 1)), ("reshape", (5, 1, N, 3))])


# ---------- pinned: how many Views a reshape after a pad needs ----------


def test_pad_then_merge_with_whole_inner_axes_is_one_view():
  tracker = check_ops((4, 6), [("pad", ((1, 1), (0, 0))), ("reshape", (36,))])
  assert len(tracker.views) == 1
  tracker = check_ops((4, 6), [("pad", ((1, 1), (0, 0))), ("reshape", (6, 2, 3))])
  assert len(tracker.views) == 1


def test_pad_then_reshape_across_padded_inner_axis_is_two_views():
  tracker = check_ops((4, 6), [("pad", ((0, 0), (1, 1))), ("reshape", (32,))])
  assert len(tracker.views) == 2
  got = indexes(tracker)
  assert [got[(i,)] for i in range(10)] == [None, 0, 1, 2, 3, 4, 5, None, None, 6]


# ---------- pinned: minimal failing examples the properties found (both fail at fff3f7a, fixed in 857cbdf) ----------


def test_shrink_whole_symbolic_axis_after_pad():
  """View.shrink took smin(n, n) of the mask end and the shrink end, which the bounds alone couldn't decide."""
  check_symbolic(1, (N, 1), [("pad", ((0, 0), (0, 1))), ("shrink", ((0, N), (0, 1)))])


@pytest.mark.parametrize("ops", [
  [("pad", ((1, 0),)), ("shrink", ((0, 1),)), ("reshape", ())],
  [("pad", ((1, 0),)), ("stride", (2,)), ("reshape", ())],
])
def test_fully_padded_element_reshaped_to_scalar(ops):
  """A 0-d View has no mask, so reshaping an all-padding element to () must not make it read buffer[0]."""
  check_ops((1,), ops)
