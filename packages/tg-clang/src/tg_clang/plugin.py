"""The CLANG device's hook implementations (see tg.plugins.hookspecs)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tg.device import Allocator, Compiler, HostAllocator
from tg.plugins import hookimpl
from tg.renderer import Renderer
from tg.renderer.cpu import native_vector_bytes
from tg_clang.compiler import CLANG, ClangCompiler, clang_version
from tg_clang.graph import ClangGraph
from tg_clang.renderer import ClangRenderer
from tg_clang.runtime import ClangProgram

TG_PLUGIN_API_VERSION = 1
DEVICE = "CLANG"


@hookimpl
def tg_device_available(device: str) -> str | None:
  if device != DEVICE:
    return None
  if clang_version() is not None:
    return ""
  if CLANG != "clang":
    return f"TG_CLANG={CLANG} was not found or does not run: point TG_CLANG at a clang (e.g. from `apt-get install clang`), or unset it"
  return "`clang` was not found on PATH: install clang (e.g. `apt-get install clang`) or set TG_CLANG"


@hookimpl
def tg_device_priority(device: str) -> int | None:
  return 50 if device == DEVICE else None


@hookimpl
def tg_renderer(device: str) -> Renderer | None:
  return ClangRenderer() if device == DEVICE else None


@hookimpl
def tg_compiler(device: str) -> Compiler | None:
  return ClangCompiler() if device == DEVICE else None


@hookimpl
def tg_allocator(device: str) -> Allocator | None:
  # kernels run on the host: plain host memory, with the slack that lets them read whole vectors at a buffer's ends
  return HostAllocator(slack=native_vector_bytes()) if device == DEVICE else None


@hookimpl
def tg_graph(device: str) -> type | None:
  return ClangGraph if device == DEVICE else None


@hookimpl
def tg_runtime(device: str) -> Callable[[str, bytes], Any] | None:
  return ClangProgram if device == DEVICE else None
