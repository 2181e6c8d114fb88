"""In-place assigns whose new values read each other's old values (x's update reads W, W's reads x): no order of the
in-place kernels reads every old value before it is overwritten, so the scheduler must keep a copy of one. tinygrad's
test_optim.py::test_multistep_sgd_high_lr_teeny is the smallest case (tinygrad's SGD passes it only by making every
gradient contiguous first; its scheduler raises "cycle" for test_assign.py::test_crossunder_assign, where tg gives the
right numbers). A kernel that reads both a buffer's old and new value (tinygrad's test_assign_diamond_cycle) still
raises, as in tinygrad. Checked against numpy and torch over several steps."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

from tg import Tensor, TinyJit
from tg.helpers import GlobalCounters
from tg.nn.optim import SGD, Adam

X0 = np.array([[-1.0, 0.0, 1.0]], dtype=np.float32)
W0 = np.array([[2.0, 0.5, -2.0]], dtype=np.float32)


def _train_tg(make_opt: Callable[[list[Tensor]], object], steps: int) -> tuple[np.ndarray, np.ndarray]:
  x, w = Tensor(X0.copy(), requires_grad=True), Tensor(W0.copy(), requires_grad=True)
  opt = make_opt([x, w])
  with Tensor.train():
    for _ in range(steps):
      opt.zero_grad()  # type: ignore[attr-defined]
      (x * w).sum().backward()
      opt.step()  # type: ignore[attr-defined]
  return x.numpy(), w.numpy()


def _train_torch(make_opt: Callable[[list[torch.Tensor]], torch.optim.Optimizer], steps: int) -> tuple[np.ndarray, np.ndarray]:
  x, w = torch.tensor(X0, requires_grad=True), torch.tensor(W0, requires_grad=True)
  opt = make_opt([x, w])
  for _ in range(steps):
    opt.zero_grad()
    (x * w).sum().backward()
    opt.step()
  return x.detach().numpy(), w.detach().numpy()


@pytest.mark.parametrize("name, tg_opt, torch_opt", [
  ("sgd_high_lr", lambda p: SGD(p, lr=1.1), lambda p: torch.optim.SGD(p, lr=1.1)),
  ("sgd_momentum", lambda p: SGD(p, lr=0.1, momentum=0.9), lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)),
  ("sgd_nesterov_wd", lambda p: SGD(p, lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.1),
   lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.1)),
  ("adam", lambda p: Adam(p, lr=0.1), lambda p: torch.optim.Adam(p, lr=0.1)),
])
def test_two_params_that_read_each_other(name: str, tg_opt: Callable[[list[Tensor]], object],
                                         torch_opt: Callable[[list[torch.Tensor]], torch.optim.Optimizer]) -> None:
  # d(sum(x*W))/dx = W and d/dW = x: each parameter's update reads the other's old value
  got, want = _train_tg(tg_opt, 4), _train_torch(torch_opt, 4)
  np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)


def _ring(vals: list[np.ndarray], steps: int) -> tuple[list[Tensor], list[np.ndarray]]:
  """Each tensor becomes a function of the next one's old value (a ring of in-place updates), realized together."""
  ts = [Tensor(v.copy()).realize() for v in vals]
  ref = [v.copy() for v in vals]
  for _ in range(steps):
    news = [ts[(i + 1) % len(ts)] * 0.5 + ts[i] + float(i) for i in range(len(ts))]
    for t, n in zip(ts, news):
      t.assign(n)
    Tensor.realize(*ts)
    ref = [ref[(i + 1) % len(ref)] * 0.5 + ref[i] + float(i) for i in range(len(ref))]
  return ts, ref


@pytest.mark.parametrize("n", [2, 3])
def test_ring_of_assigns(n: int) -> None:
  vals = [np.arange(4, dtype=np.float32) * (i + 1) - i for i in range(n)]
  ts, ref = _ring(vals, 3)
  for t, r in zip(ts, ref):
    np.testing.assert_allclose(t.numpy(), r, rtol=1e-6)


def test_swap() -> None:
  a, b = Tensor([1.0, 2.0, 3.0]).realize(), Tensor([4.0, 5.0, 6.0]).realize()
  na, nb = b + 0.0, a + 0.0
  a.assign(na)
  b.assign(nb)
  Tensor.realize(a, b)
  np.testing.assert_equal(a.numpy(), [4.0, 5.0, 6.0])
  np.testing.assert_equal(b.numpy(), [1.0, 2.0, 3.0])


def test_crossunder() -> None:
  # tinygrad 0.9.1's test_crossunder_assign, which its scheduler refuses ("cycle")
  a, b = Tensor.full((4,), 2).contiguous().realize(), Tensor.full((4,), 3).contiguous().realize()
  c = a + 9
  a += b
  b += c
  Tensor.realize(a, b)
  np.testing.assert_equal(a.numpy(), 5)
  np.testing.assert_equal(b.numpy(), 14)


def test_kernel_reading_old_and_new_value_still_raises() -> None:
  a, b = Tensor.ones(4).contiguous().realize(), Tensor.ones(4).contiguous().realize()
  old_a = a * 3
  a.assign(b + 1)
  b.assign(old_a + 0)  # reads a's old value ...
  with pytest.raises(RuntimeError, match="cycle"):
    Tensor.realize(a, b, a + old_a)  # ... and a third kernel reads both a's old and new value


def test_ring_kernel_count() -> None:
  # two in-place kernels and one copy that keeps an old value: no temporaries for both new values
  a, b = Tensor([1.0, 2.0]).realize(), Tensor([3.0, 4.0]).realize()
  na, nb = a + b, a - b
  a.assign(na)
  b.assign(nb)
  del na, nb  # held, they would keep the old values alive, which then get copies of their own
  kc = GlobalCounters.kernel_count
  Tensor.realize(a, b)
  assert GlobalCounters.kernel_count - kc <= 3
  np.testing.assert_equal(a.numpy(), [4.0, 6.0])
  np.testing.assert_equal(b.numpy(), [-2.0, -2.0])


def test_whole_assign_and_view_assign_read_each_other() -> None:
  an, bn = np.arange(6, dtype=np.float32), np.arange(6, dtype=np.float32) * 10
  a, b = Tensor(an.copy()).realize(), Tensor(bn.copy()).realize()
  for _ in range(3):
    new_a = b * 2.0 + a            # the whole of a from b's old value
    new_b = a[0:2] + b[3:5] + 1.0  # part of b from a's old value
    part = b[2:4]  # the assign lands in b's buffer when the view's tensor is realized
    a.assign(new_a)
    part.assign(new_b)
    Tensor.realize(a, part)
    an, bn[2:4] = bn * 2.0 + an, an[0:2] + bn[3:5] + 1.0
    np.testing.assert_allclose(a.numpy(), an)
    np.testing.assert_allclose(b.numpy(), bn)


def test_view_assigns_into_two_buffers_read_each_other() -> None:
  an, bn = np.arange(8, dtype=np.float32).reshape(2, 4), -np.arange(8, dtype=np.float32).reshape(2, 4)
  a, b = Tensor(an.copy()).realize(), Tensor(bn.copy()).realize()
  for _ in range(2):
    va, vb = b[:, 1:3] * 3.0, a[:, 0:2] - 1.0
    pa, pb = a[:, 2:4], b[:, 0:2]
    pa.assign(va)
    pb.assign(vb)
    Tensor.realize(pa, pb)
    an[:, 2:4], bn[:, 0:2] = bn[:, 1:3] * 3.0, an[:, 0:2] - 1.0
    np.testing.assert_allclose(a.numpy(), an)
    np.testing.assert_allclose(b.numpy(), bn)


def test_matmul_grads_of_two_layers() -> None:
  # each layer's gradient is a reduction that reads the other layer's weights, and a whole assign of a reduction's
  # value computes it in the assign's kernel: the two kernels read each other's old weights
  rng = np.random.default_rng(0)
  xn, w1n, w2n = (rng.standard_normal(s).astype(np.float32) for s in ((4, 3), (3, 5), (5, 2)))
  x, w1, w2 = Tensor(xn), Tensor(w1n.copy(), requires_grad=True), Tensor(w2n.copy(), requires_grad=True)
  tx, tw1, tw2 = torch.tensor(xn), torch.tensor(w1n, requires_grad=True), torch.tensor(w2n, requires_grad=True)
  opt, topt = SGD([w1, w2], lr=0.1), torch.optim.SGD([tw1, tw2], lr=0.1)
  with Tensor.train():
    for _ in range(3):
      opt.zero_grad()
      (x @ w1 @ w2).sum().backward()
      opt.step()
      topt.zero_grad()
      (tx @ tw1 @ tw2).sum().backward()
      topt.step()
  np.testing.assert_allclose(w1.numpy(), tw1.detach().numpy(), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(w2.numpy(), tw2.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_jitted_step_replays_the_copy() -> None:
  # the copy that keeps an old value is captured with the kernels and replayed (a fresh temporary per schedule)
  x, w = Tensor(X0.copy(), requires_grad=True), Tensor(W0.copy(), requires_grad=True)
  opt = SGD([x, w], lr=0.3)
  tx, tw = torch.tensor(X0, requires_grad=True), torch.tensor(W0, requires_grad=True)
  topt = torch.optim.SGD([tx, tw], lr=0.3)

  @TinyJit
  def step() -> Tensor:
    opt.zero_grad()
    loss = (x * w).sum()
    loss.backward()
    opt.step()
    return loss.realize()

  with Tensor.train():
    for _ in range(5):
      got = step().item()
      topt.zero_grad()
      (want := (tx * tw).sum()).backward()
      topt.step()
      assert got == pytest.approx(want.item(), rel=1e-5)
  np.testing.assert_allclose(x.numpy(), tx.detach().numpy(), rtol=1e-5)
  np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-5)


def test_held_old_value_shares_the_cycle_copy() -> None:
  # x.grad is W's old value and W.grad x's: both are held, so both old values need a copy; the copy that breaks the
  # cycle is one of them (2 copies and 2 in-place kernels, not 3 copies)
  x, w = Tensor(X0.copy(), requires_grad=True), Tensor(W0.copy(), requires_grad=True)
  opt = SGD([x, w], lr=1.1)
  with Tensor.train():
    (x * w).sum().backward()
    assert x.grad is not None and w.grad is not None
    kc = GlobalCounters.kernel_count
    opt.step()
    assert GlobalCounters.kernel_count - kc == 4
    np.testing.assert_allclose(x.grad.numpy(), W0)  # the gradients still read the old values
    np.testing.assert_allclose(w.grad.numpy(), X0)
  np.testing.assert_allclose(x.numpy(), X0 - 1.1 * W0, rtol=1e-6)
  np.testing.assert_allclose(w.numpy(), W0 - 1.1 * X0, rtol=1e-6)
