"""CLANG's cross mode (CPU_TARGET=aarch64 on a host that isn't aarch64): what it needs from the system, and the
harness program its kernels run in (harness.c, built once with the cross toolchain and cached on disk).

Kernels are built by the system's clang for aarch64-linux-gnu against Debian's cross libc, and run under qemu-user,
which emulates an aarch64 process on any host: correct numbers, not speed (bench/README.md)."""
from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from importlib import resources

from tg.diskcache import diskcache_get, diskcache_put
from tg.settings import Setting
from tg_clang.compiler import CLANG, clang_version, cross_flags

TG_QEMU_AARCH64 = Setting("TG_QEMU_AARCH64", "qemu-aarch64", "the qemu-user binary CLANG runs aarch64 kernels under when CPU_TARGET=aarch64 "
                          "and the host is another architecture (a name on PATH or a path)", read_once="when the CLANG device loads")
TG_QEMU_TIMEOUT = Setting("TG_QEMU_TIMEOUT", 600, "seconds CLANG waits for one aarch64 kernel under qemu-aarch64 before it kills the harness "
                          "and raises (CPU_TARGET=aarch64 on another host)")
QEMU: str = TG_QEMU_AARCH64.value
SYSROOT = "/usr/aarch64-linux-gnu"  # Debian's cross libc: where qemu finds the dynamic loader and libc (-L)
# what to install on Debian (bookworm): qemu-user, the cross libc (runtime and crt files), libgcc's crt files, the linker
PACKAGES = "qemu-user libc6-dev-arm64-cross libgcc-12-dev-arm64-cross binutils-aarch64-linux-gnu"
INSTALL = f"`apt-get install {PACKAGES}`"


def harness_source() -> str:
  return resources.files("tg_clang").joinpath("harness.c").read_text()


class CrossToolchainError(RuntimeError):
  pass


def harness_binary() -> bytes:
  """The harness as an aarch64 executable: built by clang once per source, clang and flags, then read from the disk cache."""
  src, flags = harness_source(), [*cross_flags("aarch64"), "-O2"]
  key = hashlib.sha256("\0".join([src, clang_version() or "", *flags]).encode()).hexdigest()
  if isinstance(exe := diskcache_get("clang_aarch64_harness", key), bytes):
    return exe
  with tempfile.TemporaryDirectory(prefix="tg_clang_harness_") as d:
    out = os.path.join(d, "harness")
    try:
      proc = subprocess.run([CLANG, *flags, "-x", "c", "-", "-o", out, "-ldl"], input=src, capture_output=True, text=True,
                            check=False, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
      raise CrossToolchainError(f"clang could not build the aarch64 harness: {e}") from e
    if proc.returncode != 0:
      raise CrossToolchainError(f"clang could not build the aarch64 harness (is the cross libc installed? {INSTALL}):\n{proc.stderr[-2000:]}")
    with open(out, "rb") as f:
      exe = f.read()
  return diskcache_put("clang_aarch64_harness", key, exe)  # type: ignore[no-any-return]


@functools.cache
def unavailable_reason() -> str:
  """"" when aarch64 kernels can be built and run here, else what is missing and the Debian packages that bring it."""
  if shutil.which(QEMU) is None:
    where = f"TG_QEMU_AARCH64={QEMU} was not found" if QEMU != "qemu-aarch64" else "`qemu-aarch64` was not found on PATH"
    return f"CPU_TARGET=aarch64 runs CLANG's kernels under qemu-user on this host, and {where}: {INSTALL}"
  for path, what in ((f"{SYSROOT}/lib/ld-linux-aarch64.so.1", "aarch64 C library"), (f"{SYSROOT}/lib/crt1.o", "aarch64 C library's crt files")):
    if not os.path.exists(path):
      return f"CPU_TARGET=aarch64 builds CLANG's kernels against Debian's {what} ({path} is missing): {INSTALL}"
  try:
    harness_binary()
  except CrossToolchainError as e:
    return f"CPU_TARGET=aarch64: {e}"
  return ""
