"""Large float32 sums: the summation order must make the rounding error grow with log(n), not n (a tree of partial
sums). Each sum is checked against float64 on the same float32 values; the bound, 2 * log2(n) float32 epsilons (2^-24),
is what a tree meets and one long running sum per chunk (16M x 1e-3: 1.7e-5) does not."""
import math

import numpy as np
import pytest

from tg import Device, Tensor, dtypes


def _bound(n: int) -> float:
  return 2 * math.log2(n) * 2.0**-24


def _rel_err(x: np.ndarray, got: float) -> float:
  ref = x.astype(np.float64).sum()
  return float(abs(got - ref) / abs(ref))


def _skip_big(n: int) -> None:
  if Device.DEFAULT == "PYTHON" and n > 1 << 20:
    pytest.skip("the PYTHON interpreter sums 16M elements for minutes")


@pytest.mark.parametrize("n", [1 << 20, 1 << 24], ids=["1M", "16M"])
def test_constant_sum_error_grows_with_log_n(n: int) -> None:
  _skip_big(n)
  x = np.full(n, 1e-3, dtype=np.float32)  # every add rounds the same way: the worst case for a long running sum
  assert _rel_err(x, Tensor(x).sum().item()) < _bound(n)


@pytest.mark.parametrize("n", [1 << 20, 1 << 24], ids=["1M", "16M"])
def test_uniform_sum_and_mean(n: int) -> None:
  _skip_big(n)
  x = np.random.default_rng(0).random(n, dtype=np.float32)
  t = Tensor(x)
  assert _rel_err(x, t.sum().item()) < _bound(n)
  assert abs(t.mean().item() - x.astype(np.float64).mean()) < 0.5 * _bound(n)


def test_sums_with_many_outputs_and_long_rows() -> None:
  # more partials than a GPU heuristic gives workgroups (2048), each a long run: a thread summing its run of 8192 in one
  # chain was 3.9e-5 off on WEBGPU (a 24M sum's first level has 3072 partials); a row sum of a wide matrix is the same
  _skip_big(1 << 24)
  n = 24 << 20
  x = np.full(n, 1e-3, dtype=np.float32)
  assert _rel_err(x, Tensor(x).sum().item()) < _bound(n)
  rows = Tensor(x[: 3072 * 8192].reshape(3072, 8192)).sum(axis=1).numpy()
  row_ref = x[:8192].astype(np.float64).sum()
  assert float(np.abs(rows - row_ref).max() / row_ref) < _bound(8192)


def test_sum_of_odd_length_and_two_axes() -> None:
  # a length that no run size divides (the rest is a tree of its own) and a sum over two adjacent axes (taken as one)
  _skip_big(1 << 24)
  n = (1 << 24) + 12345
  x = np.full(n, 1e-3, dtype=np.float32)
  assert _rel_err(x, Tensor(x).sum().item()) < _bound(n)
  y = np.full((3, 4099, 1367), 1e-3, dtype=np.float32)
  got = Tensor(y).sum(axis=(1, 2)).numpy()
  np.testing.assert_array_less(np.abs(got - y[0].astype(np.float64).sum()) / y[0].astype(np.float64).sum(), _bound(y[0].size))


def test_split_max_and_int_sum_stay_exact() -> None:
  # the tree applies to every reduction: max and integer sums must come out exact, odd lengths included
  _skip_big(1 << 24)
  n = (1 << 22) + 7
  x = np.random.default_rng(1).integers(-1000, 1000, n).astype(np.int32)
  x[n - 3] = 5000  # in the tail that no whole run covers
  t = Tensor(x)
  assert t.max().item() == 5000
  if dtypes.int64 not in getattr(Device[Device.DEFAULT].renderer, "missing_dtypes", ()):
    assert t.cast(dtypes.int64).sum().item() == int(x.astype(np.int64).sum())
  f = Tensor(x.astype(np.float32))
  assert f.max().item() == 5000.0 and f.min().item() == float(x.min())


def test_sum_over_axes_apart() -> None:
  # a batchnorm's sum over (0, 2, 3) of (N, C, H, W): the reduced axes are permuted to be adjacent and last, then a tree
  # (4M per channel: one kernel was 3.7e-4 off; 50 MB, under WEBGPU's 128 MB per buffer)
  _skip_big(1 << 24)
  y = np.full((16, 3, 512, 512), 1e-3, dtype=np.float32)
  got = Tensor(y).sum(axis=(0, 2, 3)).numpy()
  ref = y[:, 0].astype(np.float64).sum()
  np.testing.assert_array_less(np.abs(got - ref) / ref, _bound(y[:, 0].size))


def test_max_over_axes_apart_stays_exact() -> None:
  # max over (0, 2), moved like a sum: the partials must keep the exact maximum
  _skip_big(1 << 24)
  x = np.random.default_rng(2).integers(-1000, 1000, (9, 5, 1 << 17)).astype(np.float32)
  x[8, 3, 7] = 5000.0
  got = Tensor(x).max(axis=(0, 2)).numpy()
  np.testing.assert_array_equal(got, x.max(axis=(0, 2)))
  assert got[3] == 5000.0
  # a last axis that no run size divides: the reduced axes are taken as one (a read of two views)
  z = np.random.default_rng(3).integers(-1000, 1000, (7, 3, 30001)).astype(np.float32)
  z[2, 1, 30000] = 7000.0
  np.testing.assert_array_equal(Tensor(z).max(axis=(0, 2)).numpy(), z.max(axis=(0, 2)))
  c = np.full((7, 3, 30001), 1e-3, dtype=np.float32)
  np.testing.assert_array_less(np.abs(Tensor(c).sum(axis=(0, 2)).numpy() - c[:, 0].astype(np.float64).sum()) / c[:, 0].astype(np.float64).sum(),
                               _bound(c[:, 0].size))


@pytest.mark.parametrize("vector_bytes", [16, 32, 64], ids=["SSE-NEON", "AVX2", "AVX-512"])
def test_sum_bound_holds_on_every_cpu_vector_width(vector_bytes: int) -> None:
  # a CPU kernel's accumulators are its vector lanes x ACC_CHAINS: fewer lanes must not make the chains longer than
  # the bound allows (runs of 8192 on every CPU gave 5.9e-6 with AVX2 for 1M, over 2.4e-6); the narrower ISAs are
  # declared through CPU_VECTOR_BYTES, in a process of their own
  import os
  import subprocess
  import sys

  from tg.renderer.cpu import cpu_reduce_leaf
  renderer = Device[Device.DEFAULT].renderer
  if renderer is None or renderer.reduce_leaf != cpu_reduce_leaf(renderer.vector_bytes):
    pytest.skip("CPU_VECTOR_BYTES sets the vector width of CPU devices (those whose reduce_leaf follows it)")
  code = ("import numpy as np; from tg import Tensor; x = np.full(1 << 20, 1e-3, np.float32); "
          "r = x.astype(np.float64).sum(); print(abs(Tensor(x).sum().item() - r) / r)")
  env = {**os.environ, "CPU_VECTOR_BYTES": str(vector_bytes), "DEVICE": Device.DEFAULT}
  out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
  assert out.returncode == 0, out.stderr
  assert float(out.stdout.split()[-1]) < _bound(1 << 20)


def test_the_tree_ends_as_soon_as_one_run_is_left() -> None:
  """leaf * leaf elements: leaf partials of a leaf each, then one kernel over those partials, which is a run like any
  other (it was two: a quarter leaf's partials, then their total). 64M floats on a GPU (leaf 8192): 2 kernels."""
  from tg.engine.schedule import create_schedule
  renderer = Device[Device.DEFAULT].renderer
  leaf = getattr(renderer, "reduce_leaf", 0) or 8192
  kernels = [si for si in create_schedule([Tensor.empty(leaf * leaf).sum().lazydata]) if si.ast.op.name in ("SINK", "STORE")]
  assert len(kernels) == 2
  n = leaf * 64  # and the sum is still right: 64 partials, the last kernel's count is short (<= SUM_LAST)
  _skip_big(n)
  x = np.random.default_rng(1).random(n, dtype=np.float32)
  assert _rel_err(x, Tensor(x).sum().item()) < _bound(n)
