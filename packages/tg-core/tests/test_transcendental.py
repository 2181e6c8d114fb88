"""Transcendental fallbacks (tg.codegen.transcendental): EXP2, LOG2 and SIN built from basic ALU ops.

The fallback is forced on the test device by setting its renderer's `transcendental_fallback`; the
UnaryOps are applied directly (Tensor.exp2 goes through exp(x*ln2), which would add its own rounding).
Errors are measured in ulps of the result's dtype against a float64 (float32, float16) or mpmath
(float64) reference, so a correctly rounded result scores <= 0.5.

Sweep sizes follow the device's speed, measured on a small batch: a few thousand values on the PYTHON
interpreter (it runs every UOp of every lane in Python), a couple of hundred thousand on a compiled device.
"""
from __future__ import annotations

import functools
import time
from collections.abc import Iterator

import numpy as np
import pytest

import tg.engine.realize
from tg import Device, Tensor
from tg.codegen.kernel import Kernel
from tg.codegen.transcendental import rewrite_transcendentals
from tg.codegen.uops import UOp, UOps
from tg.device import is_dtype_supported
from tg.dtype import DType, dtypes
from tg.engine.schedule import create_schedule
from tg.ops import BinaryOps, UnaryOps

ALL = frozenset({UnaryOps.EXP2, UnaryOps.LOG2, UnaryOps.SIN})
REF = {UnaryOps.EXP2: np.exp2, UnaryOps.LOG2: np.log2, UnaryOps.SIN: np.sin}
MAX_ULP = 1.0  # max over all 2^32 float32 inputs (measured on CLANG): exp2 0.77, log2 0.57, sin 0.82
# the ulp bounds hold where float math is IEEE-exact; WGSL lets the compiler fuse a*b+c and divide to 2.5 ulp
needs_strict_float = pytest.mark.skipif(not getattr(Device[Device.DEFAULT].renderer, "strict_float", True),
                                        reason="the device's float math may be fused/inexact (WGSL allows it: WEBGPU)")


@pytest.fixture
def fallback() -> Iterator[None]:
  renderer = Device[Device.DEFAULT].renderer
  assert renderer is not None
  saved = renderer.transcendental_fallback
  tg.engine.realize.method_cache.clear()  # kernels compiled without the fallback must not be reused
  renderer.transcendental_fallback = ALL
  yield
  renderer.transcendental_fallback = saved
  tg.engine.realize.method_cache.clear()


def apply(op: UnaryOps, x: np.ndarray) -> np.ndarray:
  t = Tensor(x)
  return Tensor(t.lazydata.e(op)).numpy()


def ulp_error(got: np.ndarray, want: np.ndarray, dt: type) -> np.ndarray:
  """|got - want| in ulps of dt at want (want is float64, more precise than dt); 0 where both are the same inf or both nan."""
  with np.errstate(all="ignore"):
    want_r = want.astype(dt)
    err = np.abs(got.astype(np.float64) - want) / np.spacing(np.abs(want_r)).astype(np.float64)
  same = (np.isnan(got) & np.isnan(want)) | (np.isinf(want_r) & (got.astype(np.float64) == want_r.astype(np.float64)))
  return np.where(same, 0.0, err)


@functools.cache
def _rate(op: UnaryOps, np_dtype: type) -> float:
  """Values per second the device computes op at (the second run of one batch: compile time excluded)."""
  x = np.linspace(-3, 3, 256).astype(np_dtype)
  apply(op, x)
  st = time.perf_counter()
  apply(op, x)
  return len(x) / max(time.perf_counter() - st, 1e-6)


def sweep_size(op: UnaryOps, np_dtype: type, lo: int, hi: int, seconds: float = 1.0) -> int:
  """How many values to test: about `seconds` of work on this device, between lo and hi."""
  return int(min(hi, max(lo, _rate(op, np_dtype) * seconds)))


def float32_sweep(n: int, seed: int) -> np.ndarray:
  """Random bit patterns (every exponent equally likely), uniform values in [-200, 200], integers, denormals and specials."""
  rng = np.random.default_rng(seed)
  bits = rng.integers(0, 2**32, size=n, dtype=np.uint64).astype(np.uint32).view(np.float32)
  special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, 2.0, 1e-45, -1e-45, 1e-40, 1.1754942e-38,
                      1.17549435e-38, 3.4028235e38, -3.4028235e38, 128.0, 127.99999, -149.0, -150.0, -126.0, 1e5, -1e5,
                      np.pi / 2, np.pi, 1e-30, 123456.79, 1.0000001, 0.99999994], dtype=np.float32)
  uniform = rng.uniform(-200, 200, size=n // 4).astype(np.float32)
  return np.concatenate([bits, special, uniform, np.arange(-160, 160, dtype=np.float32), -bits[: n // 8]])


def check(op: UnaryOps, x: np.ndarray) -> float:
  got = apply(op, x)
  with np.errstate(all="ignore"):
    want = REF[op](x.astype(np.float64))
  err = ulp_error(got, want, np.float32)
  worst = int(np.argmax(err))
  print(f"{op.name}: {len(x)} values, max {err[worst]:.3f} ulp at x={x[worst]!r} (got {got[worst]!r}, want {want[worst]!r})")
  assert err[worst] <= MAX_ULP, f"{op.name}({x[worst]!r}) = {got[worst]!r}, want {want[worst]!r}: {err[worst]:.3f} ulp"
  return float(err[worst])


@needs_strict_float
@pytest.mark.usefixtures("fallback")
@pytest.mark.parametrize("op", [UnaryOps.EXP2, UnaryOps.LOG2, UnaryOps.SIN], ids=lambda o: o.name)
def test_float32_sweep(op: UnaryOps) -> None:
  x = float32_sweep(sweep_size(op, np.float32, 1500, 200_000) * 5 // 7, seed=op.value)  # ~1.4x n values
  # log2 of a negative is nan (checked below): spend the sweep on the defined half
  check(op, np.abs(x) if op is UnaryOps.LOG2 else x)


# The float32 inputs closest to a multiple of pi/2 (|x*2/pi - k| from 2^-29.9 up to 2^-26.3: found by an exhaustive
# search over all exponents and mantissas): where a reduction with too few bits of pi loses every significant bit.
HARDEST_SIN = np.array([0x6F79BE45, 0x50A3E87F, 0x6FF9BE45, 0x5123E87F, 0x437CE5F1, 0x7079BE45, 0x6A1976F1, 0x53B146A6, 0x65898498,
                        0x51A3E87F, 0x43FCE5F1, 0x77584625, 0x4C2332E9, 0x4096CBE4, 0x6C55DA58, 0x70F9BE45, 0x6A9976F1, 0x5C07BCD0,
                        0x543146A6, 0x66098498, 0x5223E87F, 0x474D246F, 0x723FA09A, 0x447CE5F1, 0x4A2562AE], dtype=np.uint32).view(np.float32)


@needs_strict_float
@pytest.mark.usefixtures("fallback")
def test_sin_near_multiples_of_pi_over_2() -> None:
  # the known hardest arguments, and the floats around k*pi/2 for k up to ~1e6 (beyond that a float64 k*pi/2 is no
  # closer to a true multiple than any other float)
  n = sweep_size(UnaryOps.SIN, np.float32, 300, 50_000) // 3
  k = np.unique(np.concatenate([np.arange(1, n // 2), np.geomspace(n // 2, 1e6, n - n // 2).round()]))
  near = (k * (np.pi / 2)).astype(np.float32)
  x = np.concatenate([near, np.nextafter(near, np.float32(np.inf)), np.nextafter(near, np.float32(0)), HARDEST_SIN, -HARDEST_SIN])
  check(UnaryOps.SIN, x)


def _fma_exp2(renderer: object) -> bool:
  target = getattr(renderer, "cpu_target", None)
  return bool(getattr(renderer, "fused_mulacc", False) and target is not None and target.fma)


@pytest.fixture(params=["fma", "no fma"])
def exp2_path(request: pytest.FixtureRequest, fallback: None) -> Iterator[str]:
  """Both float32 exp2 expansions on a device with FMA: the short one (_exp2_fma) and, with MULACC taken away, the
  exact-products one every other device gets."""
  renderer = Device[Device.DEFAULT].renderer
  if request.param == "fma" and not _fma_exp2(renderer):
    pytest.skip("the device's MULACC isn't one rounding on a CPU with FMA: it never takes the short exp2")
  saved = renderer.fused_mulacc  # type: ignore[union-attr]
  tg.engine.realize.method_cache.clear()
  if request.param == "no fma":
    renderer.fused_mulacc = False  # type: ignore[union-attr]
  yield request.param
  renderer.fused_mulacc = saved  # type: ignore[union-attr]
  tg.engine.realize.method_cache.clear()


@needs_strict_float
def test_exp2_both_paths(exp2_path: str) -> None:
  """Each expansion within 1 ulp, the short one's worst region included (every float32 in [-1/2, -1/4] on a compiled
  device: 2^f just under 1 has the finest ulp), special values exact, and the short one much shorter."""
  n = sweep_size(UnaryOps.EXP2, np.float32, 1500, 4_000_000)
  lo, hi = np.float32(-0.5).view(np.uint32), np.float32(-0.25).view(np.uint32)
  worst_f = np.arange(hi, lo + 1, max(1, (int(lo) - int(hi)) // n), dtype=np.uint32).view(np.float32)
  check(UnaryOps.EXP2, np.concatenate([worst_f, -worst_f, float32_sweep(min(n, 200_000), seed=3)]))
  xs = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 128.0, -150.0, -149.0, -126.0, -140.0, 3e38, -3e38], np.float32)
  want = np.array([1.0, 1.0, np.inf, 0.0, np.nan, np.inf, 0.0, 2.0**-149, 2.0**-126, 2.0**-140, np.inf, 0.0], np.float32)
  np.testing.assert_array_equal(apply(UnaryOps.EXP2, xs), want)
  (si,) = [si for si in create_schedule([Tensor(np.ones(4, np.float32)).lazydata.e(UnaryOps.EXP2)]) if si.ast.op.name == "STORE"]
  alus = sum(u.op is UOps.ALU for u in Kernel(si.ast, Device[Device.DEFAULT].renderer).linearize())
  assert (alus < 35) if exp2_path == "fma" else (alus > 45), f"{exp2_path}: {alus} ALU ops"


@pytest.mark.usefixtures("fallback")
def test_float32_special_values() -> None:
  inf, nan = np.inf, np.nan
  cases = {
    UnaryOps.EXP2: ([0.0, -0.0, inf, -inf, nan, 128.0, -150.0, -149.0, 127.0, 1.0, -1.0, 10.0, -126.0, -140.0, 3e38, -3e38],
                    [1.0, 1.0, inf, 0.0, nan, inf, 0.0, 2.0**-149, 2.0**127, 2.0, 0.5, 1024.0, 2.0**-126, 2.0**-140, inf, 0.0]),
    UnaryOps.LOG2: ([0.0, -0.0, -1.0, -1e-45, -inf, inf, nan, 1.0, 2.0, 0.5, 2.0**-149, 2.0**-130, 2.0**127, 1024.0],
                    [-inf, -inf, nan, nan, nan, inf, nan, 0.0, 1.0, -1.0, -149.0, -130.0, 127.0, 10.0]),
    UnaryOps.SIN: ([0.0, -0.0, inf, -inf, nan, 1e-45, -1e-45, 1e-40, 1e-20],
                   [0.0, -0.0, nan, nan, nan, 1e-45, -1e-45, 1e-40, 1e-20]),
  }
  for op, (xs, ys) in cases.items():
    got = apply(op, np.array(xs, dtype=np.float32))
    want = np.array(ys, dtype=np.float32)
    np.testing.assert_array_equal(got, want, err_msg=f"{op.name}({xs})")
    # signs of zero too: sin(-0) = -0, exp2(-inf) = +0
    assert (np.signbit(got) == np.signbit(want))[~np.isnan(want)].all(), f"{op.name}: signs {got} vs {want}"


@pytest.mark.usefixtures("fallback")
@pytest.mark.skipif(not is_dtype_supported(dtypes.float16), reason="the device has no float16 (Renderer.missing_dtypes)")
@pytest.mark.parametrize("op", [UnaryOps.EXP2, UnaryOps.LOG2, UnaryOps.SIN], ids=lambda o: o.name)
def test_float16(op: UnaryOps) -> None:
  # computed in float32 and rounded once: within a hair of correct rounding, for every float16 (or a strided subset)
  x = np.arange(0, 2**16, dtype=np.uint32).astype(np.uint16).view(np.float16)
  sub = x[:: max(1, len(x) // sweep_size(op, np.float16, 1000, len(x)))]
  got = apply(op, sub)
  with np.errstate(all="ignore"):
    want = REF[op](sub.astype(np.float64))
  err = ulp_error(got, want, np.float16)
  assert got.dtype == np.float16
  assert err.max() <= 0.5 + 2**-10, f"max {err.max()} ulp at x={sub[np.argmax(err)]!r}"


def _mpmath_ulp_error(op: UnaryOps, x: np.ndarray, got: np.ndarray) -> np.ndarray:
  """|got - op(x)| in float64 ulps of the exact result (mpmath at 160 bits); specials must match C99 exactly."""
  mp = pytest.importorskip("mpmath")
  fn = {UnaryOps.EXP2: lambda v: mp.power(2, v), UnaryOps.SIN: mp.sin, UnaryOps.LOG2: lambda v: mp.log(v, 2)}[op]
  err = np.zeros(len(x))
  with mp.workprec(160):
    for i, (v, g) in enumerate(zip(x, got)):
      if not np.isfinite(v) or (op is UnaryOps.LOG2 and v <= 0):
        with np.errstate(all="ignore"):
          want = REF[op](v)
        err[i] = 0.0 if (np.isnan(want) and np.isnan(g)) or want == g else np.inf
        continue
      exact = fn(mp.mpf(float(v)))
      r = float(exact)  # the correctly rounded float64
      if r == 0 or np.isinf(r):
        err[i] = 0.0 if g == r else np.inf
        continue
      err[i] = float(abs(mp.mpf(float(g)) - exact) / float(np.spacing(abs(r))))
  return err


@pytest.mark.skipif(not is_dtype_supported(dtypes.float64), reason="device has no float64 (WGSL has none: WEBGPU)")
@pytest.mark.usefixtures("fallback")
@pytest.mark.parametrize("op", [UnaryOps.EXP2, UnaryOps.LOG2, UnaryOps.SIN], ids=lambda o: o.name)
def test_float64(op: UnaryOps) -> None:
  rng = np.random.default_rng(op.value)
  n = sweep_size(op, np.float64, 200, 5000) // 2  # the mpmath reference costs ~30us a value
  bits = rng.integers(0, 2**63, size=n, dtype=np.uint64).view(np.float64)  # every exponent, positive
  x = np.concatenate([bits, -bits[: n // 4], rng.uniform(-1100, 1100, n // 2), rng.uniform(-4, 4, n // 4),
                      np.float64([0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, 1024.0, -1075.0, -1074.0, 1.0, np.pi / 2, 1e22])])
  if op is UnaryOps.LOG2:
    x = np.concatenate([np.abs(x), 1 + rng.uniform(-1e-3, 1e-3, n // 4), np.float64([-1.0, -0.0, -np.inf])])
  got = apply(op, x)
  err = _mpmath_ulp_error(op, x, got)
  worst = int(np.argmax(err))
  print(f"{op.name} float64: {len(x)} values, max {err[worst]:.3f} ulp at x={x[worst]!r}")
  assert err[worst] <= MAX_ULP, f"{op.name}({x[worst]!r}) = {got[worst]!r}: {err[worst]} ulp"


@pytest.mark.usefixtures("fallback")
def test_tensor_functions() -> None:
  # the user-facing functions built on the UnaryOps (exp, log, sin, cos, exp2, ...) through the fallback
  x = np.linspace(-20, 20, 129, dtype=np.float32)
  p = np.abs(x) + 0.01
  np.testing.assert_allclose(Tensor(x).exp().numpy(), np.exp(x), rtol=3e-6)
  np.testing.assert_allclose(Tensor(p).log().numpy(), np.log(p), rtol=3e-6, atol=1e-7)
  np.testing.assert_allclose(Tensor(x).sin().numpy(), np.sin(x), atol=3e-7)
  np.testing.assert_allclose(Tensor(x).cos().numpy(), np.cos(x), atol=3e-6)
  np.testing.assert_allclose(Tensor(p).sqrt().numpy(), np.sqrt(p), rtol=1e-6)


def _kernel_uops(t: Tensor) -> list[UOp]:
  sched = create_schedule([t.lazydata])
  assert len(sched) == 1
  renderer = Device[Device.DEFAULT].renderer
  assert renderer is not None
  return Kernel(sched[0].ast, renderer).linearize()


def _alu_ops(uops: list[UOp]) -> set[object]:
  return {u.arg for u in uops if u.op is UOps.ALU}


@pytest.mark.parametrize("op", [UnaryOps.EXP2, UnaryOps.LOG2, UnaryOps.SIN], ids=lambda o: o.name)
def test_native_op_kept_without_fallback(op: UnaryOps) -> None:
  renderer = Device[Device.DEFAULT].renderer
  assert renderer is not None
  if op in renderer.transcendental_fallback:
    pytest.skip(f"this device always expands {op.name}")
  x = Tensor(np.float32([0.5, 1.0, 2.0])).realize()
  assert op in _alu_ops(_kernel_uops(Tensor(x.lazydata.e(op))))


@pytest.mark.usefixtures("fallback")
@pytest.mark.parametrize("op", [UnaryOps.EXP2, UnaryOps.LOG2, UnaryOps.SIN], ids=lambda o: o.name)
def test_fallback_replaces_op(op: UnaryOps) -> None:
  x = Tensor(np.float32([0.5, 1.0, 2.0])).realize()
  ops = _alu_ops(_kernel_uops(Tensor(x.lazydata.e(op))))
  assert not ops & ALL, f"{ops & ALL} left in the kernel"
  assert {BinaryOps.ADD, BinaryOps.MUL} <= ops


def test_rewrite_leaves_other_graphs_alone() -> None:
  buf = UOp(UOps.DEFINE_GLOBAL, dtypes.float32.ptr(), (), 0)
  val = UOp(UOps.LOAD, dtypes.float32, (buf, UOp.const(dtypes.int32, 0)))
  plain = UOp(UOps.SINK, None, (UOp(UOps.STORE, None, (buf, UOp.const(dtypes.int32, 0), val * 2.0 + 1.0)),))
  assert rewrite_transcendentals(plain, ALL) is plain
  with_exp = UOp(UOps.SINK, None, (UOp(UOps.STORE, None, (buf, UOp.const(dtypes.int32, 0), val.alu(UnaryOps.EXP2))),))
  assert rewrite_transcendentals(with_exp, frozenset()) is with_exp
  assert rewrite_transcendentals(with_exp, frozenset({UnaryOps.SIN})) is with_exp
  rewritten = rewrite_transcendentals(with_exp, frozenset({UnaryOps.EXP2}))
  assert rewritten is not with_exp and UnaryOps.EXP2 not in {u.arg for u in rewritten.toposort() if u.op is UOps.ALU}


@pytest.mark.usefixtures("fallback")
@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.float16, dtypes.bfloat16], ids=lambda d: d.name)
def test_other_dtypes_through_cast(dt: DType) -> None:
  # float16 and bfloat16 (emulated or native) are computed in float32 and rounded once
  if not is_dtype_supported(dt):
    pytest.skip(f"the device has no {dt} (Renderer.missing_dtypes)")
  x = np.float32([-3.0, -0.25, 0.0, 0.5, 1.0, 3.0, 7.5])
  for op in (UnaryOps.EXP2, UnaryOps.SIN):
    got = Tensor(Tensor(x).cast(dt).lazydata.e(op)).cast(dtypes.float32).numpy()
    np.testing.assert_allclose(got, REF[op](x.astype(np.float64)), rtol=2**-7, atol=2**-9, err_msg=f"{op.name} {dt}")
