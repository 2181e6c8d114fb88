"""Tensor.shard: a tensor split over two instances of the test device (DEVICE and DEVICE:1), checked against the same
computation on one device (numpy or tg), for every kind of op, backward, an optimizer step, TinyJit and nn.state."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tg import Device, GlobalCounters, Tensor, TinyJit, dtypes, nn
from tg.errors import ShapeError
from tg.multi import MultiLazyBuffer
from tg.nn.optim import SGD, Adam
from tg.nn.state import get_parameters, get_state_dict, load_state_dict
from tg.testing import second_instance

rng = np.random.default_rng(0)


@pytest.fixture(params=["one after another", "side by side"])
def devs(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
  """The two instances; every test runs twice on CPU devices: their kernels one after another (STREAMS=0), and side by
  side on a thread per instance however small the work (tg/engine/streams.py)."""
  from tg.engine import streams
  from tg.settings import STREAMS
  if request.param == "side by side":
    if not streams.host_cores(Device.DEFAULT):
      pytest.skip("only CPU devices run instances side by side")
    monkeypatch.setattr(streams, "MIN_ITEM_S", 0.0)
  else:
    monkeypatch.setattr(STREAMS, "value", 0)
  return (Device.DEFAULT, second_instance())


def _np(shape: tuple[int, ...], dtype: Any = np.float32) -> np.ndarray:
  return rng.standard_normal(shape).astype(dtype) if dtype == np.float32 else rng.integers(-50, 50, shape).astype(dtype)


def _axis(t: Tensor) -> int | None:
  assert isinstance(t.lazydata, MultiLazyBuffer)
  return t.lazydata.axis


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_shard_places_a_part_on_each_device(devs: tuple[str, str], axis: int | None) -> None:
  a = _np((4, 6))
  t = Tensor(a).shard(devs, axis=axis)
  assert t.device == devs and t.shape == (4, 6) and t.dtype == dtypes.float32 and _axis(t) == axis
  mlb = t.lazydata
  assert isinstance(mlb, MultiLazyBuffer)
  assert [lb.device for lb in mlb.lbs] == list(devs)
  assert [lb.shape for lb in mlb.lbs] == [(4, 6) if axis is None else (2, 6) if axis == 0 else (4, 3)] * 2
  np.testing.assert_array_equal(t.numpy(), a)
  for i, lb in enumerate(mlb.lbs):  # each device holds its own slice
    part = Tensor(lb).numpy()
    np.testing.assert_array_equal(part, a if axis is None else a[2 * i:2 * i + 2] if axis == 0 else a[:, 3 * i:3 * i + 3])


def test_shard_refuses_what_it_cant_split(devs: tuple[str, str]) -> None:
  with pytest.raises(ShapeError, match="multiple of 2"):
    Tensor.ones(3, 4).shard(devs, axis=0)
  t = Tensor.ones(4, 4).shard(devs, axis=0)
  with pytest.raises(RuntimeError, match="already sharded"):
    t.shard(devs, axis=1)
  with pytest.raises(RuntimeError, match="different devices"):
    _ = t + Tensor.ones(4, 4).shard((devs[0], devs[0]), axis=0)
  with pytest.raises(RuntimeError, match="different devices"):
    _ = t + Tensor.ones(4, 4)
  with pytest.raises(TypeError):
    Tensor.ones(4).shard(devs[0])  # type: ignore[arg-type]


@pytest.mark.parametrize("ax,bx", [(0, 0), (0, 1), (1, None), (None, 0), (None, None)])
def test_elementwise_reshards_as_needed(devs: tuple[str, str], ax: int | None, bx: int | None) -> None:
  a, b = _np((4, 6)), _np((4, 6))
  ta, tb = Tensor(a).shard(devs, axis=ax), Tensor(b).shard(devs, axis=bx)
  out = (ta * tb + 1).relu() - tb.exp() / 2
  np.testing.assert_allclose(out.numpy(), np.maximum(a * b + 1, 0) - np.exp(b) / 2, rtol=1e-5, atol=1e-5)
  assert out.device == devs


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("reduce_axis", [None, 0, 1])
def test_reductions_over_and_across_the_sharded_axis(devs: tuple[str, str], axis: int, reduce_axis: int | None) -> None:
  a = _np((4, 6))
  t = Tensor(a).shard(devs, axis=axis)
  np.testing.assert_allclose(t.sum(axis=reduce_axis).numpy(), a.sum(axis=reduce_axis), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(t.max(axis=reduce_axis).numpy(), a.max(axis=reduce_axis))
  np.testing.assert_allclose(t.mean(axis=reduce_axis).numpy(), a.mean(axis=reduce_axis), rtol=1e-5, atol=1e-6)
  red = t.sum(axis=reduce_axis)
  # reduced over the sharded axis: every device holds the whole result; else it stays split (the axis renumbered)
  assert _axis(red) == (None if reduce_axis in (None, axis) else axis - (reduce_axis < axis))


def test_integer_sums_and_argmax(devs: tuple[str, str]) -> None:
  a = _np((6, 4), np.int32)
  t = Tensor(a).shard(devs, axis=0)
  assert t.sum().item() == int(a.sum())
  np.testing.assert_array_equal(t.sum(axis=0).numpy(), a.sum(axis=0))
  np.testing.assert_array_equal(t.argmax(axis=0).numpy(), a.argmax(axis=0))


@pytest.mark.parametrize("ax,bx", [(0, None), (None, 1), (1, 0), (0, 1), (1, None), (None, None)])
def test_matmul_with_either_operand_sharded(devs: tuple[str, str], ax: int | None, bx: int | None) -> None:
  a, b = _np((4, 6)), _np((6, 8))
  out = Tensor(a).shard(devs, axis=ax) @ Tensor(b).shard(devs, axis=bx)
  np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-5, atol=1e-5)


def test_movement_ops(devs: tuple[str, str]) -> None:
  a = _np((4, 6))
  t = Tensor(a).shard(devs, axis=0)
  checks = {
    "reshape keeping the split": (t.reshape(2, 2, 6), a.reshape(2, 2, 6)),
    "reshape across the split": (t.reshape(6, 4), a.reshape(6, 4)),
    "flatten": (t.reshape(24), a.reshape(24)),
    "permute": (t.permute(1, 0), a.T),
    "expand": (t.reshape(4, 1, 6).expand(4, 3, 6), np.broadcast_to(a.reshape(4, 1, 6), (4, 3, 6))),
    "pad other axis": (t.pad(((0, 0), (1, 2))), np.pad(a, ((0, 0), (1, 2)))),
    "pad sharded axis": (t.pad(((1, 1), (0, 0))), np.pad(a, ((1, 1), (0, 0)))),
    "shrink other axis": (t[:, 1:4], a[:, 1:4]),
    "shrink sharded axis": (t[1:3], a[1:3]),
    "index": (t[3, 2], a[3, 2]),
    "flip sharded axis": (t.flip(0), a[::-1]),
    "flip other axis": (t.flip(1), a[:, ::-1]),
    "stride": (t[::2, ::3], a[::2, ::3]),
    "cat": (Tensor.cat(t, t, dim=1), np.concatenate([a, a], axis=1)),
  }
  for name, (got, want) in checks.items():
    np.testing.assert_array_equal(got.numpy(), want, err_msg=name)
  assert _axis(t.reshape(2, 2, 6)) == 0 and _axis(t.permute(1, 0)) == 1 and _axis(t[:, 1:4]) == 0


def test_setitem_and_assign(devs: tuple[str, str]) -> None:
  a = _np((4, 6))
  t = Tensor(a).shard(devs, axis=0).contiguous().realize()
  parts = [lb.base.buffer for lb in t.lazydata.lbs]  # type: ignore[union-attr]
  t.assign(Tensor(a * 2).shard(devs, axis=1)).realize()  # split another way: resharded into t's own buffers
  np.testing.assert_array_equal(t.numpy(), a * 2)
  assert _axis(t) == 0 and [lb.base.buffer for lb in t.lazydata.lbs] == parts  # type: ignore[union-attr]
  t[1:3, 2] = 7.0
  want = a * 2
  want[1:3, 2] = 7.0
  np.testing.assert_array_equal(t.numpy(), want)


@pytest.mark.parametrize("axis", [0, 1])
def test_assign_into_a_view_across_the_split_raises_and_writes_nothing(devs: tuple[str, str], axis: int) -> None:
  """A slice that cuts the split axis is a copy gathered from the parts: an assign into it can't write the tensor, and
  says so (swapping the view's value dropped the write without a word). A slice that keeps the split axis whole is a
  view of each part and writes through; setitem writes either."""
  from tg.engine import realize
  a = _np((4, 6))
  t = Tensor(a).shard(devs, axis=axis).contiguous().realize()
  cut = t[0:2] if axis == 0 else t[:, 2:4]
  for view in (cut, cut.reshape(-1), cut.permute(1, 0)[1:]):
    with pytest.raises(NotImplementedError, match="split axis"):
      view.assign(Tensor.ones(*view.shape).shard(devs))
  np.testing.assert_array_equal(t.numpy(), a)
  kept = t[:, 1:3] if axis == 0 else t[1:3]
  kept.assign(Tensor.full(kept.shape, 5.0).shard(devs, axis=axis)).realize()
  want = a.copy()
  want[(slice(None), slice(1, 3)) if axis == 0 else (slice(1, 3),)] = 5.0
  np.testing.assert_array_equal(t.numpy(), want)
  t[0:2, 2:4] = 9.0
  want[0:2, 2:4] = 9.0
  np.testing.assert_array_equal(t.numpy(), want)
  assert not realize.capture_open()


def test_sharded_cache_written_at_a_variable_position_in_a_jit(devs: tuple[str, str]) -> None:
  """A KV cache split along its time axis, written one position per call by setitem with a bound Variable."""
  from tg import Variable
  cache = Tensor.zeros(8, 4).contiguous().shard(devs, axis=0).realize()
  pos = Variable("pos", 0, 7)

  @TinyJit
  def write(x: Tensor, p: Any) -> Tensor:
    cache[p:p + 1, :] = x
    return cache.sum(axis=1).realize()
  want = np.zeros((8, 4), np.float32)
  for p in range(6):
    x = np.full((1, 4), p + 1, np.float32)
    out = write(Tensor(x).shard(devs), pos.bind(p))
    want[p] = x[0]
    np.testing.assert_array_equal(out.numpy(), want.sum(axis=1), err_msg=f"position {p}")
  np.testing.assert_array_equal(cache.numpy(), want)


def test_shard_of_a_0d_tensor_along_an_axis_raises(devs: tuple[str, str]) -> None:
  from tg.errors import AxisError
  for axis in (0, -1):
    with pytest.raises(AxisError, match="0-d"):
      Tensor(3.0).shard(devs, axis=axis)
  np.testing.assert_array_equal(Tensor(3.0).shard(devs).numpy(), np.float32(3.0))


def test_to_gathers_or_replicates(devs: tuple[str, str]) -> None:
  a = _np((4, 6))
  t = Tensor(a).shard(devs, axis=1)
  for d in devs:
    g = t.to(d)
    assert g.device == d and not isinstance(g.lazydata, MultiLazyBuffer)
    np.testing.assert_array_equal(g.numpy(), a)
  r = Tensor(a).to(devs)
  assert r.device == devs and _axis(r) is None
  np.testing.assert_array_equal(r.numpy(), a)
  z = Tensor.zeros(2, 3, device=devs)
  assert z.device == devs and z.numpy().sum() == 0
  u = Tensor.rand(8, device=devs).realize()  # drawn once, the same on every device
  parts = [Tensor(lb).numpy() for lb in u.lazydata.lbs]  # type: ignore[union-attr]
  np.testing.assert_array_equal(parts[0], parts[1])


def test_one_kernel_per_device(devs: tuple[str, str]) -> None:
  t = Tensor(_np((4, 6))).shard(devs, axis=0).realize()
  GlobalCounters.reset()
  out = (t * 2 + 1).realize()
  assert GlobalCounters.kernel_count == 2, "an elementwise op on a sharded tensor is one kernel on each device, no copies"
  assert all(lb.base.realized is not None for lb in out.lazydata.lbs)  # type: ignore[union-attr]


def test_all_reduce_as_a_ring_gives_every_device_the_same_bits(devs: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
  import tg.multi
  monkeypatch.setattr(tg.multi, "RING_MIN_ELEMENTS", 1)  # the ring at a small size (it is used from 3 devices on)
  four = (devs[0], devs[1], f"{Device.DEFAULT}:2", f"{Device.DEFAULT}:3")
  a = _np((8, 12))
  s = Tensor(a).shard(four, axis=0).sum(axis=0)
  parts = [Tensor(lb).numpy() for lb in s.lazydata.lbs]  # type: ignore[union-attr]
  for p in parts[1:]:
    np.testing.assert_array_equal(p, parts[0])
  np.testing.assert_allclose(parts[0], a.sum(axis=0), rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal(Tensor(a).shard(four, axis=1).max(axis=1).numpy(), a.max(axis=1))


class _MLP:
  def __init__(self) -> None:
    self.l1, self.l2 = nn.Linear(6, 8), nn.Linear(8, 3)

  def __call__(self, x: Tensor) -> Tensor:
    return self.l2(self.l1(x).relu())


def _train(devs: tuple[str, str] | None, opt_cls: Any, steps: int = 3) -> tuple[list[float], dict[str, np.ndarray]]:
  Tensor.manual_seed(3)
  m = _MLP()
  x_np, y_np = np.random.default_rng(1).standard_normal((8, 6)).astype(np.float32), np.random.default_rng(2).integers(0, 3, 8).astype(np.int32)
  x, y = Tensor(x_np), Tensor(y_np)
  if devs is not None:  # a tensor-parallel first layer (split by output), a row-split second, data split by batch
    m.l1.weight.shard_(devs, axis=0)
    m.l1.bias.shard_(devs, axis=0)
    m.l2.weight.shard_(devs, axis=1)
    m.l2.bias.shard_(devs)
    x, y = x.shard(devs, axis=0), y.shard(devs, axis=0)
  opt = opt_cls(get_parameters(m), lr=0.05)
  losses = []
  with Tensor.train():
    for _ in range(steps):
      opt.zero_grad()
      loss = m(x).sparse_categorical_crossentropy(y)
      loss.backward()
      opt.step()
      losses.append(loss.item())
  return losses, {k: v.numpy() for k, v in get_state_dict(m).items()}


@pytest.mark.parametrize("opt_cls", [SGD, Adam])
def test_training_on_sharded_parameters_matches_one_device(devs: tuple[str, str], opt_cls: Any) -> None:
  ref_losses, ref = _train(None, opt_cls)
  losses, got = _train(devs, opt_cls)
  np.testing.assert_allclose(losses, ref_losses, rtol=1e-5, atol=1e-6)
  for k in ref:
    np.testing.assert_allclose(got[k], ref[k], rtol=1e-4, atol=1e-5, err_msg=k)


def test_optimizer_state_is_split_like_its_parameter(devs: tuple[str, str]) -> None:
  w = Tensor.ones(4, 2, requires_grad=True).shard_(devs, axis=0)
  opt = Adam([w])
  assert opt.m[0].device == devs and _axis(opt.m[0]) == 0 and _axis(opt.v[0]) == 0


def test_gradient_flows_back_through_shard_and_to(devs: tuple[str, str]) -> None:
  a = _np((4, 6))
  x = Tensor(a, requires_grad=True)
  y = x.shard(devs, axis=1)
  (y.relu() * 3).to(devs[1]).sum().backward()
  assert x.grad is not None and x.grad.device == Device.DEFAULT
  np.testing.assert_allclose(x.grad.numpy(), (a > 0) * 3.0)


def test_tinyjit_replays_sharded_work(devs: tuple[str, str]) -> None:
  w_np = _np((6, 4))
  w = Tensor(w_np).shard(devs, axis=1).realize()

  @TinyJit
  def f(x: Tensor) -> Tensor:
    return (x @ w).relu().sum(axis=1).realize()
  for i in range(4):
    x_np = _np((8, 6))
    out = f(Tensor(x_np).shard(devs, axis=0))
    np.testing.assert_allclose(out.numpy(), np.maximum(x_np @ w_np, 0).sum(axis=1), rtol=1e-5, atol=1e-5, err_msg=f"call {i}")
  assert f.cnt == 4 and len(f.kernels) > 0


def test_load_state_dict_into_a_sharded_model(devs: tuple[str, str]) -> None:
  src = nn.Linear(6, 4)
  want = {k: v.numpy() for k, v in get_state_dict(src).items()}
  dst = nn.Linear(6, 4)
  dst.weight.shard_(devs, axis=0)
  dst.bias.shard_(devs, axis=0)
  load_state_dict(dst, get_state_dict(src))
  assert _axis(dst.weight) == 0 and dst.weight.device == devs
  np.testing.assert_array_equal(dst.weight.numpy(), want["weight"])
  np.testing.assert_array_equal(dst.bias.numpy(), want["bias"])


def test_a_mix_of_devices() -> None:
  """Any instances of any installed devices: here the test device beside the PYTHON interpreter (always installed)."""
  a, b = _np((4, 6)), _np((6, 2))
  mix = (Device.DEFAULT, "PYTHON")
  out = Tensor(a).shard(mix, axis=0) @ Tensor(b).shard(mix)
  assert out.device == mix
  np.testing.assert_allclose(out.numpy(), a @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["matmul", "softmax", "sum", "mean_var"])
def test_every_kernel_runs_on_one_device(devs: tuple[str, str], op: str) -> None:
  """The parts of a sharded computation are the same kernels on each device: the scheduler must never merge them into one
  kernel (same-shaped sibling reductions share a kernel on one device) that would read another device's memory."""
  from tg.engine.schedule import create_schedule
  from tg.ops import MetaOps
  a = Tensor(_np((8, 16))).shard(devs, axis=0).realize()
  b = Tensor(_np((16, 16))).shard(devs).realize()
  out = {"matmul": lambda: a @ b, "softmax": lambda: a.softmax(axis=1), "sum": lambda: a.sum(axis=1),
         "mean_var": lambda: a.mean(axis=1) + a.var(axis=1)}[op]()
  sched = create_schedule(list(out.lazydata.lbs))  # type: ignore[union-attr]
  kernels = [si for si in sched if si.ast.op not in (MetaOps.COPY, MetaOps.EMPTY)]
  assert len(kernels) % 2 == 0 and kernels
  for si in kernels:
    assert len({buf.device for buf in si.bufs}) == 1, f"a kernel reads buffers of {sorted({buf.device for buf in si.bufs})}"


def test_the_edges_of_sharded_values(devs: tuple[str, str]) -> None:
  """float16 sums accumulate in float32 across the parts too, NaN reaches every device through the all-reduce, an empty
  tensor splits into empty parts."""
  h = np.full((2, 70000), 0.5, dtype=np.float16)
  th = Tensor(h).shard(devs, axis=1)
  assert th.mean().item() == 0.5 and th.sum().dtype == dtypes.float16
  n = np.array([[1.0, np.nan], [3.0, 4.0]], dtype=np.float32)
  mx = Tensor(n).shard(devs, axis=0).max(axis=0)
  for lb in mx.lazydata.lbs:  # type: ignore[union-attr]
    np.testing.assert_array_equal(Tensor(lb).numpy(), [3.0, np.nan])
  e = Tensor.zeros(0, 4).shard(devs, axis=0)
  assert (e + 1).numpy().shape == (0, 4) and e.sum(axis=0).numpy().tolist() == [0.0] * 4


def test_a_failed_sharded_realize_leaves_nothing_that_looks_computed(devs: tuple[str, str]) -> None:
  """A MemoryError in one device's kernel: the other parts may have run, but every part reads right afterwards."""
  from tg.engine import realize
  a = _np((4, 6))
  t = Tensor(a).shard(devs, axis=0).realize()
  out = (t * 2 + 1).exp()
  orig, calls = realize.CompiledRunner.__call__, [0]

  def failing(self: Any, *args: Any, **kwargs: Any) -> Any:
    calls[0] += 1
    if calls[0] == 2:
      raise MemoryError("injected")
    return orig(self, *args, **kwargs)
  realize.CompiledRunner.__call__ = failing  # type: ignore[method-assign]
  try:
    with pytest.raises(MemoryError):
      out.realize()
  finally:
    realize.CompiledRunner.__call__ = orig  # type: ignore[method-assign]
  np.testing.assert_allclose(out.numpy(), np.exp(a * 2 + 1), rtol=1e-5)


def test_multinomial_of_sharded_weights(devs: tuple[str, str]) -> None:
  """Rows sharded over two instances: distinct indices without replacement, and invalid weights in one part raise."""
  w = Tensor([[1.0, 2.0, 0.0], [3.0, 4.0, 5.0]]).shard(devs, axis=0)
  s = w.multinomial(3).numpy()
  assert [sorted(r) for r in s.tolist()] == [[0, 1, 2], [0, 1, 2]] and s[0, 2] == 2
  for bad, msg in [([[1.0, 2.0, 0.0], [0.0, 0.0, 0.0]], "sum of probabilities"), ([[1.0, -2.0, 0.0], [1.0, 0.0, 0.0]], "element < 0")]:
    with pytest.raises(RuntimeError, match=msg):
      Tensor(bad).shard(devs, axis=0).multinomial(2).numpy()
