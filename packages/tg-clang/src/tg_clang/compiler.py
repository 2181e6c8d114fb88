"""ClangCompiler: C source -> shared object bytes, by running the system's clang."""
from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import tempfile

from tg.device import Compiler
from tg.settings import Setting

TG_CLANG = Setting("TG_CLANG", "clang", "the clang binary CLANG compiles with (a name on PATH or a path)", read_once="when the CLANG device loads")
CLANG: str = TG_CLANG.value


def clang_version() -> str | None:
  """clang's version line, or None when clang is missing."""
  if shutil.which(CLANG) is None:
    return None
  out = subprocess.run([CLANG, "--version"], capture_output=True, text=True, check=False)
  return out.stdout.splitlines()[0] if out.returncode == 0 and out.stdout else None


class ClangCompileError(RuntimeError):
  pass


class ClangCompiler(Compiler):
  def __init__(self) -> None:
    version = clang_version() or "unknown"
    # the cache key names the toolchain and the machine, so a new clang or CPU never reuses stale objects
    super().__init__(f"compile_clang_{version}_{platform.machine()}_{hashlib.sha256(' '.join(self.flags()).encode()).hexdigest()[:8]}")

  def flags(self) -> list[str]:
    arch = ["-march=native"] if platform.machine() in ("x86_64", "AMD64") else ["-mcpu=native"]
    return ["-shared", "-fPIC", "-O2", "-ffp-contract=on", "-fno-math-errno", *arch, "-x", "c"]

  def compile(self, src: str) -> bytes:
    with tempfile.TemporaryDirectory(prefix="tg_clang_") as d:
      out = os.path.join(d, "kernel.so")
      proc = subprocess.run([CLANG, *self.flags(), "-", "-lm", "-o", out], input=src, capture_output=True, text=True, check=False)
      if proc.returncode != 0:
        raise ClangCompileError(f"clang failed to compile a kernel:\n{proc.stderr}\n--- source ---\n{src}")
      with open(out, "rb") as f:
        return f.read()
