"""ALU ops and casts as LLVM instructions, with the meaning tg.ops.exec_alu gives them (C's, made total).

Where C leaves a case undefined and LLVM would make it poison (division by zero, float to int out of range,
nan to int), the instructions here pick exec_alu's answer instead, so compiled kernels agree with the PYTHON
reference: x / 0 and x % 0 are 0, INT_MIN / -1 wraps, nan casts to 0, a float casts to an int by truncating
toward zero into int32 (int64 for uint32 and 64-bit ints) and wrapping into narrower types; beyond that range it
saturates (C leaves it undefined). No instruction here becomes a call into a runtime library: the JIT has none.
"""
from __future__ import annotations

from collections.abc import Callable

from tg.dtype import DType, dtypes
from tg.ops import BinaryOps, Op, TernaryOps, UnaryOps
from tg_llvm.builder import IRBuilder
from tg_llvm.irtypes import intrinsic_suffix, ll_const, ll_type

Arg = tuple[str, DType]  # a value's name (or constant) and its dtype


def _signed(dt: DType) -> bool:
  return dtypes.is_int(dt) and not dtypes.is_unsigned(dt)


def _is_literal(v: str) -> bool:
  return v.lstrip("-").isdigit()


def _wrap_flags(dt: DType, fits: bool, nonneg: bool) -> str:
  """nsw/nuw when the result is proven to fit (from index bounds): they let LLVM widen and vectorize index math."""
  if not fits:
    return ""
  if not _signed(dt):
    return " nuw"  # not nsw: a uint32 result may still pass 2^31 - 1
  return " nuw nsw" if nonneg else " nsw"


def _divmod(b: IRBuilder, op: Op, dt: DType, x: str, y: str, nonneg: bool) -> str:
  t = ll_type(dt)
  if op is BinaryOps.IDIV:
    instr = "udiv" if nonneg or not _signed(dt) else "sdiv"
  else:
    instr = "urem" if nonneg or not _signed(dt) else "srem"
  if _is_literal(y) and int(y) != 0 and (int(y) != -1 or not _signed(dt)):
    return b.value(f"{instr} {t} {x}, {y}")  # the usual case (index math): nothing to guard
  # a divisor of 0 (or -1, whose INT_MIN quotient traps on x86) is replaced by 1, then the result is fixed up
  zero = b.value(f"icmp eq {t} {y}, 0")
  bad, minus_one = zero, ""
  if _signed(dt):
    minus_one = b.value(f"icmp eq {t} {y}, -1")
    bad = b.value(f"or i1 {zero}, {minus_one}")
  q = b.value(f"{instr} {t} {x}, {b.value(f'select i1 {bad}, {t} 1, {t} {y}')}")
  if op is BinaryOps.MOD:
    return q  # x % 1 is 0, which is also the answer for % 0 and % -1
  if minus_one:
    q = b.value(f"select i1 {minus_one}, {t} {b.value(f'sub {t} 0, {x}')}, {t} {q}")
  return b.value(f"select i1 {zero}, {t} 0, {t} {q}")


def _max(b: IRBuilder, dt: DType, x: str, y: str) -> str:
  t, bt = ll_type(dt), ll_type(dtypes.bool.vec(dt.count))  # a vector compares to a vector of i1
  if dt == dtypes.bool:
    return b.value(f"or i1 {x}, {y}")
  if dtypes.is_float(dt):
    # exec_alu's max: a nan in either operand wins, and of two equal values x is kept (max(0.0, -0.0) is 0.0)
    gt = b.value(f"fcmp ogt {t} {y}, {x}")
    c = b.value(f"or {bt} {gt}, {b.value(f'fcmp uno {t} {y}, {y}')}")
  else:
    c = b.value(f"icmp {'sgt' if _signed(dt) else 'ugt'} {t} {y}, {x}")
  return b.value(f"select {bt} {c}, {t} {y}, {t} {x}")


def _shift(b: IRBuilder, op: Op, dt: DType, x: str, y: Arg) -> str:
  t = ll_type(dt)
  amount, adt = y
  if adt.scalar().itemsize != dt.scalar().itemsize:  # LLVM shifts need both operands of one type; C converts the amount
    amount = ll_const(int(amount), dt) if _is_literal(amount) else b.value(_int_resize(adt, dt, amount))
  if op is BinaryOps.SHL:
    return b.value(f"shl {t} {x}, {amount}")
  return b.value(f"{'ashr' if _signed(dt) else 'lshr'} {t} {x}, {amount}")


def _int_resize(src: DType, dst: DType, x: str) -> str:
  kind = "trunc" if dst.scalar().itemsize < src.scalar().itemsize else ("sext" if _signed(src) else "zext")
  return f"{kind} {ll_type(src)} {x} to {ll_type(dst)}"


_FLOAT_BIN = {BinaryOps.ADD: "fadd", BinaryOps.MUL: "fmul"}
_INT_BIN = {BinaryOps.ADD: "add", BinaryOps.MUL: "mul", BinaryOps.XOR: "xor", BinaryOps.AND: "and", BinaryOps.OR: "or"}
_BOOL_BIN = {BinaryOps.ADD: "or", BinaryOps.MUL: "and", BinaryOps.XOR: "xor", BinaryOps.AND: "and", BinaryOps.OR: "or"}


def alu(b: IRBuilder, op: Op, dt: DType, args: list[Arg], fits: bool = False, nonneg: bool = False) -> str:
  """Emit `op` on `args` with result dtype `dt` and return the result. `fits`: the exact result is known to fit
  in `dt` (no wrap-around); `nonneg`: every operand is known to be >= 0."""
  t = ll_type(dt)
  xs = [v for v, _ in args]
  if op is TernaryOps.WHERE:
    return b.value(f"select i1 {xs[0]}, {t} {xs[1]}, {t} {xs[2]}")
  if op is TernaryOps.MULACC:  # fused where the CPU has FMA (always on x86-64-v3 and newer), never a libm call
    return b.call(t, f"llvm.fmuladd.{intrinsic_suffix(dt)}", [(t, xs[0]), (t, xs[1]), (t, xs[2])])
  sdt = args[0][1]  # operand dtype (differs from dt for comparisons)
  st = ll_type(sdt)
  if op in (BinaryOps.CMPLT, BinaryOps.CMPNE):
    if dtypes.is_float(sdt):
      return b.value(f"fcmp {'olt' if op is BinaryOps.CMPLT else 'une'} {st} {xs[0]}, {xs[1]}")  # nan != nan is true
    pred = "ne" if op is BinaryOps.CMPNE else ("slt" if _signed(sdt) else "ult")  # bools compare as unsigned: false < true
    return b.value(f"icmp {pred} {st} {xs[0]}, {xs[1]}")
  if op is BinaryOps.MAX:
    return _max(b, dt, xs[0], xs[1])
  if op in (BinaryOps.IDIV, BinaryOps.MOD):
    if not dtypes.is_int(dt):
      raise NotImplementedError(f"LLVM has no {op} for {dt}")
    return _divmod(b, op, dt, xs[0], xs[1], nonneg)
  if op in (BinaryOps.SHL, BinaryOps.SHR):
    return _shift(b, op, dt, xs[0], args[1])
  if isinstance(op, BinaryOps):
    if dtypes.is_float(dt) and op in _FLOAT_BIN:
      return b.value(f"{_FLOAT_BIN[op]} {t} {xs[0]}, {xs[1]}")
    if dt == dtypes.bool and op in _BOOL_BIN:  # C adds bools as ints, then any nonzero is true: ADD is OR, MUL is AND
      return b.value(f"{_BOOL_BIN[op]} i1 {xs[0]}, {xs[1]}")
    if dtypes.is_int(dt) and op in _INT_BIN:
      flags = _wrap_flags(dt, fits, nonneg) if op in (BinaryOps.ADD, BinaryOps.MUL) else ""
      return b.value(f"{_INT_BIN[op]}{flags} {t} {xs[0]}, {xs[1]}")
  if op in _UNARY:
    return _UNARY[op](b, dt, xs[0])
  raise NotImplementedError(f"LLVM can't render {op} on {dt}")


def _neg(b: IRBuilder, dt: DType, x: str) -> str:
  t = ll_type(dt)
  if dt == dtypes.bool:
    return b.value(f"xor i1 {x}, true")  # NEG of a bool is NOT
  return b.value(f"fneg {t} {x}" if dtypes.is_float(dt) else f"sub {t} {ll_const(0, dt)}, {x}")


def _sqrt(b: IRBuilder, dt: DType, x: str) -> str:
  t = ll_type(dt)
  return b.call(t, f"llvm.sqrt.{intrinsic_suffix(dt)}", [(t, x)])  # one instruction (sqrtss/sqrtsd), no libm


def _recip(b: IRBuilder, dt: DType, x: str) -> str:
  return b.value(f"fdiv {ll_type(dt)} {ll_const(1.0, dt)}, {x}")


_UNARY: dict[Op, Callable[[IRBuilder, DType, str], str]] = {UnaryOps.NEG: _neg, UnaryOps.SQRT: _sqrt, UnaryOps.RECIP: _recip}


# ---------- casts ----------

def _float_to_int(b: IRBuilder, x: str, src: DType, dst: DType) -> str:
  """Saturating conversions (nan -> 0) through a wide enough int, then wrap-around to `dst` as exec_alu does."""
  if src == dtypes.float16:  # the saturating intrinsics are most reliable from float; widening half is exact
    x, src = b.value(f"fpext half {x} to float"), dtypes.float32
  ft = ll_type(src)
  if dst == dtypes.uint64:  # negatives wrap around like C's conversion through a signed int; the rest need the full range
    neg = b.value(f"fcmp olt {ft} {x}, {ll_const(0.0, src)}")
    s = b.call("i64", f"llvm.fptosi.sat.i64.f{src.itemsize * 8}", [(ft, x)])
    u = b.call("i64", f"llvm.fptoui.sat.i64.f{src.itemsize * 8}", [(ft, x)])
    return b.value(f"select i1 {neg}, i64 {s}, i64 {u}")
  # int32 and narrower signed types fit in i32; uint32 needs i64 to reach 2^32 - 1
  wide = "i32" if dst.itemsize < 4 or dst == dtypes.int32 else "i64"
  v = b.call(wide, f"llvm.fptosi.sat.{wide}.f{src.itemsize * 8}", [(ft, x)])
  return v if wide == ll_type(dst) else b.value(f"trunc {wide} {v} to {ll_type(dst)}")


# the vector casts rendered as one instruction (LLVMRenderer.keeps_vector); core splits the others into lanes
def vector_cast_ok(src: DType, dst: DType) -> bool:
  src, dst = src.scalar(), dst.scalar()
  if dtypes.bool in (src, dst) or (dtypes.is_float(src) and dtypes.is_int(dst)):
    return False  # bools are i1 in registers, i8 in memory; float -> int saturates through scalar intrinsics
  return not (src == dtypes.float64 and dst == dtypes.float16)


def cast(b: IRBuilder, x: str, src: DType, dst: DType) -> str:
  """Convert `x` from `src` to `dst` as C does (bool casts are != 0, float to int truncates toward zero)."""
  st, dt = ll_type(src), ll_type(dst)
  if src == dst:
    return x
  if dst == dtypes.bool:
    if dtypes.is_float(src):
      return b.value(f"fcmp une {st} {x}, {ll_const(0.0, src)}")  # nan is true, as in C
    return b.value(f"icmp ne {st} {x}, 0")
  if src == dtypes.bool:
    return b.value(f"uitofp i1 {x} to {dt}" if dtypes.is_float(dst) else f"zext i1 {x} to {dt}")
  if dtypes.is_int(src) and dtypes.is_int(dst):
    return x if src.scalar().itemsize == dst.scalar().itemsize else b.value(_int_resize(src, dst, x))
  if dtypes.is_int(src):
    return b.value(f"{'sitofp' if _signed(src) else 'uitofp'} {st} {x} to {dt}")
  if dtypes.is_int(dst):
    return _float_to_int(b, x, src, dst)
  if src == dtypes.float64 and dst == dtypes.float16:
    return _double_to_half(b, x)
  return b.value(f"{'fpext' if dst.scalar().itemsize > src.scalar().itemsize else 'fptrunc'} {st} {x} to {dt}")


def _double_to_half(b: IRBuilder, x: str) -> str:
  """x86 has no double -> half instruction (LLVM would call __truncdfhf2, which the JIT can't resolve), and going
  through float rounds twice. Rounding to float *to odd* first makes the second rounding the only one that counts
  (float keeps 13 more bits than half): truncate toward zero, then set the last bit if anything was dropped."""
  r = b.value(f"fptrunc double {x} to float")
  back = b.value(f"fpext float {r} to double")
  away = b.value(f"fcmp ogt double {b.call('double', 'llvm.fabs.f64', [('double', back)])}, {b.call('double', 'llvm.fabs.f64', [('double', x)])}")
  bits = b.value(f"sub i32 {b.value(f'bitcast float {r} to i32')}, {b.value(f'zext i1 {away} to i32')}")  # one step toward zero
  inexact = b.value(f"fcmp one double {back}, {x}")  # false for nan, which passes through unchanged
  odd = b.value(f"or i32 {bits}, {b.value(f'zext i1 {inexact} to i32')}")
  return b.value(f"fptrunc float {b.value(f'bitcast i32 {odd} to float')} to half")


def bitcast(b: IRBuilder, x: str, src: DType, dst: DType) -> str:
  return x if ll_type(src) == ll_type(dst) else b.value(f"bitcast {ll_type(src)} {x} to {ll_type(dst)}")
