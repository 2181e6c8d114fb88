"""Tensor cores: the TC opt turns a half matmul into WMMA uops of the renderer's tensor core, one warp per tile.

On devices that declare a tensor core (CUDA sm_80+, AMD gfx11, METAL, and PYTHON, which emulates every tensor core
of tg.codegen.tensor_core through its fragment layout) the kernels run and are checked against numpy; everywhere
the opt's validation and the layouts are checked."""
from __future__ import annotations

import numpy as np
import pytest

from tg import Device, Tensor, dtypes
from tg.codegen.kernel import Kernel, KernelOptError, Opt, OptOps
from tg.codegen.tensor_core import MMA_M16N8K16_F16_F32, TENSOR_CORES, TensorCore, emulate_wmma
from tg.codegen.uops import UOps
from tg.engine.realize import CompiledRunner
from tg.engine.schedule import create_schedule

rng = np.random.default_rng(0)
TC = Opt(OptOps.TC, None, 0)


def _half(*shape: int) -> np.ndarray:
  return rng.standard_normal(shape).astype(np.float16)


def _kernel(t: Tensor):  # type: ignore[no-untyped-def]
  sched = create_schedule([t.lazydata])
  assert len(sched) == 1, f"expected one kernel, got {len(sched)}"
  return sched[0].ast, sched[0].bufs


def _needs_tc() -> None:
  if not Device[Device.DEFAULT].renderer.tensor_cores:
    pytest.skip(f"{Device.DEFAULT} declares no tensor cores")


def _run(t: Tensor, opts: list[Opt]) -> tuple[np.ndarray, Kernel]:
  ast, bufs = _kernel(t)
  k = Kernel(ast, Device[Device.DEFAULT].renderer).apply_opts(opts)
  CompiledRunner(k.to_program())([b.ensure_allocated() for b in bufs], {})
  return np.frombuffer(bufs[0].as_buffer(), dtype=bufs[0].dtype.np).copy(), k


# ---------- the layouts: every element of every tile is held by the same number of (lane, element) pairs ----------

@pytest.mark.parametrize("tc", TENSOR_CORES.values(), ids=list(TENSOR_CORES))
@pytest.mark.parametrize("which", ["a", "b", "c"])
def test_fragment_layout_covers_each_tile_element_evenly(tc: TensorCore, which: str) -> None:
  m, n, k = tc.dims
  rows, cols = {"a": (m, k), "b": (k, n), "c": (m, n)}[which]
  layout, elements = {"a": (tc.layout_a, tc.elements[0]), "b": (tc.layout_b, tc.elements[1]), "c": (tc.layout_c, tc.elements[2])}[which]
  seen = sorted(layout(lane, i) for lane in range(tc.threads) for i in range(elements))
  copies = len(seen) // (rows * cols)
  # AMD's WMMA wants A and B twice (lanes 16-31 repeat 0-15); every accumulator element is held exactly once
  assert copies >= 1 and (which != "c" or copies == 1)
  assert seen == sorted([(r, c) for r in range(rows) for c in range(cols)] * copies)


def _fragments(M: np.ndarray, layout, n: int, threads: int) -> list[tuple[float, ...]]:  # type: ignore[no-untyped-def]
  return [tuple(M[layout(lane, i)] for i in range(n)) for lane in range(threads)]


@pytest.mark.parametrize("tc", TENSOR_CORES.values(), ids=list(TENSOR_CORES))
def test_emulated_wmma_is_a_matmul_of_the_gathered_tiles(tc: TensorCore) -> None:
  m, n, k = tc.dims
  A, B = _half(m, k).astype(np.float64), _half(k, n).astype(np.float64)
  C = rng.standard_normal((m, n)).astype(np.float32).astype(np.float64)
  d = emulate_wmma(tc, _fragments(A, tc.layout_a, tc.elements[0], tc.threads), _fragments(B, tc.layout_b, tc.elements[1], tc.threads),
                   _fragments(C, tc.layout_c, tc.elements[2], tc.threads))
  D = np.zeros((m, n))
  for lane, vals in enumerate(d):
    for i, x in enumerate(vals):
      D[tc.layout_c(lane, i)] = x
  np.testing.assert_allclose(D, A @ B + C, rtol=1e-6, atol=1e-5)


def test_emulated_wmma_refuses_lanes_that_disagree_on_a_repeated_element() -> None:
  """AMD's WMMA reads A and B from both halves of the wave, which must hold the same values: a kernel whose lanes
  16-31 load something else is wrong on the GPU, so the emulation says so instead of picking one."""
  tc = TENSOR_CORES["wmma_16x16x16_f16_f32_w32"]
  A, B, C = _half(16, 16), _half(16, 16), np.zeros((16, 16))
  a = _fragments(A, tc.layout_a, 16, 32)
  a[20] = tuple(x + 1 for x in a[20])
  with pytest.raises(AssertionError, match="lane 20"):
    emulate_wmma(tc, a, _fragments(B, tc.layout_b, 16, 32), _fragments(C, tc.layout_c, 8, 32))


# ---------- kernels ----------

def _tcs() -> list[int]:
  """The tensor cores of the device's renderer to run kernels with (PYTHON emulates all of them: each is checked)."""
  return list(range(len(Device[Device.DEFAULT].renderer.tensor_cores))) or [0]


# (M, K, N) in tiles of the tensor core and whether each warp takes two row tiles (UPCAST of the rows by 2: an even
# number of row tiles)
@pytest.mark.parametrize("amt", _tcs())
@pytest.mark.parametrize("tiles,upcast", [((1, 1, 1), False), ((2, 3, 2), False), ((3, 2, 3), False), ((2, 3, 2), True),
                                          ((4, 2, 3), True)])
def test_tensor_core_matmul_matches_numpy(amt: int, tiles: tuple[int, int, int], upcast: bool) -> None:
  _needs_tc()
  tc = Device[Device.DEFAULT].renderer.tensor_cores[amt]
  m, k, n = tiles[0] * tc.dims[0], tiles[1] * tc.dims[2], tiles[2] * tc.dims[1]
  a, b = rng.standard_normal((m, k)).astype(tc.dtype_in.np), rng.standard_normal((k, n)).astype(tc.dtype_in.np)
  opts = [Opt(OptOps.TC, None, amt)] + ([Opt(OptOps.UPCAST, 0, 2)] if upcast else [])
  got, kern = _run(Tensor(a) @ Tensor(b), opts)
  ref = a.astype(np.float32) @ b.astype(np.float32)
  np.testing.assert_allclose(got.reshape(m, n).astype(np.float32), ref, rtol=1e-2, atol=2e-2)
  uops = kern.to_program().uops
  wmmas = [u for u in uops if u.op is UOps.WMMA]
  assert len(wmmas) == (2 if len(opts) > 1 else 1) and all(w.arg == tc.name for w in wmmas)
  # each WMMA accumulates into its fragment's accumulator (a single step of K needs no loop and no accumulator)
  assert all(w.src[2].op is (UOps.DEFINE_ACC if k > tc.dims[2] else UOps.VECTORIZE) for w in wmmas)
  assert kern.to_program().local_size == (tc.threads,), "one warp per workgroup"


def test_tensor_core_batched_matmul_with_elementwise_output() -> None:
  _needs_tc()
  a, b = _half(2, 16, 32), _half(2, 32, 16)
  got, _ = _run((Tensor(a) @ Tensor(b)).relu() * 2, [TC])
  ref = np.maximum(a.astype(np.float32) @ b.astype(np.float32), 0) * 2
  np.testing.assert_allclose(got.reshape(2, 16, 16).astype(np.float32), ref, rtol=1e-2, atol=3e-2)


def test_tensor_core_transposed_operand() -> None:
  _needs_tc()
  a, b = _half(32, 16), _half(32, 16)
  got, _ = _run(Tensor(a).T @ Tensor(b), [TC])
  np.testing.assert_allclose(got.reshape(16, 16).astype(np.float32), a.T.astype(np.float32) @ b.astype(np.float32), rtol=1e-2, atol=2e-2)


@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.float32])
def test_heuristics_use_the_first_tensor_core_of_the_matmul_s_dtype(dt) -> None:  # type: ignore[no-untyped-def]
  _needs_tc()
  tcs = Device[Device.DEFAULT].renderer.tensor_cores
  a, b = (Tensor(rng.standard_normal((32, 32)).astype(dt.np)) for _ in range(2))
  ast, _ = _kernel((a @ b).cast(dtypes.float32) if dt != dtypes.float32 else a @ b)
  k = Kernel(ast, Device[Device.DEFAULT].renderer).hand_coded_optimizations()
  first = next((i for i, tc in enumerate(tcs) if tc.dtype_in == dt and tc.dtype_out == dtypes.float32), None)
  tc_opts = [o for o in k.applied_opts if o.op is OptOps.TC]
  assert tc_opts == ([Opt(OptOps.TC, None, first)] if first is not None else [])


# ---------- validation: a bad TC raises, never miscompiles ----------

def test_bad_tensor_core_opts_raise() -> None:
  renderer = Device[Device.DEFAULT].renderer
  if not renderer.tensor_cores:
    ast, _ = _kernel(Tensor(_half(16, 16)) @ Tensor(_half(16, 8)))
    with pytest.raises(KernelOptError):
      Kernel(ast, renderer).apply_opt(TC)
    return
  f32 = Tensor(rng.standard_normal((16, 16)).astype(np.float32))
  cases = {
    "float32 operands": f32 @ f32,
    "sizes not divisible by the tile": Tensor(_half(16, 24)) @ Tensor(_half(24, 12)),
    "not a matmul": Tensor(_half(16, 16)).sum(1),
  }
  for why, t in cases.items():
    ast, _ = _kernel(t)
    with pytest.raises(KernelOptError):
      Kernel(ast, renderer).apply_opt(TC)
      pytest.fail(why)
  ast, _ = _kernel(Tensor(_half(32, 32)) @ Tensor(_half(32, 16)))
  with pytest.raises(KernelOptError, match="first"):
    Kernel(ast, renderer).apply_opts([Opt(OptOps.UPCAST, 0, 2), TC])
  with pytest.raises(KernelOptError, match="only UPCAST"):
    Kernel(ast, renderer).apply_opts([TC, Opt(OptOps.LOCAL, 0, 2)])
  with pytest.raises(KernelOptError):
    Kernel(ast, renderer).apply_opt(Opt(OptOps.TC, None, len(renderer.tensor_cores)))


def test_tensor_core_dtypes() -> None:
  tc = MMA_M16N8K16_F16_F32
  assert (tc.dtype_in, tc.dtype_out, tc.dims, tc.threads) == (dtypes.float16, dtypes.float32, (16, 8, 16), 32)
