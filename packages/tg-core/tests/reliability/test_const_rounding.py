"""Constants take their dtype's precision: a Python scalar given to a float16/bfloat16/float32 tensor (a comparison, a
where(), full()) is the value that dtype can hold, as torch casts a scalar to the tensor's dtype, and a cast folded
while the graph is built gives exactly what the kernel computing the cast would (an overflow to inf included)."""
import math
import struct

import numpy as np
import pytest

from tg import Device, Tensor, dtypes
from tg.device import is_dtype_supported

torch = pytest.importorskip("torch")

HALVES = [dtypes.float16, dtypes.bfloat16]
FLOATS = [dtypes.float16, dtypes.bfloat16, dtypes.float32]
TORCH = {dtypes.float16: torch.float16, dtypes.bfloat16: torch.bfloat16, dtypes.float32: torch.float32,
         dtypes.float64: torch.float64}
# values each dtype rounds: inexact fractions, one past float16's largest (65520 rounds up to inf, 65519 down to
# 65504), past bfloat16/float32's largest, below float16's smallest subnormal (a signed zero), zeros, inf, nan
VALUES = [0.1, -0.1, 1 / 3, 2.5e-5, 65504.0, 65519.0, 65520.0, 1e5, -1e5, 3.3961e38, 3.4e38, 1e39, -1e300, 1e-8, -1e-8,
          0.0, -0.0, math.inf, -math.inf, math.nan]
# just past a float16 tie: rounded straight from the double (as a kernel's cast and numpy do) it goes up; torch rounds
# a scalar through float32 first, which lands on the tie and goes down to 1.0: checked against the kernel, not torch
DOUBLE_ROUNDS = 1 + 2**-11 + 2**-40


def _has(dt):
  return is_dtype_supported(dt) and dt not in getattr(Device[Device.DEFAULT].renderer, "missing_dtypes", ())


def _skip_missing(dt):
  if not _has(dt):
    pytest.skip(f"the device has no {dt}")


def _same(a, b):
  """Equal as floats, nan equal to nan and -0.0 apart from 0.0."""
  if isinstance(a, list):
    return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
  if math.isnan(a) or math.isnan(b):
    return math.isnan(a) and math.isnan(b)
  return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def _bf16(x: float) -> float:
  """x rounded to bfloat16 without torch: to float32 (as a kernel's cast does first), then to nearest even on the top
  16 bits of that float32; nan stays nan."""
  if math.isnan(x):
    return x
  with np.errstate(over="ignore"):
    f = float(np.float32(x))
  if math.isinf(f):
    return f
  (bits,) = struct.unpack("<I", struct.pack("<f", f))
  bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
  return struct.unpack("<f", struct.pack("<I", bits))[0]


def _torch_full(v, dt):
  """torch's value of `v` in `dt`, through a float64 tensor: torch.full raises where a float32 overflows."""
  return torch.full((2,), v, dtype=torch.float64).to(TORCH[dt])


# ---------- the reported cases ----------
@pytest.mark.parametrize("dt", [dtypes.bfloat16, dtypes.float16], ids=str)
def test_half_compare_with_scalar(dt):
  _skip_missing(dt)
  x = Tensor([0.1], dtype=dt)
  assert (x == 0.1).tolist() == [True]
  assert (x > 0.1).tolist() == [False]
  assert (x < 0.1).tolist() == [False]
  assert (x != 0.1).tolist() == [False]


def test_f16_full_overflow_folded_cast_is_inf():
  _skip_missing(dtypes.float16)
  t = Tensor.full((), 1e5, dtype=dtypes.float16)
  assert t.item() == math.inf
  assert t.float().item() == math.inf
  assert Tensor.full((), -1e5, dtype=dtypes.float16).float().item() == -math.inf
  if _has(dtypes.float64):
    assert Tensor.full((), 1e5, dtype=dtypes.float16).cast(dtypes.float64).item() == math.inf


def test_f32_full_cast_to_f64_is_float32_value():
  _skip_missing(dtypes.float64)
  assert Tensor.full((1,), 0.1).cast(dtypes.float64).item() == float(np.float32(0.1)) == 0.10000000149011612
  assert Tensor.full((1,), 0.1).cast(dtypes.float64).item() == torch.full((1,), 0.1).double().item()
  assert Tensor.full((), 1e39).cast(dtypes.float64).item() == math.inf  # past float32's largest


# ---------- against torch ----------
@pytest.mark.parametrize("dt", FLOATS, ids=str)
@pytest.mark.parametrize("op", ["eq", "ne", "lt", "gt", "le", "ge"])
def test_compare_with_scalar_matches_torch(dt, op):
  _skip_missing(dt)
  data = [0.1, 1 / 3, -0.1, 65504.0, math.inf, 3.3895e38, 0.0, 1e-8]
  if dt == dtypes.float16:
    data = [v if abs(v) < 1e6 else math.inf for v in data]
  tt = torch.tensor(data, dtype=TORCH[dt])
  x = Tensor(tt.float().numpy(), dtype=dt)
  for s in [0.1, 1 / 3, -0.1, 65519.0, 65520.0, 1e5, 3.3961e38, 3.4e38, 1e39, 1e-8, 0.0, -0.0, math.inf]:
    got = getattr(x, f"__{op}__")(s).tolist()
    want = getattr(tt, op)(s).tolist()
    assert got == want, f"{dt} {op} {s}: {got} != {want}"


@pytest.mark.parametrize("dt", FLOATS, ids=str)
@pytest.mark.parametrize("to", [dtypes.float32, dtypes.float64], ids=str)
def test_full_then_cast_matches_torch(dt, to):
  _skip_missing(dt)
  _skip_missing(to)
  for v in VALUES:
    want = _torch_full(v, dt).to(TORCH[to]).tolist()
    assert _same(Tensor.full((2,), v, dtype=dt).cast(to).tolist(), want), (dt, to, v)
    assert _same(Tensor.full((2,), v, dtype=dt).tolist(), _torch_full(v, dt).tolist()), (dt, v)


@pytest.mark.parametrize("dt", FLOATS, ids=str)
def test_folded_cast_equals_kernel_cast(dt):
  """A cast of a constant folded at graph build time gives the bits a kernel casting the realized constant gives."""
  _skip_missing(dt)
  for to in [dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64]:
    if not is_dtype_supported(to):
      continue
    for v in VALUES + [DOUBLE_ROUNDS]:
      folded = Tensor.full((3,), v, dtype=dt).cast(to)
      kernel = Tensor.full((3,), v, dtype=dt).contiguous().realize().cast(to)
      assert _same(folded.tolist(), kernel.tolist()), (dt, to, v)


def test_cast_chain_f64_f16_f32():
  _skip_missing(dtypes.float16)
  _skip_missing(dtypes.float64)
  for v in VALUES:
    got = Tensor.full((2,), v, dtype=dtypes.float64).cast(dtypes.float16).cast(dtypes.float32).tolist()
    want = torch.full((2,), v, dtype=torch.float64).half().float().tolist()
    assert _same(got, want), v
    with np.errstate(over="ignore"):
      assert _same(got, [float(np.float32(np.float16(v)))] * 2), v


def test_cast_chain_f64_bf16_f16_f32():
  for dt in (dtypes.bfloat16, dtypes.float16, dtypes.float64):
    _skip_missing(dt)
  for v in VALUES:
    got = Tensor.full((), v, dtype=dtypes.float64).cast(dtypes.bfloat16).cast(dtypes.float16).float().item()
    want = torch.full((), v, dtype=torch.float64).bfloat16().half().float().item()
    assert _same(got, want), v


@pytest.mark.parametrize("dt", HALVES, ids=str)
def test_where_with_scalar_matches_torch(dt):
  _skip_missing(dt)
  tt = torch.tensor([0.1, 0.2, 1 / 3, -0.1], dtype=TORCH[dt])
  x = Tensor(tt.float().numpy(), dtype=dt)
  for s in [0.1, 1 / 3, 1e5, -0.0]:
    got = (x > 0.15).where(x, s)
    want = torch.where(tt > 0.15, tt, s)
    assert got.dtype == dt and want.dtype == TORCH[dt]
    assert _same(got.float().tolist(), want.float().tolist()), s
    # the scalar picked is the dtype's value: it compares equal to the tensor's own element
    assert ((x > 0.15).where(x, 0.1) == x[0]).tolist() == [True, False, False, True]


@pytest.mark.parametrize("dt", HALVES, ids=str)
def test_arith_with_scalar_matches_torch(dt):
  _skip_missing(dt)
  tt = torch.tensor([0.1, 0.2, 1 / 3, -0.1, 1000.0], dtype=TORCH[dt])
  x = Tensor(tt.float().numpy(), dtype=dt)
  for s in [0.1, 1 / 3, 3.0]:
    for op in ("add", "sub", "mul"):
      got = getattr(x, op)(s).float().tolist()
      want = getattr(tt, op)(s).float().tolist()
      assert _same(got, want), (op, s)


# ---------- without torch: numpy's float16 and bit-rounded bfloat16 ----------
def test_values_match_numpy_rounding():
  for v in VALUES + [DOUBLE_ROUNDS]:
    if is_dtype_supported(dtypes.float16):
      with np.errstate(over="ignore"):
        assert _same(Tensor.full((), v, dtype=dtypes.float16).float().item(), float(np.float16(v))), v
    if is_dtype_supported(dtypes.bfloat16):
      assert _same(Tensor.full((), v, dtype=dtypes.bfloat16).float().item(), _bf16(v)), v
    with np.errstate(over="ignore"):
      assert _same(Tensor.full((), v).cast(dtypes.float32).item(), float(np.float32(v))), v


def test_signed_zero_constants_stay_apart():
  """-0.0 and 0.0 are one key apart in the shared-constant cache, and a tiny value rounding to a zero keeps its sign.
  (x + 0.0 folds to x by design, -0.0 included: test_lazy's identities, so addition is not checked here.)"""
  if Device.DEFAULT == "WEBGPU":
    pytest.skip("WGSL doesn't promise signed zeros (WebGPU's driver here flushes -0.0 products to 0.0)")
  x = Tensor([-0.0, 0.0, 1.0])
  for _ in range(2):  # the second time from the cache
    assert _same((x * -0.0).tolist(), [0.0, -0.0, -0.0])
    assert _same((x * 0.0).tolist(), [-0.0, 0.0, 0.0])
    assert _same((x * -1e-50).tolist(), [0.0, -0.0, -0.0])
    assert _same((x * 1e-50).tolist(), [-0.0, 0.0, 0.0])
  assert _same(Tensor.full((), -1e-50).item(), -0.0)
  assert _same(Tensor.full((), 1e-50).item(), 0.0)
  if is_dtype_supported(dtypes.float16):
    h = Tensor([-0.0, 0.0], dtype=dtypes.float16)
    for _ in range(2):
      assert _same((h * -1e-8).float().tolist(), [0.0, -0.0])
      assert _same((h * 1e-8).float().tolist(), [-0.0, 0.0])
      assert _same((h * -0.0).float().tolist(), [0.0, -0.0])
      assert _same((h * 0.0).float().tolist(), [-0.0, 0.0])


def test_int_constants_unchanged():
  assert Tensor.full((), 300, dtype=dtypes.int8).item() == 44  # wraps as C does
  assert Tensor.full((), 2.7, dtype=dtypes.int32).item() == 2
  assert Tensor.full((), -2.7, dtype=dtypes.int32).item() == -2
  assert (Tensor([3], dtype=dtypes.int32) == 3).tolist() == [True]
  assert Tensor.full((), 7, dtype=dtypes.int32).cast(dtypes.float32).item() == 7.0
  assert Tensor.full((), 16777217, dtype=dtypes.int32).cast(dtypes.float32).item() == 16777216.0


def test_bf16_const_node_rounded_by_the_kernel():
  """A bfloat16 CONST emulated in a float32 is rounded by the lowerer too, not only by full(): a node built with the
  double 0.1 still equals the tensor's bfloat16 0.1."""
  _skip_missing(dtypes.bfloat16)
  from tg import Device
  from tg.lazy import LazyBuffer
  from tg.ops import MetaOps
  c = Tensor(LazyBuffer.metaop(MetaOps.CONST, (), dtypes.bfloat16, Device.DEFAULT, 0.1)).reshape(1).expand(2)
  x = Tensor([0.1, 0.2], dtype=dtypes.bfloat16)
  assert (x == c).tolist() == [True, False]
  assert (x > c).tolist() == [False, True]
