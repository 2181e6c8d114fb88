"""How many kernels common graphs take: fewer kernels is less memory traffic. Upper bounds pin what the
scheduler achieves today, so a change that splits kernels shows up here."""
from __future__ import annotations

import numpy as np

from tg import GlobalCounters, Tensor
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


def test_softmax_forward() -> None:
  x = realized(4, 10)
  assert kernels(x.softmax(1)) <= 3  # max, sum of exp, divide (the target is 2: one multi-loop kernel for sum + divide)


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
  opt.step()
  assert GlobalCounters.kernel_count <= 23


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
