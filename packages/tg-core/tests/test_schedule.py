"""Kernel fusion: how many ScheduleItems the scheduler makes for small graphs.

These tests use tinygrad 0.9's scheduler API, `create_schedule(outs: list[LazyBuffer]) -> list[ScheduleItem]`, through the single
adapter `_schedule` below; if tg's scheduler API differs, adapt `_schedule` (and nothing else). All tests here carry the
`schedule` marker (`pytest -m "not schedule"` leaves them out).

As in tinygrad, a LazyBuffer can be scheduled only once, so each test schedules one instance of its graph and checks the
values of a second, identical instance.
"""
import numpy as np
import pytest

from tg import Tensor
from tg.engine.schedule import create_schedule

pytestmark = pytest.mark.schedule


def _schedule(*tensors):
  """The ScheduleItems that realizing `tensors` takes (tinygrad 0.9: create_schedule over their lazydata)."""
  return create_schedule([t.lazydata for t in tensors])


def _inputs(*shapes, seed=0):
  """Realized float32 input tensors with their numpy values."""
  rng = np.random.default_rng(seed)
  arrs = [rng.uniform(-2, 2, size=s).astype(np.float32) for s in shapes]
  return arrs, [Tensor(a).realize() for a in arrs]


def _check(fn, shapes, n_kernels, atol=1e-5, rtol=1e-4):
  """fn over realized inputs of `shapes` schedules into `n_kernels` items and computes what fn computes on numpy inputs."""
  arrs, ts = _inputs(*shapes)
  sched = _schedule(fn(*ts))
  assert isinstance(sched, list)
  assert len(sched) == n_kernels, f"expected {n_kernels} ScheduleItems, got {len(sched)}: {sched}"
  np.testing.assert_allclose(fn(*ts).numpy(), fn(*arrs), atol=atol, rtol=rtol)


def _relu(x):
  return x.relu() if isinstance(x, Tensor) else np.maximum(x, 0)


def _exp(x):
  return x.exp() if isinstance(x, Tensor) else np.exp(x)


def _sum(x, axis, keepdim=False):
  return x.sum(axis=axis, keepdim=keepdim) if isinstance(x, Tensor) else x.sum(axis=axis, keepdims=keepdim)


def test_elementwise_chain_is_one_kernel():
  _check(lambda a, b, c: _relu(a * b + c), [(4, 5), (4, 5), (4, 5)], 1)


def test_longer_elementwise_chain_is_one_kernel():
  _check(lambda a, b, c: _exp(_relu(a * b + c) * 2 - a / (c * c + 1)), [(3, 4), (3, 4), (3, 4)], 1, atol=1e-4, rtol=1e-3)


def test_broadcast_elementwise_chain_is_one_kernel():
  _check(lambda a, b, c: _relu(a * b + c), [(4, 5), (1, 5), (4, 1)], 1)


def test_mul_then_reduce_is_one_kernel():
  _check(lambda a, b: _sum(a * b, axis=1), [(4, 6), (4, 6)], 1)


def test_mul_then_reduce_keepdim_is_one_kernel():
  _check(lambda a, b: _sum(a * b, axis=0, keepdim=True), [(4, 6), (4, 6)], 1)


def test_realized_tensor_schedules_nothing():
  (na, nb), (a, b) = _inputs((3, 3), (3, 3))
  out = (a + b).realize()
  assert len(_schedule(out)) == 0
  np.testing.assert_allclose(out.numpy(), na + nb, atol=1e-6)


def test_arange_is_computed_where_it_is_read():
  """Tensor.arange is positions (an IOTA), no kernel of its own: it used to be a sliding-window count (one reduction
  kernel, or three past 256 elements) stored whole before the kernel that read it."""
  (a,), (x,) = _inputs((3, 1000))
  for n_out, t, want in [
      (1, x + Tensor.arange(1000), a + np.arange(1000)),
      (1, x * Tensor.arange(3000).reshape(3, 1000).flip(1), a * np.arange(3000).reshape(3, 1000)[:, ::-1]),
      (1, (Tensor.arange(1000).reshape(1, 1000) < Tensor.arange(400, 1000, 200).reshape(3, 1)).where(x, 0),
       np.where(np.arange(1000)[None] < np.arange(400, 1000, 200)[:, None], a, 0)),
      (1, x.sum(1) + Tensor.arange(3, 30, 9), a.sum(1) + np.arange(3, 30, 9)),
      (1, Tensor.arange(70000).pad(((2, 3),)).reshape(5, 14001), np.pad(np.arange(70000), (2, 3)).reshape(5, 14001))]:
    assert len(_schedule(t)) == n_out
    np.testing.assert_allclose(t.numpy(), want, rtol=1e-5, atol=1e-4)
