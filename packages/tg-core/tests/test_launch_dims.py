"""Output axes onto a device's launch dims: every output is computed exactly once, whatever the device's limits."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from tg import Tensor
from tg.codegen.kernel import Kernel
from tg.codegen.lowerer import fold_dims
from tg.engine.realize import CompiledRunner
from tg.engine.schedule import create_schedule
from tg.plugins.python import PythonRenderer
from tg.shape.symbolic import sym_infer


@pytest.mark.parametrize("sizes,max_dims", [
  ([5], (8, 8, 8)), ([3, 4], (8, 8, 8)), ([2, 3, 4, 5], (64, 64, 64)), ([2, 3, 4, 5, 6], (64, 64, 64)),
  ([7, 100], (25, 8, 8)),   # 100 is too long for x: split over a spare dim
  ([6, 3, 2, 6], (4, 3, 64)),  # no spare dim: numbered in one sequence, cut by divisors
  ([97], (8, 8, 8)), ([5, 13], (4, 4, 8)),  # no divisors fit (a prime): more threads than outputs, the rest guarded
  ([65537], (65535, 65535, 65535)),  # WEBGPU's limit and the first prime past it
  ([3, 5, 7], None), ([], (8, 8, 8)), ([], None),
])
def test_fold_dims_covers_every_output_once(sizes: list[int], max_dims: tuple[int, ...] | None) -> None:
  dims, launch, idxs, guard = fold_dims(sizes, max_dims, "gidx")  # type: ignore[arg-type]
  if max_dims is not None:
    assert len(dims) <= len(max_dims) and all(d <= m for d, m in zip(dims, max_dims))  # type: ignore[operator]
  seen = []
  for coord in itertools.product(*[range(d) for d in dims]):  # type: ignore[arg-type]
    env = dict(zip(launch, coord))
    if guard is None or sym_infer(guard, env):
      seen.append(tuple(sym_infer(e, env) for e in idxs))
  assert sorted(seen) == list(itertools.product(*[range(s) for s in sizes]))
  assert (guard is None) == (int(np.prod(dims)) == int(np.prod(sizes))), "a guard exactly when threads outnumber outputs"


def test_fold_dims_refuses_what_cannot_fit() -> None:
  with pytest.raises(ValueError, match="limits"):
    fold_dims([4, 4, 4], (2, 2, 2), "gidx")  # more outputs than the whole grid


class PrimeGrid(PythonRenderer):
  global_max = (4, 3, 2)  # 24 threads at most: 23 outputs (a prime) can't be cut exactly


def test_guarded_launch_computes_each_output_once_in_place() -> None:
  """More threads than outputs: the spare thread must neither read past the buffers nor store. An in-place add shows a
  second store (it would add twice); a reduce shows loads gated too."""
  a = np.arange(23 * 5, dtype=np.float32).reshape(23, 5)
  t = Tensor(a, device="PYTHON").realize()
  for expr, ref in ((lambda x: x.sum(1), a.sum(1)), (lambda x: x[:, 0] * 3 + 1, a[:, 0] * 3 + 1)):
    sched = create_schedule([expr(t).lazydata])
    assert len(sched) == 1
    p = Kernel(sched[0].ast, PrimeGrid()).to_program()
    assert int(np.prod([int(d) for d in p.global_size])) == 24
    bufs = [b.ensure_allocated() for b in sched[0].bufs]
    bufs[0].copyin(memoryview(np.full(23, 1000.0, np.float32)))
    CompiledRunner(p)(bufs, {})
    np.testing.assert_equal(np.frombuffer(bufs[0].as_buffer(), dtype=np.float32), ref)


class SmallGrid(PythonRenderer):
  global_max = (4, 3, 64)  # a device with tiny launch dims: outputs must be folded and split to fit


def test_kernels_fold_onto_small_launch_grids() -> None:
  a = np.arange(2 * 3 * 4 * 6, dtype=np.float32).reshape(2, 3, 4, 6)
  t = Tensor(a, device="PYTHON").realize()  # SmallGrid's kernels run on PYTHON: its buffers must be PYTHON's
  sched = create_schedule([(t * 2 + 1).permute(3, 1, 0, 2).contiguous().lazydata])
  k = Kernel(sched[-1].ast, SmallGrid())
  p = k.to_program()
  assert len(p.global_size) == 3 and all(d <= m for d, m in zip(p.global_size, SmallGrid.global_max))  # type: ignore[operator]
  CompiledRunner(p)([b.ensure_allocated() for b in sched[-1].bufs], {})
  out = np.frombuffer(sched[-1].bufs[0].as_buffer(), dtype=np.float32).reshape(6, 3, 2, 4)
  np.testing.assert_equal(out, (a * 2 + 1).transpose(3, 1, 0, 2))
