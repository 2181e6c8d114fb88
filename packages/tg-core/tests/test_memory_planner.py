"""The memory planner (tg/engine/memory.py): intermediate buffers share memory, and nothing anyone can still read
is ever overwritten. Every test checks numbers, because a wrong reuse shows up only as wrong data."""
from __future__ import annotations

import gc
import itertools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import pytest

from tg import Context, Device, GlobalCounters, Tensor, TinyJit
from tg.device import Allocator, Buffer
from tg.engine import memory
from tg.engine.realize import lower_schedule_item
from tg.engine.schedule import ScheduleItem, create_schedule
from tg.nn import Linear
from tg.nn.optim import Adam
from tg.nn.state import get_parameters, safe_load, safe_save
from tg.testing import second_instance

# the planner carves small buffers out of freed big ones only where the allocator can make views
HAS_VIEWS = type(Device[Device.DEFAULT].allocator).view is not Allocator.view

rng = np.random.default_rng(0)


def arr(*shape: int) -> np.ndarray:
  return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)


def root(b: Buffer) -> Buffer:
  while b._base is not None:
    b = b._base
  return b


@contextmanager
def no_gc() -> Iterator[None]:
  """The planner must not depend on a gc pass to see that a LazyBuffer is gone (CPython frees it at once)."""
  enabled = gc.isenabled()
  gc.disable()
  try:
    yield
  finally:
    if enabled:
      gc.enable()


def plan(*tensors: Tensor) -> tuple[list[ScheduleItem], list[ScheduleItem]]:
  """The schedule that realizes `tensors`, and the same schedule as the memory planner runs it."""
  sched = create_schedule([t.lazydata for t in tensors])
  return sched, memory.plan_schedule(sched)


def run(sched: list[ScheduleItem]) -> None:
  for si in sched:
    lower_schedule_item(si).run(si.var_vals)


def check_plan(sched: Sequence[ScheduleItem], planned: Sequence[ScheduleItem], held: Sequence[Tensor] = ()) -> int:
  """Buffers that share memory are never live at once, and what `held` tensors own is nobody else's.
  Returns how many allocations the planner saved."""
  span: dict[Buffer, tuple[int, int]] = {}
  new: dict[Buffer, Buffer] = {}
  for i, (a, b) in enumerate(zip(sched, planned, strict=True)):
    assert a.ast == b.ast and len(a.bufs) == len(b.bufs)
    for old, nb in zip(a.bufs, b.bufs):
      span[old] = (span.get(old, (i, i))[0], i)
      assert new.setdefault(old, nb) is nb, "a buffer is replaced by one buffer everywhere"
  moved = {id(old) for old, nb in new.items() if nb is not old}
  groups: dict[int, list[Buffer]] = {}  # memory the planner gave to a buffer -> every buffer in it
  for old, nb in new.items():
    groups.setdefault(id(root(nb)), []).append(old)
  for group in groups.values():
    if any(id(b) in moved for b in group):  # views a user made into a loaded file share memory by design
      lifetimes = sorted(span[b] for b in group)
      assert all(x[1] < y[0] for x, y in itertools.pairwise(lifetimes)), f"overlapping lifetimes share memory: {lifetimes}"
  for t in held:
    b = t.lazydata.base.buffer
    assert id(b) not in moved and not any(id(o) in moved for o in groups.get(id(root(b)), [])), "a buffer someone holds was planned"
  return len(new) - len(groups)  # buffers minus allocations


def matmul_chain(x: Tensor, ws: Sequence[Tensor], keep: dict[int, Tensor] | None = None) -> Tensor:
  """x @ w0 @ w1 ...: each product is a reduction with a buffer of its own, read only by the next one."""
  for i, w in enumerate(ws):
    x = (x @ w).relu() if i % 2 else x @ w
    if keep is not None:
      keep[i] = x
  return x


def matmul_chain_np(x: np.ndarray, ws: Sequence[np.ndarray]) -> list[np.ndarray]:
  out = []
  for i, w in enumerate(ws):
    x = np.maximum(x @ w, 0) if i % 2 else x @ w
    out.append(x)
  return out


# ---------- one schedule ----------

def test_a_chain_of_intermediates_takes_two_buffers_in_turn() -> None:
  xs, wss = arr(4, 8), [arr(8, 8) for _ in range(6)]
  x, ws = Tensor(xs).realize(), [Tensor(w).realize() for w in wss]
  with no_gc():
    sched, planned = plan(matmul_chain(x, ws))
  assert check_plan(sched, planned) >= 3, "5 intermediates with lifetimes [i, i+1] fit in 2 allocations"
  with no_gc():
    out = matmul_chain(x, ws).realize()
  np.testing.assert_allclose(out.numpy(), matmul_chain_np(xs, wss)[-1], rtol=1e-5, atol=1e-5)


def test_a_held_intermediate_is_never_reused() -> None:
  xs, wss = arr(4, 8), [arr(8, 8) for _ in range(6)]
  x, ws = Tensor(xs).realize(), [Tensor(w).realize() for w in wss]
  keep: dict[int, Tensor] = {}
  out = matmul_chain(x, ws, keep)
  held = [keep[1], keep[2]]  # what a user keeps: a Tensor early in the chain, whose buffer would be free after step 3
  del keep
  with no_gc():
    sched, planned = plan(out)
  check_plan(sched, planned, held)
  keep = {}
  out = matmul_chain(x, ws, keep)
  held = [keep[1], keep[2]]
  del keep
  with no_gc():
    out.realize()
  want = matmul_chain_np(xs, wss)
  np.testing.assert_allclose(out.numpy(), want[-1], rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(held[0].numpy(), want[1], rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(held[1].numpy(), want[2], rtol=1e-5, atol=1e-5)


def test_an_intermediate_read_by_an_unrealized_graph_is_kept() -> None:
  xs, wss = arr(4, 8), [arr(8, 8) for _ in range(6)]
  x, ws = Tensor(xs).realize(), [Tensor(w).realize() for w in wss]
  keep: dict[int, Tensor] = {}
  out = matmul_chain(x, ws, keep)
  later = keep[1].exp() * 2  # not realized yet: it reads step 1's buffer when it is
  del keep
  with no_gc():
    out.realize()
  want = matmul_chain_np(xs, wss)
  np.testing.assert_allclose(out.numpy(), want[-1], rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(later.numpy(), np.exp(want[1]) * 2, rtol=1e-5, atol=1e-5)


def test_buffers_read_by_later_kernels_stay_until_their_last_read() -> None:
  a_np, w_np = arr(4, 8), arr(8, 8)
  a, w = Tensor(a_np).realize(), Tensor(w_np).realize()

  def f(a: Tensor) -> Tensor:  # a function, so no intermediate is held by a local of the test
    b = a @ w            # read by c, d, e and the output
    c = (b @ w).relu()   # read by d and the output
    d = (c @ w) + b      # read by e
    e = (d @ w) * b.sum(1, keepdim=True)
    return (e @ w) + c.max() + b
  with no_gc():
    sched, planned = plan(f(a))
  # b, c, d, e overlap, so what gets shared here is a small buffer carved out of a freed big one: that takes views
  assert check_plan(sched, planned) >= (1 if HAS_VIEWS else 0)
  with no_gc():
    out = f(a).realize()
  b_ = a_np @ w_np
  c_ = np.maximum(b_ @ w_np, 0)
  e_ = ((c_ @ w_np) + b_) @ w_np * b_.sum(1, keepdims=True)
  np.testing.assert_allclose(out.numpy(), e_ @ w_np + c_.max() + b_, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("seed", range(6))
def test_random_graphs_compute_what_numpy_computes(seed: int) -> None:
  """Random DAGs of products, reductions and elementwise ops, some nodes read many steps later, some held."""
  r = np.random.default_rng(seed)
  w_np = arr(6, 6)
  nodes_np = [arr(6, 6)]
  nodes = [Tensor(nodes_np[0]).realize()]
  w = Tensor(w_np).realize()
  for _ in range(14):
    i, j = (int(k) for k in r.integers(0, len(nodes), 2))
    kind = int(r.integers(0, 4))
    if kind == 0:
      nodes.append(nodes[i] @ w)
      nodes_np.append(nodes_np[i] @ w_np)
    elif kind == 1:
      nodes.append((nodes[i] @ w) + nodes[j])
      nodes_np.append(nodes_np[i] @ w_np + nodes_np[j])
    elif kind == 2:
      nodes.append((nodes[i] * nodes[j].sum(0, keepdim=True)).tanh())
      nodes_np.append(np.tanh(nodes_np[i] * nodes_np[j].sum(0, keepdims=True)))
    else:
      nodes.append((nodes[i] - nodes[i].max(1, keepdim=True)).exp())
      nodes_np.append(np.exp(nodes_np[i] - nodes_np[i].max(1, keepdims=True)))
  held = {int(k) for k in r.integers(1, len(nodes), 2)}
  with no_gc():
    out = nodes[-1]
    keep = [nodes[k] for k in held]
    del nodes
    sched, planned = plan(out)
    check_plan(sched, planned, keep)
    run(planned)
  np.testing.assert_allclose(out.numpy(), nodes_np[-1], rtol=1e-4, atol=1e-5)
  for k, t in zip(held, keep):
    np.testing.assert_allclose(t.numpy(), nodes_np[k], rtol=1e-4, atol=1e-5)


def test_smaller_buffers_are_carved_from_freed_bigger_ones() -> None:
  x_np, w1, w2, w3 = arr(8, 16), arr(16, 16), arr(16, 4), arr(4, 4)
  x, t1, t2, t3 = Tensor(x_np).realize(), Tensor(w1).realize(), Tensor(w2).realize(), Tensor(w3).realize()

  def f(x: Tensor) -> Tensor:
    return ((((x @ t1) @ t1) @ t2) @ t3) @ t3
  with no_gc():
    sched, planned = plan(f(x))
  check_plan(sched, planned)
  if type(Device[Device.DEFAULT].allocator).view is not Allocator.view:  # the device's allocator has views
    assert any(b._base is not None for si in planned for b in si.bufs), "an (8, 4) buffer fits in a freed (8, 16) one"
  with no_gc():
    out = f(x).realize()
  np.testing.assert_allclose(out.numpy(), x_np @ w1 @ w1 @ w2 @ w3 @ w3, rtol=1e-4, atol=1e-5)


def test_in_place_assign_with_intermediates() -> None:
  w_np, m_np = arr(4, 4), arr(4, 4)
  w, m = Tensor(w_np).realize(), Tensor(m_np).realize()
  buf = w.lazydata.base.buffer
  for _ in range(3):
    before = w * 1  # lazily reads the value before the assign: the scheduler keeps a copy of it
    with no_gc():
      w.assign(((w @ m).relu() @ m) @ m + w)
      Tensor.realize_all(w, before)
    np.testing.assert_allclose(before.numpy(), w_np, rtol=1e-5, atol=1e-6)
    w_np = np.maximum(w_np @ m_np, 0) @ m_np @ m_np + w_np
    np.testing.assert_allclose(w.numpy(), w_np, rtol=1e-4, atol=1e-5)
  assert w.lazydata.base.buffer is buf, "an assign writes into the tensor's own buffer"


def test_copies_from_disk_and_between_devices(tmp_path) -> None:
  x_np, w_np = arr(4, 8), arr(8, 8)
  fn = tmp_path / "w.safetensors"
  safe_save({"x": Tensor(x_np), "w": Tensor(w_np)}, fn)
  disk = safe_load(fn)
  dev, other = Device.DEFAULT, second_instance()
  x, w = disk["x"].to(dev), disk["w"].to(dev)  # copies whose buffers on dev are intermediates
  y = ((x @ w).relu() @ w).to(other)  # the product moves to a second instance of the device
  w_other = disk["w"][2:6].to(other)  # a slice of the file: a view of the mapped DISK buffer
  out = (y[:, 2:6] @ w_other).exp().to(dev) + disk["x"][1:3].to(dev).sum()
  with no_gc():
    sched, planned = plan(out)
  check_plan(sched, planned, list(disk.values()))
  for a, b in zip(sched, planned):  # a storage device's memory (the file) is never planned
    assert all(n is o for o, n in zip(a.bufs, b.bufs) if Device[o.device].renderer is None)
  x, w = disk["x"].to(dev), disk["w"].to(dev)
  y = ((x @ w).relu() @ w).to(other)
  with no_gc():
    out = ((y[:, 2:6] @ disk["w"][2:6].to(other)).exp().to(dev) + disk["x"][1:3].to(dev).sum()).realize()
  want = np.exp((np.maximum(x_np @ w_np, 0) @ w_np)[:, 2:6] @ w_np[2:6]) + x_np[1:3].sum()
  np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-5)
  np.testing.assert_array_equal(disk["x"].to(dev).numpy(), x_np)  # the file is untouched


def test_the_planner_can_be_turned_off() -> None:
  xs, wss = arr(4, 8), [arr(8, 8) for _ in range(6)]
  x, ws = Tensor(xs).realize(), [Tensor(w).realize() for w in wss]
  with Context(NO_MEMORY_PLANNER=1), no_gc():
    sched, planned = plan(matmul_chain(x, ws))
  assert planned is sched


def _mlp_grads(n_layers: int) -> tuple[int, list[np.ndarray]]:
  """Peak bytes allocated by a forward + backward of an MLP (realized in one schedule), and its gradients."""
  Tensor.manual_seed(0)
  layers = [Linear(16, 16) for _ in range(n_layers)]
  params = [p for layer in layers for p in get_parameters(layer)]
  for p in params:
    p.requires_grad = True
    p.realize()
  data = np.random.default_rng(3)
  x = Tensor(data.standard_normal((8, 16)).astype(np.float32)).realize()
  y = Tensor(data.integers(0, 16, 8).astype(np.int32)).realize()
  gc.collect()
  with no_gc():
    GlobalCounters.reset()
    h = x
    for layer in layers:
      h = layer(h).relu()
    loss = h.sparse_categorical_crossentropy(y)
    loss.backward()
    grads = [p.grad for p in params if p.grad is not None]
    Tensor.realize_all(loss, *grads)
    peak = GlobalCounters.mem_used_peak
  return peak, [g.numpy() for g in grads]


def test_forward_and_backward_peak_memory_drops_and_values_do_not_change() -> None:
  with Context(NO_MEMORY_PLANNER=1):
    peak_off, grads_off = _mlp_grads(4)
  peak_on, grads_on = _mlp_grads(4)
  for a, b in zip(grads_off, grads_on, strict=True):
    np.testing.assert_array_equal(a, b)
  assert peak_on < peak_off if HAS_VIEWS else peak_on <= peak_off  # without views only buffers of one size share


# ---------- TinyJit ----------

def jit_bytes(jit: TinyJit[Tensor]) -> int:
  """Bytes of the distinct allocations a TinyJit's kernels use."""
  roots = {id(root(b)): root(b) for ei in jit.kernels for b in ei.bufs}
  return sum(r.nbytes for r in roots.values())


def _train(steps: int = 5) -> tuple[list[float], np.ndarray, int]:
  Tensor.manual_seed(0)
  l1, l2, l3 = Linear(8, 16), Linear(16, 16), Linear(16, 4)
  opt = Adam(get_parameters([l1, l2, l3]), lr=0.01)

  @TinyJit
  def step(x: Tensor, y: Tensor) -> Tensor:
    with Tensor.train():
      loss = l3(l2(l1(x).relu()).relu()).sparse_categorical_crossentropy(y)
      opt.zero_grad()
      loss.backward()
      opt.step()
    return loss.realize()
  data = np.random.default_rng(1)
  losses = []
  for _ in range(steps):
    x, y = data.standard_normal((16, 8)).astype(np.float32), data.integers(0, 4, 16).astype(np.int32)
    losses.append(step(Tensor(x), Tensor(y)).item())
  return losses, l1.weight.numpy(), jit_bytes(step)


def test_jitted_training_replays_the_same_losses_in_less_memory() -> None:
  with Context(NO_MEMORY_PLANNER=1):
    losses_off, w_off, bytes_off = _train()
  losses_on, w_on, bytes_on = _train()
  assert losses_on == losses_off
  np.testing.assert_array_equal(w_on, w_off)
  assert bytes_on < bytes_off


def test_jit_keeps_an_intermediate_the_function_stashes() -> None:
  stash: list[Tensor] = []
  w = Tensor(arr(4, 4)).realize()

  @TinyJit
  def f(x: Tensor) -> Tensor:
    a = (x @ w).realize()
    stash.append(b := (a @ w).relu().realize())  # held outside: replays overwrite it, nothing else may
    c = (b @ w).realize()
    return ((c @ w) @ w).realize()
  for _ in range(4):
    x_np = arr(4, 4)
    out = f(Tensor(x_np))
  b_np = np.maximum(x_np @ w.numpy() @ w.numpy(), 0)
  np.testing.assert_allclose(stash[-1].numpy(), b_np, rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(out.numpy(), b_np @ w.numpy() @ w.numpy() @ w.numpy(), rtol=1e-4, atol=1e-5)


def test_jit_never_plans_an_assign_target_nobody_holds() -> None:
  """The function takes the last reference to its accumulator, so after capture no one holds it, but every replay
  adds to what the one before left there: its memory is state, even unheld. (Today the scheduler also copies the
  old value out before the assign, which protects it too; this test is for when that copy goes.)"""
  acc = Tensor.zeros(4).contiguous().realize()  # computed by a schedule, so the planner tracks its buffer
  holder = [acc, acc]
  del acc

  @TinyJit
  def f(x: Tensor) -> Tensor:
    a = holder.pop()
    t = (x * 3).realize()
    u = (t + 1).realize()  # t is free from here: same size as the accumulator
    a.assign(a + u).realize()
    return (a * 2).realize()
  total = np.zeros(4, np.float32)
  for i in range(5):
    x_np = np.full(4, i, np.float32)
    total += 3 * x_np + 1
    np.testing.assert_allclose(f(Tensor(x_np)).numpy(), 2 * total)


def test_jit_keeps_data_from_before_the_capture_that_only_its_kernels_read() -> None:
  """A tensor computed before the capture, dropped during it: only the captured kernels still read its buffer,
  which they don't write, so its data must survive every replay."""
  pre_np = np.arange(4, dtype=np.float32)
  pre = (Tensor(pre_np) * 2).realize()  # computed by a schedule, so the planner tracks its buffer
  holder = [pre, pre]
  del pre

  @TinyJit
  def f(x: Tensor) -> Tensor:
    p = holder.pop()
    t = (x * 3).realize()
    u = (t + 1).realize()  # t is free from here: the same size as p
    return ((u + p) * 2).realize()
  for i in range(5):
    x_np = np.full(4, i, np.float32)
    np.testing.assert_allclose(f(Tensor(x_np)).numpy(), 2 * (3 * x_np + 1 + 2 * pre_np))


def test_jit_planner_can_be_turned_off() -> None:
  def make() -> Callable[[Tensor], Tensor]:
    w = Tensor(arr(4, 4)).realize()

    @TinyJit
    def f(x: Tensor) -> Tensor:
      return ((((x @ w).realize() @ w).realize() @ w).realize() @ w).realize()
    return f
  with Context(NO_MEMORY_PLANNER=1):
    f_off = make()
    for _ in range(3):
      f_off(Tensor(arr(4, 4)))
  f_on = make()
  for _ in range(3):
    f_on(Tensor(arr(4, 4)))
  assert isinstance(f_off, TinyJit) and isinstance(f_on, TinyJit)
  assert jit_bytes(f_on) < jit_bytes(f_off)
