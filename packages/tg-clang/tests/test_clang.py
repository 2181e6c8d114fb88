"""tg-clang's own checks: the device registers, its C compiles, its errors say what to do."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from tg import Device, Tensor
from tg.codegen.kernel import Kernel
from tg.engine.schedule import create_schedule
from tg.plugins import installed_devices
from tg_clang.compiler import ClangCompileError, ClangCompiler
from tg_clang.renderer import ClangRenderer


def test_clang_registers_through_its_entry_point() -> None:
  devs = {d.name: d for d in installed_devices()}
  assert devs["CLANG"].package == "tg-clang" and devs["CLANG"].module == "tg_clang.plugin"
  assert isinstance(Device["CLANG"].renderer, ClangRenderer)


def _source(t: Tensor) -> str:
  si = create_schedule([t.lazydata])[-1]
  return Kernel(si.ast, ClangRenderer()).to_program().src


def test_elementwise_source_is_one_loop() -> None:
  a, b = Tensor.empty(4, 8, device="CLANG"), Tensor.empty(4, 8, device="CLANG")
  src = _source((a * b + 1).relu())
  # CPU_TARGET=aarch64 on another host (cross mode) adds the harness's entry point, tg_entry
  assert src.count("for (") == 2 and "data0[" in src and src.count("void ") == 1 + ClangRenderer.cpu_target.cross
  ClangCompiler().compile(src)  # it is valid C


def test_reduce_source_accumulates_in_a_loop() -> None:
  a = Tensor.empty(4, 8, device="CLANG")
  src = _source(a.sum(axis=1))
  assert "acc0" in src and src.count("for (") == 2


def test_compile_error_shows_source() -> None:
  with pytest.raises(ClangCompileError, match="source"):
    ClangCompiler().compile("void broken( {")


def test_missing_clang_is_explained() -> None:
  code = "from tg import Device; print(Device.availability('CLANG'))"
  env = {**os.environ, "TG_CLANG": "/nonexistent/clang"}
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
  assert "not found" in out.stdout and "apt-get install clang" in out.stdout


def test_float16_and_bfloat16_on_clang() -> None:
  from tg.dtype import dtypes
  x = np.array([1.5, -2.25, 3.0, 1000.0], dtype=np.float32)
  h = Tensor(x, device="CLANG").cast(dtypes.float16)
  np.testing.assert_array_equal((h * 2).numpy(), (x.astype(np.float16) * 2))
  b = Tensor(x, device="CLANG").cast(dtypes.bfloat16)
  np.testing.assert_array_equal((b + 1).cast(dtypes.float32).numpy(), [2.5, -1.25, 4.0, 1000.0])


def test_big_kernels_split_across_threads() -> None:
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((128, 256)).astype(np.float32), rng.standard_normal((256, 96)).astype(np.float32)
  ta, tb = Tensor(a, device="CLANG"), Tensor(b, device="CLANG")
  src = _source(ta @ tb)
  assert "tg_start" in src and "_tg_outer = " in src, "a kernel this big runs its outer loop in slices"
  np.testing.assert_allclose((ta @ tb).numpy(), a @ b, rtol=1e-4, atol=1e-4)
  small = Tensor(np.ones(8, np.float32), device="CLANG")
  assert "tg_start" not in _source(small * 2), "a small kernel stays on one thread"


def test_split_kernel_in_a_jit_graph() -> None:
  from tg import TinyJit
  rng = np.random.default_rng(1)
  w = Tensor(rng.standard_normal((256, 96)).astype(np.float32), device="CLANG").realize()

  @TinyJit
  def f(x: Tensor) -> Tensor:  # a matmul split across threads, then a small kernel
    return ((x @ w).relu().sum(0) * 2).realize()
  for _ in range(4):
    x = rng.standard_normal((128, 256)).astype(np.float32)
    np.testing.assert_allclose(f(Tensor(x, device="CLANG")).numpy(), np.maximum(x @ w.numpy(), 0).sum(0) * 2, rtol=1e-4, atol=1e-3)
  if ClangRenderer.cpu_target.cross:  # under qemu (cross mode) there is no graph: kernels replay one by one
    assert f.graph is None
    return
  # the split kernel runs through its threaded runner, the small one from a C batch function
  assert f.graph is not None and sorted(kind for kind, _ in f.graph.steps) == ["batch", "kernel"]


def test_compile_cache_keys_on_the_cpu_native_targets(monkeypatch: pytest.MonkeyPatch) -> None:
  """-march=native is the same text on every machine: the cache key must name the CPU it resolves to, or an object built
  on an AVX-512 machine is loaded on an AVX2 one sharing the cache (a copied home or image) and dies of SIGILL."""
  from tg_clang import compiler
  target = compiler.native_target()
  assert target != "unknown" and len(target.split()) > 1, target  # the CPU and its features, as clang resolves them
  key = ClangCompiler().cachekey
  monkeypatch.setattr(compiler, "native_target", lambda: target.replace("+avx2", "-avx2") + " other-cpu")
  other = ClangCompiler().cachekey
  assert key is not None and other is not None and key != other


@pytest.mark.parametrize("level", ["native", "x86-64-v2", "x86-64-v3", "aarch64"])
def test_signed_overflow_wraps_on_every_target(level: str, monkeypatch: pytest.MonkeyPatch) -> None:
  """Every target builds with -fwrapv (signed overflow wraps as tg's ints do; C leaves it undefined and clang -O2 folds
  `x < x + 1` to true), and the cache key changes with the flags, so objects built without it are never reused."""
  from tg.renderer.cpu_target import CROSS, LEVELS, CPUTarget, cpu_target
  from tg_clang import compiler
  if level == "aarch64":
    _, isa, vbytes, regs, fma, _ = CROSS["aarch64"]
    target = CPUTarget("aarch64", "aarch64", isa, vbytes, regs, fma, True, 32 << 10, 1 << 20, 8 << 20)
  elif level != "native":
    _, isa, vbytes, regs, fma = LEVELS[level]
    target = CPUTarget(level, "x86_64", isa, vbytes, regs, fma, True, 32 << 10, 1 << 20, 8 << 20)
  else:
    target = cpu_target()
  monkeypatch.setattr(compiler, "cpu_target", lambda: target)
  flags = ClangCompiler().flags()
  assert "-fwrapv" in flags and "-O2" in flags, flags
  key = ClangCompiler().cachekey
  monkeypatch.setattr(ClangCompiler, "flags", lambda self: [f for f in flags if f != "-fwrapv"])
  assert ClangCompiler().cachekey != key
  # what the flag does, to assembly only (so it runs for any target this clang can emit): the compare survives
  src = "int k(int x) { return x < x + 1; }\n"
  triple = ["--target=aarch64-linux-gnu"] if level == "aarch64" else ["--target=x86_64-linux-gnu"] if level != "native" else []
  def asm(extra: list[str]) -> str:
    out = subprocess.run([compiler.CLANG, *triple, "-O2", *extra, "-S", "-emit-llvm", "-o", "-", "-x", "c", "-"], input=src,
                         capture_output=True, text=True, check=True)
    return out.stdout
  assert "icmp" in asm(["-fwrapv"]) and "icmp" not in asm([])


# Intel CPUs clang tunes to prefer 256-bit vectors even though they have AVX-512
PREFER_256_CPUS = ("skylake-avx512", "icelake-server", "rocketlake", "sapphirerapids")


@pytest.mark.parametrize("cpu", PREFER_256_CPUS)
def test_sixteen_float_vectors_stay_512_bit_on_intel_avx512(cpu: str) -> None:
  """clang tunes these CPUs to prefer 256-bit vectors and then splits every float16 vector of a kernel into two ymm
  halves, twice the instructions and registers of the tile the heuristics sized (the 1024 matmul's main kernel on a
  Xeon that -march=native calls rocketlake: 163 GFLOP/s split, 307 whole). The compiler's flags keep the renderer's width.
  Only compiled to assembly here, so it runs on any x86 or other host with clang."""
  from tg.renderer.cpu_target import LEVELS, CPUTarget
  from tg_clang import compiler
  _, isa, width, regs, fma = LEVELS["x86-64-v4"]
  target = CPUTarget(cpu, "x86_64", isa, width, regs, fma, True, 48 << 10, 2 << 20, 32 << 20)
  flags = compiler.vector_width_flags(target)
  assert flags == ["-mprefer-vector-width=512"]
  src = ("typedef float float16 __attribute__((ext_vector_type(16), aligned(4)));\n"
         "void k(float* restrict out, const float* restrict a, const float* restrict b, int n) {\n"
         "  float16 acc = (float16){0};\n"
         "  for (int i = 0; i < n; i++) acc = *((float16*)(a + 16 * i)) * *((float16*)(b + 16 * i)) + acc;\n"
         "  *((float16*)out) = acc;\n}\n")
  def asm(extra: list[str]) -> str:
    out = subprocess.run([compiler.CLANG, "--target=x86_64-linux-gnu", f"-march={cpu}", "-O2", "-ffp-contract=on", *extra,
                          "-S", "-o", "-", "-x", "c", "-"], input=src, capture_output=True, text=True, check=True)
    return out.stdout
  assert "zmm" in asm(flags) and "ymm" not in asm(flags)
  assert "zmm" not in asm([])  # what the flag is for: without it this clang splits the vectors (if a newer one stops, fine)


@pytest.mark.parametrize("level,width", [("x86-64-v3", 256), ("x86-64-v2", 128)])
def test_narrower_targets_prefer_their_own_width(level: str, width: int) -> None:
  from tg.renderer.cpu_target import LEVELS, CPUTarget
  from tg_clang import compiler
  _, isa, vbytes, regs, fma = LEVELS[level]
  target = CPUTarget(level, "x86_64", isa, vbytes, regs, fma, True, 32 << 10, 1 << 20, 8 << 20)
  assert compiler.vector_width_flags(target) == [f"-mprefer-vector-width={width}"]
  none = CPUTarget("native", "x86_64", "none", 0, 16, False, False, 32 << 10, 1 << 20, 8 << 20)
  assert compiler.vector_width_flags(none) == []
  arm = CPUTarget("aarch64", "aarch64", "neon", 16, 32, True, True, 32 << 10, 1 << 20, 8 << 20)
  assert compiler.vector_width_flags(arm) == []  # NEON has one width
