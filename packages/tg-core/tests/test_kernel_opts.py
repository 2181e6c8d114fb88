"""Kernel optimizations change how a kernel iterates, never what it computes: every action, and random
combinations of actions, give the numbers of the unoptimized kernel."""
from __future__ import annotations

import contextlib
import random
from collections.abc import Callable

import numpy as np
import pytest

from tg import Device, Tensor, dtypes
from tg.codegen.kernel import Kernel, KernelOptError, Opt, OptOps
from tg.codegen.lowerer import GLOBAL, REDUCE, UPCAST
from tg.codegen.uops import UOp, UOps
from tg.engine.realize import CompiledRunner
from tg.engine.schedule import create_schedule
from tg.plugins.python import PythonRenderer

rng = np.random.default_rng(0)


def _kernel_and_bufs(t: Tensor):  # type: ignore[no-untyped-def]
  sched = create_schedule([t.lazydata])
  assert len(sched) == 1, f"expected one kernel (the inputs are realized), got {len(sched)}"
  return sched[0].ast, sched[0].bufs


def _run(ast, bufs, opts: list[Opt]) -> np.ndarray:  # type: ignore[no-untyped-def]
  k = Kernel(ast, Device[Device.DEFAULT].renderer).apply_opts(opts)
  CompiledRunner(k.to_program())([b.ensure_allocated() for b in bufs], {})
  out = bufs[0]
  return np.frombuffer(out.as_buffer(), dtype=out.dtype.np).copy()


CASES = {
  "matmul": lambda: Tensor(rng.standard_normal((8, 12)).astype(np.float32)) @ Tensor(rng.standard_normal((12, 16)).astype(np.float32)),
  "sum_axis": lambda: Tensor(rng.standard_normal((6, 8, 4)).astype(np.float32)).sum(1),
  "max_axis": lambda: Tensor(rng.standard_normal((4, 12)).astype(np.float32)).max(1),
  "elementwise": lambda: (Tensor(rng.standard_normal((8, 8)).astype(np.float32)) * 2 + 1).exp(),
  "conv": lambda: Tensor(rng.standard_normal((1, 2, 6, 6)).astype(np.float32)).conv2d(
    Tensor(rng.standard_normal((4, 2, 3, 3)).astype(np.float32)), padding=1),
  # reduce over the first axis: group axes come before the local ones in axis order
  "sum_first_axis": lambda: Tensor(rng.standard_normal((16, 6)).astype(np.float32)).sum(0),
  "full_sum": lambda: (Tensor(rng.standard_normal((64,)).astype(np.float32)) * 3).sum(),
  "var_int": lambda: Tensor(rng.integers(-9, 9, (6, 8)).astype(np.int32)).max(1) + 1,
}
LOCAL_OPS = (OptOps.LOCAL, OptOps.GROUP, OptOps.GROUPTOP)


def _build(name: str):  # type: ignore[no-untyped-def]
  return _kernel_and_bufs(CASES[name]())


def _valid_opts(ast) -> list[Opt]:  # type: ignore[no-untyped-def]
  k = Kernel(ast, Device[Device.DEFAULT].renderer)
  opts = []
  for axis, kind in enumerate(k.kinds):
    for amt in (2, 3, 4, 0):
      if kind == GLOBAL:
        opts += [Opt(OptOps.UPCAST, axis, amt), Opt(OptOps.PADTO, axis, amt if amt else 8), Opt(OptOps.LOCAL, axis, amt),
                 Opt(OptOps.BLOCK, axis, amt)]
      if kind == REDUCE:
        opts += [Opt(OptOps.UNROLL, axis, amt), Opt(OptOps.GROUP, axis, amt), Opt(OptOps.GROUPTOP, axis, amt)]
  out = []
  for o in opts:
    try:
      Kernel(ast, Device[Device.DEFAULT].renderer).apply_opt(o)
      out.append(o)
    except KernelOptError:
      pass
  return out


@pytest.mark.parametrize("name", list(CASES))
def test_every_single_opt_matches_unoptimized(name: str) -> None:
  ast, bufs = _build(name)
  ref = _run(ast, bufs, [])
  opts = _valid_opts(ast)
  assert opts, "some optimization must apply"
  for o in opts:
    np.testing.assert_allclose(_run(ast, bufs, [o]), ref, rtol=1e-5, atol=1e-5, err_msg=str(o))


@pytest.mark.parametrize("name", list(CASES))
def test_random_opt_combinations_match_unoptimized(name: str) -> None:
  ast, bufs = _build(name)
  ref = _run(ast, bufs, [])
  r = random.Random(name)
  for _ in range(6):
    k = Kernel(ast, Device[Device.DEFAULT].renderer)
    for _ in range(r.randint(1, 3)):
      axis = r.randrange(len(k.full_shape))
      op = r.choice([OptOps.UPCAST, OptOps.UNROLL, OptOps.PADTO, OptOps.BLOCK, *LOCAL_OPS])
      try:
        k.apply_opt(Opt(op, axis, r.choice([2, 3, 4])))
      except KernelOptError:
        pass
    np.testing.assert_allclose(_run(ast, bufs, k.applied_opts), ref, rtol=1e-5, atol=1e-5, err_msg=str(k.applied_opts))


def test_block_reorders_the_output_loops() -> None:
  ast, bufs = _build("matmul")
  renderer = Device[Device.DEFAULT].renderer
  if renderer.global_ids:
    pytest.skip(f"{Device.DEFAULT}'s output axes are hardware indices, not loops")
  k = Kernel(ast, renderer).apply_opts([Opt(OptOps.BLOCK, 0, 2)])
  assert k.full_shape[:3] == (4, 16, 2) and k.kinds[:3] == (GLOBAL, GLOBAL, GLOBAL)
  np.testing.assert_allclose(_run(ast, bufs, k.applied_opts), _run(ast, bufs, []), rtol=1e-5, atol=1e-5)


def test_block_of_an_inner_axis_makes_its_blocks_the_outermost_loop() -> None:
  """BLOCK on the matmul's column axis: its blocks go before the row loop and each block's columns innermost (a dot
  tile's W blocked so that every row tile sweeps a block in cache); after an UPCAST of the rows, the upcast axis stays
  where it was. Numbers unchanged either way."""
  ast, bufs = _build("matmul")  # 8 x 16 outputs, 12 reduced
  renderer = Device[Device.DEFAULT].renderer
  if renderer.global_ids:
    pytest.skip(f"{Device.DEFAULT}'s output axes are hardware indices, not loops")
  ref = _run(ast, bufs, [])
  k = Kernel(ast, renderer).apply_opts([Opt(OptOps.BLOCK, 1, 4)])
  assert k.full_shape[:3] == (4, 8, 4) and k.kinds[:3] == (GLOBAL, GLOBAL, GLOBAL), (k.full_shape, k.kinds)
  np.testing.assert_allclose(_run(ast, bufs, k.applied_opts), ref, rtol=1e-5, atol=1e-5)
  k = Kernel(ast, renderer).apply_opts([Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.BLOCK, 2, 2)])
  assert k.full_shape[:4] == (8, 4, 2, 2) and k.kinds[:4] == (GLOBAL, GLOBAL, GLOBAL, UPCAST), (k.full_shape, k.kinds)
  np.testing.assert_allclose(_run(ast, bufs, k.applied_opts), ref, rtol=1e-5, atol=1e-5)
  with pytest.raises(KernelOptError):  # one output loop: nothing to sweep
    Kernel(*_build("sum_axis")[:1], renderer).apply_opts([Opt(OptOps.BLOCK, 1, 2)])


def test_heuristics_match_unoptimized() -> None:
  for name in CASES:
    ast, bufs = _build(name)
    k = Kernel(ast, Device[Device.DEFAULT].renderer).hand_coded_optimizations()
    np.testing.assert_allclose(_run(ast, bufs, k.applied_opts), _run(ast, bufs, []), rtol=1e-5, atol=1e-5, err_msg=name)


def test_cpu_heuristics_unroll_a_conv_window() -> None:
  """A 3x3 window is unrolled whole (its masks then don't change inside the channel loop); the channel loop stays."""
  renderer = Device[Device.DEFAULT].renderer
  if renderer.global_ids:
    pytest.skip(f"{Device.DEFAULT} gets the workgroup heuristics")
  if renderer.vector_width(dtypes.float32) < 8:  # in scalars the tile times the whole window is over MAX_UNROLLED
    pytest.skip(f"{Device.DEFAULT} has no 8-float vectors")
  x, w = Tensor(rng.standard_normal((1, 8, 8, 8)).astype(np.float32)), Tensor(rng.standard_normal((8, 8, 3, 3)).astype(np.float32))
  ast, bufs = _kernel_and_bufs(x.conv2d(w, padding=1))
  k = Kernel(ast, renderer).hand_coded_optimizations()
  reduce_sizes = [s for s, kind in zip(k.full_shape, k.kinds) if kind == REDUCE and s != 1]
  assert reduce_sizes == [8], f"the window should be unrolled and the channels looped: {k.full_shape} {k.kinds}"
  assert [o.amt for o in k.applied_opts if o.op is OptOps.UNROLL] == [0, 0]
  np.testing.assert_allclose(_run(ast, bufs, k.applied_opts), _run(ast, bufs, []), rtol=1e-5, atol=1e-5)


def test_unrolled_copies_count_a_vector_once() -> None:
  """MAX_UNROLLED (256) bounds the copies of the body, a vector's lanes counting as one copy."""
  ast, _ = _build("matmul")  # 8 x 16 outputs, 12 reduced

  class Vectors(PythonRenderer):
    vector_bytes = 64

  class Scalars(PythonRenderer):
    vector_bytes = 0

  tile = [Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.UPCAST, 0, 8)]
  r = Kernel(ast, Vectors()).apply_opts(tile).kinds.index(REDUCE)
  k = Kernel(ast, Vectors()).apply_opts(tile + [Opt(OptOps.UNROLL, r, 0)])  # 8 x 12 = 96 vectors of 16
  assert k.full_shape[-1] == 12 and k.kinds[-1] == "n"
  with pytest.raises(KernelOptError, match="unrolled copies"):
    Kernel(ast, Scalars()).apply_opts(tile + [Opt(OptOps.UNROLL, r, 0)])  # 1536 scalars
  cols = [Opt(OptOps.UPCAST, 1, 16)]
  r = Kernel(ast, Scalars()).apply_opts(cols).kinds.index(REDUCE)
  Kernel(ast, Scalars()).apply_opts(cols + [Opt(OptOps.UNROLL, r, 0)])  # 16 x 12 = 192 scalars
  with pytest.raises(KernelOptError, match="unrolled copies"):
    Kernel(ast, Scalars()).apply_opts(cols + [Opt(OptOps.UNROLL, r, 0), Opt(OptOps.UPCAST, 0, 2)])  # 384


class _CPU16(PythonRenderer):
  """A CPU-like renderer (loops, no workgroups) with 16-float vectors: what the CPU heuristics see on AVX-512."""
  global_ids = False
  has_local = False
  vector_bytes = 64


def test_cpu_heuristics_reduce_along_rows() -> None:
  """A row reduction: a vector of each row per step, 4 of them per iteration, one row at a time (one stream)."""
  ast, bufs = _kernel_and_bufs(Tensor(rng.standard_normal((8, 512)).astype(np.float32)).sum(1))
  k = Kernel(ast, _CPU16()).hand_coded_optimizations()
  assert k.applied_opts == [Opt(OptOps.UNROLL, 1, 16), Opt(OptOps.UNROLL, 1, 4)], k.applied_opts
  assert k.full_shape == (8, 8, 4, 16)
  np.testing.assert_allclose(_run(ast, bufs, k.applied_opts), _run(ast, bufs, []), rtol=1e-5, atol=1e-5)


def test_cpu_heuristics_reduce_down_columns() -> None:
  """A row-major matrix summed over its rows: vectors along the outputs (the contiguous axis), not a reduce loop that
  strides down one column (60 ms -> 1.7 ms for 4096 x 4096)."""
  ast, bufs = _kernel_and_bufs(Tensor(rng.standard_normal((24, 128)).astype(np.float32)).sum(0))
  k = Kernel(ast, _CPU16()).hand_coded_optimizations()
  assert k.applied_opts == [Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.UPCAST, 1, 8)], k.applied_opts
  assert not any(o.op is OptOps.UNROLL for o in k.applied_opts)
  np.testing.assert_allclose(_run(ast, bufs, k.applied_opts), _run(ast, bufs, []), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(1000,), (7, 90), (3, 5)])
def test_cpu_heuristics_reduce_odd_sizes(shape: tuple[int, ...]) -> None:
  """Sizes no vector divides still reduce right (8 of 1000 per step; 2 of 90; 5 not at all)."""
  a = rng.standard_normal(shape).astype(np.float32)
  ast, bufs = _kernel_and_bufs(Tensor(a).sum(-1))
  k = Kernel(ast, _CPU16()).hand_coded_optimizations()
  np.testing.assert_allclose(_run(ast, bufs, k.applied_opts), a.sum(-1).reshape(-1), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("reduction", ["sum", "max"])
@pytest.mark.parametrize("unroll,upcast,accs", [(4, 1, 4), (16, 1, 8), (4, 4, 8), (2, 8, 8), (4, 16, 16)])
def test_unrolled_copies_accumulate_separately(reduction: str, unroll: int, upcast: int, accs: int) -> None:
  """Unrolled copies of a reduction go into up to ACC_CHAINS (8) accumulators per thread, counting every output it
  computes (UPCAST), so that one iteration's adds don't wait for each other; a thread that already computes 8 or more
  outputs keeps one accumulator each."""
  a = rng.standard_normal((16, 64)).astype(np.float32)
  ast, bufs = _kernel_and_bufs(getattr(Tensor(a), reduction)(1))
  opts = [Opt(OptOps.UNROLL, 1, unroll)] + ([Opt(OptOps.UPCAST, 0, upcast)] if upcast > 1 else [])

  class Scalars(PythonRenderer):  # vectors would make the unrolled axis one vector accumulator
    vector_bytes = 0

  uops = Kernel(ast, Scalars()).apply_opts(opts).linearize()
  assert sum(u.op is UOps.DEFINE_ACC for u in uops) == accs
  np.testing.assert_allclose(_run(ast, bufs, opts), getattr(a, reduction)(1), rtol=1e-5, atol=1e-5)


def test_bad_opts_raise() -> None:
  ast, _ = _build("matmul")
  renderer = Device[Device.DEFAULT].renderer
  k = Kernel(ast, renderer)
  g = k.kinds.index(GLOBAL)
  r = k.kinds.index(REDUCE)
  for bad in [Opt(OptOps.UPCAST, r, 2), Opt(OptOps.UNROLL, g, 2), Opt(OptOps.UPCAST, g, 5), Opt(OptOps.UPCAST, 99, 2),
              Opt(OptOps.PADTO, r, 4), Opt(OptOps.UPCAST, g, 1)]:
    with pytest.raises(KernelOptError):
      Kernel(ast, renderer).apply_opt(bad)
  if not renderer.global_ids:  # loops: BLOCK reorders them; not the reduce loop, not by the whole axis
    for bad in [Opt(OptOps.BLOCK, r, 2), Opt(OptOps.BLOCK, g, 0), Opt(OptOps.BLOCK, g, 3)]:
      with pytest.raises(KernelOptError):
        Kernel(ast, renderer).apply_opt(bad)
  if not renderer.has_local:
    for op in (OptOps.LOCAL, OptOps.GROUP, OptOps.GROUPTOP, OptOps.TC):
      with pytest.raises(KernelOptError, match="local"):
        Kernel(ast, renderer).apply_opt(Opt(op, g, 2))
  else:
    for bad in [Opt(OptOps.LOCAL, r, 2), Opt(OptOps.GROUP, g, 2), Opt(OptOps.GROUPTOP, g, 2), Opt(OptOps.LOCAL, g, 5),
                Opt(OptOps.TC, g, 0), Opt(OptOps.BLOCK, g, 2)]:
      with pytest.raises(KernelOptError):
        Kernel(ast, renderer).apply_opt(bad)
    # 8 x 16 outputs and 12 reduced, all in one workgroup: more threads than a workgroup holds
    g2 = k.kinds.index(GLOBAL, g + 1)
    if renderer.local_max_threads < 8 * 16 * 12:
      with pytest.raises(KernelOptError, match="threads"):
        Kernel(ast, renderer).apply_opts([Opt(OptOps.LOCAL, g, 0), Opt(OptOps.LOCAL, g2 + 1, 0), Opt(OptOps.GROUP, r + 2, 0)])
    with pytest.raises(KernelOptError, match="NOLOCALS"):
      Kernel(ast, renderer).apply_opts([Opt(OptOps.NOLOCALS), Opt(OptOps.LOCAL, g, 2)])


@pytest.mark.skipif(not Device[Device.DEFAULT].renderer.has_local, reason="the device has no workgroups with local memory")
def test_group_reduce_uses_local_memory_and_a_barrier() -> None:
  from tg.codegen.uops import UOps
  ast, bufs = _build("sum_axis")
  k = Kernel(ast, Device[Device.DEFAULT].renderer).apply_opts([Opt(OptOps.GROUPTOP, 1, 4), Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.UPCAST, 4, 2)])
  p = k.to_program()
  ops = [u.op for u in p.uops]
  assert ops.count(UOps.DEFINE_LOCAL) == 1 and ops.count(UOps.BARRIER) == 1
  assert p.local_size and np.prod(p.local_size) == 8
  np.testing.assert_allclose(_run(ast, bufs, k.applied_opts), _run(ast, bufs, []), rtol=1e-5, atol=1e-5)


def _two_output_kernel():  # type: ignore[no-untyped-def]
  """out0 = sum(x*x, axis=1), out1 = max(x, axis=1) + 1: two outputs of one reduction input, in one kernel."""
  from tg.device import Buffer
  from tg.dtype import dtypes
  from tg.ops import BinaryOps, BufferOps, ConstBuffer, LazyOp, MemBuffer, MetaOps, ReduceOps
  from tg.shape.shapetracker import ShapeTracker
  f32 = dtypes.float32
  x = LazyOp(BufferOps.LOAD, (), MemBuffer(2, f32, ShapeTracker.from_shape((16, 32))))
  out_st = ShapeTracker.from_shape((16, 1))
  s0 = LazyOp(BufferOps.STORE, (LazyOp(ReduceOps.SUM, (LazyOp(BinaryOps.MUL, (x, x)),), (1,)),), MemBuffer(0, f32, out_st))
  one = LazyOp(BufferOps.CONST, (), ConstBuffer(1.0, f32, out_st))
  s1 = LazyOp(BufferOps.STORE, (LazyOp(BinaryOps.ADD, (LazyOp(ReduceOps.MAX, (x,), (1,)), one)),), MemBuffer(1, f32, out_st))
  xs = rng.standard_normal((16, 32)).astype(np.float32)
  bufs = [Buffer(Device.DEFAULT, 16, f32), Buffer(Device.DEFAULT, 16, f32), Buffer(Device.DEFAULT, 16 * 32, f32).copyin(memoryview(xs))]
  return LazyOp(MetaOps.SINK, (s0, s1)), bufs, xs


@pytest.mark.parametrize("opts", [[], [Opt(OptOps.UPCAST, 0, 4)], [Opt(OptOps.UNROLL, 1, 4)], [Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UNROLL, 2, 8)],
                                  [Opt(OptOps.GROUPTOP, 1, 8)], [Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.GROUP, 2, 4), Opt(OptOps.UPCAST, 0, 2)]])
def test_multi_output_kernel(opts: list[Opt]) -> None:
  ast, bufs, xs = _two_output_kernel()
  k = Kernel(ast, Device[Device.DEFAULT].renderer)
  if not k.renderer.has_local and any(o.op in LOCAL_OPS for o in opts):
    pytest.skip(f"{opts} needs workgroups, which {Device.DEFAULT} has not")
  k.apply_opts(opts)
  p = k.to_program()
  upcasts = int(np.prod([o.amt for o in opts if o.op is OptOps.UPCAST]))
  # each output element is stored once (a vector store stores one per lane)
  assert sum(u.src[2].dtype.count for u in p.uops if u.op.name == "STORE" and u.src[0].op.name == "DEFINE_GLOBAL") == 2 * upcasts
  CompiledRunner(p)([b.ensure_allocated() for b in bufs], {})
  np.testing.assert_allclose(np.frombuffer(bufs[0].as_buffer(), dtype=np.float32), (xs * xs).sum(1), rtol=1e-5)
  np.testing.assert_allclose(np.frombuffer(bufs[1].as_buffer(), dtype=np.float32), xs.max(1) + 1, rtol=1e-6)


def _softmax_stats_kernel():  # type: ignore[no-untyped-def]
  """out0 = sum(exp2(x - max(x))), out1 = max(x) over axis 1: a reduction inside another's input, both stored."""
  from tg.device import Buffer
  from tg.dtype import dtypes
  from tg.ops import BinaryOps, BufferOps, LazyOp, MemBuffer, MetaOps, ReduceOps, UnaryOps
  from tg.shape.shapetracker import ShapeTracker
  f32 = dtypes.float32
  x = LazyOp(BufferOps.LOAD, (), MemBuffer(2, f32, ShapeTracker.from_shape((16, 32))))
  mx = LazyOp(ReduceOps.MAX, (x,), (1,))
  e = LazyOp(UnaryOps.EXP2, (LazyOp(BinaryOps.ADD, (x, LazyOp(UnaryOps.NEG, (mx,)))),))
  out_st = ShapeTracker.from_shape((16, 1))
  sink = LazyOp(MetaOps.SINK, (LazyOp(BufferOps.STORE, (LazyOp(ReduceOps.SUM, (e,), (1,)),), MemBuffer(0, f32, out_st)),
                               LazyOp(BufferOps.STORE, (mx,), MemBuffer(1, f32, out_st))))
  xs = rng.standard_normal((16, 32)).astype(np.float32) * 4
  bufs = [Buffer(Device.DEFAULT, 16, f32), Buffer(Device.DEFAULT, 16, f32), Buffer(Device.DEFAULT, 16 * 32, f32).copyin(memoryview(xs))]
  return sink, bufs, xs


@pytest.mark.parametrize("opts", [[], [Opt(OptOps.UPCAST, 0, 4)], [Opt(OptOps.UNROLL, 1, 4)], [Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UNROLL, 2, 8)],
                                  [Opt(OptOps.LOCAL, 0, 4)], [Opt(OptOps.GROUP, 1, 4)], [Opt(OptOps.GROUPTOP, 1, 8), Opt(OptOps.LOCAL, 0, 4)],
                                  [Opt(OptOps.GROUP, 1, 4), Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UNROLL, 2, 2)]])
def test_nested_reduce_kernel(opts: list[Opt]) -> None:
  ast, bufs, xs = _softmax_stats_kernel()
  k = Kernel(ast, Device[Device.DEFAULT].renderer)
  if not k.renderer.has_local and any(o.op in LOCAL_OPS for o in opts):
    pytest.skip(f"{opts} needs workgroups, which {Device.DEFAULT} has not")
  k.apply_opts(opts)
  p = k.to_program()
  CompiledRunner(p)([b.ensure_allocated() for b in bufs], {})
  m = xs.max(1)
  np.testing.assert_allclose(np.frombuffer(bufs[1].as_buffer(), dtype=np.float32), m)
  np.testing.assert_allclose(np.frombuffer(bufs[0].as_buffer(), dtype=np.float32), np.exp2(xs - m[:, None]).sum(1), rtol=1e-5)


# ---------- GROUP reduces: the partials are combined once, by the group's first thread, in an IF block ----------

def _if_block(uops: list[UOp]) -> tuple[int, int]:
  """The positions of the one IF of a linear program and of its ENDIF."""
  ops = [u.op for u in uops]
  assert ops.count(UOps.IF) == 1 and ops.count(UOps.ENDIF) == 1, "a GROUP kernel has one IF block"
  start, end = ops.index(UOps.IF), ops.index(UOps.ENDIF)
  assert uops[end].src == (uops[start],)
  return start, end


def _local_loads(uops: list[UOp]) -> list[UOp]:
  return [u for u in uops if u.op is UOps.LOAD and u.src[0].op is UOps.DEFINE_LOCAL]


@pytest.mark.parametrize("opts", [[Opt(OptOps.GROUPTOP, 1, 4)], [Opt(OptOps.GROUP, 1, 4), Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.UPCAST, 0, 3)]])
def test_group_combines_partials_in_an_if_block(opts: list[Opt]) -> None:
  ast, _ = _build("sum_axis")
  uops = Kernel(ast, PythonRenderer()).apply_opts(opts).linearize()  # the structure is the same for every renderer
  start, end = _if_block(uops)
  inside, outside = uops[start + 1:end], uops[:start] + uops[end + 1:]
  block = uops[start]
  barrier = next(u for u in uops if u.op is UOps.BARRIER)
  assert uops.index(barrier) < start and barrier in block.src, "every thread passes the barrier, before the block"
  # the loop over the group's partials, its loads of local memory and the output stores: only in the block
  loads = _local_loads(uops)
  combine = {u for ld in loads for u in ld.src[1].toposort() if u.op is UOps.RANGE}
  assert loads and combine and all(u in inside for u in [*loads, *combine])
  assert all(u in inside for u in uops if u.op is UOps.ENDRANGE and u.src[0] in combine)
  stores = [u for u in uops if u.op is UOps.STORE and u.src[0].op is UOps.DEFINE_GLOBAL]
  assert stores and all(s in inside and s.src[-1] is block for s in stores)
  # each thread's own partial and its store to local memory are outside: every thread computes one
  assert all(u in outside for u in uops if u.op is UOps.STORE and u.src[0].op is UOps.DEFINE_LOCAL)
  defined_inside = set(inside) | {u.arg for u in inside if u.op is UOps.DEFINE_ACC}
  assert not any(set(u.src) & defined_inside for u in outside)


def test_nested_group_reduce_needed_by_every_thread_is_outside_the_block() -> None:
  """max(x) is needed by every thread for its partial sum of exp2(x - max) and also stored: its partials are combined
  before the block (by every thread), the sum's inside it; both stores are in the block."""
  ast, _, _ = _softmax_stats_kernel()
  uops = Kernel(ast, PythonRenderer()).apply_opts([Opt(OptOps.GROUP, 1, 4), Opt(OptOps.UPCAST, 0, 2)]).linearize()
  start, end = _if_block(uops)
  barriers = [n for n, u in enumerate(uops) if u.op is UOps.BARRIER]
  assert len(barriers) == 2 and all(n < start for n in barriers)
  locals_read_outside = {ld.src[0] for ld in _local_loads(uops[:start])}
  locals_read_inside = {ld.src[0] for ld in _local_loads(uops[start:end])}
  assert len(locals_read_outside) == len(locals_read_inside) == 1 and locals_read_outside != locals_read_inside
  max_stores = [u for u in uops[start:end] if u.op is UOps.STORE and u.src[0].op is UOps.DEFINE_GLOBAL and u.src[0].arg == 1]
  accs = {u.arg: n for n, u in enumerate(uops) if u.op is UOps.DEFINE_ACC}
  assert len(max_stores) == 2 and all(accs[s.src[2]] < start for s in max_stores), "the stored max is computed before the block"


def test_no_if_block_without_group() -> None:
  for name in CASES:
    ast, _ = _build(name)
    k = Kernel(ast, PythonRenderer())
    for opt in [Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UNROLL, len(k.full_shape) - 1, 2)]:
      with contextlib.suppress(KernelOptError):
        k.apply_opt(opt)
    ops = {u.op for u in k.linearize()}
    assert UOps.IF not in ops and UOps.ENDIF not in ops, name


def _realize_with(t: Tensor, opts: list[Opt]) -> np.ndarray:
  """Run the kernels of `t` with `opts` applied to its reduce kernel (the others unoptimized)."""
  sched = create_schedule([t.lazydata])
  for si in sched:
    k = Kernel(si.ast, Device[Device.DEFAULT].renderer)
    if k.reduceop is not None:
      k.apply_opts(opts)
    CompiledRunner(k.to_program())([b.ensure_allocated() for b in si.bufs], {})
  out = sched[-1].bufs[0]
  return np.frombuffer(out.as_buffer(), dtype=out.dtype.np).reshape(t.shape)


def _softmax(a: np.ndarray) -> np.ndarray:
  e = np.exp(a - a.max(1, keepdims=True))
  return e / e.sum(1, keepdims=True)  # type: ignore[no-any-return]


REDUCTIONS: dict[str, tuple[Callable[[Tensor], Tensor], Callable[[np.ndarray], np.ndarray]]] = {
  "sum": (lambda t: t.sum(-1), lambda a: a.sum(-1)), "max": (lambda t: t.max(-1), lambda a: a.max(-1)),
  "mean": (lambda t: t.mean(-1), lambda a: a.mean(-1)), "mean_first_axis": (lambda t: t.mean(0), lambda a: a.mean(0)),
  "var": (lambda t: t.var(1), lambda a: a.var(1, ddof=1)),  # a mean inside a sum of squares: two group reductions
  "softmax": (lambda t: t.softmax(1), _softmax),  # a max inside a sum of exps
}
G, GT, L, U, N_ = OptOps.GROUP, OptOps.GROUPTOP, OptOps.LOCAL, OptOps.UPCAST, OptOps.UNROLL
GROUP_CASES = [  # (reduction, shape, dtype, opts); each opt's axis counts the full shape as the opts before it left it
  ("sum", (4, 64), np.float32, [Opt(G, 1, 16)]),
  ("sum", (4, 64), np.float32, [Opt(GT, 1, 32)]),
  ("sum", (4, 64), np.float32, [Opt(GT, 1, 8), Opt(L, 0, 2), Opt(U, 0, 2)]),
  ("sum", (256,), np.float32, [Opt(GT, 0, 64), Opt(N_, 0, 4)]),
  ("sum", (5, 48), np.int32, [Opt(G, 1, 16), Opt(L, 0, 5)]),
  ("max", (3, 5, 32), np.float32, [Opt(GT, 2, 8), Opt(L, 1, 5)]),
  ("max", (6, 64), np.float32, [Opt(OptOps.PADTO, 0, 4), Opt(U, 0, 4), Opt(G, 2, 8)]),  # padded outputs: predicated stores in the block
  ("mean_first_axis", (32, 6), np.float32, [Opt(G, 0, 8), Opt(L, 2, 2), Opt(U, 2, 3)]),  # group axes before local ones
  ("mean", (2, 3, 128), np.float32, [Opt(GT, 2, 16), Opt(U, 1, 3), Opt(N_, 3, 2)]),
  ("var", (8, 64), np.float32, [Opt(G, 1, 16)]),
  ("var", (8, 64), np.float32, [Opt(GT, 1, 8), Opt(L, 0, 2), Opt(U, 0, 2)]),
  ("softmax", (8, 64), np.float32, [Opt(G, 1, 4)]),
  ("softmax", (8, 64), np.float32, [Opt(GT, 1, 16), Opt(L, 0, 4)]),
]


@pytest.mark.skipif(not Device[Device.DEFAULT].renderer.has_local, reason="the device has no workgroups with local memory")
@pytest.mark.parametrize("reduction, shape, dtype, opts", GROUP_CASES, ids=[f"{c[0]}-{'x'.join(map(str, c[1]))}-{c[2].__name__}-" +
                                                                            "-".join(f"{o.op.name}{o.amt}" for o in c[3]) for c in GROUP_CASES])
def test_group_reduce_matches_numpy(reduction: str, shape: tuple[int, ...], dtype: type, opts: list[Opt]) -> None:
  xs = (rng.integers(-50, 50, shape) if dtype is np.int32 else rng.standard_normal(shape)).astype(dtype)
  fn, ref = REDUCTIONS[reduction]
  np.testing.assert_allclose(_realize_with(fn(Tensor(xs)), opts), ref(xs), rtol=1e-5, atol=1e-6)
