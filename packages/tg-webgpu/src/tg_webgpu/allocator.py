"""WebGPUAllocator: tg buffers as wgpu storage buffers.

Sizes are rounded up to whole 4-byte words: WebGPU copies and binds whole words, and packed kernels
(renderer.py) read a byte buffer as u32 words. Only the first `size` bytes are ever copied in or out.

The allocator keeps every buffer it made reachable until `_free`: a tg Buffer dropped as part of a reference
cycle (an exception's traceback) is finalized together with its wgpu buffer, whose __del__ would release the GPU
memory even though Buffer.__del__ just handed it back to the LRU cache for reuse.
"""
from __future__ import annotations

from typing import Any

from tg.device import LRUAllocator
from tg_webgpu import gpu


def padded(size: int) -> int:
  return max(4, (size + 3) // 4 * 4)


class WebGPUAllocator(LRUAllocator):
  def __init__(self) -> None:
    super().__init__()
    import wgpu
    self.dev = gpu.device()
    self.usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
    self.live: dict[int, Any] = {}
    self.max_size = min(int(self.dev.limits["max-storage-buffer-binding-size"]), int(self.dev.limits["max-buffer-size"]))

  def _alloc(self, size: int, options: Any) -> Any:
    if padded(size) > self.max_size:
      raise RuntimeError(f"a WEBGPU buffer of {size} bytes is over this device's limit of {self.max_size} bytes "
                         "(maxStorageBufferBindingSize): kernels can't bind it; use smaller tensors or another device")
    buf = self.dev.create_buffer(label="tg", size=padded(size), usage=self.usage)
    self.live[id(buf)] = buf
    return buf

  def _free(self, opaque: Any, options: Any) -> None:
    self.live.pop(id(opaque), None)
    opaque.destroy()

  def copyin(self, dest: Any, src: memoryview) -> None:
    data = src.cast("B") if src.nbytes else src
    if data.nbytes % 4:  # the tail of the last word is padding
      data = memoryview(bytes(data) + bytes(4 - data.nbytes % 4))
    self.dev.queue.write_buffer(dest, 0, data)

  def copyout(self, dest: memoryview, src: Any) -> None:
    # read_buffer waits for the queue, so every kernel writing src has finished
    n = dest.nbytes
    dest[:] = self.dev.queue.read_buffer(src, 0, padded(n)).cast("B")[:n]
