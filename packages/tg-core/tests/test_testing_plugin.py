"""tg's pytest plugin is opt-in: installing tg-core must not change another project's pytest runs (no `pytest11`
entry point), and `-p tg.testing` loads it. Each case runs pytest in a subprocess, in a temporary project that has
one trivial test and no configuration of its own (`-c` an empty ini file: the repo's addopts must not leak in)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tg import Device

# a downstream project's test: it prints what tg's default device is at test time, without choosing one
PROBE = """
import pytest

def test_probe():
  from tg.device import Device
  print("DEFAULT_BEFORE_CHOICE", Device._default)

@pytest.mark.parametrize("x", ["a-1", "b-2"])
def test_param(x):
  assert x != "a-1"
"""


def _pytest(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
  (tmp_path / "test_probe.py").write_text(PROBE)
  (tmp_path / "empty.ini").write_text("[pytest]\n")
  env = {k: v for k, v in os.environ.items() if k not in ("DEVICE", "PYTEST_ADDOPTS", "PYTEST_PLUGINS")}
  return subprocess.run([sys.executable, "-m", "pytest", "-c", str(tmp_path / "empty.ini"), "--rootdir", str(tmp_path),
                         "-p", "no:cacheprovider", "-s", *args, str(tmp_path / "test_probe.py")],
                        cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)


def test_not_loaded_unless_asked(tmp_path: Path) -> None:
  r = _pytest(tmp_path)
  assert "1 failed, 2 passed" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]  # test_param[a-1] fails by design
  assert "tg device:" not in r.stdout
  assert "DEFAULT_BEFORE_CHOICE None" in r.stdout  # nothing chose a default device for the project
  r = _pytest(tmp_path, "--tg-device", Device.DEFAULT)
  assert r.returncode != 0 and "unrecognized arguments: --tg-device" in r.stderr


def test_loaded_with_p_tg_testing(tmp_path: Path) -> None:
  r = _pytest(tmp_path, "-p", "tg.testing", "--tg-device", Device.DEFAULT)
  assert f"tg device: {Device.DEFAULT}" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]
  assert f"DEFAULT_BEFORE_CHOICE {Device.DEFAULT}" in r.stdout


def test_xfail_file_marks_listed_tests(tmp_path: Path) -> None:
  (tmp_path / "known.txt").write_text("# known failures\ntest_probe.py::test_probe  # the probe is listed\ntest_param[a-*]  # a bug\n")
  r = _pytest(tmp_path, "-p", "tg.testing", "--tg-device", Device.DEFAULT, "--tg-xfail", str(tmp_path / "known.txt"), "-rxX")
  assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
  assert "1 passed, 1 xfailed, 1 xpassed" in r.stdout and "the probe is listed" in r.stdout and "a bug" in r.stdout


@pytest.mark.parametrize("module", ["tg.testing", "tg.testing.plugin"])
def test_plugin_modules_have_the_hooks(module: str) -> None:
  import importlib
  m = importlib.import_module(module)
  for hook in ("pytest_addoption", "pytest_configure", "pytest_report_header"):
    assert callable(getattr(m, hook))
