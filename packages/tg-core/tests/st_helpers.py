"""Checking ShapeTrackers against numpy, shared by test_shapetracker.py and test_shapetracker_properties.py.

The movement ops are applied to a tracker and to `np.arange(n).reshape(shape)` (padding reads as -1); every
element must then read the same flat index, or be invalid exactly where numpy has -1."""
import itertools

import numpy as np

from tg.shape.symbolic import Variable, sym_infer

# ---------- evaluating index expressions ----------


def indexes(tracker, var_vals=None):
  """{element index tuple: flat buffer index, or None where the element is invalid (padding)}.

  `var_vals` gives the values of the (unbound) Variables in the tracker; the positions enumerated are those of the
  concrete shape they give."""
  var_vals = dict(var_vals or {})
  shape = tuple(sym_infer(s, var_vals) for s in tracker.shape)
  placeholders = [Variable(f"i{k}", 0, (s if isinstance(s, int) else s.max) - 1) for k, s in enumerate(tracker.shape)]
  idx, valid = tracker.expr_idxs(placeholders)
  out = {}
  for pos in itertools.product(*[range(s) for s in shape]):
    env = {**var_vals, **{p: v for p, v in zip(placeholders, pos) if isinstance(p, Variable)}}
    v = sym_infer(valid, env)
    assert v in (0, 1), f"valid evaluated to {v!r}"
    out[pos] = sym_infer(idx, env) if v else None
  return out


# ---------- applying movement ops to both ----------


def apply_st(tracker, ops):
  for op, arg in ops:
    tracker = getattr(tracker, op)(arg)
  return tracker


def apply_np(x, ops):
  for op, arg in ops:
    if op == "reshape":
      x = x.reshape(arg)
    elif op == "permute":
      x = np.transpose(x, arg)
    elif op == "expand":
      x = np.broadcast_to(x, arg)
    elif op == "pad":
      x = np.pad(x, arg, mode="constant", constant_values=-1)
    elif op == "shrink":
      x = x[tuple(slice(b, e) for b, e in arg)]
    elif op == "stride":
      for ax, m in enumerate(arg):
        if m < 0:
          x = np.flip(x, axis=ax)
        x = x[(slice(None),) * ax + (slice(None, None, abs(m)),)]
    else:
      raise AssertionError(op)
  return x


def check_st(tracker, ref, var_vals=None):
  """`tracker` indexes exactly like the numpy array `ref` (values are flat indices, -1 for invalid)."""
  shape = tuple(sym_infer(s, dict(var_vals or {})) for s in tracker.shape)
  assert shape == ref.shape, f"tracker shape {tracker.shape} -> {shape} != numpy shape {ref.shape}"
  got = indexes(tracker, var_vals)
  bad = [(pos, got[pos], int(ref[pos])) for pos in got if (got[pos] if got[pos] is not None else -1) != ref[pos]]
  assert not bad, f"{len(bad)} of {len(got)} elements differ (pos, tracker, numpy), first: {bad[:5]}; views={tracker.views}"
  valid_idx = [i for i in got.values() if i is not None]
  if valid_idx:
    assert max(valid_idx) < tracker.real_size(), f"real_size {tracker.real_size()} < max index {max(valid_idx)} + 1; views={tracker.views}"
