"""Vector lowering: an UPCAST axis becomes vector values (vector LOAD/STORE where the elements are consecutive,
lane-wise ALU, gathers and scatters elsewhere), and it changes no number. Each kernel here runs with its vector
axis and without (VECTORIZE=0 semantics: Kernel.vector_axis returns None) on the device under test, against numpy."""
from __future__ import annotations

import numpy as np
import pytest

from tg import Device, Tensor, dtypes
from tg.codegen.devectorize import devectorize
from tg.codegen.kernel import Kernel, Opt, OptOps
from tg.codegen.lowerer import GLOBAL, UPCAST, Lowerer
from tg.codegen.uops import UOp, UOps
from tg.device import is_dtype_supported
from tg.engine.realize import CompiledRunner
from tg.engine.schedule import create_schedule
from tg.ops import BinaryOps, TernaryOps
from tg.renderer import Renderer

rng = np.random.default_rng(0)
LAST_GLOBAL = -1  # an Opt axis placeholder: the kernel's innermost output axis


def _f32(*shape: int) -> Tensor:
  return Tensor(rng.standard_normal(shape).astype(np.float32))


def _kernel(t: Tensor) -> tuple[object, list[object]]:
  sched = create_schedule([t.lazydata])
  assert len(sched) == 1, f"expected one kernel (the inputs are realized), got {len(sched)}"
  return sched[0].ast, sched[0].bufs


def _run(ast, bufs, opts: list[Opt], vectors: bool) -> tuple[np.ndarray, list[UOp]]:  # type: ignore[no-untyped-def]
  k = Kernel(ast, Device[Device.DEFAULT].renderer)
  last = max((i for i, kind in enumerate(k.kinds) if kind == GLOBAL), default=None)
  k.apply_opts([Opt(o.op, last, o.amt) if o.axis == LAST_GLOBAL else o for o in opts])
  if not vectors:
    k.vector_axis = lambda: None  # type: ignore[method-assign]
  p = k.to_program()
  CompiledRunner(p)([b.ensure_allocated() for b in bufs], {})
  out = bufs[0]
  return np.frombuffer(out.as_buffer(), dtype=out.dtype.np).copy(), p.uops


def _vector_lanes(uops: list[UOp]) -> int:
  return max((u.dtype.count for u in uops if u.dtype is not None and u.op is not UOps.DEFINE_GLOBAL), default=1)


# name -> (tensor builder, opts): each opt set puts a power-of-two UPCAST on an axis where something is contiguous
CASES = {
  # B and C are contiguous along the columns: vector loads of B, broadcast loads of A, vector accumulators
  "matmul": (lambda: _f32(8, 12) @ _f32(12, 16), [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 2)]),
  "matmul_unroll": (lambda: _f32(8, 12) @ _f32(12, 16), [Opt(OptOps.UNROLL, 2, 4), Opt(OptOps.UPCAST, 1, 4)]),
  # stores contiguous, the load transposed: a gather feeding a vector store
  "transpose": (lambda: _f32(16, 8).T * 2, [Opt(OptOps.UPCAST, 1, 4)]),
  # the padded input's lanes have different validity at the edges: a gather of gated loads
  # a padded row whose vectors straddle both ends of a 10-float buffer, and one (pad 8) whose first vector is all padding:
  # a device that reads whole vectors (overread_bytes) reads into the allocator's slack and masks those lanes
  "pad_edges": (lambda: _f32(10).pad(((3, 3),)) * 2, [Opt(OptOps.UPCAST, 0, 8)]),
  "pad_whole_vector": (lambda: _f32(8).pad(((8, 0),)) + 1, [Opt(OptOps.UPCAST, 0, 8)]),
  "conv_padded": (lambda: _f32(1, 2, 6, 8).conv2d(_f32(4, 2, 3, 3), padding=1).relu(), [Opt(OptOps.UPCAST, LAST_GLOBAL, 4)]),
  # compares and where: bool vectors are split into lanes where the renderer has none
  "where_compare": (lambda: (lambda x: (x > 0.5).where(x * 2, x.exp()))(_f32(4, 16)), [Opt(OptOps.UPCAST, 1, 8)]),
  "max_relu": (lambda: _f32(4, 16).relu() + _f32(4, 16).maximum(0.25), [Opt(OptOps.UPCAST, 1, 4)]),
  "int_math": (lambda: (Tensor(rng.integers(-50, 50, (4, 16)).astype(np.int32)) * 3 + 7) // 2, [Opt(OptOps.UPCAST, 1, 4)]),
  "cast_int_float": (lambda: Tensor(rng.integers(-50, 50, (4, 16)).astype(np.int32)).cast(dtypes.float32) / 3, [Opt(OptOps.UPCAST, 1, 4)]),
  "cast_float_int": (lambda: (_f32(4, 16) * 10).cast(dtypes.int32), [Opt(OptOps.UPCAST, 1, 4)]),
  "reduce_rows": (lambda: _f32(16, 24).sum(1), [Opt(OptOps.UPCAST, 0, 4)]),
  # the lanes run along the reduction: a vector accumulator, its lanes summed after the loop
  "sum_unroll_lanes": (lambda: _f32(16, 32).sum(1), [Opt(OptOps.UNROLL, 1, 8)]),
  "max_unroll_lanes": (lambda: _f32(16, 32).max(1), [Opt(OptOps.UNROLL, 1, 4)]),
  "full_sum_unroll_lanes": (lambda: (_f32(256) * 2).sum(), [Opt(OptOps.UNROLL, 0, 8)]),
  "matmul_unroll_lanes": (lambda: _f32(8, 32) @ _f32(32, 8), [Opt(OptOps.UNROLL, 2, 8)]),
  "nested_unroll_lanes": (lambda: (lambda x: (x - x.max(1, keepdim=True)).exp().sum(1))(_f32(8, 16)), [Opt(OptOps.UNROLL, 1, 4)]),
  # the summed value doesn't depend on the lane: every lane holds it, and the lanes still count once each
  "invariant_unroll_lanes": (lambda: _f32(4, 1).expand(4, 16).sum(1), [Opt(OptOps.UNROLL, 1, 8)]),
  "max_reduce": (lambda: _f32(16, 24).max(1), [Opt(OptOps.UPCAST, 0, 8)]),
  # a reduction nested in another's input (softmax's max inside its sum of exps), vectorized over the rows
  "nested_reduce": (lambda: (lambda x: (x - x.max(1, keepdim=True)).exp().sum(1))(_f32(8, 16)), [Opt(OptOps.UPCAST, 0, 4)]),
  "broadcast_col": (lambda: _f32(8, 16) + _f32(8, 1), [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 2)]),
  # the upcast axis is not the innermost of the store: a scatter of lanes 16 elements apart
  "outer_axis": (lambda: _f32(8, 16) * 3, [Opt(OptOps.UPCAST, 0, 4)]),
  # PADTO makes some lanes fall outside the output: their stores are gated
  "padded_upcast": (lambda: _f32(6, 10) + 1, [Opt(OptOps.PADTO, 1, 16), Opt(OptOps.UPCAST, 1, 4)]),
  "sqrt_exp": (lambda: (_f32(4, 16).abs() + 1).sqrt() * (_f32(4, 16) * 0.1).exp(), [Opt(OptOps.UPCAST, 1, 4)]),
  "half": (lambda: (Tensor(rng.standard_normal((4, 16)).astype(np.float16)) * 2 + 1), [Opt(OptOps.UPCAST, 1, 4)]),
  "bfloat16": (lambda: (_f32(4, 16).cast(dtypes.bfloat16).realize() * 3 + 1), [Opt(OptOps.UPCAST, 1, 4)]),
  "float64": (lambda: Tensor(rng.standard_normal((4, 16))) * 3 - 1, [Opt(OptOps.UPCAST, 1, 4)]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_vector_kernel_matches_scalar_kernel(name: str) -> None:
  build, opts = CASES[name]
  needs = {"half": dtypes.float16, "bfloat16": dtypes.bfloat16, "float64": dtypes.float64}.get(name)
  if needs is not None and not is_dtype_supported(needs):
    pytest.skip(f"{Device.DEFAULT} has no {needs}")
  ast, bufs = _kernel(build())
  ref, _ = _run(ast, bufs, opts, vectors=False)
  got, _ = _run(ast, bufs, opts, vectors=True)
  # a sum may add in another order (lanes along a reduction sum per lane, then across; the scalar kernel adds each
  # product into one accumulator, fused): float32 rounding apart, the numbers agree
  assert np.array_equal(got, ref, equal_nan=True) or np.allclose(got.astype(np.float64), ref.astype(np.float64), rtol=1e-5, atol=1e-5)


def test_matmul_uses_vector_loads_stores_and_accumulators() -> None:
  ast, bufs = _kernel(_f32(8, 12) @ _f32(12, 16))
  k = Kernel(ast, Device[Device.DEFAULT].renderer).apply_opts([Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 2)])
  if k.renderer.vector_width(dtypes.float32) < 4:
    pytest.skip(f"{Device.DEFAULT} declares no float vectors of 4")
  ax = k.vector_axis()  # the upcast column axis: B and C are contiguous along it, A is not
  assert ax is not None and k.kinds[ax] == UPCAST and k.full_shape[ax] == 4
  uops = k.linearize()
  f4 = dtypes.float32.vec(4)
  assert any(u.op is UOps.LOAD and u.dtype == f4 for u in uops), "B's row is one vector load"
  assert sum(1 for u in uops if u.op is UOps.STORE and u.src[2].dtype == f4) == 2, "two vector stores: the 2 upcast rows"
  assert not any(u.op is UOps.STORE and u.src[2].dtype == dtypes.float32 for u in uops), "no scalar stores left"
  # A's element is loaded once per row as a scalar: it doesn't depend on the lane
  assert any(u.op is UOps.LOAD and u.dtype == dtypes.float32 for u in uops)
  ref = bufs[1], bufs[2]
  got, _ = _run(ast, bufs, k.applied_opts, vectors=True)
  a = np.frombuffer(ref[0].as_buffer(), dtype=np.float32).reshape(8, 12)
  b = np.frombuffer(ref[1].as_buffer(), dtype=np.float32).reshape(12, 16)
  np.testing.assert_allclose(got.reshape(8, 16), a @ b, rtol=1e-5, atol=1e-5)


def test_vector_axis_prefers_contiguous_stores() -> None:
  ast, _ = _kernel(_f32(8, 16) * 3)
  k = Kernel(ast, Device[Device.DEFAULT].renderer).apply_opts([Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 4)])
  ax = k.vector_axis()
  if k.renderer.vector_width(dtypes.float32) < 4:
    assert ax is None
    return
  assert ax is not None and k.kinds[ax] == UPCAST
  store = next(op for op in k.ast.lazyops() if op.op.name == "STORE")
  assert store.arg.st.real_strides()[ax] == 1, "the columns' upcast, not the rows' (16 elements apart)"


def test_no_vectors_without_an_upcast_or_a_contiguous_access() -> None:
  ast, _ = _kernel(_f32(8, 16) * 3)
  k = Kernel(ast, Device[Device.DEFAULT].renderer)
  assert k.vector_axis() is None and _vector_lanes(k.linearize()) == 1
  ast, _ = _kernel(_f32(12, 8) * 3)
  k = Kernel(ast, Device[Device.DEFAULT].renderer).apply_opts([Opt(OptOps.UPCAST, 0, 4)])
  assert k.vector_axis() is None, "rows are 8 elements apart in every buffer: nothing to load as one vector"
  k = Kernel(ast, Device[Device.DEFAULT].renderer).apply_opts([Opt(OptOps.UPCAST, 0, 3)])
  assert k.vector_axis() is None, "3 lanes: not a power of two"


# ---------- devectorize, on graphs built by hand ----------

def _vec_graph() -> UOp:
  f4 = dtypes.float32.vec(4)
  buf0, buf1 = UOp(UOps.DEFINE_GLOBAL, dtypes.float32.ptr(), (), 0), UOp(UOps.DEFINE_GLOBAL, dtypes.float32.ptr(), (), 1)
  idx = UOp.const(dtypes.int32, 0)
  x = UOp(UOps.LOAD, f4, (buf1, idx))
  y = (x * 2.0 + x).alu(BinaryOps.MAX, UOp.const(f4, 0.0))
  return UOp(UOps.SINK, None, (UOp(UOps.STORE, None, (buf0, idx, y)),))


def test_devectorize_keeps_loads_and_stores_and_splits_math() -> None:
  sink = devectorize(_vec_graph(), lambda u: False)
  graph = sink.toposort()
  assert not any(u.op is UOps.ALU and u.dtype is not None and u.dtype.count > 1 for u in graph)
  assert any(u.op is UOps.LOAD and u.dtype == dtypes.float32.vec(4) for u in graph)
  store = sink.src[0]
  assert store.src[2].op is UOps.VECTORIZE and store.src[2].dtype == dtypes.float32.vec(4)
  # every lane reads its own GEP of the one vector load, and no GEP of a VECTORIZE is left
  geps = [u for u in graph if u.op is UOps.GEP]
  assert sorted(u.arg for u in geps) == [0, 1, 2, 3] and all(u.src[0].op is UOps.LOAD for u in geps)


def test_devectorize_keeps_what_the_renderer_keeps() -> None:
  sink = _vec_graph()
  assert devectorize(sink, lambda u: True) is sink


def test_fold_sees_through_broadcasts() -> None:
  f4 = dtypes.float32.vec(4)
  x = UOp(UOps.LOAD, f4, (UOp(UOps.DEFINE_GLOBAL, dtypes.float32.ptr(), (), 1), UOp.const(dtypes.int32, 0)))
  assert x + 0.0 is x and x * 1.0 is x
  assert (UOp.const(f4, 2.0) * 3.0).src[0].arg == 6.0  # broadcast op broadcast: done once, on scalars
  cond = UOp.const(dtypes.bool.vec(4), True)
  assert cond.alu(TernaryOps.WHERE, x, UOp.const(f4, 0.0)) is x


class _AlignedRenderer(Renderer):
  vector_bytes, vector_align = 16, True


def test_vector_align_refuses_misaligned_vector_loads() -> None:
  # columns 1..16 of a 17-wide matrix: rows start at multiples of 17, so a vector of 4 is aligned only in row 0
  ast, _ = _kernel(_f32(8, 17)[:, 1:] * 2)
  k = Kernel(ast, _AlignedRenderer()).apply_opts([Opt(OptOps.UPCAST, 1, 4)])
  sink = Lowerer(k.ast, k.renderer, k.kinds, k.vector_axis()).lower()
  loads = [u for u in sink.toposort() if u.op is UOps.LOAD]
  assert loads and all(u.dtype == dtypes.float32 for u in loads), "misaligned: gathered lane by lane"
  stores = [u for u in sink.toposort() if u.op is UOps.STORE]
  assert stores and all(u.src[2].dtype == dtypes.float32.vec(4) for u in stores), "the output rows are aligned: vector stores"


def test_unrolled_reduction_lanes_make_a_vector_accumulator() -> None:
  ast, _ = _kernel(_f32(16, 32).sum(1))
  k = Kernel(ast, Device[Device.DEFAULT].renderer).apply_opts([Opt(OptOps.UNROLL, 1, 4)])
  if k.renderer.vector_width(dtypes.float32) < 4:
    pytest.skip(f"{Device.DEFAULT} declares no float vectors of 4")
  uops = k.linearize()
  f4 = dtypes.float32.vec(4)
  acc = UOp(UOps.REDUCE, f4, (UOp.const(f4, 0.0),), BinaryOps.ADD)
  if k.renderer.keeps_vector(acc):  # else (CUDA) four scalar accumulators
    assert any(u.op is UOps.DEFINE_ACC and u.dtype == f4 for u in uops), "one vector accumulator"
  assert any(u.op is UOps.LOAD and u.dtype == f4 for u in uops), "4 consecutive elements per load"
  assert all(u.src[2].dtype == dtypes.float32 for u in uops if u.op is UOps.STORE), "one sum per row, a scalar"
