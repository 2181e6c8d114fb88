"""GGUF files (v2/v3): key-value metadata and tensors, with common quantizations dequantized."""
from __future__ import annotations

import os
import struct
from typing import Any

from tg.device import Device
from tg.dtype import DType, dtypes
from tg.helpers import prod, round_up
from tg.nn.state._common import PathLike, WeightsFileError, _check_extent, _disk_tensor, _host_tensor, _read_bytes
from tg.tensor import Tensor

# ---------- GGUF ----------
# https://github.com/ggerganov/ggml/blob/master/docs/gguf.md: "GGUF", version, tensor and kv counts, the kv
# pairs, the tensor infos (name, dims with the fastest-varying first, ggml type, offset), then the tensor data
# from the next multiple of general.alignment (32 by default). All little-endian.

_GGUF_SCALARS: dict[int, str] = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_GGUF_STRING, _GGUF_ARRAY = 8, 9
_GGML_PLAIN: dict[int, DType] = {0: dtypes.float32, 1: dtypes.float16, 24: dtypes.int8, 25: dtypes.int16, 26: dtypes.int32,
                                 27: dtypes.int64, 28: dtypes.float64, 30: dtypes.bfloat16}
# ggml type -> (elements per block, bytes per block) for the quantized types this loader dequantizes
_GGML_BLOCKS: dict[int, tuple[int, int]] = {2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
                                            12: (256, 144), 13: (256, 176), 14: (256, 210)}
_GGML_NAMES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 9: "Q8_1", 10: "Q2_K", 11: "Q3_K",
               12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 15: "Q8_K", 24: "I8", 25: "I16", 26: "I32", 27: "I64", 28: "F64", 30: "BF16"}


_MAX_NESTING = 8  # arrays of arrays: real files nest one deep; a crafted one must not exhaust the stack
_MIN_BYTES = {_GGUF_STRING: 8, _GGUF_ARRAY: 12, **{t: struct.calcsize(f) for t, f in _GGUF_SCALARS.items()}}  # a value's least size


class _GGUFReader:
  """Reads the header of a GGUF file through a mapping of it (headers can hold vocabularies of 100k+ strings).

  Nothing it reads is believed before it is checked against the bytes left: a count or a length that can't fit
  in the file is an error at once, never a loop or an allocation of that size."""

  def __init__(self, data: Any, path: str) -> None:
    self.data, self.pos, self.path = data, 0, path

  def need(self, n: int, what: str) -> None:
    if self.pos + n > len(self.data):
      raise WeightsFileError(f"{self.path} is truncated or lying: {what} needs {n} bytes at byte {self.pos}, the file has {len(self.data)}")

  def count(self, n: int, least: int, what: str) -> int:
    """`n` things of at least `least` bytes each, which must fit in the rest of the file."""
    if n * least > len(self.data) - self.pos:
      raise WeightsFileError(f"{self.path}: {what} count {n} can't be right: that many need {n * least}+ bytes, "
                             f"{len(self.data) - self.pos} are left at byte {self.pos}")
    return n

  def scalar(self, fmt: str, what: str = "the header") -> Any:
    self.need(struct.calcsize(fmt), what)
    v = struct.unpack_from(fmt, self.data, self.pos)[0]
    self.pos += struct.calcsize(fmt)
    return v

  def string(self, what: str = "a string") -> str:
    n = self.scalar("<Q", what)
    self.need(n, f"{what} (a string of {n} bytes)")
    s = bytes(self.data[self.pos:self.pos + n]).decode("utf-8", errors="replace")
    self.pos += n
    return s

  def value(self, vtype: int, what: str, depth: int = 0) -> Any:
    if vtype == _GGUF_STRING:
      return self.string(what)
    if vtype == _GGUF_ARRAY:
      if depth >= _MAX_NESTING:
        raise WeightsFileError(f"{self.path}: {what} nests arrays more than {_MAX_NESTING} deep")
      itype, n = self.scalar("<I", what), self.scalar("<Q", what)
      if itype not in _MIN_BYTES:
        raise WeightsFileError(f"{self.path}: {what} is an array of unknown value type {itype} at byte {self.pos}")
      self.count(n, _MIN_BYTES[itype], f"{what}: the array's element")
      if itype in _GGUF_SCALARS and itype != 7:  # numbers in bulk: one numpy read, not n struct calls
        import numpy as np
        dt = np.dtype(_GGUF_SCALARS[itype])
        # bytes first: an array over the mapping itself would keep it from being closed
        arr = np.frombuffer(bytes(self.data[self.pos:self.pos + n * dt.itemsize]), dtype=dt)
        self.pos += n * dt.itemsize
        return arr.tolist()
      return [self.value(itype, what, depth + 1) for _ in range(n)]
    if vtype in _GGUF_SCALARS:
      return self.scalar(_GGUF_SCALARS[vtype], what)
    raise WeightsFileError(f"{self.path}: {what} has unknown value type {vtype} at byte {self.pos}")


def ggml_dequantize(raw: Any, ggml_type: int) -> Any:
  """Blocks of a quantized ggml type (bytes or a uint8 numpy array) -> a flat float32 numpy array.

  Follows ggml's reference dequantization (ggml-quants.c) block layout by block layout."""
  import numpy as np
  if ggml_type not in _GGML_BLOCKS:
    raise NotImplementedError(f"dequantizing ggml type {_GGML_NAMES.get(ggml_type, ggml_type)} is not supported")
  ts = _GGML_BLOCKS[ggml_type][1]
  b = np.frombuffer(raw, dtype=np.uint8) if not isinstance(raw, np.ndarray) else raw.view(np.uint8).reshape(-1)
  if b.size % ts:
    raise ValueError(f"{b.size} bytes is not a whole number of {_GGML_NAMES[ggml_type]} blocks of {ts} bytes")
  b = b.reshape(-1, ts)
  nb = b.shape[0]

  def f16(lo: int) -> Any:  # a float16 field of every block, as a float32 column
    return b[:, lo:lo + 2].copy().view(np.float16).astype(np.float32)

  def nibbles(qs: Any) -> Any:  # 16 bytes -> 32 values: low nibbles are elements 0..15, high nibbles 16..31
    return np.concatenate([qs & 0xF, qs >> 4], axis=-1).astype(np.int32)

  def f32(x: Any) -> Any:  # quantized ints to float32 before any arithmetic: int32 * float32 would be float64
    return x.astype(np.float32)

  def high_bits(qh_bytes: Any) -> Any:  # a 32-bit field -> its 32 bits, bit j for element j
    qh = qh_bytes.copy().view("<u4").astype(np.uint32)
    return ((qh >> np.arange(32, dtype=np.uint32)) & 1).astype(np.int32)

  if ggml_type == 8:  # Q8_0: d, 32 x int8
    return (f16(0) * b[:, 2:].view(np.int8).astype(np.float32)).reshape(-1)
  if ggml_type == 2:  # Q4_0: d, 16 bytes of 4-bit values offset by 8
    return (f16(0) * f32(nibbles(b[:, 2:]) - 8)).reshape(-1)
  if ggml_type == 3:  # Q4_1: d, m, 16 bytes of 4-bit values; x = q*d + m
    return (f16(0) * f32(nibbles(b[:, 4:])) + f16(2)).reshape(-1)
  if ggml_type == 6:  # Q5_0: d, 32 high bits, 16 bytes of low nibbles; offset by 16
    return (f16(0) * f32((nibbles(b[:, 6:]) | (high_bits(b[:, 2:6]) << 4)) - 16)).reshape(-1)
  if ggml_type == 7:  # Q5_1: d, m, 32 high bits, 16 bytes of low nibbles
    return (f16(0) * f32(nibbles(b[:, 8:]) | (high_bits(b[:, 4:8]) << 4)) + f16(2)).reshape(-1)
  if ggml_type in (12, 13):  # Q4_K / Q5_K: d, dmin, 12 bytes of 6-bit scales and mins for 8 sub-blocks of 32
    s = b[:, 4:16].astype(np.int32)
    sc = np.concatenate([s[:, 0:4] & 63, (s[:, 8:12] & 0xF) | ((s[:, 0:4] >> 6) << 4)], axis=1)
    mn = np.concatenate([s[:, 4:8] & 63, (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)], axis=1)
    qs = b[:, -128:].reshape(nb, 4, 32).astype(np.int32)  # each 32 bytes: low nibbles one sub-block, high the next
    q = np.stack([qs & 0xF, qs >> 4], axis=2).reshape(nb, 8, 32)
    if ggml_type == 13:  # Q5_K: 32 bytes of fifth bits, bit k of byte l for element l of sub-block k
      qh = b[:, 16:48].astype(np.int32)
      q = q + (((qh[:, None, :] >> np.arange(8)[None, :, None]) & 1) << 4)
    return (f16(0)[:, :, None] * f32(sc)[:, :, None] * f32(q) - f16(2)[:, :, None] * f32(mn)[:, :, None]).reshape(-1)
  # Q6_K: 128 bytes low nibbles, 64 bytes of 2-bit highs, 16 int8 scales (one per 16 elements), d
  ql = b[:, 0:128].reshape(nb, 2, 64).astype(np.int32)
  qh = b[:, 128:192].reshape(nb, 2, 1, 32).astype(np.int32)
  lo = np.stack([ql[:, :, :32] & 0xF, ql[:, :, 32:] & 0xF, ql[:, :, :32] >> 4, ql[:, :, 32:] >> 4], axis=2)  # (nb, 2, 4, 32)
  q = f32((lo | (((qh >> (2 * np.arange(4)[None, None, :, None])) & 3) << 4)) - 32)
  scales = f32(b[:, 192:208].view(np.int8)).reshape(nb, 2, 4, 2, 1)
  return (f16(208)[:, :, None, None, None] * scales * q.reshape(nb, 2, 4, 2, 16)).reshape(-1)


def ggml_data_to_tensor(t: Tensor, n: int, ggml_type: int) -> Tensor:
  """The first `n` values of ggml-encoded bytes `t` (a uint8 tensor) as a tensor on Device.DEFAULT: float32 for
  quantized types, the stored dtype otherwise."""
  raw = t.data()
  if ggml_type in _GGML_PLAIN:
    dtype = _GGML_PLAIN[ggml_type]
    return _host_tensor(raw[:n * dtype.itemsize], (n,), dtype)
  import numpy as np
  bs, ts = _GGML_BLOCKS.get(ggml_type, (1, 1))
  n_blocks = (n + bs - 1) // bs
  return Tensor(ggml_dequantize(np.frombuffer(raw, np.uint8)[:n_blocks * ts], ggml_type)[:n], device=Device.DEFAULT)


def gguf_load(fn: PathLike) -> tuple[dict[str, Any], dict[str, Tensor]]:
  """(kv metadata, tensors) of a GGUF v2/v3 file.

  Tensors come out row-major in the shape a user expects (GGUF lists dims fastest-varying first, so they are
  reversed). Unquantized tensors (F32, F16, BF16, F64, I8..I64) are DISK tensors mapped from the file;
  quantized ones (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K) are dequantized to float32 on the host and
  land on Device.DEFAULT. Other quantizations raise NotImplementedError."""
  import mmap

  import numpy as np
  path = os.fspath(fn)
  with open(path, "rb") as f:
    if os.fstat(f.fileno()).st_size < 24:
      raise WeightsFileError(f"{path} is not a GGUF file: it's too short")
    mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
  try:
    r = _GGUFReader(mm, path)
    if mm[:4] != b"GGUF":
      raise WeightsFileError(f"{path} is not a GGUF file (it starts with {bytes(mm[:4])!r}, not b'GGUF')")
    r.pos = 4
    version = r.scalar("<I")
    if version not in (2, 3):
      what = "a big-endian GGUF file" if version & 0xFFFF == 0 else f"GGUF version {version}"
      raise NotImplementedError(f"{path} is {what}; gguf_load reads little-endian GGUF v2 and v3")
    n_tensors, n_kv = r.scalar("<Q"), r.scalar("<Q")
    r.count(n_kv, 8 + 4 + 1, "the header's key-value")  # least: a key's length, a type, a 1-byte value
    r.count(n_tensors, 8 + 4 + 4 + 8, "the header's tensor")  # least: a name's length, dim count, type, offset
    kv: dict[str, Any] = {}
    for _ in range(n_kv):
      key = r.string("a key")
      kv[key] = r.value(r.scalar("<I", f"key {key!r}"), f"key {key!r}")
    infos = []
    for _ in range(n_tensors):
      name = r.string("a tensor name")
      if (n_dims := r.scalar("<I", f"tensor {name!r}")) > 8:
        raise WeightsFileError(f"{path}: tensor {name!r} has {n_dims} dims (ggml tensors have at most 4)")
      dims = [r.scalar("<Q", f"tensor {name!r}") for _ in range(n_dims)]
      infos.append((name, dims, r.scalar("<I", f"tensor {name!r}"), r.scalar("<Q", f"tensor {name!r}")))
    alignment = kv.get("general.alignment", 32)
    if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment <= 0:
      raise WeightsFileError(f"{path}: general.alignment is {alignment!r}, not a positive integer")
    data_start, size = round_up(r.pos, alignment), len(mm)
  finally:
    mm.close()
  tensors: dict[str, Tensor] = {}
  for name, dims, ggml_type, offset in infos:
    if name in tensors:
      raise WeightsFileError(f"{path}: tensor {name!r} appears twice in the header")
    shape, numel, start = tuple(int(d) for d in reversed(dims)), prod(dims), data_start + offset
    if ggml_type in _GGML_PLAIN:
      nbytes = numel * _GGML_PLAIN[ggml_type].itemsize
    elif ggml_type in _GGML_BLOCKS:
      bs, ts = _GGML_BLOCKS[ggml_type]
      if numel % bs or (dims and dims[0] % bs):
        raise WeightsFileError(f"{path}: tensor {name!r} has {dims[0] if dims else 1} elements per row, not a multiple of the block size {bs}")
      nbytes = numel // bs * ts
    else:
      raise NotImplementedError(f"{path}: tensor {name!r} is {_GGML_NAMES.get(ggml_type, f'ggml type {ggml_type}')}, "
                                f"which gguf_load can't load (it dequantizes {', '.join(_GGML_NAMES[t] for t in _GGML_BLOCKS)})")
    _check_extent(path, f"tensor {name!r}", start, nbytes, size)
    if ggml_type in _GGML_PLAIN:
      tensors[name] = _disk_tensor(path, start, shape, _GGML_PLAIN[ggml_type])
    else:
      raw = np.frombuffer(_read_bytes(path, start, nbytes), dtype=np.uint8)
      tensors[name] = Tensor(ggml_dequantize(raw, ggml_type).reshape(shape), device=Device.DEFAULT)
  return kv, tensors
