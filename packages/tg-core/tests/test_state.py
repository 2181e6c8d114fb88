"""Weights in and out: load_state_dict, safetensors, torch checkpoints and GGUF, checked against the reference
libraries (safetensors, torch, gguf) reading our files and writing the files we read."""
import json
import os
import zipfile

import numpy as np
import pytest

from tg import Device, Tensor, dtypes
from tg.device import is_dtype_supported
from tg.dtype import DType
from tg.helpers import GlobalCounters
from tg.nn.state import (
  StateDictKeyError,
  get_state_dict,
  ggml_dequantize,
  gguf_load,
  load_state_dict,
  safe_load,
  safe_load_metadata,
  safe_save,
  torch_load,
)

# ---------- test data: every dtype, as numpy arrays (bfloat16 as its raw 16-bit words) ----------

NP_DTYPES: dict[DType, str] = {dtypes.bool: "bool", dtypes.int8: "int8", dtypes.uint8: "uint8", dtypes.int16: "int16",
                               dtypes.uint16: "uint16", dtypes.int32: "int32", dtypes.uint32: "uint32", dtypes.int64: "int64",
                               dtypes.uint64: "uint64", dtypes.float16: "float16", dtypes.float32: "float32", dtypes.float64: "float64"}
ALL_DTYPES = [*NP_DTYPES, dtypes.bfloat16]


def sample(dtype: DType, shape: tuple[int, ...] = (3, 5), seed: int = 0) -> np.ndarray:
  """Values that use the dtype's whole range (extremes included); bfloat16 as uint16 bit patterns."""
  rng = np.random.default_rng(seed)
  n = int(np.prod(shape))
  if dtype == dtypes.bool:
    return (rng.integers(0, 2, n) == 1).reshape(shape)
  if dtype == dtypes.bfloat16:
    vals = rng.standard_normal(n).astype(np.float32) * 100
    return (vals.view(np.uint32) >> 16).astype(np.uint16).reshape(shape)  # truncated to bfloat16 bits
  npd = np.dtype(NP_DTYPES[dtype])
  if npd.kind in "iu":
    info = np.iinfo(npd)
    out = rng.integers(info.min, info.max, n, dtype=npd, endpoint=True)
    out[:2] = [info.min, info.max]
    return out.reshape(shape)
  return (rng.standard_normal(n) * 1000).astype(npd).reshape(shape)


def bits(a: np.ndarray) -> np.ndarray:
  """An array's raw bits, so floats compare exactly (NaN included)."""
  return a.view(f"u{a.dtype.itemsize}") if a.dtype != np.bool_ else a


def tg_tensor(dtype: DType, data: np.ndarray) -> Tensor:
  """A tensor on Device.DEFAULT holding `data` (bfloat16 from its bit patterns)."""
  if dtype == dtypes.bfloat16:
    return Tensor((data.astype(np.uint32) << 16).view(np.float32), dtype=dtypes.bfloat16)  # exact: the low bits are zero
  return Tensor(data)


def tg_bits(t: Tensor) -> np.ndarray:
  """A tensor's values as numpy, bfloat16 as its 16-bit patterns."""
  out = t.numpy()
  if t.dtype == dtypes.bfloat16:
    return (out.view(np.uint32) >> 16).astype(np.uint16)
  return out


# ---------- safetensors ----------

def test_safe_save_is_read_by_safetensors(tmp_path) -> None:
  st = pytest.importorskip("safetensors.torch")
  import torch
  data = {f"t_{NP_DTYPES.get(d, 'bfloat16')}": sample(d, seed=i) for i, d in enumerate(ALL_DTYPES)}
  tensors = {k: tg_tensor(d, v) for (k, v), d in zip(data.items(), ALL_DTYPES)}
  fn = str(tmp_path / "m.safetensors")
  safe_save(tensors, fn, metadata={"format": "pt", "who": "tg"})
  loaded = st.load_file(fn)
  assert set(loaded) == set(data)
  for (k, v), d in zip(data.items(), ALL_DTYPES):
    ref = loaded[k]
    assert tuple(ref.shape) == v.shape
    if d == dtypes.bfloat16:
      assert ref.dtype == torch.bfloat16
      np.testing.assert_array_equal(ref.view(torch.int16).numpy().view(np.uint16), v)
    else:
      np.testing.assert_array_equal(bits(ref.numpy()), bits(v))
  from safetensors import safe_open
  with safe_open(fn, framework="np") as f:
    assert f.metadata() == {"format": "pt", "who": "tg"}


def test_safe_save_header_layout(tmp_path) -> None:
  fn = str(tmp_path / "m.safetensors")
  safe_save({"a": Tensor([1.0, 2.0, 3.0]), "b": Tensor([[1, 2]], dtype=dtypes.int16)}, fn)
  raw = open(fn, "rb").read()
  n = int.from_bytes(raw[:8], "little")
  assert (8 + n) % 8 == 0  # the data starts aligned, the header padded with spaces
  header = raw[8:8 + n]
  assert header == header.rstrip(b" ") + b" " * (len(header) - len(header.rstrip(b" ")))
  parsed = json.loads(header)
  assert parsed["a"] == {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]}
  assert parsed["b"] == {"dtype": "I16", "shape": [1, 2], "data_offsets": [12, 16]}
  assert len(raw) == 8 + n + 16
  np.testing.assert_array_equal(np.frombuffer(raw[8 + n:8 + n + 12], "<f4"), [1, 2, 3])


def test_safe_load_reads_safetensors_files(tmp_path) -> None:
  stn = pytest.importorskip("safetensors.numpy")
  import torch
  from safetensors.torch import save_file as torch_save_file
  data = {f"t_{NP_DTYPES[d]}": sample(d, (2, 3, 4), seed=i) for i, d in enumerate(NP_DTYPES)}
  data["scalar"], data["empty"] = np.array(3.5, np.float32), np.zeros((0, 4), np.float32)
  fn = str(tmp_path / "np.safetensors")
  stn.save_file(data, fn, metadata={"k": "v"})
  loaded = safe_load(fn)
  assert set(loaded) == set(data)
  for k, v in data.items():
    t = loaded[k]
    assert t.device == "DISK" and t.shape == v.shape and t.dtype == dtypes.from_np(v.dtype)
    np.testing.assert_array_equal(bits(t.numpy()), bits(v))
    np.testing.assert_array_equal(bits(t.to(Device.DEFAULT).numpy()), bits(v))
  assert safe_load_metadata(fn)[2]["__metadata__"] == {"k": "v"}
  # bfloat16 through safetensors' torch writer (numpy has no bfloat16)
  bf = sample(dtypes.bfloat16, (4, 4))
  fn2 = str(tmp_path / "bf.safetensors")
  torch_save_file({"w": torch.from_numpy(bf.view(np.int16)).view(torch.bfloat16)}, fn2)
  w = safe_load(fn2)["w"]
  assert w.dtype == dtypes.bfloat16 and w.device == "DISK"
  np.testing.assert_array_equal(tg_bits(w.to(Device.DEFAULT)), bf)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
def test_safetensors_round_trip(tmp_path, dtype: DType) -> None:
  v = sample(dtype, (4, 3))
  fn = str(tmp_path / "rt.safetensors")
  safe_save({"x": tg_tensor(dtype, v), "y": tg_tensor(dtype, v[1:3])}, fn)
  out = safe_load(fn)
  assert out["x"].dtype == dtype and out["x"].shape == (4, 3) and out["y"].shape == (2, 3)
  np.testing.assert_array_equal(bits(tg_bits(out["x"])), bits(v))
  np.testing.assert_array_equal(bits(tg_bits(out["y"].to(Device.DEFAULT))), bits(v[1:3]))


def test_safe_load_maps_the_file_and_copies_only_what_moves(tmp_path) -> None:
  fn = str(tmp_path / "big.safetensors")
  a, b = np.arange(1000, dtype=np.float32), np.arange(10, dtype=np.int64) * 7
  safe_save({"a": Tensor(a), "b": Tensor(b)}, fn)
  out = safe_load(fn)
  bufs = [out[k].lazydata.base.buffer for k in ("a", "b")]
  assert all(t.device == "DISK" and t.lazydata.realized is not None for t in out.values())
  # each tensor is a view into one shared mapping of the file, at its own offset
  assert bufs[0]._buf.obj is bufs[1]._buf.obj and len(bufs[0]._buf.obj) == os.path.getsize(fn)
  before = GlobalCounters.global_mem
  moved = out["b"].to(Device.DEFAULT).realize()
  assert GlobalCounters.global_mem - before == b.nbytes  # one copy, of b's 80 bytes only
  np.testing.assert_array_equal(moved.numpy(), b)
  np.testing.assert_array_equal(((out["a"].to(Device.DEFAULT)) * 2).numpy(), a * 2)


def test_safe_save_replaces_atomically(tmp_path) -> None:
  fn = str(tmp_path / "w.safetensors")
  safe_save({"w": Tensor([1.0, 2.0])}, fn)
  old = safe_load(fn)["w"]
  safe_save({"w": Tensor([5.0, 6.0, 7.0, 8.0])}, fn)  # tensors loaded before keep reading the old file
  np.testing.assert_array_equal(old.numpy(), [1, 2])
  np.testing.assert_array_equal(safe_load(fn)["w"].numpy(), [5, 6, 7, 8])
  safe_save(safe_load(fn), fn)  # saving a file's own tensors over it
  np.testing.assert_array_equal(safe_load(fn)["w"].numpy(), [5, 6, 7, 8])
  assert os.listdir(tmp_path) == ["w.safetensors"]  # no temporary files left behind
  open(tmp_path / "plain", "wb").close()
  assert os.stat(fn).st_mode == os.stat(tmp_path / "plain").st_mode  # permissions as open() gives, not a temp file's


def test_safe_save_over_a_file_keeps_its_mode_and_writes_through_a_link(tmp_path) -> None:
  """Saving over a private checkpoint keeps it private (it came back 0o644), and a path that is a symbolic link saves
  into the file it points to, as open() would (the link was replaced by a file, the target kept the old weights)."""
  fn = str(tmp_path / "private.safetensors")
  safe_save({"a": Tensor([1.0])}, fn)
  os.chmod(fn, 0o600)
  safe_save({"a": Tensor([2.0])}, fn)
  assert os.stat(fn).st_mode & 0o777 == 0o600
  real, link = str(tmp_path / "real.safetensors"), str(tmp_path / "link.safetensors")
  safe_save({"a": Tensor([1.0])}, real)
  os.symlink(real, link)
  safe_save({"a": Tensor([3.0])}, link)
  assert os.path.islink(link) and os.path.realpath(link) == os.path.realpath(real)
  np.testing.assert_array_equal(safe_load(real)["a"].numpy(), [3.0])
  assert sorted(os.listdir(tmp_path)) == ["link.safetensors", "private.safetensors", "real.safetensors"]


def test_safetensors_errors(tmp_path) -> None:
  fn = str(tmp_path / "e.safetensors")
  with pytest.raises(TypeError, match="str to str"):
    safe_save({"a": Tensor([1.0])}, fn, metadata={"epoch": 3})  # type: ignore[dict-item]
  safe_save({"a": Tensor([1.0, 2.0, 3.0])}, fn)
  raw = open(fn, "rb").read()
  open(fn, "wb").write(raw[:-4])
  with pytest.raises(ValueError, match="data_offsets"):
    safe_load(fn)
  open(fn, "wb").write(b"\xff" * 8 + b"{}")
  with pytest.raises(ValueError, match="not a safetensors file"):
    safe_load(fn)


def test_disk_buffers_at_offsets_share_one_mapping(tmp_path) -> None:
  import gc

  from tg.device import Buffer
  from tg.plugins import disk
  path = str(tmp_path / "raw.bin")
  np.arange(16, dtype=np.int32).tofile(path)
  a = Buffer("DISK", 4, dtypes.int32, options=(path, 8)).ensure_allocated()
  b = Buffer("DISK", 2, dtypes.int32, options=(path, 40)).ensure_allocated()
  assert a._buf.obj is b._buf.obj  # one mapping of the file
  np.testing.assert_array_equal(np.frombuffer(a.as_buffer(), np.int32), [2, 3, 4, 5])
  b.copyin(memoryview(np.array([-1, -2], np.int32).view(np.uint8)))
  np.testing.assert_array_equal(np.fromfile(path, np.int32)[10:12], [-1, -2])  # written through to the file
  c = Buffer("DISK", 2, dtypes.int32, options=(path, 64)).ensure_allocated()  # past the end: the file grows
  assert os.path.getsize(path) == 72 and c._buf.obj is not a._buf.obj
  key = os.path.realpath(path)
  del a, b, c
  gc.collect()
  assert key not in disk._mappings  # unmapped once no buffer uses it
  with pytest.raises(ValueError, match="byte offset"):
    Buffer("DISK", 1, dtypes.int32, options=(path, -4)).ensure_allocated()


# ---------- load_state_dict ----------

needs_f16 = pytest.mark.skipif(not is_dtype_supported(dtypes.float16), reason="the device has no float16 (Renderer.missing_dtypes)")


class Model:
  def __init__(self) -> None:
    self.l1 = {"weight": Tensor.zeros(3, 2).contiguous().realize(), "bias": Tensor.zeros(3).contiguous().realize()}
    self.layers = [Tensor.zeros(4, dtype=dtypes.float16).contiguous().realize()]


@needs_f16  # Model has a float16 tensor
def test_load_state_dict_assigns_in_place() -> None:
  m = Model()
  w, b = m.l1["weight"], m.l1["bias"]
  sd = {"l1.weight": Tensor(np.arange(6, dtype=np.float32).reshape(3, 2)), "l1.bias": Tensor([1, 2, 3], dtype=dtypes.int32),
        "layers.0": Tensor([0.5, 1.5, 2.5, 3.5])}
  load_state_dict(m, sd)
  assert m.l1["weight"] is w and m.l1["bias"] is b  # the same objects, new values
  np.testing.assert_array_equal(w.numpy(), np.arange(6).reshape(3, 2))
  assert b.dtype == dtypes.float32 and m.layers[0].dtype == dtypes.float16  # cast to the model's dtypes
  np.testing.assert_array_equal(b.numpy(), [1, 2, 3])
  np.testing.assert_array_equal(m.layers[0].numpy(), np.array([0.5, 1.5, 2.5, 3.5], np.float16))
  assert all(t.lazydata.realized is not None for t in get_state_dict(m).values())


@needs_f16  # Model has a float16 tensor
def test_load_state_dict_from_disk(tmp_path) -> None:
  m = Model()
  fn = str(tmp_path / "m.safetensors")
  vals = {k: np.full(v.shape, i + 1, np.float16) for i, (k, v) in enumerate(get_state_dict(m).items())}
  safe_save({k: Tensor(v) for k, v in vals.items()}, fn)
  sd = safe_load(fn)
  load_state_dict(m, sd, consume=True)
  assert sd == {}
  for k, t in get_state_dict(m).items():
    assert t.device == Device.DEFAULT
    np.testing.assert_array_equal(t.numpy(), vals[k])


@needs_f16  # Model has a float16 tensor
def test_load_state_dict_strict_errors() -> None:
  m = Model()
  sd = {"l1.weight": Tensor.ones(3, 2), "layers.0": Tensor.ones(4), "extra.thing": Tensor.ones(1)}
  with pytest.raises(KeyError) as e:
    load_state_dict(m, sd)
  assert isinstance(e.value, StateDictKeyError)
  msg = str(e.value)
  assert "missing keys ['l1.bias']" in msg and "unexpected keys ['extra.thing']" in msg
  assert (m.l1["weight"].numpy() == 0).all()  # nothing loaded
  load_state_dict(m, sd, strict=False)  # loads what matches, skips the rest
  assert (m.l1["weight"].numpy() == 1).all() and (m.l1["bias"].numpy() == 0).all()


@needs_f16  # Model has a float16 tensor
def test_load_state_dict_shape_mismatch() -> None:
  m = Model()
  sd = {"l1.weight": Tensor.ones(2, 3), "l1.bias": Tensor.ones(3), "layers.0": Tensor.ones(4)}
  with pytest.raises(ValueError, match=r"'l1.weight'.*\(2, 3\).*\(3, 2\)"):
    load_state_dict(m, sd)
  with pytest.raises(ValueError, match=r"l1\.weight"):
    load_state_dict(m, sd, strict=False)


def test_load_state_dict_non_tensor_values() -> None:
  # tinygrad and torch take Tensors only (torch: RuntimeError "expected torch.Tensor ... but received numpy.ndarray");
  # a numpy array or a torch tensor is refused up front, naming the key, before any key is assigned (the numpy value
  # under 'bias' used to fail deep in dtype code after 'weight' had been assigned, and that assign landed later)
  from tg.nn import Linear
  m = Linear(3, 2)
  before = m.weight.numpy().copy()
  values: list[object] = [np.ones(2, np.float32)]
  try:
    import torch
    values.append(torch.ones(2))
  except ImportError:
    pass
  for bad in values:
    with pytest.raises(TypeError, match=r"'bias'.*Tensor") as e:
      load_state_dict(m, {"weight": Tensor.full((2, 3), 7.0), "bias": bad})  # type: ignore[dict-item]
    assert isinstance(e.value, RuntimeError)  # as torch raises
    np.testing.assert_array_equal(m.weight.numpy(), before)  # nothing assigned, nothing pending
  load_state_dict(m, {"weight": Tensor.full((2, 3), 7.0), "bias": Tensor(np.ones(2, np.float32))})  # converted, it loads
  np.testing.assert_array_equal(m.weight.numpy(), np.full((2, 3), 7.0))


# ---------- torch checkpoints ----------

TORCH_DTYPES = ["float32", "float16", "bfloat16", "float64", "int64", "int32", "int16", "int8", "uint8", "bool", "uint16"]


def torch_state(torch):  # type: ignore[no-untyped-def]
  g = torch.Generator().manual_seed(0)
  sd = {}
  for name in TORCH_DTYPES:
    dt = getattr(torch, name)
    x = torch.randn(3, 4, generator=g) * 50
    sd[name] = (x > 0) if name == "bool" else x.to(torch.int64).to(dt) if name.startswith("int") or name.startswith("uint") else x.to(dt)
  sd["uint8"] = torch.tensor([[0, 255, 17, 3]], dtype=torch.uint8)
  sd["uint16"] = torch.tensor([1, 2, 65535], dtype=torch.uint16)  # saved as untyped storage + dtype (_rebuild_tensor_v3)
  sd["scalar"] = torch.tensor(2.5)
  sd["empty"] = torch.zeros(0, 3)
  base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
  sd["transposed"] = base.t()                # non-contiguous, strides (1, 6)
  sd["stepped"] = base[1:, ::2]              # offset and a step
  sd["expanded"] = torch.arange(3, dtype=torch.int32).expand(4, 3)  # stride 0
  sd["bf16_t"] = base.to(torch.bfloat16).t()
  shared = torch.arange(20, dtype=torch.int64)
  sd["view_a"], sd["view_b"] = shared[2:8], shared[5:17].view(3, 4)  # two views of one storage, at offsets
  return sd


def as_numpy(t):  # type: ignore[no-untyped-def]
  import torch
  if t.dtype == torch.bfloat16:
    return t.contiguous().view(torch.int16).numpy().view(np.uint16)
  if t.dtype == torch.uint16:
    return t.to(torch.int32).numpy().astype(np.uint16)
  return t.contiguous().numpy()


@pytest.mark.parametrize("zipped", [True, False], ids=["zip", "legacy"])
def test_torch_load(tmp_path, zipped: bool) -> None:
  torch = pytest.importorskip("torch")
  sd = torch_state(torch)
  fn = str(tmp_path / "m.pt")
  torch.save(sd, fn, _use_new_zipfile_serialization=zipped)
  out = torch_load(fn)
  assert list(out) == list(sd)
  for k, ref in sd.items():
    t = out[k]
    assert t.shape == tuple(ref.shape), k
    assert t.dtype == getattr(dtypes, str(ref.dtype).removeprefix("torch.")), k
    np.testing.assert_array_equal(tg_bits(t), as_numpy(ref), err_msg=k)
    np.testing.assert_array_equal(tg_bits(t.to(Device.DEFAULT)), as_numpy(ref), err_msg=k)
  # contiguous tensors stay on DISK, mapped from the file; the two views share the storage's bytes
  assert out["float32"].device == "DISK" and out["view_a"].device == "DISK" and out["view_b"].device == "DISK"
  assert out["transposed"].device == Device.DEFAULT  # gathered on the host
  assert out["view_a"].lazydata.base.buffer._buf.obj is out["view_b"].lazydata.base.buffer._buf.obj


def test_torch_load_checkpoint_objects(tmp_path) -> None:
  torch = pytest.importorskip("torch")
  import argparse
  lin = torch.nn.Linear(3, 2)
  ckpt = {"model": lin.state_dict(), "params": list(lin.parameters()), "epoch": 7, "args": argparse.Namespace(lr=0.1),
          "tied": [lin.weight, lin.weight], "size": torch.Size([2, 3]), "device": torch.device("cpu"),
          "buffer": torch.nn.Buffer(torch.ones(2))}
  fn = str(tmp_path / "ckpt.pth")
  torch.save(ckpt, fn)
  out = torch_load(fn)
  assert out["epoch"] == 7 and out["size"] == (2, 3) and out["device"] == "cpu"
  np.testing.assert_array_equal(out["model"]["weight"].numpy(), lin.weight.detach().numpy())
  np.testing.assert_array_equal(out["params"][1].numpy(), lin.bias.detach().numpy())  # nn.Parameter -> Tensor
  assert out["tied"][0] is out["tied"][1]  # one pickled tensor, one Tensor
  np.testing.assert_array_equal(out["buffer"].numpy(), [1, 1])  # a tensor subclass (_rebuild_from_type_v2) loads as its tensor
  assert "argparse.Namespace" in repr(out["args"]) and out["args"].state == {"lr": 0.1}  # not imported, not run


def test_torch_load_into_model(tmp_path) -> None:
  torch = pytest.importorskip("torch")
  from tg.nn import Linear
  ref = torch.nn.Linear(4, 3).half()
  fn = str(tmp_path / "lin.pt")
  torch.save(ref.state_dict(), fn)
  m = Linear(4, 3)
  load_state_dict(m, torch_load(fn))
  assert m.weight.dtype == dtypes.float32
  x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
  expected = x @ ref.weight.detach().float().numpy().T + ref.bias.detach().float().numpy()
  np.testing.assert_allclose(m(Tensor(x)).numpy(), expected, rtol=1e-5, atol=1e-5)


def test_torch_load_compressed_and_big_endian(tmp_path) -> None:
  torch = pytest.importorskip("torch")
  sd = {"w": torch.arange(12, dtype=torch.float32).reshape(3, 4), "i": torch.tensor([1, -2, 300], dtype=torch.int16)}
  src = tmp_path / "src.pt"
  torch.save(sd, src)
  zin = zipfile.ZipFile(src)
  # another tool re-zipped it with compression: the storages can't be mapped, so they are decompressed
  comp = str(tmp_path / "comp.pt")
  with zipfile.ZipFile(comp, "w", zipfile.ZIP_DEFLATED) as z:
    for i in zin.infolist():
      z.writestr(i.filename, zin.read(i))
  # saved on a big-endian machine: same files with the byte order record "big" and every storage byteswapped
  big = str(tmp_path / "big.pt")
  prefix = zin.namelist()[0].split("/")[0]
  swap = {"0": np.float32, "1": np.int16}
  with zipfile.ZipFile(big, "w") as z:
    for i in zin.infolist():
      data = zin.read(i)
      if i.filename == f"{prefix}/byteorder":
        data = b"big"
      elif i.filename.startswith(f"{prefix}/data/"):
        data = np.frombuffer(data, swap[i.filename.rsplit("/", 1)[1]]).byteswap().tobytes()
      z.writestr(i.filename, data)
  for fn in (comp, big):
    out = torch_load(fn)
    np.testing.assert_array_equal(out["w"].numpy(), sd["w"].numpy())
    np.testing.assert_array_equal(out["i"].numpy(), sd["i"].numpy())


def test_torch_load_errors(tmp_path) -> None:
  torch = pytest.importorskip("torch")
  fn = str(tmp_path / "c.pt")
  torch.save({"c": torch.zeros(2, dtype=torch.complex64)}, fn)
  with pytest.raises(NotImplementedError, match="Complex"):
    torch_load(fn)
  open(fn, "wb").write(b"not a checkpoint")
  with pytest.raises(ValueError, match="not a torch checkpoint"):
    torch_load(fn)
  with zipfile.ZipFile(fn, "w") as z:
    z.writestr("notes.txt", "hi")
  with pytest.raises(ValueError, match=r"data\.pkl"):
    torch_load(fn)


# ---------- GGUF ----------

def write_gguf(fn: str, tensors: dict, kv: bool = True) -> None:  # type: ignore[type-arg]
  gguf = pytest.importorskip("gguf")
  w = gguf.GGUFWriter(fn, "llama")
  if kv:
    w.add_uint32("test.u32", 7)
    w.add_int64("test.i64", -5)
    w.add_float32("test.f32", 0.5)
    w.add_bool("test.bool", True)
    w.add_string("test.str", "héllo")
    w.add_array("test.ints", [1, 2, 3])
    w.add_array("test.strs", ["a", "bc", ""])
  for name, (arr, qtype) in tensors.items():
    w.add_tensor(name, arr, raw_dtype=qtype)
  w.write_header_to_file()
  w.write_kv_data_to_file()
  w.write_tensors_to_file()
  w.close()


def test_gguf_unquantized(tmp_path) -> None:
  gguf = pytest.importorskip("gguf")
  rng = np.random.default_rng(0)
  data = {"f32": rng.standard_normal((2, 3, 8)).astype(np.float32), "f16": rng.standard_normal((4, 6)).astype(np.float16),
          "i8": rng.integers(-128, 127, (5,), dtype=np.int8), "i16": rng.integers(-999, 999, (3, 2), dtype=np.int16),
          "i32": rng.integers(-(2**31), 2**31 - 1, (2, 2), dtype=np.int32)}
  bf = sample(dtypes.bfloat16, (3, 4))
  fn = str(tmp_path / "m.gguf")
  write_gguf(fn, {**{k: (v, None) for k, v in data.items()}, "bf16": (bf, gguf.GGMLQuantizationType.BF16)})
  kv, tensors = gguf_load(fn)
  assert kv["general.architecture"] == "llama" and kv["test.u32"] == 7 and kv["test.i64"] == -5 and kv["test.f32"] == 0.5
  assert kv["test.bool"] is True and kv["test.str"] == "héllo" and kv["test.ints"] == [1, 2, 3] and kv["test.strs"] == ["a", "bc", ""]
  reader = gguf.GGUFReader(fn)
  ref_shapes = {t.name: t.data.shape for t in reader.tensors}
  for k, v in data.items():
    t = tensors[k]
    assert t.device == "DISK" and t.shape == v.shape == ref_shapes[k] and t.dtype == dtypes.from_np(v.dtype)
    np.testing.assert_array_equal(t.to(Device.DEFAULT).numpy(), v)
  assert tensors["bf16"].dtype == dtypes.bfloat16 and tensors["bf16"].shape == (3, 4)
  np.testing.assert_array_equal(tg_bits(tensors["bf16"].to(Device.DEFAULT)), bf)


@pytest.mark.parametrize("qname", ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"])
def test_gguf_quantized(tmp_path, qname: str) -> None:
  gguf = pytest.importorskip("gguf")
  qtype = gguf.GGMLQuantizationType[qname]
  rng = np.random.default_rng(1)
  data = {"w": rng.standard_normal((3, 2, 64)).astype(np.float32), "v": rng.standard_normal((32,)).astype(np.float32)}
  quantized = {k: gguf.quants.quantize(v, qtype) for k, v in data.items()}
  fn = str(tmp_path / "q.gguf")
  write_gguf(fn, {k: (q, qtype) for k, q in quantized.items()}, kv=False)
  _, tensors = gguf_load(fn)
  reader = {t.name: t for t in gguf.GGUFReader(fn).tensors}
  for k, v in data.items():
    ref = gguf.quants.dequantize(reader[k].data, qtype)
    t = tensors[k]
    assert t.shape == v.shape == ref.shape and t.dtype == dtypes.float32
    np.testing.assert_array_equal(t.numpy(), ref)
    np.testing.assert_allclose(t.numpy(), v, atol=0.25 if qname.startswith("Q4") else 0.12)  # and close to the original


@pytest.mark.parametrize("qname", ["Q4_K", "Q5_K", "Q6_K", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"])
def test_ggml_dequantize_random_blocks(tmp_path, qname: str) -> None:
  """Every bit pattern of the quantized fields, against gguf's reference (it can't quantize K-quants itself)."""
  gguf = pytest.importorskip("gguf")
  qtype = gguf.GGMLQuantizationType[qname]
  bs, ts = gguf.GGML_QUANT_SIZES[qtype]
  rng = np.random.default_rng(2)
  blocks = rng.integers(0, 256, (8, ts), dtype=np.uint8)
  halves = rng.uniform(-2, 2, (8, 2)).astype(np.float16).view(np.uint8)  # finite scales where the d/m fields are
  fields = {"Q6_K": [208], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q4_1": [0, 2], "Q5_1": [0, 2]}.get(qname, [0])
  for j, lo in enumerate(fields):
    blocks[:, lo:lo + 2] = halves[:, 2 * j:2 * j + 2]
  ref = gguf.quants.dequantize(blocks.reshape(2, -1), qtype).reshape(-1)
  ours = ggml_dequantize(blocks.tobytes(), int(qtype))
  assert ours.dtype == np.float32
  np.testing.assert_array_equal(ours, ref)
  # and through a file, as a (2, 4 * bs) tensor
  fn = str(tmp_path / "k.gguf")
  write_gguf(fn, {"w": (blocks.reshape(2, -1), qtype)}, kv=False)
  _, tensors = gguf_load(fn)
  assert tensors["w"].shape == (2, 4 * bs)
  np.testing.assert_array_equal(tensors["w"].numpy().reshape(-1), ref)


def test_gguf_errors(tmp_path) -> None:
  gguf = pytest.importorskip("gguf")
  fn = str(tmp_path / "x.gguf")
  open(fn, "wb").write(b"GGML" + b"\0" * 40)
  with pytest.raises(ValueError, match="not a GGUF file"):
    gguf_load(fn)
  write_gguf(fn, {"q": (np.zeros((2, 84), np.uint8), gguf.GGMLQuantizationType.Q2_K)}, kv=False)
  with pytest.raises(NotImplementedError, match="Q2_K"):
    gguf_load(fn)


def test_get_state_dict_of_a_model_that_refers_back_to_itself() -> None:
  """A module holding its parent (or itself) is not followed back (RecursionError before); a module shared by two
  attributes is listed under both names."""
  from tg.nn import Linear

  class Block:
    def __init__(self, parent: object) -> None:
      self.parent, self.lin = parent, Linear(2, 3)

  class Model:
    def __init__(self) -> None:
      self.me, self.block = self, Block(self)
      self.alias = self.block.lin
  m = Model()
  sd = get_state_dict(m)
  assert sorted(sd) == ["alias.bias", "alias.weight", "block.lin.bias", "block.lin.weight"]
  assert sd["alias.weight"] is sd["block.lin.weight"]
