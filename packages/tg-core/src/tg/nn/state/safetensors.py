"""The safetensors format: an 8-byte header length, a JSON header, then the raw little-endian data."""
from __future__ import annotations

import json
import os
import stat
import sys
import uuid
from typing import Any

from tg.dtype import DType, dtypes
from tg.helpers import prod
from tg.nn.state._common import PathLike, WeightsFileError, _concrete_shape, _disk_tensor, _is_int
from tg.tensor import Tensor

# ---------- safetensors ----------
# https://github.com/huggingface/safetensors: 8-byte little-endian header size N, N bytes of JSON
# {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}, then the data,
# little-endian and row-major, with offsets relative to the first byte after the header.

safe_dtypes: dict[str, DType] = {
  "BOOL": dtypes.bool, "I8": dtypes.int8, "U8": dtypes.uint8, "I16": dtypes.int16, "U16": dtypes.uint16,
  "I32": dtypes.int32, "U32": dtypes.uint32, "I64": dtypes.int64, "U64": dtypes.uint64,
  "F16": dtypes.float16, "BF16": dtypes.bfloat16, "F32": dtypes.float32, "F64": dtypes.float64,
}
inverse_safe_dtypes: dict[DType, str] = {v: k for k, v in safe_dtypes.items()}


def _safe_header(path: str) -> tuple[int, dict[str, Any], int]:
  """(header length, parsed header, file size) of a safetensors file, reading only the header."""
  size = os.path.getsize(path)
  with open(path, "rb") as f:
    head = f.read(8)
    if len(head) < 8:
      raise WeightsFileError(f"{path} is not a safetensors file: it's only {size} bytes long")
    n = int.from_bytes(head, "little")
    if n > size - 8:
      raise WeightsFileError(f"{path} is not a safetensors file (or is truncated): its header length says {n} bytes, "
                             f"the file has {size - 8} after it")
    try:
      header = json.loads(f.read(n))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
      raise WeightsFileError(f"{path} is not a safetensors file: its header isn't JSON ({e})") from None
    except RecursionError:
      raise WeightsFileError(f"{path} is not a safetensors file: its header is nested too deeply to be one") from None
  if not isinstance(header, dict):
    raise WeightsFileError(f"{path} is not a safetensors file: its header is a JSON {type(header).__name__}, not an object")
  if not isinstance(header.get("__metadata__", {}), dict):
    raise WeightsFileError(f"{path}: the header's __metadata__ is a JSON {type(header['__metadata__']).__name__}, not an object")
  return n, header, size


def _tensor_entry(path: str, name: str, info: Any, data_bytes: int) -> tuple[DType, tuple[int, ...], int, int]:
  """(dtype, shape, begin, end) of one header entry, each field checked: ints that are ints, offsets that fit."""
  where = f"{path}: tensor {name!r}"
  if not isinstance(info, dict):
    raise WeightsFileError(f"{where}: its header entry is a JSON {type(info).__name__}, not an object with dtype, shape, data_offsets")
  for field in ("dtype", "shape", "data_offsets"):
    if field not in info:
      raise WeightsFileError(f"{where}: its header entry has no {field} (it needs dtype, shape and data_offsets): {info!r}")
  if not isinstance(info["dtype"], str) or (dtype := safe_dtypes.get(info["dtype"])) is None:
    raise WeightsFileError(f"{where}: dtype {info['dtype']!r} is not one tg can load (supported: {', '.join(safe_dtypes)})")
  shape = info["shape"]
  if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
    raise WeightsFileError(f"{where}: shape {shape!r} is not a list of non-negative integers")
  offsets = info["data_offsets"]
  if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_int(o) for o in offsets):
    raise WeightsFileError(f"{where}: data_offsets {offsets!r} is not a list of two integers [begin, end]")
  begin, end = offsets
  nbytes = prod(shape) * dtype.itemsize
  if not 0 <= begin <= end <= data_bytes or end - begin != nbytes:
    raise WeightsFileError(f"{where} ({info['dtype']} {shape}, {nbytes} bytes) has data_offsets {offsets}, which don't fit "
                           f"its size or the file's {data_bytes} data bytes")
  return dtype, tuple(shape), begin, end


def _check_no_overlap(path: str, extents: list[tuple[int, int, str]]) -> None:
  """Tensors may not share bytes: a file where they do is damaged or crafted (writing one would change another)."""
  last_end, last_name = 0, ""
  for begin, end, name in sorted(e for e in extents if e[1] > e[0]):
    if begin < last_end:
      raise WeightsFileError(f"{path}: tensors {last_name!r} and {name!r} overlap (data_offsets end at {last_end} and begin at {begin})")
    last_end, last_name = end, name


def safe_load_metadata(fn: PathLike) -> tuple[Tensor, int, dict[str, Any]]:
  """(the whole file as a uint8 DISK tensor, the JSON header's length, the parsed header), as tinygrad returns.

  The header holds each tensor's dtype, shape and data_offsets, and the user's metadata under "__metadata__"."""
  path = os.fspath(fn)
  n, header, size = _safe_header(path)
  return _disk_tensor(path, 0, (size,), dtypes.uint8), n, header


def safe_load(fn: PathLike) -> dict[str, Tensor]:
  """The tensors of a safetensors file, as realized DISK tensors mapped read-only from the file (nothing is read yet).

  Every entry of the header is checked first; a malformed one raises WeightsFileError naming the file and the field.
  The tensors read the file's pages when they are used: replace the file by a rename (as safe_save does) while they
  live, never rewrite it in place (a read of pages truncated away under a live mapping is SIGBUS, which kills the
  process, as it does any program that maps a file)."""
  path = os.fspath(fn)
  n, header, size = _safe_header(path)
  entries = {name: _tensor_entry(path, name, info, size - 8 - n) for name, info in header.items() if name != "__metadata__"}
  _check_no_overlap(path, [(begin, end, name) for name, (_, _, begin, end) in entries.items()])
  return {name: _disk_tensor(path, 8 + n + begin, shape, dtype) for name, (dtype, shape, begin, _) in entries.items()}


def _le_bytes(t: Tensor) -> memoryview:
  """A tensor's bytes, little-endian as the file formats store them."""
  data = t.data()
  if sys.byteorder == "big" and t.dtype.itemsize > 1:
    import numpy as np
    data = memoryview(np.frombuffer(data, dtype=f"u{t.dtype.itemsize}").byteswap().tobytes())
  return data


def safe_save(tensors: dict[str, Tensor], fn: PathLike, metadata: dict[str, str] | None = None) -> None:
  """Write `tensors` (and string `metadata`) to `fn` in the safetensors format.

  Tensors are copied out one at a time, so saving needs RAM for the largest tensor, not for all of them. The
  file is written under a temporary name and then renamed over `fn`, so a failed save leaves no half-written
  file, and tensors still mapped from an older `fn` (safe_load of the same path) keep reading the old data. A `fn`
  that is a symbolic link is saved to the file it points to (the link stays), and a file saved over keeps its
  permissions (a checkpoint made private stays private)."""
  path = os.path.realpath(os.fspath(fn))
  header: dict[str, Any] = {}
  if metadata:
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
      raise TypeError("safe_save metadata must map str to str (the safetensors format stores only strings)")
    header["__metadata__"] = dict(metadata)
  offset = 0
  for name, t in tensors.items():
    if name == "__metadata__":
      raise ValueError("'__metadata__' is reserved by the safetensors format; pass metadata=... instead")
    if t.dtype not in inverse_safe_dtypes:
      raise TypeError(f"safe_save: tensor {name!r} has dtype {t.dtype}, which safetensors can't store")
    shape = _concrete_shape(t, f"safe_save: tensor {name!r}")
    nbytes = prod(shape) * t.dtype.itemsize
    header[name] = {"dtype": inverse_safe_dtypes[t.dtype], "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
    offset += nbytes
  j = json.dumps(header, separators=(",", ":")).encode()
  j += b" " * (-len(j) % 8)  # the spec pads the header with spaces so the data starts 8-byte aligned
  # a fresh name next to the target (so the rename stays on one filesystem), opened as open() would (mkstemp
  # would leave the saved file readable by its owner only)
  tmp = f"{os.path.abspath(path)}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
  try:
    with open(tmp, "xb") as f:
      f.write(len(j).to_bytes(8, "little"))
      f.write(j)
      for t in tensors.values():
        f.write(_le_bytes(t))
    try:
      os.chmod(tmp, stat.S_IMODE(os.stat(path).st_mode))
    except FileNotFoundError:  # a new file: open()'s mode, as above
      pass
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.unlink(tmp)
    raise
