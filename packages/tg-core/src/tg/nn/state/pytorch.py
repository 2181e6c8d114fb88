"""PyTorch .pt/.pth files (zip and legacy formats), read without importing torch."""
from __future__ import annotations

import collections
import io
import lzma
import os
import pickle
import pickletools
import struct
import zipfile
import zlib
from typing import IO, Any

from tg.dtype import DType, dtypes
from tg.helpers import prod
from tg.nn.state._common import PathLike, WeightsFileError, _check_extent, _disk_tensor, _host_tensor, _is_int, _read_bytes
from tg.nn.state._unzip import read_compressed_member
from tg.tensor import Tensor

# ---------- PyTorch ----------
# torch.save writes a zip (torch >= 1.6): <archive>/data.pkl, a pickle whose tensors refer to storages by key
# through persistent ids, and <archive>/data/<key>, each storage's raw bytes, stored uncompressed (an archive
# recompressed by another zip tool is read too, decompressed with its size bounded: _unzip.py). The legacy
# format (torch < 1.6) is a stream of pickles: magic number, protocol version, system info, the object, the
# list of storage keys, then each storage as an int64 element count followed by its bytes.

_TORCH_STORAGES: dict[str, DType] = {
  "DoubleStorage": dtypes.float64, "FloatStorage": dtypes.float32, "HalfStorage": dtypes.float16, "BFloat16Storage": dtypes.bfloat16,
  "LongStorage": dtypes.int64, "IntStorage": dtypes.int32, "ShortStorage": dtypes.int16, "CharStorage": dtypes.int8,
  "ByteStorage": dtypes.uint8, "BoolStorage": dtypes.bool, "UntypedStorage": dtypes.uint8,
}
_TORCH_DTYPES: dict[str, DType] = {
  "float64": dtypes.float64, "double": dtypes.float64, "float32": dtypes.float32, "float": dtypes.float32,
  "float16": dtypes.float16, "half": dtypes.float16, "bfloat16": dtypes.bfloat16, "int64": dtypes.int64, "long": dtypes.int64,
  "int32": dtypes.int32, "int": dtypes.int32, "int16": dtypes.int16, "short": dtypes.int16, "int8": dtypes.int8,
  "uint8": dtypes.uint8, "bool": dtypes.bool, "uint16": dtypes.uint16, "uint32": dtypes.uint32, "uint64": dtypes.uint64,
}
_LEGACY_MAGIC, _LEGACY_PROTOCOL = 0x1950A86A20F9469CFC6C, 1001


class _TorchStorage:
  """One storage of a checkpoint: its element dtype, and where its bytes are once known: a file range, or a
  compressed zip member, decompressed into memory when a tensor first needs it. Legacy files give the location
  only after the object."""

  def __init__(self, key: str, dtype: DType) -> None:
    self.key, self.dtype = key, dtype
    self.path: str | None = None
    self.offset = self.nbytes = 0
    self.data: bytes | None = None
    self.compressed: zipfile.ZipInfo | None = None  # the member whose compressed bytes start at `offset`
    self.big_endian = False
    self.error = ""  # why its bytes can't be read (said when a tensor needs them, naming the tensor)

  def read(self, offset: int, n: int, where: str) -> bytes:
    assert 0 <= offset and offset + n <= self.nbytes, "the tensor's extent was checked in to_tensor"
    if self.compressed is not None and self.data is None:
      assert self.path is not None
      try:
        self.data = read_compressed_member(self.path, self.compressed, self.offset)
      except ValueError as e:
        self.error = f"its storage {self.key!r} (compressed member {self.compressed.filename}) can't be read: {e}"
        raise WeightsFileError(f"{where}: {self.error}") from None
    if self.data is not None:
      return self.data[offset:offset + n]
    assert self.path is not None, f"storage {self.key} was never located"
    return _read_bytes(self.path, self.offset + offset, n)


class _TorchTensor:
  """A tensor as the pickle describes it; made into a Tensor once its storage is located."""

  def __init__(self, storage: Any, storage_offset: Any, size: Any, stride: Any, dtype: DType | None = None) -> None:
    if not isinstance(storage, _TorchStorage):
      raise pickle.UnpicklingError(f"torch_load: a tensor's storage is a {type(storage).__name__}, not a storage")
    self.storage, self.storage_offset, self.size, self.stride = storage, storage_offset, size, stride  # checked in to_tensor
    self.dtype = storage.dtype if dtype is None else dtype

  def _check(self, where: str) -> tuple[tuple[int, ...], tuple[int, ...], int, int]:
    """(shape, strides, storage offset, span: elements from the first to the last one read), each checked: non-negative
    ints, and every element read inside the storage."""
    st, size, stride = self.storage, self.size, self.stride
    if st.error:
      raise WeightsFileError(f"{where}: {st.error}")
    if not _is_int(self.storage_offset) or self.storage_offset < 0:
      raise WeightsFileError(f"{where}: storage offset {self.storage_offset!r} is not a non-negative integer")
    if not isinstance(size, (tuple, list)) or not all(_is_int(d) and d >= 0 for d in size):
      raise WeightsFileError(f"{where}: size {size!r} is not a list of non-negative integers")
    if not isinstance(stride, (tuple, list)) or len(stride) != len(size) or not all(_is_int(d) for d in stride):
      raise WeightsFileError(f"{where}: stride {stride!r} is not {len(size)} integers, one per dim of size {tuple(size)}")
    if any(d < 0 for d in stride):
      raise WeightsFileError(f"{where}: negative stride {tuple(stride)} (torch never saves these)")
    shape, strides, isz = tuple(size), tuple(stride), self.dtype.itemsize
    span = 1 + sum((s - 1) * d for s, d in zip(shape, strides)) if prod(shape) > 0 else 0
    if span and (self.storage_offset + span) * isz > st.nbytes:
      raise WeightsFileError(f"{where}: a {self.dtype} tensor of size {shape}, stride {strides} at storage offset {self.storage_offset} "
                             f"overruns its storage {st.key!r} of {st.nbytes} bytes")
    return shape, strides, self.storage_offset, span

  def to_tensor(self, where: str) -> Tensor:
    """The Tensor; `where` names the file and the tensor for errors."""
    shape, strides, storage_offset, span = self._check(where)
    st, dtype, isz = self.storage, self.dtype, self.dtype.itemsize
    if prod(shape) == 0:
      return _host_tensor(b"", shape, dtype)
    contiguous = all(s == 1 or d == c for s, d, c in zip(shape, strides, _row_major_strides(shape)))
    byte_offset = storage_offset * isz
    if contiguous and st.compressed is None and not (st.big_endian and isz > 1):
      assert st.path is not None
      return _disk_tensor(st.path, st.offset + byte_offset, shape, dtype)
    # rearranged on the host as it moves in: gather the strided elements (as unsigned ints of the same size,
    # so any dtype, bfloat16 included, moves bit-exact), fix the byte order, and copy to the compute device
    import numpy as np
    raw = np.frombuffer(st.read(byte_offset, span * isz, where), dtype=np.dtype(f"{'>' if st.big_endian else '<'}u{isz}"))
    arr = np.lib.stride_tricks.as_strided(raw, shape=shape, strides=tuple(d * isz for d in strides))
    native = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("="))
    return _host_tensor(native.reshape(-1).view(np.uint8), shape, dtype)


def _row_major_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
  strides, acc = [], 1
  for s in reversed(shape):
    strides.append(acc)
    acc *= s
  return tuple(reversed(strides))


def _rebuild_tensor(storage: Any, storage_offset: int, size: Any, stride: Any) -> _TorchTensor:
  return _TorchTensor(storage, storage_offset, size, stride)


def _rebuild_tensor_v2(storage: Any, storage_offset: int, size: Any, stride: Any, requires_grad: Any = None,
                       backward_hooks: Any = None, metadata: Any = None) -> _TorchTensor:
  return _TorchTensor(storage, storage_offset, size, stride)


def _rebuild_tensor_v3(storage: Any, storage_offset: int, size: Any, stride: Any, requires_grad: Any, backward_hooks: Any,
                       dtype: Any, metadata: Any = None) -> _TorchTensor:
  """Newer torch saves dtypes without a typed storage class (uint16/32/64, float8) this way: untyped storage + dtype."""
  if not isinstance(dtype, DType):
    raise NotImplementedError(f"torch_load: tensors of torch dtype {dtype} are not supported (tg has no such dtype)")
  return _TorchTensor(storage, storage_offset, size, stride, dtype)


def _rebuild_parameter(data: Any, requires_grad: Any = None, backward_hooks: Any = None, state: Any = None) -> Any:
  return data  # an nn.Parameter is its tensor here


def _rebuild_from_type_v2(func: Any, new_type: Any, args: Any, state: Any) -> Any:
  return func(*args)  # a tensor subclass (e.g. nn.Buffer) is its tensor here: the subclass itself isn't imported


class _StandIn:
  """Stands in for a class or function the checkpoint names that isn't a tensor or a container (an argparse
  Namespace of training arguments, a whole nn.Module): importing and calling it could run any code, so it
  is recorded, not run. The arguments and state are kept, so tensors inside are still found and loaded."""
  _tg_name = "?"
  args: tuple[Any, ...]
  kwargs: dict[str, Any]
  state: Any

  def __new__(cls, *args: Any, **kwargs: Any) -> Any:
    self = super().__new__(cls)  # pickle may make it with __new__ alone (NEWOBJ), never calling __init__
    self.args, self.kwargs, self.state = args, kwargs, None
    return self

  def __init__(self, *args: Any, **kwargs: Any) -> None:
    pass

  def __setstate__(self, state: Any) -> None:
    self.state = state

  def __repr__(self) -> str:
    return f"<torch_load stand-in for {self._tg_name}>"


# globals torch checkpoints commonly name that are data, not code (numpy arrays and scalars, bytes in protocol 2)
_SAFE_GLOBALS = {("collections", "OrderedDict"), ("builtins", "set"), ("builtins", "frozenset"), ("builtins", "slice"),
                 ("builtins", "complex"), ("_codecs", "encode"), ("numpy", "dtype"), ("numpy", "ndarray"),
                 ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
                 ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct")}
_TORCH_FUNCTIONS: dict[str, Any] = {"_rebuild_tensor": _rebuild_tensor, "_rebuild_tensor_v2": _rebuild_tensor_v2,
                                    "_rebuild_tensor_v3": _rebuild_tensor_v3, "_rebuild_parameter": _rebuild_parameter,
                                    "_rebuild_parameter_with_state": _rebuild_parameter}


class _TorchUnpickler(pickle.Unpickler):
  """Unpickles a torch checkpoint without torch: tensors become _TorchTensor, storages _TorchStorage."""

  def __init__(self, file: IO[bytes] | _FileBounded, storage: Any = None) -> None:
    super().__init__(file)
    self.file, self.get_storage = file, storage
    self.storages: dict[str, _TorchStorage] = {}

  def load(self) -> Any:
    """Walk the pickle's opcodes first (pickletools reads each argument through the file, so a length past its end
    raises there), then unpickle from where it started. The C unpickler allocates some things before it reads them:
    a damaged BYTEARRAY8 claiming 2**40 bytes was a MemoryError, a LONG_BINPUT at memo index 2**31 grew the memo to
    2**32 pointers and wrote every one (32 GiB: the process killed for memory)."""
    start, ops, top = self.file.tell(), 0, -1
    for op, arg, _ in pickletools.genops(self.file):  # type: ignore[arg-type]  # (genops only calls read)
      ops += 1
      if op.name in ("PUT", "BINPUT", "LONG_BINPUT") and isinstance(arg, int):
        top = max(top, arg)
    if top >= ops:  # a pickler numbers its memo entries from 0, one per entry: never past the count of opcodes
      raise pickle.UnpicklingError(f"memo index {top} in a pickle of {ops} opcodes")
    self.file.seek(start)
    return super().load()

  def find_class(self, module: str, name: str) -> Any:
    if module.split(".")[0] == "torch":
      if name in _TORCH_FUNCTIONS and module == "torch._utils":
        return _TORCH_FUNCTIONS[name]
      if (module, name) == ("torch._tensor", "_rebuild_from_type_v2"):
        return _rebuild_from_type_v2
      if name in _TORCH_STORAGES:
        return _TORCH_STORAGES[name]
      if name.endswith("Storage"):
        raise NotImplementedError(f"torch_load: {module}.{name} tensors are not supported (tg has no such dtype)")
      if name in _TORCH_DTYPES and module == "torch":
        return _TORCH_DTYPES[name]
      if (module, name) == ("torch", "Size"):
        return tuple
      if (module, name) == ("torch", "device"):
        return lambda *args: ":".join(str(a) for a in args)  # torch.device("cuda", 0) -> "cuda:0"
    if (module, name) in _SAFE_GLOBALS:
      return super().find_class(module, name)
    return type(name, (_StandIn,), {"_tg_name": f"{module}.{name}", "__module__": module})

  def persistent_load(self, pid: Any) -> Any:
    if not isinstance(pid, tuple) or not pid:
      raise pickle.UnpicklingError(f"torch_load: unknown persistent id {pid!r}")
    if pid[0] == "module":  # legacy files name a whole module's class with its source; the class is enough
      return pid[1]
    if pid[0] != "storage" or len(pid) < 5:
      raise pickle.UnpicklingError(f"torch_load: unknown persistent id {pid!r}")
    dtype, key = pid[1], str(pid[2])
    if not isinstance(dtype, DType):
      raise pickle.UnpicklingError(f"torch_load: storage {key} has type {dtype!r}, not a storage type")
    if len(pid) > 5 and pid[5] is not None:
      raise NotImplementedError("torch_load: legacy storage views (view_metadata) are not supported")
    if key not in self.storages:
      self.storages[key] = self.get_storage(key, dtype, pid[4]) if self.get_storage is not None else _TorchStorage(key, dtype)
    return self.storages[key]


def _zip_member_offset(path: str, info: zipfile.ZipInfo) -> int:
  """Where a stored zip member's bytes start in the file: after its local header, whose extra field (torch
  uses it to align data to 64 bytes) can differ from the central directory's."""
  head = _read_bytes(path, info.header_offset, 30)
  if head[:4] != b"PK\x03\x04":
    raise WeightsFileError(f"{path}: bad zip local header for {info.filename}")
  name_len, extra_len = struct.unpack_from("<HH", head, 26)
  return info.header_offset + 30 + name_len + extra_len


def _zip_open(path: str, z: zipfile.ZipFile, info: zipfile.ZipInfo) -> IO[bytes]:
  """z.open(info), where a damaged directory entry raises WeightsFileError: zipfile raised NotImplementedError for a
  compression method number that is no method, and OSError (EINVAL) seeking to a header offset past what a file can
  have, which torch_load passes on as they are (for its own unsupported formats, and a file it can't read)."""
  try:
    return z.open(info)
  except (NotImplementedError, OSError) as e:
    raise WeightsFileError(f"{path}: its zip entry {info.filename} can't be opened: {type(e).__name__}: {e}") from None


def _torch_load_zip(path: str) -> Any:
  size = os.path.getsize(path)
  with zipfile.ZipFile(path) as z:
    pkls = [n for n in z.namelist() if n.endswith("data.pkl") and n.count("/") == 1]
    if not pkls:
      raise WeightsFileError(f"{path} is a zip file but not a torch checkpoint (no <archive>/data.pkl)")
    prefix = pkls[0][:-len("data.pkl")]
    big_endian = False
    if prefix + "byteorder" in z.namelist():  # "little" or "big": a few bytes read, whatever the entry claims
      info = z.getinfo(prefix + "byteorder")
      with _zip_open(path, z, info) as f:
        try:
          big_endian = f.read(16).strip() == b"big"
        except (zlib.error, lzma.LZMAError, OSError, EOFError) as e:  # a damaged compressed entry (bz2's is an OSError)
          raise WeightsFileError(f"{path}: its zip entry {info.filename} can't be read: {type(e).__name__}: {e}") from None

    def locate(key: str, dtype: DType, numel: Any) -> _TorchStorage:
      st = _TorchStorage(key, dtype)
      try:
        info = z.getinfo(f"{prefix}data/{key}")
      except KeyError:
        st.error = f"its storage {key!r} is missing from the archive (no {prefix}data/{key})"
        return st
      st.nbytes, st.big_endian = info.file_size, big_endian
      st.path, st.offset = path, _zip_member_offset(path, info)
      if info.compress_type == zipfile.ZIP_STORED:
        try:
          _check_extent(path, f"storage {key!r}", st.offset, st.nbytes, size)
        except WeightsFileError as e:  # said when a tensor needs it, naming the tensor
          st.error = str(e)
      elif not _is_int(numel) or numel * dtype.itemsize != info.file_size:
        # compressed by some other tool: the pickle's size bounds what decompressing may produce, so a member that
        # declares other is refused before a byte is inflated (zip bombs declare small and inflate huge, or the reverse)
        want = f"{numel * dtype.itemsize} bytes" if _is_int(numel) else "an unknown size"
        st.error = (f"its storage {key!r} holds {numel!r} {dtype} elements ({want}) by the pickle, but its compressed member "
                    f"{info.filename} declares {info.file_size} bytes")
      else:
        try:
          _check_extent(path, f"storage {key!r}", st.offset, info.compress_size, size)
          st.compressed = info
        except WeightsFileError as e:
          st.error = str(e)
      return st

    info = z.getinfo(pkls[0])
    if info.compress_type == zipfile.ZIP_STORED:
      with _zip_open(path, z, info) as f:
        return _TorchUnpickler(f, locate).load()
    try:  # bounded like the storages: zipfile would inflate a bzip2 bomb whole in one step
      pkl = read_compressed_member(path, info, _zip_member_offset(path, info))
    except ValueError as e:
      raise WeightsFileError(f"{path}: its pickle {info.filename} can't be read: {e}") from None
    return _TorchUnpickler(io.BytesIO(pkl), locate).load()


class _FileBounded:
  """A file for the unpickler that refuses a read past its end: a damaged pickle's frame or bytes length (2**62) made
  the C unpickler allocate that much and raise MemoryError (or, smaller, really take the memory) before it found the
  file too short."""

  def __init__(self, f: io.BufferedReader, size: int) -> None:
    self.f, self.size = f, size

  def read(self, n: int = -1) -> bytes:
    if n is not None and n > self.size - self.f.tell():
      raise pickle.UnpicklingError(f"pickle data was truncated: {n} bytes asked for, the file ends {self.size - self.f.tell()} bytes on")
    return self.f.read(n)

  def readinto(self, b: Any) -> int:
    if len(b) > self.size - self.f.tell():
      raise pickle.UnpicklingError("pickle data was truncated")
    return self.f.readinto(b)

  def readline(self) -> bytes:
    return self.f.readline()

  def tell(self) -> int:
    return self.f.tell()

  def seek(self, pos: int) -> int:
    return self.f.seek(pos)


def _torch_load_legacy(path: str) -> Any:
  with open(path, "rb") as raw:
    f = _FileBounded(raw, os.path.getsize(path))
    try:
      magic = _TorchUnpickler(f).load()
    except Exception:
      magic = None
    if magic != _LEGACY_MAGIC:
      import tarfile
      if tarfile.is_tarfile(path):
        raise NotImplementedError(f"{path} is in torch's tar format (torch < 0.4), which torch_load doesn't read")
      raise WeightsFileError(f"{path} is not a torch checkpoint (neither a zip archive nor the legacy format)")
    if (version := _TorchUnpickler(f).load()) != _LEGACY_PROTOCOL:
      raise WeightsFileError(f"{path}: unknown legacy torch protocol version {version}")
    sys_info = _TorchUnpickler(f).load()
    unpickler = _TorchUnpickler(f)
    obj = unpickler.load()
    keys = _TorchUnpickler(f).load()
    offset = f.tell()
  big_endian = isinstance(sys_info, dict) and sys_info.get("little_endian") is False
  size = os.path.getsize(path)
  if not isinstance(keys, list):
    raise WeightsFileError(f"{path}: the legacy storage key list is a {type(keys).__name__}, not a list")
  for key in keys:
    if (st := unpickler.storages.get(str(key))) is None:
      raise WeightsFileError(f"{path}: storage {key} is listed but no tensor uses it")
    numel = struct.unpack("<q", _read_bytes(path, offset, 8))[0]  # torch writes the count little-endian on any host
    nbytes = numel * st.dtype.itemsize
    _check_extent(path, f"storage {key} of {numel} elements", offset + 8, nbytes, size)
    st.path, st.offset, st.nbytes, st.big_endian = path, offset + 8, nbytes, big_endian
    offset += 8 + st.nbytes
  return obj


def _materialize(obj: Any, done: dict[int, Any], path: str, name: str = "") -> Any:
  """`obj` with every _TorchTensor made a Tensor (one Tensor per pickled tensor, even when shared). `name` is the
  dotted path of keys and indices to `obj`, for errors."""
  if id(obj) in done:
    return done[id(obj)]
  def sub(k: Any) -> str:
    return f"{name}.{k}" if name else str(k)
  if isinstance(obj, _TorchTensor):
    ret: Any = obj.to_tensor(f"{path}: tensor {name!r}")
  elif isinstance(obj, dict):
    ret = type(obj)() if isinstance(obj, collections.OrderedDict) else {}
    done[id(obj)] = ret
    for k, v in obj.items():
      ret[k] = _materialize(v, done, path, sub(k))
  elif isinstance(obj, list):
    ret = []
    done[id(obj)] = ret
    ret.extend(_materialize(x, done, path, sub(i)) for i, x in enumerate(obj))
  elif isinstance(obj, tuple):
    ret = tuple(_materialize(x, done, path, sub(i)) for i, x in enumerate(obj))
  elif isinstance(obj, _StandIn):
    obj.args, obj.kwargs, obj.state = (_materialize(x, done, path, sub(part)) for x, part in
                                       ((obj.args, "args"), (obj.kwargs, "kwargs"), (obj.state, "state")))
    ret = obj
  else:
    ret = obj
  done[id(obj)] = ret
  return ret


def torch_load(fn: PathLike) -> dict[str, Tensor]:
  """The object saved by torch.save (usually a state dict: name -> Tensor), without importing torch.

  Reads the zip format and the legacy (torch < 1.6) format. Tensors stored contiguously are DISK tensors
  mapped from the file; strided tensors (e.g. a transposed tensor saved as is) are gathered on the host and
  land on Device.DEFAULT, as do tensors of an archive some other zip tool recompressed (each storage is decompressed
  when a tensor first needs it, never past the size the pickle gives it). Tensors that are views of one storage stay
  views of the same file bytes. Classes and functions other than tensors and containers are not run: they load as
  inert stand-ins.

  The file is only read (contiguous tensors map it read-only). Every tensor's offset, size and strides are checked
  against its storage, and every storage against the file, before anything is read: a truncated, lying or malformed
  file raises WeightsFileError naming the file and the tensor."""
  path = os.fspath(fn)
  try:
    obj = _torch_load_zip(path) if zipfile.is_zipfile(path) else _torch_load_legacy(path)
    return _materialize(obj, {}, path)  # type: ignore[no-any-return]
  except (WeightsFileError, NotImplementedError, OSError):
    raise
  except (pickle.UnpicklingError, EOFError, struct.error, zipfile.BadZipFile, zipfile.LargeZipFile, KeyError, TypeError, ValueError,
          IndexError, AttributeError, UnicodeDecodeError, OverflowError, RecursionError) as e:
    # the pickle or the archive is malformed: the unpickler and zipfile report that in many ways; say it in one
    raise WeightsFileError(f"{path} is not a readable torch checkpoint: {type(e).__name__}: {e}") from e
