"""dtypes: the promotion lattice, result dtypes of Tensor arithmetic, and numpy round trips for every dtype."""
import numpy as np
import pytest

from tg import Tensor
from tg.device import is_dtype_supported
from tg.dtype import dtypes, least_upper_dtype

ALL_NP_DTYPES = [
  (dtypes.bool, np.bool_),
  (dtypes.int8, np.int8),
  (dtypes.int16, np.int16),
  (dtypes.int32, np.int32),
  (dtypes.int64, np.int64),
  (dtypes.uint8, np.uint8),
  (dtypes.uint16, np.uint16),
  (dtypes.uint32, np.uint32),
  (dtypes.uint64, np.uint64),
  (dtypes.float16, np.float16),
  (dtypes.float32, np.float32),
  (dtypes.float64, np.float64),
]
IDS = [np.dtype(n).name for _, n in ALL_NP_DTYPES]

# ---------- promotion lattice ----------


@pytest.mark.parametrize("a,b,expected", [
  (dtypes.int8, dtypes.uint8, dtypes.int16),
  (dtypes.int32, dtypes.float16, dtypes.float16),
  (dtypes.bool, dtypes.int8, dtypes.int8),
  (dtypes.uint64, dtypes.int64, dtypes.float16),
  (dtypes.float16, dtypes.bfloat16, dtypes.float32),
  (dtypes.int64, dtypes.float32, dtypes.float32),
  (dtypes.uint8, dtypes.uint16, dtypes.uint16),
  (dtypes.uint16, dtypes.int16, dtypes.int32),
  (dtypes.uint32, dtypes.int32, dtypes.int64),
  (dtypes.bool, dtypes.uint8, dtypes.uint8),
  (dtypes.int32, dtypes.int64, dtypes.int64),
  (dtypes.float32, dtypes.float64, dtypes.float64),
  (dtypes.int8, dtypes.bfloat16, dtypes.bfloat16),
  (dtypes.uint64, dtypes.float64, dtypes.float64),
])
def test_least_upper_dtype(a, b, expected):
  assert least_upper_dtype(a, b) == expected
  assert least_upper_dtype(b, a) == expected


@pytest.mark.parametrize("dt", [d for d, _ in ALL_NP_DTYPES] + [dtypes.bfloat16])
def test_least_upper_dtype_identity(dt):
  assert least_upper_dtype(dt) == dt
  assert least_upper_dtype(dt, dt) == dt
  assert least_upper_dtype(dtypes.bool, dt) == dt


def test_least_upper_dtype_many():
  assert least_upper_dtype(dtypes.bool, dtypes.int8, dtypes.uint8) == dtypes.int16
  assert least_upper_dtype(dtypes.int8, dtypes.int16, dtypes.float16) == dtypes.float16
  assert least_upper_dtype(dtypes.uint8, dtypes.int64, dtypes.float32) == dtypes.float32

# ---------- result dtypes of Tensor arithmetic ----------


def test_int_tensor_plus_float_scalar_is_default_float():
  t = Tensor([1, 2, 3]) + 1.5
  assert t.dtype == dtypes.default_float
  np.testing.assert_array_equal(t.numpy(), np.array([1, 2, 3], dtype=np.float32) + np.float32(1.5))


def test_int_tensor_times_float_scalar():
  t = Tensor([1, -2, 3]) * 0.5
  assert t.dtype == dtypes.default_float
  np.testing.assert_array_equal(t.numpy(), np.array([1, -2, 3], dtype=np.float32) * np.float32(0.5))


def test_int_tensor_plus_int_tensor_stays_int32():
  a, b = np.array([1, -2, 3], dtype=np.int32), np.array([10, 20, -30], dtype=np.int32)
  t = Tensor(a) + Tensor(b)
  assert t.dtype == dtypes.int32
  np.testing.assert_array_equal(t.numpy(), a + b)
  t = Tensor([1, 2]) + Tensor([3, 4])
  assert t.dtype == dtypes.int32
  np.testing.assert_array_equal(t.numpy(), np.array([4, 6], dtype=np.int32))


def test_int_tensor_plus_int_scalar_stays_int():
  t = Tensor([1, 2, 3]) + 2
  assert t.dtype == dtypes.int32
  np.testing.assert_array_equal(t.numpy(), np.array([3, 4, 5], dtype=np.int32))
  # a Python scalar does not widen a tensor's dtype (tinygrad's rule)
  a = np.array([1, 100, -7], dtype=np.int8)
  t = Tensor(a) + 1
  assert t.dtype == dtypes.int8
  np.testing.assert_array_equal(t.numpy(), a + np.int8(1))


@pytest.mark.skipif(not is_dtype_supported(dtypes.float16), reason="the device has no float16 (Renderer.missing_dtypes)")
def test_float16_tensor_times_float_scalar_stays_float16():
  a = np.array([1.5, -2.0, 3.25], dtype=np.float16)
  t = Tensor(a) * 2.0
  assert t.dtype == dtypes.float16
  np.testing.assert_array_equal(t.numpy(), a * np.float16(2.0))


def test_int8_plus_int16_is_int16():
  a = np.array([1, -128, 127, 5], dtype=np.int8)
  b = np.array([1000, -1, 1, -32768], dtype=np.int16)
  t = Tensor(a) + Tensor(b)
  assert t.dtype == dtypes.int16
  np.testing.assert_array_equal(t.numpy(), a + b)
  t = Tensor(b) + Tensor(a)
  assert t.dtype == dtypes.int16
  np.testing.assert_array_equal(t.numpy(), b + a)


def test_int8_plus_uint8_is_int16():
  a = np.array([-128, 127, 0], dtype=np.int8)
  b = np.array([255, 255, 1], dtype=np.uint8)
  t = Tensor(a) + Tensor(b)
  assert t.dtype == dtypes.int16
  np.testing.assert_array_equal(t.numpy(), a.astype(np.int16) + b.astype(np.int16))


def test_int32_times_float32_tensor_is_float32():
  a = np.array([1, 2, 3], dtype=np.int32)
  b = np.array([0.5, -1.25, 2.0], dtype=np.float32)
  t = Tensor(a) * Tensor(b)
  assert t.dtype == dtypes.float32
  np.testing.assert_array_equal(t.numpy(), a.astype(np.float32) * b)


@pytest.mark.skipif(not is_dtype_supported(dtypes.float16), reason="the device has no float16 (Renderer.missing_dtypes)")
def test_int32_plus_float16_tensor_is_float16():
  a = np.array([1, 2, -3], dtype=np.int32)
  b = np.array([0.5, -1.25, 2.0], dtype=np.float16)
  t = Tensor(a) + Tensor(b)
  assert t.dtype == dtypes.float16
  np.testing.assert_array_equal(t.numpy(), a.astype(np.float16) + b)


def test_bool_tensor_plus_int_tensor_is_int32():
  a = np.array([True, False, True])
  b = np.array([5, 6, -7], dtype=np.int32)
  t = Tensor(a) + Tensor(b)
  assert t.dtype == dtypes.int32
  np.testing.assert_array_equal(t.numpy(), a.astype(np.int32) + b)


@pytest.mark.skipif(not is_dtype_supported(dtypes.float64), reason="device has no float64 (WGSL has none: WEBGPU)")
def test_float32_plus_float64_is_float64():
  a = np.array([0.1, 0.2], dtype=np.float32)
  b = np.array([0.3, 0.4], dtype=np.float64)
  t = Tensor(a) + Tensor(b)
  assert t.dtype == dtypes.float64
  np.testing.assert_array_equal(t.numpy(), a.astype(np.float64) + b)

# ---------- every dtype round trips through numpy ----------


def _sample(npdt):
  """A small array of `npdt` covering its extremes (ints) or a spread of values (floats; products stay finite in float16)."""
  rng = np.random.default_rng(0)
  if npdt is np.bool_:
    return np.array([True, False, False, True, True, False])
  if np.issubdtype(npdt, np.integer):
    info = np.iinfo(npdt)
    extra = rng.integers(info.min, info.max, size=6, dtype=npdt, endpoint=True)
    return np.concatenate([np.array([info.min, info.max, 0, 1, info.max // 2 + 1], dtype=npdt), extra])
  return np.concatenate([np.array([0.0, -0.0, 1.0, -1.5, 200.0]), rng.uniform(-100, 100, size=6)]).astype(npdt)


@pytest.mark.parametrize("dt,npdt", ALL_NP_DTYPES, ids=IDS)
def test_numpy_round_trip(dt, npdt):
  arr = _sample(npdt)
  t = Tensor(arr)
  assert t.dtype == dt
  out = t.numpy()
  assert out.dtype == arr.dtype
  np.testing.assert_array_equal(out, arr)
  # also through a reshape + realize (a copy through the device)
  out2 = t.reshape(1, -1).realize().numpy()
  assert out2.dtype == arr.dtype
  np.testing.assert_array_equal(out2, arr.reshape(1, -1))


@pytest.mark.parametrize("dt,npdt", [x for x in ALL_NP_DTYPES if x[0] != dtypes.bool], ids=IDS[1:])
def test_add_to_self(dt, npdt):
  if not is_dtype_supported(dt):
    pytest.skip(f"device has no {np.dtype(npdt).name} (WGSL has no 64-bit types: WEBGPU)")
  arr = _sample(npdt)
  t = Tensor(arr)
  out = (t + t).numpy()
  ref = arr + arr  # small ints wrap around in numpy as in C
  assert (t + t).dtype == dt
  assert out.dtype == ref.dtype
  np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("dt,npdt", [x for x in ALL_NP_DTYPES if x[0] != dtypes.bool], ids=IDS[1:])
def test_mul_and_sub_same_dtype(dt, npdt):
  if not is_dtype_supported(dt):
    pytest.skip(f"device has no {np.dtype(npdt).name} (WGSL has no 64-bit types: WEBGPU)")
  arr = _sample(npdt)[:5]
  other = _sample(npdt)[5:10]
  out = (Tensor(arr) * Tensor(other) - Tensor(other)).numpy()
  with np.errstate(over="ignore"):
    ref = arr * other - other
  assert out.dtype == ref.dtype
  if np.issubdtype(npdt, np.floating):
    np.testing.assert_allclose(out, ref, rtol=1e-3 if npdt is np.float16 else 1e-6)
  else:
    np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("dt,npdt", ALL_NP_DTYPES, ids=IDS)
def test_explicit_dtype_from_list(dt, npdt):
  vals = [0, 1, 1, 0] if npdt is np.bool_ else [0, 1, 2, 100]
  t = Tensor(vals, dtype=dt)
  assert t.dtype == dt
  out = t.numpy()
  assert out.dtype == np.dtype(npdt)
  np.testing.assert_array_equal(out, np.array(vals).astype(npdt))


@pytest.mark.parametrize("src,dst", [(np.int32, np.int8), (np.int32, np.uint8), (np.int32, np.int16), (np.int64, np.int32)])
def test_int_narrowing_cast_wraps(src, dst):
  if src is np.int64 and not is_dtype_supported(dtypes.int64):
    pytest.skip("device has no int64 (WGSL has none: WEBGPU)")
  arr = np.array([300, -1, 127, 128, -129, 65535, 70000], dtype=src)
  out = Tensor(arr).cast({np.dtype(n): d for d, n in ALL_NP_DTYPES}[np.dtype(dst)]).numpy()
  assert out.dtype == np.dtype(dst)
  np.testing.assert_array_equal(out, arr.astype(dst))


@pytest.mark.parametrize("dt,npdt", [x for x in ALL_NP_DTYPES if x[0] != dtypes.bool], ids=IDS[1:])
def test_cast_to_float32(dt, npdt):
  if not is_dtype_supported(dt):
    pytest.skip(f"device has no {np.dtype(npdt).name} (WGSL has no 64-bit types: WEBGPU)")
  arr = _sample(npdt)
  out = Tensor(arr).cast(dtypes.float32).numpy()
  assert out.dtype == np.float32
  np.testing.assert_array_equal(out, arr.astype(np.float32))


def test_cast_bool_to_int_and_float():
  arr = np.array([True, False, True])
  np.testing.assert_array_equal(Tensor(arr).cast(dtypes.int32).numpy(), arr.astype(np.int32))
  np.testing.assert_array_equal(Tensor(arr).cast(dtypes.float32).numpy(), arr.astype(np.float32))

# ---------- bfloat16 ----------


def test_bfloat16_numpy_is_float32():
  vals = [1.0, 2.5, -3.0]
  t = Tensor(vals, dtype=dtypes.bfloat16)
  assert t.dtype == dtypes.bfloat16
  out = t.numpy()
  assert out.dtype == np.float32
  np.testing.assert_array_equal(out, np.array(vals, dtype=np.float32))


def test_bfloat16_mul():
  vals = np.array([1.0, 2.5, -3.0], dtype=np.float32)
  t = Tensor(vals.tolist(), dtype=dtypes.bfloat16) * 2
  assert t.dtype == dtypes.bfloat16
  np.testing.assert_array_equal(t.numpy(), vals * 2)


def test_bfloat16_cast_to_float32():
  vals = np.array([1.0, 2.5, -3.0], dtype=np.float32)
  t = Tensor(vals.tolist(), dtype=dtypes.bfloat16).cast(dtypes.float32)
  assert t.dtype == dtypes.float32
  out = t.numpy()
  assert out.dtype == np.float32
  np.testing.assert_array_equal(out, vals)


def test_bfloat16_precision():
  # bfloat16 keeps 8 significant bits: relative rounding error at most 2**-8
  vals = np.array([1.1, -0.3, 123.456, 1e-3], dtype=np.float32)
  out = Tensor(vals.tolist(), dtype=dtypes.bfloat16).numpy()
  np.testing.assert_allclose(out, vals, rtol=2 ** -8)
  # and the result is exactly representable in bfloat16: the low 16 bits of the float32 are zero
  assert np.all(out.view(np.uint32) & 0xFFFF == 0)


def test_float32_to_bfloat16_cast():
  vals = np.array([0.5, -1.75, 4.0, 96.0], dtype=np.float32)  # exactly representable in bfloat16
  t = Tensor(vals).cast(dtypes.bfloat16)
  assert t.dtype == dtypes.bfloat16
  np.testing.assert_array_equal(t.numpy(), vals)
  np.testing.assert_array_equal((t + t).cast(dtypes.float32).numpy(), vals + vals)


# ---------- bitcast ----------

_SAME_SIZE = [(a, b) for a, na in ALL_NP_DTYPES for b, nb in ALL_NP_DTYPES
              if a != b and np.dtype(na).itemsize == np.dtype(nb).itemsize and dtypes.bool not in (a, b)]


@pytest.mark.parametrize("src,dst", _SAME_SIZE, ids=[f"{a.name}-{b.name}" for a, b in _SAME_SIZE])
def test_bitcast_is_numpy_view(src, dst):
  if not (is_dtype_supported(src) and is_dtype_supported(dst)):
    pytest.skip(f"{src} or {dst} unsupported on this device")
  bits = np.array([0, 1, 2, 0x3C, 0x7F, 0x80, 0xC3, 0xFF] * 2, dtype=np.uint8)
  x = bits.view(_np(src))
  if x.dtype.kind == "f":
    x = np.where(np.isnan(x), 0, x).astype(x.dtype)  # NaN payloads needn't survive arithmetic
  got = (Tensor(x) + 0).bitcast(dst).numpy()  # of a computed tensor, not only of a buffer
  np.testing.assert_array_equal(got, x.view(_np(dst)))


def _np(dt):
  return dict(ALL_NP_DTYPES)[dt]


def test_bfloat16_bitcast_matches_torch():
  torch = pytest.importorskip("torch")
  if not is_dtype_supported(dtypes.bfloat16):
    pytest.skip("bfloat16 unsupported on this device")
  vals = [1.5, -2.0, 3.0e38, 1e-30, 0.0, -0.0, 65504.0, 0.1]
  want = torch.tensor(vals, dtype=torch.bfloat16).view(torch.int16).numpy()
  got = Tensor(vals, dtype=dtypes.bfloat16).bitcast(dtypes.int16).numpy()
  np.testing.assert_array_equal(got, want)
  back = Tensor(want).bitcast(dtypes.bfloat16).cast(dtypes.float32).numpy()
  np.testing.assert_array_equal(back, torch.tensor(vals, dtype=torch.bfloat16).float().numpy())


def test_bitcast_between_sizes_is_an_error():
  with pytest.raises(ValueError, match="equal item sizes"):
    Tensor([1.0, 2.0]).bitcast(dtypes.int16).numpy()


@pytest.mark.parametrize("dst", [dtypes.uint8, dtypes.int8, dtypes.uint16, dtypes.int16, dtypes.int32, dtypes.uint32, dtypes.int64])
def test_float_to_int_out_of_range_is_the_same_everywhere(dst):
  """A float outside the target integer's range (or NaN, inf) converts to one value whether it sits in a vector's lane or
  alone, in a tensor of any length, or in a folded constant: through int32 (int64 for uint32 and int64), where what is
  out of that range becomes its lowest value, then wrapped. Before, clang converted scalars and vector lanes
  differently: 300.0 -> uint8 was 44 in a tensor of 1 element and 255 in one of 8."""
  if not is_dtype_supported(dst) or (dst == dtypes.uint32 and not is_dtype_supported(dtypes.int64)):
    pytest.skip(f"{dst} from float goes through int64, which this device lacks (WGSL converts saturating)")
  vals = [300.0, -1.0, float("nan"), 3e9, -3e9, float("inf"), -float("inf"), -3.7, 65535.9, 1e20, 2.0 ** 31, -2.0 ** 31]
  via = 64 if dst in (dtypes.uint32, dtypes.int64) else 32
  bits = dst.itemsize * 8

  def expected(v: float) -> int:
    i = int(v) if v == v and -2.0 ** (via - 1) <= v < 2.0 ** (via - 1) else -(1 << (via - 1))
    i &= (1 << bits) - 1
    return i - (1 << bits) if not dtypes.is_unsigned(dst) and i >= 1 << (bits - 1) else i
  want = [expected(v) for v in vals]
  nan = 0 if bits < via else -(1 << (bits - 1))  # the low bits of int32's or int64's lowest value
  assert want[:3] == [300 if bits > 8 else 44, -1 if not dtypes.is_unsigned(dst) else (1 << bits) - 1, nan]  # torch's on x86
  for n in (1, 3, 8, 17):  # a lone scalar, a remainder, whole vectors, both
    got = Tensor(np.repeat(np.array(vals, np.float32), n)).cast(dst).numpy().reshape(len(vals), n)
    for k, v in enumerate(vals):
      assert set(got[k].tolist()) == {want[k]}, f"{v} -> {dst} in a tensor of {n} per value: {got[k].tolist()}"
  for k, v in enumerate(vals):
    assert Tensor.full((4,), v).cast(dst).tolist() == [want[k]] * 4, f"folded constant {v} -> {dst}"
