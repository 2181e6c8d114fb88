"""The pytest plugin (entry point `pytest11`): `--tg-device NAME` picks the device tests run on.

Tests never name a device; they use `Device.DEFAULT`, which this plugin sets before collection.
Without the option the PYTHON device is used, as it needs no compiler.
"""
from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
  group = parser.getgroup("tg")
  group.addoption("--tg-device", action="store", default=None, metavar="NAME",
                  help="the tg device tests run on (default: $DEVICE, else PYTHON)")


def pytest_configure(config: pytest.Config) -> None:
  from tg.device import Device
  from tg.settings import DEVICE
  name = config.getoption("--tg-device") or DEVICE.value or "PYTHON"
  Device.DEFAULT = name
  Device[Device.DEFAULT]  # open it now so a missing or broken device fails once, clearly


def pytest_report_header(config: pytest.Config) -> str:
  from tg.device import Device
  return f"tg device: {Device.DEFAULT}"
