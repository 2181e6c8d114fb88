"""The CPU a CPU device compiles for, described by what its kernels' heuristics need: vector width, vector registers,
FMA, caches and cores.

`CPU_TARGET` picks it: `native` (the default) is the host as /proc/cpuinfo and sysfs describe it; the x86-64
microarchitecture levels `x86-64-v2` (SSE4.2), `x86-64-v3` (AVX2 + FMA) and `x86-64-v4` (AVX-512) build kernels for
that level instead, so one machine can build and check what another runs (`CPU_TARGET=x86-64-v3` on an AVX-512
machine gives the kernels an AVX2 laptop gets: the same tiles, 16 registers of 8 floats). A level the host can't run
is refused with the flag it lacks, as its kernels would die of SIGILL. `aarch64` is another architecture (NEON,
armv8-a): on an aarch64 host it is native code for the baseline ISA; elsewhere the target is `cross` and only a
device that can run foreign code takes it (tg-clang, under qemu-user: for correctness, not speed). The compilers read `CPUTarget.compiler_cpu`
(a C compiler's -march, a code generator's target CPU); the heuristics (tg.codegen.heuristics) read the rest. `CPU_VECTOR_BYTES` and
`CPU_CACHES` override single fields, whatever the target.
"""
from __future__ import annotations

import functools
import os
import platform
from dataclasses import dataclass, replace

from tg.settings import CPU_CACHES, CPU_TARGET, CPU_THREADS, CPU_VECTOR_BYTES, SettingError


@dataclass(frozen=True)
class CPUTarget:
  name: str  # `native`, an x86-64 level or another architecture (CROSS): what the compilers are asked for
  arch: str  # x86_64, aarch64, ...
  isa: str  # the widest vector ISA kernels use: avx512, avx2, avx, sse, neon, none
  vector_bytes: int  # one vector register (0: no vectors)
  vector_registers: int  # architectural vector registers: 32 with AVX-512 and on aarch64, else 16
  fma: bool  # a fused multiply-add instruction
  half_hardware: bool  # half <-> float conversions are instructions (F16C; every AArch64 CPU), not library calls
  l1d_bytes: int  # per core
  l2_bytes: int  # per core
  l3_bytes: int  # shared

  @property
  def cores(self) -> int:
    """The threads a kernel is split across (CPU_THREADS, which a Context may change)."""
    return max(1, CPU_THREADS.value)

  @property
  def compiler_cpu(self) -> str | None:
    """The CPU name for the compilers (a C compiler's -march=, a code generator's target CPU), None for the host's own."""
    return None if self.name == "native" else CROSS[self.name][0] if self.name in CROSS else self.name

  @property
  def cross(self) -> bool:
    """The target is another architecture than the host's: its kernels can't run here natively."""
    return _family(self.arch) != _family(platform.machine())

  def describe(self) -> str:
    vec = f"{self.vector_registers} x {self.vector_bytes * 8}-bit registers" if self.vector_bytes else "no vectors"
    return (f"{self.name} ({self.arch}, {self.isa}: {vec}{', FMA' if self.fma else ''}; "
            f"L1d {self.l1d_bytes >> 10} KiB, L2 {self.l2_bytes >> 10} KiB, L3 {self.l3_bytes >> 20} MiB; {self.cores} threads)")


# the x86-64 microarchitecture levels: the CPU flag each needs last, its vector ISA, width and registers, and FMA
LEVELS = {"x86-64-v2": ("sse4_2", "sse", 16, 16, False), "x86-64-v3": ("avx2", "avx2", 32, 16, True),
          "x86-64-v4": ("avx512f", "avx512", 64, 32, True)}
HALF_LEVELS = ("x86-64-v3", "x86-64-v4")  # the levels that include F16C
# each level also needs the flags of the ones below it (and v3 FMA), all of which /proc/cpuinfo names
LEVEL_FLAGS = {"x86-64-v2": ("sse4_2", "popcnt"), "x86-64-v3": ("sse4_2", "popcnt", "avx2", "fma", "bmi2"),
               "x86-64-v4": ("sse4_2", "popcnt", "avx2", "fma", "bmi2", "avx512f", "avx512bw", "avx512vl", "avx512dq")}
DEFAULT_CACHES = (32 << 10, 1 << 20, 8 << 20)  # where sysfs says nothing (macOS, containers without /sys): a common size
# CPU_TARGET names of another architecture: the compilers' CPU (the ISA every CPU of it has), its vector ISA, width,
# registers, FMA, and the caches assumed when the host isn't one (sysfs describes the host): a Neoverse N1's
# (Graviton 2, Ampere Altra), a common server core. Every AArch64 CPU converts half <-> float in hardware
CROSS = {"aarch64": ("armv8-a", "neon", 16, 32, True, (64 << 10, 1 << 20, 32 << 20))}
ARCH_NAMES = {"AMD64": "x86_64", "arm64": "aarch64"}  # platform.machine()'s other spellings of an architecture


def _family(machine: str) -> str:
  return ARCH_NAMES.get(machine, machine)


def _cpu_flags() -> list[str]:
  try:
    with open("/proc/cpuinfo") as f:
      return next((line.split(":", 1)[1].split() for line in f if line.startswith(("flags", "Features"))), [])
  except OSError:
    return []


def supported_levels() -> list[str]:
  """The x86-64 levels (CPU_TARGET values besides native) this host can run kernels of."""
  flags = _cpu_flags()
  if platform.machine() not in ("x86_64", "AMD64"):
    return []
  return [level for level, needed in LEVEL_FLAGS.items() if all(f in flags for f in needed)]


def levels_unlike_native() -> list[str]:
  """The supported levels the heuristics see otherwise than the native target: another vector ISA, width or register
  count, FMA or not, half conversions in hardware or not. A level the host matches (x86-64-v3 on an AVX2 CPU with F16C)
  gets native's tiles, vectors and packing again, so a run of the kernel tests at it repeats the backend sessions'
  (`nox -s cpu_targets` runs only these)."""
  flags = _cpu_flags()
  native = (*_native(platform.machine(), flags), "f16c" in flags)
  return [level for level in supported_levels() if (*LEVELS[level][1:], level in HALF_LEVELS) != native]


def _size(text: str) -> int:
  """sysfs's and CPU_CACHES' sizes: 32K, 1024K, 32M, or bytes."""
  text = text.strip().upper().removesuffix("B")
  scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
  return int(text.rstrip("KMG")) * scale


def _sysfs_caches() -> tuple[int, int, int]:
  """(L1d, L2, L3) of cpu0 from sysfs, DEFAULT_CACHES for each it doesn't list."""
  found: dict[int, int] = {}
  base = "/sys/devices/system/cpu/cpu0/cache"
  try:
    entries = os.listdir(base)
  except OSError:
    return DEFAULT_CACHES
  for entry in entries:
    try:
      with open(f"{base}/{entry}/level") as f:
        level = int(f.read())
      with open(f"{base}/{entry}/type") as f:
        kind = f.read().strip()
      with open(f"{base}/{entry}/size") as f:
        size = _size(f.read())
    except (OSError, ValueError):
      continue
    if kind != "Instruction" and 1 <= level <= 3:
      found[level] = size
  return (found.get(1, DEFAULT_CACHES[0]), found.get(2, DEFAULT_CACHES[1]), found.get(3, DEFAULT_CACHES[2]))


def _caches(assumed: tuple[int, int, int] | None = None) -> tuple[int, int, int]:
  """CPU_CACHES, else `assumed` (a target that isn't the host), else the host's (sysfs)."""
  if not (text := CPU_CACHES.value):
    return assumed or _sysfs_caches()
  try:
    sizes = tuple(_size(x) for x in text.split(","))
  except ValueError:
    sizes = ()
  if len(sizes) != 3 or min(sizes) <= 0:
    raise SettingError(f"CPU_CACHES must be three sizes, L1d,L2,L3 (e.g. 32K,1M,32M), got {text!r}")
  return sizes  # type: ignore[return-value]


def _native(arch: str, flags: list[str]) -> tuple[str, int, int, bool]:
  """(isa, vector bytes, vector registers, fma) of the host."""
  if arch in ("x86_64", "AMD64", "i386", "i686"):
    if "avx512f" in flags:
      return "avx512", 64, 32, True
    if "avx" in flags:
      return ("avx2" if "avx2" in flags else "avx"), 32, 16, "fma" in flags
    return "sse", 16, 16, False
  if arch in ("aarch64", "arm64"):
    return "neon", 16, 32, True  # NEON (Advanced SIMD) is part of every AArch64 CPU, with 32 registers and fused FMLA
  return "none", 16, 16, False  # an unknown CPU: 16-byte vectors are what C compilers lower everywhere


@functools.cache
def cpu_target() -> CPUTarget:
  """The target CPU devices compile for now (CPU_TARGET, read when the first CPU device opens)."""
  name, arch, flags = CPU_TARGET.value or "native", platform.machine(), _cpu_flags()
  assumed: tuple[int, int, int] | None = None  # the caches of a target that isn't the host
  if name == "native":
    isa, vector_bytes, registers, fma = _native(arch, flags)
  elif name in LEVELS:
    if arch not in ("x86_64", "AMD64"):
      raise SettingError(f"CPU_TARGET={name} is an x86-64 level; this machine is {arch}: use CPU_TARGET=native")
    if missing := [f for f in LEVEL_FLAGS[name] if f not in flags]:
      raise SettingError(f"CPU_TARGET={name} needs {', '.join(missing)}, which this CPU lacks (its kernels would die of SIGILL): "
                         f"pick a lower level or native")
    _, isa, vector_bytes, registers, fma = LEVELS[name]
  elif name in CROSS:
    # no host check: a device that can't run the architecture says so itself (tg-clang runs it under qemu-user)
    _, isa, vector_bytes, registers, fma, caches = CROSS[name]
    assumed, arch = (None if _family(arch) == name else caches), name
  else:
    CPU_TARGET.check(name)  # raises: a name that is neither native nor a level
    raise AssertionError(f"CPU_TARGET {name!r} has no description")
  if (forced := CPU_VECTOR_BYTES.value) >= 0:
    vector_bytes = forced
  half = name in HALF_LEVELS if name in LEVELS else ("f16c" in flags or _family(arch) == "aarch64")
  l1d, l2, l3 = _caches(assumed)
  return CPUTarget(name, arch, isa, vector_bytes, registers, fma, half, l1d, l2, l3)


def generic_target(vector_bytes: int) -> CPUTarget:
  """A target for a renderer that declares only its vector width (the PYTHON interpreter, a third-party CPU device):
  16 registers, as on most CPUs."""
  return replace(cpu_target(), name="generic", isa="generic", vector_bytes=vector_bytes, vector_registers=16)
