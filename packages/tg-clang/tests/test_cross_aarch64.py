"""CLANG's cross mode: CPU_TARGET=aarch64 on a host of another architecture builds every kernel for aarch64 (NEON,
armv8-a) and runs it under qemu-aarch64 in one harness process (tg_clang.cross, tg_clang.harness). The kernels really
are aarch64, their numbers are numpy's, the tile is NEON's, a dead or hung harness is a clear error after which the
next kernel works, and a missing qemu makes the device unavailable with the packages to install.

Each check runs in a subprocess with CPU_TARGET=aarch64 (the target is read once per process). Skipped where the
host is aarch64 (native code covers it) or the toolchain is missing, unless TG_REQUIRE_AARCH64 is set (nox -s aarch64)."""
from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest


def _skip_reason() -> str:
  if platform.machine() in ("aarch64", "arm64"):
    return "the host is aarch64: CPU_TARGET=aarch64 builds native kernels here, which the other sessions run"
  from tg_clang import cross
  return cross.unavailable_reason()


SKIP = _skip_reason()
if SKIP and os.getenv("TG_REQUIRE_AARCH64"):  # nox -s aarch64: a missing toolchain is a failure, not a skip
  raise RuntimeError(f"TG_REQUIRE_AARCH64 is set, but: {SKIP}")
pytestmark = pytest.mark.skipif(bool(SKIP), reason=SKIP)


def _run(code: str, **env: str) -> str:
  full = {**os.environ, "CPU_TARGET": "aarch64", **env}
  out = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=600)
  assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stdout[-3000:] + out.stderr[-3000:]
  return out.stdout


def test_kernels_are_aarch64_objects() -> None:
  """The compiler asks clang for aarch64-linux-gnu armv8-a, the object's ELF machine is EM_AARCH64 (183), and the
  compile cache keys differ from the native ones (an x86 object is never loaded as an aarch64 one, nor the reverse)."""
  code = """
import struct
from tg import Device, Tensor
dev = Device["CLANG"]
flags = dev.compiler.flags()
assert "--target=aarch64-linux-gnu" in flags and "-march=armv8-a" in flags, flags
lib = dev.compiler.compile("void k(float* restrict a) { a[0] = 1.0f; }\\nvoid tg_entry(void** b, const int* v) { k(b[0]); }\\n")
assert lib[:4] == b"\\x7fELF" and struct.unpack_from("<H", lib, 18)[0] == 183, lib[:20]
print(dev.compiler.cachekey)
assert (Tensor([1.0, 2.0], device="CLANG") + 1).tolist() == [2.0, 3.0]
print("ok")
"""
  cross_key = _run(code).splitlines()[0]
  native = subprocess.run([sys.executable, "-c", "from tg import Device; print(Device['CLANG'].compiler.cachekey)"],
                          env={**os.environ, "CPU_TARGET": "native"}, capture_output=True, text=True, timeout=300)
  assert native.returncode == 0 and native.stdout.strip() != cross_key, (native.stdout, cross_key)


def test_numbers_match_numpy() -> None:
  """Elementwise, reductions (a split tree and a plain row sum), matmuls (packed panels, a kernel split across
  threads natively, x @ W.T), half both ways (every half, and floats rounded as numpy does), symbolic sizes (their
  ints travel to the harness) under TinyJit (no graph in cross mode: kernels one by one), and an in-place update
  (a kernel whose input and output are one buffer)."""
  code = """
import numpy as np
import tg.lazy
from tg import Device, Tensor, TinyJit, dtypes
from tg.shape.symbolic import Variable
from tg.settings import CPU_THREAD_MIN_WORK
tg.lazy.PACK_MIN_MACS = 0
assert Device["CLANG"].graph is None
rng = np.random.default_rng(0)
x, y = rng.standard_normal((67, 45)).astype(np.float32), rng.standard_normal((67, 45)).astype(np.float32)
np.testing.assert_allclose((Tensor(x) * Tensor(y) + Tensor(x).exp2()).relu().numpy(), np.maximum(x * y + np.exp2(x), 0), rtol=1e-5, atol=1e-5)
np.testing.assert_allclose(Tensor(x).sqrt().numpy(), np.sqrt(x), rtol=1e-6, equal_nan=True)
big = rng.standard_normal(100_000).astype(np.float32)
np.testing.assert_allclose(Tensor(big).sum().numpy(), big.astype(np.float64).sum(), rtol=1e-5)
np.testing.assert_allclose(Tensor(x).max(1).numpy(), x.max(1))
np.testing.assert_allclose(Tensor(x).sum(0).numpy(), x.sum(0), rtol=1e-5, atol=1e-5)
a, b = rng.standard_normal((96, 72)).astype(np.float32), rng.standard_normal((72, 80)).astype(np.float32)
CPU_THREAD_MIN_WORK.value = 1  # every kernel is rendered split (the harness runs its whole outer loop)
np.testing.assert_allclose((Tensor(a) @ Tensor(b)).numpy(), a @ b, rtol=1e-4, atol=1e-4)
CPU_THREAD_MIN_WORK.value = CPU_THREAD_MIN_WORK.default
w = rng.standard_normal((80, 72)).astype(np.float32)
np.testing.assert_allclose((Tensor(a) @ Tensor(w).T).numpy(), a @ w.T, rtol=1e-4, atol=1e-4)
every = np.arange(1 << 16, dtype=np.uint16)
got = Tensor(every).bitcast(dtypes.float16).cast(dtypes.float32).numpy()
want = every.view(np.float16).astype(np.float32)
assert ((got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))).all()
f = (rng.standard_normal(5000) * 10.0 ** rng.integers(-8, 6, 5000)).astype(np.float32)
assert (Tensor(f).cast(dtypes.float16).bitcast(dtypes.uint16).numpy() == f.astype(np.float16).view(np.uint16)).all()
h = rng.standard_normal((33, 17)).astype(np.float16)
np.testing.assert_allclose((Tensor(h) * 2 + 1).numpy(), h * 2 + 1, rtol=1e-3)
d = rng.standard_normal(100)
assert (Tensor(d).cast(dtypes.float16).numpy() == d.astype(np.float16)).all()
vi = Variable("i", 1, 10)
@TinyJit
def step(t):
  return (t * 2 + 1).realize()
for n in (3, 5, 9, 2, 7):
  v = rng.standard_normal((1, n)).astype(np.float32)
  np.testing.assert_allclose(step(Tensor(v).reshape(1, vi.bind(n))).reshape(1, n).numpy(), v * 2 + 1, rtol=1e-6)
z = Tensor(x).realize()
z.assign(z * 2 + 1).realize()
np.testing.assert_allclose(z.numpy(), x * 2 + 1, rtol=1e-6)
print("ok")
"""
  _run(code)


def test_the_tile_is_neons() -> None:
  """The renderer describes an armv8-a CPU: 16-byte vectors, 32 registers, the 4 x 4 register tile (panels of 4
  floats, 4 rows), half in hardware (no soft conversions in the kernel), whatever the host."""
  code = """
from tg import Device
from tg.codegen.heuristics.cpu import RegisterTile, register_tile
from tg.renderer.cpu import cpu_reduce_leaf
r = Device["CLANG"].renderer
t = r.cpu_target
assert (t.name, t.arch, t.isa, t.vector_bytes, t.vector_registers, t.fma, t.half_hardware, t.cross) == \\
  ("aarch64", "aarch64", "neon", 16, 32, True, True, True), t
assert register_tile(t) == RegisterTile(4, 4, 4) and (r.matmul_panel, r.matmul_panel_rows) == (4, 4)
assert r.vector_bytes == 16 and r.reduce_leaf == cpu_reduce_leaf(16)
print("ok")
"""
  _run(code)


def test_a_dead_or_hung_harness_is_an_error_and_the_next_kernel_works() -> None:
  """A kernel that crashes kills qemu: HarnessError names qemu, the kernel and the signal. A harness killed while a
  kernel runs, or one that stops answering (TG_QEMU_TIMEOUT), is the same; each time the next kernel starts a fresh
  harness, which loads the kernels it needs again."""
  code = """
import os, signal, threading, time
import numpy as np
from tg import Context, Device, Tensor
from tg_clang.harness import HarnessError
dev = Device["CLANG"]
def expect(fn, *words):
  try:
    fn()
  except HarnessError as e:
    assert all(w in str(e) for w in words), (words, str(e))
  else:
    raise AssertionError(f"no HarnessError for {words}")
a = Tensor([1.0, 2.0, 3.0]).realize()
assert (a * 3).tolist() == [3.0, 6.0, 9.0]
buf = memoryview(bytearray(64))
crash = dev.runtime("crash", dev.compiler.compile("void crash(int* restrict a) { *(volatile int*)0 = a[0]; }\\n"
                                                  "void tg_entry(void** b, const int* v) { crash(b[0]); }\\n"))
expect(lambda: crash(buf), "qemu-aarch64", "kernel crash", "signal 11")
assert (a * 3).tolist() == [3.0, 6.0, 9.0]  # a fresh harness, the kernel loaded into it again
m = Tensor.rand(768, 768).realize()
(m @ m).realize()  # compiled and loaded: the next one only runs (seconds under qemu)
harness = dev.runtime.harness
def kill_soon():
  while not harness.lock.locked():  # a request is under way
    time.sleep(0.01)
  time.sleep(0.3)
  os.kill(harness.proc.pid, signal.SIGKILL)
threading.Thread(target=kill_soon).start()
expect(lambda: (m @ m).realize(), "qemu-aarch64", "died", "running kernel", "signal 9")
assert (a * 3).tolist() == [3.0, 6.0, 9.0]
spin = dev.runtime("spin", dev.compiler.compile("void spin(int* restrict a) { while (*(volatile int*)a == 0); }\\n"
                                                "void tg_entry(void** b, const int* v) { spin(b[0]); }\\n"))
st = time.monotonic()
with Context(TG_QEMU_TIMEOUT=2):
  expect(lambda: spin(buf), "did not answer within 2 s", "TG_QEMU_TIMEOUT", "kernel spin")
assert time.monotonic() - st < 30
assert (a * 3).tolist() == [3.0, 6.0, 9.0]
np.testing.assert_allclose((m[:8] @ m[:, :8]).numpy(), m.numpy()[:8] @ m.numpy()[:, :8], rtol=1e-4)
print("ok")
"""
  _run(code)


def test_missing_qemu_makes_clang_unavailable_with_the_packages() -> None:
  code = "from tg import Device; print(Device.availability('CLANG')); print('ok')"
  out = _run(code, TG_QEMU_AARCH64="/nonexistent/qemu-aarch64")
  assert "TG_QEMU_AARCH64=/nonexistent/qemu-aarch64 was not found" in out and "apt-get install qemu-user" in out, out


def test_llvm_says_it_builds_for_the_host_only() -> None:
  pytest.importorskip("tg_llvm")
  out = _run("from tg import Device; print(Device.availability('LLVM')); print('ok')")
  assert "CPU_TARGET=aarch64" in out and "CLANG" in out, out
