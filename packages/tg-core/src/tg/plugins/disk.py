"""The DISK device: buffers backed by a memory-mapped file, for weights bigger than RAM.

It runs no kernels (no renderer or compiler); data moves from DISK to a compute device by copying.
A buffer's options name its file: `Buffer("DISK", n, dtype, options=path)` starts at the file's first byte,
`options=(path, byte_offset)` at `byte_offset`, so every tensor of a weights file can be a buffer of its own.
Each file is mapped once and its buffers are views into that one mapping: loading a model with thousands of
tensors costs one mapping (and one file descriptor), not thousands.
`options=(path, byte_offset, "r")` maps the file read-only, as the weight loaders do: the file is opened for
reading only, never grown, and a buffer reaching past its end is an error (a loader must never change its file).
"""
from __future__ import annotations

import functools
import mmap
import os
import weakref
from typing import IO, Any

from tg.device import HostAllocator
from tg.interrupts import finalizer
from tg.plugins import DeviceSpec, hookimpl, split_device

TG_PLUGIN_API_VERSION = 2
DEVICE = "DISK"

# path -> ((st_dev, st_ino) of the mapped file, the mapping). Weak, so a file is unmapped (and can be deleted
# on every OS) once no buffer views it any more; a live buffer's memoryview keeps its mapping alive.
# Writable and read-only mappings are kept apart: a reader never gets a view it could write through.
_mappings: dict[str, tuple[tuple[int, int], weakref.ref[mmap.mmap]]] = {}
_read_mappings: dict[str, tuple[tuple[int, int], weakref.ref[mmap.mmap]]] = {}


def _file_ident(st: os.stat_result) -> tuple[int, int]:
  return (st.st_dev, st.st_ino)


def _cached(table: dict[str, tuple[tuple[int, int], weakref.ref[mmap.mmap]]], key: str, size: int) -> mmap.mmap | None:
  """A cached mapping of `key` still usable for `size` bytes: the same file (a file replaced at the same path, e.g.
  by an atomic save, gets a new mapping), no shorter than the mapping (touching pages past the end of a truncated
  file kills the process with SIGBUS)."""
  if (entry := table.get(key)) is not None and (mm := entry[1]()) is not None and not mm.closed and len(mm) >= size:
    try:
      st = os.stat(key)
      if _file_ident(st) == entry[0] and st.st_size >= len(mm):
        return mm
    except FileNotFoundError:
      pass
  return None


def map_file(path: str, size: int, writable: bool = True) -> mmap.mmap:
  """The shared mapping of `path`, covering at least `size` bytes.

  Writable (the default): a file shorter than `size` is grown (a missing one is created). Read-only: the file is
  opened for reading only and never changed; one shorter than `size` is a ValueError. Buffers made earlier keep
  their own mapping alive."""
  key = os.path.realpath(path)
  table = _mappings if writable else _read_mappings
  if (mm := _cached(table, key, size)) is not None:
    return mm
  mm, st = _map_for_writing(key, size) if writable else _map_for_reading(key, size)
  table[key] = (_file_ident(st), weakref.ref(mm, functools.partial(_forget, table, key)))
  return mm


def _map_for_reading(key: str, size: int) -> tuple[mmap.mmap, os.stat_result]:
  with open(key, "rb") as f:
    st = os.fstat(f.fileno())
    if st.st_size < size:
      raise ValueError(f"{key} has {st.st_size} bytes, fewer than the {size} a read-only DISK buffer needs: the file is truncated")
    if st.st_size == 0:
      raise ValueError(f"can't map {key}: the file is empty")
    return mmap.mmap(f.fileno(), st.st_size, access=mmap.ACCESS_READ), st


def _map_for_writing(key: str, size: int) -> tuple[mmap.mmap, os.stat_result]:
  writable = True
  f: IO[bytes]
  try:
    f = open(key, "r+b" if os.path.exists(key) else "w+b")  # closed below: the mapping outlives it
  except PermissionError:  # a read-only file can still be read through a buffer; writing to it then fails
    f, writable = open(key, "rb"), False
  with f:
    st = os.fstat(f.fileno())
    if st.st_size < size:
      if not writable:
        raise PermissionError(f"DISK buffer needs {size} bytes of {key}, which is read-only and has only {st.st_size}")
      f.truncate(size)
    if max(st.st_size, size) == 0:
      raise ValueError(f"can't map {key}: the file is empty")
    return mmap.mmap(f.fileno(), max(st.st_size, size), access=mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ), st


@finalizer  # a weak reference's callback: Ctrl-C must not be raised (and lost) in it
def _forget(table: dict[str, tuple[tuple[int, int], weakref.ref[mmap.mmap]]], key: str, ref: weakref.ref[mmap.mmap]) -> None:
  """Drop a dead mapping's entry (unless a newer mapping of the file has taken its place)."""
  if (entry := table.get(key)) is not None and entry[1] is ref:
    del table[key]


def _parse_options(options: Any) -> tuple[str, int, bool]:
  """(path, byte_offset, writable) from a buffer's options: a path, a (path, byte_offset) or a (path, byte_offset, "r") tuple."""
  if isinstance(options, (str, os.PathLike)):
    return os.fspath(options), 0, True
  if isinstance(options, tuple) and len(options) in (2, 3) and isinstance(options[0], (str, os.PathLike)) and \
     isinstance(options[1], int) and not isinstance(options[1], bool) and (len(options) == 2 or options[2] in ("r", "r+")):
    if options[1] < 0:
      raise ValueError(f"a DISK buffer's byte offset can't be negative, got {options[1]}")
    return os.fspath(options[0]), options[1], len(options) == 2 or options[2] == "r+"
  raise ValueError("a DISK buffer needs a file: create it with options=<path>, (<path>, <byte offset>) or (<path>, <byte offset>, 'r'), "
                   f"not {options!r}")


class DiskAllocator(HostAllocator):
  def alloc(self, size: int, options: Any = None) -> Any:
    path, offset, writable = _parse_options(options)
    if size == 0:
      return memoryview(b"")
    return memoryview(map_file(path, offset + size, writable))[offset:offset + size]

  def free(self, opaque: Any, size: int, options: Any = None) -> None:
    """Nothing to cache: a buffer is a view of its file's mapping, which goes when its last view does."""


@hookimpl
def tg_device(device: str) -> DeviceSpec | None:
  if split_device(device)[0] != DEVICE:
    return None
  # storage, never the default compute device; it runs no kernels (no renderer, compiler or programs)
  return DeviceSpec(allocator=DiskAllocator, priority=-1)
