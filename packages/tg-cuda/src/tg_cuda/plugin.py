"""The CUDA device's hook implementations (see tg.plugins.hookspecs)."""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from tg.device import Allocator, Compiler
from tg.plugins import hookimpl
from tg.renderer import Renderer
from tg_cuda.allocator import CUDAAllocator
from tg_cuda.compiler import CUDACompiler
from tg_cuda.device import get_driver, is_mock, unavailable_reason
from tg_cuda.graph import CUDAGraph
from tg_cuda.program import CUDAProgram
from tg_cuda.renderer import CUDARenderer

TG_PLUGIN_API_VERSION = 1
DEVICE = "CUDA"


@hookimpl
def tg_device_available(device: str) -> str | None:
  return unavailable_reason() if device == DEVICE else None


@hookimpl
def tg_device_note(device: str) -> str | None:
  if device != DEVICE:
    return None
  return "mock mode, CUDA_MOCK=1: real NVRTC and ptxas, kernels run on the CPU" if is_mock() else None


@hookimpl
def tg_device_priority(device: str) -> int | None:
  if device != DEVICE:
    return None
  return -10 if is_mock() else 100  # the mock is a test device: used only when asked for by name


@hookimpl
def tg_renderer(device: str) -> Renderer | None:
  return CUDARenderer(get_driver().arch) if device == DEVICE else None


@hookimpl
def tg_compiler(device: str) -> Compiler | None:
  if device != DEVICE:
    return None
  driver = get_driver()
  return CUDACompiler(driver.arch, mock=is_mock(), driver_cuda=driver.cuda_version)


@hookimpl
def tg_allocator(device: str) -> Allocator | None:
  return CUDAAllocator(get_driver()) if device == DEVICE else None


@hookimpl
def tg_graph(device: str) -> type | None:
  return CUDAGraph if device == DEVICE else None


@hookimpl
def tg_runtime(device: str) -> Callable[[str, bytes], Any] | None:
  return functools.partial(CUDAProgram, get_driver()) if device == DEVICE else None
