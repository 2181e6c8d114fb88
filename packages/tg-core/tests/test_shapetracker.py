"""View and ShapeTracker, proved against numpy.

A tracker is checked by evaluating the index expressions `expr_idxs` builds, for every element of its shape,
and comparing with numpy: the same movement ops applied to `np.arange(n).reshape(shape)` (with -1 for padding) give,
for each element, the flat buffer index it reads, or -1 where it reads padding (invalid).
"""
import random

import numpy as np
import pytest
from st_helpers import apply_np, apply_st, indexes

from tg.helpers import prod
from tg.shape.shapetracker import ShapeTracker
from tg.shape.view import View


def check_st(st, ref):
  """`st` indexes exactly like the numpy array `ref` (values are flat indices, -1 for invalid)."""
  assert st.shape == ref.shape, f"tracker shape {st.shape} != numpy shape {ref.shape}"
  got = indexes(st)
  bad = [(pos, got[pos], int(ref[pos])) for pos in got if (got[pos] if got[pos] is not None else -1) != ref[pos]]
  assert not bad, f"{len(bad)} of {len(got)} elements differ (pos, tracker, numpy), first: {bad[:5]}; views={st.views}"
  valid_idx = [i for i in got.values() if i is not None]
  if valid_idx:
    assert max(valid_idx) < st.real_size(), f"real_size {st.real_size()} < max index {max(valid_idx)} + 1; views={st.views}"


def check_ops(shape, ops):
  """Apply `ops` to a fresh tracker of `shape` and to numpy; they must agree. Returns the tracker."""
  st = apply_st(ShapeTracker.from_shape(shape), ops)
  check_st(st, apply_np(np.arange(prod(shape)).reshape(shape), ops))
  return st


# ---------- fixed cases ----------

FIXED = {
  "reshape_after_pad": ((2, 3), [("pad", ((1, 1), (0, 1))), ("reshape", (4, 4))]),
  "reshape_after_pad_split": ((3, 2), [("pad", ((0, 0), (1, 1))), ("reshape", (3, 2, 2))]),
  "reshape_after_pad_merge": ((2, 3), [("pad", ((0, 1), (0, 0))), ("reshape", (9,))]),
  "reshape_after_shrink": ((4, 6), [("shrink", ((1, 3), (2, 5))), ("reshape", (6,))]),
  "reshape_after_shrink_rows": ((4, 6), [("shrink", ((1, 3), (0, 6))), ("reshape", (3, 4))]),
  "permute_reshape_shrink": ((4, 5, 3), [("shrink", ((1, 3), (0, 4), (1, 3))), ("reshape", (2, 2, 2, 2)), ("permute", (3, 1, 0, 2))]),
  "flip_then_reshape": ((3, 4), [("stride", (-1, 1)), ("reshape", (2, 6))]),
  "flip_both_then_reshape": ((3, 4), [("stride", (-1, -1)), ("reshape", (12,))]),
  "expand_then_reshape": ((3, 1), [("expand", (3, 4)), ("reshape", (2, 6))]),
  "expand_then_reshape_merge": ((1, 4), [("expand", (3, 4)), ("reshape", (12,))]),
  "pad_of_flip": ((3, 4), [("stride", (1, -1)), ("pad", ((1, 0), (2, 1)))]),
  "pad_of_flip_both": ((2, 3), [("stride", (-1, -1)), ("pad", ((0, 2), (1, 1)))]),
  "stride2_of_pad": ((5, 4), [("pad", ((1, 2), (0, 1))), ("stride", (2, 2))]),
  "stride_neg2_of_pad": ((5, 4), [("pad", ((1, 2), (0, 1))), ("stride", (-2, -2))]),
  "stride_mixed_of_pad": ((5, 4), [("pad", ((2, 1), (1, 0))), ("stride", (-2, 3))]),
  "stride3_of_shrink": ((7, 5), [("shrink", ((1, 7), (0, 5))), ("stride", (3, -2))]),
  "shrink_into_pad": ((3, 3), [("pad", ((2, 2), (2, 2))), ("shrink", ((1, 4), (0, 2)))]),
  "shrink_only_pad": ((3, 3), [("pad", ((2, 2), (0, 0))), ("shrink", ((0, 2), (0, 3)))]),
  "expand_of_pad": ((1, 3), [("pad", ((0, 0), (1, 1))), ("expand", (3, 5))]),
  "permute_then_reshape_two_views": ((2, 3), [("permute", (1, 0)), ("reshape", (6,))]),
  "pad_then_reshape_then_pad": ((2, 2), [("pad", ((1, 0), (0, 1))), ("reshape", (9,)), ("pad", ((1, 1),))]),
  "two_views_then_flip_and_shrink": ((2, 3, 2), [("permute", (2, 0, 1)), ("reshape", (3, 4)), ("stride", (-1, 2)), ("shrink", ((0, 2), (0, 2)))]),
}


@pytest.mark.parametrize("name", list(FIXED))
def test_fixed(name):
  shape, ops = FIXED[name]
  check_ops(shape, ops)


def test_identity():
  st = ShapeTracker.from_shape((2, 3, 4))
  assert st.contiguous and len(st.views) == 1
  check_st(st, np.arange(24).reshape(2, 3, 4))


def test_scalar_shape():
  st = ShapeTracker.from_shape(())
  assert indexes(st) == {(): 0}
  check_ops((), [("reshape", (1, 1)), ("expand", (2, 3))])


# ---------- random sequences ----------


def _factorize(n, rng):
  """A random shape of <= 4 dims with product n."""
  dims = []
  while n > 1 and len(dims) < 3:
    d = rng.choice([d for d in range(1, n + 1) if n % d == 0])
    dims.append(d)
    n //= d
  dims.append(n)
  if rng.random() < 0.3 and len(dims) < 4:
    dims.insert(rng.randrange(len(dims) + 1), 1)
  return tuple(dims)


def _random_op(shape, rng, max_numel=150):
  """One movement op with valid arguments for `shape`, or None if the one drawn doesn't fit."""
  nd = len(shape)
  op = rng.choice(["reshape", "permute", "expand", "pad", "shrink", "stride"])
  if op == "reshape":
    return op, _factorize(prod(shape), rng)
  if op == "permute" and nd > 0:
    return op, tuple(rng.sample(range(nd), nd))
  if op == "expand" and 1 in shape:
    new = tuple(rng.randint(1, 4) if s == 1 else s for s in shape)
    return (op, new) if prod(new) <= max_numel else None
  if op == "pad" and nd > 0:
    arg = tuple((rng.randint(0, 2), rng.randint(0, 2)) for _ in shape)
    return (op, arg) if prod(s + b + a for s, (b, a) in zip(shape, arg)) <= max_numel else None
  if op == "shrink" and nd > 0:
    arg = []
    for s in shape:
      b = rng.randrange(s)
      arg.append((b, rng.randint(b + 1, s)))
    return op, tuple(arg)
  if op == "stride" and nd > 0:
    return op, tuple(rng.choice([-3, -2, -1, -1, 1, 1, 2, 3]) for _ in shape)
  return None


def _random_case(seed):
  rng = random.Random(seed)
  shape = tuple(rng.randint(1, 5) for _ in range(rng.randint(1, 4)))
  ops, cur = [], shape
  n_ops = rng.randint(1, 6)
  while len(ops) < n_ops:
    if (o := _random_op(cur, rng)) is not None:
      ops.append(o)
      cur = apply_np(np.zeros(cur), [o]).shape
  return shape, ops


def test_random_sequences():
  for seed in range(300):
    shape, ops = _random_case(seed)
    try:
      check_ops(shape, ops)
    except AssertionError as e:
      raise AssertionError(f"seed {seed}: shape {shape}, ops {ops}: {e}") from None


def test_random_add():
  """st_a + st_b (a view of a view) indexes like applying st_b's ops on top of st_a, for every split point."""
  for seed in range(300):
    shape, ops = _random_case(seed)
    k = random.Random(seed + 1000).randint(0, len(ops))
    st_a = apply_st(ShapeTracker.from_shape(shape), ops[:k])
    st_b = apply_st(ShapeTracker.from_shape(st_a.shape), ops[k:])
    try:
      check_st(st_a + st_b, apply_np(np.arange(prod(shape)).reshape(shape), ops))
    except AssertionError as e:
      raise AssertionError(f"seed {seed}: shape {shape}, ops {ops[:k]} + {ops[k:]}: {e}") from None


# ---------- how many Views ----------


@pytest.mark.parametrize("new_shape", [(6, 4), (24,), (4, 3, 2), (1, 24, 1), (2, 1, 12)])
def test_reshape_contiguous_one_view(new_shape):
  st = check_ops((2, 3, 4), [("reshape", new_shape)])
  assert len(st.views) == 1 and st.contiguous


@pytest.mark.parametrize("new_shape", [(3, 2), (3, 1, 2, 1), (1, 3, 2)])
def test_permute_then_unit_reshape_one_view(new_shape):
  st = check_ops((2, 1, 3), [("permute", (2, 1, 0)), ("reshape", new_shape)])
  assert len(st.views) == 1


def test_permute_then_unit_reshape_masked_one_view():
  st = check_ops((2, 3), [("pad", ((1, 0), (0, 1))), ("permute", (1, 0)), ("reshape", (1, 4, 1, 3))])
  assert len(st.views) == 1


def test_reshape_of_row_shrink_one_view():
  st = check_ops((4, 6), [("shrink", ((1, 3), (0, 6))), ("reshape", (12,))])
  assert len(st.views) == 1
  assert indexes(st) == {(i,): 6 + i for i in range(12)}


@pytest.mark.parametrize("new_shape", [(3, 4), (2, 2, 3), (12, 1)])
def test_reshape_of_row_shrink_one_view_other_shapes(new_shape):
  st = check_ops((4, 6), [("shrink", ((1, 3), (0, 6))), ("reshape", new_shape)])
  assert len(st.views) == 1


def test_permute_then_reshape_pushes_view():
  st = check_ops((2, 3), [("permute", (1, 0)), ("reshape", (6,))])
  assert len(st.views) == 2
  assert [indexes(st)[(i,)] for i in range(6)] == [0, 3, 1, 4, 2, 5]


def test_pad_then_reshape_pushes_view():
  st = check_ops((2, 3), [("pad", ((0, 0), (1, 0))), ("reshape", (8,))])
  assert len(st.views) == 2


# ---------- ShapeTracker.__add__ ----------

ADD_CASES = [
  ((2, 3), [("permute", (1, 0))], [("reshape", (6,))]),
  ((2, 3), [("permute", (1, 0)), ("reshape", (6,))], [("shrink", ((1, 5),)), ("stride", (-1,))]),
  ((4, 6), [("shrink", ((1, 3), (0, 6)))], [("reshape", (12,))]),
  ((3, 4), [("pad", ((1, 1), (0, 0)))], [("reshape", (10, 2)), ("permute", (1, 0))]),
  ((3, 4), [("stride", (-1, 2))], [("pad", ((1, 1), (1, 1))), ("reshape", (20,))]),
  ((2, 2), [], [("expand", (2, 2)), ("reshape", (4,))]),
  ((3, 1), [("expand", (3, 4))], []),
]


@pytest.mark.parametrize("shape, ops_a, ops_b", ADD_CASES)
def test_add(shape, ops_a, ops_b):
  st_a = apply_st(ShapeTracker.from_shape(shape), ops_a)
  st_b = apply_st(ShapeTracker.from_shape(st_a.shape), ops_b)
  ref = apply_np(np.arange(prod(shape)).reshape(shape), ops_a + ops_b)
  check_st(st_a + st_b, ref)
  assert indexes(st_a + st_b) == indexes(apply_st(st_a, ops_b))


def test_add_contiguous_merges():
  st = apply_st(ShapeTracker.from_shape((2, 3)), [("permute", (1, 0))])
  assert (ShapeTracker.from_shape((6,)) + ShapeTracker.from_shape((6,))).views == (View.create((6,)),)
  assert (st + ShapeTracker.from_shape(st.shape)).views == st.views
  assert (ShapeTracker.from_shape(st.shape) + st).views == st.views


# ---------- View basics ----------


def test_view_canonical():
  assert View.create((3, 1, 4)).strides == (4, 0, 1)
  assert View.create((2, 3), mask=((0, 2), (0, 3))).mask is None
  assert View.create((2, 3), (3, 1)).contiguous
  assert not View.create((2, 3), (1, 2)).contiguous


def test_view_reshape_impossible_returns_none():
  assert View.create((2, 3)).permute((1, 0)).reshape((6,)) is None
  with pytest.raises(ValueError):
    View.create((2, 3)).reshape((5,))


def test_symbolic_view_reshapes_its_concrete_axes_in_place():
  """A KV cache read (heads, start_pos + 1, head_dim) with head_dim split for unrolling stays one View: the symbolic
  axes before and after the reshaped ones keep their strides (and masks). Axes mixed with a symbolic one can't."""
  from tg.shape.symbolic import Variable
  sp = Variable("start_pos", 1, 1023)
  keys = View.create((12, sp + 1, 64), (65536, 64, 1))
  split = keys.reshape((12, sp + 1, 4, 16))
  assert split is not None and split.strides == (65536, 64, 16, 1) and split.offset == 0 and split.mask is None
  merged = View.create((4, 3, sp, 2), (3 * 1024, 1024, 2, 1)).reshape((12, sp, 2))
  assert merged is not None and merged.strides == (1024, 2, 1)
  padded = View.create((sp, 6), (6, 1), mask=((0, sp - 1), (0, 6)))
  assert padded.reshape((sp, 2, 3)) == View.create((sp, 2, 3), (6, 3, 1), mask=((0, sp - 1), (0, 2), (0, 3)))
  assert View.create((sp, 6), (6, 1), mask=((0, sp), (1, 6))).reshape((sp, 2, 3)) is None  # a masked axis splits into no box
  assert View.create((4, sp), (1, 4)).reshape((2, 2 * sp)) is None  # a symbolic axis merges with another
  assert View.create((2, 3, sp), (1, 2, 6)).reshape((6, sp)) is None  # 2 and 3 are not contiguous with each other


def test_concrete_views_are_cached_symbolic_ones_keep_their_binding():
  """View.create, ShapeTracker's movement ops and view merging are cached for concrete Views only (a View's reshape
  returns View.create's cached objects): a bound Variable equals the same
  Variable bound to another value, so a cached symbolic View could hand back the wrong binding."""
  from tg.shape.symbolic import Variable
  assert View.create((4, 6)) is View.create((4, 6))
  assert View.create((4, 6)).reshape((24,)) is View.create((4, 6)).reshape((24,))
  i = Variable("i", 1, 10)
  for val in (2, 3, 7):
    v = View.create((3, i.bind(val)))
    assert v.shape[1].unbind()[1] == val
    assert v.reshape((3, i.bind(val), 1)).shape[1].unbind()[1] == val
    merged = (ShapeTracker.from_shape((3, i.bind(val))) + ShapeTracker.from_shape((3, i.bind(val)))).views
    assert merged[-1].shape[1].unbind()[1] == val


def test_pickles_hold_only_the_fields() -> None:
  """Disk cache keys (BEAM's) are pickles of ASTs: a view's pickle must not change once its cached hash, size or
  concreteness has been computed, and must come back equal (with the hash recomputed in the loading process)."""
  import pickle
  st = ShapeTracker.from_shape((6, 4)).permute((1, 0)).reshape((2, 2, 6))
  before = pickle.dumps(st)
  _ = hash(st), st.size, st.concrete, [(hash(v), v.concrete) for v in st.views]
  assert pickle.dumps(st) == before
  back = pickle.loads(before)
  assert back == st and hash(back) == hash(st) and back.views == st.views
