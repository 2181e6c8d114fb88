"""How tg's values and ALU ops are spelled in WGSL, with tg's semantics (the PYTHON device's `exec_alu`).

Values live in WGSL's 32-bit types: int8/int16 in an i32 and uint8/uint16 in a u32, wrapped back into their
range after every op that can leave it; bool is WGSL's bool. WGSL differs from C where tg pins a meaning:
integer division or modulo by zero gives 0 here (WGSL returns the dividend), a float -> uint32 cast (core sends the
other float -> int casts through int32 itself) gives 0 for NaN and infinities and wraps negatives (WGSL saturates),
as core's rule through int64 does, and infinities and NaN, which
WGSL forbids as literals, come from tiny helper functions that build them from their bits at run time.

WGSL also lets an implementation assume no NaN or infinity appears, and drivers use that (lavapipe folds
`x != x` to false and compares as if ordered). So float comparisons and MAX test for NaN on the bits, where
no float rule applies; what a driver does to arithmetic itself (`x * 0` folded to 0) can't be fixed here.
"""
from __future__ import annotations

import math
import re
import struct
from collections.abc import Callable

from tg.dtype import DType, dtypes
from tg.ops import BinaryOps, Op, TernaryOps, UnaryOps

# helper functions a kernel includes when its text calls them; `var` keeps them out of WGSL's constant evaluation
HELPERS = {
  "tg_inf()": "fn tg_inf() -> f32 { var bits = 0x7f800000u; return bitcast<f32>(bits); }",
  "tg_nan()": "fn tg_nan() -> f32 { var bits = 0x7fc00000u; return bitcast<f32>(bits); }",
}


class WGSLTypeError(NotImplementedError):
  pass


def reg_type(dt: DType) -> str:
  """The WGSL type a value of `dt` is computed in."""
  if dt == dtypes.bool:
    return "bool"
  if dt in (dtypes.float32, dtypes.float16):
    return "f32" if dt == dtypes.float32 else "f16"
  if dtypes.is_int(dt) and dt.itemsize <= 4:
    return "u32" if dtypes.is_unsigned(dt) else "i32"
  raise WGSLTypeError(f"WGSL has no {dt} (WEBGPU computes in 32-bit types, f16 with the shader-f16 feature)")


def zero(dt: DType) -> str:
  return {"bool": "false", "f32": "0.0f", "f16": "0.0h", "u32": "0u", "i32": "0i"}[reg_type(dt)]


def wrap(x: str, dt: DType) -> str:
  """`x` (an i32/u32 expression) brought back into the range of the narrower int `dt`, as a C cast wraps."""
  if not dtypes.is_int(dt) or dt.itemsize >= 4:
    return x
  bits = dt.itemsize * 8
  return f"({x} & {(1 << bits) - 1:#x}u)" if dtypes.is_unsigned(dt) else f"extractBits({x}, 0u, {bits}u)"  # extractBits sign-extends i32


def const(x: object, dt: DType) -> str:
  reg = reg_type(dt)
  if reg == "bool":
    return "true" if x else "false"
  if reg in ("f32", "f16"):
    v = _round(float(x), "<f" if reg == "f32" else "<e")  # type: ignore[arg-type]
    if math.isnan(v) or math.isinf(v):
      s = "tg_nan()" if math.isnan(v) else ("-tg_inf()" if v < 0 else "tg_inf()")
      return f"({s})" if reg == "f32" else f"f16({s})"
    s = f"{v!r}{'f' if reg == 'f32' else 'h'}"
    return f"({s})" if v < 0 or s.startswith("-") else s
  assert isinstance(x, int)
  if reg == "u32":
    return f"{x}u"
  return f"({x}i)" if x > -2**31 and x < 0 else ("i32(-2147483648)" if x == -2**31 else f"{x}i")


def _round(x: float, fmt: str) -> float:
  """x rounded to float32/float16 (too big: infinity), so a literal is exactly the value tg computed with."""
  if math.isnan(x) or math.isinf(x):
    return x
  try:
    return float(struct.unpack(fmt, struct.pack(fmt, x))[0])
  except OverflowError:
    return math.copysign(math.inf, x)


def cast(x: str, src: DType, dst: DType) -> str:
  """Value conversion with tg's semantics (see the module docstring)."""
  sreg, dreg = reg_type(src), reg_type(dst)
  if dst == dtypes.bool:
    return f"({x} != {zero(src)})"
  if src == dtypes.bool or dtypes.is_float(dst):
    return f"{dreg}({x})"  # WGSL converts bool to 0/1, and ints to the nearest float
  if dtypes.is_float(src):
    # core sends other targets through int32 first (codegen/lowerer.py _float_to_int): this is uint32 without int64,
    # where tg's result through int64 is 0 for NaN and the infinities, a wrapped truncation for other floats
    f = x if src == dtypes.float32 else f"f32({x})"
    finite = f"((bitcast<u32>({f}) & 0x7fffffffu) < 0x7f800000u)"  # on the bits: a driver may assume floats are finite
    as_int = f"select(0i, i32({x}), {finite})"
    if dreg == "u32":
      # u32() saturates negatives to 0; through i32 they wrap like a C cast on every common CPU
      return wrap(f"select(0u, select(u32({x}), bitcast<u32>(i32({x})), {x} < {zero(src)}), {finite})", dst)
    return wrap(as_int, dst)
  # int -> int: i32 <-> u32 keeps the bits; then wrap into a narrower target
  return wrap(x if sreg == dreg else f"{dreg}({x})", dst)


def bitcast(x: str, src: DType, dst: DType) -> str:
  if src.itemsize != dst.itemsize:
    raise WGSLTypeError(f"can't bitcast {src} to {dst}: sizes differ")
  if src.itemsize == 4:
    return f"bitcast<{reg_type(dst)}>({x})"
  if dtypes.float16 in (src, dst):  # through pack/unpack2x16float, the 16-bit conversions WGSL has without f16 bitcasts
    if src == dtypes.float16:
      bits = f"(pack2x16float(vec2<f32>(f32({x}), 0.0f)) & 0xffffu)"
      return bits if dtypes.is_unsigned(dst) else wrap(f"bitcast<i32>({bits})", dst)
    return f"f16(unpack2x16float(u32({x}) & 0xffffu).x)"
  return cast(x, src, dst)  # 8/16-bit ints of the same size: the same bits, wrapped into the other range


_FINITE_LITERAL = re.compile(r"\(?-?[0-9.]+(e[+-]?[0-9]+)?[fh]\)?")


def isnan(x: str, dt: DType) -> str:
  """NaN test on the bits: immune to a driver's no-NaN assumption (f16 widens exactly to f32, NaN stays NaN)."""
  f = x if dt == dtypes.float32 else f"f32({x})"
  return f"((bitcast<u32>({f}) & 0x7fffffffu) > 0x7f800000u)"


def _nan_terms(dt: DType, *xs: str) -> str:
  """`isnan(x) | ...` over the operands that can be NaN (a finite literal can't); "" when none can."""
  return " | ".join(isnan(x, dt) for x in dict.fromkeys(xs) if not _FINITE_LITERAL.fullmatch(x))


def _cmplt(a: str, b: str, dt: DType) -> str:
  if dt == dtypes.bool:
    return f"((!{a}) & {b})"
  if not dtypes.is_float(dt) or not (nan := _nan_terms(dt, a, b)):
    return f"({a} < {b})"
  return f"(({a} < {b}) & !({nan}))"


def _cmpne(a: str, b: str, dt: DType) -> str:
  if not dtypes.is_float(dt) or not (nan := _nan_terms(dt, a, b)):
    return f"({a} != {b})"
  return nan if a == b else f"(({a} != {b}) | {nan})"  # x != x is how tg spells isnan


_NONZERO_INT_LITERAL = re.compile(r"\(?-?[1-9][0-9]*[iu]\)?")


def _safe_div(op: str) -> Callable[[str, str, DType], str]:
  # tg gives 0 for integer division and modulo by zero; WGSL gives the dividend for / and 0 for %
  def render(a: str, b: str, dt: DType) -> str:
    if dtypes.is_float(dt) or _NONZERO_INT_LITERAL.fullmatch(b):
      return wrap(f"({a} {op} {b})", dt)
    return wrap(f"select({a} {op} {b}, {zero(dt)}, {b} == {zero(dt)})", dt)
  return render


def _neg(a: str, dt: DType) -> str:
  if dt == dtypes.bool:
    return f"(!{a})"
  return wrap(f"(0u - {a})" if dtypes.is_unsigned(dt) else f"(-{a})", dt)


def _max(a: str, b: str, dt: DType) -> str:
  if dt == dtypes.bool:
    return f"({a} | {b})"
  if dtypes.is_float(dt):  # NaN wins, as in tg (WGSL's max may return either operand)
    cond = f"({a} > {b})"
    if (b_nan := _nan_terms(dt, b)):
      cond = f"({cond} & !{b_nan})"
    if (a_nan := _nan_terms(dt, a)):
      cond = f"({cond} | {a_nan})"  # WGSL wants parentheses wherever & and | mix
    return f"select({b}, {a}, {cond})"
  return f"max({a}, {b})"


# each takes the operands and the dtype of the first operand (the result's dtype except for comparisons)
code_for_op: dict[Op, Callable[..., str]] = {
  UnaryOps.NEG: _neg,
  UnaryOps.SQRT: lambda a, dt: f"sqrt({a})", UnaryOps.EXP2: lambda a, dt: f"exp2({a})",
  UnaryOps.LOG2: lambda a, dt: f"log2({a})", UnaryOps.SIN: lambda a, dt: f"sin({a})",
  UnaryOps.RECIP: lambda a, dt: f"({const(1.0, dt)} / {a})",
  BinaryOps.ADD: lambda a, b, dt: f"({a} | {b})" if dt == dtypes.bool else wrap(f"({a} + {b})", dt),
  BinaryOps.MUL: lambda a, b, dt: f"({a} & {b})" if dt == dtypes.bool else wrap(f"({a} * {b})", dt),
  BinaryOps.IDIV: _safe_div("/"), BinaryOps.MOD: _safe_div("%"), BinaryOps.MAX: _max,
  BinaryOps.CMPLT: _cmplt, BinaryOps.CMPNE: _cmpne,
  BinaryOps.XOR: lambda a, b, dt: f"({a} != {b})" if dt == dtypes.bool else f"({a} ^ {b})",
  BinaryOps.AND: lambda a, b, dt: f"({a} & {b})", BinaryOps.OR: lambda a, b, dt: f"({a} | {b})",
  BinaryOps.SHL: lambda a, b, dt: wrap(f"({a} << u32({b}))", dt), BinaryOps.SHR: lambda a, b, dt: f"({a} >> u32({b}))",
  TernaryOps.WHERE: lambda c, a, b, dt: f"select({b}, {a}, {c})",
}
