"""The CPU target (tg.renderer.cpu_target) and the register tile the CPU heuristics derive from it
(tg.codegen.heuristics.cpu.register_tile): what CPU_TARGET accepts and refuses, and that a tile never needs more
vector registers than the target has."""
from __future__ import annotations

import os
import platform
import subprocess
import sys

import numpy as np
import pytest

from tg.codegen.heuristics.cpu import FMA_IN_FLIGHT, RegisterTile, register_tile
from tg.renderer import cpu_target as ct
from tg.renderer.cpu_target import LEVELS, CPUTarget
from tg.settings import CPU_CACHES, CPU_TARGET, CPU_VECTOR_BYTES, SettingError


def _target(vector_bytes: int, registers: int) -> CPUTarget:
  return CPUTarget("test", "x86_64", "test", vector_bytes, registers, True, True, 32 << 10, 1 << 20, 8 << 20)


@pytest.mark.parametrize("vector_bytes,registers,tile", [
  (64, 32, RegisterTile(8, 2, 16)),  # AVX-512: 4 x 4 would read twice the L2 bytes per FMA
  (32, 16, RegisterTile(6, 2, 8)),   # AVX2: 8 x 2 would need 19 registers; 6 rows are padded where they must be
  (16, 32, RegisterTile(4, 4, 4)),   # NEON
  (16, 16, RegisterTile(6, 2, 4)),   # SSE
])
def test_register_tile_per_isa(vector_bytes: int, registers: int, tile: RegisterTile) -> None:
  assert register_tile(_target(vector_bytes, registers)) == tile


def test_costly_rows_take_the_transposed_tile_on_a_tie() -> None:
  """On 16 registers 4 x 2 and 2 x 4 issue as many FMAs per load; with a masked broadcast operand the fewer rows win."""
  assert register_tile(_target(32, 16), costly_rows=True) == RegisterTile(2, 4, 8)
  assert register_tile(_target(64, 32), costly_rows=True) == RegisterTile(4, 4, 16)  # no tie: the same tile


@pytest.mark.parametrize("registers", [8, 12, 16, 24, 32, 64])
@pytest.mark.parametrize("vector_bytes", [0, 16, 32, 64])
def test_register_tile_never_spills(vector_bytes: int, registers: int) -> None:
  tile = register_tile(_target(vector_bytes, registers))
  assert tile.accumulators + tile.vectors + 1 <= registers, tile
  assert tile.lanes == max(1, vector_bytes // 4)
  if registers >= FMA_IN_FLIGHT + 3:  # room for enough accumulators to hide the FMA latency
    assert tile.accumulators >= FMA_IN_FLIGHT, tile


def _uncached(monkeypatch: pytest.MonkeyPatch, flags: list[str], arch: str = "x86_64", **settings: object) -> CPUTarget:
  monkeypatch.setattr(ct, "_cpu_flags", lambda: flags)
  monkeypatch.setattr(ct.platform, "machine", lambda: arch)
  for s in (CPU_TARGET, CPU_VECTOR_BYTES, CPU_CACHES):
    monkeypatch.setattr(s, "value", settings.get(s.name, s.default))
  return ct.cpu_target.__wrapped__()  # type: ignore[attr-defined,no-any-return]


AVX512_HOST = ["sse4_2", "popcnt", "avx", "avx2", "fma", "bmi2", "avx512f", "avx512bw", "avx512vl", "avx512dq", "f16c"]


def test_native_follows_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
  t = _uncached(monkeypatch, AVX512_HOST)
  assert (t.isa, t.vector_bytes, t.vector_registers, t.fma, t.compiler_cpu) == ("avx512", 64, 32, True, None)
  t = _uncached(monkeypatch, AVX512_HOST[:6])
  assert (t.isa, t.vector_bytes, t.vector_registers, t.fma) == ("avx2", 32, 16, True)
  t = _uncached(monkeypatch, ["sse4_2"])
  assert (t.isa, t.vector_bytes, t.vector_registers, t.half_hardware) == ("sse", 16, 16, False)
  assert _uncached(monkeypatch, AVX512_HOST).half_hardware
  t = _uncached(monkeypatch, ["fp", "asimd"], arch="aarch64")
  assert (t.isa, t.vector_bytes, t.vector_registers, t.fma) == ("neon", 16, 32, True)


@pytest.mark.parametrize("level", list(LEVELS))
def test_a_level_the_host_runs_sets_the_compilers_cpu(monkeypatch: pytest.MonkeyPatch, level: str) -> None:
  t = _uncached(monkeypatch, AVX512_HOST, CPU_TARGET=level)
  _, isa, vector_bytes, registers, fma = LEVELS[level]
  assert (t.name, t.compiler_cpu, t.isa, t.vector_bytes, t.vector_registers, t.fma) == (level, level, isa, vector_bytes, registers, fma)
  assert t.half_hardware == (level != "x86-64-v2")  # F16C comes with x86-64-v3


def test_a_level_the_host_cant_run_is_refused_with_the_missing_flag(monkeypatch: pytest.MonkeyPatch) -> None:
  with pytest.raises(SettingError, match=r"CPU_TARGET=x86-64-v4 needs avx512f.*SIGILL"):
    _uncached(monkeypatch, AVX512_HOST[:6], CPU_TARGET="x86-64-v4")
  with pytest.raises(SettingError, match=r"x86-64 level; this machine is aarch64"):
    _uncached(monkeypatch, ["asimd"], arch="aarch64", CPU_TARGET="x86-64-v3")
  with pytest.raises(SettingError, match=r"CPU_TARGET must be one of native, x86-64-v2, x86-64-v3, x86-64-v4, aarch64, got 'avx9'"):
    _uncached(monkeypatch, AVX512_HOST, CPU_TARGET="avx9")


def test_aarch64_is_neon_on_any_host(monkeypatch: pytest.MonkeyPatch) -> None:
  """CPU_TARGET=aarch64 describes an armv8-a CPU whatever the host: NEON's 32 registers of 4 floats (the 4 x 4 tile),
  FMA, half in hardware. On an x86-64 host it is a cross target (the caches assumed, not the host's); on an aarch64
  host it is the host's own architecture (its caches from sysfs)."""
  monkeypatch.setattr(ct, "_sysfs_caches", lambda: (48 << 10, 2 << 20, 16 << 20))
  for host, cross, caches in (("x86_64", True, ct.CROSS["aarch64"][-1]), ("aarch64", False, (48 << 10, 2 << 20, 16 << 20))):
    t = _uncached(monkeypatch, AVX512_HOST if host == "x86_64" else ["asimd"], arch=host, CPU_TARGET="aarch64")
    assert (t.name, t.arch, t.isa, t.vector_bytes, t.vector_registers, t.fma, t.half_hardware) == ("aarch64", "aarch64", "neon", 16, 32, True, True)
    assert (t.compiler_cpu, t.cross, (t.l1d_bytes, t.l2_bytes, t.l3_bytes)) == ("armv8-a", cross, caches)
    assert register_tile(t) == RegisterTile(4, 4, 4)
  t = _uncached(monkeypatch, AVX512_HOST, CPU_TARGET="aarch64", CPU_CACHES="32K,512K,4M")
  assert (t.l1d_bytes, t.l2_bytes, t.l3_bytes) == (32 << 10, 512 << 10, 4 << 20)
  assert not _uncached(monkeypatch, AVX512_HOST).cross and not _uncached(monkeypatch, AVX512_HOST, CPU_TARGET="x86-64-v3").cross


def test_supported_levels_are_the_ones_whose_flags_the_host_has(monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.setattr(ct.platform, "machine", lambda: "x86_64")
  for flags, levels in ((AVX512_HOST, list(LEVELS)), (AVX512_HOST[:6], ["x86-64-v2", "x86-64-v3"]), (["sse4_2"], [])):
    monkeypatch.setattr(ct, "_cpu_flags", lambda flags=flags: flags)
    assert ct.supported_levels() == levels
  monkeypatch.setattr(ct.platform, "machine", lambda: "aarch64")
  assert ct.supported_levels() == []


def test_levels_unlike_native_leave_out_the_one_the_host_is(monkeypatch: pytest.MonkeyPatch) -> None:
  # what nox -s cpu_targets runs: a level the host matches would give native's kernels again
  monkeypatch.setattr(ct.platform, "machine", lambda: "x86_64")
  avx2_f16c = [*AVX512_HOST[:6], "f16c"]
  for flags, levels in ((AVX512_HOST, ["x86-64-v2", "x86-64-v3"]), (avx2_f16c, ["x86-64-v2"]),
                        ([f for f in avx2_f16c if f != "f16c"], ["x86-64-v2", "x86-64-v3"]), (["sse4_2", "popcnt"], [])):
    monkeypatch.setattr(ct, "_cpu_flags", lambda flags=flags: flags)
    assert ct.levels_unlike_native() == levels, flags


def test_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
  t = _uncached(monkeypatch, AVX512_HOST, CPU_VECTOR_BYTES=16, CPU_CACHES="48K,2M,96M")
  assert (t.vector_bytes, t.l1d_bytes, t.l2_bytes, t.l3_bytes) == (16, 48 << 10, 2 << 20, 96 << 20)
  for bad in ("48K,2M", "a,b,c", "0,1M,2M"):
    with pytest.raises(SettingError, match="CPU_CACHES must be three sizes"):
      _uncached(monkeypatch, AVX512_HOST, CPU_CACHES=bad)


def test_caches_without_sysfs_fall_back(monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.setattr(ct.os, "listdir", lambda _: (_ for _ in ()).throw(OSError("no sysfs")))
  assert ct._sysfs_caches() == ct.DEFAULT_CACHES


def test_bad_cpu_target_in_the_environment_is_an_error_at_import() -> None:
  """A misspelt CPU_TARGET stops the program at `import tg`, as any bad setting does: it never quietly leaves the CPU
  devices unusable (and the program on the PYTHON interpreter)."""
  code = "from tg import Tensor; print((Tensor([1.0, 2.0]) * 2).tolist())"
  env = {**os.environ, "CPU_TARGET": "x86-64-v9"}
  out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
  assert out.returncode == 1 and "SettingError: CPU_TARGET must be one of native, x86-64-v2" in out.stderr, out.stderr[-2000:]
  assert "[2.0, 4.0]" not in out.stdout


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64") or "avx2" not in ct._cpu_flags(), reason="needs an AVX2 x86-64 host")
@pytest.mark.parametrize("device", ["CLANG", "LLVM"])
def test_cpu_devices_build_for_the_level(device: str) -> None:
  """CPU_TARGET=x86-64-v3 on any AVX2 host: the renderer has 32-byte vectors and the AVX2 tile, the compiler is asked
  for the level (its cache key names it), and a matmul that packs and a conv come out as numpy's."""
  pytest.importorskip(f"tg_{device.lower()}")
  code = f"""
import numpy as np
import tg.lazy
from tg import Device, Tensor
tg.lazy.PACK_MIN_MACS = 0
dev = Device["{device}"]
r = dev.renderer
assert (r.cpu_target.name, r.vector_bytes, r.matmul_panel, r.matmul_panel_rows) == ("x86-64-v3", 32, 8, 6), r.cpu_target
asked = dev.compiler.flags() if "{device}" == "CLANG" else dev.compiler.cachekey  # clang's -march; LLVM's CPU in its key
assert ("-march=x86-64-v3" in asked) if "{device}" == "CLANG" else ("x86-64-v3" in asked), asked
rng = np.random.default_rng(0)
a, b = rng.standard_normal((96, 72)).astype(np.float32), rng.standard_normal((72, 80)).astype(np.float32)
np.testing.assert_allclose((Tensor(a, device="{device}") @ Tensor(b, device="{device}")).numpy(), a @ b, rtol=1e-4, atol=1e-4)
x, w = rng.standard_normal((2, 3, 9, 9)).astype(np.float32), rng.standard_normal((32, 3, 3, 3)).astype(np.float32)
y = Tensor(x, device="{device}").conv2d(Tensor(w, device="{device}"), padding=1).numpy()
ref = np.zeros((2, 32, 9, 9), np.float32)
xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
for i in range(3):
  for j in range(3):
    ref += np.einsum("bchw,oc->bohw", xp[:, :, i:i + 9, j:j + 9], w[:, :, i, j])
np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
print("ok")
"""
  env = {**os.environ, "CPU_TARGET": "x86-64-v3"}
  out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
  assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]


def _cpu_kernel(out: object) -> object:
  from tg import Device
  from tg.codegen.kernel import Kernel
  from tg.engine.schedule import create_schedule
  renderer = Device[Device.DEFAULT].renderer
  if renderer.global_ids or renderer.vector_width(__import__("tg").dtypes.float32) < 4:
    pytest.skip(f"{Device.DEFAULT} gets the workgroup heuristics or has no float vectors")
  si = [si for si in create_schedule([out.lazydata]) if si.ast.op.name in ("STORE", "SINK")][-1]  # type: ignore[attr-defined]
  return Kernel(si.ast, renderer).hand_coded_optimizations()


def _vector_loads_are_contiguous(k: object) -> bool:
  """Every input of the reduction that moves along the vector axis is read contiguously along it (no lane-by-lane gather)."""
  from tg.codegen.lowerer import REDUCE
  from tg.ops import BufferOps
  vec = k.vector_axis()  # type: ignore[attr-defined]
  if vec is None:
    return True
  reduce_axes = [i for i, kind in enumerate(k.kinds) if kind == REDUCE]  # type: ignore[attr-defined]
  for op in k.ast.lazyops():  # type: ignore[attr-defined]
    if op.op is BufferOps.LOAD:
      strides = op.arg.st.real_strides()
      if strides[vec] not in (0, 1) and any(strides[r] != 0 for r in reduce_axes):
        return False
  return True


def test_a_bias_does_not_change_a_matmuls_tile() -> None:
  """x @ W.T + b (a Linear layer): W.T is strided along the output columns, the bias is contiguous along them. The
  bias must not pass for the matmul operand's contiguity: the vector tile would then gather W element by element into
  4 x 16 accumulators (the MLP step's 256 x 512 x 512 layer took 31 ms instead of 2). With or without the bias, the
  kernel gets the same opts."""
  from tg import Tensor
  rng = np.random.default_rng(0)
  x, w, b = (Tensor(rng.standard_normal(s).astype(np.float32)).realize() for s in ((64, 96), (128, 96), (128,)))
  with_bias, without = _cpu_kernel(x @ w.T + b), _cpu_kernel(x @ w.T)
  assert with_bias.applied_opts == without.applied_opts  # type: ignore[attr-defined]
  np.testing.assert_allclose((x @ w.T + b).numpy(), x.numpy() @ w.numpy().T + b.numpy(), rtol=1e-4, atol=1e-4)


def test_a_matmul_whose_columns_take_fewer_vectors_gets_more_rows() -> None:
  """784 columns hold 49 vectors of 16 (98 of 8, 196 of 4): where the tile's vectors don't divide them, the tile takes
  the vectors that do and as many rows as the registers hold for those (at least FMA_IN_FLIGHT accumulators), not
  the tile's own rows."""
  from tg import Tensor
  from tg.codegen.heuristics.cpu import max_rows, renderer_target
  from tg.codegen.kernel import OptOps
  rng = np.random.default_rng(0)
  # x (256, 64) row-major: only `a` is contiguous along an output axis, the 784 columns. (A weight gradient g.T @ a is
  # contiguous along its 256 rows too, and with 16-float vectors the tile then takes its vectors along those, which
  # two vectors divide: 8 x 2 beats 16 x 1, see register_tile)
  a, x = (Tensor(rng.standard_normal(s).astype(np.float32)).realize() for s in ((64, 784), (256, 64)))
  k = _cpu_kernel(x @ a)
  target = renderer_target(k.renderer)  # type: ignore[attr-defined]
  tile = register_tile(target)
  vectors = next(v for v in (tile.vectors, tile.vectors // 2, tile.vectors // 4, 1) if v >= 1 and (784 // tile.lanes) % v == 0)
  upcasts = sorted(o.amt for o in k.applied_opts if o.op is OptOps.UPCAST)  # type: ignore[attr-defined]
  rows = tile.rows if vectors == tile.vectors else max_rows(target, vectors)  # (AVX2's 6 rows pad the 256 to 258)
  assert upcasts == sorted([tile.lanes, rows] + ([vectors] if vectors > 1 else [])), k.applied_opts  # type: ignore[attr-defined]
  assert rows * vectors >= FMA_IN_FLIGHT
  assert _vector_loads_are_contiguous(k)
  np.testing.assert_allclose((x @ a).numpy(), x.numpy() @ a.numpy(), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("shape", [((64, 1024), (128, 1024)), ((64, 96), (120, 96)), ((2, 3, 40, 64), (2, 3, 48, 64))])
def test_x_times_w_transposed_is_vectorized_along_the_reduction(shape: tuple[tuple[int, ...], tuple[int, ...]]) -> None:
  """x @ W.T (a Linear layer) and q @ k.T: both operands are contiguous along the reduction and neither along an output
  axis, so the vectors run along the reduction (an UNROLL by a vector's lanes) with the dot tile's outputs, and no
  operand is gathered. (A short reduction whose outputs take 16 x 16 whole goes to the upcast tile on 16 lanes: the
  next test; these shapes don't.)"""
  from tg import Tensor
  from tg.codegen.heuristics.cpu import dot_tile, renderer_target
  from tg.codegen.kernel import OptOps
  from tg.codegen.lowerer import UNROLL
  rng = np.random.default_rng(0)
  a_np, b_np = (rng.standard_normal(s).astype(np.float32) for s in shape)
  a, b = Tensor(a_np).realize(), Tensor(b_np).realize()
  k = _cpu_kernel(a @ b.transpose(-1, -2))
  target = renderer_target(k.renderer)  # type: ignore[attr-defined]
  lanes = register_tile(target).lanes
  vec = k.vector_axis()  # type: ignore[attr-defined]
  assert vec is not None and k.kinds[vec] == UNROLL and k.full_shape[vec] == lanes, k.applied_opts  # type: ignore[attr-defined]
  rows, cols = dot_tile(target)
  assert sorted(o.amt for o in k.applied_opts if o.op is OptOps.UPCAST) == sorted([rows, cols]), k.applied_opts  # type: ignore[attr-defined]
  assert _vector_loads_are_contiguous(k)
  np.testing.assert_allclose((a @ b.transpose(-1, -2)).numpy(), a_np @ np.swapaxes(b_np, -1, -2), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [((64, 128), (96, 128)), ((2, 4, 64, 32), (2, 4, 48, 32)), ((32, 512), (64, 512))])
def test_a_short_contraction_takes_the_upcast_tile_on_16_lanes(shape: tuple[tuple[int, ...], tuple[int, ...]]) -> None:
  """x @ W.T with K <= 512 and q @ k.T with a head of 32 (a small transformer's layers) on 16-float vectors: the dot
  tile's horizontal sums would cost as much as its loop, so the outputs take the plain 16 x 16 upcast tile (no UNROLL of
  the reduction). With fewer lanes they keep the dot tile. The numbers are right either way."""
  from tg import Tensor
  from tg.codegen.heuristics.cpu import renderer_target
  from tg.codegen.kernel import OptOps
  rng = np.random.default_rng(0)
  a_np, b_np = (rng.standard_normal(s).astype(np.float32) for s in shape)
  a, b = Tensor(a_np).realize(), Tensor(b_np).realize()
  k = _cpu_kernel(a @ b.transpose(-1, -2))
  lanes = register_tile(renderer_target(k.renderer)).lanes  # type: ignore[attr-defined]
  ops = [(o.op, o.amt) for o in k.applied_opts]  # type: ignore[attr-defined]
  if lanes >= 16:
    assert ops == [(OptOps.UPCAST, 16), (OptOps.UPCAST, 16)], ops
  else:
    assert (OptOps.UNROLL, lanes) in ops, ops
  np.testing.assert_allclose((a @ b.transpose(-1, -2)).numpy(), a_np @ np.swapaxes(b_np, -1, -2), rtol=1e-4, atol=1e-4)


def test_a_row_sum_with_a_broadcast_addend_keeps_its_vectors_along_the_row() -> None:
  """A row sum of (x + a position embedding) * a gain, as a LayerNorm after the embeddings has: inputs broadcast along
  both output axes (the embedding along the batch, the gain along both) but no contraction (x moves along both), so no
  upcast tile gathering the rows lane by lane on any target: the vectors stay along the row."""
  from tg import Tensor
  from tg.codegen.lowerer import UNROLL
  rng = np.random.default_rng(0)
  x_np, p_np, g_np = (rng.standard_normal(s).astype(np.float32) for s in ((32, 64, 128), (64, 128), (128,)))
  x, p, g = Tensor(x_np).realize(), Tensor(p_np).realize(), Tensor(g_np).realize()
  k = _cpu_kernel(((x + p) * g).sum(-1))
  vec = k.vector_axis()  # type: ignore[attr-defined]
  assert vec is not None and k.kinds[vec] == UNROLL, k.applied_opts  # type: ignore[attr-defined]
  np.testing.assert_allclose(((x + p) * g).sum(-1).numpy(), ((x_np + p_np) * g_np).sum(-1), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("registers,tile", [(32, (4, 4)), (16, (4, 2)), (8, (2, 2))])
def test_dot_tile_fits_the_registers(registers: int, tile: tuple[int, int]) -> None:
  from tg.codegen.heuristics.cpu import dot_tile
  rows, cols = dot_tile(_target(32, registers))
  assert (rows, cols) == tile and rows * cols + rows + cols <= registers


def test_a_row_sum_unrolls_what_divides_its_row() -> None:
  """A row of 6 vectors takes 2 unrolled copies per iteration when 4 don't divide it (not none at all), one row at a
  time (one stream); a row of 2 vectors, too short to unroll, takes its independent chains from 4 rows side by side
  instead."""
  from tg import Device, Tensor
  from tg.codegen.kernel import OptOps
  from tg.dtype import dtypes
  width = max(Device[Device.DEFAULT].renderer.vector_width(dtypes.float32), 4)
  x_np = np.random.default_rng(0).standard_normal((64, 6 * width)).astype(np.float32)
  x = Tensor(x_np).realize()
  k = _cpu_kernel(x.sum(1))
  unrolls = [o.amt for o in k.applied_opts if o.op is OptOps.UNROLL]  # type: ignore[attr-defined]
  assert unrolls == [width, 2] and not any(o.op is OptOps.UPCAST for o in k.applied_opts), k.applied_opts  # type: ignore[attr-defined]
  np.testing.assert_allclose(x.sum(1).numpy(), x_np.sum(1), rtol=1e-5, atol=1e-5)
  short_np = x_np[:, :2 * width].copy()
  short = Tensor(short_np).realize()
  k = _cpu_kernel(short.sum(1))
  assert [(o.op, o.amt) for o in k.applied_opts] == [(OptOps.UNROLL, width), (OptOps.UPCAST, 4)], k.applied_opts  # type: ignore[attr-defined]
  np.testing.assert_allclose(short.sum(1).numpy(), short_np.sum(1), rtol=1e-5, atol=1e-5)


def test_idle_share_of_a_split_loop() -> None:
  from tg.codegen.heuristics.cpu import idle_share
  assert idle_share(8, 2) == 0 and idle_share(1, 4) == 0 and idle_share(3, 1) == 0
  assert idle_share(9, 2) == pytest.approx(0.1)  # 5 + 4: one core idle for one of its 5 iterations
  assert idle_share(57, 2) == pytest.approx(1 / 58)


# the start of a subprocess test of the CPU heuristics under pinned CPU_CACHES (_heuristics_with_caches): `r`, the test
# device's renderer, `rng`; a device that isn't a CPU with a target prints "skip"
_CPU_KERNEL_TEST = """
import numpy as np
from tg import Device, Tensor
from tg.codegen.kernel import Kernel, OptOps
from tg.engine.schedule import create_schedule
r = Device[Device.DEFAULT].renderer
if r.global_ids or r.cpu_target is None:
  print("skip")
  raise SystemExit
rng = np.random.default_rng(0)
"""


def _heuristics_with_caches(code: str, caches: str) -> None:
  """Run _CPU_KERNEL_TEST + code (which prints "ok") in a subprocess with CPU_CACHES=caches and 2 threads."""
  from tg import Device
  env = {**os.environ, "CPU_CACHES": caches, "CPU_THREADS": "2", "DEVICE": Device.DEFAULT}
  out = subprocess.run([sys.executable, "-c", _CPU_KERNEL_TEST + code], env=env, capture_output=True, text=True, timeout=600)
  assert out.returncode == 0 and out.stdout.strip().split()[-1] in ("ok", "skip"), (caches, out.stderr[-3000:])
  if out.stdout.strip().endswith("skip"):
    pytest.skip(f"{Device.DEFAULT} is not a CPU device with a target")


def test_a_batch_of_one_does_not_stop_cache_blocking() -> None:
  """x @ W with x of shape (1, 256, 768), a GPT-2 block's layer on one sequence: its outermost output axis is the batch
  of 1, no loop. The rows are blocked so that a block of A's rows stays in L2 while each strip of W (3 MB: more than
  the 1 MiB L2 the run pins) streams through once per block, not once per row tile (the GPT-2 block on a 2-core
  AVX-512 Xeon: 27.6 -> 23.3 ms under TinyJit)."""
  code = """
x_np, w_np = rng.standard_normal((1, 256, 768)).astype(np.float32), rng.standard_normal((768, 1024)).astype(np.float32)
x, w = Tensor(x_np).realize(), Tensor(w_np).realize()
si = [si for si in create_schedule([(x @ w).lazydata]) if si.ast.op.name in ("STORE", "SINK")][-1]
k = Kernel(si.ast, r).hand_coded_optimizations()
assert any(o.op is OptOps.BLOCK for o in k.applied_opts), k.applied_opts
np.testing.assert_allclose((x @ w).numpy(), x_np @ w_np, rtol=1e-4, atol=1e-3)
print("ok")
"""
  _heuristics_with_caches(code, "48K,1M,32M")


def test_a_dot_tile_sweeps_blocks_of_w_that_fit_half_the_l2() -> None:
  """x @ W.T (a Linear layer's forward: both operands contiguous along the reduction, the dot tile) with W's 1.6 MB
  over the 512 KiB L2 the run pins: the loop over W's rows is blocked (BLOCK on the last output axis), its blocks the
  outermost loop, each block's W rows filling at most half the L2, and as many blocks as 2 cores split evenly. With an
  L2 that holds W (4 MiB pinned), nothing is blocked; nor is q @ k.T over 12 heads, whose inner loop sweeps one head.
  The numbers are numpy's either way (on an AVX2 Zen 3, 2 threads, the kernel alone: 104 -> 115-117 GFLOP/s)."""
  code = """
from tg.codegen.heuristics.cpu import MAX_IDLE_SHARE, idle_share
x_np, w_np = rng.standard_normal((256, 784)).astype(np.float32), rng.standard_normal((512, 784)).astype(np.float32)
x, w = Tensor(x_np).realize(), Tensor(w_np).realize()
si = [si for si in create_schedule([(x @ w.T).lazydata]) if si.ast.op.name in ("STORE", "SINK")][-1]
k = Kernel(si.ast, r).hand_coded_optimizations()
blocks = [o for o in k.applied_opts if o.op is OptOps.BLOCK]
if r.cpu_target.l2_bytes >= w_np.nbytes:
  assert not blocks, k.applied_opts
else:
  assert len(blocks) == 1 and k.applied_opts[0].op is OptOps.UNROLL, k.applied_opts  # the dot tile, then its blocking
  n_blocks, per_block = k.full_shape[0], 512 // k.full_shape[0]
  assert per_block * 784 * 4 <= r.cpu_target.l2_bytes // 2, (k.applied_opts, k.full_shape)
  assert idle_share(n_blocks, 2) <= MAX_IDLE_SHARE, (k.applied_opts, k.full_shape)
np.testing.assert_allclose((x @ w.T).numpy(), x_np @ w_np.T, rtol=1e-4, atol=1e-3)
# on 48 cores no count of blocks of the 256 pairs of W rows splits evenly (128 blocks: 3 for some cores, 2 for
# others): the outer loop of x tiles stays what the threads split
from tg.helpers import Context
with Context(CPU_THREADS=48):
  k = Kernel(si.ast, r).hand_coded_optimizations()
assert not any(o.op is OptOps.BLOCK for o in k.applied_opts), k.applied_opts
# q @ k.T over 12 heads: k is 768 KB, but a sweep of the inner loop reads one head's 64 KB of it: nothing to block
import tg.lazy
tg.lazy.PACK_MIN_MACS_LAYOUT = 1 << 40  # (the dot tile, not k's panels)
q_np, k_np = rng.standard_normal((12, 256, 64)).astype(np.float32), rng.standard_normal((12, 256, 64)).astype(np.float32)
q, kk = Tensor(q_np).realize(), Tensor(k_np).realize()
si = [si for si in create_schedule([(q @ kk.transpose(1, 2)).lazydata]) if si.ast.op.name in ("STORE", "SINK")][-1]
k = Kernel(si.ast, r).hand_coded_optimizations()
assert k.applied_opts[0].op is OptOps.UNROLL and not any(o.op is OptOps.BLOCK for o in k.applied_opts), k.applied_opts
print("ok")
"""
  for caches in ("32K,512K,32M", "32K,4M,32M"):
    _heuristics_with_caches(code, caches)


@pytest.mark.parametrize("shape", [(1, 256, 768), (1, 12, 256, 256)])
def test_row_reductions_of_a_batch_of_one_are_plain_reductions(shape: tuple[int, ...]) -> None:
  """The row sums of x of shape (1, 256, 768) (a LayerNorm's mean on one sequence) and the row max of (1, 12, 256, 256)
  scores: x is broadcast along the batch axis of 1 only, which is no loop, and nothing else is reused across outputs.
  They are plain reductions (vectors along the rows, no output axis upcast for reuse), not matmul-like ones (which
  upcast nothing here and left 256 x 768 at one float per step: 247 us, 112 as a plain reduction; the scores' max
  3990 us, 196). A bias added after the sum isn't read along the rows either, so it doesn't make it matmul-like."""
  from tg import Tensor
  from tg.codegen.kernel import OptOps
  rng = np.random.default_rng(0)
  x_np, b_np = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape[-2:-1] + (1,)).astype(np.float32)
  x, b = Tensor(x_np).realize(), Tensor(b_np).realize()
  for out, want in ((x.sum(-1, keepdim=True), x_np.sum(-1, keepdims=True)), (x.max(-1, keepdim=True) + b, x_np.max(-1, keepdims=True) + b_np)):
    k = _cpu_kernel(out)
    ops = [o.op for o in k.applied_opts]  # type: ignore[attr-defined]
    assert OptOps.UNROLL in ops, k.applied_opts  # type: ignore[attr-defined]
    assert not any(o.op is OptOps.UPCAST and o.axis == 0 for o in k.applied_opts), k.applied_opts  # type: ignore[attr-defined]
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-3)


def test_an_odd_row_length_still_takes_pairs() -> None:
  """A padded copy whose rows are 58 long (a conv's image padded by one pixel) divides by neither 16, 8 nor 4: it takes
  vectors of 2 rather than none (bench/'s conv image copy 1.13 -> 0.68 ms on 2 threads of an AVX-512 Xeon)."""
  from tg import Tensor
  from tg.codegen.kernel import OptOps
  x_np = np.random.default_rng(0).standard_normal((64, 56)).astype(np.float32)
  x = Tensor(x_np).realize()
  out = x.pad(((0, 0), (1, 1))).contiguous()
  k = _cpu_kernel(out)
  assert [(o.op, o.amt) for o in k.applied_opts] == [(OptOps.UPCAST, 2)], k.applied_opts  # type: ignore[attr-defined]
  np.testing.assert_array_equal(out.numpy(), np.pad(x_np, ((0, 0), (1, 1))))
