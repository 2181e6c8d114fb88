"""Metal through the Objective-C runtime (tg_metal.objc), and `Driver`: the few operations tg needs from a GPU.

`MetalDriver` does them on a Mac's GPU; `tg_metal.mock.driver.MockDriver` does them on the CPU (METAL_MOCK=1).
Everything above a Driver (allocator, program, graph) is shared by both.

Buffers are MTLBuffers in shared storage (MTLResourceStorageModeShared): the CPU reads and writes them through
`contents`, so copies are memmoves once the GPU is done with them. A launch is one command buffer with one compute
encoder; a TinyJit replay (graph.py) encodes all its kernels into one command buffer, dispatch after dispatch (a
serial encoder on tracked buffers: each dispatch sees the writes of the ones before it). Command buffers of the
one queue run in the order they were committed; `synchronize` waits for the last ones and raises the first
error a command buffer reports. Kernels are compiled from MSL with fast math off (newLibraryWithSource), or loaded
from a metallib when the compiler made one (xcrun metal).
"""
from __future__ import annotations

import ctypes
import functools
import platform
import struct
from dataclasses import dataclass
from typing import Any

from tg_metal.objc import AutoreleasePool, MTLSize, error_text, id_t, libsystem, metal, nsstring, objc_class, send, to_str
from tg_metal.renderer import MAX_BUFFER_ARGS

STORAGE_MODE_SHARED = 0  # MTLResourceStorageModeShared << MTLResourceStorageModeShift
STATUS_ERROR = 5         # MTLCommandBufferStatusError
GPU_FAMILY_APPLE7 = 1007  # MTLGPUFamilyApple7: M1 and later, the first with simdgroup_matrix
_MAGIC = b"TGMETAL1"


def macos_version() -> tuple[int, ...]:
  release = platform.mac_ver()[0]
  return tuple(int(x) for x in release.split(".") if x.isdigit()) if release else (0,)


class MetalError(RuntimeError):
  pass


class MetalCompileError(MetalError):
  pass


@dataclass(frozen=True)
class MetalBinary:
  """What MetalCompiler makes: the kernel's MSL, the metallib xcrun built from it (b"": none, the runtime compiles the
  MSL), and in mock mode the CPU build (a shared object)."""
  msl: str
  metallib: bytes = b""
  mock: bytes = b""

  def pack(self) -> bytes:
    src = self.msl.encode()
    return _MAGIC + struct.pack("<QQQ", len(src), len(self.metallib), len(self.mock)) + src + self.metallib + self.mock

  @staticmethod
  def unpack(data: bytes) -> MetalBinary:
    if not data.startswith(_MAGIC):
      raise MetalError("not a tg-metal binary (compiled by another tg-metal version or device?)")
    n_src, n_lib, n_mock = struct.unpack_from("<QQQ", data, len(_MAGIC))
    at = len(_MAGIC) + 24
    return MetalBinary(data[at:at + n_src].decode(), data[at + n_src:at + n_src + n_lib], data[at + n_src + n_lib:at + n_src + n_lib + n_mock])


@dataclass(frozen=True)
class MetalBuffer:
  """A buffer handle: the allocation (an MTLBuffer; in mock mode its key), the byte offset of this view in it, and
  the CPU address of the allocation's first byte (shared storage)."""
  buf: int
  offset: int
  ptr: int

  def view(self, offset: int) -> MetalBuffer:
    return MetalBuffer(self.buf, self.offset + offset, self.ptr)


@dataclass(frozen=True)
class Launch:
  """One dispatch: a kernel (a Driver.function handle), its buffers and int arguments, and its launch dims."""
  fn: Any
  bufs: tuple[MetalBuffer, ...]
  vals: tuple[int, ...]
  grid: tuple[int, int, int]
  block: tuple[int, int, int]


def launch_dims(global_size: tuple[int, ...], local_size: tuple[int, ...]) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
  """(threadgroups, threads per threadgroup) as 3 dims each: missing dims are 1."""
  if len(global_size) > 3 or len(local_size) > 3:
    raise ValueError(f"a Metal dispatch has 3 dims, not global_size={global_size} local_size={local_size}")
  grid, block = (*global_size, 1, 1, 1)[:3], (*local_size, 1, 1, 1)[:3]
  return (grid[0], grid[1], grid[2]), (block[0], block[1], block[2])


class Driver:
  """What tg does with a Metal device. Every method raises MetalError on failure."""
  name: str = ""
  bfloat: bool = True            # MSL's bfloat type compiles here (Metal 3.1)
  simdgroup_matrix: bool = True  # the GPU has simdgroup_matrix (the tensor cores)

  def alloc(self, size: int) -> MetalBuffer: raise NotImplementedError
  def free(self, buf: MetalBuffer) -> None: raise NotImplementedError
  def synchronize(self) -> None: raise NotImplementedError
  def function(self, binary: MetalBinary, name: str) -> Any: raise NotImplementedError

  def run(self, launches: list[Launch], wait: bool) -> float | None:
    """Run `launches` in order, as one unit of work; with `wait`, return once they are done, with the seconds they took."""
    raise NotImplementedError

  def copyin(self, dest: MetalBuffer, src: memoryview) -> None:
    self.synchronize()  # a kernel still in flight may read what this overwrites
    ctypes.memmove(dest.ptr + dest.offset, (ctypes.c_char * src.nbytes).from_buffer_copy(src) if src.readonly else
                   (ctypes.c_char * src.nbytes).from_buffer(src), src.nbytes)

  def copyout(self, dest: memoryview, src: MetalBuffer) -> None:
    self.synchronize()
    ctypes.memmove((ctypes.c_char * dest.nbytes).from_buffer(dest), src.ptr + src.offset, dest.nbytes)


@functools.cache
def system_device() -> int:
  """The Mac's Metal GPU (MTLCreateSystemDefaultDevice), made once; every instance (METAL:n) uses it."""
  device = metal().MTLCreateSystemDefaultDevice()
  if not device:
    raise MetalError("MTLCreateSystemDefaultDevice() found no Metal GPU")
  return int(device)


@dataclass(frozen=True)
class MetalFunction:
  pipeline: int
  max_threads: int
  name: str


class MetalDriver(Driver):
  """The GPU of MTLCreateSystemDefaultDevice (macOS only)."""

  def __init__(self) -> None:
    self.device = system_device()
    with AutoreleasePool():  # the name is an autoreleased NSString
      self.name = to_str(send(self.device, "name"))
    self.queue = send(self.device, "newCommandQueue")
    self.bfloat = macos_version() >= (14, 0)
    self.simdgroup_matrix = bool(send(self.device, "supportsFamily:", GPU_FAMILY_APPLE7))
    self.in_flight: list[int] = []  # retained command buffers, committed and not yet waited for
    self.libraries: dict[str, int] = {}  # MSL -> the MTLLibrary this process compiled from it (the compiler's check)

  def alloc(self, size: int) -> MetalBuffer:
    buf = send(self.device, "newBufferWithLength:options:", max(size, 1), STORAGE_MODE_SHARED)
    if not buf:
      raise MemoryError(f"Metal: newBufferWithLength:{size} failed (out of GPU memory)")
    return MetalBuffer(int(buf), 0, int(send(buf, "contents")))

  def free(self, buf: MetalBuffer) -> None:
    send(buf.buf, "release")  # a command buffer still running retains the buffers it uses

  def compile_msl(self, src: str) -> int:
    """newLibraryWithSource:options:error: with fast math off (IEEE NaN, infinity and rounding, as the renderer declares)."""
    if (lib := self.libraries.get(src)) is not None:
      return lib
    with AutoreleasePool():
      options = send(send(objc_class("MTLCompileOptions"), "alloc"), "init")
      send(options, "setFastMathEnabled:", False)
      text, err = nsstring(src), id_t()
      lib = send(self.device, "newLibraryWithSource:options:error:", text, options, ctypes.byref(err))
      send(text, "release")
      send(options, "release")
      if not lib:
        raise MetalCompileError(f"Metal can't compile the kernel: {error_text(err.value)}\n--- source ---\n{src}")
    self.libraries[src] = int(lib)
    return int(lib)

  def _metallib(self, data: bytes) -> int:
    buf = ctypes.create_string_buffer(data, len(data))
    dispatch_data = libsystem().dispatch_data_create(buf, len(data), None, None)  # copies the bytes
    with AutoreleasePool():
      err = id_t()
      lib = send(self.device, "newLibraryWithData:error:", dispatch_data, ctypes.byref(err))
      send(dispatch_data, "release")
      if not lib:
        raise MetalError(f"Metal can't load the metallib: {error_text(err.value)}")
    return int(lib)

  def function(self, binary: MetalBinary, name: str) -> MetalFunction:
    lib = self._metallib(binary.metallib) if binary.metallib else self.compile_msl(binary.msl)
    with AutoreleasePool():
      fname = nsstring(name)
      fn = send(lib, "newFunctionWithName:", fname)
      send(fname, "release")
      if not fn:
        raise MetalError(f"the Metal library has no function {name}")
      err = id_t()
      pipeline = send(self.device, "newComputePipelineStateWithFunction:error:", fn, ctypes.byref(err))
      send(fn, "release")
      if not pipeline:
        raise MetalError(f"Metal can't make a compute pipeline of {name}: {error_text(err.value)}")
    return MetalFunction(int(pipeline), int(send(pipeline, "maxTotalThreadsPerThreadgroup")), name)

  def run(self, launches: list[Launch], wait: bool) -> float | None:
    for lc in launches:
      if (threads := lc.block[0] * lc.block[1] * lc.block[2]) > lc.fn.max_threads:
        raise MetalError(f"{lc.fn.name}: {threads} threads per threadgroup, more than its pipeline's {lc.fn.max_threads}")
      if len(lc.bufs) + len(lc.vals) > MAX_BUFFER_ARGS:
        raise MetalError(f"{lc.fn.name}: {len(lc.bufs) + len(lc.vals)} buffer arguments, Metal binds at most {MAX_BUFFER_ARGS}")
    with AutoreleasePool():
      cb = send(self.queue, "commandBuffer")
      enc = send(cb, "computeCommandEncoder")
      for lc in launches:
        send(enc, "setComputePipelineState:", lc.fn.pipeline)
        for i, b in enumerate(lc.bufs):
          send(enc, "setBuffer:offset:atIndex:", b.buf, b.offset, i)
        for j, v in enumerate(lc.vals):
          val = ctypes.c_int32(v)  # setBytes copies it
          send(enc, "setBytes:length:atIndex:", ctypes.addressof(val), 4, len(lc.bufs) + j)
        send(enc, "dispatchThreadgroups:threadsPerThreadgroup:", MTLSize(*lc.grid), MTLSize(*lc.block))
      send(enc, "endEncoding")
      send(cb, "retain")  # past the pool: until it has been waited for
      send(cb, "commit")
    self.in_flight.append(int(cb))
    if not wait:
      return None
    send(cb, "retain")  # alive past synchronize's release, for its timestamps
    try:
      self.synchronize()
      return float(send(cb, "GPUEndTime") - send(cb, "GPUStartTime"))
    finally:
      send(cb, "release")

  def synchronize(self) -> None:
    done, self.in_flight = self.in_flight, []
    first_error = ""
    with AutoreleasePool():  # the NSError's description is autoreleased
      for cb in done:
        send(cb, "waitUntilCompleted")
        if not first_error and send(cb, "status") == STATUS_ERROR:
          first_error = error_text(send(cb, "error"))
        send(cb, "release")
    if first_error:
      raise MetalError(f"a Metal command buffer failed: {first_error}")
