"""The math and linear-algebra ops PyTorch users reach for (tg/tensor_math.py), against torch: forward values and
gradients (torch.autograd), dtypes, broadcasting, negative dims, empty tensors, NaN and inf.

Tolerances: float32 elementwise transcendentals within a few ulps (rtol 1e-6, atol 1e-7 unless stated); their
gradients (exact derivatives, computed with tg's exp/sqrt) rtol 1e-5; reductions and products rtol 1e-5; float16
results within one float16 ulp (rtol 1e-3)."""
import math

import numpy as np
import pytest

from tg import Device, Tensor, dtypes
from tg.device import is_dtype_supported


torch = pytest.importorskip("torch")

SLOW = Device.DEFAULT == "PYTHON"  # the PYTHON device interprets kernels: fewer points there
HALF = is_dtype_supported(dtypes.float16)
SPECIAL = [0.0, -0.0, math.inf, -math.inf, math.nan, 1e-7, -1e-7, 1e-30, 3e-8]


def _arr(values, dtype=np.float32):
  return np.asarray(values, dtype=dtype)


def check(tg_fn, torch_fn, *arrays, atol=1e-7, rtol=1e-6, grad=True, grad_atol=1e-6, grad_rtol=1e-5, seed=0):
  """Run both on the same inputs; compare results (NaN where torch has NaN, infs equal) and, when `grad` and the
  result is float, the gradients of sum(out * w) for a fixed random w."""
  floats = [np.issubdtype(a.dtype, np.floating) for a in arrays]
  ts = [torch.tensor(a, requires_grad=grad and f) for a, f in zip(arrays, floats)]
  gs = [Tensor(a, requires_grad=grad and f) for a, f in zip(arrays, floats)]
  tout, gout = torch_fn(*ts), tg_fn(*gs)
  ref = tout.detach().numpy()
  assert gout.shape == tuple(tout.shape), f"shape {gout.shape} != torch {tuple(tout.shape)}"
  got = gout.numpy()
  assert got.dtype == ref.dtype, f"dtype {got.dtype} != torch {ref.dtype}"
  if np.issubdtype(ref.dtype, np.floating):
    np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), atol=atol, rtol=rtol)
  else:
    np.testing.assert_array_equal(got, ref)
  if not grad or not np.issubdtype(ref.dtype, np.floating) or not any(floats) or not tout.requires_grad:
    return
  w = np.random.default_rng(seed).uniform(0.5, 1.5, size=ref.shape).astype(ref.dtype)
  (tout * torch.tensor(w)).sum().backward()
  (gout * Tensor(w)).sum().backward()
  for i, (t, g) in enumerate(zip(ts, gs)):
    if not floats[i]:
      continue
    tg_grad = None if g.grad is None else g.grad.numpy()
    if t.grad is None or not np.any(t.grad.numpy()):
      assert tg_grad is None or not np.any(tg_grad), f"input {i}: torch's gradient is zero, tg's is {tg_grad}"
      continue
    assert tg_grad is not None, f"input {i}: tg has no gradient"
    np.testing.assert_allclose(tg_grad.astype(np.float64), t.grad.numpy().astype(np.float64), atol=grad_atol, rtol=grad_rtol,
                               err_msg=f"gradient of input {i}")


def _grid(lo, hi, n, extra=()):
  return _arr(np.concatenate([np.linspace(lo, hi, n // 4 if SLOW else n), extra]))


# ---------- elementwise ----------

def test_erf_accurate_across_the_range():
  check(Tensor.erf, torch.erf, _grid(-6, 6, 2001, SPECIAL + [0.999999, 1.0, 1.0000001, 4.2, 4.3, -3.9]), atol=1.5e-7, grad_atol=1e-7)


def test_log1p_accurate_near_zero():
  x = _grid(-0.99, 10, 1001, SPECIAL + [-1.0, -2.0, -0.5, 1e30, 2.0 ** -23, -(2.0 ** -24)])
  check(Tensor.log1p, torch.log1p, x, rtol=3e-7, atol=0, grad_atol=0, grad_rtol=1e-6)
  assert Tensor([1e-7]).log1p().item() == pytest.approx(1e-7, rel=1e-6)


def test_expm1_accurate_near_zero():
  x = _grid(-20, 20, 1001, SPECIAL + [80.0, 89.0, -100.0, 2.0 ** -23, -(2.0 ** -24), 1e-3])
  check(Tensor.expm1, torch.expm1, x, rtol=1e-6, atol=0, grad_atol=2e-7, grad_rtol=2e-6)  # near -1 a ulp is 6e-8
  assert Tensor([1e-7]).expm1().item() == pytest.approx(1e-7, rel=1e-6)


def test_atan_accurate_and_at_infinity():
  x = _grid(-8, 8, 1001, SPECIAL + [1e10, -1e30, 2.4142137, 0.41421357, 1.0, -1.0])
  check(Tensor.atan, torch.atan, x, rtol=3e-7, atol=0, grad_atol=0, grad_rtol=1e-6)
  assert math.copysign(1, Tensor([-0.0]).atan().item()) == -1  # -0.0 keeps its sign, as torch


@pytest.mark.parametrize("op", ["asin", "acos"])
def test_asin_acos_accurate_on_the_whole_interval(op):
  x = _grid(-1, 1, 2001, [0.5, -0.5, 0.50000006, 0.99999994, -0.99999994, 1e-8, 0.0, math.nan, 1.0000001, -2.0])
  check(getattr(Tensor, op), getattr(torch, op), x, rtol=3e-7, atol=1e-7, grad=False)
  inside = _arr(np.linspace(-0.999, 0.999, 101 if SLOW else 401))  # the gradient is infinite at +-1, NaN past them
  check(getattr(Tensor, op), getattr(torch, op), inside, rtol=3e-7, atol=1e-7, grad_rtol=1e-5)
  edge = Tensor([1.0, -1.0, 2.0], requires_grad=True)
  getattr(edge, op)().sum().backward()
  ref = torch.tensor([1.0, -1.0, 2.0], requires_grad=True)
  getattr(torch, op)(ref).sum().backward()
  np.testing.assert_array_equal(edge.grad.numpy(), ref.grad.numpy())


def test_atan2_every_quadrant_signed_zeros_and_infinities():
  v = [0.0, -0.0, 1.0, -1.0, 2.5, -3.0, 1e-30, math.inf, -math.inf, math.nan]
  y, x = np.meshgrid(_arr(v), _arr(v), indexing="ij")
  check(Tensor.atan2, torch.atan2, y.ravel(), x.ravel(), rtol=3e-7, atol=0, grad=False)
  got = Tensor(y.ravel()).atan2(Tensor(x.ravel())).numpy()
  ref = torch.atan2(torch.tensor(y.ravel()), torch.tensor(x.ravel())).numpy()
  real = ~np.isnan(ref)
  np.testing.assert_array_equal(np.signbit(got[real]), np.signbit(ref[real]))  # atan2(-0., 1.) is -0.
  rng = np.random.default_rng(1)
  a, b = _arr(rng.uniform(-3, 3, (4, 5))), _arr(rng.uniform(-3, 3, (5,)))  # broadcasting, with gradients
  check(Tensor.atan2, torch.atan2, a, b, rtol=1e-6, grad_rtol=1e-5)


def test_atan2_ints_and_scalars():
  check(lambda a, b: a.atan2(b), torch.atan2, np.arange(-3, 3, dtype=np.int32), np.array([2, -1, 0, 3, -2, 1], dtype=np.int32))
  check(lambda a: a.atan2(2.0), lambda a: torch.atan2(a, torch.tensor(2.0)), _arr([1.0, -1.0, 0.0]), rtol=3e-7)


def test_copysign():
  a = _arr([1.0, -2.0, 0.0, -0.0, math.inf, 3.0, math.nan, 4.0])
  b = _arr([-1.0, 2.0, -0.0, 0.0, -5.0, -0.0, -1.0, math.inf])
  check(Tensor.copysign, torch.copysign, a[[0, 1, 2, 3, 5, 7]], b[[0, 1, 2, 3, 5, 7]])
  got = Tensor(a).copysign(Tensor(b)).numpy()
  ref = torch.copysign(torch.tensor(a), torch.tensor(b)).numpy()
  np.testing.assert_array_equal(got, ref)
  np.testing.assert_array_equal(np.signbit(got), np.signbit(ref))
  check(lambda x, y: x.copysign(y), torch.copysign, np.array([1, -2, 3], dtype=np.int32), _arr([-1.0, -1.0, 1.0]))


def test_remainder_floats_ints_and_infinite_divisors():
  rng = np.random.default_rng(2)
  a, b = _arr(rng.uniform(-10, 10, (3, 8))), _arr(rng.uniform(0.5, 3, (8,)) * rng.choice([-1, 1], 8))
  check(Tensor.remainder, torch.remainder, a, b, atol=2e-6, rtol=1e-5)
  x = _arr([5.0, -5.0, 5.0, -5.0, math.inf, 0.0, 7.5, -7.5, math.nan, 1.0])
  d = _arr([math.inf, math.inf, -math.inf, -math.inf, 3.0, -3.0, 0.0, 2.0, 2.0, math.nan])
  check(Tensor.remainder, torch.remainder, x, d, grad=False)
  ia, ib = np.array([7, -7, 7, -7, 0, 5], dtype=np.int32), np.array([3, 3, -3, -3, 4, 5], dtype=np.int32)
  check(Tensor.remainder, torch.remainder, ia, ib)
  check(lambda t: t.remainder(3), lambda t: torch.remainder(t, 3), ia)


@pytest.mark.parametrize("op", ["erf", "log1p", "expm1", "atan", "asin", "acos"])
def test_unary_dtypes_and_shapes(op):
  tfn, gfn = getattr(torch, op), getattr(Tensor, op)
  check(gfn, tfn, np.array([[0, 1], [-1, 0]], dtype=np.int32))  # ints give the default float, as torch
  check(gfn, tfn, np.zeros((0, 3), dtype=np.float32))
  check(gfn, tfn, _arr(0.25))
  if HALF:
    x = np.linspace(-0.9, 0.9, 19).astype(np.float16)
    check(gfn, tfn, x, atol=1e-3, rtol=1e-3, grad_atol=2e-3, grad_rtol=2e-3)
