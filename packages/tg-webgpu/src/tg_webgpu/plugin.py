"""The WEBGPU device's hook implementations (see tg.plugins.hookspecs)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tg.device import Allocator, Compiler
from tg.plugins import hookimpl
from tg.renderer import Renderer
from tg_webgpu import gpu
from tg_webgpu.allocator import WebGPUAllocator
from tg_webgpu.compiler import WGSLCompiler
from tg_webgpu.renderer import WGSLRenderer
from tg_webgpu.runtime import WebGPUProgram

TG_PLUGIN_API_VERSION = 1
DEVICE = "WEBGPU"


@hookimpl
def tg_device_available(device: str) -> str | None:
  return gpu.unavailable_reason() if device == DEVICE else None


@hookimpl
def tg_device_priority(device: str) -> int | None:
  if device != DEVICE:
    return None
  # a software adapter (lavapipe) is far slower than CLANG on the same CPU: only when asked for by name
  return -10 if gpu.unavailable_reason() or gpu.is_software() else 100


@hookimpl
def tg_renderer(device: str) -> Renderer | None:
  return WGSLRenderer(gpu.limits(), f16=gpu.has_f16()) if device == DEVICE else None


@hookimpl
def tg_compiler(device: str) -> Compiler | None:
  return WGSLCompiler() if device == DEVICE else None


@hookimpl
def tg_allocator(device: str) -> Allocator | None:
  return WebGPUAllocator() if device == DEVICE else None


@hookimpl
def tg_runtime(device: str) -> Callable[[str, bytes], Any] | None:
  return WebGPUProgram if device == DEVICE else None
