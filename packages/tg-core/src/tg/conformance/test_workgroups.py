"""Kernel shapes the optimizer makes on devices that declare them: workgroups with shared memory and barriers
(LOCAL, GROUP, GROUPTOP; Renderer.has_local) and vector values (UPCAST, UNROLL; Renderer.vector_bytes). Each kernel
is built with fixed optimizations and checked against numpy, so the device's rendering of them is tested even when
its own optimizer would choose others."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from tg import Device, Tensor
from tg.codegen.kernel import Kernel, Opt, OptOps
from tg.codegen.lowerer import GLOBAL, REDUCE
from tg.engine.realize import CompiledRunner
from tg.engine.schedule import create_schedule
from tg.lazy import LazyBuffer

pytestmark = pytest.mark.needs("kernels")


def _run_with_opts(t: Tensor, make_opts: Callable[[list[int], list[int]], list[Opt]]) -> np.ndarray:
  """Realize `t`'s one kernel (its inputs realized) with the optimizations make_opts(global axes, reduce axes) gives."""
  assert isinstance(t.lazydata, LazyBuffer)
  sched = create_schedule([t.lazydata])
  assert len(sched) == 1, f"expected one kernel, got {len(sched)}"
  renderer = Device[Device.DEFAULT].renderer
  assert renderer is not None  # needs("kernels")
  k = Kernel(sched[0].ast, renderer)
  glob = [i for i, kind in enumerate(k.kinds) if kind == GLOBAL]
  red = [i for i, kind in enumerate(k.kinds) if kind == REDUCE]
  k = k.apply_opts(make_opts(glob, red))
  bufs = [b.ensure_allocated() for b in sched[0].bufs]
  CompiledRunner(k.to_program())(bufs, {})
  return np.frombuffer(bufs[0].as_buffer(), dtype=bufs[0].dtype.np).reshape(t.shape).copy()


def _sum_case(rng: np.random.Generator) -> tuple[Tensor, np.ndarray]:
  x = rng.standard_normal((16, 64)).astype(np.float32)
  return Tensor(x).realize().sum(1), x.sum(1)


def _matmul_case(rng: np.random.Generator) -> tuple[Tensor, np.ndarray]:
  a, b = rng.standard_normal((16, 32)).astype(np.float32), rng.standard_normal((32, 8)).astype(np.float32)
  return Tensor(a).realize() @ Tensor(b).realize(), a @ b


WORKGROUP_OPTS: dict[str, Callable[[list[int], list[int]], list[Opt]]] = {
  "local": lambda g, r: [Opt(OptOps.LOCAL, g[0], 4)],
  "group": lambda g, r: [Opt(OptOps.GROUP, r[0], 8)],
  "grouptop": lambda g, r: [Opt(OptOps.GROUPTOP, r[0], 16)],
  # each opt splits an axis in two, so a later opt's axis number counts the axis the earlier one added
  "local+group": lambda g, r: [Opt(OptOps.LOCAL, g[0], 4), Opt(OptOps.GROUP, r[0] + 1, 4)],
}
VECTOR_OPTS: dict[str, Callable[[list[int], list[int]], list[Opt]]] = {
  "upcast": lambda g, r: [Opt(OptOps.UPCAST, g[-1], 4)],
  "unroll": lambda g, r: [Opt(OptOps.UNROLL, r[0], 4)],
  "upcast+unroll": lambda g, r: [Opt(OptOps.UPCAST, g[0], 4), Opt(OptOps.UNROLL, r[0] + 1, 4)],
}


@pytest.mark.needs("local")
@pytest.mark.parametrize("opts", list(WORKGROUP_OPTS))
@pytest.mark.parametrize("case", [_sum_case, _matmul_case], ids=["sum", "matmul"])
def test_workgroups_and_shared_memory(case: Callable[[np.random.Generator], tuple[Tensor, np.ndarray]], opts: str,
                                      rng: np.random.Generator) -> None:
  t, want = case(rng)
  np.testing.assert_allclose(_run_with_opts(t, WORKGROUP_OPTS[opts]), want, rtol=1e-5, atol=1e-4)


@pytest.mark.needs("vectors")
@pytest.mark.parametrize("opts", list(VECTOR_OPTS))
@pytest.mark.parametrize("case", [_sum_case, _matmul_case], ids=["sum", "matmul"])
def test_vector_values(case: Callable[[np.random.Generator], tuple[Tensor, np.ndarray]], opts: str, rng: np.random.Generator) -> None:
  t, want = case(rng)
  np.testing.assert_allclose(_run_with_opts(t, VECTOR_OPTS[opts]), want, rtol=1e-5, atol=1e-4)
