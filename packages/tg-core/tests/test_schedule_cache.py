"""The schedule cache: a graph of a structure scheduled before gets the same kernels from its plan, over its own buffers,
and computes what a fresh schedule computes (every other test runs with the cache on, too)."""
from __future__ import annotations

import numpy as np
import pytest

from tg import Tensor, Variable
from tg.engine import schedule_cache
from tg.engine.realize import run_schedule
from tg.engine.schedule import create_schedule
from tg.helpers import Context
from tg.nn import Linear
from tg.nn.optim import SGD
from tg.nn.state import get_parameters
from tg.ops import MetaOps

rng = np.random.default_rng(0)


def _data(*shape: int) -> np.ndarray:
  return rng.standard_normal(shape).astype(np.float32)


def _hits(fn: object) -> int:
  """How many create_schedule calls inside fn() found a plan."""
  found = []
  real = schedule_cache.lookup

  def counting(key: object) -> schedule_cache.Plan | None:
    plan = real(key)  # type: ignore[arg-type]
    found.append(plan is not None)
    return plan
  schedule_cache.lookup = counting  # type: ignore[assignment]
  try:
    fn()  # type: ignore[operator]
  finally:
    schedule_cache.lookup = real  # type: ignore[assignment]
  return sum(found)


def test_same_structure_reuses_the_plan_over_new_buffers() -> None:
  a, b = _data(4, 8), _data(8)

  def graph(x: np.ndarray, y: np.ndarray) -> Tensor:
    return ((Tensor(x).realize() * Tensor(y).realize() + 1).relu().sum(1) * 2)

  first = create_schedule([graph(a, b).lazydata])
  for _ in range(3):
    x, y = _data(4, 8), _data(8)
    out = graph(x, y)
    second: list = []
    assert _hits(lambda: second.extend(create_schedule([out.lazydata]))) == 1
    assert [si.ast for si in second] == [si.ast for si in first]
    assert all(s.ast is f.ast for s, f in zip(second, first)), "the plan's AST objects, not equal copies"
    assert not set(second[0].bufs) & set(first[0].bufs), "the new graph's own buffers"
    run_schedule(second)
    np.testing.assert_allclose(out.numpy(), (np.maximum(x * y + 1, 0).sum(1)) * 2, rtol=1e-5, atol=1e-5)


def test_other_constants_shapes_and_dtypes_are_other_structures() -> None:
  x = _data(6)
  t = Tensor(x).realize()
  for c in (2.0, 3.0, float("inf")):
    np.testing.assert_array_equal((t + 1).maximum(c).numpy(), np.maximum(x + 1, np.float32(c)))
  np.testing.assert_allclose(Tensor(x[:4]).realize().exp().numpy(), np.exp(x[:4]), rtol=1e-6)
  np.testing.assert_allclose(Tensor(x.reshape(2, 3)).realize().exp().sum(0).numpy(), np.exp(x.reshape(2, 3)).sum(0), rtol=1e-5)
  ints = Tensor(np.arange(6, dtype=np.int32)).realize()
  np.testing.assert_array_equal((ints + 1).maximum(2).numpy(), np.maximum(np.arange(6) + 1, 2))


@pytest.mark.parametrize("cache", [1, 0])
def test_signed_zeros_and_nans_are_different_constants(cache: int) -> None:
  """-0.0 == 0.0 in Python, but not in a kernel: not for the schedule cache, the compiled kernels or the UOp graph."""
  zeros = Tensor(np.zeros(2, dtype=np.float32)).realize()
  with Context(SCHEDULE_CACHE=cache):
    for c in (0.0, -0.0, float("nan"), 0.0):
      out = (1 / (zeros < 1).where(c, 5.0)).numpy()
      np.testing.assert_array_equal(out, np.full(2, np.copysign(np.inf, c) if c == c else np.nan, dtype=np.float32))


def test_views_are_part_of_the_structure() -> None:
  x = _data(4, 4)
  t = Tensor(x).realize()
  np.testing.assert_allclose((t + 1).numpy(), x + 1)
  np.testing.assert_allclose((t.T + 1).numpy(), x.T + 1)
  np.testing.assert_allclose((t[1:3] + 1).numpy(), x[1:3] + 1)
  np.testing.assert_allclose((t.pad(((1, 0), (0, 1))) + 1).numpy(), np.pad(x, ((1, 0), (0, 1))) + 1)


def test_a_shared_input_differs_from_two_inputs() -> None:
  """x * x reads one buffer; x * y two: their kernels take different arguments."""
  x, y = _data(5), _data(5)
  tx, ty = Tensor(x).realize(), Tensor(y).realize()
  np.testing.assert_allclose((tx * ty).numpy(), x * y, rtol=1e-6)
  np.testing.assert_allclose((tx * tx).numpy(), x * x, rtol=1e-6)
  np.testing.assert_allclose((tx * ty).numpy(), x * y, rtol=1e-6)


def test_symbolic_graphs_are_cached_with_their_bindings() -> None:
  """A graph with symbolic shapes has one structure for every binding of its Variables; the values bound now come
  beside it, and the plan's kernels run with them. A decode step's shape: a buffer of 10 rows read up to a bound
  length, and a row written at a bound position."""
  vi = Variable("i", 1, 10)
  buf_np = _data(10, 4)
  buf = Tensor(buf_np).realize()
  hits = []
  for n in (3, 5, 3, 10, 1):
    found = schedule_cache.structure([(buf.shrink(((0, vi.bind(n)), None)) * 2).sum(0).lazydata])
    assert found is not None and found[2] == {vi: n}
    hits.append(_hits(lambda: np.testing.assert_allclose((buf.shrink(((0, vi.bind(n)), None)) * 2).sum(0).numpy(),
                                                         (buf_np[:n] * 2).sum(0), rtol=1e-5)))
  assert hits[1:] == [1, 1, 1, 1]  # (the first may find the plan of the structure call above)
  vp = Variable("p", 0, 9)
  for p in (2, 7, 0):
    row = _data(1, 4)
    buf.shrink(((vp.bind(p), vp.bind(p) + 1), None)).assign(Tensor(row)).realize()
    buf_np[p] = row
    np.testing.assert_array_equal(buf.numpy(), buf_np)
  # one Variable bound to two values in one graph, or an unbound one: no structure (scheduled fresh, or an error)
  two = buf.shrink(((0, vi.bind(2)), None)).sum(0) + buf.shrink(((0, vi.bind(3)), None)).sum(0)
  assert schedule_cache.structure([two.lazydata]) is None
  assert schedule_cache.structure([buf.shrink(((0, vi), None)).sum(0).lazydata]) is None


def test_cache_can_be_turned_off() -> None:
  x = _data(3)
  t = Tensor(x).realize()
  with Context(SCHEDULE_CACHE=0):
    assert schedule_cache.structure([(t + 7).lazydata]) is None
    assert _hits(lambda: [(t + 7).realize() for _ in range(2)]) == 0
  assert _hits(lambda: [(t + 7).realize() for _ in range(2)]) >= 1


def test_assign_keeps_the_old_value_on_every_call() -> None:
  """Whether an ASSIGN's old value is copied first depends on who still holds it: decided again on a cached plan."""
  for _ in range(3):
    w_np = _data(4)
    w = Tensor(w_np).realize()
    held = w * 1  # the old value itself (x * 1 folds to x)
    sched = create_schedule([w.assign(w + 1).lazydata])
    assert sum(si.ast.op is MetaOps.COPY for si in sched) == 1
    run_schedule(sched)
    np.testing.assert_allclose(held.numpy(), w_np)
    np.testing.assert_allclose(w.numpy(), w_np + 1)
  for _ in range(3):
    w_np = _data(4)
    w = Tensor(w_np).realize()
    sched = create_schedule([w.assign(w + 1).lazydata])
    assert sum(si.ast.op is MetaOps.COPY for si in sched) == 0  # nothing reads the old value
    run_schedule(sched)
    np.testing.assert_allclose(w.numpy(), w_np + 1)


def test_eager_training_steps_match_uncached() -> None:
  """SGD steps on a small model, eagerly: the same losses and weights with the cache as without it."""
  def train(cached: int) -> tuple[list[float], np.ndarray]:
    Tensor.manual_seed(3)
    model = [Linear(8, 16), Linear(16, 2)]
    opt = SGD(get_parameters(model), lr=0.1)
    x, y = Tensor(_fixed(16, 8)), Tensor(_fixed(16, 2, seed=1))
    losses = []
    with Context(SCHEDULE_CACHE=cached), Tensor.train():
      for _ in range(4):
        opt.zero_grad()
        loss = ((model[1](model[0](x).relu()) - y) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model[0].weight.numpy()
  losses, w = train(1)
  ref_losses, ref_w = train(0)
  np.testing.assert_allclose(losses, ref_losses, rtol=1e-6)
  np.testing.assert_allclose(w, ref_w, rtol=1e-6)
  assert losses[-1] < losses[0]


def _fixed(*shape: int, seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("n", [2, 3])
def test_oldest_plans_go_first(n: int, monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.setattr(schedule_cache, "MAX_PLANS", n)
  monkeypatch.setattr(schedule_cache, "_plans", {})
  t = Tensor(_data(3)).realize()
  for c in range(5):
    (t + c).realize()
  assert len(schedule_cache._plans) == n
