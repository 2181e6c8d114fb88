"""Transcendental fallbacks: EXP2, LOG2 and SIN built from basic ALU ops, for renderers that lack them.

A renderer lists the ops it wants expanded in `Renderer.transcendental_fallback`; `rewrite_transcendentals`
replaces each such ALU node of a kernel's UOp graph with a graph that uses only ADD, MUL, IDIV, CMPLT,
CMPNE, WHERE, NEG, integer AND/OR/SHL/SHR, CAST and BITCAST. float32 and float64 have their own
polynomials; float16 and bfloat16 are computed in float32 and rounded back.

Every step is exact or rounds once where the error analysis says so; there is no fused multiply-add
(each op is its own statement, which no renderer contracts), so exact products use Dekker's split. Max error over all
2^32 float32 inputs (against float64): exp2 0.77 ulp, log2 0.57, sin 0.82; float64 (sampled, against
mpmath): 0.60, 0.52, 0.75. Special values (+-0, +-inf, nan, denormal in or out) are as C99's. A device whose MULACC is one
rounding (a CPU with FMA) gets a shorter float32 exp2 (_exp2_fma: 20 operations instead of 65, 0.95 ulp).

- exp2(x): x = n + f with n an integer and |f| <= 1/2 (exact: f = x - trunc(x), then moved by one);
  2^f = 1 + f ln2 + f^2 Q(f) with Q a minimax polynomial, the first two terms kept exact in two floats;
  2^n is applied as two exponent-bit scalings 2^(n/2) * 2^(n - n/2), so results that are denormal
  round only once and overflow gives inf.
- log2(x): x = 2^e * m with m in [0.698, 1.396) read from the bits (denormals scaled up first). The top
  four mantissa bits of the offset bits pick one of 16 buckets with a 12-bit constant c ~ 1/m, so that
  z = m*c - 1 is computed with one rounding (m split in two halves that each multiply c exactly) and
  |z| < 0.03; log2(x) = e - log2(c) + log2(1+z), with log2(1+z) a polynomial whose leading term is
  an exact product and the sum carried in two floats until the last addition.
- sin(x): Payne-Hanek reduction for |x| >= pi/4, in integer arithmetic on 16-bit limbs: the significand
  times a window of the bits of 2/pi (chosen by the exponent), modulo 4, gives the quadrant and the
  fraction to ~70 (float32) / ~135 (float64) bits, so even huge arguments and arguments close to a
  multiple of pi/2 reduce exactly; the fraction becomes a two-float r in [-pi/4, pi/4] and minimax
  polynomials give sin(r) or cos(r). |x| < pi/4 goes to the polynomials directly.

The bit manipulation uses unsigned ints of the float's width (uint32; uint64 for float64) and uint32 limbs.
"""
from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, localcontext
from fractions import Fraction

from tg.codegen.uops import PatternMatcher, UOp, UOps, UPat, graph_rewrite
from tg.dtype import ConstType, DType, dtypes
from tg.ops import BinaryOps, TernaryOps, UnaryOps, truncate

# ---------- the float formats handled natively, and their constants ----------

@dataclass(frozen=True)
class _Fmt:
  dt: DType
  mant: int      # explicit mantissa bits
  bias: int
  utype: DType   # the unsigned int of the same width (bit fields)
  itype: DType   # the signed int of the same width (exponents)
  split: float   # Veltkamp's constant 2^ceil(p/2) + 1: splits a float into two halves whose products are exact

  @property
  def nbits(self) -> int: return self.dt.itemsize * 8


_F32 = _Fmt(dtypes.float32, 23, 127, dtypes.uint32, dtypes.int32, 4097.0)
_F64 = _Fmt(dtypes.float64, 52, 1023, dtypes.uint64, dtypes.int64, 134217729.0)
_FMTS = {dtypes.float32: _F32, dtypes.float64: _F64}
_NAN, _INF = float("nan"), float("inf")  # one object each, so the hash-consed constants are shared

# Minimax coefficients (Remez exchange in 256-bit arithmetic, each coefficient rounded to the format from the
# highest degree down, refitting the lower ones each time so they absorb the rounding). Max relative error of
# the polynomial with these coefficients is noted; it stays far below half an ulp of the final result.
_H = float.fromhex
# (2^f - 1 - f ln2) / f^2 = c0 + f*(c1 + ...) on [-1/2, 1/2]; rel. error 2^-27 (float32), 2^-54.4 (float64)
_EXP2 = {
  _F32: [_H(c) for c in ("0x1.ebfbe0p-3", "0x1.c6b08ep-5", "0x1.3b2a54p-7", "0x1.5d884ap-10", "0x1.441348p-13", "0x1.001c94p-16")],
  _F64: [_H(c) for c in ("0x1.ebfbdff82c58fp-3", "0x1.c6b08d704a0c2p-5", "0x1.3b2ab6fba4e71p-7", "0x1.5d87fe78a5289p-10",
                         "0x1.430912f86f5fbp-13", "0x1.ffcbfc6704fd1p-17", "0x1.62c0222cf6549p-20", "0x1.b524fafdab5cdp-24",
                         "0x1.e4cf746225e7cp-28", "0x1.e9d3d4677efabp-32", "0x1.c4034bbc910d4p-36")],
}
# (log2(1+z) - z/ln2) / z^2 = h0 + z*(h1 + ...) on the bucket range z in [-0.02976, 0.02965]; rel. error of h 2^-24.2 / 2^-55
_LOG2 = {
  _F32: [_H(c) for c in ("-0x1.715476p-1", "0x1.ec709ap-2", "-0x1.718c1ap-2", "0x1.27ba84p-2")],
  _F64: [_H(c) for c in ("-0x1.71547652b82fep-1", "0x1.ec709dc3a03cbp-2", "-0x1.71547652b821dp-2", "0x1.2776c50fb3b47p-2",
                         "-0x1.ec709dc72d4f8p-3", "0x1.a6174b807257dp-3", "-0x1.71544f53bf59ep-3", "0x1.48d3b83cd743ap-3",
                         "-0x1.281fe8e2520f1p-3")],
}
# (sin r - r) / r^3 = s0 + u*(s1 + ...) with u = r^2 in [0, (pi/4)^2]; rel. error 2^-25 / 2^-54
_SIN = {
  _F32: [_H(c) for c in ("-0x1.555556p-3", "0x1.11110ep-7", "-0x1.a013a2p-13", "0x1.6dbc44p-19")],
  _F64: [_H(c) for c in ("-0x1.5555555555555p-3", "0x1.1111111111110p-7", "-0x1.a01a01a01992ap-13", "0x1.71de3a545f198p-19",
                         "-0x1.ae64541073959p-26", "0x1.61217d5ff270cp-33", "-0x1.ab16ed1894e4dp-41")],
}
# (cos r - 1 + u/2) / u^2 = c0 + u*(c1 + ...); rel. error 2^-25 / 2^-54
_COS = {
  _F32: [_H(c) for c in ("0x1.555556p-5", "-0x1.6c16c0p-10", "0x1.a015c2p-16", "-0x1.25238ep-22")],
  _F64: [_H(c) for c in ("0x1.5555555555555p-5", "-0x1.6c16c16c16962p-10", "0x1.a01a019f4dca1p-16", "-0x1.27e4fa16d543cp-22",
                         "0x1.1eeb67f7cbdd4p-29", "-0x1.907d06e8e8990p-37")],
}


def _pi_times_2_pow(bits: int) -> int:
  """floor(pi * 2^bits) (to within one unit), by Machin's formula in integers: pi = 16 atan(1/5) - 4 atan(1/239)."""
  guard = 64
  one = 1 << (bits + guard)

  def atan_inv(n: int) -> int:
    total, power, k = 0, one // n, 0
    while power:
      total += power // (2 * k + 1) * (1 if k % 2 == 0 else -1)
      power //= n * n
      k += 1
    return total
  return (16 * atan_inv(5) - 4 * atan_inv(239)) >> guard


def _round(fmt: _Fmt, v: Fraction | float) -> float:
  """`v` rounded to the format (float64 rounding first for float32: the hi/lo pairs below absorb any double rounding)."""
  return float(truncate(fmt.dt, float(v)))


def _hi_lo(fmt: _Fmt, v: Fraction) -> tuple[float, float]:
  """v as hi + lo, both in the format: about twice its precision."""
  hi = _round(fmt, v)
  return hi, _round(fmt, v - Fraction(hi))


def _ln2_times_2_pow(bits: int) -> int:
  """floor(ln 2 * 2^bits) (to within one unit): ln 2 = 2 atanh(1/3) = sum 2 / ((2k+1) 3^(2k+1))."""
  guard = 64
  one = 1 << (bits + guard)
  total, power, k = 0, 2 * one // 3, 0
  while power:
    total += power // (2 * k + 1)
    power //= 9
    k += 1
  return total >> guard


_PI_BITS = 1600  # enough for the 1232 bits of 2/pi the float64 reduction reads
_PI = Fraction(_pi_times_2_pow(_PI_BITS), 1 << _PI_BITS)
_LN2 = Fraction(_ln2_times_2_pow(256), 1 << 256)


# ---------- small UOp builders ----------

def _c(dt: DType, v: ConstType) -> UOp:
  """A constant (of a vector dtype: in every lane). Scalar constants meet vector values broadcast (UOp.alu), so the
  expansions below work on vectors as they are, lane by lane."""
  return UOp.const(dt, truncate(dt.scalar(), v) if dtypes.is_float(dt.scalar()) else v)


def _dt(x: UOp) -> DType:
  assert x.dtype is not None
  return x.dtype


def _k(x: UOp, v: ConstType) -> UOp:
  """A constant of x's dtype."""
  return _c(_dt(x), v)


def _sub(a: UOp, b: UOp | ConstType) -> UOp:
  return a + (-(b if isinstance(b, UOp) else _k(a, b)))


def _where(c: UOp, a: UOp, b: UOp) -> UOp:
  return a if a is b else c.alu(TernaryOps.WHERE, a, b)


def _ne(a: UOp, b: UOp | ConstType) -> UOp:
  return a.alu(BinaryOps.CMPNE, b if isinstance(b, UOp) else _k(a, b))


def _gt(a: UOp, b: ConstType) -> UOp:
  return _k(a, b).alu(BinaryOps.CMPLT, a)


def _bitcast(x: UOp, dt: DType) -> UOp:
  return UOp(UOps.BITCAST, dt.scalar().vec(x.count), (x,))


def _and(x: UOp, m: int) -> UOp: return x.alu(BinaryOps.AND, _k(x, m))
def _shl(x: UOp, n: UOp | int) -> UOp: return x.alu(BinaryOps.SHL, n if isinstance(n, UOp) else _k(x, n))
def _shr(x: UOp, n: UOp | int) -> UOp: return x.alu(BinaryOps.SHR, n if isinstance(n, UOp) else _k(x, n))


def _horner(x: UOp, coeffs: list[float]) -> UOp:
  acc = _k(x, coeffs[-1])
  for c in reversed(coeffs[:-1]):
    acc = acc * x + c
  return acc


# ---------- error-free transformations (exact in round-to-nearest without FMA) ----------

def _two_sum(a: UOp, b: UOp) -> tuple[UOp, UOp]:
  """s + e == a + b exactly, s = fl(a + b) (Knuth)."""
  s = a + b
  bb = _sub(s, a)
  return s, _sub(a, _sub(s, bb)) + _sub(b, bb)


def _fast_two_sum(a: UOp, b: UOp) -> tuple[UOp, UOp]:
  """As _two_sum when |a| >= |b| (Dekker)."""
  s = a + b
  return s, _sub(b, _sub(s, a))


def _split_const(fmt: _Fmt, v: float) -> tuple[float, float]:
  """Veltkamp's split of a constant, done here in the format's arithmetic."""
  c = _round(fmt, v * fmt.split)  # exact in Python's double before the one rounding, also for float32
  hi = _round(fmt, c - _round(fmt, c - v))
  return hi, _round(fmt, v - hi)


def _two_prod(fmt: _Fmt, a: UOp, b: float) -> tuple[UOp, UOp]:
  """p + e == a * b exactly for a constant b (Dekker's product with Veltkamp's split)."""
  p = a * b
  t = a * fmt.split
  a1 = _sub(t, _sub(t, a))
  a2 = _sub(a, a1)
  b1, b2 = _split_const(fmt, b)
  return p, ((_sub(a1 * b1, p) + a1 * b2) + a2 * b1) + a2 * b2


# ---------- exp2 ----------

def _exp2_clamped(fmt: _Fmt, x: UOp) -> tuple[UOp, UOp]:
  """(x is NaN, x with NaN as 0 and clamped to [lo, hi]): 2^x is 0 below lo and inf above hi, so n stays small."""
  lo, hi = -(fmt.bias + fmt.mant + 3), fmt.bias + 2
  is_nan = _ne(x, x)
  xc = _where(is_nan, _c(fmt.dt, 0.0), x)
  xc = _where(xc.lt(lo), _c(fmt.dt, lo), xc)
  return is_nan, _where(_gt(xc, hi), _c(fmt.dt, hi), xc)


def _exp2_scaled(fmt: _Fmt, p: UOp, n: UOp, is_nan: UOp) -> UOp:
  """p * 2^n (NaN where x was): n/2 and n - n/2 are both normal exponents, so p * 2^n1 is exact and the second product
  rounds once (denormals too)."""
  def scale(k: UOp) -> UOp:  # 2^k for k in the normal exponent range, from its bits
    return _bitcast(_shl(k + fmt.bias, fmt.mant), fmt.dt)
  n1 = n // 2
  return _where(is_nan, _c(fmt.dt, _NAN), p * scale(n1) * scale(_sub(n, n1)))


def _exp2(fmt: _Fmt, x: UOp) -> UOp:
  dt, it = fmt.dt, fmt.itype
  is_nan, xc = _exp2_clamped(fmt, x)
  t = xc.cast(it)                       # truncation toward zero
  f = _sub(xc, t.cast(dt))              # exact: |f| < 1
  up, dn = _gt(f, 0.5), f.lt(-0.5)
  n = t + _where(up, _c(it, 1), _where(dn, _c(it, -1), _c(it, 0)))
  f = _where(up, _sub(f, 1.0), _where(dn, f + 1.0, f))  # exact, |f| <= 1/2
  # 2^f = 1 + f ln2 + f^2 Q(f): f*ln2_hi exact and 1 + it kept in two floats, so only the last addition rounds
  ln2_hi, ln2_lo = _hi_lo(fmt, _LN2)
  ph, pe = _two_prod(fmt, f, ln2_hi)
  s, se = _fast_two_sum(_c(dt, 1.0), ph)
  return _exp2_scaled(fmt, s + (se + (pe + f * (f * _horner(f, _EXP2[fmt]) + ln2_lo))), n, is_nan)


# 2^f = 1 + f*(c1 + f*(c2 + ...)) on [-1/2, 1/2] for float32 with fused multiply-adds (_exp2_fma): a near-minimax fit
# (Lawson's iteration on Chebyshev nodes), rel. error 2^-28.9 before rounding the coefficients to float32
_EXP2_FMA = [_H(c) for c in ("0x1.62e430p-1", "0x1.ebfbdcp-3", "0x1.c6aee8p-5", "0x1.3b2d4cp-7", "0x1.5f3e54p-10", "0x1.41fbbcp-13")]
_ROUND_MAGIC = 12582912.0  # 1.5 * 2^23: x + it - it is x rounded to the nearest integer (ties to even), |x| < 2^22


def _exp2_fma(fmt: _Fmt, x: UOp) -> UOp:
  """float32 exp2 on a device that fuses a*b+c into one rounding (Renderer.fused_mulacc on a CPU with FMA): x = n + f
  with n = rint(x) by the 1.5*2^23 trick and |f| <= 1/2 exact, 2^f by Horner's rule in fused multiply-adds (one
  rounding per step, the last adding the 1), then 2^n as _exp2 applies it. About 20 operations against _exp2's 65
  (whose exact products need Dekker's split without FMA). Max error 0.952 ulp, against _exp2's 0.77: every float32 with
  1/16 <= |x| <= 1/2 checked (the worst f, -0.496, gives 2^f just under 1, the finest ulp; other x have the same f, scaled
  exactly), and 24M random values elsewhere. Special values as _exp2."""
  is_nan, xc = _exp2_clamped(fmt, x)
  r = _sub(xc + _ROUND_MAGIC, _ROUND_MAGIC)  # two roundings that cancel: rint(xc), exact for |xc| <= 153
  f = _sub(xc, r)                             # exact, |f| <= 1/2
  acc = _k(f, _EXP2_FMA[-1])
  for c in (*reversed(_EXP2_FMA[:-1]), 1.0):
    acc = acc.alu(TernaryOps.MULACC, f, _k(f, c))
  return _exp2_scaled(fmt, acc, r.cast(fmt.itype), is_nan)


# ---------- log2 ----------

_LOG2_BUCKET_BITS = 4


@dataclass(frozen=True)
class _LogTable:
  off: int                              # bits of the smallest m; 1.0 sits inside bucket 9
  c: list[float]                        # per bucket: 12-bit c ~ 1/m
  lc: list[tuple[float, float]]         # per bucket: -log2(c) as hi + lo


def _log_table(fmt: _Fmt) -> _LogTable:
  step = 1 << (fmt.mant - _LOG2_BUCKET_BITS)
  one = 1 << fmt.mant
  one_bits = fmt.bias * one
  # put 1.0 two thirds into bucket 9: below 1.0 a bucket spans half as much, so z's range is about symmetric
  off = one_bits - 9 * step - (2 * step) // 3
  fmtc = "<I" if fmt is _F32 else "<Q"
  fmtf = "<f" if fmt is _F32 else "<d"

  def from_bits(b: int) -> Fraction: return Fraction(struct.unpack(fmtf, struct.pack(fmtc, b))[0])
  cs: list[float] = []
  lcs: list[tuple[float, float]] = []
  for k in range(1 << _LOG2_BUCKET_BITS):
    mid = (from_bits(off + k * step) + from_bits(off + (k + 1) * step)) / 2
    if k == 9:
      c = 1.0  # the bucket of 1.0 uses c = 1: z = m - 1 exactly, so log2 near 1 keeps full relative precision
    else:  # 1/mid rounded to 12 significant bits, so that c times a 12-bit (float32) / 41-bit (float64) half of m is exact
      num, e = Fraction(1) / mid, 0
      while num >= 2:
        num, e = num / 2, e + 1
      while num < 1:
        num, e = num * 2, e - 1
      c = float(Fraction(round(num * 2048), 2048) * Fraction(2) ** e)
    with localcontext() as ctx:
      ctx.prec = 60
      lc = -(Decimal(c).ln() / Decimal(2).ln())
      lcs.append(_hi_lo(fmt, Fraction(lc)))
    cs.append(c)
  return _LogTable(off, cs, lcs)


_LOG_TABLES = {f: _log_table(f) for f in (_F32, _F64)}


def _select(idx: UOp, values: list[float], dt: DType) -> UOp:
  """values[idx] for a small int idx, as a chain of WHEREs."""
  ret = _c(dt, values[-1])
  for i in range(len(values) - 2, -1, -1):
    ret = _where(_ne(idx, i), ret, _c(dt, values[i]))
  return ret


def _log2(fmt: _Fmt, x: UOp) -> UOp:
  dt, ut, it = fmt.dt, fmt.utype, fmt.itype
  tab = _LOG_TABLES[fmt]
  l_hi, l_lo = _hi_lo(fmt, 1 / _LN2)
  # denormals: scale into the normal range first (exact), and take the scale off the exponent
  small = x.lt(2.0 ** (1 - fmt.bias))
  xs = _where(small, x * 2.0 ** (fmt.mant + 2), x)
  e_adj = _where(small, _c(it, -(fmt.mant + 2)), _c(it, 0))
  # bits - off, shifted up by bias << mant so it can't wrap for positive x: exponent and bucket sit in the top bits
  ix = _bitcast(xs, ut) + ((fmt.bias << fmt.mant) - tab.off)
  e = _sub(_shr(ix, fmt.mant).cast(it), fmt.bias) + e_adj
  k = _and(_shr(ix, fmt.mant - _LOG2_BUCKET_BITS), (1 << _LOG2_BUCKET_BITS) - 1)
  m_bits = _and(ix, (1 << fmt.mant) - 1) + tab.off
  m = _bitcast(m_bits, dt)
  m_hi = _bitcast(_and(m_bits, ~((1 << 12) - 1) & ((1 << fmt.nbits) - 1)), dt)
  m_lo = _sub(m, m_hi)                  # exact: the low 12 bits
  c = _select(k, tab.c, dt)
  # z + z_err = m*c - 1 exactly: m_hi*c is exact and within a factor 2 of 1 (so - 1 is exact), m_lo*c is exact
  z, z_err = _two_sum(_sub(m_hi * c, 1.0), m_lo * c)
  # log2(1 + z + z_err) = z*l_hi + [z*l_lo + z^2 h(z) + z_err/ln2 (to first order)]
  tail = z * (z * _horner(z, _LOG2[fmt]) + l_lo) + z_err * l_hi
  p, p_err = _two_prod(fmt, z, l_hi)
  s, s_err = _two_sum(e.cast(dt), _select(k, [lc[0] for lc in tab.lc], dt))
  t, t_err = _two_sum(s, p)
  ret = t + (((t_err + s_err) + (_select(k, [lc[1] for lc in tab.lc], dt) + p_err)) + tail)
  # special values, as C99: log2(+-0) = -inf, log2(x < 0) = nan, log2(inf) = inf, log2(nan) = nan
  ret = _where(x.lt(0.0), _c(dt, _NAN), ret)
  ret = _where(_ne(x, 0.0), ret, _c(dt, -_INF))
  ret = _where(_ne(x, _INF), ret, _c(dt, _INF))
  return _where(_ne(x, x), _c(dt, _NAN), ret)


# ---------- sin ----------

_LIMB = 16  # the reduction works on 16-bit limbs in uint32s: a limb product fits 32 bits, a limb fits a float exactly


@dataclass(frozen=True)
class _SinTable:
  limbs: list[int]   # bits of 2/pi after `lead` zero bits, 16 per limb, most significant first
  n_window: int      # limbs of 2/pi multiplied by the significand
  k_bits: int        # bits of the limb offset


def _sin_table(fmt: _Fmt) -> _SinTable:
  # with `lead` = mant + 3 zero bits in front, the window for exponent e starts at bit e + 2 (1-based), so it is
  # never before the table's start for |x| >= 1/2; its last bit has weight 2^(2 - window bits) in x * 2/pi
  lead = fmt.mant + 3
  n_window = 6 if fmt is _F32 else 12  # product precision: 2^-70 / 2^-135 absolute, in quadrants
  k_max = (fmt.bias + 1) // _LIMB       # largest window offset in limbs (largest finite exponent)
  n_limbs = k_max + n_window + 1
  nbits = n_limbs * _LIMB - lead
  # floor(2/pi * 2^nbits): bits 1..nbits of 2/pi, the lead zeros implicit above them
  big = (1 << (nbits + 1)) * _PI.denominator // _PI.numerator
  limbs = [(big >> (_LIMB * (n_limbs - 1 - i))) & 0xFFFF for i in range(n_limbs)]
  k_bits = k_max.bit_length()
  # zeros after the end, for offsets above k_max that the barrel shifter can form but clamping never selects
  return _SinTable(limbs + [0] * (1 << k_bits), n_window, k_bits)


_SIN_TABLES = {f: _sin_table(f) for f in (_F32, _F64)}


def _reduce(fmt: _Fmt, au: UOp) -> tuple[UOp, UOp, UOp]:
  """Payne-Hanek: for |x| >= 1/2 given as its bits `au`, the quadrant q (uint32, mod 4) and r_hi + r_lo = |x| - q*pi/2
  (mod 2pi) with |r| <= pi/4."""
  dt, u32 = fmt.dt, dtypes.uint32
  tab = _SIN_TABLES[fmt]
  nw = tab.n_window
  eb = _shr(au, fmt.mant)
  eb = _where(eb.lt(fmt.bias - 1), _k(eb, fmt.bias - 1), eb)   # |x| < 1/2 is not reduced here: any valid offset will do
  eb = _where(_gt(eb, 2 * fmt.bias), _k(eb, 2 * fmt.bias), eb)  # inf and nan: likewise
  j = _sub(eb, fmt.bias - 1).cast(u32)  # = e + 1: the window's first bit, 0-based
  kk, sh = _shr(j, 4), _and(j, _LIMB - 1)
  # the window's limbs: table[kk : kk + nw + 1] by a barrel shifter over kk's bits, then shifted left by sh bits
  arr = [_c(u32, v) for v in tab.limbs]
  for b in reversed(range(tab.k_bits)):
    bit = _ne(_and(_shr(kk, b), 1), 0)
    need = nw + 1 + (1 << b) - 1
    arr = [_where(bit, arr[i + (1 << b)], arr[i]) for i in range(need)]
  window = [_and(_shl(arr[i], sh).alu(BinaryOps.OR, _shr(arr[i + 1], _sub(_c(u32, _LIMB), sh))), 0xFFFF) for i in range(nw)]
  w = window[::-1]  # least significant first
  sig = _and(au, (1 << fmt.mant) - 1).alu(BinaryOps.OR, _k(au, 1 << fmt.mant))
  a = [_and(_shr(sig, _LIMB * i), 0xFFFF).cast(u32) for i in range((fmt.mant + _LIMB) // _LIMB)]
  # significand * window modulo 2^(16 nw): 16-bit column sums of 32-bit limb products, then carries
  cols: list[list[UOp]] = [[] for _ in range(nw)]
  for i, ai in enumerate(a):
    for jj, wj in enumerate(w):
      if i + jj >= nw:
        continue
      prod = ai * wj
      cols[i + jj].append(_and(prod, 0xFFFF))
      if i + jj + 1 < nw:
        cols[i + jj + 1].append(_shr(prod, _LIMB))
  out: list[UOp] = []
  carry = _c(u32, 0)
  for col in cols:
    v = carry
    for term in col:
      v = v + term
    out.append(_and(v, 0xFFFF))
    carry = _shr(v, _LIMB)
  # value = out * 2^(2 - 16 nw) mod 4: the top two bits are the quadrant, the rest the fraction; round to the nearest quadrant
  top = out[-1]
  half = _ne(_and(_shr(top, 13), 1), 0)
  q = _and(_shr(top, 14) + _where(half, _c(u32, 1), _c(u32, 0)), 3)
  frac = out[:-1] + [_and(top, 0x3FFF)]
  # |y| with y = frac - 1 when rounded up: two's complement within the fraction's bits, limb by limb
  neg: list[UOp] = []
  carry = _c(u32, 1)
  for i, limb in enumerate(frac):
    v = _sub(_c(u32, 0x3FFF if i == nw - 1 else 0xFFFF), limb) + carry
    neg.append(_and(v, 0xFFFF))
    carry = _shr(v, _LIMB)
  mag = [_where(half, n_, p_) for n_, p_ in zip(neg, frac)]
  # to a two-float: limbs are exact in the float, added from the top with every rounding error kept
  hi = mag[-1].cast(dt) * 2.0 ** (_LIMB * (nw - 1) + 2 - _LIMB * nw)
  lo = _c(dt, 0.0)
  for i in range(nw - 2, -1, -1):
    hi, err = _two_sum(hi, mag[i].cast(dt) * 2.0 ** (_LIMB * i + 2 - _LIMB * nw))
    lo = lo + err
  hi, lo = _fast_two_sum(hi, lo)
  # r = |y| * pi/2 as a two-float
  pi2_hi, pi2_lo = _hi_lo(fmt, _PI / 2)
  p, p_err = _two_prod(fmt, hi, pi2_hi)
  p_err = p_err + (hi * pi2_lo + lo * pi2_hi)
  r_hi, r_lo = _fast_two_sum(p, p_err)
  return q, _where(half, -r_hi, r_hi), _where(half, -r_lo, r_lo)


def _sin(fmt: _Fmt, x: UOp) -> UOp:
  dt, ut, u32 = fmt.dt, fmt.utype, dtypes.uint32
  u = _bitcast(x, ut)
  sign = _ne(_shr(u, fmt.nbits - 1), 0)  # the sign bit, so that sin(-0) = -0
  au = _and(u, (1 << (fmt.nbits - 1)) - 1)
  ax = _bitcast(au, dt)
  q, r_hi, r_lo = _reduce(fmt, au)
  direct = ax.lt(0.785)  # below pi/4: no reduction
  q = _where(direct, _c(u32, 0), q)
  r_hi = _where(direct, ax, r_hi)
  r_lo = _where(direct, _c(dt, 0.0), r_lo)
  r2 = r_hi * r_hi
  # sin(r_hi + r_lo) ~ r_hi + r_hi^3 S(r^2) + r_lo cos(r_hi)
  s = r_hi + (r_hi * r2 * _horner(r2, _SIN[fmt]) + r_lo * _sub(_c(dt, 1.0), r2 * 0.5))
  # cos(r_hi + r_lo) ~ 1 - r^2/2 + r^4 C(r^2) - r_hi r_lo, with 1 - r^2/2 split so its rounding error is kept
  h = r2 * 0.5
  w = _sub(_c(dt, 1.0), h)
  c = w + (_sub(_sub(_c(dt, 1.0), w), h) + _sub(r2 * r2 * _horner(r2, _COS[fmt]), r_hi * r_lo))
  ret = _where(_ne(_and(q, 1), 0), c, s)
  ret = _where(_ne(_and(q, 2), 0), -ret, ret)
  ret = _where(sign, -ret, ret)
  return _where(ax.lt(_INF), ret, _c(dt, _NAN))  # sin(inf) = sin(nan) = nan


# ---------- the rewrite ----------

_BUILDERS = {UnaryOps.EXP2: _exp2, UnaryOps.LOG2: _log2, UnaryOps.SIN: _sin}


def expand(op: UnaryOps, x: UOp, fma: bool = False) -> UOp | None:
  """The graph computing op(x) from basic ops, or None for a dtype this has no expansion for. `fma`: the device fuses
  MULACC into one rounding, so float32 exp2 takes the shorter _exp2_fma."""
  dt = _dt(x).scalar()  # a vector is expanded as one: every op of the expansion works lane by lane
  if dt in (dtypes.float16, dtypes.bfloat16):  # float32 is exact enough for both: compute there, round once
    return expand(op, x.cast(dtypes.float32), fma).cast(dt)  # type: ignore[union-attr]
  if fma and op is UnaryOps.EXP2 and dt == dtypes.float32:
    return _exp2_fma(_F32, x)
  return _BUILDERS[op](_FMTS[dt], x) if dt in _FMTS else None


def _matcher(ops: frozenset[UnaryOps], fma: bool) -> PatternMatcher:
  def rule(op: UnaryOps) -> tuple[UPat, Callable[..., UOp | None]]:
    return UPat(UOps.ALU, arg=op, name="x"), lambda x: expand(op, x.src[0], fma)
  return PatternMatcher([rule(op) for op in sorted(ops, key=lambda o: o.value) if op in _BUILDERS])


def rewrite_transcendentals(sink: UOp, ops: frozenset[UnaryOps], fma: bool = False) -> UOp:
  """`sink` with every ALU node whose op is in `ops` (EXP2, LOG2, SIN) replaced by its expansion; other graphs unchanged.
  `fma`: MULACC is one rounding on the device (see expand)."""
  if not ops or not any(u.op is UOps.ALU and u.arg in ops for u in sink.toposort()):
    return sink
  return graph_rewrite(sink, _matcher(ops, fma))
