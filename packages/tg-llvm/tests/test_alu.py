"""Every ALU op and cast, compiled by LLVM, against tg.ops.exec_alu (the meaning the PYTHON reference gives them).

Each case is a one-loop kernel built from UOps by hand: out[i] = op(a[i], b[i]) over edge values (0, -1, the
dtype's min and max, nan, inf, -0.0), so the guarded cases (x / 0, INT_MIN / -1, nan to int) are exercised.
"""
from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np
import pytest

from tg.codegen.uops import UOp, UOps
from tg.dtype import DType, dtypes
from tg.ops import BinaryOps, Op, TernaryOps, UnaryOps, exec_alu, truncate
from tg_llvm.compiler import LLVMCompiler
from tg_llvm.renderer import LLVMRenderer
from tg_llvm.runtime import LLVMProgram

INTS = [dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64]
FLOATS = [dtypes.float16, dtypes.float32, dtypes.float64]


def edge_values(dt: DType) -> list[Any]:
  if dt == dtypes.bool:
    return [False, True]
  if dtypes.is_int(dt):
    lo, hi = dtypes.min(dt), dtypes.max(dt)
    return sorted({truncate(dt, v) for v in [0, 1, -1, 2, 3, -3, 7, -7, 100, lo, hi, lo + 1, hi - 1]})
  return [truncate(dt, v) for v in [0.0, -0.0, 1.0, -1.0, 0.5, 2.5, -3.75, 100.0, 1e-3, 65504.0, 1e-6, math.inf, -math.inf, math.nan]]


def run_kernel(dt_out: DType, srcs: list[tuple[DType, list[Any]]], make: Any) -> list[Any]:
  """out[i] = make(*loads at i) as one LLVM kernel; srcs are (dtype, values) of the input buffers."""
  n = len(srcs[0][1])
  out = UOp(UOps.DEFINE_GLOBAL, dt_out.ptr(), (), 0)
  bufs = [UOp(UOps.DEFINE_GLOBAL, dt.ptr(), (), k + 1) for k, (dt, _) in enumerate(srcs)]
  lo, hi = UOp(UOps.CONST, dtypes.int32, (), 0), UOp(UOps.CONST, dtypes.int32, (), n)
  i = UOp(UOps.RANGE, dtypes.int32, (lo, hi), (0, False))
  loads = [UOp(UOps.LOAD, dt, (b, i)) for b, (dt, _) in zip(bufs, srcs)]
  val = make(*loads)
  store = UOp(UOps.STORE, None, (out, i, val))
  head = [out, *bufs, lo, hi, i, *loads]
  uops = head + [u for u in val.toposort() if u not in head] + [store, UOp(UOps.ENDRANGE, None, (i,))]
  prg = LLVMProgram("k", LLVMCompiler().compile(LLVMRenderer().render("k", uops)))
  arrays = [np.array(vals, dtype=dt.np) for dt, vals in srcs]
  result = np.zeros(n, dtype=dt_out.np)
  prg(result, *arrays)
  return result.tolist()


def same(got: Any, want: Any, dt: DType) -> bool:
  if dtypes.is_float(dt):
    fmt = {2: "<e", 4: "<f", 8: "<d"}[dt.itemsize]
    return bool(math.isnan(got) and math.isnan(want)) or struct.pack(fmt, got) == struct.pack(fmt, want)
  return bool(got == want)


def check(op: Op, dt: DType, operands: list[list[Any]], srcs_dt: list[DType], make: Any) -> None:
  out_dt = dtypes.bool if op in (BinaryOps.CMPLT, BinaryOps.CMPNE) else dt
  got = run_kernel(out_dt, list(zip(srcs_dt, operands)), make)
  for k, g in enumerate(got):
    args = [o[k] for o in operands]
    want = exec_alu(op, out_dt, args)
    assert same(g, want, out_dt), f"{op} {dt} {args}: LLVM {g!r}, exec_alu {want!r}"


def pairs(dt: DType) -> tuple[list[Any], list[Any]]:
  vals = edge_values(dt)
  return [a for a in vals for _ in vals], [b for _ in vals for b in vals]


@pytest.mark.parametrize("dt", INTS, ids=str)
@pytest.mark.parametrize("op", [BinaryOps.ADD, BinaryOps.MUL, BinaryOps.IDIV, BinaryOps.MOD, BinaryOps.MAX, BinaryOps.CMPLT,
                                BinaryOps.CMPNE, BinaryOps.XOR, BinaryOps.AND, BinaryOps.OR], ids=lambda o: o.name)
def test_int_binary(op: BinaryOps, dt: DType) -> None:
  a, b = pairs(dt)
  check(op, dt, [a, b], [dt, dt], lambda x, y: UOp(UOps.ALU, dtypes.bool if op in (BinaryOps.CMPLT, BinaryOps.CMPNE) else dt, (x, y), op))


@pytest.mark.parametrize("dt", INTS, ids=str)
@pytest.mark.parametrize("op", [BinaryOps.SHL, BinaryOps.SHR], ids=lambda o: o.name)
def test_int_shifts(op: BinaryOps, dt: DType) -> None:
  vals = edge_values(dt)
  amounts = [0, 1, 3, dt.itemsize * 8 - 1]
  a, b = [x for x in vals for _ in amounts], [s for _ in vals for s in amounts]
  check(op, dt, [a, b], [dt, dt], lambda x, y: UOp(UOps.ALU, dt, (x, y), op))


@pytest.mark.parametrize("dt", INTS + FLOATS + [dtypes.bool], ids=str)
def test_neg(dt: DType) -> None:
  vals = edge_values(dt)
  check(UnaryOps.NEG, dt, [vals], [dt], lambda x: UOp(UOps.ALU, dt, (x,), UnaryOps.NEG))


@pytest.mark.parametrize("dt", [dtypes.int32, dtypes.uint8, dtypes.int64], ids=str)
@pytest.mark.parametrize("op", [BinaryOps.IDIV, BinaryOps.MOD], ids=lambda o: o.name)
@pytest.mark.parametrize("divisor", [3, 8, -7, 1])
def test_divide_by_constant(op: BinaryOps, dt: DType, divisor: int) -> None:
  vals = edge_values(dt)
  c = UOp(UOps.CONST, dt, (), truncate(dt, divisor))
  got = run_kernel(dt, [(dt, vals)], lambda x: UOp(UOps.ALU, dt, (x, c), op))
  assert got == [exec_alu(op, dt, [v, c.arg]) for v in vals]


@pytest.mark.parametrize("dt", FLOATS, ids=str)
@pytest.mark.parametrize("op", [BinaryOps.ADD, BinaryOps.MUL, BinaryOps.MAX, BinaryOps.CMPLT, BinaryOps.CMPNE], ids=lambda o: o.name)
def test_float_binary(op: BinaryOps, dt: DType) -> None:
  a, b = pairs(dt)
  check(op, dt, [a, b], [dt, dt], lambda x, y: UOp(UOps.ALU, dtypes.bool if op in (BinaryOps.CMPLT, BinaryOps.CMPNE) else dt, (x, y), op))


@pytest.mark.parametrize("dt", FLOATS, ids=str)
@pytest.mark.parametrize("op", [UnaryOps.RECIP, UnaryOps.SQRT], ids=lambda o: o.name)
def test_float_unary(op: UnaryOps, dt: DType) -> None:
  vals = edge_values(dt)
  check(op, dt, [vals], [dt], lambda x: UOp(UOps.ALU, dt, (x,), op))


@pytest.mark.parametrize("op", [BinaryOps.ADD, BinaryOps.MUL, BinaryOps.MAX, BinaryOps.CMPLT, BinaryOps.CMPNE, BinaryOps.AND,
                                BinaryOps.OR, BinaryOps.XOR], ids=lambda o: o.name)
def test_bool_binary(op: BinaryOps) -> None:
  a, b = pairs(dtypes.bool)
  check(op, dtypes.bool, [a, b], [dtypes.bool, dtypes.bool], lambda x, y: UOp(UOps.ALU, dtypes.bool, (x, y), op))


@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.int8, dtypes.float16], ids=str)
def test_where(dt: DType) -> None:
  vals = edge_values(dt)
  conds = [k % 2 == 0 for k in range(len(vals))]
  check(TernaryOps.WHERE, dt, [conds, vals, vals[::-1]], [dtypes.bool, dt, dt], lambda c, x, y: UOp(UOps.ALU, dt, (c, x, y), TernaryOps.WHERE))


def expected_cast(x: Any, src: DType, dst: DType) -> Any:
  if dtypes.is_int(dst) and isinstance(x, float):
    return 0 if math.isnan(x) else truncate(dst, int(x))  # truncate toward zero, then wrap
  return truncate(dst, x)


@pytest.mark.parametrize("src", FLOATS + INTS + [dtypes.bool], ids=str)
@pytest.mark.parametrize("dst", FLOATS + INTS + [dtypes.bool], ids=str)
def test_cast(src: DType, dst: DType) -> None:
  vals = edge_values(src)
  if dtypes.is_float(src) and dtypes.is_int(dst):  # nan, fractions, negatives, and what wraps around (not inf: C leaves it undefined)
    wide = dst.itemsize == 8 or dst == dtypes.uint32  # converted through int64, else through int32
    vals = [truncate(src, v) for v in vals + [-1.5, 255.9, 300.0, -129.0, 70000.5, 3e9, -3e9, 2.0 ** 40]]
    vals = [v for v in vals if math.isnan(v) or abs(v) < (2 ** 62 if wide else 2 ** 31)]
  if src == dtypes.float64 and dst == dtypes.float16:  # double rounding through float would get these wrong
    vals += [1 + 2 ** -11 + 2 ** -40, 1 + 2 ** -11, 1 + 2 ** -11 - 2 ** -40, 65520.0, 65519.99, 2 ** -25, 2 ** -25 + 2 ** -60, -(2 ** -24) * 1.5]
  got = run_kernel(dst, [(src, vals)], lambda x: UOp(UOps.CAST, dst, (x,)))
  for g, v in zip(got, vals):
    assert same(g, expected_cast(v, src, dst), dst), f"cast {src} -> {dst} of {v!r}: LLVM {g!r}"


@pytest.mark.parametrize("src,dst", [(dtypes.float32, dtypes.uint32), (dtypes.int32, dtypes.float32), (dtypes.float64, dtypes.int64),
                                     (dtypes.float16, dtypes.uint16), (dtypes.uint16, dtypes.float16)], ids=str)
def test_bitcast(src: DType, dst: DType) -> None:
  vals = edge_values(src)
  got = run_kernel(dst, [(src, vals)], lambda x: UOp(UOps.BITCAST, dst, (x,)))
  want = np.array(vals, dtype=src.np).view(dst.np).tolist()
  assert all(same(g, w, dst) for g, w in zip(got, want))
