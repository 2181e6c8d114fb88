"""Gradients of small chained graphs, against torch (CPU)."""
import numpy as np
import pytest

from tg import Tensor, dtypes
from tg.errors import DTypeError, GradientError

ATOL, RTOL = 1e-5, 1e-4


@pytest.fixture
def torch():
  return pytest.importorskip("torch")


def _rand(*shape, seed=0, low=-1.0, high=1.0):
  return np.random.default_rng(seed).uniform(low, high, size=shape).astype(np.float32)


def _pair(torch, arr):
  """The same values as a torch leaf and a tg leaf, both requiring grad."""
  return torch.tensor(arr, requires_grad=True), Tensor(arr, requires_grad=True)


def _close(tg_t, torch_t, atol=ATOL, rtol=RTOL):
  assert tg_t is not None and torch_t is not None
  assert tg_t.shape == tuple(torch_t.shape)
  np.testing.assert_allclose(tg_t.numpy(), torch_t.detach().numpy(), atol=atol, rtol=rtol)


def _log_softmax(x):
  return x - x.exp().sum(axis=1, keepdim=True).log()


def _torch_log_softmax(x):
  return x - x.exp().sum(dim=1, keepdim=True).log()


def test_mlp(torch):
  xs, w1s, w2s = _rand(4, 8), _rand(8, 16, seed=1), _rand(16, 3, seed=2)
  labels = np.array([0, 2, 1, 2])
  onehot = np.eye(3, dtype=np.float32)[labels]
  tx, gx = _pair(torch, xs)
  tw1, gw1 = _pair(torch, w1s)
  tw2, gw2 = _pair(torch, w2s)

  tout = _torch_log_softmax((tx @ tw1).relu() @ tw2)
  gout = _log_softmax((gx @ gw1).relu() @ gw2)
  _close(gout, tout)
  # the rows of a log-softmax exponentiate to a distribution
  np.testing.assert_allclose(np.exp(gout.numpy()).sum(axis=1), np.ones(4, dtype=np.float32), atol=1e-5)

  tloss = -(tout * torch.tensor(onehot)).sum() / 4
  gloss = -(gout * Tensor(onehot)).sum() / 4
  _close(gloss, tloss)
  tloss.backward()
  gloss.backward()
  for g, t in [(gx, tx), (gw1, tw1), (gw2, tw2)]:
    _close(g.grad, t.grad)


def test_mlp_with_bias_and_sigmoid(torch):
  xs, ws, bs = _rand(5, 6), _rand(6, 4, seed=1), _rand(4, seed=2)
  tx, gx = _pair(torch, xs)
  tw, gw = _pair(torch, ws)
  tb, gb = _pair(torch, bs)
  tloss = ((tx @ tw + tb).sigmoid() * (tx @ tw).tanh()).mean()
  gloss = ((gx @ gw + gb).sigmoid() * (gx @ gw).tanh()).mean()
  _close(gloss, tloss)
  tloss.backward()
  gloss.backward()
  for g, t in [(gx, tx), (gw, tw), (gb, tb)]:
    _close(g.grad, t.grad)


def test_gradient_accumulation(torch):
  xs = _rand(3, 4)
  tx, gx = _pair(torch, xs)
  (tx * 2).sum().backward()
  (gx * 2).sum().backward()
  _close(gx.grad, tx.grad)
  (tx * tx).sum().backward()
  (gx * gx).sum().backward()
  _close(gx.grad, tx.grad)
  # and the accumulated value is the sum of both gradients
  np.testing.assert_allclose(gx.grad.numpy(), 2 + 2 * xs, atol=ATOL, rtol=RTOL)


def test_gradient_accumulation_across_graphs(torch):
  xs, ws = _rand(2, 3), _rand(3, 2, seed=1)
  tx, gx = _pair(torch, xs)
  tw, gw = _pair(torch, ws)
  for i in range(3):
    (tx @ tw * (i + 1)).sum().backward()
    (gx @ gw * (i + 1)).sum().backward()
  _close(gx.grad, tx.grad)
  _close(gw.grad, tw.grad)


def test_tensor_used_twice(torch):
  xs = _rand(3, 4)
  tx, gx = _pair(torch, xs)
  ty = tx * tx + tx.exp() * tx
  gy = gx * gx + gx.exp() * gx
  _close(gy, ty, atol=1e-4, rtol=1e-3)
  ty.sum().backward()
  gy.sum().backward()
  _close(gx.grad, tx.grad, atol=1e-4, rtol=1e-3)


def test_diamond_graph(torch):
  xs = _rand(4)
  tx, gx = _pair(torch, xs)
  ta = tx * 2
  ga = gx * 2
  tb = ta + ta
  gb = ga + ga
  tloss = (tb * ta - ta.sigmoid()).sum()
  gloss = (gb * ga - ga.sigmoid()).sum()
  _close(gloss, tloss)
  tloss.backward()
  gloss.backward()
  _close(gx.grad, tx.grad)


def test_two_inputs_broadcast(torch):
  xs, ys = _rand(3, 1), _rand(1, 4, seed=1)
  tx, gx = _pair(torch, xs)
  ty, gy = _pair(torch, ys)
  tloss = ((tx - ty) * (tx + ty) / (ty * ty + 1)).sum()
  gloss = ((gx - gy) * (gx + gy) / (gy * gy + 1)).sum()
  _close(gloss, tloss)
  tloss.backward()
  gloss.backward()
  _close(gx.grad, tx.grad)
  _close(gy.grad, ty.grad)


def test_detach(torch):
  xs = _rand(3, 4)
  tx, gx = _pair(torch, xs)
  gd = gx.detach()
  assert not gd.requires_grad
  np.testing.assert_array_equal(gd.numpy(), xs)
  ty = tx * tx.detach() + tx.detach().exp()
  gy = gx * gx.detach() + gx.detach().exp()
  _close(gy, ty, atol=1e-4, rtol=1e-3)
  ty.sum().backward()
  gy.sum().backward()
  _close(gx.grad, tx.grad)
  # the gradient flows only through the non-detached factor: d/dx sum(x * const) = const
  np.testing.assert_allclose(gx.grad.numpy(), xs, atol=ATOL, rtol=RTOL)
  assert gd.grad is None


def test_detach_only_path(torch):
  xs, ws = _rand(3), _rand(3, seed=1)
  tx, gx = _pair(torch, xs)
  tw, gw = _pair(torch, ws)
  (tx.detach() * tw).sum().backward()
  (gx.detach() * gw).sum().backward()
  _close(gw.grad, tw.grad)
  assert tx.grad is None
  assert gx.grad is None or not np.any(gx.grad.numpy())


@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 2), (1, 2)])
@pytest.mark.parametrize("keepdim", [False, True])
def test_mean_sum_over_axes(torch, axis, keepdim):
  xs = _rand(2, 3, 4)
  tx, gx = _pair(torch, xs)
  dims = tuple(range(3)) if axis is None else axis
  tm = tx.mean(dim=dims, keepdim=keepdim)
  gm = gx.mean(axis=axis, keepdim=keepdim)
  ts = (tx * tx).sum(dim=dims, keepdim=keepdim)
  gs = (gx * gx).sum(axis=axis, keepdim=keepdim)
  _close(gm, tm)
  _close(gs, ts)
  # weight the reduced outputs so each reduced element gets a different upstream gradient
  wshape = tuple(tm.shape)
  ws = _rand(*wshape, seed=5) if wshape else np.array(0.7, dtype=np.float32)
  tloss = (tm * torch.tensor(ws)).sum() + (ts * torch.tensor(ws)).sum()
  gloss = (gm * Tensor(ws)).sum() + (gs * Tensor(ws)).sum()
  _close(gloss, tloss)
  tloss.backward()
  gloss.backward()
  _close(gx.grad, tx.grad)


def test_max_in_graph(torch):
  xs = (np.random.default_rng(0).permutation(12).reshape(3, 4).astype(np.float32) - 6) / 4  # no ties
  tx, gx = _pair(torch, xs)
  tloss = (tx.amax(dim=1) * tx.sum(dim=1)).sum()
  gloss = (gx.max(axis=1) * gx.sum(axis=1)).sum()
  _close(gloss, tloss)
  tloss.backward()
  gloss.backward()
  _close(gx.grad, tx.grad)


def test_movement_in_graph(torch):
  xs = _rand(2, 3, 4)
  tx, gx = _pair(torch, xs)
  ty = tx.permute(2, 0, 1).reshape(4, 6)[1:3].flip(1) @ tx.reshape(6, 4)
  gy = gx.permute(2, 0, 1).reshape(4, 6)[1:3].flip(1) @ gx.reshape(6, 4)
  _close(gy, ty)
  (ty * ty).sum().backward()
  (gy * gy).sum().backward()
  _close(gx.grad, tx.grad, atol=1e-4, rtol=1e-3)


def test_grad_of_scalar_output_is_ones(torch):
  xs = _rand(2, 3)
  tx, gx = _pair(torch, xs)
  tx.sum().backward()
  gx.sum().backward()
  _close(gx.grad, tx.grad)


def test_intermediate_without_requires_grad(torch):
  xs, cs = _rand(3), _rand(3, seed=1)
  tx, gx = _pair(torch, xs)
  tc, gc = torch.tensor(cs), Tensor(cs)
  (tx * tc + tc).sum().backward()
  (gx * gc + gc).sum().backward()
  _close(gx.grad, tx.grad)
  assert gc.grad is None


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8", "bool"])
def test_only_floats_can_require_grad(torch, dtype):
  # torch raises RuntimeError; tg accepted it and backward gave gradients truncated to the tensor's dtype (0.5 -> 0)
  vals = np.array([1, 0, 1]).astype(dtype)
  with pytest.raises(RuntimeError, match="floating point"):
    torch.tensor(vals, requires_grad=True)
  with pytest.raises(DTypeError, match="floating point"):
    Tensor(vals, requires_grad=True)
  with pytest.raises(RuntimeError, match="floating point"):  # DTypeError is torch's RuntimeError too
    Tensor.zeros(3, dtype=dtype, requires_grad=True)
  t = Tensor(vals)
  with pytest.raises(DTypeError, match="floating point"):
    t.requires_grad = True
  t.requires_grad = False  # saying it doesn't is fine, and the default (None) stays as tinygrad's
  assert Tensor(vals).requires_grad is None and Tensor(vals, requires_grad=False).requires_grad is False


def test_half_floats_can_require_grad():
  x = Tensor([1.0, 2.0], dtype=dtypes.float16, requires_grad=True)
  (x * x).sum().backward()
  np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0])


def test_cast_to_int_leaves_the_graph(torch):
  # an integer result doesn't require grad, as torch's: gradients through it came back truncated (here to 0)
  xs = _rand(3)
  tx, gx = _pair(torch, xs)
  assert not tx.int().requires_grad and not gx.cast(dtypes.int32).requires_grad
  with pytest.raises(RuntimeError):
    (tx.int() * 0.5).sum().backward()
  with pytest.raises(GradientError):
    (gx.cast(dtypes.int32) * 0.5).sum().backward()
  (tx * 2 + tx.int()).sum().backward()
  (gx * 2 + gx.cast(dtypes.int32)).sum().backward()
  _close(gx.grad, tx.grad)


def test_second_backward_through_a_released_graph_raises(torch):
  # torch frees what the ops saved for the gradient at the first backward and raises at the second; tg returned at
  # once and left every gradient as it was, so a second loss sharing the graph silently added nothing
  xs = _rand(3)
  tx, gx = _pair(torch, xs)
  tl, gl = (tx * tx).sum(), (gx * gx).sum()
  tl.backward()
  gl.backward()
  with pytest.raises(RuntimeError, match="second time"):
    tl.backward()
  with pytest.raises(GradientError, match="second time"):
    gl.backward()
  _close(gx.grad, tx.grad)  # the refused backward changed nothing
  ty, gy = tx * tx, gx * gx
  ty.sum().backward()
  gy.sum().backward()
  with pytest.raises(RuntimeError, match="second time"):
    (ty * 2).sum().backward()
  with pytest.raises(GradientError, match="second time"):
    (gy * 2).sum().backward()
  _close(gx.grad, tx.grad)


def test_retain_graph_backward_twice_accumulates(torch):
  # with retain_graph=True the graph stays and a second backward adds the same gradients again, as torch's; an
  # intermediate's .grad from the first call must not count again in the second
  xs = _rand(3, 4)
  tx, gx = _pair(torch, xs)
  ty, gy = tx * tx, gx * gx
  tl, gl = (ty * ty + ty.exp()).sum(), (gy * gy + gy.exp()).sum()
  tl.backward(retain_graph=True)
  gl.backward(retain_graph=True)
  _close(gx.grad, tx.grad)
  tl.backward(retain_graph=True)
  gl.backward(retain_graph=True)
  _close(gx.grad, tx.grad)
  (ty * 3).sum().backward()  # another loss through the kept graph (this one releases it)
  (gy * 3).sum().backward()
  _close(gx.grad, tx.grad)


def test_backward_of_a_leaf_accumulates(torch):
  xs, gs = _rand(3), _rand(3, seed=1)
  tx, gx = _pair(torch, xs)
  for _ in range(2):
    tx.backward(torch.tensor(gs))
    gx.backward(Tensor(gs))
  _close(gx.grad, tx.grad)


def test_assign_after_backward_makes_a_new_leaf(torch):
  # a value assigned to a tensor whose graph a backward released doesn't come from that graph: the tensor trains on as
  # a leaf (an optimizer's step on a parameter made by an op, t.contiguous(), as tinygrad programs do; torch raises)
  xs = _rand(3)
  tx, gx = _pair(torch, xs)
  gy = gx * 2
  gy.sum().backward()
  tx.sum().backward(torch.tensor(2.0))
  gy.assign(Tensor.ones(3))
  (gy * gx).sum().backward()
  (torch.ones(3) * tx).sum().backward()
  _close(gx.grad, tx.grad)
  gz = gx * 3
  gz.sum().backward()
  gz += 1  # an in-place op records the old value, whose graph is released: backward through it can't be computed
  with pytest.raises(GradientError, match="second time"):
    gz.sum().backward()


def test_non_leaf_parameter_trains_over_steps(torch):
  from tg.nn.optim import SGD
  xs = _rand(3)
  w = Tensor(xs, requires_grad=True).contiguous().realize()  # an op's result, not a leaf
  tw = torch.tensor(xs, requires_grad=True)
  opt, topt = SGD([w], lr=0.1), torch.optim.SGD([tw], lr=0.1)
  with Tensor.train():
    for _ in range(3):
      opt.zero_grad()
      (w * w).sum().backward()
      opt.step()
      topt.zero_grad()
      (tw * tw).sum().backward()
      topt.step()
  _close(w, tw)
