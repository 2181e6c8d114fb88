"""The kit's markers and fixtures. Skips happen here, before a test runs, from what the device declares:

  @pytest.mark.dtype(dt, ...)    the device must hold and compute with every dtype named (tg.device.is_dtype_supported)
  @pytest.mark.needs(name, ...)  the device must have each capability: kernels, local, vectors, graph, strict_float
                                 (tg.conformance._kit.CAPABILITIES says what each reads)

The skip reason says which capability or dtype the device lacks."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from tg.conformance import _kit


def pytest_configure(config: pytest.Config) -> None:
  config.addinivalue_line("markers", "dtype(*dtypes): the test needs the device to hold and compute with these tg dtypes")
  config.addinivalue_line("markers", f"needs(*capabilities): the test needs these device capabilities ({', '.join(_kit.CAPABILITIES)})")


def pytest_runtest_setup(item: pytest.Item) -> None:
  for mark in item.iter_markers("needs"):
    for name in mark.args:
      if (why := _kit.missing_capability(name)):
        pytest.skip(why)
  for mark in item.iter_markers("dtype"):
    for dt in mark.args:
      if (why := _kit.missing_dtype(dt)):
        pytest.skip(why)


@pytest.fixture
def rng() -> np.random.Generator:
  return np.random.default_rng(0)


@pytest.fixture(scope="session")
def slow_device() -> bool:
  """Whether the device is an interpreter or an emulator (DeviceSpec.priority <= 0): tests then use smaller sizes."""
  return _kit.is_slow_device()


@pytest.fixture(scope="session")
def size(slow_device: bool) -> Callable[[int], int]:
  """size(n): n on compiled devices, n / 16 (at least 1) on interpreters and emulators, which are far slower."""
  shrink = _kit.SLOW_DEVICE_SHRINK if slow_device else 1
  return lambda n: max(1, n // shrink)
