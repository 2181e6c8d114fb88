"""Numerics that must match torch: floor `//` and `%`, division by zero as a Python error (never a crashed
process), argmax/argmin with NaN, float32 accumulation of half sums, torch's integer sum promotion, and finite
cross-entropy with -inf logits. Each is checked against numpy or torch."""
import subprocess
import sys

import numpy as np
import pytest
import torch

from tg import Device, Tensor, dtypes

INT_DTYPES = [dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64]


def _has(dt):
  return dt not in getattr(Device[Device.DEFAULT].renderer, "missing_dtypes", ())


def _skip_missing(dt):
  if not _has(dt):
    pytest.skip(f"{Device.DEFAULT} has no {dt}")


# ---------- floor division and modulo ----------
@pytest.mark.parametrize("dt", INT_DTYPES, ids=str)
def test_int_floordiv_mod_match_torch(dt):
  _skip_missing(dt)
  a = np.array([-7, 7, -7, 7, 0, 5, -5, 6, -6, 1], dtype=dt.np)
  b = np.array([2, -2, -2, 2, 3, 5, 3, -4, 4, -1], dtype=dt.np)
  ta, tb = torch.from_numpy(a), torch.from_numpy(b)
  np.testing.assert_equal((Tensor(a) // Tensor(b)).numpy(), (ta // tb).numpy())
  np.testing.assert_equal((Tensor(a) % Tensor(b)).numpy(), (ta % tb).numpy())
  np.testing.assert_equal((Tensor(a) // 3).numpy(), (ta // 3).numpy())
  np.testing.assert_equal((Tensor(a) % -3).numpy(), (ta % -3).numpy())
  np.testing.assert_equal((17 // Tensor(b)).numpy(), (17 // tb).numpy())
  np.testing.assert_equal((-17 % Tensor(b)).numpy(), torch.remainder(torch.tensor(-17, dtype=ta.dtype), tb).numpy())


def test_issue_examples():
  assert (Tensor([-7, 7]) // Tensor([2, -2])).tolist() == [-4, -4]
  assert (Tensor([-7]) % 2).tolist() == [1]
  assert (Tensor([7]) % -2).tolist() == [-1]


def test_truncating_division_by_name():
  a, b = Tensor([-7, 7, -7]), Tensor([2, -2, -2])
  assert a.idiv(b).tolist() == [-3, -3, 3]
  assert a.div(b, rounding_mode="trunc").tolist() == [-3, -3, 3]
  assert a.div(b, rounding_mode="floor").tolist() == [-4, -4, 3]
  assert a.fmod(b).tolist() == torch.fmod(torch.tensor([-7, 7, -7]), torch.tensor([2, -2, -2])).tolist()


def test_unsigned_floordiv_mod():
  _skip_missing(dtypes.uint32)
  a, b = np.array([7, 200, 0, 9], dtype=np.uint32), np.array([2, 7, 5, 9], dtype=np.uint32)
  np.testing.assert_equal((Tensor(a) // Tensor(b)).numpy(), a // b)
  np.testing.assert_equal((Tensor(a) % Tensor(b)).numpy(), a % b)


def test_float_floordiv_mod_match_torch():
  a = np.array([-7.5, 7.5, -7.0, 7.0, 0.5, 1e-3, -3.25], dtype=np.float32)
  b = np.array([2.0, -2.0, -2.0, 2.0, 0.25, 1.0, 0.5], dtype=np.float32)
  ta, tb = torch.from_numpy(a), torch.from_numpy(b)
  np.testing.assert_allclose((Tensor(a) // Tensor(b)).numpy(), (ta // tb).numpy())
  np.testing.assert_allclose((Tensor(a) % Tensor(b)).numpy(), (ta % tb).numpy(), atol=1e-6)
  np.testing.assert_allclose((Tensor(a) // 0.0).numpy(), (ta // 0.0).numpy())  # floats: inf, nan, no error


def test_inplace_floordiv_mod():
  t = Tensor([-7, 7])
  t //= 2
  assert t.tolist() == [-4, 3]
  t %= 3
  assert t.tolist() == [2, 0]


# ---------- division by zero: a Python exception, never a dead process ----------
def test_scalar_zero_divisor_raises_at_once():
  t = Tensor([1, 2, 3])
  for f in (lambda: t // 0, lambda: t % 0, lambda: t.idiv(0), lambda: t.fmod(0)):
    with pytest.raises(ZeroDivisionError):
      f()


def test_tensor_zero_divisor_raises_when_read():
  a, b = Tensor([1, 2, 3]), Tensor([1, 0, 3])
  q = a // b  # lazy: nothing is known yet
  with pytest.raises(ZeroDivisionError):
    q.numpy()
  with pytest.raises(ZeroDivisionError):
    (a % b).sum().item()  # also through ops that consume the result
  with pytest.raises(ZeroDivisionError):
    a.idiv(b).tolist()
  # the process goes on, and a good division still works and pays no error
  assert (a // Tensor([1, 2, 3])).tolist() == [1, 1, 1]


def test_tensor_zero_divisor_raises_on_jit_replay():
  from tg import TinyJit

  @TinyJit
  def f(a: Tensor, b: Tensor) -> Tensor:
    return (a // b).realize()

  a = Tensor([7, -7, 9], dtype=dtypes.int32).realize()
  for _ in range(3):  # run, capture, replay
    assert f(a, Tensor([2, 2, 3], dtype=dtypes.int32).realize()).tolist() == [3, -4, 3]
  with pytest.raises(ZeroDivisionError):  # a replay runs the captured guard kernel and reads its flag
    f(a, Tensor([2, 0, 3], dtype=dtypes.int32).realize())
  assert f(a, Tensor([2, -2, 4], dtype=dtypes.int32).realize()).tolist() == [3, 3, 2]


def test_unrelated_realize_is_not_blamed():
  bad = Tensor([1, 2]) // Tensor([0, 1])
  assert (Tensor([4, 6]) // 2).tolist() == [2, 3]
  with pytest.raises(ZeroDivisionError):
    bad.realize()


def test_float_division_by_zero_is_ieee():
  assert Tensor([1.0, -1.0]).div(0.0).tolist() == [float("inf"), float("-inf")]


def test_int_min_div_minus_one():
  _skip_missing(dtypes.int32)
  a = Tensor([-2**31, 5], dtype=dtypes.int32)
  b = Tensor([-1, -1], dtype=dtypes.int32)
  assert (a // b).tolist() == [-2**31, -5]  # torch: wraps to INT_MIN
  assert (a % b).tolist() == [0, 0]
  assert a.idiv(b).tolist() == [-2**31, -5]


def _run(code: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                        env={**__import__("os").environ, "DEVICE": Device.DEFAULT})


@pytest.mark.parametrize("dt", ["int32", "int64"])
def test_kernel_division_by_zero_never_kills_the_process(dt):
  """The kernels themselves must not trap (SIGFPE) on a zero divisor or INT_MIN // -1: run them raw, below the
  Tensor's check, in a subprocess."""
  _skip_missing(getattr(dtypes, dt))
  code = f"""
from tg import Tensor, dtypes
from tg.lazy import LazyBuffer
from tg.ops import BinaryOps
dt = dtypes.{dt}
a = Tensor([7, -7, dtypes.min(dt), 3], dtype=dt)
b = Tensor([0, 0, -1, 0], dtype=dt)
for op in (BinaryOps.IDIV, BinaryOps.MOD):
  print(Tensor(a.lazydata.e(op, b.lazydata)).tolist())
print("alive")
"""
  r = _run(code)
  assert r.returncode == 0, r.stderr[-2000:]
  assert r.stdout.split()[-1] == "alive"


# ---------- argmax / argmin with NaN ----------
@pytest.mark.parametrize("vals", [[1, float("nan"), 3], [float("nan")] * 4, [3, 1, float("nan"), float("nan")], [2, 5, 5, 1]])
def test_argmax_argmin_nan_match_torch(vals):
  tt = torch.tensor(vals)
  assert Tensor(vals).argmax().item() == tt.argmax().item()
  assert Tensor(vals).argmin().item() == tt.argmin().item()


def test_argmax_nan_axis():
  x = np.array([[1, np.nan, 3], [4, 2, 0], [np.nan, np.nan, np.nan]], dtype=np.float32)
  tx = torch.from_numpy(x)
  for ax in (0, 1):
    np.testing.assert_equal(Tensor(x).argmax(ax).numpy(), tx.argmax(ax).numpy())
    np.testing.assert_equal(Tensor(x).argmin(ax).numpy(), tx.argmin(ax).numpy())


# ---------- half reductions accumulate in float32 ----------
@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16], ids=str)
def test_half_mean_sum_accumulate_in_float32(dt):
  _skip_missing(dt)
  x = Tensor.full((140000,), 0.5, dtype=dt)
  assert x.mean().dtype == dt
  assert x.mean().item() == 0.5
  assert x.sum().item() == torch.full((140000,), 0.5, dtype=getattr(torch, str(dt.name) if dt != dtypes.bfloat16 else "bfloat16")).sum().item()


def test_half_var_std_softmax_layernorm():
  _skip_missing(dtypes.float16)
  rng = np.random.default_rng(0)
  # std 100: the sums of squares (about 1e7) pass float16's 65504 long before the results do
  x = (rng.standard_normal((2, 1000)) * 100 + 3).astype(np.float16)
  tx = torch.from_numpy(x)
  np.testing.assert_allclose(Tensor(x).var(1).numpy().astype(np.float32), tx.float().var(1).numpy(), rtol=2e-3)
  np.testing.assert_allclose(Tensor(x).std(1).numpy().astype(np.float32), tx.float().std(1).numpy(), rtol=2e-3)
  np.testing.assert_allclose(Tensor(x).mean(1).numpy().astype(np.float32), tx.float().mean(1).numpy(), rtol=2e-3, atol=1e-2)
  ln = Tensor(x).layernorm(1).numpy().astype(np.float32)
  np.testing.assert_allclose(ln, torch.nn.functional.layer_norm(tx.float(), (1000,)).numpy(), atol=1e-2)
  # softmax's sum of exps (each at most 1) passes 65504 only with more terms than that
  s = Tensor.full((70000,), 1.0, dtype=dtypes.float16).softmax(0).numpy().astype(np.float32)
  np.testing.assert_allclose(s, 1 / 70000, rtol=1e-2)


# ---------- integer sum promotion, as torch ----------
@pytest.mark.parametrize("dt", [dtypes.bool, dtypes.int8, dtypes.int16, dtypes.int32, dtypes.uint8], ids=str)
def test_int_sum_promotes_to_int64(dt):
  _skip_missing(dtypes.int64)
  _skip_missing(dt)
  x = np.full((70000,), 1 if dt == dtypes.bool else (100 if dt in (dtypes.int8, dtypes.uint8) else 30000), dtype=dt.np)
  t = Tensor(x).sum()
  ref = torch.from_numpy(x).sum()
  assert str(ref.dtype) == "torch.int64" and t.dtype == dtypes.int64
  assert t.item() == ref.item()


def test_int32_sum_does_not_wrap():
  _skip_missing(dtypes.int64)
  x = Tensor.full((3, 1 << 10), 2**30, dtype=dtypes.int32)
  assert x.sum().item() == 3 * 2**40
  assert x.sum(1).tolist() == [2**40] * 3


def test_sum_dtype_argument():
  _skip_missing(dtypes.int64)
  x = Tensor([1, 2, 3], dtype=dtypes.int8)
  assert x.sum(dtype=dtypes.int16).dtype == dtypes.int16
  assert Tensor([0.5, 0.25]).sum(dtype=dtypes.float64).dtype == dtypes.float64


def test_prod_cumsum_promotion_match_torch():
  _skip_missing(dtypes.int64)
  x = np.array([100, 100, 100], dtype=np.int32)
  tx = torch.from_numpy(x)
  assert Tensor(x).prod().dtype == dtypes.int64 and Tensor(x).prod().item() == tx.prod().item()
  assert Tensor(x).cumsum(0).dtype == dtypes.int64 and Tensor(x).cumsum(0).tolist() == tx.cumsum(0).tolist()
  b = np.array([True, True, False])
  assert Tensor(b).cumsum(0).tolist() == torch.from_numpy(b).cumsum(0).tolist()


# ---------- cross-entropy with -inf logits ----------
def test_sparse_ce_with_minus_inf_logit_is_finite():
  logits = np.array([[2.0, -np.inf, 0.5], [-np.inf, 1.0, 0.0]], dtype=np.float32)
  y = np.array([0, 2], dtype=np.int32)
  ref = torch.nn.functional.cross_entropy(torch.from_numpy(logits), torch.from_numpy(y).long()).item()
  got = Tensor(logits).sparse_categorical_crossentropy(Tensor(y)).item()
  assert np.isfinite(got)
  np.testing.assert_allclose(got, ref, rtol=1e-6)
  # ignored rows and the gradient stay finite too
  lt = Tensor(logits, requires_grad=True)
  lt.sparse_categorical_crossentropy(Tensor([0, -1])).backward()
  assert np.isfinite(lt.grad.numpy()).all()


def test_log_softmax_minus_inf_matches_torch():
  logits = np.array([[2.0, -np.inf, 0.5], [-np.inf, 1.0, 0.0]], dtype=np.float32)
  np.testing.assert_allclose(Tensor(logits).log_softmax(-1).numpy(), torch.from_numpy(logits).log_softmax(-1).numpy(), rtol=1e-6)
  np.testing.assert_allclose(Tensor(logits).softmax(-1).numpy(), torch.from_numpy(logits).softmax(-1).numpy(), rtol=1e-6)


# ---------- narrowing float casts round once ----------
def _near_half_midpoints(n: int, seed: int = 0) -> np.ndarray:
  """float64 values at, and one ulp either side of, the midpoints between neighbouring float16s (where rounding through
  float32 first goes wrong), plus overflow, underflow and subnormal edges and NaN/inf."""
  rng = np.random.default_rng(seed)
  h = rng.integers(0, 0x7BFF, n).astype(np.uint16).view(np.float16)
  mid = (h.astype(np.float64) + np.nextafter(h, np.float16(np.inf)).astype(np.float64)) / 2
  edges = [65504.0, 65519.99, 65520.0, 65520.01, 1e300, 2.0**-25, 2.0**-25 * 1.0000001, 2.0**-24, 1e-300, 0.0, np.inf, np.nan]
  x = np.concatenate([mid, np.nextafter(mid, np.inf), np.nextafter(mid, -np.inf), edges])
  return np.concatenate([x, -x])


def test_float64_to_float16_rounds_once_like_numpy():
  """CLANG's double -> __fp16 cast once returned garbage (a libgcc calling-convention mismatch): every device must round
  a float64 to the nearest float16 (ties to even), as numpy does, not through float32 (that rounds twice)."""
  _skip_missing(dtypes.float64)
  _skip_missing(dtypes.float16)
  x = _near_half_midpoints(2000 if Device.DEFAULT == "PYTHON" else 50000)
  with np.errstate(over="ignore"):
    ref = x.astype(np.float16)
  got = Tensor(x).cast(dtypes.float16).numpy()
  # bit for bit, except that a NaN only has to stay a NaN: its sign and payload are the hardware's (an NVIDIA GPU's
  # conversion gives the canonical 0x7fff for -NaN too, as torch on CUDA does)
  bad = np.flatnonzero((got.view(np.uint16) != ref.view(np.uint16)) & ~(np.isnan(got) & np.isnan(ref)))
  assert bad.size == 0, f"{bad.size} of {x.size} differ, e.g. {x[bad[:3]]} -> {got[bad[:3]]} (numpy: {ref[bad[:3]]})"
  assert np.array_equal(np.isnan(got), np.isnan(x))


# ---------- NaN in comparisons and in maximum/minimum ----------
NAN_A = np.array([1.0, np.nan, 2.0, np.nan, -np.inf, 3.0, 0.0], dtype=np.float32)
NAN_B = np.array([np.nan, 1.0, 2.0, np.nan, np.inf, 1.0, -0.0], dtype=np.float32)


@pytest.mark.parametrize("op", ["lt", "le", "gt", "ge", "eq", "ne"])
def test_comparisons_with_nan_match_torch(op):
  """x <= nan and x >= nan are False (IEEE, torch); they were computed as not(x > y), which is True for NaN."""
  if not Device[Device.DEFAULT].renderer.strict_float:  # type: ignore[union-attr]
    pytest.skip(f"{Device.DEFAULT}'s compiler may assume no NaN (Renderer.strict_float = False)")
  fn = {"lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
        "eq": lambda a, b: a == b, "ne": lambda a, b: a != b}[op]
  ref = fn(torch.tensor(NAN_A), torch.tensor(NAN_B)).numpy()
  np.testing.assert_equal(fn(Tensor(NAN_A), Tensor(NAN_B)).numpy(), ref)
  np.testing.assert_equal(fn(Tensor(NAN_A), float("nan")).numpy(), fn(torch.tensor(NAN_A), float("nan")).numpy())


@pytest.mark.parametrize("op", ["maximum", "minimum"])
def test_maximum_minimum_propagate_nan_from_either_side(op):
  if not Device[Device.DEFAULT].renderer.strict_float:  # type: ignore[union-attr]
    pytest.skip(f"{Device.DEFAULT}'s compiler may assume no NaN (Renderer.strict_float = False)")
  ref = getattr(torch, op)(torch.tensor(NAN_A), torch.tensor(NAN_B)).numpy()
  np.testing.assert_equal(getattr(Tensor(NAN_A), op)(Tensor(NAN_B)).numpy(), ref)
  np.testing.assert_equal(getattr(Tensor(NAN_B), op)(Tensor(NAN_A)).numpy(), getattr(torch, op)(torch.tensor(NAN_B), torch.tensor(NAN_A)).numpy())
