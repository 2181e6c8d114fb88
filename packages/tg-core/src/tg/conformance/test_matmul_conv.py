"""Matmul and 2d convolution, small and mid-size (the kernel optimizer tiles, vectorizes and, where the device has
them, uses workgroups for these), per float dtype the device computes in. Checked against numpy in float64."""
from __future__ import annotations

import numpy as np
import pytest

from tg import Tensor, dtypes
from tg.conformance._kit import dtype_params, random_values
from tg.dtype import DType

pytestmark = pytest.mark.needs("kernels")
# (tolerance of a dot product of K terms, relative to sqrt(K)): looser for the 16-bit floats
DOT_TOL = {dtypes.float16: 1e-2, dtypes.bfloat16: 5e-2, dtypes.float32: 1e-5, dtypes.float64: 1e-12}


def _conv2d_ref(x: np.ndarray, w: np.ndarray, stride: int, padding: int, groups: int) -> np.ndarray:
  x = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
  n, _, h, wd = x.shape
  cout, cin_g, kh, kw = w.shape
  oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
  out = np.zeros((n, cout, oh, ow))
  per_group = cout // groups
  for o in range(cout):
    g = o // per_group
    xs = x[:, g * cin_g:(g + 1) * cin_g]
    for i in range(kh):
      for j in range(kw):
        patch = xs[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
        out[:, o] += np.einsum("nchw,c->nhw", patch, w[o, :, i, j])
  return out


@pytest.mark.parametrize("dt", dtype_params([dtypes.float32, dtypes.float16, dtypes.bfloat16, dtypes.float64]))
@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (3, 5, 7), (17, 33, 9), (64, 96, 80)])
def test_matmul(m: int, k: int, n: int, dt: DType, rng: np.random.Generator, slow_device: bool) -> None:
  if slow_device and m * k * n > 100_000:
    m, k, n = max(1, m // 4), max(1, k // 4), max(1, n // 4)  # an interpreter: a quarter of each side
  a, b = random_values(dt, (m, k), rng, -1.0, 1.0), random_values(dt, (k, n), rng, -1.0, 1.0)
  got = (Tensor(a, dtype=dt) @ Tensor(b, dtype=dt)).numpy().astype(np.float64)
  want = a.astype(np.float64) @ b.astype(np.float64)
  tol = DOT_TOL[dt] * max(1.0, np.sqrt(k))
  np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_batched_and_int_matmul(rng: np.random.Generator) -> None:
  a, b = rng.standard_normal((3, 4, 6)).astype(np.float32), rng.standard_normal((3, 6, 5)).astype(np.float32)
  np.testing.assert_allclose((Tensor(a) @ Tensor(b)).numpy(), a @ b, rtol=1e-5, atol=1e-5)
  ia, ib = rng.integers(-9, 10, (7, 11)).astype(np.int32), rng.integers(-9, 10, (11, 5)).astype(np.int32)
  np.testing.assert_array_equal((Tensor(ia) @ Tensor(ib)).numpy(), ia @ ib)
  v = rng.standard_normal(6).astype(np.float32)
  np.testing.assert_allclose((Tensor(a) @ Tensor(v)).numpy(), a @ v, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape,cout,k,stride,padding,groups", [
  ((1, 1, 5, 5), 1, 3, 1, 0, 1),
  ((2, 3, 9, 7), 4, 3, 2, 1, 1),
  ((1, 4, 8, 8), 4, 3, 1, 1, 2),
  ((2, 8, 24, 24), 16, 3, 1, 1, 1),
])
def test_conv2d(shape: tuple[int, int, int, int], cout: int, k: int, stride: int, padding: int, groups: int,
                rng: np.random.Generator, slow_device: bool) -> None:
  if slow_device and shape[2] > 16:  # an interpreter: a quarter of the image
    shape = (shape[0], shape[1], shape[2] // 4, shape[3] // 4)
  x = rng.standard_normal(shape).astype(np.float32)
  w = rng.standard_normal((cout, shape[1] // groups, k, k)).astype(np.float32)
  b = rng.standard_normal(cout).astype(np.float32)
  got = Tensor(x).conv2d(Tensor(w), Tensor(b), stride=stride, padding=padding, groups=groups).numpy()
  want = _conv2d_ref(x.astype(np.float64), w.astype(np.float64), stride, padding, groups) + b[None, :, None, None]
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
