"""The DISK device: buffers backed by a memory-mapped file, for weights bigger than RAM.

It runs no kernels (no renderer or compiler); data moves from DISK to a compute device by copying.
A buffer's options name its file: `Buffer("DISK", n, dtype, options=path)`.
"""
from __future__ import annotations

import mmap
import os
from typing import Any

from tg.device import Allocator, HostAllocator
from tg.plugins import hookimpl

TG_PLUGIN_API_VERSION = 1
DEVICE = "DISK"


class DiskAllocator(HostAllocator):
  def alloc(self, size: int, options: Any = None) -> Any:
    if not isinstance(options, (str, os.PathLike)):
      raise ValueError("a DISK buffer needs a file: create it with options=<path>")
    path = os.fspath(options)
    mode = "r+b" if os.path.exists(path) else "w+b"
    with open(path, mode) as f:
      if os.path.getsize(path) < size:
        f.truncate(size)
      return memoryview(mmap.mmap(f.fileno(), size)) if size else memoryview(b"")

  def free(self, opaque: Any, size: int, options: Any = None) -> None:
    """Mappings of files are not worth caching: they go when unused."""


@hookimpl
def tg_device_available(device: str) -> str | None:
  return "" if device == DEVICE else None


@hookimpl
def tg_device_priority(device: str) -> int | None:
  return -1 if device == DEVICE else None  # storage, never the default compute device


@hookimpl
def tg_allocator(device: str) -> Allocator | None:
  return DiskAllocator() if device == DEVICE else None
