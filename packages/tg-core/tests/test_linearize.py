"""The linearizer's IF blocks, and every device running one; how a reduce's terms go into its accumulator.

A STORE that references an IF is emitted inside that block, with everything only such stores need (a loop and its
loads); a value also needed outside is computed before the block. Devices render the block as a branch, and the
PYTHON interpreter runs it with the lanes whose condition is false masked off.
"""
from __future__ import annotations

import numpy as np
import pytest

from tg import Device
from tg.codegen.linearize import linearize
from tg.codegen.uops import UOp, UOps
from tg.device import Buffer
from tg.dtype import dtypes
from tg.engine.realize import CompiledRunner
from tg.ops import BinaryOps, TernaryOps
from tg.plugins.python import PythonCompiler, PythonProgram, PythonRenderer
from tg.renderer import Program, Renderer

N, K = 8, 4
i32, f32 = dtypes.int32, dtypes.float32


def _loop(axis: int, size: int) -> UOp:
  return UOp(UOps.RANGE, i32, (UOp.const(i32, 0), UOp.const(i32, size)), (axis, True))


def _if_kernel(global_ids: bool) -> UOp:
  """total[i] = sum_j x[i, j] for every i; out[i] = sum_k x[i, k] * total[i] only where i < 3 and i != 1 (in an IF)."""
  out, total, x = [UOp(UOps.DEFINE_GLOBAL, f32.ptr(), (), n) for n in range(3)]
  i = UOp(UOps.SPECIAL, i32, (), ("gidx0", 0, N)) if global_ids else UOp(UOps.RANGE, i32, (UOp.const(i32, 0), UOp.const(i32, N)), (0, False))
  j, k = _loop(1000, K), _loop(1001, K)
  row = UOp(UOps.REDUCE, f32, (UOp(UOps.LOAD, f32, (x, i * K + j)), j), BinaryOps.ADD)  # needed outside and inside
  inside = UOp(UOps.REDUCE, f32, (UOp(UOps.LOAD, f32, (x, i * K + k)) * row, k), BinaryOps.ADD)
  block = UOp(UOps.IF, None, (i.lt(3),))
  gated = UOp(UOps.STORE, None, (out, i, inside, i.alu(BinaryOps.CMPNE, UOp.const(i32, 1)), block))
  # the gated store first: where the sink lists it must not matter
  return UOp(UOps.SINK, None, (gated, UOp(UOps.STORE, None, (total, i, row))))


def test_if_block_holds_only_what_its_stores_need() -> None:
  uops = linearize(_if_kernel(global_ids=True))
  ops = [u.op for u in uops]
  assert ops.count(UOps.IF) == 1 and ops.count(UOps.ENDIF) == 1
  start, end = ops.index(UOps.IF), ops.index(UOps.ENDIF)
  assert uops[end].src == (uops[start],)
  inside, outside = uops[start + 1:end], uops[:start] + uops[end + 1:]
  loops = [u for u in uops if u.op is UOps.RANGE]
  assert [lp in inside for lp in loops] == [False, True], "the loop only the gated store needs is inside, the shared one before"
  assert [u.src[0].arg for u in inside if u.op is UOps.STORE] == [0] and [u.src[0].arg for u in outside if u.op is UOps.STORE] == [1]
  defined_inside = set(inside) | {u.arg for u in inside if u.op is UOps.DEFINE_ACC}
  assert not any(set(u.src) & defined_inside for u in outside), "a value defined in the block is used after it"
  assert all(s in uops[:uops.index(u)] or s.op is UOps.REDUCE for u in uops for s in u.src), "a source comes after its use"


def test_if_block_inside_output_loops() -> None:
  uops = linearize(_if_kernel(global_ids=False))
  ops = [u.op for u in uops]
  outer = next(u for u in uops if u.op is UOps.RANGE and u.arg == (0, False))
  close = next(n for n, u in enumerate(uops) if u.op is UOps.ENDRANGE and u.src[0] is outer)
  assert uops.index(outer) < ops.index(UOps.IF) < ops.index(UOps.ENDIF) < close


def test_a_value_two_blocks_need_comes_before_both() -> None:
  out, x = UOp(UOps.DEFINE_GLOBAL, f32.ptr(), (), 0), UOp(UOps.DEFINE_GLOBAL, f32.ptr(), (), 1)
  i, k = UOp(UOps.SPECIAL, i32, (), ("gidx0", 0, N)), _loop(1000, K)
  s = UOp(UOps.REDUCE, f32, (UOp(UOps.LOAD, f32, (x, i * K + k)), k), BinaryOps.ADD)
  lo, hi = UOp(UOps.IF, None, (i.lt(2),)), UOp(UOps.IF, None, (i.ge(6),))
  uops = linearize(UOp(UOps.SINK, None, (UOp(UOps.STORE, None, (out, i, s, lo)), UOp(UOps.STORE, None, (out, i, s * 2.0, hi)))))
  ops = [u.op for u in uops]
  ifs, endifs = [n for n, o in enumerate(ops) if o is UOps.IF], [n for n, o in enumerate(ops) if o is UOps.ENDIF]
  assert len(ifs) == 2 and ifs[0] < endifs[0] < ifs[1] < endifs[1]
  assert ops.index(UOps.ENDRANGE) < ifs[0], "the sum both blocks store is computed before them"
  assert [u.src[-1] for u in uops if u.op is UOps.STORE] == [lo, hi]


def _run_on(device: str, renderer: Renderer, xs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  uops = linearize(_if_kernel(renderer.global_ids))
  launch = ((N,), (1,)) if renderer.global_ids else ((), ())  # one workgroup of one thread per output, or a loop
  p = Program("if_block", renderer.render("if_block", uops), device, *launch, buf_count=3, uops=uops)
  bufs = [Buffer(device, N, f32).copyin(memoryview(np.full(N, -1.0, np.float32))) for _ in range(2)]
  bufs.append(Buffer(device, N * K, f32).copyin(memoryview(xs)))
  CompiledRunner(p)(bufs, {})
  return tuple(np.frombuffer(b.as_buffer(), dtype=np.float32).copy() for b in bufs[:2])  # type: ignore[return-value]


def test_if_block_runs_where_its_condition_holds() -> None:
  renderer = Device[Device.DEFAULT].renderer
  xs = np.arange(N * K, dtype=np.float32) / 8
  out, total = _run_on(Device.DEFAULT, renderer, xs)
  rows = xs.reshape(N, K).sum(1)
  np.testing.assert_allclose(total, rows, rtol=1e-6)
  want = np.full(N, -1.0, np.float32)
  want[[0, 2]] = rows[[0, 2]] ** 2
  np.testing.assert_allclose(out, want, rtol=1e-6)


@pytest.mark.parametrize("cond", ["first lanes", "last lanes"])
def test_python_masked_lanes_touch_no_memory(cond: str) -> None:
  """Lanes whose IF condition is false index outside the buffers: a load or store by one of them would raise."""
  out, x = UOp(UOps.DEFINE_GLOBAL, f32.ptr(), (), 0), UOp(UOps.DEFINE_GLOBAL, f32.ptr(), (), 1)
  lane = UOp(UOps.SPECIAL, i32, (), ("lidx0", 0, 4))
  on, row = (lane.lt(2), lane) if cond == "first lanes" else (lane.ge(2), -lane + 3)  # row 0 or 1 on, >= 2 off
  k = _loop(1000, 6)
  s = UOp(UOps.REDUCE, f32, (UOp(UOps.LOAD, f32, (x, row * 6 + k)), k), BinaryOps.ADD)
  sink = UOp(UOps.SINK, None, (UOp(UOps.STORE, None, (out, row, s, UOp(UOps.IF, None, (on,)))),))
  lib = PythonCompiler().compile(PythonRenderer().render("k", linearize(sink)))
  xs, res = np.arange(12, dtype=np.float32), np.full(2, -1.0, np.float32)
  PythonProgram("k", lib)(res, xs, global_size=(1,), local_size=(4,))
  np.testing.assert_array_equal(res, xs.reshape(2, 6).sum(1))


def _unrolled_sum(op: BinaryOps) -> tuple[UOp, list[UOp]]:
  """out[0] = reduce(op) over k of x[3k]*y[3k] (op) x[3k+1]*y[3k+1] (op) x[3k+2]*y[3k+2]: three unrolled terms per loop
  step, combined the way the lowerer combines an UNROLL's copies. Returns the sink and the three products."""
  out, x, y = (UOp(UOps.DEFINE_GLOBAL, f32.ptr(), (), n) for n in range(3))
  k = _loop(1000, K)
  prods = [UOp(UOps.LOAD, f32, (x, k * 3 + j)) * UOp(UOps.LOAD, f32, (y, k * 3 + j)) for j in range(3)]
  red = UOp(UOps.REDUCE, f32, (prods[0].alu(op, prods[1]).alu(op, prods[2]), k), op)
  return UOp(UOps.SINK, None, (UOp(UOps.STORE, None, (out, UOp.const(i32, 0), red)),)), prods


def test_unrolled_terms_go_into_the_accumulator_one_by_one() -> None:
  """acc = ((acc + t0) + t1) + t2: no sum of the terms first, and with fused_mulacc each product is one MULACC."""
  sink, prods = _unrolled_sum(BinaryOps.ADD)
  uops = linearize(sink, fuse_mulacc=True)
  acc = next(u for u in uops if u.op is UOps.DEFINE_ACC)
  fmas = [u for u in uops if u.op is UOps.ALU and u.arg is TernaryOps.MULACC]
  assert [f.src[:2] for f in fmas] == [p.src for p in prods]
  assert [f.src[2] for f in fmas] == [acc, *fmas[:2]], "each term adds into the previous update, the first into acc"
  assert not any(u.op is UOps.ALU and u.arg in (BinaryOps.ADD, BinaryOps.MUL) and u.dtype == f32 for u in uops), "a product or sum left over"
  assert next(u for u in uops if u.op is UOps.ASSIGN).src == (acc, fmas[-1])
  plain = linearize(sink, fuse_mulacc=False)
  adds = [u for u in plain if u.op is UOps.ALU and u.arg is BinaryOps.ADD and u.dtype == f32]
  assert [a.src[0] for a in adds] == [next(u for u in plain if u.op is UOps.DEFINE_ACC), *adds[:2]]


def test_max_of_products_is_never_a_multiply_add() -> None:
  sink, _ = _unrolled_sum(BinaryOps.MAX)
  uops = linearize(sink, fuse_mulacc=True)
  assert not any(u.op is UOps.ALU and u.arg is TernaryOps.MULACC for u in uops)
  assert sum(1 for u in uops if u.op is UOps.ALU and u.arg is BinaryOps.MAX) == 3


def test_a_sum_another_reduce_uses_is_computed_once_and_added_whole() -> None:
  sink, _ = _unrolled_sum(BinaryOps.ADD)
  store = sink.src[0]
  red = store.src[2]
  terms = red.src[0]
  biggest = UOp(UOps.REDUCE, f32, (terms, *red.src[1:]), BinaryOps.MAX)  # the same loop: one nest updates both
  extra = UOp(UOps.STORE, None, (UOp(UOps.DEFINE_GLOBAL, f32.ptr(), (), 3), UOp.const(i32, 0), biggest))
  uops = linearize(UOp(UOps.SINK, None, (store, extra)), fuse_mulacc=True)
  assert uops.count(terms) == 1
  sum_acc = next(u for u in uops if u.op is UOps.DEFINE_ACC and u.arg is red)
  update = next(u for u in uops if u.op is UOps.ASSIGN and u.src[0] is sum_acc).src[1]
  assert update.op is UOps.ALU and update.arg is BinaryOps.ADD and update.src == (sum_acc, terms)
