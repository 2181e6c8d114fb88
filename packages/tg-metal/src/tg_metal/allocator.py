"""MetalAllocator: buffers through the Driver. A buffer's opaque handle is a MetalBuffer (the MTLBuffer, the view's
byte offset into it, and its CPU address); a view is the same allocation at a further offset."""
from __future__ import annotations

from typing import Any

from tg.device import DriverAllocator
from tg_metal.runtime import MetalBuffer


class MetalAllocator(DriverAllocator):
  def view(self, opaque: Any, byte_offset: int, size: int) -> Any:
    assert isinstance(opaque, MetalBuffer)
    return opaque.view(byte_offset)
