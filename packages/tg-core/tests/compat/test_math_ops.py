"""The math and linear-algebra ops PyTorch users reach for (tg/tensor_math.py), against torch: forward values and
gradients (torch.autograd), dtypes, broadcasting, negative dims, empty tensors, NaN and inf.

Tolerances: float32 elementwise transcendentals within a few ulps (rtol 1e-6, atol 1e-7 unless stated); their
gradients (exact derivatives, computed with tg's exp/sqrt) rtol 1e-5; reductions and products rtol 1e-5; float16
results within one float16 ulp (rtol 1e-3)."""
import math

import numpy as np
import pytest

from tg import Device, Tensor, dtypes
from tg.conformance._kit import is_slow_device
from tg.device import is_dtype_supported
from tg.errors import AxisError, DTypeError, ShapeError, TgArgumentError

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
  Tensor.realize_all(*[g.grad for g in gs if g.grad is not None])  # together: one kernel can write several
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


def test_atan2_gradient_where_x_and_y_are_zero():
  # torch's gradient is 0 for both inputs where x*x + y*y is 0 (signed zeros, and squares that underflow), not 0/0
  y = _arr([0.0, -0.0, 0.0, -0.0, 1e-30, 0.0, 1.0, 0.0])
  x = _arr([0.0, 0.0, -0.0, -0.0, 1e-30, 1e-30, 0.0, -2.0])
  gy, gx = Tensor(y, requires_grad=True), Tensor(x, requires_grad=True)
  gy.atan2(gx).sum().backward()
  ty, tx = torch.tensor(y, requires_grad=True), torch.tensor(x, requires_grad=True)
  torch.atan2(ty, tx).sum().backward()
  for got, ref in ((gy.grad.numpy(), ty.grad.numpy()), (gx.grad.numpy(), tx.grad.numpy())):
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(ref))


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


def test_unary_ops_on_ints_half_and_empty():
  check(Tensor.erf, torch.erf, np.array([[0, 1], [-1, 0]], dtype=np.int32))  # ints give the default float, as torch
  for op in ("erf", "log1p", "expm1", "atan", "asin", "acos"):
    assert getattr(Tensor.zeros(0, 3), op)().shape == (0, 3) and getattr(Tensor(0.25), op)().shape == ()
  assert Tensor.zeros(0, 3).atan2(Tensor.ones(3)).numpy().shape == (0, 3)
  check(Tensor.log1p, torch.log1p, np.zeros((2, 0), np.float32))
  if HALF:  # computed in float32 and rounded, as torch; the ops share that path, so three of them
    x = np.linspace(-0.9, 0.9, 19).astype(np.float16)
    for op in ("erf", "log1p", "asin"):
      check(getattr(Tensor, op), getattr(torch, op), x, atol=1e-3, rtol=1e-3, grad_atol=2e-3, grad_rtol=2e-3)


# ---------- reductions and norms ----------

@pytest.mark.parametrize("p", [2, 1, math.inf, -math.inf, 0, 3, 0.5])
def test_vector_norm_orders(p):
  rng = np.random.default_rng(3)
  x = _arr(rng.uniform(-2, 2, (2, 3, 4)))
  x[1, 1, 2] = x[0, 1, 0] = 2.0  # ties for the inf norm: the gradient is split between them, as torch
  x[0, 2, 1] = x[1, 2, 3] = -2.0
  check(lambda t: t.norm(p, dim=(0, -1)), lambda t: torch.linalg.vector_norm(t, p, dim=(0, -1)), x, rtol=1e-5, grad_rtol=1e-4)


def test_norm_fro_zero_vectors_empty_and_half():
  x = _arr([[0.0, 0.0, 0.0], [3.0, -4.0, 0.0]])
  check(lambda t: t.norm(), lambda t: t.norm(), x, rtol=1e-6)
  check(lambda t: t.norm(dim=1), lambda t: t.norm(dim=1), x, rtol=1e-6)  # the zero row has gradient 0, not NaN
  check(lambda t: t.norm(p="fro", dim=(0, 1)), lambda t: t.norm(p="fro", dim=(0, 1)), x, rtol=1e-6)
  check(lambda t: t.norm(dim=0), lambda t: t.norm(dim=0), np.zeros((0, 3), np.float32))
  if HALF:
    check(lambda t: t.norm(dim=-1), lambda t: t.norm(dim=-1), _arr([[300.0, 400.0], [1.0, 2.0]]).astype(np.float16), rtol=1e-3, grad_rtol=2e-3)
  with pytest.raises(TgArgumentError):
    Tensor.zeros(0, 3).norm(math.inf, dim=0)
  with pytest.raises(DTypeError):
    Tensor([1, 2]).norm()
  with pytest.raises(AxisError):
    Tensor.ones(2, 3).norm(dim=2)
  with pytest.raises(NotImplementedError):
    Tensor.ones(2, 3).norm(p="nuc")


def test_amax_amin_ties_dims_and_nan():
  x = _arr([[[1.0, 3.0, 3.0], [2.0, -1.0, 2.0]], [[0.0, 3.0, -1.0], [-1.0, -1.0, 0.5]]])
  check(lambda t: t.amax(), lambda t: torch.amax(t), x)
  check(lambda t: t.amin((0, -1), True), lambda t: torch.amin(t, (0, -1), True), x)
  check(lambda t: t.amax(1), lambda t: torch.amax(t, 1), _arr([[1.0, math.nan], [2.0, 1.0]]), grad=False)
  check(lambda t: t.amin(0), lambda t: torch.amin(t, 0), np.array([[1, 5], [-2, 3]], dtype=np.int32))
  with pytest.raises(AxisError):
    Tensor.ones(2, 2).amax((0, 0))


def test_std_mean_var_mean_and_logcumsumexp():
  rng = np.random.default_rng(4)
  x = _arr(rng.uniform(-2, 2, (3, 5)))
  got, ref = Tensor(x).std_mean(1, keepdim=True), torch.std_mean(torch.tensor(x), dim=1, keepdim=True)
  for g, r in zip(got, ref):
    np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=1e-5, atol=1e-6)
  got, ref = Tensor(x).var_mean(), torch.var_mean(torch.tensor(x))
  assert got[0].shape == () and got[1].shape == ()
  np.testing.assert_allclose(got[0].numpy(), ref[0].numpy(), rtol=1e-5)
  check(lambda t: t.logcumsumexp(1), lambda t: torch.logcumsumexp(t, 1), x, rtol=1e-5, atol=1e-6, grad_rtol=1e-4)
  wide = _arr([[-100.0, 0.0, -math.inf, math.inf, 2.0], [-math.inf, -math.inf, 1.0, 1.0, 80.0]])  # no overflow, -inf prefixes
  check(lambda t: t.logcumsumexp(-1), lambda t: torch.logcumsumexp(t, -1), wide, rtol=1e-6, atol=1e-6, grad=False)


@pytest.mark.parametrize("n", [1025, 3000])
def test_logcumsumexp_long_axis(n):
  # past tensor_select.NETWORK_ABOVE: a log-depth scan of logaddexp; -inf runs, a +inf, a wide range of values
  if is_slow_device() and n > 1025:
    pytest.skip("an interpreter: one long axis is enough")
  rng = np.random.default_rng(n)
  x = _arr(rng.uniform(-40, 40, (2, n)))
  check(lambda t: t.logcumsumexp(1), lambda t: torch.logcumsumexp(t, 1), x, rtol=1e-5, atol=1e-5, grad_rtol=1e-4, grad_atol=1e-5)
  check(lambda t: t.logcumsumexp(0), lambda t: torch.logcumsumexp(t, 0), np.ascontiguousarray(x.T), rtol=1e-5, atol=1e-5, grad=False)
  x[0, :300] = -math.inf
  x[1, 700] = math.inf
  x[1, 900] = -math.inf
  check(lambda t: t.logcumsumexp(-1), lambda t: torch.logcumsumexp(t, -1), x, rtol=1e-5, atol=1e-5, grad=False)


def test_logcumsumexp_of_a_million_is_fast():
  if is_slow_device():
    pytest.skip("an interpreter: 20 steps over 2^20 elements are minutes there")
  import time
  start = time.perf_counter()
  out = Tensor.zeros(1 << 20).logcumsumexp().numpy()  # compiling included
  took = time.perf_counter() - start
  np.testing.assert_allclose(out[[0, 1, 999, (1 << 20) - 1]], np.log([1, 2, 1000, 1 << 20]), rtol=1e-5)
  assert took < 10, f"logcumsumexp of 2^20 took {took:.1f} s"


# ---------- products ----------

def test_cross_outer_bmm_tensordot():
  rng = np.random.default_rng(5)
  a, b = _arr(rng.uniform(-2, 2, (1, 2, 3))), _arr(rng.uniform(-2, 2, (4, 1, 3)))
  check(lambda x, y: x.cross(y, dim=-1), lambda x, y: torch.linalg.cross(x, y, dim=-1), a, b, rtol=1e-5, atol=1e-6)
  c = _arr(rng.uniform(-2, 2, (2, 3, 3)))
  assert Tensor(c).cross(Tensor(c)).shape == (2, 3, 3)  # dim None: the first axis of size 3, as torch.cross
  check(Tensor.outer, torch.outer, _arr([1.0, 2.0, -3.0]), _arr([0.5, -1.0]))
  m1, m2 = _arr(rng.uniform(-1, 1, (2, 3, 4))), _arr(rng.uniform(-1, 1, (2, 4, 5)))
  check(Tensor.bmm, torch.bmm, m1, m2, rtol=1e-5, atol=1e-6)
  check(Tensor.bmm, torch.bmm, np.arange(24, dtype=np.int32).reshape(2, 3, 4), np.ones((2, 4, 2), np.int32))  # int32 stays int32
  t1, t2 = _arr(rng.uniform(-1, 1, (2, 3, 4))), _arr(rng.uniform(-1, 1, (4, 3, 2)))
  check(lambda x, y: x.tensordot(y, dims=([1, 2], [1, 0])), lambda x, y: torch.tensordot(x, y, dims=([1, 2], [1, 0])), t1, t2, rtol=1e-5, atol=1e-6)
  # the rest differ only in which axes are permuted and reshaped: forward only, to keep the file quick
  check(lambda x, y: x.tensordot(y, dims=1), lambda x, y: torch.tensordot(x, y, dims=1), t1, t2, rtol=1e-5, atol=1e-6, grad=False)
  assert Tensor([1.0, 2.0]).tensordot(Tensor([3.0, 4.0, 5.0]), dims=0).shape == (2, 3)
  check(lambda x, y: x.tensordot(y, dims=([-1], [0])), lambda x, y: torch.tensordot(x, y, dims=([-1], [0])), _arr(np.ones((2, 1))), t2,
        grad=False)


def test_product_shape_errors_are_clear():
  with pytest.raises(ShapeError, match="bmm"):
    Tensor.ones(2, 3, 4).bmm(Tensor.ones(3, 4, 5))
  with pytest.raises(ShapeError, match="bmm"):
    Tensor.ones(2, 3, 4).bmm(Tensor.ones(2, 3, 5))
  with pytest.raises(ShapeError):
    Tensor.ones(3, 4).bmm(Tensor.ones(4, 5))
  with pytest.raises(RuntimeError):  # the torch-style except clause catches it too
    Tensor.ones(2, 2).outer(Tensor.ones(2))
  with pytest.raises(ShapeError):
    Tensor.ones(2, 4).cross(Tensor.ones(2, 4), dim=1)
  with pytest.raises(ShapeError):
    Tensor.ones(2, 3).tensordot(Tensor.ones(4, 2), dims=([1], [0]))
  with pytest.raises(TgArgumentError):
    Tensor.ones(2, 3).tensordot(Tensor.ones(3, 2), dims=-1)


def test_cosine_similarity():
  rng = np.random.default_rng(6)
  a, b = _arr(rng.uniform(-1, 1, (3, 4))), _arr(rng.uniform(-1, 1, (1, 4)))
  check(lambda x, y: x.cosine_similarity(y, dim=-1), lambda x, y: torch.cosine_similarity(x, y, dim=-1), a, b, rtol=1e-5, atol=1e-6,
        grad_rtol=1e-4)
  z = _arr([[0.0, 0.0, 0.0], [1.0, 2.0, 3.0]])  # a zero vector: 0, and torch's gradient (x2 / (eps * |x2|))
  check(lambda x, y: x.cosine_similarity(y, dim=1), lambda x, y: torch.cosine_similarity(x, y, dim=1), z, _arr([[1.0, 2.0, 3.0]] * 2),
        rtol=1e-5, grad_rtol=1e-4, grad_atol=1.0)
  with pytest.raises(DTypeError):
    Tensor([[1, 2]]).cosine_similarity(Tensor([[1, 2]]))


# ---------- comparison and copies ----------

def test_isclose_allclose():
  a = _arr([1.0, 1.0, math.nan, math.inf, math.inf, -math.inf, 1e-9, 100.0, 0.0])
  b = _arr([1.0 + 1e-6, 1.1, math.nan, math.inf, -math.inf, 1e38, 0.0, 100.001, math.inf])
  for kw in ({}, {"equal_nan": True}, {"rtol": 0.2}, {"atol": 1e-3, "rtol": 0.0}):
    np.testing.assert_array_equal(Tensor(a).isclose(Tensor(b), **kw).numpy(), torch.isclose(torch.tensor(a), torch.tensor(b), **kw).numpy())
  for kw in ({}, {"equal_nan": True}):
    assert Tensor(a[2:4]).allclose(Tensor(b[2:4]), **kw) is torch.allclose(torch.tensor(a[2:4]), torch.tensor(b[2:4]), **kw)
  ia, ib = np.array([1, 2, 100000], dtype=np.int32), np.array([1, 3, 100001], dtype=np.int32)
  np.testing.assert_array_equal(Tensor(ia).isclose(Tensor(ib)).numpy(), torch.isclose(torch.tensor(ia), torch.tensor(ib)).numpy())
  assert Tensor([[1.0, 2.0]]).isclose(Tensor([1.0, 2.5])).shape == (1, 2)  # broadcasts
  assert Tensor([1.0, 2.0]).allclose(Tensor([1.0, 2.0]))
  with pytest.raises(TgArgumentError):
    Tensor([1.0]).isclose(Tensor([1.0]), rtol=-1)


def test_clone_is_a_copy_with_gradient():
  x = Tensor([1.0, 2.0, 3.0], requires_grad=True).realize()
  c = x.clone()
  c.realize()
  c.assign(Tensor([7.0, 8.0, 9.0])).realize()
  np.testing.assert_array_equal(x.numpy(), [1.0, 2.0, 3.0])
  y = Tensor([1.0, 2.0, 3.0], requires_grad=True)
  (y.clone() * Tensor([2.0, 3.0, 4.0])).sum().backward()
  np.testing.assert_array_equal(y.grad.numpy(), [2.0, 3.0, 4.0])
  assert Tensor.arange(4).reshape(2, 2).T.clone().tolist() == [[0, 2], [1, 3]]


# ---------- interpolate ----------

def _interp(**kw):
  return (lambda t: t.interpolate(**kw)), (lambda t: torch.nn.functional.interpolate(t, **kw))


@pytest.mark.parametrize("kw, grad", [
  ({"scale_factor": 2}, True),  # an integer nearest scale: movement ops only
  ({"size": (5, 7)}, True), ({"scale_factor": 1.5}, False), ({"size": (2, 2)}, False), ({"size": (5, 3), "mode": "nearest-exact"}, False),
  ({"size": (5, 7), "mode": "bilinear"}, True), ({"size": (5, 7), "mode": "bilinear", "align_corners": True}, True),
  ({"scale_factor": (0.5, 1.7), "mode": "bilinear"}, False), ({"size": (1, 6), "mode": "bilinear", "align_corners": True}, False),
])
def test_interpolate_2d(kw, grad):
  x = _arr(np.random.default_rng(7).uniform(-1, 1, (2, 1, 3, 4)))
  check(*_interp(**kw), x, rtol=1e-5, atol=1e-6, grad=grad, grad_rtol=1e-5, grad_atol=1e-5)


def test_interpolate_1d_3d_dtypes_and_nan():
  rng = np.random.default_rng(8)
  check(*_interp(size=7, mode="linear"), _arr(rng.uniform(-1, 1, (1, 2, 4))), rtol=1e-5, atol=1e-6, grad_atol=1e-5)
  check(*_interp(scale_factor=3), _arr(rng.uniform(-1, 1, (1, 1, 3))), grad=False)
  check(*_interp(size=(3, 2, 3), mode="trilinear"), _arr(rng.uniform(-1, 1, (1, 1, 2, 3, 2))), rtol=1e-5, atol=1e-6, grad=False)
  check(*_interp(size=(3, 5)), np.arange(12, dtype=np.uint8).reshape(1, 1, 3, 4))  # nearest keeps integer dtypes (torch: uint8)
  nan = np.ones((1, 1, 3, 3), np.float32)
  nan[0, 0, 0, 0] = math.nan  # only the outputs that read it become NaN
  check(*_interp(size=(5, 5), mode="bilinear"), nan, grad=False)
  if HALF:
    check(*_interp(size=(5, 7), mode="bilinear"), _arr(rng.uniform(-1, 1, (1, 1, 3, 4))).astype(np.float16), rtol=2e-3, atol=2e-3, grad=False)


def test_interpolate_arguments():
  x = Tensor.ones(1, 1, 2, 2)
  with pytest.raises(TgArgumentError):
    x.interpolate(size=(3, 3), scale_factor=2)
  with pytest.raises(TgArgumentError):
    x.interpolate()
  with pytest.raises(TgArgumentError):
    x.interpolate(size=3, align_corners=True)
  with pytest.raises(ShapeError):
    Tensor.ones(1, 1, 4).interpolate(size=3, mode="bilinear")
  with pytest.raises(NotImplementedError):
    x.interpolate(size=3, mode="bicubic")
  with pytest.raises(TgArgumentError):
    x.interpolate(size=3, mode="cubic")
  with pytest.raises(DTypeError):
    Tensor.ones(1, 1, 2, 2, dtype=dtypes.int32).interpolate(size=3, mode="bilinear")
  assert x.interpolate(size=(4, 4)).shape == (1, 1, 4, 4)
