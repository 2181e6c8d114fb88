"""tg's pytest plugin, opt-in: `pytest -p tg.testing --tg-device NAME` runs tests on any installed device.

Nothing loads it unless asked (`-p tg.testing` on the command line or in a project's `addopts`), so installing tg
never changes another project's pytest runs. Loaded, it adds:

  --tg-device NAME   the device tests run on: Device.DEFAULT is set to it before collection (default: $DEVICE,
                     else PYTHON, which needs no compiler). Tests never name a device; they use Device.DEFAULT.
  --tg-xfail FILE    known failures of this device: one test id per line, matched against the end of the node id
                     (`*` matches anything, brackets are literal: `test_elementwise.py::test_cast[float64-*]`),
                     `#` starts a comment giving the reason. Those tests
                     still run and are reported xfail/xpass, so a device can pass the conformance kit (tg.conformance)
                     while its authors fix what is listed.
"""
from __future__ import annotations

import fnmatch
from pathlib import Path

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
  group = parser.getgroup("tg")
  group.addoption("--tg-device", action="store", default=None, metavar="NAME",
                  help="the tg device tests run on (default: $DEVICE, else PYTHON)")
  group.addoption("--tg-xfail", action="store", default=None, metavar="FILE",
                  help="a file of test id patterns (one a line) expected to fail on this device")


def pytest_configure(config: pytest.Config) -> None:
  from tg.device import Device
  from tg.settings import DEVICE
  name = config.getoption("--tg-device") or DEVICE.value or "PYTHON"
  Device.DEFAULT = name
  Device[Device.DEFAULT]  # open it now so a missing or broken device fails once, clearly


def pytest_report_header(config: pytest.Config) -> str:
  from tg.device import Device
  return f"tg device: {Device.DEFAULT}"


def read_xfail_file(path: str) -> dict[str, str]:
  """pattern -> reason, from a --tg-xfail file: `pattern  # reason` per line."""
  out: dict[str, str] = {}
  for line in Path(path).read_text().splitlines():
    pattern, _, reason = line.partition("#")
    if pattern.strip():
      out[pattern.strip()] = reason.strip() or f"listed in {path}"
  return out


def _matches(nodeid: str, pattern: str) -> bool:
  """`pattern` matches the end of `nodeid`; `*` and `?` are wildcards, `[` and `]` literal (parametrized ids have them)."""
  glob = "".join(f"[{c}]" if c in "[]" else c for c in pattern)
  return fnmatch.fnmatchcase(nodeid, glob) or fnmatch.fnmatchcase(nodeid, f"*/{glob}") or fnmatch.fnmatchcase(nodeid, f"*::{glob}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
  if not (path := config.getoption("--tg-xfail")):
    return
  known = read_xfail_file(path)
  for item in items:
    for pattern, reason in known.items():
      if _matches(item.nodeid, pattern):
        item.add_marker(pytest.mark.xfail(reason=f"known failure on this device: {reason}", strict=False))
        break


def second_instance(device: str | None = None) -> str:
  """`device`'s second instance (DEVICE:1; default: the test device's), for tests that need two instances. Skips the
  test, saying why, where that instance can't be used (a machine with one GPU has no second GPU instance)."""
  from tg.device import Device
  base = (device or Device.DEFAULT).split(":")[0]
  if (why := Device.availability(f"{base}:1")):
    pytest.skip(f"needs two instances of {base}: {why}")
  return f"{base}:1"
