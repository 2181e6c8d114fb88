"""The CUDA device's hook implementations (see tg.plugins.hookspecs)."""
from __future__ import annotations

from tg.plugins import DeviceSpec, hookimpl, split_device
from tg_cuda.allocator import CUDAAllocator
from tg_cuda.compiler import CUDACompiler
from tg_cuda.device import get_driver, is_mock, unavailable_reason
from tg_cuda.driver import Driver
from tg_cuda.graph import CUDAGraph
from tg_cuda.program import CUDAProgram
from tg_cuda.renderer import CUDARenderer

TG_PLUGIN_API_VERSION = 2
DEVICE = "CUDA"


@hookimpl
def tg_device(device: str) -> DeviceSpec | None:
  base, ordinal = split_device(device)
  if base != DEVICE:
    return None
  why = unavailable_reason(ordinal)
  note = "mock mode, CUDA_MOCK=1: real NVRTC and ptxas, kernels run on the CPU" if is_mock() else ""
  priority = -10 if is_mock() else 100  # the mock is a test device: used only when asked for by name

  def driver() -> Driver:  # this instance's GPU, opened when a part first needs it (never just to ask availability)
    return get_driver(ordinal)

  return DeviceSpec(allocator=lambda: CUDAAllocator(driver()), renderer=lambda: CUDARenderer(driver().arch),
                    compiler=lambda: CUDACompiler(driver().arch, mock=is_mock(), driver_cuda=driver().cuda_version),
                    program=lambda name, lib: CUDAProgram(driver(), name, lib), graph=CUDAGraph,
                    synchronize=lambda: driver().synchronize(), available=why, priority=priority, note=note)
