"""AMDProgram: one loaded kernel, launched with tg's buffers and symbolic sizes as its arguments."""
from __future__ import annotations

import struct
from typing import Any

from tg_amd.bundle import AMDBinary
from tg_amd.driver import HIP_LAUNCH_PARAM_BUFFER_POINTER, HIP_LAUNCH_PARAM_BUFFER_SIZE, HIP_LAUNCH_PARAM_END, Driver, ffi


def pack_args(bufs: tuple[int, ...] | list[int], vals: tuple[int, ...] | list[int]) -> tuple[Any, Any]:
  """hipModuleLaunchKernel's `extra` for a kernel `(T* data0, ..., const int var0, ...)`: its argument segment as one
  buffer (8-byte pointers, then 4-byte ints: each naturally aligned) and the buffer's size. Returns (extra, what must
  stay alive while it is used)."""
  args = ffi.new("char[]", struct.pack(f"<{len(bufs)}Q{len(vals)}i", *bufs, *vals) or b"\0")
  size = ffi.new("size_t*", 8 * len(bufs) + 4 * len(vals))
  extra = ffi.new("void*[5]", [ffi.cast("void*", HIP_LAUNCH_PARAM_BUFFER_POINTER), args, ffi.cast("void*", HIP_LAUNCH_PARAM_BUFFER_SIZE), size,
                               ffi.cast("void*", HIP_LAUNCH_PARAM_END)])
  return extra, (args, size)


def launch_dims(global_size: tuple[int, ...], local_size: tuple[int, ...]) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
  """(grid, block) as 3 dims each: missing dims are 1. HIP counts work-items per dim in 32 bits: grid * block < 2^32."""
  if len(global_size) > 3 or len(local_size) > 3:
    raise ValueError(f"a HIP launch has 3 dims, not global_size={global_size} local_size={local_size}")
  grid, block = (*global_size, 1, 1, 1)[:3], (*local_size, 1, 1, 1)[:3]
  for d in range(3):
    if grid[d] * block[d] >= 2**32:
      raise ValueError(f"a HIP launch has fewer than 2^32 work-items per dim, not {grid[d]} workgroups of {block[d]} along {'xyz'[d]}")
  return (grid[0], grid[1], grid[2]), (block[0], block[1], block[2])


class AMDProgram:
  def __init__(self, driver: Driver, name: str, lib: bytes) -> None:
    self.driver, self.name = driver, name
    self.binary = AMDBinary.unpack(lib)
    self.fn = driver.function(self.binary, name)

  def __call__(self, *bufs: int, global_size: tuple[int, ...] = (), local_size: tuple[int, ...] = (),
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    grid, block = launch_dims(global_size, local_size)
    extra, _alive = pack_args(bufs, vals)  # alive until the launch has copied the arguments
    return self.driver.launch(self.fn, grid, block, extra, wait)
