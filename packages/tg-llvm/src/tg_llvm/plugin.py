"""The LLVM device's hook implementations (see tg.plugins.hookspecs).

llvmlite is imported only when a part of the device is asked for, so a missing llvmlite is explained by
tg_device_available instead of breaking the plugin's import."""
from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

from tg.device import Allocator, Compiler, HostAllocator
from tg.plugins import hookimpl
from tg.renderer import Renderer
from tg.renderer.cpu import native_vector_bytes
from tg.settings import Setting
from tg_llvm.renderer import LLVMRenderer

TG_PLUGIN_API_VERSION = 1
DEVICE = "LLVM"
LLVM_OPT = Setting("LLVM_OPT", 3, "the LLVM device's optimization level (2 compiles a little faster)", read_once="when the LLVM device opens")


@hookimpl
def tg_device_available(device: str) -> str | None:
  if device != DEVICE:
    return None
  return "" if importlib.util.find_spec("llvmlite") is not None else "llvmlite is not installed: `pip install llvmlite`"


@hookimpl
def tg_device_priority(device: str) -> int | None:
  return 40 if device == DEVICE else None  # a CPU compiler, after CLANG when both are installed


@hookimpl
def tg_renderer(device: str) -> Renderer | None:
  return LLVMRenderer() if device == DEVICE else None


@hookimpl
def tg_compiler(device: str) -> Compiler | None:
  if device != DEVICE:
    return None
  from tg_llvm.compiler import LLVMCompiler
  return LLVMCompiler()


@hookimpl
def tg_allocator(device: str) -> Allocator | None:
  # kernels run on the host: plain host memory, with the slack that lets them read whole vectors at a buffer's ends
  return HostAllocator(slack=native_vector_bytes()) if device == DEVICE else None


@hookimpl
def tg_graph(device: str) -> type | None:
  if device != DEVICE:
    return None
  from tg_llvm.graph import LLVMGraph
  return LLVMGraph


@hookimpl
def tg_runtime(device: str) -> Callable[[str, bytes], Any] | None:
  if device != DEVICE:
    return None
  from tg_llvm.runtime import LLVMProgram
  return LLVMProgram
