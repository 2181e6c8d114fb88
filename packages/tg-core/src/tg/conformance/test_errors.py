"""Bad input raises a Python exception (with a message), never a crash or a silent wrong answer."""
from __future__ import annotations

import numpy as np
import pytest

from tg import Device, Tensor, Variable, dtypes
from tg.conformance._kit import ALL_DTYPES, device, dtype_name
from tg.device import Buffer, is_dtype_supported


def _raises(exc: type[BaseException] | tuple[type[BaseException], ...], f: object) -> None:
  with pytest.raises(exc) as info:
    f()  # type: ignore[operator]
  assert str(info.value).strip(), f"{type(info.value).__name__} without a message"


def test_buffer_copies_of_the_wrong_size() -> None:
  buf = Buffer(device(), 4, dtypes.float32)
  _raises(ValueError, lambda: buf.copyin(memoryview(bytearray(8))))
  _raises(ValueError, lambda: buf.view(4, dtypes.float32, 4))


def test_unknown_device_names() -> None:
  _raises(Exception, lambda: Device["NO_SUCH_DEVICE_XYZ"])
  _raises(Exception, lambda: Tensor([1.0], device="NO_SUCH_DEVICE_XYZ").numpy())


@pytest.mark.needs("kernels")
def test_shape_errors() -> None:
  _raises(Exception, lambda: Tensor([1, 2, 3]).reshape(2, 2))
  _raises(Exception, lambda: Tensor.ones(2, 3) @ Tensor.ones(2, 3))
  _raises(Exception, lambda: Tensor.ones(2, 3) + Tensor.ones(4, 3))
  _raises(IndexError, lambda: Tensor([1, 2, 3])[5])
  _raises(ValueError, lambda: Variable("i", 1, 10).bind(11))
  _raises(TypeError, lambda: Tensor([1]).cast("not_a_dtype"))


@pytest.mark.needs("kernels")
def test_a_missing_dtype_is_an_error_that_names_it() -> None:
  missing = [dt for dt in ALL_DTYPES if not is_dtype_supported(dt)]
  if not missing:
    pytest.skip(f"{device()} lacks no dtype")
  dt = missing[0]
  with pytest.raises(Exception) as info:
    (Tensor(np.arange(4), dtype=dtypes.int32).cast(dt) + 1).realize()
  assert dt.name in str(info.value) or str(dt) in str(info.value) or dtype_name(dt) in str(info.value), str(info.value)


@pytest.mark.needs("kernels")
def test_device_still_works_after_errors() -> None:
  with pytest.raises(ZeroDivisionError):
    (Tensor([1, 2]) // Tensor([0, 1])).numpy()
  _raises(Exception, lambda: Tensor([1, 2, 3]).reshape(5))
  assert (Tensor([1.0, 2.0]) * 3).tolist() == [3.0, 6.0]
