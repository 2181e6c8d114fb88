"""TOYV1: the TOY device as it was written for plugin API version 1 (one hook per part), kept unchanged to show
that such a plugin still runs, with a DeprecationWarning, through tg.plugins.v1. It reuses the renderer, compiler
and UOp interpreter that tg-core ships for PYTHON, and brings its own allocator and a runtime that records each
launch."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tg.device import Allocator, Compiler
from tg.plugins import hookimpl
from tg.plugins.python import PythonCompiler, PythonProgram, PythonRenderer
from tg.renderer import Renderer

TG_PLUGIN_API_VERSION = 1
DEVICE = "TOYV1"
launches: list[str] = []  # kernel names run on TOY, so tests can see that TOY itself ran them
memory: dict[int, bytearray] = {}  # TOY's "device memory": buffers are integer handles into it


class ToyRenderer(PythonRenderer):
  device = DEVICE


class ToyProgram(PythonProgram):
  def __call__(self, *bufs: Any, **kwargs: Any) -> float | None:
    launches.append(self.name)
    return super().__call__(*[memory[h] for h in bufs], **kwargs)


class ToyAllocator(Allocator):
  """Hands out integer handles, as a GPU allocator hands out device pointers: tg never looks inside."""

  def alloc(self, size: int, options: Any = None) -> Any:
    handle = max(memory, default=0) + 1
    memory[handle] = bytearray(size)
    return handle

  def free(self, opaque: Any, size: int, options: Any = None) -> None:
    del memory[opaque]

  def copyin(self, dest: Any, src: memoryview) -> None:
    memory[dest][:] = src

  def copyout(self, dest: memoryview, src: Any) -> None:
    dest[:] = memory[src]


@hookimpl
def tg_device_available(device: str) -> str | None:
  return "" if device == DEVICE else None


@hookimpl
def tg_device_priority(device: str) -> int | None:
  return -10 if device == DEVICE else None  # only when asked for by name


@hookimpl
def tg_renderer(device: str) -> Renderer | None:
  return ToyRenderer() if device == DEVICE else None


@hookimpl
def tg_compiler(device: str) -> Compiler | None:
  return PythonCompiler() if device == DEVICE else None


@hookimpl
def tg_allocator(device: str) -> Allocator | None:
  return ToyAllocator() if device == DEVICE else None


@hookimpl
def tg_runtime(device: str) -> Callable[[str, bytes], Any] | None:
  return ToyProgram if device == DEVICE else None
