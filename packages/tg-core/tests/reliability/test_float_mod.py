"""Float `%`, `//`, fmod and remainder are torch's to the bit: the remainder of two floats is exactly representable,
and torch computes it exactly (C's fmod), its floor quotient from it. `a - floor(a / b) * b` in the float itself is
not: near an integer quotient it was off by the whole divisor (-2611.3066 % 2.4917047 gave 0, not 2.49159), and past
2^24 it was noise (1e10 % 3 gave -1024). Devices with float64 compute it exactly (tg.float_mod); those
without (WEBGPU, METAL) keep the float formula, which these tests skip."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from tg import Device, Tensor, dtypes
from tg.device import is_dtype_supported

rng = np.random.default_rng(0)
# pairs per test: the PYTHON interpreter runs the ten float64 steps element by element
PAIRS = 2000 if Device.DEFAULT == "PYTHON" else 20000


@pytest.fixture(autouse=True)
def _needs_float64() -> None:
  if not is_dtype_supported(dtypes.float64, Device.DEFAULT):
    pytest.skip(f"{Device.DEFAULT} has no float64: its float % is a - floor(a / b) * b (docs/compatibility.md)")


def _pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
  """Dividends and divisors of every scale against each other: quotients from 1e-30 to 1e60, both signs, a few exact
  multiples, and near-integer quotients (where a rounded quotient is one off)."""
  mags = 10.0 ** rng.uniform(-30, 30, n)
  a = (rng.choice([-1, 1], n) * mags).astype(np.float32)
  b = (rng.choice([-1, 1], n) * 10.0 ** rng.uniform(-30, 30, n)).astype(np.float32)
  near = slice(0, n // 4)  # a = k * b (+ an ulp or two): the quotient is at an integer, where floor(a / b) goes wrong
  k = rng.integers(-5000, 5000, n // 4).astype(np.float32)
  b[near] = (rng.standard_normal(n // 4) * 3).astype(np.float32)
  a[near] = np.nextafter(k * b[near], rng.choice([-np.inf, np.inf], n // 4)).astype(np.float32)
  b[b == 0] = 1.0
  return a, b


def _same(x: np.ndarray, y: np.ndarray) -> None:
  """Equal to the bit, the sign of zero included, NaN where NaN."""
  both = np.isnan(x) & np.isnan(y)  # a NaN's sign bit means nothing (torch's are often negative)
  np.testing.assert_array_equal(np.signbit(x) & ~both, np.signbit(y) & ~both)
  np.testing.assert_array_equal(x, y)


def _reference(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """torch's float32 results as its scalar code computes them (c10's div_floor_floating, remainder, std::fmod), in
  numpy: C's fmod in float64 is exact for float32 operands. (torch's vectorized fmod gives NaN where the quotient
  passes float32's range: 6.9888006e+26 fmod 5.970897e-14 is NaN in most lanes, 5.043e-14 in C and in tg.)"""
  with np.errstate(all="ignore"):
    m = np.fmod(a.astype(np.float64), b.astype(np.float64)).astype(np.float32)
    if op == "fmod":
      return m
    off = (m != 0) & ((b < 0) != (m < 0))
    if op in ("mod", "remainder"):
      return np.where(off, m + b, m)
    div = (a - m) / b
    div = np.where(off, div - np.float32(1), div)
    fl = np.floor(div)
    fl = np.where(div - fl > 0.5, fl + np.float32(1), fl)
    zero = np.where(np.signbit(a) != np.signbit(b), np.float32(-0.0), np.float32(0.0))
    return np.where(b == 0, a / b, np.where(div != 0, fl, zero)).astype(np.float32)


def _ops(op: str) -> tuple[Any, Any]:
  return {"mod": (lambda x, y: x % y, lambda x, y: x % y), "floordiv": (lambda x, y: x // y, lambda x, y: x // y),
          "fmod": (Tensor.fmod, torch.fmod), "remainder": (Tensor.remainder, torch.remainder)}[op]


@pytest.mark.parametrize("op", ["mod", "floordiv", "fmod", "remainder"])
def test_float32_is_exact(op: str) -> None:
  """Every pair against the exact result; torch's own (vectorized) results agree wherever the quotient is finite."""
  a, b = _pairs(PAIRS)
  ours, theirs = _ops(op)
  got = ours(Tensor(a), Tensor(b)).numpy()
  _same(got, _reference(op, a, b))
  finite = np.abs(a.astype(np.float64) / b) < 2.0 ** 100
  _same(got[finite], theirs(torch.from_numpy(a[finite]), torch.from_numpy(b[finite])).numpy())


def test_the_reported_cases() -> None:
  assert (Tensor([1e10]) % 3).item() == 1.0
  assert (Tensor([-2611.3066]) % 2.4917047).item() == torch.remainder(torch.tensor([-2611.3066]), 2.4917047).item()
  assert (Tensor([-2611.3066]) // 2.4917047).item() == -1049.0
  assert (Tensor([1e10]) // 3).item() == torch.tensor([1e10]).div(3, rounding_mode="floor").item()


def test_subnormals_zeros_and_the_widest_gap() -> None:
  """Subnormal divisors and dividends, the largest float over the smallest (a gap of 276 binades), signed zeros."""
  tiny, big = np.float32(1e-45), np.finfo(np.float32).max
  a = np.array([big, -big, 1.0, 3e-39, 7e-45, -0.0, 0.0, -6.0, 6.0, 5.0, big, 1e-38], dtype=np.float32)
  b = np.array([tiny, tiny, tiny, 1e-44, 3e-45, 3.0, -3.0, 3.0, -3.0, 1e-40, 3.0, 7e-39], dtype=np.float32)
  for op in ("mod", "floordiv", "fmod"):
    _same(_ops(op)[0](Tensor(a), Tensor(b)).numpy(), _reference(op, a, b))


def test_infinities_nan_and_zero_divisors() -> None:
  inf, nan = np.inf, np.nan
  a = np.array([5.0, -5.0, inf, -inf, nan, 1.0, 5.0, -5.0, 0.0, inf, 2.0], dtype=np.float32)
  b = np.array([inf, inf, 2.0, 3.0, 1.0, nan, 0.0, -0.0, 0.0, inf, -inf], dtype=np.float32)
  ta, tb = torch.from_numpy(a), torch.from_numpy(b)
  _same((Tensor(a) % Tensor(b)).numpy(), (ta % tb).numpy())
  _same(Tensor(a).fmod(Tensor(b)).numpy(), torch.fmod(ta, tb).numpy())
  _same((Tensor(a) // Tensor(b)).numpy(), (ta // tb).numpy())


def test_python_scalars_on_either_side() -> None:
  a = np.array([-7.25, 7.25, 1e9 + 64, -3e-5, 0.1], dtype=np.float32)
  ta = torch.from_numpy(a)
  _same((Tensor(a) % 0.1).numpy(), (ta % 0.1).numpy())
  _same((Tensor(a) // -0.3).numpy(), (ta // -0.3).numpy())
  _same((1e7 % Tensor(a)).numpy(), torch.remainder(torch.tensor(1e7), ta).numpy())


@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16], ids=str)
def test_half_floats_are_float32_s_rounded_once(dt) -> None:
  """% and fmod are torch's to the bit (the exact remainder of two halves is a half). torch's half // rounds its steps
  to half (-327.5 // -0.44995 is 726 there, the floor of 727.857 here); tg's is float32's, rounded once."""
  if not is_dtype_supported(dt, Device.DEFAULT):
    pytest.skip(f"{Device.DEFAULT} has no {dt}")
  tdt = {dtypes.float16: torch.float16, dtypes.bfloat16: torch.bfloat16}[dt]
  a, b = (rng.standard_normal(PAIRS // 5) * 300).astype(np.float32), (rng.standard_normal(PAIRS // 5) * 2).astype(np.float32)
  ta, tb = torch.from_numpy(a).to(tdt), torch.from_numpy(b).to(tdt)
  x, y = Tensor(a).cast(dt), Tensor(b).cast(dt)
  for got, want in ((x % y, ta % tb), (x.fmod(y), torch.fmod(ta, tb))):
    assert got.dtype == dt
    _same(got.cast(dtypes.float32).numpy(), want.float().numpy())
  floor = x // y
  assert floor.dtype == dt
  exact = torch.from_numpy(_reference("floordiv", ta.float().numpy(), tb.float().numpy())).to(tdt).float().numpy()
  _same(floor.cast(dtypes.float32).numpy(), exact)


def test_gradients_are_torch_s() -> None:
  """d(a % b) = da - floor(a / b) db, d fmod(a, b) = da - trunc(a / b) db."""
  a, b = np.array([7.5, -7.5, 1e4 + 0.5, -3.0], dtype=np.float32), np.array([2.0, 2.0, -3.0, 0.7], dtype=np.float32)
  for f, g in ((lambda x, y: x % y, lambda x, y: x % y), (Tensor.fmod, torch.fmod)):
    x, y = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
    tx, ty = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    (f(x, y) * Tensor([1.0, 2.0, 3.0, 4.0])).sum().backward()
    (g(tx, ty) * torch.tensor([1.0, 2.0, 3.0, 4.0])).sum().backward()
    assert x.grad is not None and y.grad is not None and tx.grad is not None and ty.grad is not None
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())
    np.testing.assert_array_equal(y.grad.numpy(), ty.grad.numpy())


def test_float64_keeps_its_formula_close_to_torch() -> None:
  """float64 has no wider float to be exact in: its % stays a - floor(a / b) * b, within ulps of a of torch's."""
  a, b = (rng.standard_normal(1000) * 1e3), (rng.standard_normal(1000) * 3)
  got = (Tensor(a) % Tensor(b)).numpy()
  want = (torch.from_numpy(a) % torch.from_numpy(b)).numpy()
  assert np.all(np.abs(got - want) <= 4 * np.spacing(np.abs(a)))
