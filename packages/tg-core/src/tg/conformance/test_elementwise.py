"""Elementwise kernels, per dtype: arithmetic, comparisons, integer division's defined edge cases, NaN and inf,
transcendental functions, where, casts and bitcasts. Each result is checked against numpy."""
from __future__ import annotations

import numpy as np
import pytest

from tg import Tensor, dtypes
from tg.conformance._kit import ALL_DTYPES, FLOATS, INTS, NUMERIC, SIGNED_INTS, dtype_name, dtype_params, host_dtype, random_values, tolerance
from tg.dtype import DType
from tg.lazy import LazyBuffer
from tg.ops import BinaryOps

pytestmark = pytest.mark.needs("kernels")
N = 67  # odd: vector kernels get a remainder


def _check(got: Tensor, want: np.ndarray, dt: DType) -> None:
  out = got.numpy()
  if dtypes.is_float(dt):
    rtol, atol = tolerance(dt)
    np.testing.assert_allclose(out, want.astype(out.dtype), rtol=rtol, atol=atol)
  else:
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("dt", dtype_params(NUMERIC))
def test_arithmetic(dt: DType, rng: np.random.Generator) -> None:
  # small operands: no overflow, so numpy's wrapping and C's undefined signed overflow never differ
  lo, hi = (0, 11) if dtypes.is_unsigned(dt) else (-10, 11)
  a, b = random_values(dt, N, rng, lo, hi), random_values(dt, N, rng, lo, hi)
  ha, hb = a.astype(np.float64) if dt == dtypes.bfloat16 else a, b.astype(np.float64) if dt == dtypes.bfloat16 else b
  ta, tb = Tensor(a, dtype=dt), Tensor(b, dtype=dt)
  _check(ta + tb, ha + hb, dt)
  _check(ta * tb - ta, ha * hb - ha, dt)
  _check(ta * 3 + 1, ha * 3 + 1, dt)
  _check(ta.maximum(tb), np.maximum(ha, hb), dt)
  if dtypes.is_float(dt):
    _check(ta / (tb.abs() + 1), ha / (np.abs(hb) + 1), dt)
  if dt in SIGNED_INTS or dtypes.is_float(dt):
    _check(-ta, -ha, dt)


@pytest.mark.parametrize("n", [65537, 131071])
def test_prime_output_counts(n: int) -> None:
  """A prime number of outputs, above 65535: a GPU's launch must cover them though no grid of whole workgroups
  per dimension (Renderer.global_max) multiplies to exactly n."""
  x = np.arange(n, dtype=np.int32)
  np.testing.assert_array_equal((Tensor(x) * 3 + 1).numpy(), x * 3 + 1)


@pytest.mark.parametrize("dt", dtype_params(INTS))
def test_bitwise_and_shifts(dt: DType, rng: np.random.Generator) -> None:
  a, b = random_values(dt, N, rng), random_values(dt, N, rng)
  ta, tb = Tensor(a, dtype=dt), Tensor(b, dtype=dt)
  _check(ta & tb, a & b, dt)
  _check(ta | tb, a | b, dt)
  _check(ta ^ tb, a ^ b, dt)
  small = random_values(dt, N, rng, 0, 8)
  _check(Tensor(small, dtype=dt) << 3, small << 3, dt)
  _check(ta >> 2, a >> 2, dt)


@pytest.mark.parametrize("dt", dtype_params(ALL_DTYPES))
def test_comparisons_and_where(dt: DType, rng: np.random.Generator) -> None:
  a, b = random_values(dt, N, rng), random_values(dt, N, rng)
  b[::3] = a[::3]  # some equal pairs
  ta, tb = Tensor(a, dtype=dt), Tensor(b, dtype=dt)
  ha, hb = a.astype(host_dtype(dt)), b.astype(host_dtype(dt))
  np.testing.assert_array_equal((ta < tb).numpy(), ha < hb)
  np.testing.assert_array_equal((ta == tb).numpy(), ha == hb)
  np.testing.assert_array_equal((ta != tb).numpy(), ha != hb)
  np.testing.assert_array_equal((ta < tb).where(ta, tb).numpy(), np.where(ha < hb, ha, hb))


@pytest.mark.parametrize("dt", dtype_params(SIGNED_INTS))
def test_floor_division_and_modulo(dt: DType) -> None:
  """// and % round toward minus infinity (Python's and numpy's), for every sign combination."""
  a = np.array([-7, 7, -7, 7, 0, 5, -5, 6, -6, 1, -1, 9, 100, -100, 3], dtype=dt.np)
  b = np.array([2, -2, -2, 2, 3, 5, 3, -4, 4, -1, 7, -9, 7, 7, -100], dtype=dt.np)
  ta, tb = Tensor(a), Tensor(b)
  np.testing.assert_array_equal((ta // tb).numpy(), a // b)
  np.testing.assert_array_equal((ta % tb).numpy(), a % b)
  np.testing.assert_array_equal((ta // 3).numpy(), a // 3)
  np.testing.assert_array_equal((ta % -3).numpy(), a % -3)


def _raw(op: BinaryOps, a: Tensor, b: Tensor) -> list:  # type: ignore[type-arg]
  """The kernel's own integer division, below the Tensor's division-by-zero check (tg.divcheck)."""
  assert isinstance(a.lazydata, LazyBuffer) and isinstance(b.lazydata, LazyBuffer)
  lb = a.lazydata.e(op, b.lazydata)
  return Tensor(lb).tolist()  # type: ignore[no-any-return]


@pytest.mark.parametrize("dt", dtype_params(INTS))
def test_kernel_division_edge_cases_are_defined(dt: DType) -> None:
  """A kernel never traps: x // 0 == 0 and x % 0 == 0, and MIN // -1 == MIN (it wraps) with MIN % -1 == 0.
  (The Tensor raises ZeroDivisionError itself, test_division_by_zero_raises.)"""
  lo = int(dtypes.min(dt))
  signed = lo < 0
  a = Tensor([7, 250 if not signed else -7, lo, 3, lo], dtype=dt)
  b = Tensor([0, 0, 0, 0, -1 if signed else 1], dtype=dt)
  assert _raw(BinaryOps.IDIV, a, b) == [0, 0, 0, 0, lo]
  assert _raw(BinaryOps.MOD, a, b) == [0, 0, 0, 0, 0]


def test_division_by_zero_raises() -> None:
  a, b = Tensor([1, 2, 3], dtype=dtypes.int32), Tensor([1, 0, 3], dtype=dtypes.int32)
  with pytest.raises(ZeroDivisionError):
    (a // b).numpy()
  with pytest.raises(ZeroDivisionError):
    (a % b).tolist()
  assert (a // Tensor([1, 2, 3], dtype=dtypes.int32)).tolist() == [1, 1, 1]  # the device goes on working
  assert Tensor([1.0, -1.0]).div(0.0).tolist() == [float("inf"), float("-inf")]  # floats: IEEE, no error


@pytest.mark.needs("strict_float")
@pytest.mark.parametrize("dt", dtype_params(FLOATS))
def test_nan_and_inf(dt: DType) -> None:
  """NaN and inf pass through arithmetic, max/min reductions and comparisons as IEEE (and numpy) say."""
  nan, inf = float("nan"), float("inf")
  np.seterr(invalid="ignore")
  x = np.array([1.0, nan, -inf, inf, 0.0, -2.0], dtype=np.float32)
  y = np.array([nan, 2.0, 3.0, -inf, -0.0, -2.0], dtype=np.float32)
  tx, ty = Tensor(x, dtype=dt), Tensor(y, dtype=dt)
  np.testing.assert_array_equal((tx + ty).numpy().astype(np.float32), x + y)
  np.testing.assert_array_equal((tx * 0).numpy().astype(np.float32), x * 0)
  np.testing.assert_array_equal((tx < ty).numpy(), x < y)
  np.testing.assert_array_equal((tx == tx).numpy(), x == x)
  np.testing.assert_array_equal((tx != ty).numpy(), x != y)
  np.testing.assert_array_equal((tx > 0).numpy(), x > 0)  # (<= and >= are built from these in core)
  assert np.isnan(tx.max().item()) and np.isnan(tx.min().item())
  finite = Tensor(x[2:], dtype=dt)  # -inf, inf, 0, -2
  assert finite.max().item() == inf and finite.min().item() == -inf
  assert Tensor(x[[0, 4, 5]], dtype=dt).max().item() == 1.0
  np.testing.assert_array_equal(tx.maximum(3.0).numpy().astype(np.float32)[[0, 2, 3, 4]], [3.0, 3.0, inf, 3.0])
  np.testing.assert_array_equal(Tensor([1.0, -1.0, 0.0], dtype=dt).div(0.0).numpy().astype(np.float32)[:2], [inf, -inf])
  assert np.isnan(Tensor([0.0], dtype=dt).div(0.0).numpy()[0])


@pytest.mark.parametrize("dt", dtype_params(FLOATS))
def test_transcendental(dt: DType, rng: np.random.Generator) -> None:
  x = random_values(dt, N, rng, -3.0, 3.0)
  hx = x.astype(np.float64)
  tx = Tensor(x, dtype=dt)
  rtol, atol = tolerance(dt) if dt in (dtypes.float16, dtypes.bfloat16) else (1e-5, 1e-5)  # libm-grade, not exact
  pos = np.abs(hx) + 0.5
  for got, want in [(tx.exp(), np.exp(hx)), (tx.sin(), np.sin(hx)), (tx.abs(), np.abs(hx)), (tx.sigmoid(), 1 / (1 + np.exp(-hx))),
                    ((tx.abs() + 0.5).log(), np.log(pos)), ((tx.abs() + 0.5).sqrt(), np.sqrt(pos)),
                    ((tx.abs() + 0.5).reciprocal(), 1 / pos)]:
    np.testing.assert_allclose(got.numpy().astype(np.float64), want, rtol=rtol, atol=atol)


# casts: each dtype to and from a few others, on values both can hold exactly
CAST_TARGETS = [dtypes.bool, dtypes.uint8, dtypes.int32, dtypes.float32, dtypes.float16, dtypes.int64, dtypes.float64]


def _pair(a: DType, b: DType) -> object:
  return pytest.param(a, b, marks=pytest.mark.dtype(a, b), id=f"{dtype_name(a)}-{dtype_name(b)}")


def _cast_source(src: DType, rng: np.random.Generator) -> np.ndarray:
  """Values every cast target holds exactly or truncates the same way: 0..99, whole and fractional."""
  if src == dtypes.bool:
    return random_values(src, N, rng)
  x = random_values(src, N, rng, 0, 100)
  if dtypes.is_float(src):
    x[::2] = np.trunc(x[::2])
  return x


@pytest.mark.parametrize("src,dst", [_pair(a, b) for a in ALL_DTYPES for b in CAST_TARGETS if a != b])
def test_cast(src: DType, dst: DType, rng: np.random.Generator) -> None:
  x = _cast_source(src, rng).astype(host_dtype(src))
  got = (Tensor(x, dtype=src) + 0 if src != dtypes.bool else Tensor(x)).cast(dst).numpy()  # in a kernel, not a copy
  if dst == dtypes.float16:
    want = x.astype(np.float32).astype(np.float16)  # the values are float32-exact: no double rounding
  else:
    want = x.astype(dst.np)
  np.testing.assert_array_equal(got, want, err_msg=f"{dtype_name(src)} -> {dtype_name(dst)}")


# bitcasts: pairs of equal size, both ways
BITCASTS = [(dtypes.float32, dtypes.int32), (dtypes.float32, dtypes.uint32), (dtypes.float16, dtypes.int16), (dtypes.float16, dtypes.uint16),
            (dtypes.float64, dtypes.int64), (dtypes.uint64, dtypes.int64), (dtypes.int8, dtypes.uint8)]


@pytest.mark.parametrize("src,dst", [_pair(a, b) for a, b in BITCASTS])
def test_bitcast(src: DType, dst: DType, rng: np.random.Generator) -> None:
  x = random_values(src, N, rng) if not dtypes.is_float(src) else random_values(src, N, rng, -100.0, 100.0)
  got = (Tensor(x, dtype=src) * 1).bitcast(dst).numpy()  # the bitcast of a kernel's value, not of a buffer
  np.testing.assert_array_equal(got, x.view(dst.np))
  back = (Tensor(x.view(dst.np), dtype=dst) + 0).bitcast(src).numpy()
  np.testing.assert_array_equal(back.view(dst.np), x.view(dst.np))
