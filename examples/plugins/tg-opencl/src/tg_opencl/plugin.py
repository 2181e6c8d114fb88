"""The OPENCL device's hook (tg plugin API version 2, docs/writing-a-device-plugin.md).

Instances: `OPENCL:n` is the n-th OpenCL device of all platforms, in the order pyopencl lists them. When there are
fewer devices than that, the instance gets a context of its own on device n modulo their number (its note says so):
two instances never share memory or a queue, even on one device, so tests of several instances run on one CPU.
pyopencl is imported only when the device is asked for, so a missing driver is a sentence, never an import error.
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from tg.plugins import DeviceSpec, hookimpl, split_device

if TYPE_CHECKING:
  from tg_opencl.runtime import CLContext

TG_PLUGIN_API_VERSION = 2
INSTALL = "`pip install pyopencl pocl-binary-distribution` (PoCL, OpenCL on the CPU) or `apt-get install pocl-opencl-icd`"


@functools.cache
def _devices() -> tuple[list[Any], str]:
  """(every OpenCL device, in platform order; why there are none)."""
  try:
    import pyopencl as cl
  except ImportError:
    return [], f"pyopencl is not installed: {INSTALL}"
  try:
    devices = [d for p in cl.get_platforms() for d in p.get_devices()]
  except cl.Error as e:  # no ICD loader configuration or no platform at all
    return [], f"no OpenCL platform found ({e}): install a driver, e.g. {INSTALL}"
  return devices, "" if devices else f"the OpenCL platforms have no devices: install a driver, e.g. {INSTALL}"


@functools.cache
def _context(ordinal: int) -> CLContext:
  """The instance's context and queue, made when it first opens and kept for the process."""
  from tg_opencl.runtime import CLContext
  devices, _ = _devices()
  return CLContext(devices[ordinal % len(devices)])


def _note(ordinal: int, devices: list[Any]) -> str:
  dev = devices[ordinal % len(devices)]
  shared = f" (a context of its own on device {ordinal % len(devices)}: {len(devices)} OpenCL device(s) here)" if ordinal >= len(devices) else ""
  return f"{dev.name.strip()} on {dev.platform.name.strip()} {dev.driver_version}{shared}"


@hookimpl
def tg_device(device: str) -> DeviceSpec | None:
  base, n = split_device(device)
  if base != "OPENCL":
    return None
  devices, why = _devices()
  if why:
    return DeviceSpec(available=why)  # an unusable device needs no parts
  import pyopencl as cl

  from tg_opencl.renderer import OpenCLRenderer
  from tg_opencl.runtime import CLAllocator, CLCompiler, CLProgram
  gpu = devices[n % len(devices)].type & cl.device_type.GPU
  return DeviceSpec(
    available="", priority=90 if gpu else 30, note=_note(n, devices),  # a CPU driver ranks below tg's CPU compilers (50, 40)
    allocator=lambda: CLAllocator(_context(n)),
    renderer=lambda: OpenCLRenderer(_context(n).device),
    compiler=lambda: CLCompiler(_context(n)),
    program=lambda name, lib: CLProgram(_context(n), name, lib),
    synchronize=lambda: _context(n).finish())
