"""Float `%`, `//` and fmod exactly as torch computes them, from C's fmod: the remainder of two floats is itself a float
(a - n b for the integer n = trunc(a / b) is a multiple of b's last bit smaller than b), and torch's floor quotient
is derived from it. `a - floor(a / b) * b` in the float itself is not: its rounded quotient is one off near an integer
(-2611.3066 % 2.4917047 gave 0, a whole divisor from 2.49159), and its rounded product noise past 2^24 (1e10 % 3
gave -1024).

The remainder is computed in float64, where a float32 significand (24 bits) times a quotient below 2^29 is exact
(53 bits): X mod Y in steps that each take 28 binades off the gap between X and Y, Y scaled by a power of two
2^s (a multiple of Y, so X mod Y2^s mod Y = X mod Y):

    s = max(0, gap - 28 (i + 1))        gap = binade(X) - binade(Y), at most 127 + 149 = 276: 10 steps
    q = floor(X / (Y 2^s))              below 2^29, exact in float64 up to one too many or too few (two roundings)
    X = X - q Y 2^s                     exact, and then in [0, Y 2^s) after one correction

float32, float16 and bfloat16 operands (the half ones computed in float32 and rounded once, as torch) take this path
on devices with float64; float64 itself, and devices without float64 (WGSL and MSL have none), keep the formula,
within ulps of the dividend (docs/compatibility.md)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from tg.device import is_dtype_supported
from tg.dtype import DType, dtypes

if TYPE_CHECKING:
  from tg.tensor import Tensor

STEP_BINADES = 28  # a quotient below 2^29 times a 24-bit significand fits float64's 53 bits
# steps for a dtype's widest gap, ceil(gap / 28): float32's (and bfloat16's) largest finite value over its smallest
# subnormal is 127 + 149 = 276 binades, float16's 15 + 24
STEPS = {dtypes.float32: 10, dtypes.bfloat16: 10, dtypes.float16: 2}


def exact(a: Tensor) -> bool:
  """Whether a's floats get the exact remainder here: a float32-or-narrower dtype on a device with float64."""
  return a.dtype in STEPS and all(is_dtype_supported(dtypes.float64, d) for d in _devices(a))


def _devices(a: Tensor) -> tuple[str, ...]:
  return a.device if isinstance(a.device, tuple) else (a.device,)


def _negative(x: Tensor) -> Tensor:
  """x's sign bit (float32): set for -0.0 too."""
  return x.bitcast(dtypes.int32) < 0


def _binade(x: Tensor) -> Tensor:
  """The biased exponent of float32 x >= 0 (floor(log2 x) + 127) as int32, subnormals included (their own binade,
  below 1: read from x * 2^24); small and meaningless for 0, which never needs a step."""
  e = x.bitcast(dtypes.int32) >> 23
  return (e == 0).where(((x * 2.0 ** 24).bitcast(dtypes.int32) >> 23) - 24, e)


def _pow2(s: Tensor) -> Tensor:
  """2^s as float64 for int32 0 <= s <= 248, exactly: the product of two float32 powers of two built from their bits."""
  lo = s.minimum(124)
  def power(k: Tensor) -> Tensor: return ((k + 127) * (1 << 23)).bitcast(dtypes.float32).cast(dtypes.float64)
  return power(lo) * power(s - lo)


def fmod(a: Tensor, b: Tensor, dtype: DType = dtypes.float32) -> Tensor:
  """C's fmod of float32 a and b, of one shape, which hold values of `dtype` (a half dtype needs fewer steps): a -
  trunc(a / b) b with a's sign, exactly; NaN where b is 0 or NaN or a is infinite or NaN, a where b is infinite."""
  x, y = a.abs(), b.abs()
  ok = x.isfinite() & (y != 0) & y.isnan().logical_not()
  x_in, y_in = ok.where(x, 0.0), (ok & y.isfinite()).where(y, 1.0)  # no inf or NaN in the steps (0 * inf is NaN)
  big, unit = x_in.cast(dtypes.float64), y_in.cast(dtypes.float64)
  # step i's divisor is unit * 2^s_i, s_i = max(0, gap - 28 (i + 1)): the first one's power of two from its bits, each
  # next one 2^28 smaller (exact), never below unit; the quotient's reciprocal alike, from one reciprocal of unit
  scale = _pow2((_binade(x_in) - _binade(y_in) - STEP_BINADES).maximum(0))
  inv_unit, inv_scale = 1.0 / unit, 1.0 / scale
  for i in range(STEPS[dtype]):
    if i:
      scale, inv_scale = scale * 2.0 ** -STEP_BINADES, inv_scale * 2.0 ** STEP_BINADES
    step = unit * scale.maximum(1.0)
    q = (big * (inv_unit * inv_scale.minimum(1.0))).cast(dtypes.int32).cast(dtypes.float64)  # in [0, 2^29]: trunc is floor
    big = big - q * step
    big = (big < 0).where(big + step, (big >= step).where(big - step, big))
  r = (y.isinf() & ok).where(x, ok.where(big.cast(dtypes.float32), float("nan")))
  return _negative(a).where(-r, r)  # a's sign: -0.0 for an exact multiple of b below zero, and for a -0.0 dividend


def remainder(a: Tensor, m: Tensor, b: Tensor) -> Tensor:
  """Python's % (torch.remainder) of float32 a and b from m = fmod(a, b): the divisor's sign, b added in float32."""
  return ((m != 0) & ((b < 0) != (m < 0))).where(m + b, m)


def floordiv(a: Tensor, m: Tensor, b: Tensor) -> Tensor:
  """torch's float floor division of float32 a and b from m = fmod(a, b): (a - m) / b (an integer up to rounding),
  one less where m's sign isn't b's, rounded to the nearest integer; a signed zero for a zero quotient, a / b where b is
  0. The division in float64, rounded to float32 once, as torch's float32 division."""
  div = ((a - m).cast(dtypes.float64) / b.cast(dtypes.float64)).cast(dtypes.float32)
  div = ((m != 0) & ((b < 0) != (m < 0))).where(div - 1, div)
  fl = div.floor()
  fl = (div - fl > 0.5).where(fl + 1, fl)
  zero = (_negative(a) != _negative(b)).where(-0.0, 0.0)  # the sign of a / b
  return (b == 0).where(a / b, (div != 0).where(fl, zero))
