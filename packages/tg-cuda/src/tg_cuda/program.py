"""CUDAProgram: one loaded kernel, launched with tg's buffers and symbolic sizes as its arguments."""
from __future__ import annotations

import threading
from typing import Any

from tg_cuda.bundle import CUDABinary
from tg_cuda.driver import Driver, ffi


def pack_params(bufs: tuple[int, ...] | list[int], vals: tuple[int, ...] | list[int]) -> tuple[Any, Any]:
  """cuLaunchKernel's kernelParams for a kernel `(T* data0, ..., const int var0, ...)`: an array with a pointer to
  each argument's value. Returns (kernelParams, what must stay alive while they are used)."""
  ptrs = ffi.new("CUdeviceptr[]", list(bufs) or [0])
  ints = ffi.new("int[]", list(vals) or [0])
  args = [ffi.cast("void*", ptrs + i) for i in range(len(bufs))] + [ffi.cast("void*", ints + i) for i in range(len(vals))]
  params = ffi.new("void*[]", args or [ffi.NULL])
  return params, (ptrs, ints)


def launch_dims(global_size: tuple[int, ...], local_size: tuple[int, ...]) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
  """(grid, block) as 3 dims each: missing dims are 1."""
  if len(global_size) > 3 or len(local_size) > 3:
    raise ValueError(f"a CUDA launch has 3 dims, not global_size={global_size} local_size={local_size}")
  grid, block = (*global_size, 1, 1, 1)[:3], (*local_size, 1, 1, 1)[:3]
  return (grid[0], grid[1], grid[2]), (block[0], block[1], block[2])


class CUDAProgram:
  def __init__(self, driver: Driver, name: str, lib: bytes) -> None:
    self.driver, self.name = driver, name
    self.binary = CUDABinary.unpack(lib)
    self.fn = driver.function(self.binary, name)
    # the kernelParams of the last launch, refilled in place for the next: cuLaunchKernel has copied the values when it
    # returns, so the arrays are free again (three cffi allocations per eager launch were a fifth of its Python)
    self._packed: tuple[Any, Any, int, int] | None = None  # (kernelParams, (ptrs, ints), len(bufs), len(vals))
    self._busy = threading.Lock()  # held while the arrays are being filled and launched; another thread packs its own

  def __call__(self, *bufs: int, global_size: tuple[int, ...] = (), local_size: tuple[int, ...] = (),
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    grid, block = launch_dims(global_size, local_size)
    if not self._busy.acquire(blocking=False):
      params, _alive = pack_params(bufs, vals)  # alive until the launch has copied the argument values
      return self.driver.launch(self.fn, grid, block, params, wait)
    try:
      packed = self._packed
      if packed is None or packed[2] != len(bufs) or packed[3] != len(vals):
        params, alive = pack_params(bufs, vals)
        self._packed = (params, alive, len(bufs), len(vals))
      else:
        params, (ptrs, ints) = packed[0], packed[1]
        ptrs[0:len(bufs)] = bufs
        ints[0:len(vals)] = vals
      return self.driver.launch(self.fn, grid, block, params, wait)
    finally:
      self._busy.release()
