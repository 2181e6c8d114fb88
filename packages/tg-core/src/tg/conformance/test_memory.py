"""Device memory: copies in and out of every dtype the device holds, buffer views, writes into live buffers.
Nothing here needs the device to run kernels (a storage-only device passes it too)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tg import Device, Tensor, dtypes
from tg.conformance._kit import ALL_DTYPES, device, dtype_name, dtype_params, host_dtype, random_values
from tg.device import Buffer
from tg.dtype import DType

SIZES = [0, 1, 3, 17, 1031]


@pytest.mark.parametrize("dt", dtype_params(ALL_DTYPES))
def test_buffer_round_trip(dt: DType, rng: np.random.Generator, size: Callable[[int], int]) -> None:
  """Allocator.copyin then copyout gives back the bytes, for sizes 0, 1, odd and large."""
  for n in SIZES + [size(1 << 20) // dt.itemsize]:
    x = np.ascontiguousarray(random_values(dt, n, rng).astype(host_dtype(dt)))
    if dt == dtypes.bfloat16:  # the buffer holds the top 16 bits of each float32
      raw = (x.view(np.uint32) >> 16).astype(np.uint16)
    else:
      raw = x
    buf = Buffer(device(), n, dt).copyin(memoryview(raw.tobytes()))
    assert bytes(buf.as_buffer()) == raw.tobytes(), f"{n} elements of {dtype_name(dt)}"


@pytest.mark.parametrize("dt", dtype_params(ALL_DTYPES))
def test_tensor_round_trip(dt: DType, rng: np.random.Generator) -> None:
  for shape in [(0,), (1,), (3, 5, 7), (2, 0, 3)]:
    x = random_values(dt, shape, rng)
    t = Tensor(x, dtype=dt)
    assert t.device == device() and t.dtype == dt
    out = t.numpy()
    assert out.shape == shape
    np.testing.assert_array_equal(out, x.astype(host_dtype(dt)))


@pytest.mark.needs("kernels")
def test_round_trip_is_not_aliased(rng: np.random.Generator) -> None:
  """copyin has finished reading its source when it returns; copyout's result is the host's own copy."""
  x = rng.standard_normal(1000).astype(np.float32)
  t = Tensor(x).realize()
  x[:] = 0  # changing the source after the copy must not reach the device
  out = t.numpy()
  assert out.any()
  out[:] = 1
  np.testing.assert_array_equal(t.numpy()[:3] != 1, True)


@pytest.mark.parametrize("offset,count", [(0, 1), (1, 5), (7, 9), (15, 1)])
def test_buffer_views(offset: int, count: int) -> None:
  """A view shares its buffer's memory at a byte offset (optional: an allocator may have no views)."""
  base = Buffer(device(), 16, dtypes.int32).copyin(memoryview(np.arange(16, dtype=np.int32).tobytes()))
  try:
    view = base.view(count, dtypes.int32, offset * 4)
  except NotImplementedError as e:
    pytest.skip(f"{device()}'s allocator has no buffer views ({e}): needs views")
  np.testing.assert_array_equal(np.frombuffer(view.as_buffer(), np.int32), np.arange(offset, offset + count))
  view.copyin(memoryview(np.full(count, -1, np.int32).tobytes()))
  want = np.arange(16, dtype=np.int32)
  want[offset:offset + count] = -1
  np.testing.assert_array_equal(np.frombuffer(base.as_buffer(), np.int32), want)


@pytest.mark.needs("kernels")
def test_slices_of_a_realized_tensor(rng: np.random.Generator) -> None:
  x = rng.standard_normal((9, 13)).astype(np.float32)
  t = Tensor(x).realize()
  slices: list[Any] = [np.s_[3], np.s_[2:5], np.s_[8:], np.s_[:, 12], np.s_[1:2, 3:11]]
  for sl in slices:
    np.testing.assert_array_equal(t[sl].numpy(), x[sl])


@pytest.mark.needs("kernels")
def test_overwrite_a_live_buffer(rng: np.random.Generator) -> None:
  t = Tensor.zeros(257).contiguous().realize()
  for _ in range(3):
    x = rng.standard_normal(257).astype(np.float32)
    t.assign(Tensor(x)).realize()
    np.testing.assert_array_equal(t.numpy(), x)


def test_many_buffers_alive_at_once(rng: np.random.Generator) -> None:
  xs = [rng.standard_normal(100 + i).astype(np.float32) for i in range(64)]
  ts = [Tensor(x).realize() for x in xs]
  for t, x in zip(ts, xs):
    np.testing.assert_array_equal(t.numpy(), x)


def test_device_is_opened_by_name() -> None:
  dev = Device[device()]
  assert dev is Device[device().lower()], "a device name is case-insensitive and opens one instance"
  assert dev.allocator is not None
