"""The TOY device. It renders a kernel's linear program as text, "compiles" it to bytes, and runs it
with the UOp interpreter that tg-core ships, on buffers of its own. Everything goes through the
public contract only: hookimpl, the Renderer/Compiler/Allocator base classes and the hook names."""
from __future__ import annotations

from typing import Any, Callable

from tg.device import Allocator, Compiler
from tg.plugins import hookimpl
from tg.plugins.python import PythonProgram, PythonRenderer
from tg.renderer import Renderer

TG_PLUGIN_API_VERSION = 1
DEVICE = "TOY"
launches: list[str] = []  # kernel names run on TOY, so tests can see that TOY itself ran them


class ToyRenderer(PythonRenderer):
  device = DEVICE


class ToyCompiler(Compiler):
  def compile(self, src: str) -> bytes:
    return bytes.fromhex(src)


class ToyProgram(PythonProgram):
  def __call__(self, *bufs: Any, **kwargs: Any) -> float | None:
    launches.append(self.name)
    return super().__call__(*bufs, **kwargs)


class ToyAllocator(Allocator):
  def alloc(self, size: int, options: Any = None) -> Any:
    return memoryview(bytearray(size))

  def copyin(self, dest: Any, src: memoryview) -> None:
    dest[:] = src

  def copyout(self, dest: memoryview, src: Any) -> None:
    dest[:] = src


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
  return ToyCompiler() if device == DEVICE else None


@hookimpl
def tg_allocator(device: str) -> Allocator | None:
  return ToyAllocator() if device == DEVICE else None


@hookimpl
def tg_runtime(device: str) -> Callable[[str, bytes], Any] | None:
  return ToyProgram if device == DEVICE else None
