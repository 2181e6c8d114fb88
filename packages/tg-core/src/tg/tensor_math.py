"""Elementwise math beyond the primitives (erf, log1p, expm1, inverse trig, atan2, copysign, remainder) and the
linear-algebra, reduction and comparison helpers built on them (norm, amax/amin, cross, outer, bmm, tensordot,
cosine_similarity, std_mean, logcumsumexp, isclose/allclose, clone, interpolate), with PyTorch's signatures and
results. Each is a composition of Tensor ops, so it runs on every device.

The transcendental ones are polynomial fits on a reduced range (coefficients fitted for tg in float64, least squares
on Chebyshev nodes; see each table), accurate to a few float32 ulps. Their gradient is the exact derivative, not the
derivative of the fit: `_with_grad` attaches it (the fit's own derivative is less accurate, and a branch that the
value does not take can make a NaN gradient where torch's is finite)."""
from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import tg.function as F
from tg.dtype import DType, dtypes, least_upper_dtype, to_dtype
from tg.errors import AxisError, DTypeError, ShapeError, TgArgumentError
from tg.helpers import prod
from tg.lazy import LazyBuffer
from tg.multi import MultiLazyBuffer
from tg.ops import BinaryOps, MetaOps

if TYPE_CHECKING:
  from tg.tensor import Tensor

# erf(x)/x as a polynomial in x*x, for |x| < 1 (max error 3e-11)
_ERF_SMALL = (1.1283791670623593, -0.37612638475991345, 0.11283782622063879, -0.02686543831062078, 0.0052210534128620135,
              -0.0008484396555723084, 0.00011268253934346976, -9.673590934998599e-06)
# erfc(x) * exp(x*x) / t as a polynomial in t - _ERFC_MID, t = 1/(1 + x/2), for 1 <= x <= 4.2 (relative error 2e-7 in
# float32); past 4.2 erf is 1 in float32
_ERFC_MID = 0.4946236559139785
_ERFCX = (0.507113074310312, 0.6811632714657183, 0.5565628940558259, 0.14944134094807202, -0.16916989997842447,
          -0.10694533467354764, 0.09204462211122542, 0.059049595081571565)
# (atan(t) - t) / t**3 as a polynomial in t*t, for |t| <= tan(pi/8) (error 3e-9)
_ATAN = (-0.33333331813096473, 0.19999550050829817, -0.1426423202669814, 0.10746294343889361, -0.06459365682129284)
# (asin(t) - t) / t**3 as a polynomial in t*t, for |t| <= 1/2 (error 1e-9)
_ASIN = (0.16666666314449688, 0.07500098947822474, 0.04459799076923312, 0.031116535500065354, 0.01707634313800349,
         0.03380795372705164)
# atanh(r)/r as a polynomial in w = r*r, for w <= 1/9 (error 1e-10): log1p(x) = 2 s Q(s*s), s = x/(2+x), for -1/2 <= x <= 1
_LOG1P = (0.9999999999020046, 0.33333339626647174, 0.19999347406081872, 0.14310311699546485, 0.1069713373214442, 0.12204701629017874)
# (expm1(x) - x) / x**2 as a polynomial in x, for |x| <= 1/2 (error 2e-10)
_EXPM1 = (0.499999999991553, 0.16666667139685717, 0.04166666774746543, 0.008333182040871839, 0.0013888672828851248,
          0.00019962186055399068, 2.4939742054370634e-05)
_TAN_PI_8, _TAN_3PI_8 = math.tan(math.pi / 8), math.tan(3 * math.pi / 8)


def _poly(x: Tensor, coeffs: Sequence[float]) -> Tensor:
  """coeffs[0] + coeffs[1]*x + coeffs[2]*x**2 + ..., by Horner's rule."""
  r = x * coeffs[-1] + coeffs[-2]
  for c in reversed(coeffs[:-2]):
    r = r * x + c
  return r


class _Analytic(F.Function):
  """Returns `value` (computed from detached inputs); the gradient to input x_i is grad * d_i, with d_i shaped as x_i.
  `value` may be x_i reduced with its axes kept: the gradient is then expanded back. apply(value, *xs, *ds)."""

  def forward(self, value: LazyBuffer, *parts: LazyBuffer) -> LazyBuffer:
    self.partials = parts[len(parts) // 2:]
    return value

  def backward(self, grad: LazyBuffer) -> tuple[LazyBuffer | None, ...]:
    n = len(self.partials)
    grads = [(grad if grad.shape == d.shape else grad.expand(d.shape)).e(BinaryOps.MUL, d) if need else None
             for d, need in zip(self.partials, self.needs_input_grad[1:1 + n])]
    return (None, *grads, *([None] * n))


class _Vjp(F.Function):
  """Returns `value` (computed from detached inputs); the gradients to the inputs are vjp(grad), built with Tensor ops
  when backward reaches it: for a gradient cheaper written by hand than derived from the forward's ops (a tensor
  index's scatter). apply(value, *xs, vjp=...)."""

  def forward(self, value: LazyBuffer, *xs: LazyBuffer, vjp: Callable[[Tensor], Sequence[Tensor | None]]) -> LazyBuffer:
    self.vjp = vjp
    return value

  def backward(self, grad: LazyBuffer) -> tuple[LazyBuffer | MultiLazyBuffer | None, ...]:
    from tg.tensor import Tensor
    grads = self.vjp(Tensor(grad, device=grad.device, requires_grad=False))
    return (None, *[g.lazydata if g is not None and need else None for g, need in zip(grads, self.needs_input_grad[1:])])


def _with_vjp(value: Tensor, xs: Sequence[Tensor], vjp: Callable[[Tensor], Sequence[Tensor | None]]) -> Tensor:
  """`value` whose gradient to xs[i] is vjp(the gradient of value)[i]; value is computed from detached xs."""
  from tg.tensor import Tensor
  if Tensor.no_grad or not any(x.requires_grad for x in xs):
    return value
  return _Vjp.apply(value, *xs, vjp=vjp)  # type: ignore[no-any-return]


def _with_grad(value: Tensor, xs: Sequence[Tensor], partials: Callable[[], Sequence[Tensor]]) -> Tensor:
  """`value` with the gradient d value / d xs[i] = partials()[i] (computed only when a gradient is needed)."""
  from tg.tensor import Tensor
  if Tensor.no_grad or not any(x.requires_grad for x in xs):
    return value
  return _Analytic.apply(value.detach(), *xs, *[d.detach().cast(value.dtype) for d in partials()])  # type: ignore[no-any-return]


def _half_exp(a: Tensor) -> Tensor:
  """exp(a) / 2 for a >= 0, as exp(a/2)^2 / 2: finite up to the float's largest result (exp(a) alone overflows first);
  sinh and cosh past |x| = 20."""
  h = (a * 0.5).exp()
  return (h * 0.5) * h


def _signbit(x: Tensor) -> Tensor:
  """x < 0, -0.0 included (its reciprocal is -inf)."""
  return (x < 0) | ((x == 0) & (x.reciprocal() < 0))


def _atan_nonneg(a: Tensor, at_most_1: bool = False) -> Tensor:
  """atan of a >= 0 (inf and NaN included): reduced to |t| <= tan(pi/8) by atan(a) = pi/2 + atan(-1/a) and
  atan(a) = pi/4 + atan((a-1)/(a+1)); `at_most_1` says a <= 1 and drops the first."""
  mid = a > _TAN_PI_8
  t = mid.where((a - 1) / (a + 1), a)
  base = mid.where(math.pi / 4, 0.0)
  if not at_most_1:
    big = a > _TAN_3PI_8
    t, base = big.where(-a.reciprocal(), t), big.where(math.pi / 2, base)
  return base + _atan_small(t)


def _atan_small(t: Tensor) -> Tensor:
  """atan for |t| <= tan(pi/8): t * (1 + z * poly(z)), z = t*t."""
  z = t * t
  return t * (z * _poly(z, _ATAN) + 1)


def _asin_small(x: Tensor) -> Tensor:
  """asin for |x| <= 1/2."""
  z = x * x
  return x + x * z * _poly(z, _ASIN)


def _asin_reduced(a: Tensor) -> Tensor:
  """2 * asin(sqrt((1-a)/2)) for 1/2 <= a <= 1, which is pi/2 - asin(a) = acos(a), accurate near a = 1; NaN past 1."""
  z = (1 - a) * 0.5
  w = z.sqrt()
  return 2 * (w + w * z * _poly(z, _ASIN))


def _f32(v: float) -> float:
  """v rounded to float32, to compute interpolation indices as torch's float kernels do."""
  return float(struct.unpack("f", struct.pack("f", v))[0])


class MathMixin:
  # ---------- helpers ----------
  def _axis(self: Tensor, dim: int) -> int:  # type: ignore[misc]
    n = max(self.ndim, 1)
    if not isinstance(dim, int) or not -n <= dim < n:
      raise AxisError(f"dim {dim} is out of range for a tensor with {self.ndim} dimensions (expected -{n} to {n - 1})")
    return dim % n

  def _dims(self: Tensor, dim: int | Sequence[int] | None) -> tuple[int, ...]:  # type: ignore[misc]
    """The axes `dim` names (None: all), resolved and checked; a 0-d tensor has none."""
    if dim is None:
      return tuple(range(self.ndim))
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    axes = tuple(self._axis(d) for d in dims)
    if len(set(axes)) != len(axes):
      raise AxisError(f"dim {dims} names an axis more than once")
    return axes if self.ndim else ()

  def _unary_float(self: Tensor, value: Callable[[Tensor], Tensor], grad: Callable[[Tensor, Tensor], Tensor]) -> Tensor:  # type: ignore[misc]
    """An elementwise float op: ints become the default float, half floats compute in float32 (as torch); `value` gets
    the detached input, `grad` (its exact derivative) the detached input and the value."""
    x = self._upcast_half()
    xd = x.detach()
    y = value(xd)
    return _with_grad(y, [x], lambda: [grad(xd, y)]).cast(self._out_float())

  def _binary_float(self: Tensor, other: Tensor | float) -> tuple[Tensor, Tensor, DType]:  # type: ignore[misc]
    """Both operands broadcast and in the float they compute in, and the result's dtype."""
    a, b = self._broadcasted(other)
    return a._upcast_half(), b._upcast_half(), a._out_float()

  # ---------- elementwise ----------
  def erf(self: Tensor) -> Tensor:  # type: ignore[misc]
    """The error function: x * poly(x*x) for |x| < 1, 1 - t * poly(t) * exp(-x*x) past it (t = 1/(1 + |x|/2))."""
    def value(x: Tensor) -> Tensor:
      a = x.abs()
      ac = (a > 4.2).where(4.2, a)
      t = (ac * 0.5 + 1).reciprocal()
      big = 1 - t * _poly(t - _ERFC_MID, _ERFCX) * (-(ac * ac)).exp()
      return (a < 1).where(x * _poly(x * x, _ERF_SMALL), big * (x < 0).where(-1.0, 1.0))
    return self._unary_float(value, lambda x, _: (-(x * x)).exp() * (2 / math.sqrt(math.pi)))

  def cos(self: Tensor) -> Tensor:  # type: ignore[misc]
    """1 - 2 sin(x/2)^2: x/2 is exact, so sin's own reduction sees every bit of x (sin(pi/2 - x) rounded pi/2 - x to
    x's ulp first: cos(1e4) was 1.5e-4 off); the error is a few 1e-8, absolute, everywhere."""
    return self._unary_float(lambda x: 1 - 2 * (x * 0.5).sin().square(), lambda x, _: -x.sin())

  def tanh(self: Tensor) -> Tensor:  # type: ignore[misc]
    """e / (e + 2) with e = expm1(2|x|), signed: exact near 0 (2 sigmoid(2x) - 1 cancelled there: tanh(1e-5) was 1%
    off); |x| is held to 20, where tanh is 1 to float64's precision, so e never overflows."""
    def value(x: Tensor) -> Tensor:
      e = (x.abs().minimum(20.0) * 2).expm1()
      t = e / (e + 2)
      return _signbit(x).where(-t, t)
    return self._unary_float(value, lambda _, y: 1 - y * y)

  def sinh(self: Tensor) -> Tensor:  # type: ignore[misc]
    """(e + e/(e+1)) / 2 with e = expm1(|x|), signed: exact near 0 (exp(x) - exp(-x) cancels there); past |x| = 20,
    exp(|x|/2)^2 / 2, which stays finite up to float's largest sinh (exp(|x|) alone overflows first)."""
    def value(x: Tensor) -> Tensor:
      a = x.abs()
      e = a.minimum(20.0).expm1()
      r = (a <= 20).where((e + e / (e + 1)) * 0.5, _half_exp(a))
      return _signbit(x).where(-r, r)
    return self._unary_float(value, lambda x, _: x.cosh())

  def cosh(self: Tensor) -> Tensor:  # type: ignore[misc]
    """(exp(|x|) + exp(-|x|)) / 2; past |x| = 20, exp(|x|/2)^2 / 2 (finite where cosh is: cosh(89) in float32)."""
    def value(x: Tensor) -> Tensor:
      a = x.abs()
      small = a.minimum(20.0)
      return (a <= 20).where((small.exp() + (-small).exp()) * 0.5, _half_exp(a))
    return self._unary_float(value, lambda x, _: x.sinh())

  def asinh(self: Tensor) -> Tensor:  # type: ignore[misc]
    """log1p(|x| + x^2 / (1 + sqrt(1 + x^2))), signed: exact near 0; log(|x|) + log(2) past 2^28, where x^2 would
    overflow (log(x + sqrt(x^2 + 1)) gave -inf for -1e4 and inf for 1e20)."""
    def value(x: Tensor) -> Tensor:
      a = x.abs()
      small = a.minimum(2.0 ** 28)
      r = (a > 2.0 ** 28).where(a.log() + math.log(2), (small + small * small / ((small * small + 1).sqrt() + 1)).log1p())
      return _signbit(x).where(-r, r)
    return self._unary_float(value, lambda x, _: (x * x + 1).rsqrt())

  def acosh(self: Tensor) -> Tensor:  # type: ignore[misc]
    """log1p(d + sqrt(d (d + 2))) with d = x - 1 (exact near 1); log(x) + log(2) past 2^28; nan below 1."""
    def value(x: Tensor) -> Tensor:
      d = x.minimum(2.0 ** 28) - 1
      r = (x > 2.0 ** 28).where(x.log() + math.log(2), (d + (d * (d + 2)).sqrt()).log1p())
      # below -1, d (d + 2) is positive again and the sum cancels (acosh(-1e10) came out 0): NaN below 1, as torch
      return (x < 1).where(math.nan, r)
    return self._unary_float(value, lambda x, _: (x * x - 1).rsqrt())

  def atanh(self: Tensor) -> Tensor:  # type: ignore[misc]
    """log1p(2x / (1 - x)) / 2: exact near 0; +-inf at +-1, nan past."""
    return self._unary_float(lambda x: (2 * x / (1 - x)).log1p() * 0.5, lambda x, _: (1 - x * x).reciprocal())

  def log1p(self: Tensor) -> Tensor:  # type: ignore[misc]
    """log(1 + x), accurate near 0: a polynomial in s = x/(2+x) where 1/2 <= 1+x <= 2 (log1p(x) = 2 atanh(s)), log(1+x)
    past it. Devices' own log is only accurate to an absolute 2**-21 near 1 on some (WebGPU), so it isn't used there."""
    def value(x: Tensor) -> Tensor:
      s = x / (x + 2)
      return ((x >= -0.5) & (x <= 1)).where(2 * s * _poly(s * s, _LOG1P), (x + 1).log())
    return self._unary_float(value, lambda x, _: (x + 1).reciprocal())

  def expm1(self: Tensor) -> Tensor:  # type: ignore[misc]
    """exp(x) - 1, accurate near 0: x + x*x * poly(x) for |x| <= 1/2, exp(x) - 1 past it."""
    def value(x: Tensor) -> Tensor:
      return (x.abs() <= 0.5).where(x + x * x * _poly(x, _EXPM1), x.exp() - 1)
    return self._unary_float(value, lambda _, y: y + 1)  # torch's: exp(x) rounded as expm1(x) + 1

  def atan(self: Tensor) -> Tensor:  # type: ignore[misc]
    def value(x: Tensor) -> Tensor:
      return _atan_nonneg(x.abs()) * _signbit(x).where(-1.0, 1.0)  # -0.0 stays -0.0
    return self._unary_float(value, lambda x, _: (x * x + 1).reciprocal())

  def asin(self: Tensor) -> Tensor:  # type: ignore[misc]
    def value(x: Tensor) -> Tensor:
      big = (math.pi / 2 - _asin_reduced(x.abs())) * (x < 0).where(-1.0, 1.0)
      return (x.abs() <= 0.5).where(_asin_small(x), big)
    return self._unary_float(value, lambda x, _: (1 - x * x).rsqrt())

  def acos(self: Tensor) -> Tensor:  # type: ignore[misc]
    def value(x: Tensor) -> Tensor:
      neg = x < 0
      big = neg.where(math.pi, 0.0) + neg.where(-1.0, 1.0) * _asin_reduced(x.abs())
      return (x.abs() <= 0.5).where(math.pi / 2 - _asin_small(x), big)
    return self._unary_float(value, lambda x, _: -(1 - x * x).rsqrt())

  arcsin, arccos, arctan = asin, acos, atan

  def atan2(self: Tensor, other: Tensor | float) -> Tensor:  # type: ignore[misc]
    """The angle of the point (other, self), in [-pi, pi], as C's atan2 (torch.atan2(input=y, other=x)): signed zeros
    pick the half plane (atan2(0., -0.) is pi), infinities give multiples of pi/4."""
    y, x, out_dtype = self._binary_float(other)
    yd, xd = y.detach(), x.detach()
    ay, ax = yd.abs(), xd.abs()
    swap = ay > ax  # the ratio is always <= 1: atan(|y|/|x|) or pi/2 - atan(|x|/|y|)
    num, den = swap.where(ax, ay), swap.where(ay, ax)
    r = (ay.isinf() & ax.isinf()).where(1.0, (num == 0).where(0.0, num / den))
    # the angle is c + k * atan(r): swapping gives pi/2 - a, a negative x pi - a, a negative y -a. Each mask picks
    # constants, so atan(r) appears once in the expression (kernels are lowered as trees: a reused subexpression costs
    # its size again at each use)
    c, k = swap.where(math.pi / 2, 0.0), swap.where(-1.0, 1.0)
    xneg, yneg = _signbit(xd), _signbit(yd)
    c, k = xneg.where(math.pi - c, c), xneg.where(-k, k)
    c, k = yneg.where(-c, c), yneg.where(-k, k)
    value = (yd.isnan() | xd.isnan()).where(math.nan, c + k * _atan_nonneg(r, at_most_1=True))

    def partials() -> list[Tensor]:
      # torch's formula, and as torch 0 where x*x + y*y is 0 (at the origin, or squares that underflow): not 0 * inf = NaN
      denom = xd * xd + yd * yd
      recip = (denom == 0).where(0.0, denom.reciprocal())
      return [xd * recip, -yd * recip]
    return _with_grad(value, [y, x], partials).cast(out_dtype)

  arctan2 = atan2

  def copysign(self: Tensor, other: Tensor | float) -> Tensor:  # type: ignore[misc]
    """|self| with the sign of other (-0.0 counts as negative). The gradient flows to self only (torch's other gets 0)."""
    a, b, out_dtype = self._binary_float(other)
    ad = a.detach()
    flip = _signbit(ad) != _signbit(b.detach())
    return _with_grad(flip.where(-ad, ad), [a, b], lambda: [(ad == 0).where(0.0, flip.where(-1.0, 1.0)), b.detach().zeros_like()]).cast(out_dtype)

  def remainder(self: Tensor, other: Tensor | float) -> Tensor:  # type: ignore[misc]
    """torch.remainder: the remainder with the divisor's sign (Python's %); an infinite divisor gives the dividend, or
    the divisor where their signs differ (torch.remainder(-5., inf) is inf)."""
    r = self.mod(other)
    if not dtypes.is_float(r.dtype):
      return r
    a, b = self._broadcasted(other)
    a, b = a.cast(r.dtype), b.cast(r.dtype)
    inf_divisor = (b.isinf() & a.isfinite()).detach()
    return inf_divisor.where(((a != 0) & ((a < 0) != (b < 0))).detach().where(b, a), r)

  # ---------- reductions ----------
  def amax(self: Tensor, dim: int | Sequence[int] | None = (), keepdim: bool = False) -> Tensor:  # type: ignore[misc]
    """The max over `dim` (() or None: all axes); the gradient is split evenly between equal maxima (as torch)."""
    axes = self._dims(None if isinstance(dim, Sequence) and len(dim) == 0 else dim)
    return self.max(axes, keepdim) if axes else self

  def amin(self: Tensor, dim: int | Sequence[int] | None = (), keepdim: bool = False) -> Tensor:  # type: ignore[misc]
    axes = self._dims(None if isinstance(dim, Sequence) and len(dim) == 0 else dim)
    return self.min(axes, keepdim) if axes else self

  def vector_norm(self: Tensor, ord: float = 2, dim: int | Sequence[int] | None = None, keepdim: bool = False,  # type: ignore[misc]
                  dtype: DType | str | None = None) -> Tensor:
    """torch.linalg.vector_norm: (sum |x|**ord)**(1/ord) over `dim` (None: all); ord inf/-inf is max/min |x|, ord 0
    counts the nonzeros. The gradient is torch's (0 where the norm is 0)."""
    x = self if dtype is None else self.cast(to_dtype(dtype))
    if not dtypes.is_float(x.dtype):
      raise DTypeError(f"vector_norm needs a floating point tensor, not {x.dtype}")
    axes = x._dims(dim)
    if math.isinf(ord) and any(x.shape[a] == 0 for a in axes):
      raise TgArgumentError(f"the {ord} norm of an empty axis (shape {x.shape}, dim {dim}) is undefined: max and min have no identity")
    out_dtype, x = x.dtype, x._upcast_half()
    xd = x.detach()
    a = xd.abs()
    sgn = xd.sign()
    if math.isinf(ord):
      n = a.max(axes, keepdim=True) if ord > 0 else a.min(axes, keepdim=True)
    elif ord == 0:
      n = (xd != 0).cast(x.dtype).sum(axes, keepdim=True)
    elif ord == 1:
      n = a.sum(axes, keepdim=True)
    elif ord == 2:
      n = (xd * xd).sum(axes, keepdim=True).sqrt()
    else:
      n = a.pow(ord).sum(axes, keepdim=True).pow(1 / ord)

    def partials() -> list[Tensor]:
      # torch's gradients (linalg_vector_norm_backward): 0 where the norm is 0, split evenly between maxima for inf
      if math.isinf(ord):
        hit = ((a == n) | a.isnan()).cast(x.dtype)
        return [sgn * hit / hit.sum(axes, keepdim=True)]
      if ord == 0:
        return [xd * 0]
      if ord == 1:
        return [sgn]
      if ord == 2:
        return [(n == 0).where(0.0, xd / n)]
      if ord < 1:
        return [sgn * (xd == 0).where(0.0, a.pow(ord - 1)) * n.pow(1 - ord)]
      return [sgn * a.pow(ord - 1) * (n == 0).where(0.0, n.pow(ord - 1).reciprocal())]
    out = _with_grad(n, [x], partials)
    if not keepdim:
      out = out.reshape(tuple(s for i, s in enumerate(x.shape) if i not in axes))
    return out.cast(out_dtype)

  def norm(self: Tensor, p: float | str | None = "fro", dim: int | Sequence[int] | None = None, keepdim: bool = False,  # type: ignore[misc]
           dtype: DType | str | None = None) -> Tensor:
    """torch.Tensor.norm: a number p is the vector p-norm over `dim` (None: all elements); "fro" is the 2-norm over
    at most two axes. The nuclear norm ("nuc") needs an SVD, which tg does not have."""
    if isinstance(p, str):
      if p == "nuc":
        raise NotImplementedError("norm(p='nuc') needs singular values, which tg does not compute")
      if p != "fro":
        raise TgArgumentError(f"norm's p must be a number, 'fro' or 'nuc', not {p!r}")
      if dim is not None and not isinstance(dim, int) and len(dim) > 2:
        raise TgArgumentError(f"the Frobenius norm takes at most 2 dims, got {dim}")
      p = 2
    return self.vector_norm(2 if p is None else p, dim, keepdim, dtype)

  def var_mean(self: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False,  # type: ignore[misc]
               correction: int = 1) -> tuple[Tensor, Tensor]:
    """(var, mean) over `axis`, as torch.var_mean."""
    return self.var(axis, keepdim, correction), self.mean(axis, keepdim)

  def std_mean(self: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False,  # type: ignore[misc]
               correction: int = 1) -> tuple[Tensor, Tensor]:
    """(std, mean) over `axis`, as torch.std_mean."""
    return self.std(axis, keepdim, correction), self.mean(axis, keepdim)

  def logcumsumexp(self: Tensor, axis: int = 0) -> Tensor:  # type: ignore[misc]
    """log(cumsum(exp(x))) along `axis`, stable, in the blocks of `cumsum` (n * CUMSUM_BLOCK work, where one window
    per element was n^2: 2^20 elements took hours)."""
    x = self._upcast_half()
    if x.ndim == 0:
      return x.cast(self._out_float())
    ax = x._axis(axis)
    n = x.shape[ax]
    if not isinstance(n, int):
      raise TgArgumentError("logcumsumexp over a symbolic axis is not supported")
    if n <= 1:
      return x.cast(self._out_float())
    return x.transpose(ax, -1)._logcumsumexp_last().transpose(ax, -1).cast(self._out_float())

  def _logcumsumexp_last(self: Tensor) -> Tensor:  # type: ignore[misc]
    """Up to 2 * CUMSUM_BLOCK: each prefix is a logsumexp over its own window (the input padded with n-1 -infs in
    front, read in windows of n), shifted by that window's max. Longer: each block's running values that way, added
    (logaddexp) to the running value of the blocks before it, as `Tensor._cumsum_last` adds sums."""
    from tg.tensor import CUMSUM_BLOCK
    n = self.shape[-1]
    assert isinstance(n, int)
    if n <= 2 * CUMSUM_BLOCK:
      w = self.pad2d((n - 1, 0), value=-math.inf)._pool((n,))
      m = w.max(-1, keepdim=True).detach()
      m = m.isinf().where(0.0, m)  # a window of -infs (or holding +inf) needs no shift: exp(-inf - -inf) would be NaN
      return (w - m).exp().sum(-1).log() + m.squeeze(-1)
    b, nb, lead = CUMSUM_BLOCK, -(-n // CUMSUM_BLOCK), self.shape[:-1]
    inner = self.pad2d((nb * b - n, 0), value=-math.inf).reshape(*lead, nb, b).contiguous()._logcumsumexp_last().contiguous()
    totals = inner.shrink(tuple([None] * len(lead) + [(0, nb - 1), (b - 1, b)])).reshape(*lead, nb - 1)
    before = totals._logcumsumexp_last().pad2d((1, 0), value=-math.inf)  # the blocks before each block (-inf: none)
    out = _logaddexp(inner, before.unsqueeze(-1).expand(inner.shape))
    return out.reshape(*lead, nb * b).shrink(tuple([None] * len(lead) + [(nb * b - n, nb * b)]))

  # ---------- linear algebra ----------
  def cross(self: Tensor, other: Tensor, dim: int | None = None) -> Tensor:  # type: ignore[misc]
    """The cross product of 3-vectors along `dim` (None: the first axis of size 3, as torch.cross), broadcasting."""
    a, b = self._broadcasted(other)
    if dim is None:
      found = [i for i, s in enumerate(a.shape) if s == 3]
      if not found:
        raise ShapeError(f"cross needs an axis of size 3, shapes are {self.shape} and {other.shape}")
      d = found[0]
    else:
      d = a._axis(dim)
    if a.ndim == 0 or a.shape[d] != 3:
      raise ShapeError(f"cross needs size 3 along dim {dim}, got shapes {self.shape} and {other.shape}")

    def part(t: Tensor, i: int) -> Tensor:
      return t.shrink(tuple((i, i + 1) if j == d else None for j in range(t.ndim)))
    a0, a1, a2 = (part(a, i) for i in range(3))
    b0, b1, b2 = (part(b, i) for i in range(3))
    return (a1 * b2 - a2 * b1).cat(a2 * b0 - a0 * b2, a0 * b1 - a1 * b0, dim=d)

  def outer(self: Tensor, other: Tensor) -> Tensor:  # type: ignore[misc]
    """The outer product of two 1-d tensors: out[i, j] = self[i] * other[j]."""
    if self.ndim != 1 or other.ndim != 1:
      raise ShapeError(f"outer needs two 1-d tensors, got shapes {self.shape} and {other.shape}")
    return self.reshape(-1, 1) * other.reshape(1, -1)

  ger = outer

  def bmm(self: Tensor, other: Tensor) -> Tensor:  # type: ignore[misc]
    """Batched matrix product of (b, n, m) and (b, m, p) tensors (no broadcasting, as torch.bmm)."""
    if self.ndim != 3 or other.ndim != 3:
      raise ShapeError(f"bmm needs two 3-d tensors (batch, rows, cols), got shapes {self.shape} and {other.shape}")
    if self.shape[0] != other.shape[0] or self.shape[2] != other.shape[1]:
      raise ShapeError(f"bmm shapes don't fit: {self.shape} @ {other.shape} needs the second to be "
                       f"({self.shape[0]}, {self.shape[2]}, p)")
    return self._matmul_keep(other)

  def _matmul_keep(self: Tensor, other: Tensor) -> Tensor:  # type: ignore[misc]
    """self @ other in the operands' common dtype (an int matmul sums to int64 otherwise)."""
    return self.matmul(other).cast(least_upper_dtype(self.dtype, other.dtype))

  def tensordot(self: Tensor, other: Tensor, dims: int | Sequence[Any] = 2) -> Tensor:  # type: ignore[misc]
    """Sum of products over the axes dims[0] of self and dims[1] of other (an int n: self's last n and other's
    first n), as torch.tensordot. The result has self's other axes, then other's."""
    if isinstance(dims, int):
      if dims < 0:
        raise TgArgumentError(f"tensordot needs dims >= 0, got {dims}")
      if dims > min(self.ndim, other.ndim):
        raise TgArgumentError(f"tensordot dims={dims} is more than the tensors' dimensions ({self.ndim} and {other.ndim})")
      da, db = list(range(self.ndim - dims, self.ndim)), list(range(dims))
    else:
      if len(dims) != 2:
        raise TgArgumentError(f"tensordot dims must be an int or two lists of axes, got {dims}")
      da_, db_ = ([d] if isinstance(d, int) else list(d) for d in dims)
      if len(da_) != len(db_):
        raise TgArgumentError(f"tensordot needs as many axes of each tensor, got {da_} and {db_}")
      da, db = list(self._dims(da_)), list(other._dims(db_))
    a, b = self, other
    for i, j in zip(da, db):  # a size-1 axis contracts with any size (torch sums the other side)
      sa, sb = a.shape[i], b.shape[j]
      if sa != sb and sa != 1 and sb != 1:
        raise ShapeError(f"tensordot contracts axis {i} of {self.shape} with axis {j} of {other.shape}: sizes {sa} and {sb} differ")
      if sa == 1 and sb != 1:
        a = a.expand(tuple(sb if k == i else s for k, s in enumerate(a.shape)))
      elif sb == 1 and sa != 1:
        b = b.expand(tuple(sa if k == j else s for k, s in enumerate(b.shape)))
    fa, fb = [i for i in range(a.ndim) if i not in da], [j for j in range(b.ndim) if j not in db]
    k = prod(a.shape[i] for i in da)
    am = a.permute(fa + da).reshape(prod(a.shape[i] for i in fa), k)
    bm = b.permute(db + fb).reshape(k, prod(b.shape[j] for j in fb))
    return am._matmul_keep(bm).reshape(tuple(a.shape[i] for i in fa) + tuple(b.shape[j] for j in fb))

  def cosine_similarity(self: Tensor, other: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:  # type: ignore[misc]
    """sum(x1/|x1| * x2/|x2|) over `dim`, each norm at least eps (torch's formula; the clamp leaves the norm's gradient
    in place, as torch's clamp under no_grad does)."""
    a, b = self._broadcasted(other)
    if not dtypes.is_float(a.dtype):
      raise DTypeError(f"cosine_similarity needs floating point tensors, not {a.dtype}")
    n1, n2 = (t.vector_norm(2, dim, keepdim=True) for t in (a, b))
    n1, n2 = (n + (eps - n).relu().detach() for n in (n1, n2))
    return ((a / n1) * (b / n2)).sum(dim)

  # ---------- comparison and copies ----------
  def isclose(self: Tensor, other: Tensor | float, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Tensor:  # type: ignore[misc]
    """|self - other| <= atol + rtol * |other| where that is finite, or equal (equal infinities); NaNs are close to each
    other only with equal_nan. Unlike torch, operands of different dtypes are promoted rather than refused."""
    if rtol < 0 or atol < 0:
      raise TgArgumentError(f"isclose needs rtol >= 0 and atol >= 0, got rtol={rtol}, atol={atol}")
    a, b = self._broadcasted(other)
    close = a == b
    if a.dtype == dtypes.bool:
      return close
    if not dtypes.is_float(a.dtype):
      a, b = a.cast(dtypes.default_float), b.cast(dtypes.default_float)
    err = (a - b).abs()
    close = close | (err.isfinite() & (err <= (b * rtol).abs() + atol))
    return close | (a.isnan() & b.isnan()) if equal_nan else close

  def allclose(self: Tensor, other: Tensor | float, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> bool:  # type: ignore[misc]
    return bool(self.isclose(other, rtol, atol, equal_nan).all().item())

  def clone(self: Tensor) -> Tensor:  # type: ignore[misc]
    """A copy in a buffer of its own (writing to it leaves self alone); the gradient flows through, as torch's."""
    return _Clone.apply(self)  # type: ignore[no-any-return]

  # ---------- resampling ----------
  def interpolate(self: Tensor, size: int | Sequence[int] | None = None, scale_factor: float | Sequence[float] | None = None,  # type: ignore[misc]
                  mode: str = "nearest", align_corners: bool | None = None, recompute_scale_factor: bool | None = None) -> Tensor:
    """Resize the spatial axes, as torch.nn.functional.interpolate: `size` (one int for every axis after the first
    two, or one per trailing axis) or `scale_factor`; mode "nearest", "nearest-exact", "linear", "bilinear" (2
    axes) or "trilinear" (3 axes), align_corners for the linear ones. Each axis is resampled in turn, by a
    (out, in) weight matrix built from torch's float32 source indices (integer nearest scales are plain movement ops).
    Unlike torch, "linear" takes any number of axes (tinygrad's interpolate)."""
    linear = mode in ("linear", "bilinear", "trilinear")
    if mode in ("bicubic", "area"):
      raise NotImplementedError(f"interpolate mode {mode!r} is not supported (nearest, nearest-exact, linear, bilinear, trilinear are)")
    if not linear and mode not in ("nearest", "nearest-exact"):
      raise TgArgumentError(f"unknown interpolate mode {mode!r}: expected nearest, nearest-exact, linear, bilinear or trilinear")
    if not linear and align_corners is not None:
      raise TgArgumentError("align_corners only applies to the linear modes (linear, bilinear, trilinear)")
    if (size is None) == (scale_factor is None):
      raise TgArgumentError("interpolate needs exactly one of size and scale_factor")
    if recompute_scale_factor and size is not None:
      raise TgArgumentError("recompute_scale_factor only applies with scale_factor")
    spec: Any = size if size is not None else scale_factor
    k = len(spec) if isinstance(spec, Sequence) else self.ndim - 2
    if k < 1 or k > self.ndim:
      raise ShapeError(f"interpolate needs input (N, C, *spatial) with at least one spatial axis, got shape {self.shape}")
    if (mode == "bilinear" and k != 2) or (mode == "trilinear" and k != 3):
      raise ShapeError(f"interpolate mode {mode!r} resizes {2 if mode == 'bilinear' else 3} axes, got {k} for shape {self.shape}")
    specs = list(spec) if isinstance(spec, Sequence) else [spec] * k
    axes = list(range(self.ndim - k, self.ndim))
    ins = [self.shape[a] for a in axes]
    if not all(isinstance(s, int) for s in ins):
      raise TgArgumentError(f"interpolate needs concrete sizes on the resized axes, got {self.shape}")
    if scale_factor is not None:
      outs = [math.floor(float(i) * float(s)) for i, s in zip(ins, specs)]  # type: ignore[arg-type]
      scales: list[float | None] = [None if recompute_scale_factor else float(s) for s in specs]
    else:
      outs, scales = [int(s) for s in specs], [None] * k
    if any(i <= 0 or o <= 0 for i, o in zip(ins, outs)):  # type: ignore[operator]
      raise ShapeError(f"interpolate needs input and output sizes > 0, got input {tuple(ins)} and output {tuple(outs)}")
    if linear and not dtypes.is_float(self.dtype):
      raise DTypeError(f"interpolate mode {mode!r} needs a floating point tensor, not {self.dtype}")
    x = self._upcast_half() if linear else self
    for ax, n_in, n_out, sc in zip(axes, ins, outs, scales):
      x = x._resample_axis(ax, n_in, n_out, sc, mode, bool(align_corners))  # type: ignore[arg-type]
    return x.cast(self.dtype)

  def _resample_axis(self: Tensor, ax: int, n_in: int, n_out: int, scale: float | None, mode: str, align_corners: bool) -> Tensor:  # type: ignore[misc]
    from tg.tensor import Tensor
    # torch's source scale: 1/scale_factor where given, else in/out, in float32
    s = _f32(1.0 / scale) if scale is not None and scale > 0 else _f32(n_in / n_out)
    if mode in ("nearest", "nearest-exact"):
      if n_out == n_in:
        return self
      if mode == "nearest":
        idx = [min(math.floor(_f32(o * s)), n_in - 1) for o in range(n_out)]
      else:
        idx = [min(math.floor(_f32(_f32(o + 0.5) * s)), n_in - 1) for o in range(n_out)]
      if n_out % n_in == 0 and idx == [o // (n_out // n_in) for o in range(n_out)]:  # each input repeated r times
        r = n_out // n_in
        rep = self.unsqueeze(ax + 1)
        return rep.expand(rep.shape[:ax + 1] + (r,) + rep.shape[ax + 2:]).reshape(self.shape[:ax] + (n_out,) + self.shape[ax + 1:])
      if n_in % n_out == 0 and idx == [o * (n_in // n_out) for o in range(n_out)]:  # every r-th input
        r = n_in // n_out
        x = self.reshape(self.shape[:ax] + (n_out, r) + self.shape[ax + 1:])
        return x.shrink(tuple((0, 1) if j == ax + 1 else None for j in range(x.ndim))).reshape(self.shape[:ax] + (n_out,) + self.shape[ax + 1:])
      cols = Tensor.arange(n_in, device=self.device).reshape(1, n_in)
      pick = cols == Tensor(idx, dtype=dtypes.int32, device=self.device).reshape(n_out, 1)
      xt = (self.cast(dtypes.int32) if self.dtype == dtypes.bool else self).transpose(ax, -1).unsqueeze(-2)
      return pick.where(xt, 0).sum(-1).cast(self.dtype).transpose(ax, -1)  # a select, not a product: a NaN stays in its place
    i0s, i1s, l0s, l1s = [], [], [], []
    if align_corners:
      s = _f32((n_in - 1) / (n_out - 1)) if n_out > 1 else 0.0
    for o in range(n_out):
      src = _f32(s * o) if align_corners else max(_f32(_f32(s * _f32(o + 0.5)) - 0.5), 0.0)
      i0 = min(math.floor(src), n_in - 1)
      l1 = min(max(_f32(src - i0), 0.0), 1.0)
      i0s.append(i0)
      i1s.append(i0 + (1 if i0 < n_in - 1 else 0))
      l0s.append(_f32(1.0 - l1))
      l1s.append(l1)
    if i0s == list(range(n_in)) and all(v == 0 for v in l1s):
      return self
    cols = Tensor.arange(n_in, device=self.device).reshape(1, n_in)

    def column(v: list[Any], dt: DType) -> Tensor: return Tensor(v, dtype=dt, device=self.device).reshape(n_out, 1)
    at0, at1 = cols == column(i0s, dtypes.int32), cols == column(i1s, dtypes.int32)
    w = at0.where(column(l0s, self.dtype), 0.0) + at1.where(column(l1s, self.dtype), 0.0)
    # only the two source elements enter each output: a NaN or inf elsewhere in the row must not (0 * inf is NaN)
    return (at0 | at1).where(self.transpose(ax, -1).unsqueeze(-2) * w, 0.0).sum(-1).transpose(ax, -1)


class _Clone(F.Function):
  def forward(self, x: LazyBuffer) -> LazyBuffer:
    # always a new buffer: contiguous() of a realized contiguous buffer is the buffer itself
    return LazyBuffer.metaop(MetaOps.CONTIGUOUS, x.shape, x.dtype, x.device, srcs=(x,))

  def backward(self, grad: LazyBuffer) -> LazyBuffer:
    return grad


def _logaddexp(a: Tensor, b: Tensor) -> Tensor:
  """log(exp(a) + exp(b)) without overflow: max + log1p(exp(-|a - b|)). Where the max is infinite it is the answer,
  and the difference is taken as 0 there (inf - inf is NaN, and its gradient would be too, through the unused branch)."""
  m = a.maximum(b)
  inf = m.isinf()
  return inf.where(m, m + (-inf.where(0.0, a - b).abs()).exp().log1p())
