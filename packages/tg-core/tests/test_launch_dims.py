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
  ([3, 5, 7], None), ([], (8, 8, 8)), ([], None),
])
def test_fold_dims_covers_every_output_once(sizes: list[int], max_dims: tuple[int, ...] | None) -> None:
  dims, launch, idxs = fold_dims(sizes, max_dims, "gidx")  # type: ignore[arg-type]
  if max_dims is not None:
    assert len(dims) <= len(max_dims) and all(d <= m for d, m in zip(dims, max_dims))  # type: ignore[operator]
  seen = [tuple(sym_infer(e, dict(zip(launch, coord))) for e in idxs) for coord in itertools.product(*[range(d) for d in dims])]  # type: ignore[arg-type]
  assert sorted(seen) == list(itertools.product(*[range(s) for s in sizes]))


def test_fold_dims_refuses_what_cannot_fit() -> None:
  with pytest.raises(ValueError, match="limits"):
    fold_dims([97], (8, 8, 8), "gidx")  # a prime longer than any dim
  with pytest.raises(ValueError, match="limits"):
    fold_dims([4, 4, 4], (2, 2, 2), "gidx")  # more outputs than the whole grid


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
