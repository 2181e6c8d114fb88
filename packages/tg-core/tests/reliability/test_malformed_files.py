"""Weight loaders never write, and every malformed file ends in one clear error.

torch_load, safe_load and gguf_load open files read-only (a file's size, mtime and bytes are the same after a
load, and a read-only file loads), check every tensor's extent before reading it, and raise WeightsFileError
(a ValueError) naming the file and the tensor or field for every lying, truncated or malformed file: never a
file grown with zeros, a bare TypeError, a RecursionError or an allocation of a lying count.
"""
import hashlib
import json
import os
import pickle
import struct
import time
import zipfile
import zlib

import numpy as np
import pytest

from tg import dtypes
from tg.device import Buffer
from tg.nn.state import WeightsFileError, gguf_load, safe_load, torch_load


def _fingerprint(path):
  st = os.stat(path)
  with open(path, "rb") as f:
    return st.st_size, st.st_mtime_ns, hashlib.sha256(f.read()).hexdigest()


def _raises(fn, path, *words):
  """fn() raises WeightsFileError naming the file and each of `words`, and leaves the file as it was."""
  before = _fingerprint(path)
  with pytest.raises(WeightsFileError) as e:
    fn(path)
  msg = str(e.value)
  assert os.path.basename(path) in msg and all(w in msg for w in words), msg
  assert _fingerprint(path) == before, "the loader changed the file"
  return msg


# ---------- torch_load ----------

@pytest.mark.parametrize("zipped", [True, False], ids=["zip", "legacy"])
def test_torch_load_never_writes_and_loads_a_read_only_file(tmp_path, zipped):
  torch = pytest.importorskip("torch")
  sd = {"w": torch.arange(12, dtype=torch.float32).reshape(3, 4), "t": torch.arange(6, dtype=torch.int32).reshape(2, 3).t(), "b": torch.ones(5)}
  fn = str(tmp_path / "m.pth")
  torch.save(sd, fn, _use_new_zipfile_serialization=zipped)
  os.utime(fn, ns=(time.time_ns() - 10**10, time.time_ns() - 10**10))
  os.chmod(fn, 0o444)
  before = _fingerprint(fn)
  out = torch_load(fn)
  assert out["w"].device == "DISK" and out["w"].lazydata.base.buffer._buf.readonly, "mapped read-only: nothing can write through it"
  for k, v in sd.items():
    np.testing.assert_array_equal(out[k].numpy(), v.contiguous().numpy())
  assert _fingerprint(fn) == before


def test_truncated_legacy_pth_raises_instead_of_loading_zeros(tmp_path):
  torch = pytest.importorskip("torch")
  fn = str(tmp_path / "legacy.pth")
  torch.save({"weight": torch.arange(1000, dtype=torch.float32)}, fn, _use_new_zipfile_serialization=False)
  with open(fn, "r+b") as f:
    f.truncate(os.path.getsize(fn) - 2000)
  _raises(torch_load, fn, "storage")


def test_legacy_pth_with_a_lying_frame_length_raises_without_allocating_it(tmp_path):
  """A damaged legacy checkpoint whose pickle frame claims 2**62 bytes: WeightsFileError, not MemoryError (the
  unpickler read the file directly and allocated what the frame claimed)."""
  fn = str(tmp_path / "frame.pt")
  with open(fn, "wb") as f:
    f.write(pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2))  # the legacy format's magic number
    f.write(pickle.dumps(1001, protocol=2))  # its protocol version
    f.write(pickle.dumps({"little_endian": True}, protocol=2))
    f.write(b"\x80\x04\x95" + (2 ** 62).to_bytes(8, "little") + b"}.")  # PROTO 4, FRAME of 2**62 bytes
  _raises(torch_load, fn, "truncated")


@pytest.mark.parametrize("zipped", [True, False], ids=["zip", "legacy"])
@pytest.mark.parametrize("what", ["bytearray8", "long_binput"])
def test_torch_pickle_asking_for_a_huge_allocation_raises_without_making_it(tmp_path, zipped, what):
  """A damaged checkpoint pickle whose BYTEARRAY8 claims 2**40 bytes, or whose LONG_BINPUT stores at memo index
  2**31 - 1: the C unpickler allocates that before it reads a byte (a bytearray; a memo array of 2**32 pointers, each
  set to NULL: 32 GiB written, the process killed for memory where the allocation isn't refused). WeightsFileError
  naming the file now (it was MemoryError), checked in a child process limited to 2 GiB of address space."""
  import subprocess
  import sys
  obj = {"bytearray8": b"\x80\x02\x96" + struct.pack("<Q", 2 ** 40) + b"xx.",
         "long_binput": b"\x80\x02}r" + struct.pack("<I", 2 ** 31 - 1) + b"."}[what]
  fn = str(tmp_path / "m.pt")
  if zipped:
    with zipfile.ZipFile(fn, "w", zipfile.ZIP_STORED) as z:
      z.writestr("archive/data.pkl", obj)
  else:
    with open(fn, "wb") as f:
      for part in (0x1950A86A20F9469CFC6C, 1001, {"little_endian": True}):  # magic, protocol version, sys info
        f.write(pickle.dumps(part, protocol=2))
      f.write(obj + pickle.dumps([], protocol=2))
  code = ("import resource, sys\n"
          "resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))\n"
          "from tg.nn.state import WeightsFileError, torch_load\n"
          "try:\n  torch_load(sys.argv[1])\nexcept WeightsFileError as e:\n  print('WFE', e)\n")
  r = subprocess.run([sys.executable, "-c", code, fn], capture_output=True, text=True, timeout=120)
  assert r.returncode == 0 and r.stdout.startswith("WFE") and "m.pt" in r.stdout, (r.returncode, r.stdout, r.stderr[-2000:])


class _Storage:
  """Pickles as a torch storage: the persistent id torch.save writes."""

  def __init__(self, key, numel):
    self.key, self.numel = key, numel


class _Tensor:
  def __init__(self, storage, offset, size, stride):
    self.args = (storage, offset, size, stride)

  def __reduce__(self):
    import torch._utils
    return torch._utils._rebuild_tensor_v2, (*self.args, False, {})


def _torch_pickle(tensors, storages):
  """data.pkl of a torch checkpoint: tensors {name: (storage key, offset, size, stride)} of float32 storages of
  storages[key] elements (16 for a key not in `storages`)."""
  torch = pytest.importorskip("torch")
  import io

  class P(pickle.Pickler):
    def persistent_id(self, obj):
      return ("storage", torch.FloatStorage, obj.key, "cpu", obj.numel) if isinstance(obj, _Storage) else None
  objs = {key: _Storage(key, storages.get(key, 16)) for key, *_ in tensors.values()}
  buf = io.BytesIO()
  P(buf, protocol=2).dump({name: _Tensor(objs[key], off, size, stride) for name, (key, off, size, stride) in tensors.items()})
  return buf.getvalue()


def _torch_zip(path, tensors, storages, storage_bytes=None):
  """A torch zip checkpoint written by hand: tensors {name: (storage key, offset, size, stride)} of float32 storages."""
  pkl = _torch_pickle(tensors, storages)  # a key not in `storages` has no bytes
  with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
    z.writestr("archive/data.pkl", pkl)
    for k, n in storages.items():
      z.writestr(f"archive/data/{k}", (storage_bytes or {}).get(k, np.arange(n, dtype=np.float32).tobytes()))


@pytest.mark.parametrize("tensor, word", [
  (("0", 0, (20,), (1,)), "overruns"),             # more elements than the storage has
  (("0", -4, (4,), (1,)), "offset"),               # a negative storage offset
  (("0", 0, (4, 4), (8, 1)), "overruns"),          # strides reach past the end
  (("0", 0, (4,), (-1,)), "stride"),               # negative stride
  (("0", 0, (-4,), (1,)), "size"),                 # negative size
  (("0", 0, (2.5, 2), (2, 1)), "size"),            # a float size
  (("0", 0.5, (4,), (1,)), "offset"),              # a float offset
  (("0", None, (4,), (1,)), "offset"),             # no offset at all
  (("missing", 0, (4,), (1,)), "missing"),         # a storage the archive doesn't hold
], ids=["overrun", "negative_offset", "strided_overrun", "negative_stride", "negative_size", "float_size", "float_offset",
        "null_offset", "missing_storage"])
def test_a_lying_torch_tensor_names_the_file_and_the_tensor(tmp_path, tensor, word):
  fn = str(tmp_path / "lying.pt")
  _torch_zip(fn, {"layer.weight": tensor}, {"0": 16})
  _raises(torch_load, fn, "layer.weight", word)


def test_a_torch_zip_cut_short_is_an_error(tmp_path):
  fn = str(tmp_path / "cut.pt")
  _torch_zip(fn, {"w": ("0", 0, (16,), (1,))}, {"0": 16})
  data = open(fn, "rb").read()
  with open(fn, "wb") as f:
    f.write(data[:len(data) // 2])
  _raises(torch_load, fn)


@pytest.mark.parametrize("method", [zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA], ids=["deflate", "bzip2", "lzma"])
def test_a_compressed_torch_zip_loads_what_torch_saved(tmp_path, method):
  torch = pytest.importorskip("torch")
  w = torch.arange(24, dtype=torch.float32).reshape(4, 6)
  sd = {"w": w, "view": w[1:3], "t": torch.arange(6, dtype=torch.int16).reshape(2, 3).t(), "bf": torch.linspace(-2, 2, 7, dtype=torch.bfloat16)}
  fn = str(tmp_path / "stored.pth")
  torch.save(sd, fn)
  with zipfile.ZipFile(fn) as src, zipfile.ZipFile(str(tmp_path / "packed.pth"), "w", method) as dst:
    for info in src.infolist():  # what a zip tool that recompresses the archive writes
      dst.writestr(info.filename, src.read(info))
  out = torch_load(str(tmp_path / "packed.pth"))
  for k, v in sd.items():
    want = v.contiguous().view(torch.int16).numpy() if v.dtype == torch.bfloat16 else v.contiguous().numpy()
    got = out[k].bitcast(dtypes.int16).numpy() if v.dtype == torch.bfloat16 else out[k].numpy()
    np.testing.assert_array_equal(got, want)


def _raw_zip(path, members):
  """A zip written byte by byte, so a member can lie: members [(name, method, payload as stored, crc, declared size)]."""
  local, central = b"", b""
  for name, method, payload, crc, size in members:
    fields = struct.pack("<HHHHHIIIHH", 20, 0, method, 0, 0x21, crc, len(payload), size, len(name), 0)
    central += b"PK\x01\x02" + struct.pack("<H", 20) + fields + struct.pack("<HHHII", 0, 0, 0, 0, len(local)) + name.encode()
    local += b"PK\x03\x04" + fields + name.encode() + payload
  eocd = b"PK\x05\x06" + struct.pack("<HHHHIIH", 0, 0, len(members), len(members), len(central), len(local), 0)
  with open(path, "wb") as f:
    f.write(local + central + eocd)
  return path


def _deflate(data):
  c = zlib.compressobj(9, zlib.DEFLATED, -15)  # raw deflate, as zip stores it
  return c.compress(data) + c.flush()


def _deflate_zeros(n_mib):
  """A raw deflate stream of n_mib MiB of zeros (~1 KB each), made in milliseconds: after a full flush the compressor
  starts afresh, so every MiB compresses to the same bytes and the stream is that chunk repeated, then an empty final block."""
  c = zlib.compressobj(9, zlib.DEFLATED, -15)
  return (c.compress(bytes(1 << 20)) + c.flush(zlib.Z_FULL_FLUSH)) * n_mib + zlib.compressobj(9, zlib.DEFLATED, -15).flush()


def _compressed_pt(path, payload, crc, size, method=zipfile.ZIP_DEFLATED, numel=16):
  """A checkpoint whose tensor 'layer.weight' reads all of storage '0' (numel float32s, says the pickle), a compressed member
  holding `payload` that declares `size` bytes and CRC `crc`."""
  pkl = _torch_pickle({"layer.weight": ("0", 0, (numel,), (1,))}, {"0": numel})
  return _raw_zip(path, [("archive/data.pkl", 0, pkl, zlib.crc32(pkl), len(pkl)), ("archive/data/0", method, payload, crc, size)])


def test_a_hand_built_compressed_torch_zip_loads(tmp_path):
  data = np.arange(16, dtype=np.float32).tobytes()
  out = torch_load(_compressed_pt(str(tmp_path / "ok.pt"), _deflate(data), zlib.crc32(data), 64))
  np.testing.assert_array_equal(out["layer.weight"].numpy(), np.arange(16))


@pytest.mark.parametrize("size", [32, 128, (1 << 32) - 1], ids=["smaller", "larger", "4GiB"])
def test_a_compressed_storage_whose_size_disagrees_with_the_pickle(tmp_path, size):
  # the pickle says 16 float32s (64 bytes); the member declares other: said before a byte is decompressed
  data = bytes(size) if size < 1 << 20 else b""
  fn = _compressed_pt(str(tmp_path / "mismatch.pt"), _deflate(data), zlib.crc32(data), size)
  _raises(torch_load, fn, "layer.weight", "'0'", "64 bytes", f"{size} bytes")


@pytest.mark.parametrize("n, words", [(4096, ("more than",)), (32, ("32 bytes", "not the 64"))], ids=["more", "fewer"])
def test_a_compressed_storage_that_decompresses_to_other_than_declared(tmp_path, n, words):
  # the CRC is right for what zipfile would hand back (the first 64 bytes, or all 32): only counting the bytes shows the lie
  data = np.arange(n // 4, dtype=np.float32).tobytes()
  fn = _compressed_pt(str(tmp_path / "lying.pt"), _deflate(data), zlib.crc32(data[:64]), 64)
  _raises(torch_load, fn, "layer.weight", "'0'", *words)


def test_a_compressed_storage_with_a_bad_crc_or_stream(tmp_path):
  data = np.arange(16, dtype=np.float32).tobytes()
  _raises(torch_load, _compressed_pt(str(tmp_path / "crc.pt"), _deflate(data), zlib.crc32(data) ^ 1, 64), "layer.weight", "'0'", "CRC")
  _raises(torch_load, _compressed_pt(str(tmp_path / "garbage.pt"), b"\xff" * 40, zlib.crc32(data), 64), "layer.weight", "'0'")
  _raises(torch_load, _compressed_pt(str(tmp_path / "cut.pt"), _deflate(data)[:20], zlib.crc32(data), 64), "layer.weight", "'0'")


@pytest.mark.parametrize("damage", ["method", "offset", "stream"])
def test_a_torch_zip_with_a_damaged_byteorder_entry(tmp_path, damage):
  """The byteorder entry of a torch zip with a compression method number that is no method, a local header offset
  below 0, or a deflate stream of garbage: WeightsFileError naming the file (zipfile's NotImplementedError 'That
  compression method is not supported' and OSError [Errno 22] seeking to a negative header offset came out as
  they were)."""
  fn = str(tmp_path / "bo.pt")
  method = zipfile.ZIP_DEFLATED if damage == "stream" else zipfile.ZIP_STORED
  with zipfile.ZipFile(fn, "w") as z:
    z.writestr("archive/data.pkl", pickle.dumps({"a": 1}, protocol=2))
    z.writestr(zipfile.ZipInfo("archive/byteorder"), b"little", compress_type=method)
  data = bytearray(open(fn, "rb").read())
  cd = data.rindex(b"PK\x01\x02")  # the central directory entry of byteorder (the last one)
  if damage == "method":
    data[cd + 10:cd + 12] = struct.pack("<H", 77)
  elif damage == "offset":  # the end record's directory offset: zipfile shifts every entry's header offset below 0
    ecd = data.rindex(b"PK\x05\x06")
    data[ecd + 16:ecd + 20] = struct.pack("<I", 0x7FFFFFFF)
  else:
    local = data.index(b"PK\x03\x04", data.index(b"archive/data.pkl") + 1)
    start = local + 30 + struct.unpack_from("<H", data, local + 26)[0]
    data[start:start + 2] = b"\xff\xff"
  open(fn, "wb").write(bytes(data))
  _raises(torch_load, fn, "byteorder")


_BOMB_LOAD = """
import json, sys, time, tracemalloc
from tg.nn.state import WeightsFileError, torch_load
tracemalloc.start()
t = time.perf_counter()
try:
  torch_load(sys.argv[1])
  err = None
except WeightsFileError as e:
  err = str(e)
print(json.dumps({"s": time.perf_counter() - t, "peak": tracemalloc.get_traced_memory()[1], "err": err}))
"""


@pytest.mark.parametrize("method", [zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2], ids=["deflate", "bzip2"])
def test_a_compressed_zip_bomb_is_refused_without_allocating(tmp_path, method):
  # 1 GiB of zeros deflated (1 MB), or 64 MiB in bzip2 (~100 bytes), declared (by the pickle and the zip) a 64-byte storage
  # with the CRC of 64 zeros: zipfile would decompress all of it to hand back 64 bytes. Run apart, so a regression can't take
  # this process's memory, and measured there.
  import bz2
  import subprocess
  import sys
  if method == zipfile.ZIP_DEFLATED:
    payload = _deflate_zeros(1024)
  else:
    c = bz2.BZ2Compressor(9)
    payload = b"".join(c.compress(bytes(1 << 20)) for _ in range(64)) + c.flush()
  fn = _compressed_pt(str(tmp_path / "bomb.pt"), payload, zlib.crc32(bytes(64)), 64, method)
  res = subprocess.run([sys.executable, "-c", _BOMB_LOAD, fn], capture_output=True, text=True, timeout=120)
  assert res.returncode == 0, res.stderr
  got = json.loads(res.stdout.splitlines()[-1])
  assert got["err"] is not None and "layer.weight" in got["err"] and "'0'" in got["err"], got
  assert got["peak"] < 8 << 20, f"decompressing the bomb allocated {got['peak'] / 2**20:.0f} MiB"
  assert got["s"] < 5, got  # a hang guard only: a loaded CI machine takes 0.7 s where an idle one takes 0.05 s


def test_a_read_only_disk_buffer_past_the_end_is_an_error_not_a_longer_file(tmp_path):
  path = str(tmp_path / "small.bin")
  np.arange(4, dtype=np.int32).tofile(path)
  before = _fingerprint(path)
  with pytest.raises(ValueError, match="truncated"):
    Buffer("DISK", 8, dtypes.int32, options=(path, 0, "r")).ensure_allocated()
  ok = Buffer("DISK", 2, dtypes.int32, options=(path, 8, "r")).ensure_allocated()
  np.testing.assert_array_equal(np.frombuffer(ok.as_buffer(), np.int32), [2, 3])
  assert _fingerprint(path) == before


def test_disk_writes_still_work(tmp_path):
  path = str(tmp_path / "raw.bin")
  Buffer("DISK", 4, dtypes.int32, options=path).copyin(memoryview(np.array([1, 2, 3, 4], np.int32).view(np.uint8)))
  np.testing.assert_array_equal(np.fromfile(path, np.int32), [1, 2, 3, 4])


# ---------- safetensors ----------

def _safetensors(path, header, data=b"", n=None):
  j = header if isinstance(header, bytes) else json.dumps(header).encode()
  with open(path, "wb") as f:
    f.write((len(j) if n is None else n).to_bytes(8, "little") + j + data)
  return path


def test_safe_load_reads_a_file_the_safetensors_package_wrote(tmp_path):
  st = pytest.importorskip("safetensors.numpy")
  fn = str(tmp_path / "ok.safetensors")
  st.save_file({"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.zeros(0, np.int64)}, fn)
  out = safe_load(fn)
  np.testing.assert_array_equal(out["a"].numpy(), np.arange(6).reshape(2, 3))
  assert out["b"].shape == (0,)


F32_4 = {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}


@pytest.mark.parametrize("header, data, words", [
  ({"a": F32_4, "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}}, bytes(24), ("overlap",)),
  ({"a": {"dtype": "F32", "shape": [2.5, 2], "data_offsets": [0, 16]}}, bytes(16), ("'a'", "shape")),
  ({"a": {"dtype": "F32", "shape": [True, 4], "data_offsets": [0, 16]}}, bytes(16), ("'a'", "shape")),
  ({"a": {"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}}, bytes(16), ("'a'", "shape")),
  ({"a": {"dtype": "F32", "shape": "4", "data_offsets": [0, 16]}}, bytes(16), ("'a'", "shape")),
  ({"a": {"dtype": "F32", "shape": [4], "data_offsets": None}}, bytes(16), ("'a'", "data_offsets")),
  ({"a": {"dtype": "F32", "shape": [4], "data_offsets": [None, 16]}}, bytes(16), ("'a'", "data_offsets")),
  ({"a": {"dtype": "F32", "shape": [4], "data_offsets": ["0", "16"]}}, bytes(16), ("'a'", "data_offsets")),
  ({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16, 32]}}, bytes(16), ("'a'", "data_offsets")),
  ({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0.0, 16.0]}}, bytes(16), ("'a'", "data_offsets")),
  ({"a": {"dtype": "F32", "shape": [0], "data_offsets": [8, 0]}}, bytes(16), ("'a'", "data_offsets")),
  ({"a": {"dtype": "F32", "shape": [4], "data_offsets": [16, 32]}}, bytes(16), ("'a'", "data_offsets")),
  ({"a": {"dtype": "F32", "shape": [4], "data_offsets": [-16, 0]}}, bytes(16), ("'a'", "data_offsets")),
  ({"a": {"dtype": "Q4", "shape": [4], "data_offsets": [0, 16]}}, bytes(16), ("'a'", "dtype")),
  ({"a": {"dtype": None, "shape": [4], "data_offsets": [0, 16]}}, bytes(16), ("'a'", "dtype")),
  ({"a": {"shape": [4], "data_offsets": [0, 16]}}, bytes(16), ("'a'", "dtype")),
  ({"a": [1, 2]}, bytes(16), ("'a'",)),
  ({"__metadata__": ["x"], "a": F32_4}, bytes(16), ("__metadata__",)),
  ([F32_4], bytes(16), ("header",)),
], ids=["overlap", "float_shape", "bool_shape", "negative_shape", "string_shape", "null_offsets", "null_begin", "string_offsets",
        "three_offsets", "float_offsets", "reversed_offsets", "past_the_end", "negative_offset", "unknown_dtype", "null_dtype",
        "no_dtype", "entry_not_an_object", "metadata_not_an_object", "header_not_an_object"])
def test_a_malformed_safetensors_file_names_the_file_and_the_field(tmp_path, header, data, words):
  fn = _safetensors(str(tmp_path / "bad.safetensors"), header, data)
  _raises(safe_load, fn, *words)


def test_safetensors_deeply_nested_header(tmp_path):
  depth = 100_000
  fn = _safetensors(str(tmp_path / "deep.safetensors"), b'{"a": ' + b"[" * depth + b"]" * depth + b"}")
  _raises(safe_load, fn, "header")


def test_safetensors_header_length_lying(tmp_path):
  fn = _safetensors(str(tmp_path / "long.safetensors"), {"a": F32_4}, bytes(16), n=1 << 40)
  _raises(safe_load, fn, "header")
  fn = _safetensors(str(tmp_path / "short.safetensors"), {"a": F32_4}, bytes(16), n=10)
  _raises(safe_load, fn, "header")
  with open(fn, "wb") as f:
    f.write(b"\x05\0\0")
  _raises(safe_load, fn)


# ---------- GGUF ----------

def _gstr(s):
  b = s.encode()
  return struct.pack("<Q", len(b)) + b


def _gguf(path, kv=b"", n_kv=0, tensors=b"", n_tensors=0, data=b"", align=32):
  head = b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv) + kv + tensors
  head += b"\0" * (-len(head) % align)
  with open(path, "wb") as f:
    f.write(head + data)
  return path


def _tensor_info(name, dims, ggml_type=0, offset=0):
  return _gstr(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", ggml_type, offset)


def test_gguf_by_hand_loads(tmp_path):
  fn = _gguf(str(tmp_path / "ok.gguf"), kv=_gstr("k") + struct.pack("<II", 4, 7), n_kv=1,
             tensors=_tensor_info("w", [3, 2]), n_tensors=1, data=np.arange(6, dtype=np.float32).tobytes())
  kv, t = gguf_load(fn)
  assert kv == {"k": 7}
  np.testing.assert_array_equal(t["w"].numpy(), np.arange(6).reshape(2, 3))


def _nested_array(depth):
  # depth arrays of one array each, the innermost an empty array of uint8
  return b"".join(struct.pack("<IQ", 9, 1) for _ in range(depth)) + struct.pack("<IQ", 0, 0)


@pytest.mark.parametrize("make, words", [
  (lambda p: _gguf(p, kv=_gstr("deep") + struct.pack("<I", 9) + _nested_array(100_000)[4:], n_kv=1), ("deep",)),
  (lambda p: _gguf(p, n_kv=1 << 60), ("count",)),
  (lambda p: _gguf(p, n_tensors=1 << 60), ("count",)),
  (lambda p: _gguf(p, kv=_gstr("a") + struct.pack("<IIQ", 9, 8, 1 << 60), n_kv=1), ("'a'",)),
  (lambda p: _gguf(p, kv=_gstr("a") + struct.pack("<IIQ", 9, 4, 1 << 60), n_kv=1), ("'a'",)),
  (lambda p: _gguf(p, kv=struct.pack("<Q", 1 << 60) + b"k", n_kv=1), ("string",)),
  (lambda p: _gguf(p, kv=_gstr("a") + struct.pack("<I", 99), n_kv=1), ("'a'", "type")),
  (lambda p: _gguf(p, tensors=_gstr("w") + struct.pack("<I", 1 << 31), n_tensors=1), ("'w'", "dims")),
  (lambda p: _gguf(p, tensors=_tensor_info("w", [4], offset=1 << 40), n_tensors=1, data=bytes(16)), ("'w'",)),
  (lambda p: _gguf(p, tensors=_tensor_info("w", [1 << 62, 1 << 62]), n_tensors=1, data=bytes(16)), ("'w'",)),
  (lambda p: _gguf(p, tensors=_tensor_info("w", [4]) + _tensor_info("w", [4]), n_tensors=2, data=bytes(16)), ("'w'", "twice")),
  (lambda p: _gguf(p, kv=_gstr("general.alignment") + struct.pack("<II", 4, 0), n_kv=1), ("alignment",)),
], ids=["nested_arrays", "kv_count", "tensor_count", "string_array_count", "number_array_count", "string_length", "value_type",
        "n_dims", "offset_past_end", "dims_overflow", "duplicate_name", "zero_alignment"])
def test_a_malformed_gguf_file_names_the_file_and_the_field(tmp_path, make, words):
  fn = make(str(tmp_path / "bad.gguf"))
  st = time.perf_counter()
  _raises(gguf_load, fn, *words)
  assert time.perf_counter() - st < 5, "a lying count was believed"


def test_a_gguf_file_the_gguf_package_wrote_cut_anywhere(tmp_path):
  gguf = pytest.importorskip("gguf")
  fn = str(tmp_path / "real.gguf")
  w = gguf.GGUFWriter(fn, "llama")
  w.add_array("tokens", ["a", "bc", "def"] * 20)
  w.add_uint32("n", 7)
  w.add_tensor("w", np.arange(64, dtype=np.float32).reshape(8, 8))
  w.write_header_to_file()
  w.write_kv_data_to_file()
  w.write_tensors_to_file()
  w.close()
  np.testing.assert_array_equal(gguf_load(fn)[1]["w"].numpy(), np.arange(64).reshape(8, 8))
  data = open(fn, "rb").read()
  for cut in range(24, len(data), 37):
    with open(fn, "wb") as f:
      f.write(data[:cut])
    _raises(gguf_load, fn)


def test_a_truncated_gguf_file(tmp_path):
  fn = _gguf(str(tmp_path / "cut.gguf"), kv=_gstr("key") + struct.pack("<I", 8) + _gstr("value"), n_kv=1,
             tensors=_tensor_info("w", [16]), n_tensors=1, data=bytes(64))
  data = open(fn, "rb").read()
  for cut in (30, 45, 60, len(data) - 10):
    with open(fn, "wb") as f:
      f.write(data[:cut])
    _raises(gguf_load, fn)


def test_every_loader_error_is_a_value_error():
  assert issubclass(WeightsFileError, ValueError)
