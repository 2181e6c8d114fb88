"""The device contract, API version 2 (tg.plugins.contract): one DeviceSpec per device instance, each instance with its
own state, explicit overrides that work whatever was loaded first, and plugins of the previous version still running."""
from __future__ import annotations

import numpy as np
import pytest
from toy_helpers import needs_toy, run_py

from tg import Device, Tensor
from tg.device import Compiled
from tg.plugins import DeviceSpec, PluginError, device_spec, split_device
from tg.testing import second_instance


def test_split_device() -> None:
  assert split_device("CLANG") == ("CLANG", 0)
  assert split_device("clang:1") == ("CLANG", 1)
  assert split_device("DISK:/tmp/x") == ("DISK", 0)


def test_spec_parts_must_be_factories() -> None:
  from tg.device import HostAllocator
  with pytest.raises(TypeError, match="factory"):
    DeviceSpec(allocator=HostAllocator())  # type: ignore[arg-type]
  with pytest.raises(TypeError, match="priority"):
    DeviceSpec(allocator=HostAllocator, priority="high")  # type: ignore[arg-type]
  assert not DeviceSpec(allocator=HostAllocator).runs_kernels
  with pytest.raises(TypeError, match="needs an allocator"):
    DeviceSpec()
  assert DeviceSpec(available="no driver here").allocator is None  # an unusable device needs no parts


@pytest.mark.parametrize("base", ["PYTHON", "DEFAULT"])
def test_every_instance_gets_its_own_parts(base: str) -> None:
  base = split_device(Device.DEFAULT)[0] if base == "DEFAULT" else base
  a, b = Device[base], Device[second_instance(base)]
  assert isinstance(a, Compiled) and isinstance(b, Compiled) and a is not b
  for part in ("allocator", "renderer", "compiler"):
    assert getattr(a, part) is not getattr(b, part), part
  assert (a.renderer.device, b.renderer.device) == (base, f"{base}:1")  # type: ignore[union-attr]
  x, y = Tensor([1.0, 2.0, 3.0], device=base), Tensor([4.0, 5.0, 6.0], device=f"{base}:1")
  out = (y * 2 + y.sum()).realize()
  assert out.lazydata.buffer.allocator is b.allocator  # type: ignore[union-attr]
  np.testing.assert_allclose(out.numpy(), [23, 25, 27])
  np.testing.assert_allclose((x + out.to(base)).numpy(), [24, 27, 30])


@needs_toy
def test_each_hook_call_gets_its_instance_and_state_stays_apart() -> None:
  from tg_toy import plugin
  x0, x1 = Tensor([1.0, 2.0, 3.0], device="TOY"), Tensor([10.0, 20.0, 30.0], device="TOY:1")
  np.testing.assert_allclose((x0 * 2).numpy(), [2, 4, 6])
  np.testing.assert_allclose((x1 + 1).numpy(), [11, 21, 31])
  assert "TOY" in plugin.calls and "TOY:1" in plugin.calls
  i0, i1 = plugin.instance(0), plugin.instance(1)
  # each instance ran its own kernel and holds only its own buffers
  assert i0.launches and i1.launches
  assert x0.lazydata.buffer._buf in i0.memory and x1.lazydata.buffer._buf in i1.memory  # type: ignore[union-attr]
  assert Device["TOY"].allocator.inst is i0 and Device["TOY:1"].allocator.inst is i1  # type: ignore[attr-defined]
  before = len(i0.launches)
  (x1 * 3).numpy()
  assert len(i0.launches) == before, "a kernel on TOY:1 ran on TOY"
  # a copy between instances goes through the host and lands in the other instance's memory
  y = x1.to("TOY").contiguous().realize()
  assert y.lazydata.buffer._buf in i0.memory  # type: ignore[union-attr]
  np.testing.assert_allclose(y.numpy(), [10, 20, 30])


@needs_toy
def test_missing_instance_is_a_clear_error() -> None:
  with pytest.raises(RuntimeError, match=r"TOY:2 is installed but not usable here: .*only 2 TOY devices"):
    Tensor([1.0], device="TOY:2")


@needs_toy
def test_synchronize_runs_before_copyout() -> None:
  from tg_toy import plugin
  inst = plugin.instance(0)
  t = (Tensor([1.0, 2.0], device="TOY") + 1).realize()
  before = inst.syncs
  assert t.tolist() == [2.0, 3.0]
  assert inst.syncs > before, "tg must wait for an asynchronous device before reading its memory"
  before = inst.syncs
  Device.synchronize("TOY")
  assert inst.syncs == before + 1


@needs_toy
def test_override_applies_whatever_was_loaded_first() -> None:
  # the override lives in tg-toy, whose device plugin is never imported here: PYTHON opens first
  code = ("import sys; from tg import Tensor, Device; import tg.plugins as p\n"
          "x = (Tensor([1.0, 2.0], device='PYTHON') * 5).tolist()\n"
          "from tg_toy import override\n"
          "print(x, override.compiled.count('PYTHON') > 0, 'tg_toy.plugin' in sys.modules)")
  out = run_py(code, TG_TOY_OVERRIDE="1", CACHEDB=":memory:")
  assert out.returncode == 0, out.stderr
  assert out.stdout.split() == ["[5.0,", "10.0]", "True", "False"]
  out = run_py(code, TG_TOY_OVERRIDE="0", CACHEDB=":memory:")
  assert out.stdout.split() == ["[5.0,", "10.0]", "False", "False"], out.stderr


@needs_toy
def test_plugin_of_previous_api_version_still_runs_with_a_warning() -> None:
  code = ("import warnings; warnings.simplefilter('always')\n"
          "from tg import Tensor; print((Tensor([1.0, 2.0], device='TOYV1') * 3).tolist())")
  out = run_py(code)
  assert out.returncode == 0, out.stderr
  assert out.stdout.strip() == "[3.0, 6.0]"
  assert "DeprecationWarning" in out.stderr and "API version 1" in out.stderr and "docs/plugin-versioning.md" in out.stderr


@needs_toy
def test_plugin_of_unknown_api_version_names_the_migration_note() -> None:
  with pytest.raises(PluginError, match=r"version 0.*docs/plugin-versioning\.md"):
    Device["TOYOLD"]
  assert "plugin-versioning" in Device.availability("TOYOLD")


def test_spec_of_an_uninstalled_device_says_what_to_install() -> None:
  with pytest.raises(PluginError, match=r"pip install tg-nosuchdev"):
    device_spec("NOSUCHDEV:1")


@needs_toy
def test_plugin_that_fails_to_describe_its_device_breaks_only_that_device() -> None:
  with pytest.raises(PluginError, match=r"tg_toy.badspec failed to describe device TOYBADSPEC: OSError: mydriver_probe\(\) crashed"):
    Device["TOYBADSPEC"]
  assert "mydriver_probe() crashed" in Device.availability("TOYBADSPEC")
  out = run_py("from tg import Device, Tensor; from tg.devices import report; print(report()); print((Tensor([1, 2]) * 2).tolist())", DEVICE="")
  assert out.returncode == 0, out.stderr
  assert "TOYBADSPEC" in out.stdout and "mydriver_probe() crashed" in out.stdout and out.stdout.strip().endswith("[2, 4]")
