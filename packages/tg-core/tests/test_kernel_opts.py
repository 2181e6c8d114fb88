"""Kernel optimizations change how a kernel iterates, never what it computes: every action, and random
combinations of actions, give the numbers of the unoptimized kernel."""
from __future__ import annotations

import random

import numpy as np
import pytest

from tg import Device, Tensor
from tg.codegen.kernel import Kernel, KernelOptError, Opt, OptOps
from tg.codegen.lowerer import GLOBAL, REDUCE
from tg.engine.realize import CompiledRunner
from tg.engine.schedule import create_schedule

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


def test_heuristics_match_unoptimized() -> None:
  for name in CASES:
    ast, bufs = _build(name)
    k = Kernel(ast, Device[Device.DEFAULT].renderer).hand_coded_optimizations()
    np.testing.assert_allclose(_run(ast, bufs, k.applied_opts), _run(ast, bufs, []), rtol=1e-5, atol=1e-5, err_msg=name)


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
                                  [Opt(OptOps.LOCAL, 0, 4)]])
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
  if k.renderer.has_local:
    with pytest.raises(KernelOptError, match="inside another"):
      Kernel(ast, k.renderer).apply_opt(Opt(OptOps.GROUP, 1, 4))
