"""The plugin contract: devices come from entry points, load lazily, fail alone, and explain themselves."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from toy_helpers import needs_toy, run_py

from tg import Device, Tensor
from tg.plugins import PluginError, installed_devices, load_plugin


def test_core_devices_come_from_entry_points() -> None:
  devs = {d.name: d for d in installed_devices()}
  assert devs["PYTHON"].package == "tg-core" and devs["PYTHON"].module == "tg.plugins.python"
  assert devs["DISK"].package == "tg-core" and devs["DISK"].module == "tg.plugins.disk"


def test_import_tg_loads_no_plugin() -> None:
  out = run_py("import sys, tg; print(sorted(m for m in sys.modules if m.startswith(('tg_', 'tg.plugins.python', 'tg.plugins.disk'))))")
  assert out.returncode == 0, out.stderr
  assert out.stdout.strip() == "[]"


def test_missing_device_names_its_package() -> None:
  with pytest.raises(PluginError, match=r"pip install tg-nosuchdev"):
    Device["NOSUCHDEV"]
  with pytest.raises(PluginError, match=r"pip install tg-nosuchdev"):
    Tensor([1, 2], device="nosuchdev")


def test_device_strings_are_canonical() -> None:
  assert Device.canonicalize("python") == "PYTHON"
  assert Device.canonicalize("python:0") == "PYTHON"
  assert Device.canonicalize("python:1") == "PYTHON:1"


def test_device_instances_are_separate() -> None:
  a = Tensor([1.0, 2.0], device="PYTHON:1")
  assert a.device == "PYTHON:1"
  assert Device["PYTHON:1"] is not Device["PYTHON"]
  np.testing.assert_equal((a * 2).to("PYTHON").numpy(), [2.0, 4.0])


def test_devices_command_lists_every_device() -> None:
  out = subprocess.run([sys.executable, "-m", "tg.devices"], capture_output=True, text=True, check=False)
  assert out.returncode == 0, out.stderr
  lines = out.stdout.splitlines()
  assert any(line.split()[:2] == ["PYTHON", "tg-core"] and "usable" in line for line in lines)
  assert lines[-1].startswith("default device: ")


def test_default_device_from_env() -> None:
  out = run_py("from tg import Device; print(Device.DEFAULT)", DEVICE="python")
  assert out.stdout.strip() == "PYTHON"
  out = run_py("from tg import Device; print(Device.DEFAULT)", PYTHON="1", DEVICE="")
  assert out.stdout.strip() == "PYTHON"


def test_tg_plugins_limits_what_loads() -> None:
  out = run_py("from tg import Device; print(Device.installed())", TG_PLUGINS="PYTHON")
  assert out.stdout.strip() == "['PYTHON']"
  out = run_py("from tg import Device\ntry:\n  Device['DISK']\nexcept Exception as e:\n  print(e)", TG_PLUGINS="PYTHON")
  assert "excluded by TG_PLUGINS" in out.stdout


def test_disk_buffers_round_trip(tmp_path) -> None:  # type: ignore[no-untyped-def]
  from tg.device import Buffer
  from tg.dtype import dtypes
  path = str(tmp_path / "weights.bin")
  data = np.arange(10, dtype=np.float32)
  Buffer("DISK", 10, dtypes.float32, options=path).copyin(memoryview(data.view(np.uint8)))
  assert os.path.getsize(path) == 40
  np.testing.assert_equal(np.frombuffer(Buffer("DISK", 10, dtypes.float32, options=path).as_buffer(), np.float32), data)
  assert Device["DISK"].renderer is None  # storage only: it runs no kernels


@needs_toy
def test_third_party_device_runs_a_kernel() -> None:
  from tg_toy import plugin
  assert "TOY" in Device.installed()
  a, b = Tensor([1.0, 2.0, 3.0], device="TOY"), Tensor([4.0, 5.0, 6.0], device="TOY")
  before = len(plugin.instance(0).launches)
  out = ((a * b).sum() + a.max()).numpy()
  assert out == pytest.approx(35.0)
  assert len(plugin.instance(0).launches) > before, "the kernels must run on TOY's own runtime"
  np.testing.assert_allclose(Tensor([1.0, 2.0], device="TOY").to(Device.DEFAULT).numpy(), [1.0, 2.0])


@needs_toy
def test_broken_plugin_breaks_only_its_device() -> None:
  with pytest.raises(PluginError, match=r"libtoy\.so"):
    load_plugin("TOYBROKEN")
  with pytest.raises(PluginError, match=r"libtoy\.so"):  # the error is kept, not retried
    Device["TOYBROKEN"]
  assert "libtoy.so" in Device.availability("TOYBROKEN")
  assert (Tensor([2.0], device="TOY") * 3).item() == 6.0
  assert (Tensor([2.0]) * 3).item() == 6.0


@needs_toy
def test_plugin_api_version_mismatch_is_refused() -> None:
  with pytest.raises(PluginError, match=r"version 0.*versions 1 to 2.*docs/plugin-versioning\.md"):
    Device["TOYOLD"]


@needs_toy
def test_toy_is_not_chosen_as_default() -> None:
  out = run_py("from tg import Device; print(Device.DEFAULT)", DEVICE="")
  assert out.stdout.strip() not in ("TOY", "TOYBROKEN", "TOYOLD", "DISK")


def test_creation_stays_on_the_asked_device() -> None:
  for t in (Tensor.full((2,), 3.0, device="PYTHON:1"), Tensor.rand(3, device="PYTHON:1"), Tensor.arange(4, device="PYTHON:1"),
            Tensor.eye(2, device="PYTHON:1"), Tensor.zeros(2, device="PYTHON:1").contiguous()):
    assert t.device == "PYTHON:1"


def test_core_names_no_device_outside_plugins() -> None:
  """What differs between devices is a capability a renderer or plugin declares: tg-core's source (plugins/ aside) names none."""
  import re
  from pathlib import Path
  src = Path(__file__).resolve().parents[1] / "src" / "tg"
  named = [f"{p.relative_to(src)}:{i}: {line.strip()}" for p in sorted(src.rglob("*.py")) if "plugins" not in p.parts
           for i, line in enumerate(p.read_text().splitlines(), 1) if re.search(r"\b(CLANG|LLVM|CUDA|WEBGPU|METAL|AMD|HIP)\b", line)]
  assert not named, "\n".join(named)
