"""Model weights in and out: finding a model's tensors (get_state_dict, get_parameters), loading them
(load_state_dict), and the weight file formats safetensors (safe_save, safe_load), PyTorch (torch_load) and
GGUF (gguf_load).

Loaders map files instead of reading them: a tensor stored whole and in order in the file becomes a realized
tensor on the DISK device whose buffer is a view of the file's one shared mapping, so loading a file bigger than
RAM is free and moving a tensor to a compute device (`.to(Device.DEFAULT)`) copies only that tensor's bytes.
Data that has to be rearranged first (strided PyTorch tensors, quantized GGUF blocks, compressed or big-endian
storages) is rearranged by numpy on the host as it moves in, and those tensors land on `Device.DEFAULT`.
"""
from __future__ import annotations

import collections
import json
import os
import pickle
import struct
import sys
import time
import uuid
import zipfile
from typing import IO, Any

from tg.device import Buffer, Device
from tg.dtype import DType, dtypes
from tg.helpers import GlobalCounters, prod, round_up
from tg.lazy import LazyBuffer
from tg.shape.symbolic import Node
from tg.tensor import Tensor

PathLike = str | os.PathLike[str]


# ---------- finding a model's tensors ----------

def get_state_dict(obj: Any, prefix: str = "") -> dict[str, Tensor]:
  """Every Tensor reachable from `obj` through attributes, lists, tuples and dicts, by dotted name."""
  if isinstance(obj, Tensor):
    return {prefix.strip("."): obj}
  if isinstance(obj, (list, tuple)):
    return {k: v for i, x in enumerate(obj) for k, v in get_state_dict(x, f"{prefix}{i}.").items()}
  if isinstance(obj, dict):
    return {k: v for key, x in obj.items() for k, v in get_state_dict(x, f"{prefix}{key}.").items()}
  if hasattr(obj, "__dict__"):
    return get_state_dict(vars(obj), prefix)
  return {}


def get_parameters(obj: Any) -> list[Tensor]:
  return list(get_state_dict(obj).values())


class StateDictKeyError(KeyError):
  """The keys of a state dict don't match the model's. A KeyError, as tinygrad raises for a missing key, but
  printed as a sentence (a plain KeyError prints the repr of its message)."""

  def __str__(self) -> str:
    return str(self.args[0]) if self.args else ""


def load_state_dict(model: Any, state_dict: dict[str, Tensor], strict: bool = True, verbose: bool = False, consume: bool = False) -> None:
  """Give each of `model`'s tensors (named as get_state_dict names them) the value stored under its name.

  Values move to the model tensor's device and take its dtype, so a float16 DISK tensor can fill a float32
  parameter on the compute device; the model's tensor objects stay the same, so optimizers and other holders
  of them see the new values. Every key is checked before anything is assigned, so a failed load leaves the
  model as it was. `strict` demands the two key sets match exactly; `consume` deletes loaded entries from
  `state_dict` so their (possibly large) source tensors can be freed as soon as possible."""
  model_state = get_state_dict(model)
  missing = [k for k in model_state if k not in state_dict]
  unexpected = [k for k in state_dict if k not in model_state]
  if strict and (missing or unexpected):
    raise StateDictKeyError(f"load_state_dict(strict=True): the state dict doesn't match the model: "
                   f"missing keys {missing}, unexpected keys {unexpected}")
  for k, v in model_state.items():
    if k in state_dict and tuple(state_dict[k].shape) != tuple(v.shape):
      raise ValueError(f"load_state_dict: shape mismatch for {k!r}: the state dict has {tuple(state_dict[k].shape)}, "
                       f"the model has {tuple(v.shape)}")
  start_mem, st = GlobalCounters.mem_used, time.perf_counter()
  loaded: list[Tensor] = []
  for k, v in model_state.items():
    if k not in state_dict:
      if verbose:
        print(f"load_state_dict: not loading {k} (not in the state dict)")
      continue
    v.assign(state_dict[k].to(v.device).cast(v.dtype))
    loaded.append(v)
    if consume:
      del state_dict[k]
  Tensor.realize_all(*loaded)
  if verbose:
    et = time.perf_counter() - st
    print(f"load_state_dict: loaded {len(loaded)} tensors in {et * 1e3:.2f} ms, "
          f"{(GlobalCounters.mem_used - start_mem) / 1e9:.2f} GB more memory in use")


# ---------- helpers shared by the loaders ----------

def _disk_tensor(path: str, byte_offset: int, shape: tuple[int, ...], dtype: DType) -> Tensor:
  """A realized DISK tensor over `shape` elements of `dtype` stored in order at `byte_offset` of `path`.

  The buffer is allocated now, so it maps the file as it is at load time (a file replaced later, e.g. by
  safe_save to the same path, doesn't change tensors already loaded)."""
  buf = Buffer("DISK", prod(shape), dtype, options=(path, byte_offset)).allocate()
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
    raise ValueError(f"{path} is truncated: needed {n} bytes at offset {offset}, got {len(data)}")
  return data


def _concrete_shape(t: Tensor, what: str) -> tuple[int, ...]:
  if any(isinstance(s, Node) for s in t.shape):
    raise ValueError(f"{what} has a symbolic shape {t.shape}: files store concrete shapes")
  return tuple(s for s in t.shape if isinstance(s, int))


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
      raise ValueError(f"{path} is not a safetensors file: it's only {size} bytes long")
    n = int.from_bytes(head, "little")
    if n > size - 8:
      raise ValueError(f"{path} is not a safetensors file (or is truncated): its header claims {n} bytes, the file has {size - 8} after it")
    try:
      header = json.loads(f.read(n))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
      raise ValueError(f"{path} is not a safetensors file: its header isn't JSON ({e})") from None
  if not isinstance(header, dict):
    raise ValueError(f"{path} is not a safetensors file: its header is a JSON {type(header).__name__}, not an object")
  return n, header, size


def safe_load_metadata(fn: PathLike) -> tuple[Tensor, int, dict[str, Any]]:
  """(the whole file as a uint8 DISK tensor, the JSON header's length, the parsed header), as tinygrad returns.

  The header holds each tensor's dtype, shape and data_offsets, and the user's metadata under "__metadata__"."""
  path = os.fspath(fn)
  n, header, size = _safe_header(path)
  return _disk_tensor(path, 0, (size,), dtypes.uint8), n, header


def safe_load(fn: PathLike) -> dict[str, Tensor]:
  """The tensors of a safetensors file, as realized DISK tensors mapped from the file (nothing is read yet)."""
  path = os.fspath(fn)
  n, header, size = _safe_header(path)
  out: dict[str, Tensor] = {}
  for name, info in header.items():
    if name == "__metadata__":
      continue
    if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= info.keys():
      raise ValueError(f"{path}: header entry {name!r} is not a tensor description (dtype, shape, data_offsets): {info!r}")
    if (dtype := safe_dtypes.get(str(info["dtype"]))) is None:
      raise ValueError(f"{path}: tensor {name!r} has dtype {info.get('dtype')!r}, which tg can't load (supported: {', '.join(safe_dtypes)})")
    shape, (begin, end) = tuple(int(s) for s in info["shape"]), info["data_offsets"]
    if end - begin != prod(shape) * dtype.itemsize or begin < 0 or 8 + n + end > size:
      raise ValueError(f"{path}: tensor {name!r} ({info['dtype']} {list(shape)}) has data_offsets {[begin, end]}, "
                       f"which don't fit its size or the file ({size - 8 - n} data bytes)")
    out[name] = _disk_tensor(path, 8 + n + begin, shape, dtype)
  return out


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
  file, and tensors still mapped from an older `fn` (safe_load of the same path) keep reading the old data."""
  path = os.fspath(fn)
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
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.unlink(tmp)
    raise


# ---------- PyTorch ----------
# torch.save writes a zip (torch >= 1.6): <archive>/data.pkl, a pickle whose tensors refer to storages by key
# through persistent ids, and <archive>/data/<key>, each storage's raw bytes, stored uncompressed. The legacy
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
  """One storage of a checkpoint: its element dtype, and where its bytes are once known (a file range, or
  bytes in memory for a compressed zip entry). Legacy files give the location only after the object."""

  def __init__(self, key: str, dtype: DType) -> None:
    self.key, self.dtype = key, dtype
    self.path: str | None = None
    self.offset = self.nbytes = 0
    self.data: bytes | None = None
    self.big_endian = False

  def read(self, offset: int, n: int) -> bytes:
    if offset < 0 or offset + n > self.nbytes:
      raise ValueError(f"torch_load: a tensor reads bytes {offset}..{offset + n} of storage {self.key}, which has {self.nbytes}")
    if self.data is not None:
      return self.data[offset:offset + n]
    assert self.path is not None, f"storage {self.key} was never located"
    return _read_bytes(self.path, self.offset + offset, n)


class _TorchTensor:
  """A tensor as the pickle describes it; made into a Tensor once its storage is located."""

  def __init__(self, storage: Any, storage_offset: int, size: Any, stride: Any, dtype: DType | None = None) -> None:
    if not isinstance(storage, _TorchStorage):
      raise pickle.UnpicklingError(f"torch_load: a tensor's storage is a {type(storage).__name__}, not a storage")
    self.storage, self.storage_offset, self.size, self.stride = storage, int(storage_offset), tuple(size), tuple(stride)
    self.dtype = storage.dtype if dtype is None else dtype

  def to_tensor(self) -> Tensor:
    st, dtype, shape, isz = self.storage, self.dtype, self.size, self.dtype.itemsize
    if prod(shape) == 0:
      return _host_tensor(b"", shape, dtype)
    if any(d < 0 for d in self.stride):
      raise ValueError(f"torch_load: negative strides {self.stride} (torch never saves these)")
    span = 1 + sum((s - 1) * d for s, d in zip(shape, self.stride))  # elements from the first to the last one read
    contiguous = all(s == 1 or d == c for s, d, c in zip(shape, self.stride, _row_major_strides(shape)))
    byte_offset = self.storage_offset * isz
    if byte_offset + span * isz > st.nbytes:
      raise ValueError(f"torch_load: a {dtype} tensor of shape {shape}, strides {self.stride} at offset {self.storage_offset} "
                       f"overruns its storage of {st.nbytes} bytes")
    if contiguous and st.data is None and not (st.big_endian and isz > 1):
      assert st.path is not None
      return _disk_tensor(st.path, st.offset + byte_offset, shape, dtype)
    # rearranged on the host as it moves in: gather the strided elements (as unsigned ints of the same size,
    # so any dtype, bfloat16 included, moves bit-exact), fix the byte order, and copy to the compute device
    import numpy as np
    raw = np.frombuffer(st.read(byte_offset, span * isz), dtype=np.dtype(f"{'>' if st.big_endian else '<'}u{isz}"))
    arr = np.lib.stride_tricks.as_strided(raw, shape=shape, strides=tuple(d * isz for d in self.stride))
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

  def __init__(self, file: IO[bytes], storage: Any = None) -> None:
    super().__init__(file)
    self.get_storage = storage
    self.storages: dict[str, _TorchStorage] = {}

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
      self.storages[key] = self.get_storage(key, dtype) if self.get_storage is not None else _TorchStorage(key, dtype)
    return self.storages[key]


def _zip_member_offset(path: str, info: zipfile.ZipInfo) -> int:
  """Where a stored zip member's bytes start in the file: after its local header, whose extra field (torch
  uses it to align data to 64 bytes) can differ from the central directory's."""
  head = _read_bytes(path, info.header_offset, 30)
  if head[:4] != b"PK\x03\x04":
    raise ValueError(f"{path}: bad zip local header for {info.filename}")
  name_len, extra_len = struct.unpack_from("<HH", head, 26)
  return info.header_offset + 30 + name_len + extra_len


def _torch_load_zip(path: str) -> Any:
  with zipfile.ZipFile(path) as z:
    pkls = [n for n in z.namelist() if n.endswith("data.pkl") and n.count("/") == 1]
    if not pkls:
      raise ValueError(f"{path} is a zip file but not a torch checkpoint (no <archive>/data.pkl)")
    prefix = pkls[0][:-len("data.pkl")]
    big_endian = prefix + "byteorder" in z.namelist() and z.read(prefix + "byteorder").strip() == b"big"

    def locate(key: str, dtype: DType) -> _TorchStorage:
      st, info = _TorchStorage(key, dtype), z.getinfo(f"{prefix}data/{key}")
      st.nbytes, st.big_endian = info.file_size, big_endian
      if info.compress_type == zipfile.ZIP_STORED:
        st.path, st.offset = path, _zip_member_offset(path, info)
      else:  # compressed by some other tool: no bytes to map, so decompress it into memory
        st.data = z.read(info)
      return st

    with z.open(pkls[0]) as f:
      return _TorchUnpickler(f, locate).load()


def _torch_load_legacy(path: str) -> Any:
  with open(path, "rb") as f:
    try:
      magic = _TorchUnpickler(f).load()
    except Exception:
      magic = None
    if magic != _LEGACY_MAGIC:
      import tarfile
      if tarfile.is_tarfile(path):
        raise NotImplementedError(f"{path} is in torch's tar format (torch < 0.4), which torch_load doesn't read")
      raise ValueError(f"{path} is not a torch checkpoint (neither a zip archive nor the legacy format)")
    if (version := _TorchUnpickler(f).load()) != _LEGACY_PROTOCOL:
      raise ValueError(f"{path}: unknown legacy torch protocol version {version}")
    sys_info = _TorchUnpickler(f).load()
    unpickler = _TorchUnpickler(f)
    obj = unpickler.load()
    keys = _TorchUnpickler(f).load()
    offset = f.tell()
  big_endian = isinstance(sys_info, dict) and sys_info.get("little_endian") is False
  for key in keys:
    if (st := unpickler.storages.get(str(key))) is None:
      raise ValueError(f"{path}: storage {key} is listed but no tensor uses it")
    numel = struct.unpack("<q", _read_bytes(path, offset, 8))[0]  # torch writes the count little-endian on any host
    st.path, st.offset, st.nbytes, st.big_endian = path, offset + 8, numel * st.dtype.itemsize, big_endian
    offset += 8 + st.nbytes
  return obj


def _materialize(obj: Any, done: dict[int, Any]) -> Any:
  """`obj` with every _TorchTensor made a Tensor (one Tensor per pickled tensor, even when shared)."""
  if id(obj) in done:
    return done[id(obj)]
  if isinstance(obj, _TorchTensor):
    ret: Any = obj.to_tensor()
  elif isinstance(obj, dict):
    ret = type(obj)() if isinstance(obj, collections.OrderedDict) else {}
    done[id(obj)] = ret
    for k, v in obj.items():
      ret[k] = _materialize(v, done)
  elif isinstance(obj, list):
    ret = []
    done[id(obj)] = ret
    ret.extend(_materialize(x, done) for x in obj)
  elif isinstance(obj, tuple):
    ret = tuple(_materialize(x, done) for x in obj)
  elif isinstance(obj, _StandIn):
    obj.args, obj.kwargs, obj.state = (_materialize(x, done) for x in (obj.args, obj.kwargs, obj.state))
    ret = obj
  else:
    ret = obj
  done[id(obj)] = ret
  return ret


def torch_load(fn: PathLike) -> dict[str, Tensor]:
  """The object saved by torch.save (usually a state dict: name -> Tensor), without importing torch.

  Reads the zip format and the legacy (torch < 1.6) format. Tensors stored contiguously are DISK tensors
  mapped from the file; strided tensors (e.g. a transposed tensor saved as is) are gathered on the host and
  land on Device.DEFAULT. Tensors that are views of one storage stay views of the same file bytes. Classes
  and functions other than tensors and containers are not run: they load as inert stand-ins."""
  path = os.fspath(fn)
  obj = _torch_load_zip(path) if zipfile.is_zipfile(path) else _torch_load_legacy(path)
  return _materialize(obj, {})  # type: ignore[no-any-return]


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


class _GGUFReader:
  """Reads the header of a GGUF file through a mapping of it (headers can hold vocabularies of 100k+ strings)."""

  def __init__(self, data: Any, path: str) -> None:
    self.data, self.pos, self.path = data, 0, path

  def scalar(self, fmt: str) -> Any:
    try:
      v = struct.unpack_from(fmt, self.data, self.pos)[0]
    except struct.error:
      raise ValueError(f"{self.path} is truncated (GGUF header ends at byte {self.pos})") from None
    self.pos += struct.calcsize(fmt)
    return v

  def string(self) -> str:
    n = self.scalar("<Q")
    if self.pos + n > len(self.data):
      raise ValueError(f"{self.path} is truncated (a GGUF string of {n} bytes at byte {self.pos})")
    s = bytes(self.data[self.pos:self.pos + n]).decode("utf-8", errors="replace")
    self.pos += n
    return s

  def value(self, vtype: int) -> Any:
    if vtype == _GGUF_STRING:
      return self.string()
    if vtype == _GGUF_ARRAY:
      itype, n = self.scalar("<I"), self.scalar("<Q")
      if itype in _GGUF_SCALARS and itype != 7:  # numbers in bulk: one numpy read, not n struct calls
        import numpy as np
        dt = np.dtype(_GGUF_SCALARS[itype])
        if self.pos + n * dt.itemsize > len(self.data):
          raise ValueError(f"{self.path} is truncated (a GGUF array of {n} values at byte {self.pos})")
        # bytes first: an array over the mapping itself would keep it from being closed
        arr = np.frombuffer(bytes(self.data[self.pos:self.pos + n * dt.itemsize]), dtype=dt)
        self.pos += n * dt.itemsize
        return arr.tolist()
      return [self.value(itype) for _ in range(n)]
    if vtype in _GGUF_SCALARS:
      return self.scalar(_GGUF_SCALARS[vtype])
    raise ValueError(f"{self.path}: unknown GGUF value type {vtype} at byte {self.pos}")


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
      raise ValueError(f"{path} is not a GGUF file: it's too short")
    mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
  try:
    r = _GGUFReader(mm, path)
    if mm[:4] != b"GGUF":
      raise ValueError(f"{path} is not a GGUF file (it starts with {bytes(mm[:4])!r}, not b'GGUF')")
    r.pos = 4
    version = r.scalar("<I")
    if version not in (2, 3):
      what = "a big-endian GGUF file" if version & 0xFFFF == 0 else f"GGUF version {version}"
      raise NotImplementedError(f"{path} is {what}; gguf_load reads little-endian GGUF v2 and v3")
    n_tensors, n_kv = r.scalar("<Q"), r.scalar("<Q")
    kv: dict[str, Any] = {}
    for _ in range(n_kv):
      key = r.string()
      kv[key] = r.value(r.scalar("<I"))
    infos = []
    for _ in range(n_tensors):
      name, n_dims = r.string(), r.scalar("<I")
      dims = [r.scalar("<Q") for _ in range(n_dims)]
      infos.append((name, dims, r.scalar("<I"), r.scalar("<Q")))
    alignment = kv.get("general.alignment", 32)
    if not isinstance(alignment, int) or alignment <= 0:
      raise ValueError(f"{path}: general.alignment is {alignment!r}, not a positive integer")
    data_start, size = round_up(r.pos, alignment), len(mm)
  finally:
    mm.close()
  tensors: dict[str, Tensor] = {}
  for name, dims, ggml_type, offset in infos:
    shape, numel, start = tuple(int(d) for d in reversed(dims)), prod(dims), data_start + offset
    if ggml_type in _GGML_PLAIN:
      nbytes = numel * _GGML_PLAIN[ggml_type].itemsize
    elif ggml_type in _GGML_BLOCKS:
      bs, ts = _GGML_BLOCKS[ggml_type]
      if numel % bs or (dims and dims[0] % bs):
        raise ValueError(f"{path}: tensor {name!r} has {dims[0] if dims else 1} elements per row, not a multiple of the block size {bs}")
      nbytes = numel // bs * ts
    else:
      raise NotImplementedError(f"{path}: tensor {name!r} is {_GGML_NAMES.get(ggml_type, f'ggml type {ggml_type}')}, "
                                f"which gguf_load can't load (it dequantizes {', '.join(_GGML_NAMES[t] for t in _GGML_BLOCKS)})")
    if start + nbytes > size:
      raise ValueError(f"{path} is truncated: tensor {name!r} needs bytes {start}..{start + nbytes}, the file has {size}")
    if ggml_type in _GGML_PLAIN:
      tensors[name] = _disk_tensor(path, start, shape, _GGML_PLAIN[ggml_type])
    else:
      raw = np.frombuffer(_read_bytes(path, start, nbytes), dtype=np.uint8)
      tensors[name] = Tensor(ggml_dequantize(raw, ggml_type).reshape(shape), device=Device.DEFAULT)
  return kv, tensors
