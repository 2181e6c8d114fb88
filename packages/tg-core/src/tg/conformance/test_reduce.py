"""Reductions: sum, max, min, mean and argmax over each axis and all, per dtype, large (split) sums, and empty
inputs. Checked against numpy."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from tg import Tensor, dtypes
from tg.conformance._kit import NUMERIC, dtype_params, host_dtype, random_values, tolerance
from tg.dtype import DType

pytestmark = pytest.mark.needs("kernels")


@pytest.mark.parametrize("dt", dtype_params(NUMERIC))
def test_sum_max_min_per_axis(dt: DType, rng: np.random.Generator) -> None:
  lo, hi = (0, 5) if dtypes.is_int(dt) else (-2.0, 2.0)
  x = random_values(dt, (13, 37), rng, lo, hi)
  hx = x.astype(np.float64) if dtypes.is_float(dt) else x.astype(np.int64)
  t = Tensor(x, dtype=dt)
  for axis in (0, 1, None):
    # a float sum of 13 to 481 terms: its rounding is the device's, so a tolerance that scales with the count
    got = t.sum(axis).numpy().astype(np.float64)
    rtol, atol = tolerance(dt)
    np.testing.assert_allclose(got, hx.sum(axis), rtol=rtol * 20, atol=atol * 40)
  full = random_values(dt, (13, 37), rng)  # max and min over the dtype's whole range (uint64 past 2**63 included)
  tf = Tensor(full, dtype=dt)
  for axis in (0, 1, None):
    np.testing.assert_array_equal(tf.max(axis).numpy(), full.astype(host_dtype(dt)).max(axis))
    np.testing.assert_array_equal(tf.min(axis).numpy(), full.astype(host_dtype(dt)).min(axis))


def test_reductions_of_a_permuted_3d_tensor(rng: np.random.Generator) -> None:
  x = rng.standard_normal((5, 6, 7)).astype(np.float32)
  t = Tensor(x).permute(2, 0, 1)
  hx = x.transpose(2, 0, 1)
  for axis in [(0,), (1,), (2,), (0, 2), (1, 2)]:
    np.testing.assert_allclose(t.sum(axis).numpy(), hx.sum(axis), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(t.max(axis).numpy(), hx.max(axis))
  np.testing.assert_array_equal(t.argmax(1).numpy(), hx.argmax(1))
  np.testing.assert_allclose(t.mean(2).numpy(), hx.mean(2), rtol=1e-5, atol=1e-6)


def test_large_float_sum(rng: np.random.Generator, size: Callable[[int], int]) -> None:
  """A sum of a million elements is split over kernels; it must stay within float32 accuracy."""
  n = size(1 << 20) + 3
  x = rng.random(n).astype(np.float32)
  np.testing.assert_allclose(Tensor(x).sum().item(), x.astype(np.float64).sum(), rtol=1e-5)
  y = rng.standard_normal((4, n // 4)).astype(np.float32)
  np.testing.assert_allclose(Tensor(y).sum(1).numpy(), y.astype(np.float64).sum(1), rtol=1e-4, atol=1e-2)
  np.testing.assert_array_equal(Tensor(y).max(1).numpy(), y.max(1))


def test_large_int_sum(size: Callable[[int], int]) -> None:
  n = size(1 << 20) + 2  # even: a prime count is test_elementwise.py::test_prime_output_counts' business
  assert Tensor.ones(n, dtype=dtypes.int32).contiguous().sum().item() == n
  x = np.arange(n, dtype=np.int32) % 1000
  assert Tensor(x).sum().item() == int(x.astype(np.int64).sum())


def test_empty_reductions() -> None:
  assert Tensor.zeros(0).sum().item() == 0
  np.testing.assert_array_equal(Tensor.ones(3, 0).sum(1).numpy(), np.zeros(3, np.float32))
  np.testing.assert_array_equal(Tensor.ones(0, 4).sum(0).numpy(), np.zeros(4, np.float32))
  assert Tensor.ones(0, 4).sum(1).shape == (0,)
  assert Tensor.ones(2, 0).prod(1).tolist() == [1.0, 1.0]
  with pytest.raises(RuntimeError):  # max has no identity: an error, as numpy's ValueError and torch's
    Tensor.zeros(0).max().item()


def test_bool_any_all(rng: np.random.Generator) -> None:
  x = rng.random((9, 31)) < 0.05
  t = Tensor(x)
  for axis in (0, 1, None):
    np.testing.assert_array_equal(t.any(axis).numpy(), x.any(axis))
    np.testing.assert_array_equal(t.all(axis).numpy(), x.all(axis))
