"""The TOY device, written for plugin API version 2 (tg.plugins.contract). It reuses the renderer, compiler and UOp
interpreter that tg-core ships for PYTHON, and brings its own allocator and a runtime that records each launch.

Each instance (TOY, TOY:1, ...) has its own ToyInstance: its own memory and its own launch log, so tests can see
which instance ran what and that buffers never cross. `calls` records every tg_device call with the name it got."""
from __future__ import annotations

import functools
from typing import Any

from tg.device import Allocator
from tg.plugins import DeviceSpec, hookimpl, split_device
from tg.plugins.python import PythonCompiler, PythonProgram, PythonRenderer

TG_PLUGIN_API_VERSION = 2
DEVICE = "TOY"
INSTANCES = 2  # TOY and TOY:1; TOY:2 and up are "not present", as a third GPU on a two-GPU machine
calls: list[str] = []  # the device name each tg_device call received


class ToyInstance:
  """One TOY device: its "device memory" (buffers are integer handles into it) and the kernels it ran."""

  def __init__(self, ordinal: int) -> None:
    self.ordinal = ordinal
    self.memory: dict[int, bytearray] = {}
    self.launches: list[str] = []
    self.syncs = 0  # how often tg waited for this instance (DeviceSpec.synchronize)

  def synchronize(self) -> None:
    self.syncs += 1


@functools.cache
def instance(ordinal: int) -> ToyInstance:
  return ToyInstance(ordinal)


class ToyRenderer(PythonRenderer):
  device = DEVICE


class ToyProgram(PythonProgram):
  def __init__(self, inst: ToyInstance, name: str, lib: bytes) -> None:
    super().__init__(name, lib)
    self.inst = inst

  def __call__(self, *bufs: Any, **kwargs: Any) -> float | None:
    self.inst.launches.append(self.name)
    return super().__call__(*[self.inst.memory[h] for h in bufs], **kwargs)


class ToyAllocator(Allocator):
  """Hands out integer handles, as a GPU allocator hands out device pointers: tg never looks inside."""

  def __init__(self, inst: ToyInstance) -> None:
    self.inst = inst

  def alloc(self, size: int, options: Any = None) -> Any:
    handle = max(self.inst.memory, default=0) + 1
    self.inst.memory[handle] = bytearray(size)
    return handle

  def free(self, opaque: Any, size: int, options: Any = None) -> None:
    del self.inst.memory[opaque]

  def copyin(self, dest: Any, src: memoryview) -> None:
    self.inst.memory[dest][:] = src

  def copyout(self, dest: memoryview, src: Any) -> None:
    dest[:] = self.inst.memory[src]


@hookimpl
def tg_device(device: str) -> DeviceSpec | None:
  base, ordinal = split_device(device)
  if base != DEVICE:
    return None
  calls.append(device)
  inst = instance(ordinal)
  return DeviceSpec(allocator=lambda: ToyAllocator(inst), renderer=ToyRenderer, compiler=PythonCompiler,
                    program=lambda name, lib: ToyProgram(inst, name, lib), synchronize=inst.synchronize, priority=-10,  # only when asked for by name
                    available="" if ordinal < INSTANCES else f"{device}: there are only {INSTANCES} TOY devices (TOY and TOY:1)")
