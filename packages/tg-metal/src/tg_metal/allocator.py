"""MetalAllocator: buffers through the Driver. A buffer's opaque handle is a MetalBuffer (the MTLBuffer, the view's
byte offset into it, and its CPU address); a view is the same allocation at a further offset."""
from __future__ import annotations

from typing import Any

from tg.device import LRUAllocator
from tg_metal.runtime import Driver, MetalBuffer


class MetalAllocator(LRUAllocator):
  def __init__(self, driver: Driver) -> None:
    super().__init__()
    self.driver = driver

  def _alloc(self, size: int, options: Any) -> MetalBuffer:
    return self.driver.alloc(size)

  def _free(self, opaque: Any, options: Any) -> None:
    self.driver.free(opaque)

  def copyin(self, dest: Any, src: memoryview) -> None:
    self.driver.copyin(dest, src)

  def copyout(self, dest: memoryview, src: Any) -> None:
    self.driver.copyout(dest, src)

  def view(self, opaque: Any, byte_offset: int, size: int) -> Any:
    assert isinstance(opaque, MetalBuffer)
    return opaque.view(byte_offset)
