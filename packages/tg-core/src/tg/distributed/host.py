"""A tensor's bytes in host memory for MPI, and a result from host memory back into a tensor.

MPI reads and writes host memory (an MPI built for a GPU could take device pointers; tg doesn't assume one). On
devices whose buffers are host memory (the CPU devices and the interpreter: a HostAllocator's bytearray) MPI is handed that memory
itself, through the buffer protocol, with no copy; other devices copy out and back in.

A result never overwrites the memory the tensor had: it lands in a new buffer, and the tensor takes it with
`Tensor.assign`, as any in-place update in tg does. So a lazy value built from the old one keeps the old value (the
scheduler keeps a copy only when something still reads it), the tensor keeps its buffer (a TinyJit capture that reads
it sees the new value) and its identity (an optimizer holding it sees the new value).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from tg.device import Buffer, Device, HostAllocator
from tg.dtype import DType, dtypes
from tg.helpers import prod
from tg.lazy import LazyBuffer
from tg.tensor import Tensor


def storage_np(dtype: DType) -> Any:
  """The numpy dtype of `dtype`'s bytes as stored (bfloat16, which numpy lacks, as its raw 16-bit words)."""
  return np.dtype(np.uint16) if dtype == dtypes.bfloat16 else np.dtype(dtype.np)


def plain(t: Tensor, what: str) -> LazyBuffer:
  """`t`'s LazyBuffer, refusing what MPI can't send: a tensor sharded over several devices, a symbolic shape."""
  lb = t.lazydata
  if not isinstance(lb, LazyBuffer):
    raise TypeError(f"{what} of a tensor on several devices ({t.device}): communicate one device's tensor, e.g. t.to(device)")
  shape(t, what)
  return lb


def shape(t: Tensor, what: str) -> tuple[int, ...]:
  out = tuple(s for s in t.shape if isinstance(s, int))
  if len(out) != len(t.shape):
    raise TypeError(f"{what} needs a concrete shape, not {t.shape}: reshape to the bound sizes first")
  return out


def host_memory(buf: Buffer) -> memoryview | None:
  """The bytes of `buf` itself when its device keeps buffers in host memory and they are writable, else None."""
  buf.ensure_allocated()
  if not isinstance(buf.allocator, HostAllocator):
    return None
  mv = memoryview(buf._buf).cast("B")
  if mv.readonly:  # a DISK tensor's read-only file mapping
    return None
  Device[buf.device].synchronize()  # CPU devices run synchronously; asked anyway, as Buffer.as_buffer does
  return mv


def read(t: Tensor, what: str) -> np.ndarray:
  """`t`'s value as a flat host array of its storage dtype: its own memory when possible (don't write to it), else a copy."""
  lb = plain(t, what)
  n = prod(t.shape)
  if lb.base.realized is None:
    t.realize()
    lb = plain(t, what)
  buf = lb.base.buffer
  if lb.st.contiguous and buf.size == n and (mv := host_memory(buf)) is not None:
    return np.frombuffer(mv, dtype=storage_np(t.dtype), count=n)
  return np.frombuffer(t.data(), dtype=storage_np(t.dtype), count=n)


def new_buffer(device: str, n: int, dtype: DType) -> tuple[Buffer | None, np.ndarray]:
  """A place for a result of n elements: (a new Buffer on `device`, its memory as an array) when the device keeps buffers
  in host memory, else (None, a host array) to copy in afterwards."""
  if Device[device].renderer is None:
    raise TypeError(f"can't communicate into a tensor on {device}, which runs no kernels: move it to a compute device first")
  buf = Buffer(device, n, dtype)
  if n and (mv := host_memory(buf)) is not None:
    return buf, np.frombuffer(mv, dtype=storage_np(dtype), count=n)
  return None, np.empty(n, dtype=storage_np(dtype))


def to_tensor(buf: Buffer | None, arr: np.ndarray, shape: tuple[int, ...], dtype: DType, device: str) -> Tensor:
  """A realized tensor over the result: the buffer `new_buffer` gave, or a new one `arr` is copied into."""
  if buf is None:
    buf = Buffer(device, arr.size, dtype).copyin(memoryview(np.ascontiguousarray(arr).view(np.uint8).data))
  return Tensor(LazyBuffer.from_buffer(buf, shape), device=device)


def write(t: Tensor, buf: Buffer | None, arr: np.ndarray) -> Tensor:
  """Give `t` the value in the result `arr` (from `new_buffer` for t's shape), in place: see the module's docstring."""
  new = to_tensor(buf, arr, shape(t, "write"), t.dtype, t.device)
  return t.assign(new).realize()
