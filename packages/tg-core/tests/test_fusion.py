"""How many kernels common graphs take: fewer kernels is less memory traffic. Upper bounds pin what the
scheduler achieves today, so a change that splits kernels shows up here."""
from __future__ import annotations

import numpy as np
import pytest

from tg import GlobalCounters, Tensor
from tg.engine.realize import run_schedule
from tg.engine.schedule import create_schedule
from tg.nn import LayerNorm, Linear
from tg.nn.optim import Adam
from tg.nn.state import get_parameters

rng = np.random.default_rng(0)


def realized(*shape: int) -> Tensor:
  return Tensor(rng.standard_normal(shape).astype(np.float32)).realize()


def kernels(*ts: Tensor) -> int:
  return len(create_schedule([t.lazydata for t in ts]))


def test_elementwise_chain_is_one_kernel() -> None:
  a, b, c = realized(4, 4), realized(4, 4), realized(4, 4)
  assert kernels((a * b + c).relu()) == 1


def test_elementwise_into_reduce_is_one_kernel() -> None:
  a, b = realized(4, 8), realized(4, 8)
  assert kernels((a * b).sum(1)) == 1


def test_reduce_then_elementwise_is_one_kernel() -> None:
  a, c = realized(4, 8), realized(4)
  assert kernels((a.sum(1) * 2 + c).exp()) == 1


def test_conv_bias_relu_is_one_kernel() -> None:
  x, w, b = realized(2, 3, 8, 8), realized(4, 3, 3, 3), realized(4)
  assert kernels(x.conv2d(w, b, padding=1).relu()) == 1


def test_reduce_read_twice_by_its_elementwise_users_is_one_kernel() -> None:
  # users that branch and meet again (relu is x < 0 ? 0 : x, leakyrelu and hardtanh compare and pick too) compute the
  # reduction in their kernel, as a chain of single users does; users in two kernels need it stored
  x, w, b = realized(2, 3, 8, 8), realized(4, 3, 3, 3), realized(4)
  for act in (Tensor.relu, Tensor.leakyrelu, Tensor.hardtanh):
    out = act(x.conv2d(w, b, padding=1))
    assert kernels(out) == 1
  a = realized(4, 8)
  s = a.sum(1)
  assert kernels((s > 0).where(s, s * s)) == 1
  assert kernels(s.exp(), s.relu()) == 3
  np.testing.assert_allclose(((s > 0).where(s, s * s)).numpy(), np.where(a.numpy().sum(1) > 0, a.numpy().sum(1), a.numpy().sum(1) ** 2), rtol=1e-5)


def test_softmax_forward_is_two_kernels() -> None:
  x = realized(4, 10)
  assert kernels(x.softmax(1)) == 2  # max and sum of exp in one kernel (the max nested, stored too), then the divide
  xs = x.numpy()
  e = np.exp(xs - xs.max(1, keepdims=True))
  np.testing.assert_allclose(x.softmax(1).numpy(), e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(x.log_softmax(0).numpy(), xs - xs.max(0) - np.log(np.exp(xs - xs.max(0)).sum(0)), rtol=1e-5, atol=1e-6)


def test_mean_and_variance_share_a_kernel() -> None:
  x = realized(6, 32)
  mean, var = x.mean(1, keepdim=True), x.var(1, keepdim=True)
  sched = create_schedule([var.lazydata, mean.lazydata])
  assert len(sched) == 1 and len(sched[0].outputs) >= 2  # the means are computed inside the variance's kernel
  mean, var = x.mean(1, keepdim=True), x.var(1, keepdim=True)  # (scheduling hands the graph to the schedule: build anew)
  Tensor.realize_all(mean, var)
  np.testing.assert_allclose(mean.numpy(), x.numpy().mean(1, keepdims=True), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(var.numpy(), x.numpy().var(1, ddof=1, keepdims=True), rtol=1e-5, atol=1e-6)
  assert kernels(x.layernorm()) == 2  # mean and variance, then the normalization


def test_nested_reduction_read_elsewhere_is_stored() -> None:
  """The max inside softmax's kernel is an output of that kernel: a later kernel reading it gets the value."""
  x = realized(5, 7)
  m = x.max(1, keepdim=True)
  s = (x - m).exp().sum(1, keepdim=True)
  out = s.log() + m * 2
  xs = x.numpy()
  np.testing.assert_allclose(out.numpy(), np.log(np.exp(xs - xs.max(1, keepdims=True)).sum(1, keepdims=True)) + 2 * xs.max(1, keepdims=True),
                             rtol=1e-5, atol=1e-6)


def test_layernorm_forward_and_backward() -> None:
  x = Tensor(rng.standard_normal((8, 16)).astype(np.float32), requires_grad=True).realize()
  ln = LayerNorm(16)
  for p in get_parameters(ln):
    p.requires_grad = True
    p.realize()
  out = ln(x).sum()
  out.backward()
  assert x.grad is not None and ln.weight.grad is not None and ln.bias.grad is not None
  assert kernels(out, x.grad, ln.weight.grad, ln.bias.grad) <= 9


def test_adam_step_on_a_linear_layer() -> None:
  x = realized(8, 16)
  layer = Linear(16, 4)
  opt = Adam(get_parameters(layer), lr=0.01)
  for p in get_parameters(layer):
    p.realize()
  loss = layer(x).relu().sum()
  opt.zero_grad()
  loss.backward()
  GlobalCounters.reset()
  with Tensor.train():  # optimizers step only in training mode, as tinygrad's
    opt.step()
  assert GlobalCounters.kernel_count <= 23


def test_assign_copies_the_old_value_only_when_it_can_still_be_read() -> None:
  from tg.ops import MetaOps
  def copies(*ts: Tensor) -> int:  # schedules and runs the realize of ts
    sched = create_schedule([t.lazydata for t in ts])
    run_schedule(sched)
    return sum(1 for si in sched if si.ast.op is MetaOps.COPY)
  w = realized(4)
  w_np = w.numpy()
  n = copies(w.assign(w * 2 + 1))  # (not inside the assert: pytest would hold `w * 2 + 1` for its message)
  assert n == 0  # the `w * 2 + 1` in the assign's own kernel reads w before it is written, and nothing else can
  w_np = w_np * 2 + 1
  alias, view = w * 1, w.reshape(2, 2)  # the old value itself (x * 1 folds to x) and a view of it, both held
  w.assign(w + 1).realize()
  np.testing.assert_allclose(alias.numpy(), w_np)
  np.testing.assert_allclose(view.numpy(), w_np.reshape(2, 2))
  np.testing.assert_allclose(w.numpy(), w_np + 1)
  # an optimizer step: nothing reads the old weights after it, so nothing is copied
  layer = Linear(16, 4)
  opt = Adam(get_parameters(layer), lr=0.01)
  x = realized(8, 16)
  for _ in range(2):
    opt.zero_grad()
    with Tensor.train():
      loss = layer(x).relu().sum().backward()
      n = copies(loss, *opt.schedule_step())
      assert n == 0


def test_assigns_into_apart_parts_of_one_buffer_are_not_ordered_by_each_other() -> None:
  """Two tensors over apart parts of one buffer (parameters in one flat buffer), the second's new value computed from
  the first's new value and its own old one: an assign orders only readers of the elements it writes. Ordered by the
  whole buffer, q's kernel (reading its old part) had to run before p's write and after it: a refused cycle."""
  b = Tensor(np.arange(8, dtype=np.float32)).contiguous().realize()
  p, q = b[0:4], b[4:8]
  p.assign(p + 1)
  q.assign(p * 2 + q)
  Tensor.realize(p, q)
  np.testing.assert_array_equal(b.numpy(), np.concatenate([np.arange(4) + 1, (np.arange(4) + 1) * 2 + np.arange(4, 8)]))
  # overlapping parts are still ordered: r reads the elements s writes, so it runs first (or reads a copy)
  c = Tensor(np.arange(8, dtype=np.float32)).contiguous().realize()
  r, t = c[0:6], c[2:8]
  r2 = r * 10  # reads c[2:6] as they were
  t.assign(t + 100)
  Tensor.realize(t, r2)
  np.testing.assert_array_equal(r2.numpy(), np.arange(6) * 10)
  np.testing.assert_array_equal(c.numpy(), np.concatenate([np.arange(2), np.arange(2, 8) + 100]))


def test_realized_buffer_is_not_recomputed() -> None:
  a = realized(4, 4)
  b = (a.exp() * 2).realize()
  sched = create_schedule([(b + 1).lazydata])
  assert len(sched) == 1 and b.lazydata.base.buffer in sched[0].inputs and a.lazydata.base.buffer not in sched[0].inputs


def test_large_reduction_is_split_in_two() -> None:
  x = rng.random(1 << 16).astype(np.float32)
  t = Tensor(x).realize()
  assert kernels(t.sum()) == 2  # partial sums of chunks, then their sum (SPLIT_REDUCEOP_THRESHOLD, default 32768)
  np.testing.assert_allclose(t.sum().item(), x.astype(np.float64).sum(), rtol=1e-6)
  assert t.max().item() == x.max()
  assert kernels(realized(4, 1000).sum(1)) == 1  # small reductions stay one kernel


def test_training_step_with_softmax_loss_and_optimizer_in_one_schedule() -> None:
  """The loss (with its softmax reductions) and the optimizer's in-place updates are realized together: merged
  reduction kernels must never need to run both before and after an in-place write."""
  l1, l2 = Linear(12, 16), Linear(16, 5)
  opt = Adam(get_parameters([l1, l2]), lr=0.05)
  x, y = realized(32, 12), Tensor(rng.integers(0, 5, 32).astype(np.int32))
  losses = []
  for _ in range(4):
    opt.zero_grad()
    with Tensor.train():
      loss = l2(l1(x).relu()).sparse_categorical_crossentropy(y).backward()
      Tensor.realize_all(loss, *opt.schedule_step())
    losses.append(loss.item())
  assert losses[-1] < losses[0]


@pytest.mark.parametrize("seed", range(24))
def test_random_reduction_graphs_merge_kernels_without_changing_numbers(seed: int) -> None:
  """Random DAGs of reductions reading reductions (the shapes softmax, variance and matmuls make): however
  kernels get merged, the numbers are numpy's."""
  r = np.random.default_rng(seed)
  x_np = [r.standard_normal((5, 7)).astype(np.float32) for _ in range(2)]
  xs = [Tensor(a).realize() for a in x_np]
  for _ in range(10):
    i, j = (int(k) for k in r.integers(0, len(xs), 2))
    kind = int(r.integers(0, 5))
    a, b, a_np, b_np = xs[i], xs[j], x_np[i], x_np[j]
    if kind == 0:  # softmax-like: reads its own max through a broadcast
      xs.append((a - a.max(1, keepdim=True)).exp() / (a - a.max(1, keepdim=True)).exp().sum(1, keepdim=True))
      e = np.exp(a_np - a_np.max(1, keepdims=True))
      x_np.append(e / e.sum(1, keepdims=True))
    elif kind == 1:  # variance-like, of another node's mean
      xs.append(a - ((b - b.mean(1, keepdim=True)) ** 2).mean(1, keepdim=True))
      x_np.append(a_np - ((b_np - b_np.mean(1, keepdims=True)) ** 2).mean(1, keepdims=True))
    elif kind == 2:  # siblings over one input
      xs.append(a * a.sum(1, keepdim=True) + b.max(1, keepdim=True))
      x_np.append(a_np * a_np.sum(1, keepdims=True) + b_np.max(1, keepdims=True))
    elif kind == 3:
      xs.append((a * 0.5).tanh() + b)
      x_np.append(np.tanh(a_np * 0.5) + b_np)
    else:  # across the other axis
      xs.append(a - a.sum(0, keepdim=True) * 0.1)
      x_np.append(a_np - a_np.sum(0, keepdims=True) * 0.1)
  picks = [len(xs) - 1, len(xs) - 2, int(r.integers(2, len(xs)))]
  outs = [xs[k] for k in picks]
  Tensor.realize_all(*outs)
  for t, k in zip(outs, picks):
    np.testing.assert_allclose(t.numpy(), x_np[k], rtol=2e-4, atol=2e-4)


def _stores(sched: list) -> list[int]:
  """The number of outputs of each kernel in a schedule."""
  from tg.ops import MetaOps
  return sorted(len(si.ast.src) if si.ast.op is MetaOps.SINK else 1 for si in sched if si.ast.op is not MetaOps.COPY)


@pytest.mark.parametrize("name,nests", [("Adam", True), ("AdamW", True), ("LAMB", False), ("SGD", False)])
def test_optimizer_state_is_stored_by_the_parameter_update_kernel(name: str, nests: bool) -> None:
  """Adam's moments' assigns are computed in the kernel of the parameter update that reads their new values
  (NEST_ASSIGN): one kernel of three outputs (p, m, v) per parameter, the numbers bit for bit those of separate
  kernels. LAMB's update needs the norms of the new moments (reductions: kernels of their own between the moments and
  the update), and SGD's momentum buffer is computed in the kernel of the gradient's reduction: neither nests."""
  import tg.nn.optim
  from tg.helpers import Context
  def make(ps: list[Tensor]) -> tg.nn.optim.Optimizer:
    return tg.nn.optim.SGD(ps, lr=0.1, momentum=0.9) if name == "SGD" else getattr(tg.nn.optim, name)(ps, lr=0.01)
  x_np = rng.standard_normal((8, 16)).astype(np.float32)
  results = {}
  for nest in (1, 0):
    with Context(NEST_ASSIGN=nest):
      Tensor.manual_seed(3)
      layer = Linear(16, 4)
      opt = make(get_parameters(layer))
      Tensor.realize_all(*get_parameters(layer))  # (a parameter never realized is no assign: its first value is computed)
      x = Tensor(x_np).realize()
      outputs = []
      for step in range(3):
        opt.zero_grad()
        with Tensor.train():
          layer(x).relu().sum().backward()
          targets = opt.schedule_step()
          if step == 0:
            sched = create_schedule([t.lazydata for t in targets])
            outputs = _stores(sched)
            run_schedule(sched)
          else:
            Tensor.realize_all(*targets)
      results[nest] = (outputs, [p.numpy() for p in get_parameters(layer)])
  if nests:  # weight and bias: each one kernel of all three outputs, two kernels fewer each
    assert results[1][0].count(3) == 2 and len(results[0][0]) == len(results[1][0]) + 4, results
  else:
    assert results[1][0] == results[0][0]
  assert results[0][0].count(3) == 0
  for nested, apart in zip(results[1][1], results[0][1]):
    np.testing.assert_array_equal(nested, apart)


def test_assigns_are_not_nested_when_an_element_is_read_elsewhere() -> None:
  """One iteration of a nested kernel reads and writes one element of each written buffer: an assign whose new or old
  value is read at other elements (through a flip), or whose old value another kernel still reads, keeps a kernel of
  its own, and every number is right."""
  def fresh() -> tuple[np.ndarray, Tensor, Tensor]:
    x_np = np.arange(1, 9, dtype=np.float32)
    return x_np, Tensor(x_np).realize(), Tensor(x_np * 10).realize()
  # the parameter reads the moment's new value flipped
  x_np, x, m = fresh()
  m.assign(m + x)
  x.assign(x - m.flip(0))
  sched = create_schedule([x.lazydata, m.lazydata])
  assert _stores(sched) == [1, 1]
  run_schedule(sched)
  np.testing.assert_array_equal(m.numpy(), x_np * 11)
  np.testing.assert_array_equal(x.numpy(), x_np - (x_np * 11)[::-1])
  # the moment's value reads the parameter's old value flipped
  x_np, x, m = fresh()
  m.assign(m + x.flip(0))
  x.assign(x - m)
  sched = create_schedule([x.lazydata, m.lazydata])
  assert _stores(sched) == [1, 1]
  run_schedule(sched)
  np.testing.assert_array_equal(m.numpy(), x_np * 10 + x_np[::-1])
  np.testing.assert_array_equal(x.numpy(), x_np - (x_np * 10 + x_np[::-1]))
  # another kernel reads the moment's old value
  x_np, x, m = fresh()
  old_sum = m.sum()
  m.assign(m + x)
  x.assign(x - m)
  Tensor.realize_all(old_sum, x, m)
  assert old_sum.item() == (x_np * 10).sum()
  np.testing.assert_array_equal(m.numpy(), x_np * 11)
  np.testing.assert_array_equal(x.numpy(), x_np - x_np * 11)
  # element for element, the same pair nests
  x_np, x, m = fresh()
  m.assign(m * 0.5 + x)
  x.assign(x - m)
  sched = create_schedule([x.lazydata, m.lazydata])
  assert _stores(sched) == [2]
  run_schedule(sched)
  np.testing.assert_array_equal(m.numpy(), x_np * 5 + x_np)
  np.testing.assert_array_equal(x.numpy(), x_np - (x_np * 5 + x_np))
