"""The WEBGPU device's hook implementations (see tg.plugins.hookspecs)."""
from __future__ import annotations

from tg.plugins import DeviceSpec, hookimpl, split_device
from tg_webgpu import gpu
from tg_webgpu.allocator import WebGPUAllocator
from tg_webgpu.compiler import WGSLCompiler
from tg_webgpu.renderer import WGSLRenderer
from tg_webgpu.runtime import WebGPUProgram

TG_PLUGIN_API_VERSION = 2
DEVICE = "WEBGPU"


@hookimpl
def tg_device(device: str) -> DeviceSpec | None:
  if split_device(device)[0] != DEVICE:
    return None
  why = gpu.unavailable_reason()
  # a software adapter (lavapipe) is far slower than CLANG on the same CPU: only when asked for by name
  priority = -10 if why or gpu.is_software() else 100
  return DeviceSpec(allocator=WebGPUAllocator, renderer=lambda: WGSLRenderer(gpu.limits(), f16=gpu.has_f16()), compiler=WGSLCompiler,
                    program=WebGPUProgram, available=why, priority=priority)
