"""cross_entropy and nll_loss as torch.nn.functional's (classes on axis 1, weights, ignore_index, reductions, label
smoothing, probability targets), forward and gradient; clamp, t and selu as torch's."""
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

from tg import Tensor
from tg.errors import DTypeError, ShapeError, TgArgumentError

RNG = np.random.default_rng(0)


def _check(tg_fn, torch_fn, x_np, *args_np, atol=1e-5):
  x = Tensor(x_np, requires_grad=True)
  xt = torch.tensor(x_np, requires_grad=True)
  # class indices: int32 for tg (every device has it), int64 for torch (which requires it)
  got = tg_fn(x, *[Tensor(a.astype(np.int32) if a.dtype == np.int64 else a) if isinstance(a, np.ndarray) else a for a in args_np])
  want = torch_fn(xt, *[torch.tensor(a) if isinstance(a, np.ndarray) else a for a in args_np])
  np.testing.assert_allclose(got.numpy(), want.detach().numpy(), atol=atol, rtol=1e-5)
  w = RNG.standard_normal(want.shape).astype(np.float32)
  (got * Tensor(w)).sum().backward()
  (want * torch.tensor(w)).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), atol=atol, rtol=1e-4)


@pytest.mark.parametrize("reduction, shape, weighted, smoothing", [
  ("mean", (5, 4), False, 0.0), ("mean", (5, 4), True, 0.0), ("mean", (5, 4), True, 0.2), ("sum", (5, 4), False, 0.2),
  ("none", (5, 4), True, 0.2), ("mean", (3, 4, 2, 3), True, 0.2), ("none", (3, 4, 2, 3), False, 0.0), ("mean", (4,), True, 0.2),
  ("none", (4,), False, 0.0)])
def test_cross_entropy_with_class_indices(reduction, shape, weighted, smoothing):
  x = RNG.standard_normal(shape).astype(np.float32)
  c = shape[0] if len(shape) == 1 else shape[1]
  tshape = () if len(shape) == 1 else (shape[0], *shape[2:])
  tgt = RNG.integers(0, c, tshape).astype(np.int64)
  if tgt.ndim:
    tgt.reshape(-1)[0] = -100  # one ignored sample
  weight = RNG.uniform(0.5, 2, c).astype(np.float32) if weighted else None
  kw = dict(weight=weight, reduction=reduction, label_smoothing=smoothing)
  _check(lambda a, t: a.cross_entropy(t, **{**kw, "weight": None if weight is None else Tensor(weight)}),
         lambda a, t: TF.cross_entropy(a, t, **{**kw, "weight": None if weight is None else torch.tensor(weight)}), x, tgt)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_loss(reduction):
  x = RNG.standard_normal((6, 5)).astype(np.float32)
  tgt = np.array([0, 4, 2, -100, 1, 3], np.int64)
  weight = RNG.uniform(0.5, 2, 5).astype(np.float32)
  _check(lambda a, t: a.log_softmax(1).nll_loss(t, Tensor(weight), reduction=reduction),
         lambda a, t: TF.nll_loss(a.log_softmax(1), t, torch.tensor(weight), reduction=reduction), x, tgt)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy_with_class_probabilities(smoothing):
  x = RNG.standard_normal((4, 3, 2)).astype(np.float32)
  p = RNG.uniform(0, 1, (4, 3, 2)).astype(np.float32)
  p /= p.sum(1, keepdims=True)
  _check(lambda a, t: a.cross_entropy(t, label_smoothing=smoothing), lambda a, t: TF.cross_entropy(a, t, label_smoothing=smoothing), x, p)


def test_all_targets_ignored_mean_is_nan_as_torch():
  x = RNG.standard_normal((2, 3)).astype(np.float32)
  t = np.array([-100, -100], np.int64)
  assert np.isnan(Tensor(x).cross_entropy(Tensor(t.astype(np.int32))).item()) and torch.isnan(TF.cross_entropy(torch.tensor(x), torch.tensor(t)))
  # tinygrad's sparse_categorical_crossentropy too (a mean over no targets: 0 / 0, as tinygrad's; tg gave -0.0)
  for smoothing in (0.0, 0.1):
    g = Tensor(x, requires_grad=True)
    loss = g.sparse_categorical_crossentropy(Tensor([-1, -1]), label_smoothing=smoothing)
    loss.backward()
    assert np.isnan(loss.item()) and not np.any(g.grad.numpy())  # the gradient stays 0, as torch's


def test_loss_argument_errors():
  x = Tensor.ones(2, 3)
  with pytest.raises(ShapeError):
    x.cross_entropy(Tensor([0, 1, 2]))
  with pytest.raises(DTypeError):
    x.nll_loss(Tensor([0.0, 1.0]))
  with pytest.raises(TgArgumentError):
    x.cross_entropy(Tensor([0, 1]), reduction="avg")
  with pytest.raises(RuntimeError):  # each is also torch's RuntimeError
    x.cross_entropy(Tensor([0, 1]), label_smoothing=2.0)


def test_clamp_t_selu():
  x = RNG.standard_normal((3, 4)).astype(np.float32) * 3
  _check(lambda a: a.clamp(min=-1, max=2), lambda a: a.clamp(min=-1, max=2), x)
  _check(lambda a: a.clamp(max=0.5), lambda a: a.clamp(max=0.5), x)
  _check(lambda a: a.t(), lambda a: a.t(), x)
  _check(lambda a: a.selu(), lambda a: TF.selu(a), x)
  assert Tensor([1.0, 2.0]).t().shape == (2,)
  with pytest.raises(TgArgumentError):
    Tensor.ones(2, 2, 2).t()
