"""Fuzzing the scheduler (hypothesis): random small graphs give numpy's numbers.

A random program is built in tg and numpy side by side: movement ops (reshape, permute, expand, pad, shrink, flip),
elementwise ops (unary, binary with broadcasts, comparisons, where, casts) and reductions (sum and max over random
axes, keepdim or not) on small random shapes, float32 and int32. Values are reused by several later ops; some are
realized on their own (a schedule of their own) as the program goes, the outputs at the end together in one schedule.
Every realized value must equal numpy's.

CI runs a bounded number of examples, derandomized when $CI is set. The larger run:
  TG_FUZZ_EXAMPLES=2000 CACHEDB=/tmp/fuzz.db python -m pytest packages/tg-core/tests/reliability/test_fuzz_schedule.py \\
    --tg-device CLANG -x -q
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

from tg import Device, Tensor, dtypes

EXAMPLES = int(os.getenv("TG_FUZZ_EXAMPLES", "0")) or (60 if Device.DEFAULT == "PYTHON" else 40)
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=bool(os.getenv("CI")), database=None,
                    phases=set(Phase) - {Phase.explain}, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
MAX_NUMEL = 1024  # keeps every example cheap, on the PYTHON interpreter too


@dataclass
class Val:
  """One value of the program, in tg and in numpy."""
  t: Tensor
  n: np.ndarray

  @property
  def shape(self) -> tuple[int, ...]:
    return self.n.shape


def _is_int(v: Val) -> bool:
  return v.n.dtype.kind in "iu"


def _is_bool(v: Val) -> bool:
  return v.n.dtype == np.bool_


# ---------- the ops: each draws its arguments from `draw` and returns a new Val (or None when it doesn't apply) ----------

def _reshape(draw, v: Val) -> Val | None:  # type: ignore[no-untyped-def]
  shape = v.shape
  kind = draw(st.sampled_from(["merge", "split", "add1", "remove1", "flat"]))
  if kind == "merge" and len(shape) >= 2:
    i = draw(st.integers(0, len(shape) - 2))
    new = shape[:i] + (shape[i] * shape[i + 1],) + shape[i + 2:]
  elif kind == "split" and (cands := [(i, d) for i, s in enumerate(shape) for d in range(2, s) if s % d == 0]):
    i, d = draw(st.sampled_from(cands))
    new = shape[:i] + (d, shape[i] // d) + shape[i + 1:]
  elif kind == "add1" and len(shape) < 4:
    i = draw(st.integers(0, len(shape)))
    new = shape[:i] + (1,) + shape[i:]
  elif kind == "remove1" and 1 in shape:
    i = draw(st.sampled_from([i for i, s in enumerate(shape) if s == 1]))
    new = shape[:i] + shape[i + 1:]
  elif kind == "flat":
    new = (v.n.size,)
  else:
    return None
  return Val(v.t.reshape(new), v.n.reshape(new))


def _permute(draw, v: Val) -> Val | None:  # type: ignore[no-untyped-def]
  if len(v.shape) < 2:
    return None
  order = tuple(draw(st.permutations(range(len(v.shape)))))
  return Val(v.t.permute(order), np.transpose(v.n, order))


def _expand(draw, v: Val) -> Val | None:  # type: ignore[no-untyped-def]
  if 1 not in v.shape:
    return None
  new = tuple(draw(st.integers(1, 5)) if s == 1 else s for s in v.shape)
  if int(np.prod(new)) > MAX_NUMEL:
    return None
  return Val(v.t.expand(new), np.broadcast_to(v.n, new))


def _pad(draw, v: Val) -> Val | None:  # type: ignore[no-untyped-def]
  pads = [(draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in v.shape]
  if int(np.prod([s + a + b for s, (a, b) in zip(v.shape, pads)])) > MAX_NUMEL:
    return None
  return Val(v.t.pad(pads), np.pad(v.n, pads))


def _shrink(draw, v: Val) -> Val | None:  # type: ignore[no-untyped-def]
  bounds = []
  for s in v.shape:
    b = draw(st.integers(0, s - 1))
    bounds.append((b, draw(st.integers(b + 1, s))))
  return Val(v.t.shrink(bounds), v.n[tuple(slice(b, e) for b, e in bounds)])


def _flip(draw, v: Val) -> Val | None:  # type: ignore[no-untyped-def]
  axes = draw(st.lists(st.integers(0, len(v.shape) - 1), min_size=1, max_size=len(v.shape), unique=True))
  return Val(v.t.flip(axes), np.flip(v.n, axes))


def _unary(draw, v: Val) -> Val | None:  # type: ignore[no-untyped-def]
  op = draw(st.sampled_from(["neg", "relu", "abs", "tanh", "cast"]))
  if _is_bool(v):  # a comparison's result: to 0/1 of float32 or int32
    dt = draw(st.sampled_from([(dtypes.float32, np.float32), (dtypes.int32, np.int32)]))
    return Val(v.t.cast(dt[0]), v.n.astype(dt[1]))
  if op == "neg":
    return Val(-v.t, -v.n)
  if op == "relu":
    return Val(v.t.relu(), np.maximum(v.n, 0))
  if op == "abs":
    return Val(v.t.abs(), np.abs(v.n))
  if op == "tanh" and not _is_int(v):
    return Val(v.t.tanh(), np.tanh(v.n))
  if op == "cast":  # int <-> float: exact on the small integers ints hold here; floats are scaled first to keep their
    if _is_int(v):  # fraction out of the truncation's way only where they are exact (inputs), so cast ints only
      return Val(v.t.cast(dtypes.float32), v.n.astype(np.float32))
    return Val((v.t < 0).cast(dtypes.int32), (v.n < 0).astype(np.int32))
  return None


def _partner(draw, v: Val, pool: list[Val]) -> Val | None:  # type: ignore[no-untyped-def]
  """A value of the pool that broadcasts to v's shape and has v's dtype (any but bool, for a bool v)."""
  cands = [p for p in pool if p.n.ndim == v.n.ndim and all(a in (1, b) for a, b in zip(p.shape, v.shape))
           and (p.n.dtype == v.n.dtype if not _is_bool(v) else not _is_bool(p))]
  return draw(st.sampled_from(cands)) if cands else None


def _rounding_decides(a: np.ndarray, b: np.ndarray) -> bool:
  """Some float elements of a and b are within rounding of each other, so which is smaller depends on the order each
  was computed in, and tg's order is not numpy's (numpy itself sums a row and the row padded with a zero to 1.0092593
  and 1.0092595, where tg gets 1.0092593 twice): a comparison of them tests nothing but that order."""
  if a.dtype.kind != "f" and b.dtype.kind != "f":
    return False
  x, y = np.broadcast_arrays(a.astype(np.float64), b.astype(np.float64))
  return bool(np.isclose(x, y, rtol=1e-5, atol=1e-6).any())


def _binary(draw, v: Val, pool: list[Val]) -> Val | None:  # type: ignore[no-untyped-def]
  if _is_bool(v):  # a comparison's result chooses between two values
    w = _partner(draw, v, [p for p in pool if not _is_bool(p)] + [Val(Tensor(np.ones(v.shape, np.float32)), np.ones(v.shape, np.float32))])
    if w is None:
      return None
    return Val(v.t.where(w.t, -w.t), np.where(v.n, w.n, -w.n))
  w = _partner(draw, v, pool)
  if w is None or (draw(st.booleans()) and w is v):
    c = draw(st.sampled_from([2, -1, 0]))
    w = Val(Tensor(np.full((1,) * v.n.ndim, c, v.n.dtype)), np.full((1,) * v.n.ndim, c, v.n.dtype))
  op = draw(st.sampled_from(["add", "sub", "mul", "max", "lt", "where", "bool"]))
  if op in ("bool", "lt") and w is not v and _rounding_decides(v.n, w.n):
    return None
  if op == "bool":  # a comparison kept as a bool value
    return Val(w.t < v.t, w.n < v.n)
  if op == "add":
    return Val(v.t + w.t, v.n + w.n)
  if op == "sub":
    return Val(v.t - w.t, v.n - w.n)
  if op == "mul":
    return Val(v.t * w.t, v.n * w.n)
  if op == "max":
    return Val(v.t.maximum(w.t), np.maximum(v.n, w.n))
  if op == "lt":  # a comparison of equal values is exact in both: the bool becomes 0/1 of v's dtype
    return Val((v.t < w.t).cast(v.t.dtype), (v.n < w.n).astype(v.n.dtype))
  return Val((v.t < w.t).where(v.t, w.t), np.where(v.n < w.n, v.n, w.n))


def _reduce(draw, v: Val) -> Val | None:  # type: ignore[no-untyped-def]
  axes = tuple(sorted(draw(st.lists(st.integers(0, len(v.shape) - 1), min_size=1, max_size=len(v.shape), unique=True))))
  keepdim = draw(st.booleans())
  if draw(st.booleans()):
    return Val(v.t.max(axes, keepdim=keepdim), np.asarray(v.n.max(axis=axes, keepdims=keepdim)))
  # int32 stays int32 (tg's sum dtype may widen: values are compared), bools are counted
  n = v.n.sum(axis=axes, keepdims=keepdim, dtype=None if _is_bool(v) else v.n.dtype)
  return Val(v.t.sum(axes, keepdim=keepdim), np.asarray(n))


MOVEMENT = {"reshape": _reshape, "permute": _permute, "expand": _expand, "pad": _pad, "shrink": _shrink, "flip": _flip}


def _step(draw, pool: list[Val]) -> Val | None:  # type: ignore[no-untyped-def]
  v = draw(st.sampled_from(pool[-3:] if draw(st.booleans()) else pool))  # mostly chains, sometimes an older value again
  kind = draw(st.sampled_from([*MOVEMENT, "unary", "binary", "binary", "reduce", "reduce"]))
  event(kind)
  if kind in MOVEMENT:
    return MOVEMENT[kind](draw, v) if v.n.ndim or kind == "reshape" else None  # type: ignore[no-any-return]
  if kind == "unary":
    return _unary(draw, v)
  if kind == "binary":
    return _binary(draw, v, pool)
  return _reduce(draw, v) if v.n.ndim else None


def _input(draw, rng: np.random.Generator) -> Val:  # type: ignore[no-untyped-def]
  shape = tuple(draw(st.lists(st.integers(1, 7), min_size=1, max_size=3)))
  n = rng.integers(-3, 4, shape).astype(np.int32) if draw(st.integers(0, 3)) == 0 else rng.standard_normal(shape).astype(np.float32)
  return Val(Tensor(n), n)


def _check(v: Val, what: str) -> None:
  got = v.t.numpy()
  assert got.shape == v.n.shape, f"{what}: shape {got.shape} != numpy's {v.n.shape}"
  want = v.n.astype(np.float64)
  scale = max(1.0, float(np.abs(want).max(initial=0)))
  np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-4, atol=1e-4 * scale, err_msg=what)


@SETTINGS
@given(st.data())
def test_random_graphs_match_numpy(data: st.DataObject) -> None:
  draw = data.draw
  rng = np.random.default_rng(draw(st.integers(0, 2**16), label="seed"))
  pool = [_input(draw, rng) for _ in range(draw(st.integers(1, 2), label="inputs"))]
  realized: list[tuple[Val, str]] = []
  for i in range(draw(st.integers(1, 12), label="steps")):
    new = _step(draw, pool)
    if new is None:
      continue
    pool.append(new)
    event(f"dtype {new.n.dtype}")
    if draw(st.integers(0, 4), label=f"realize step {i}") == 0:  # a schedule of its own, its buffer read by later ones
      new.t.realize()
      realized.append((new, f"value {len(pool) - 1} realized early"))
  outs = [pool[-1], *draw(st.lists(st.sampled_from(pool), max_size=2), label="more outputs")]
  Tensor.realize_all(*(o.t for o in outs))
  for k, o in enumerate(outs):
    _check(o, f"output {k}")
  for v, what in realized:
    _check(v, what)
