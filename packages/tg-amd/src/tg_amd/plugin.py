"""The AMD device's hook implementations (see tg.plugins.hookspecs)."""
from __future__ import annotations

from tg.plugins import DeviceSpec, hookimpl, split_device
from tg_amd.allocator import AMDAllocator
from tg_amd.compiler import AMDCompiler
from tg_amd.device import get_driver, is_mock, unavailable_reason
from tg_amd.driver import Driver
from tg_amd.graph import AMDGraph
from tg_amd.program import AMDProgram
from tg_amd.renderer import AMDRenderer

TG_PLUGIN_API_VERSION = 2
DEVICE = "AMD"


@hookimpl
def tg_device(device: str) -> DeviceSpec | None:
  base, ordinal = split_device(device)
  if base != DEVICE:
    return None
  why = unavailable_reason(ordinal)
  note = "mock mode, AMD_MOCK=1: real clang and lld code objects, kernels run on the CPU" if is_mock() else ""
  priority = -10 if is_mock() else 100  # the mock is a test device: used only when asked for by name

  def driver() -> Driver:  # this instance's GPU, opened when a part first needs it (never just to ask availability)
    return get_driver(ordinal)

  return DeviceSpec(allocator=lambda: AMDAllocator(driver()), renderer=lambda: AMDRenderer(driver().arch),
                    compiler=lambda: AMDCompiler(driver().arch, mock=is_mock()),
                    program=lambda name, lib: AMDProgram(driver(), name, lib), graph=AMDGraph,
                    synchronize=lambda: driver().synchronize(), available=why, priority=priority, note=note)
