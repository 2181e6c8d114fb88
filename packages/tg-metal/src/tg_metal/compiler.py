"""MetalCompiler: MSL -> a packed MetalBinary (runtime.py).

On a Mac the binary is the MSL itself, compiled when the kernel loads (newLibraryWithSource; the compiler already
compiles it once so a bad kernel fails here, and the loader reuses that library), or a metallib when `xcrun -sdk
macosx metal` is installed (full Xcode). With METAL_MOCK=1 the MSL goes through the syntax and type check
(mock/check.py) and the CPU build (mock/build.py) at the same time, two processes; the binary carries the build.
"""
from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import tempfile

from tg.device import Compiler
from tg.helpers import DEBUG
from tg_metal import __version__
from tg_metal.mock.check import CHECK_FLAGS, CHECK_INCLUDE, MetalCheck, MetalCheckError
from tg_metal.runtime import MetalBinary, MetalCompileError, MetalDriver

XCRUN_METAL = ["xcrun", "-sdk", "macosx", "metal"]
XCRUN_METALLIB = ["xcrun", "-sdk", "macosx", "metallib"]
XCRUN_FLAGS = ["-fno-fast-math"]  # as newLibraryWithSource with fastMathEnabled = NO


@functools.cache
def xcrun_metal_version() -> str | None:
  """The offline Metal compiler's version line, or None when there is none (no Xcode, or not a Mac)."""
  try:
    out = subprocess.run([*XCRUN_METAL, "--version"], capture_output=True, text=True, timeout=60, check=False)
  except (OSError, subprocess.TimeoutExpired):
    return None
  return out.stdout.splitlines()[0] if out.returncode == 0 and out.stdout else None


def metallib(src: str) -> bytes:
  """`src` compiled to a metallib: xcrun metal to an AIR object, xcrun metallib to the library (Apple's two steps)."""
  with tempfile.TemporaryDirectory(prefix="tg_metal_") as d:
    path, air, out = os.path.join(d, "kernel.metal"), os.path.join(d, "kernel.air"), os.path.join(d, "kernel.metallib")
    with open(path, "w") as f:
      f.write(src)
    for cmd in ([*XCRUN_METAL, *XCRUN_FLAGS, "-c", path, "-o", air], [*XCRUN_METALLIB, air, "-o", out]):
      proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
      if proc.returncode != 0:
        raise MetalCompileError(f"{' '.join(cmd[:4])} can't compile the kernel:\n{proc.stderr}\n--- source ---\n{src}")
    with open(out, "rb") as f:
      return f.read()


def _headers_hash() -> str:
  text = " ".join(CHECK_FLAGS)
  for d in (CHECK_INCLUDE,):
    for name in sorted(os.listdir(d)):
      with open(os.path.join(d, name)) as f:
        text += f.read()
  return hashlib.sha256(text.encode()).hexdigest()[:12]


class MetalCompiler(Compiler):
  def __init__(self, mock: bool = False, driver: MetalDriver | None = None) -> None:
    """`driver`: the GPU's (not mock), which compiles the MSL when xcrun metal isn't there."""
    self.mock, self.driver = mock, driver
    self.xcrun: str | None = None
    key: str | None = None
    if mock:
      from tg_metal.mock.build import cpu_build_key
      key = f"compile_metal_mock_{__version__}_{_headers_hash()}_{cpu_build_key()}"
    else:
      self.xcrun = xcrun_metal_version()
      # MSL is compiled when it loads: only a metallib is worth caching on disk
      key = f"compile_metal_{__version__}_{hashlib.sha256(self.xcrun.encode()).hexdigest()[:12]}" if self.xcrun else None
      if DEBUG >= 1 and self.xcrun is None:
        print("tg-metal: no xcrun metal (Xcode): kernels are compiled from MSL by newLibraryWithSource when they load")
    super().__init__(key)

  def compile(self, src: str) -> bytes:
    if self.mock:
      return self._compile_mock(src)
    if self.xcrun is not None:
      return MetalBinary(src, metallib(src)).pack()
    if self.driver is not None:
      self.driver.compile_msl(src)  # errors show here, at compile time; the loader finds the library compiled
    return MetalBinary(src).pack()

  def _compile_mock(self, src: str) -> bytes:
    from tg_metal.mock.build import cpu_build
    check = MetalCheck(src)
    try:
      build = cpu_build(src)
    except BaseException:
      check.cancel()
      raise
    try:
      check.result()
    except MetalCheckError:
      build.cancel()
      raise
    if DEBUG >= 4:
      print("METAL_MOCK: the MSL above passed clang++ -fsyntax-only against tg_metal/mock/check/metal_stdlib")
    return MetalBinary(src, b"", build.result()).pack()
