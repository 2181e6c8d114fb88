"""The lazy graph: constant folding as it is built, nothing computed before realize, realized buffers reused, fusion.

As in test_schedule.py, a LazyBuffer can be scheduled only once, so a test that checks both the schedule and the values
builds one instance of its graph for each.
"""
import numpy as np

from tg import Tensor, dtypes
from tg.engine.schedule import create_schedule
from tg.helpers import GlobalCounters


def _inputs(*shapes, seed=0):
  rng = np.random.default_rng(seed)
  arrs = [rng.uniform(-2, 2, size=s).astype(np.float32) for s in shapes]
  return arrs, [Tensor(a).realize() for a in arrs]


# ---------- folding identities ----------


def test_mul_one_is_identity():
  x = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3)).realize()
  assert (x * 1).lazydata is x.lazydata
  assert (1 * x).lazydata is x.lazydata
  assert (x * 1.0).lazydata is x.lazydata


def test_add_zero_is_identity():
  x = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3)).realize()
  assert (x + 0).lazydata is x.lazydata
  assert (0 + x).lazydata is x.lazydata
  assert (x + 0.0).lazydata is x.lazydata


def test_identity_int():
  x = Tensor(np.arange(6, dtype=np.int32)).realize()
  assert x.dtype == dtypes.int32
  assert (x * 1).lazydata is x.lazydata
  assert (x + 0).lazydata is x.lazydata


def test_identity_schedules_nothing():
  x = Tensor(np.arange(6, dtype=np.float32)).realize()
  assert create_schedule([(x * 1 + 0).lazydata]) == []


# ---------- constants fold to one constant ----------


def test_const_arith_folds():
  sched = create_schedule([(Tensor.full((3, 4), 2.0) * 3 + 1).lazydata])
  assert len(sched) == 1, sched
  assert sched[0].inputs == (), f"a folded constant reads no buffer, got {sched[0].inputs}"
  out = (Tensor.full((3, 4), 2.0) * 3 + 1).numpy()
  assert out.shape == (3, 4)
  np.testing.assert_equal(out, np.full((3, 4), 7.0, dtype=np.float32))


def test_const_arith_folds_in_graph():
  t = Tensor.full((3, 4), 2.0) * 3 + 1
  assert t.lazydata.is_unrealized_const()
  assert t.lazydata.const_value == 7.0


# ---------- laziness ----------


def test_nothing_runs_before_realize():
  arrs, (a, b) = _inputs((4, 5), (4, 5))
  before = GlobalCounters.kernel_count
  c = (a * b + 1).exp()
  assert GlobalCounters.kernel_count == before, "building the graph ran a kernel"
  assert c.lazydata.base.realized is None
  out = c.numpy()
  assert GlobalCounters.kernel_count > before, "numpy() ran no kernel"
  np.testing.assert_allclose(out, np.exp(arrs[0] * arrs[1] + 1), rtol=1e-5, atol=1e-6)


def test_realized_not_recomputed():
  arrs, (a, b) = _inputs((4, 5), (4, 5))
  c = (a * b).realize()
  cbuf = c.lazydata.base.buffer
  sched = create_schedule([(c + 1).lazydata])
  assert len(sched) == 1, sched
  assert any(buf is cbuf for buf in sched[0].inputs), f"c's buffer is not an input: {sched[0].inputs}"
  assert not any(buf is a.lazydata.base.buffer or buf is b.lazydata.base.buffer for buf in sched[0].inputs), "a*b recomputed"
  np.testing.assert_allclose((c + 1).numpy(), arrs[0] * arrs[1] + 1, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(c.numpy(), arrs[0] * arrs[1], rtol=1e-5, atol=1e-6)


def test_realize_twice_runs_once():
  _, (a, b) = _inputs((3, 3), (3, 3))
  c = (a + b).realize()
  before = GlobalCounters.kernel_count
  c.realize()
  assert GlobalCounters.kernel_count == before
  assert create_schedule([c.lazydata]) == []


# ---------- fusion ----------


def test_elementwise_into_reduce_fuses():
  arrs, (a, b) = _inputs((4, 5), (4, 5))
  sched = create_schedule([(a * b + 1).sum(axis=1).lazydata])
  assert len(sched) == 1, sched
  bufs = {id(a.lazydata.base.buffer), id(b.lazydata.base.buffer)}
  assert {id(x) for x in sched[0].inputs} == bufs
  np.testing.assert_allclose((a * b + 1).sum(axis=1).numpy(), (arrs[0] * arrs[1] + 1).sum(axis=1), rtol=1e-5, atol=1e-5)


def test_padded_elementwise_values():
  (x,), (a,) = _inputs((3, 4))
  out = ((a.exp()).pad(((1, 1), (0, 0))) + 1).numpy()
  ref = np.pad(np.exp(x), ((1, 1), (0, 0))) + 1
  assert out.shape == (5, 4)
  np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
  np.testing.assert_equal(out[0], np.ones(4, dtype=np.float32))
  np.testing.assert_equal(out[-1], np.ones(4, dtype=np.float32))


def test_padded_elementwise_into_reduce_values():
  (x,), (a,) = _inputs((3, 4))
  out = ((a.exp()).pad(((1, 1), (2, 0))) + 1).sum(axis=0).numpy()
  ref = (np.pad(np.exp(x), ((1, 1), (2, 0))) + 1).sum(axis=0)
  np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


# ---------- a scalar operand is one shared constant (LazyBuffer.operand) ----------


def test_scalar_operand_is_shared_and_right():
  x = Tensor(np.arange(6, dtype=np.float32)).realize()
  a, b = x + 2.5, x + 2.5
  assert a.lazydata.srcs[1] is b.lazydata.srcs[1]  # one constant serves both ops
  np.testing.assert_array_equal(a.numpy(), np.arange(6, dtype=np.float32) + 2.5)
  np.testing.assert_array_equal(b.numpy(), np.arange(6, dtype=np.float32) + 2.5)
  np.testing.assert_array_equal((x + 3.5).numpy(), np.arange(6, dtype=np.float32) + 3.5)  # another value: another constant


def test_scalar_operand_keeps_the_sign_of_zero():
  """0.0 == -0.0, but the shared constants of the two are not one (in either order), and each op computes what the
  same op with an unshared constant (Tensor.full) computes on this device (which may or may not keep signed zeros)."""
  import math
  x = Tensor(np.array([1.0, -1.0], np.float32)).realize()
  for order in ((0.0, -0.0), (-0.0, 0.0)):
    for z in order:
      y = x * z
      assert math.copysign(1.0, y.lazydata.srcs[1].base.arg) == math.copysign(1.0, z)
      want = (x * Tensor.full((2,), z, dtype=dtypes.float32)).numpy()
      assert list(np.signbit(y.numpy())) == list(np.signbit(want)), z


def test_scalar_operand_by_type_and_dtype():
  i = Tensor(np.array([1, 2, 3], np.int32)).realize()
  f = Tensor(np.array([1, 2, 3], np.float32)).realize()
  bl = Tensor(np.array([True, False, True])).realize()
  assert (i + 1).dtype == dtypes.int32 and (i + 1.0).dtype == dtypes.default_float and (f + 1).dtype == dtypes.float32
  np.testing.assert_array_equal((i + 1).numpy(), [2, 3, 4])
  np.testing.assert_allclose((i + 1.5).numpy(), [2.5, 3.5, 4.5])
  np.testing.assert_array_equal((bl + True).numpy(), [True, True, True])  # bool + bool is or, as in torch
  np.testing.assert_array_equal((bl + 1).numpy(), [2, 1, 2])
  assert np.isnan((f + float("nan")).numpy()).all() and np.isnan((f + float("nan")).numpy()).all()


def test_a_realized_shared_operand_is_not_reused():
  """A user never holds the shared constant, but were it realized (and then written in place), no later op may read it."""
  from tg.lazy import LazyBuffer
  x = Tensor(np.ones(4, np.float32)).realize()
  c = LazyBuffer.operand(7.0, (4,), dtypes.float32, x.device)
  held = Tensor(c)
  held.realize()
  assert c.base.op is None  # realized: no longer a CONST
  c2 = LazyBuffer.operand(7.0, (4,), dtypes.float32, x.device)
  assert c2 is not c and c2.base.op is not None
  np.testing.assert_array_equal((x + 7.0).numpy(), [8.0] * 4)
