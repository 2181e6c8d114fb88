"""AMDAllocator: device memory through the Driver. A buffer's opaque handle is its device address (an int), which
is also what a kernel argument holds; a view is the address plus an offset."""
from __future__ import annotations

from typing import Any

from tg.device import LRUAllocator
from tg_amd.driver import Driver


class AMDAllocator(LRUAllocator):
  def __init__(self, driver: Driver) -> None:
    super().__init__()
    self.driver = driver

  def _alloc(self, size: int, options: Any) -> int:
    return self.driver.alloc(size)

  def _free(self, opaque: Any, options: Any) -> None:
    self.driver.free(opaque)

  def copyin(self, dest: Any, src: memoryview) -> None:
    self.driver.copyin(dest, src)

  def copyout(self, dest: memoryview, src: Any) -> None:
    self.driver.copyout(dest, src)

  def view(self, opaque: Any, byte_offset: int, size: int) -> Any:
    return opaque + byte_offset
