"""The METAL device's hook implementations (see tg.plugins.hookspecs)."""
from __future__ import annotations

from tg.plugins import DeviceSpec, hookimpl, split_device
from tg_metal.allocator import MetalAllocator
from tg_metal.compiler import MetalCompiler
from tg_metal.device import get_driver, is_mock, unavailable_reason
from tg_metal.graph import MetalGraph
from tg_metal.program import MetalProgram
from tg_metal.renderer import MetalRenderer
from tg_metal.runtime import Driver, MetalDriver

TG_PLUGIN_API_VERSION = 2
DEVICE = "METAL"


@hookimpl
def tg_device(device: str) -> DeviceSpec | None:
  base, ordinal = split_device(device)
  if base != DEVICE:
    return None
  why = unavailable_reason()
  mock = is_mock()
  note = "mock mode, METAL_MOCK=1: MSL checked by clang++, kernels run on the CPU" if mock else ""
  if ordinal > 0:
    note = ", ".join(x for x in (note, f"METAL:{ordinal} is another instance of the one GPU (own queue and buffers)") if x)
  priority = -10 if mock else 100  # the mock is a test device: used only when asked for by name

  def driver() -> Driver:  # this instance's, opened when a part first needs it (never just to ask availability)
    return get_driver(ordinal)

  def compiler() -> MetalCompiler:
    drv = driver()
    return MetalCompiler(mock=mock, driver=drv if isinstance(drv, MetalDriver) else None)

  def renderer() -> MetalRenderer:  # what this GPU's MSL has: bfloat (Metal 3.1), simdgroup matrices (Apple7+)
    return MetalRenderer(driver().bfloat, driver().simdgroup_matrix)

  return DeviceSpec(allocator=lambda: MetalAllocator(driver()), renderer=renderer, compiler=compiler,
                    program=lambda name, lib: MetalProgram(driver(), name, lib), graph=MetalGraph,
                    synchronize=lambda: driver().synchronize(), available=why, priority=priority, note=note)
