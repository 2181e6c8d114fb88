"""Helpers the weight loaders share: tensors over file bytes, on DISK or moved in through the host."""
from __future__ import annotations

import os
from typing import Any

from tg.device import Buffer, Device
from tg.dtype import DType
from tg.helpers import prod
from tg.lazy import LazyBuffer
from tg.shape.symbolic import Node
from tg.tensor import Tensor

PathLike = str | os.PathLike[str]


class WeightsFileError(ValueError):
  """A weights file that is malformed, truncated or lies about its contents. Every loader raises this one type for
  such a file, with a message that names the file and the tensor or header field at fault."""


def _is_int(x: Any) -> bool:
  return isinstance(x, int) and not isinstance(x, bool)


def _check_extent(path: str, what: str, start: int, nbytes: int, size: int) -> None:
  """Raise unless bytes start..start+nbytes of `path` (`size` bytes long) lie inside it: every loader checks a tensor's or
  a storage's extent with this before mapping or reading it."""
  if start < 0 or nbytes < 0 or start + nbytes > size:
    raise WeightsFileError(f"{path} is truncated or lying: {what} needs bytes {start}..{start + nbytes}, the file has {size}")


# ---------- helpers shared by the loaders ----------

def _disk_tensor(path: str, byte_offset: int, shape: tuple[int, ...], dtype: DType) -> Tensor:
  """A realized DISK tensor over `shape` elements of `dtype` stored in order at `byte_offset` of `path`.

  The file is mapped read-only: a loader never writes to, or grows, the file it reads (its callers have checked
  that the bytes lie inside the file). The buffer is allocated now, so it maps the file as it is at load time (a
  file replaced later, e.g. by safe_save to the same path, doesn't change tensors already loaded)."""
  buf = Buffer("DISK", prod(shape), dtype, options=(path, byte_offset, "r")).allocate()
  return Tensor(LazyBuffer.from_buffer(buf, shape), device="DISK")


def _host_tensor(raw: Any, shape: tuple[int, ...], dtype: DType) -> Tensor:
  """A realized tensor on Device.DEFAULT holding `raw`, the row-major bytes of `shape` elements of `dtype`.

  Goes through a Buffer rather than Tensor(numpy array) so dtypes numpy lacks (bfloat16) arrive bit-exact."""
  buf = Buffer(Device.DEFAULT, prod(shape), dtype).copyin(memoryview(raw).cast("B"))
  return Tensor(LazyBuffer.from_buffer(buf, shape), device=Device.DEFAULT)


def _read_bytes(path: str, offset: int, n: int) -> bytes:
  with open(path, "rb") as f:
    f.seek(offset)
    data = f.read(n)
  if len(data) != n:
    raise WeightsFileError(f"{path} is truncated: needed {n} bytes at offset {offset}, got {len(data)}")
  return data


def _concrete_shape(t: Tensor, what: str) -> tuple[int, ...]:
  if any(isinstance(s, Node) for s in t.shape):
    raise ValueError(f"{what} has a symbolic shape {t.shape}: files store concrete shapes")
  return tuple(s for s in t.shape if isinstance(s, int))
