"""CUDAAllocator: device memory through the Driver. A buffer's opaque handle is its device address (an int), which
is also what a kernel argument holds; a view is the address plus an offset."""
from __future__ import annotations

from tg.device import DriverAllocator


class CUDAAllocator(DriverAllocator):
  pass
