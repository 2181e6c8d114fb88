"""Small gaps a PyTorch user meets, each against torch: the signed zeros of the roundings and relu, the random
constructors' refusals of a negative std or an empty range, argmax's refusal of several dims, and einsum's ellipsis."""
import math

import numpy as np
import pytest

from tg import Tensor

torch = pytest.importorskip("torch")


def check(tg_fn, torch_fn, *arrays, atol=1e-6, rtol=1e-5):
  """Values (zeros' signs and NaNs included) and the gradients of sum(out * w) for a fixed random w, against torch."""
  ts = [torch.tensor(a, requires_grad=True) for a in arrays]
  gs = [Tensor(a, requires_grad=True) for a in arrays]
  tout, gout = torch_fn(*ts), tg_fn(*gs)
  ref, got = tout.detach().numpy(), gout.numpy()
  assert got.shape == ref.shape and got.dtype == ref.dtype, f"{got.shape} {got.dtype} vs torch {ref.shape} {ref.dtype}"
  np.testing.assert_allclose(got, ref, atol=atol, rtol=rtol)
  real = ~np.isnan(ref)  # (a NaN's sign bit is nobody's promise)
  np.testing.assert_array_equal(np.signbit(got[real]), np.signbit(ref[real]), err_msg="signs (of zeros)")
  w = np.random.default_rng(5).uniform(0.5, 1.5, size=ref.shape).astype(np.float32)
  (tout * torch.tensor(w)).sum().backward()
  (gout * Tensor(w)).sum().backward()
  for i, (t, g) in enumerate(zip(ts, gs)):
    assert g.grad is not None, f"input {i}: no gradient"
    np.testing.assert_allclose(g.grad.numpy(), t.grad.numpy(), atol=1e-5, rtol=1e-5, err_msg=f"gradient of input {i}")


# ---------- signed zeros ----------

ROUNDING_VALUES = np.array([-0.5, -0.4, -0.0, 0.0, 0.4, 0.5, -1.5, -2.5, 2.5, -1e-8, 1e-8, -0.7, 0.7, -0.99, -1.0, 3.0,
                            -8388609.0, math.inf, -math.inf, math.nan], np.float32)


@pytest.mark.parametrize("op", ["round", "trunc", "floor", "ceil"])
def test_rounding_keeps_the_sign_of_zero(op):
  # a result of zero has the input's sign, as torch and C (round(-0.5) and ceil(-0.4) are -0.0, floor(-0.0) too)
  check(lambda x: getattr(x, op)(), lambda x: getattr(torch, op)(x), ROUNDING_VALUES)


def test_relu_keeps_negative_zero():
  # torch's relu is x < 0 ? 0 : x: -0.0 stays -0.0, a negative becomes +0.0, NaN stays NaN; the gradient at 0 is 0
  x = np.array([-0.0, 0.0, -1.0, 2.0, -1e-30, math.nan, -math.inf, math.inf], np.float32)
  check(lambda t: t.relu(), torch.relu, x)
  got = Tensor(x).relu().numpy()
  assert np.signbit(got[0]) and not np.signbit(got[2])


# ---------- random constructors ----------

def test_normal_refuses_a_negative_std():
  with pytest.raises(RuntimeError, match=r"normal expects std >= 0\.0"):
    torch.normal(0.0, -1.0, (3,))
  for std in (-1.0, -1e-9, math.nan):
    with pytest.raises(RuntimeError, match=r"normal expects std >= 0\.0"):
      Tensor.normal(3, std=std)
  assert Tensor.normal(4, mean=2.5, std=0.0).tolist() == [2.5] * 4  # std 0: the mean, as torch


def test_uniform_refuses_low_above_high():
  with pytest.raises(RuntimeError, match=r"uniform_ expects to return a \[from, to\) range"):
    torch.empty(3).uniform_(2, 1)
  with pytest.raises(RuntimeError, match=r"uniform_ expects to return a \[from, to\) range"):
    Tensor.uniform(3, low=2.0, high=1.0)
  assert Tensor.uniform(3, low=1.5, high=1.5).tolist() == [1.5] * 3  # an empty range gives low, as torch's


# ---------- argmax / argmin ----------

@pytest.mark.parametrize("op", ["argmax", "argmin"])
@pytest.mark.parametrize("dim", [(0, 1), [1], (0,)])
def test_argmax_refuses_several_dims(op, dim):
  with pytest.raises(TypeError, match="must be int"):
    getattr(torch.zeros(2, 3), op)(dim=dim)
  with pytest.raises(TypeError, match=f"{op}.*must be int"):
    getattr(Tensor.zeros(2, 3), op)(dim)


# ---------- einsum with an ellipsis ----------

def _rand(*shape, seed=0):
  return np.random.default_rng(seed).uniform(-1, 1, size=shape).astype(np.float32)


@pytest.mark.parametrize("formula,shapes", [
  ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)]),   # batched matmul
  ("...ij,...jk", [(2, 3, 4), (2, 4, 5)]),          # implicit output: the ellipsis first, then the letters seen once
  ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),  # the ellipsis dims broadcast, right-aligned
  ("...ij,...jk->ik", [(2, 3, 4), (2, 4, 5)]),      # an output without the ellipsis sums its dims
  ("i...j->j...i", [(2, 3, 4)]),                    # in the middle
  ("b...a", [(2, 3, 1, 4)]),
  ("...i,i->...", [(4,), (4,)]),                    # an ellipsis of no dims
  ("ij->...ij", [(3, 4)]),
  ("...->", [(2, 3)]),
  ("bn...,bn...->bn", [(2, 3, 4, 5), (2, 3, 1, 5)]),
  (" ... i j , ... j k -> ... i k ", [(3, 4), (2, 4, 5)]),
])
def test_einsum_ellipsis(formula, shapes):
  arrays = [_rand(*s, seed=i) for i, s in enumerate(shapes)]
  check(lambda *xs: Tensor.einsum(formula, *xs), lambda *xs: torch.einsum(formula, *xs), *arrays, atol=1e-5)


@pytest.mark.parametrize("formula,shapes,match", [
  ("...i...->i", [(2, 3)], "ellipsis"),
  ("..ij", [(2, 3)], "ellipsis"),
  ("...ijk", [(2, 3)], "more"),
  ("...ij,...jk->...ik", [(2, 3, 4), (3, 4, 5)], "size"),
])
def test_einsum_ellipsis_errors(formula, shapes, match):
  with pytest.raises(RuntimeError):
    torch.einsum(formula, *[torch.ones(s) for s in shapes])
  with pytest.raises(RuntimeError, match=match):
    Tensor.einsum(formula, *[Tensor.ones(*s) for s in shapes])
