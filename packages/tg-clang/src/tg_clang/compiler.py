"""ClangCompiler: C source -> shared object bytes, by running the system's clang."""
from __future__ import annotations

import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile

from tg.device import Compiler
from tg.renderer.cpu_target import ARCH_NAMES, CROSS, CPUTarget, cpu_target
from tg.settings import Setting

TG_CLANG = Setting("TG_CLANG", "clang", "the clang binary CLANG compiles with (a name on PATH or a path)", read_once="when the CLANG device loads")
CLANG: str = TG_CLANG.value


def clang_version() -> str | None:
  """clang's version line, or None when clang is missing."""
  if shutil.which(CLANG) is None:
    return None
  out = subprocess.run([CLANG, "--version"], capture_output=True, text=True, check=False)
  return out.stdout.splitlines()[0] if out.returncode == 0 and out.stdout else None


@functools.cache
def native_target() -> str:
  """What `-march=native` (or CPU_TARGET's level) means on this machine, as clang resolves it: the target CPU and every target feature
  (e.g. "znver3 +avx2 +avx512f ... -avx512pf"). "-march=native" is the same text on every machine, so the compile
  cache keys on this instead: an object built for an AVX-512 CPU is never loaded on an AVX2 one (SIGILL) when a cache
  directory moves between machines (a shared home, a copied container image)."""
  try:
    out = subprocess.run([CLANG, *arch_flags(), "-###", "-x", "c", "-c", os.devnull, "-o", os.devnull],
                         capture_output=True, text=True, check=False, timeout=60).stderr
  except (OSError, subprocess.TimeoutExpired):
    return "unknown"
  words = [w.strip('"') for w in out.split()]
  picked = [words[i + 1] for i, w in enumerate(words[:-1]) if w in ("-target-cpu", "-target-feature")]
  return " ".join(picked) or "unknown"


# the clang target of each CPU_TARGET of another architecture (tg.renderer.cpu_target.CROSS): Debian's cross triple
CROSS_TRIPLES = {"aarch64": "aarch64-linux-gnu"}


def cross_flags(arch: str) -> list[str]:
  """clang's flags for building on this host for arch (a key of CROSS_TRIPLES), its baseline ISA."""
  return [f"--target={CROSS_TRIPLES[arch]}", f"-march={CROSS[arch][0]}"]


def arch_flags() -> list[str]:
  """What clang is asked to build for: the host (-march=native, -mcpu=native off x86), an x86-64 level, or aarch64's
  baseline ISA (armv8-a), for the cross triple when the host is another architecture (cross.py runs those kernels)."""
  target = cpu_target()
  cpu = target.compiler_cpu or "native"
  if target.cross:
    return cross_flags(target.arch)
  march = [f"-march={cpu}"] if platform.machine() in ("x86_64", "AMD64") or target.compiler_cpu else [f"-mcpu={cpu}"]
  return march + vector_width_flags(target)


def vector_width_flags(target: CPUTarget) -> list[str]:
  """-mprefer-vector-width= the target's own vector width, on x86. clang tunes many AVX-512 CPUs (skylake-avx512,
  icelake, rocketlake, sapphirerapids: Intel's, whose 512-bit instructions once lowered the clock) to prefer 256-bit
  vectors, and then splits every 16-float vector a kernel declares into two ymm halves: twice the instructions, and
  twice the registers of the tile the heuristics sized for 32 registers of 16 floats, so the tile spills. The 1024
  matmul's main kernel on a 2-core Xeon that -march=native names rocketlake: 163 GFLOP/s split, 307 whole. The
  renderer's vectors are already the width the heuristics chose (CPU_VECTOR_BYTES narrows them): clang keeps them."""
  if ARCH_NAMES.get(target.arch, target.arch) != "x86_64" or target.vector_bytes <= 0:
    return []
  return [f"-mprefer-vector-width={target.vector_bytes * 8}"]


class ClangCompileError(RuntimeError):
  pass


class ClangCompiler(Compiler):
  def __init__(self) -> None:
    version = clang_version() or "unknown"
    # the cache key names the toolchain, the flags and the CPU they target (native_target), so a new clang or another
    # CPU never reuses stale objects
    digest = hashlib.sha256(" ".join([*self.flags(), native_target()]).encode()).hexdigest()[:12]
    super().__init__(f"compile_clang_{version}_{platform.machine()}_{digest}")

  def flags(self) -> list[str]:
    # -fwrapv: signed integer overflow wraps (two's complement), as tg's integer ops mean (exec_alu, numpy, torch). C
    # leaves it undefined, and -O2 then folds a fused kernel's `x < x + 1` to true where x + 1 wraps. Every target
    # (native, an x86-64 level, the aarch64 cross triple) builds with these flags, and the cache key hashes them.
    return ["-shared", "-fPIC", "-O2", "-fwrapv", "-ffp-contract=on", "-fno-math-errno", *arch_flags(), "-x", "c"]

  def compile(self, src: str) -> bytes:
    with tempfile.TemporaryDirectory(prefix="tg_clang_") as d:
      out = os.path.join(d, "kernel.so")
      proc = subprocess.run([CLANG, *self.flags(), "-", "-lm", "-o", out], input=src, capture_output=True, text=True, check=False)
      if proc.returncode != 0:
        raise ClangCompileError(f"clang failed to compile a kernel:\n{proc.stderr}\n--- source ---\n{src}")
      with open(out, "rb") as f:
        return f.read()
