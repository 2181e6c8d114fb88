"""MockDriver: the Driver of METAL_MOCK=1. Buffers are host memory (the CPU address is the allocation's `ptr`, as
`contents` of a shared MTLBuffer); a kernel is the CPU build of its MSL (tg.runtime.gpu_mock), launched with its
buffer addresses and int arguments in the order of its [[buffer(n)]] parameters; a batch of launches runs in order.
Launch dims are checked against an Apple GPU's limits, and a kernel's buffer arguments against Metal's 31."""
from __future__ import annotations

import ctypes
import time
from typing import Any

from tg.runtime.gpu_mock import MockKernel, MockLaunchError
from tg_metal.renderer import MAX_BUFFER_ARGS
from tg_metal.runtime import Driver, Launch, MetalBinary, MetalBuffer, MetalError


class MockDriver(Driver):
  name = "mock: MSL checked by clang++, kernels built for and run on this CPU (METAL_MOCK=1)"

  def __init__(self) -> None:
    self.memory: dict[int, Any] = {}
    self.next_key = 1

  def alloc(self, size: int) -> MetalBuffer:
    mem = ctypes.create_string_buffer(max(size, 1))
    key, self.next_key = self.next_key, self.next_key + 1
    self.memory[key] = mem
    return MetalBuffer(key, 0, ctypes.addressof(mem))

  def free(self, buf: MetalBuffer) -> None:
    if self.memory.pop(buf.buf, None) is None:
      raise MetalError(f"release of MTLBuffer {buf.buf}: not an allocation")

  def synchronize(self) -> None:
    pass  # every launch ran when it was made

  def function(self, binary: MetalBinary, name: str) -> MockKernel:
    if not binary.mock:
      raise MetalError(f"kernel {name} has no CPU build: it was compiled without METAL_MOCK=1")
    return MockKernel(name, binary.mock)

  def run(self, launches: list[Launch], wait: bool) -> float | None:
    st = time.perf_counter()
    for lc in launches:
      if len(lc.bufs) + len(lc.vals) > MAX_BUFFER_ARGS:
        raise MetalError(f"{lc.fn.name}: {len(lc.bufs) + len(lc.vals)} buffer arguments, Metal binds at most {MAX_BUFFER_ARGS}")
      # argument i is what params[i] points at: a buffer's address (with its view's offset), a var's int
      ptrs = (ctypes.c_void_p * max(1, len(lc.bufs)))(*[b.ptr + b.offset for b in lc.bufs])
      ints = (ctypes.c_int32 * max(1, len(lc.vals)))(*lc.vals)
      addrs = [ctypes.addressof(ptrs) + ctypes.sizeof(ctypes.c_void_p) * i for i in range(len(lc.bufs))]
      addrs += [ctypes.addressof(ints) + 4 * j for j in range(len(lc.vals))]
      params = (ctypes.c_void_p * max(1, len(addrs)))(*addrs)
      try:
        lc.fn.launch(ctypes.addressof(params), lc.grid, lc.block)
      except MockLaunchError as e:
        raise MetalError(f"dispatch of {lc.fn.name} threadgroups={lc.grid} threads={lc.block} failed: {e}") from None
    return time.perf_counter() - st if wait else None
