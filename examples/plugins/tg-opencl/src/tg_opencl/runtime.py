"""The OpenCL runtime: one context and in-order queue per device instance, its memory, compiler and programs."""
from __future__ import annotations

import functools
import warnings
from typing import Any

import numpy as np
import pyopencl as cl

from tg.device import Compiler, LRUAllocator


class CLContext:
  """One device instance's OpenCL state: a context and an in-order queue on one OpenCL device. Every launch and copy
  goes into the queue in order, so a copyin's buffer is written before any kernel that reads it."""

  def __init__(self, device: cl.Device) -> None:
    self.device = device
    self.ctx = cl.Context([device])
    self.queue = cl.CommandQueue(self.ctx, device, properties=cl.command_queue_properties.PROFILING_ENABLE)

  def finish(self) -> None:
    self.queue.finish()


class CLAllocator(LRUAllocator):
  """cl.Buffers. Copies are blocking in host terms: copyin returns after reading `src`, copyout after writing `dest`."""

  def __init__(self, cl_ctx: CLContext) -> None:
    super().__init__()
    self.cl = cl_ctx

  def _alloc(self, size: int, options: Any) -> cl.Buffer:
    try:
      return cl.Buffer(self.cl.ctx, cl.mem_flags.READ_WRITE, max(size, 1))  # OpenCL has no empty buffers
    except cl.MemoryError as e:
      raise MemoryError(str(e)) from e  # LRUAllocator frees its cache and tries again

  def _free(self, opaque: Any, options: Any) -> None:
    opaque.release()

  def copyin(self, dest: Any, src: memoryview) -> None:
    cl.enqueue_copy(self.cl.queue, dest, src, is_blocking=True)

  def copyout(self, dest: memoryview, src: Any) -> None:
    cl.enqueue_copy(self.cl.queue, dest, src, is_blocking=True)

  def view(self, opaque: Any, byte_offset: int, size: int) -> Any:
    if byte_offset == 0:  # the same memory read as another dtype or a shorter buffer: a kernel never reads past its size
      return opaque
    if byte_offset % (self.cl.device.mem_base_addr_align // 8):
      raise NotImplementedError(f"OpenCL sub-buffers start at multiples of {self.cl.device.mem_base_addr_align // 8} bytes, not {byte_offset}")
    return opaque.get_sub_region(byte_offset, size)


class CLCompiler(Compiler):
  """OpenCL C to the device's program binary. The cache key names the platform, device and driver: a binary is only
  valid for the driver that made it."""

  def __init__(self, cl_ctx: CLContext) -> None:
    dev = cl_ctx.device
    super().__init__(f"opencl {dev.platform.name} {dev.name} {dev.driver_version}")
    self.ctx: cl.Context | None = cl_ctx.ctx
    self.where = (dev.platform.name, dev.name)
    # strict IEEE division and sqrt where the device offers it (OpenCL allows 2.5 ulp otherwise)
    exact = dev.single_fp_config & cl.device_fp_config.CORRECTLY_ROUNDED_DIVIDE_SQRT
    self.options = ["-w", *(["-cl-fp32-correctly-rounded-divide-sqrt"] if exact else [])]

  def __getstate__(self) -> dict[str, Any]:
    # BEAM search pickles the compiler into its worker processes: they get the device's name and make their own context
    return {**self.__dict__, "ctx": None}

  def compile(self, src: str) -> bytes:
    ctx = self.ctx if self.ctx is not None else _worker_context(*self.where)
    try:
      prg = cl.Program(ctx, src).build(options=self.options)
    except cl.RuntimeError as e:
      raise RuntimeError(f"OpenCL failed to compile a kernel:\n{e}\n--- source ---\n{src}") from e
    binary: bytes = prg.binaries[0]
    return binary


@functools.cache
def _worker_context(platform: str, device: str) -> cl.Context:
  return cl.Context([next(d for p in cl.get_platforms() if p.name == platform for d in p.get_devices() if d.name == device)])


class CLProgram:
  """One kernel. Arguments: the kernel's buffers in order, then its symbolic sizes as int32. OpenCL's global size
  counts work-items, so the launch is global_size workgroups times local_size."""

  def __init__(self, cl_ctx: CLContext, name: str, lib: bytes) -> None:
    self.cl, self.name = cl_ctx, name
    with warnings.catch_warnings():  # a driver's log of a build from binary repeats the compile's warnings
      warnings.simplefilter("ignore", cl.CompilerWarning)
      self.prg = cl.Program(cl_ctx.ctx, [cl_ctx.device], [lib]).build()
    self.kernel = cl.Kernel(self.prg, name)

  def __call__(self, *bufs: Any, global_size: tuple[int, ...] = (), local_size: tuple[int, ...] = (),
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    self.kernel.set_args(*bufs, *[np.int32(v) for v in vals])
    dims = max(len(global_size), len(local_size), 1)  # missing dims are 1
    local = (*local_size, *(1,) * (dims - len(local_size)))
    glob = tuple(g * lx for g, lx in zip((*global_size, *(1,) * (dims - len(global_size))), local))
    event = cl.enqueue_nd_range_kernel(self.cl.queue, self.kernel, glob, local)
    if not wait:
      return None
    event.wait()
    return float(event.profile.end - event.profile.start) * 1e-9
