"""Movement ops (permute, pad, shrink, expand, flip, reshape) feeding kernels, loads at buffer ends (odd sizes,
where vector loads must be masked), and indexing: gather, fancy indexing, where, setitem."""
from __future__ import annotations

import numpy as np
import pytest

from tg import Tensor, dtypes
from tg.conformance._kit import dtype_params, random_values
from tg.dtype import DType

pytestmark = pytest.mark.needs("kernels")


def test_movement_chains(rng: np.random.Generator) -> None:
  x = rng.standard_normal((4, 5, 6)).astype(np.float32)
  t = Tensor(x)
  cases = [
    (t.permute(2, 0, 1) + 1, x.transpose(2, 0, 1) + 1),
    (t.pad(((1, 2), (0, 0), (3, 1))) * 2, np.pad(x, ((1, 2), (0, 0), (3, 1))) * 2),
    (t.shrink(((1, 3), (0, 5), (2, 5))).exp(), np.exp(x[1:3, :, 2:5])),
    (t[:, :1, :].expand(4, 3, 6) + t[:, :3, :], x[:, :1, :] + x[:, :3, :]),
    (t.flip(0).flip(2) - t, x[::-1, :, ::-1] - x),
    (t.reshape(20, 6).permute(1, 0).reshape(3, 40) * 3, x.reshape(20, 6).T.reshape(3, 40) * 3),
    (t.permute(1, 2, 0).pad(((0, 1), (2, 0), (0, 0))).flip(1)[1:, :, 1:3] + 1,
     np.pad(x.transpose(1, 2, 0), ((0, 1), (2, 0), (0, 0)))[:, ::-1][1:, :, 1:3] + 1),
    (t[::2, 1::3, ::-2] * 1, x[::2, 1::3, ::-2] * 1),
  ]
  for i, (got, want) in enumerate(cases):
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-6, err_msg=f"case {i}")


def test_pad_with_value_and_expand_then_reduce(rng: np.random.Generator) -> None:
  x = rng.standard_normal((3, 7)).astype(np.float32)
  np.testing.assert_allclose(Tensor(x).pad(((1, 1), (2, 0)), value=-5.0).numpy(), np.pad(x, ((1, 1), (2, 0)), constant_values=-5.0))
  np.testing.assert_allclose(Tensor(x).reshape(3, 1, 7).expand(3, 4, 7).sum(1).numpy(), x * 4, rtol=1e-6)


@pytest.mark.parametrize("dt", dtype_params([dtypes.float32, dtypes.uint8, dtypes.float16, dtypes.int64]))
def test_loads_at_buffer_ends(dt: DType, rng: np.random.Generator) -> None:
  """Odd sizes 1..17, read from the start and from an offset inside padding: the last vector of a buffer is
  partial, and its lanes past the end must be masked (or read from readable slack, Renderer.overread_bytes)."""
  for n in range(1, 18, 2):
    x = np.round(random_values(dt, n, rng, 0, 50))  # whole numbers: + 1 is exact in every dtype
    t = Tensor(x, dtype=dt)
    hx = x.astype(np.float64)
    np.testing.assert_allclose((t + 1).numpy().astype(np.float64), hx + 1, err_msg=f"n={n}")
    got = (t.pad(((1, 2),))[n // 2:] * 2).numpy().astype(np.float64)
    np.testing.assert_allclose(got, np.pad(hx, (1, 2))[n // 2:] * 2, err_msg=f"n={n}")


def test_gather_and_fancy_indexing(rng: np.random.Generator) -> None:
  x = rng.standard_normal((6, 7)).astype(np.float32)
  t = Tensor(x)
  idx = rng.integers(0, 7, (6, 4)).astype(np.int32)
  np.testing.assert_array_equal(t.gather(1, Tensor(idx)).numpy(), np.take_along_axis(x, idx, 1))
  rows = np.array([5, 0, 2, 2], dtype=np.int32)
  np.testing.assert_array_equal(t[Tensor(rows)].numpy(), x[rows])
  np.testing.assert_array_equal(t[Tensor(rows), Tensor(rows)].numpy(), x[rows, rows])
  np.testing.assert_array_equal(t[-1, ::-2].numpy(), x[-1, ::-2])


def test_where_with_broadcast(rng: np.random.Generator) -> None:
  c = rng.random((5, 1)) < 0.5
  a, b = rng.standard_normal((1, 8)).astype(np.float32), rng.standard_normal((5, 8)).astype(np.float32)
  np.testing.assert_array_equal(Tensor(c).where(Tensor(a), Tensor(b)).numpy(), np.where(c, a, b))
  np.testing.assert_array_equal(Tensor(c).where(Tensor(a), 0.5).numpy(), np.where(c, a, np.float32(0.5)))


def test_setitem(rng: np.random.Generator) -> None:
  x = rng.standard_normal((5, 6)).astype(np.float32)
  t = Tensor(x).contiguous().realize()
  t[1:3, ::2] = Tensor(np.full((2, 3), 7.0, np.float32))
  x[1:3, ::2] = 7.0
  t[4] = 0.0
  x[4] = 0.0
  np.testing.assert_array_equal(t.numpy(), x)


def test_arange_eye_full_cumsum() -> None:
  np.testing.assert_array_equal(Tensor.arange(3, 40, 3).numpy(), np.arange(3, 40, 3))
  np.testing.assert_array_equal(Tensor.eye(5).numpy(), np.eye(5, dtype=np.float32))
  np.testing.assert_array_equal(Tensor.full((3, 4), 2.5).numpy(), np.full((3, 4), 2.5, np.float32))
  np.testing.assert_allclose(Tensor.arange(100).float().cumsum(0).numpy(), np.arange(100).cumsum(), rtol=1e-6)
