"""AMDCompiler: HIP C++ -> a packed AMDBinary (see bundle.py).

clang and ld.lld (toolchain.py) make the code object for the gfx target. With AMD_MOCK=1 every kernel still goes
through clang's AMDGPU backend (its object, checked for undefined symbols, is the binary's code object; nothing loads
it, so it isn't linked) and the same source is also built for the CPU, in parallel, as the shared object the mock
driver runs.
"""
from __future__ import annotations

import hashlib
import os
import re

from tg.device import Compiler
from tg.helpers import DEBUG
from tg_amd import __version__
from tg_amd.bundle import AMDBinary
from tg_amd.mock.build import mock_build, mock_key
from tg_amd.toolchain import CLANG_FLAGS, INCLUDE_DIR, assembly, compile_hip, find_clang, toolchain_version

_ARCH = re.compile(r"gfx[0-9a-f]{3,4}")


def _headers() -> str:
  out = []
  for name in sorted(os.listdir(INCLUDE_DIR)):
    with open(os.path.join(INCLUDE_DIR, name)) as f:
      out.append(f.read())
  return "".join(out)


class AMDCompiler(Compiler):
  def __init__(self, arch: str, mock: bool = False) -> None:
    if not _ARCH.fullmatch(arch):
      raise ValueError(f"an AMD arch is a gfx target (e.g. gfx1100 for RX 7900, gfx90a for MI210, gfx942 for MI300), not {arch!r}")
    self.arch, self.mock = arch, mock
    files = _headers() + " ".join(CLANG_FLAGS) + toolchain_version()
    parts = [arch, f"llvm{find_clang()[1]}", __version__]
    if mock:
      files += mock_key()
      parts.append("mock")
    # the key names every tool (their exact versions hashed), flag and header a binary depends on: a change to any of
    # them never reuses a stale one
    super().__init__(f"compile_amd_{'_'.join(parts)}_{hashlib.sha256(files.encode()).hexdigest()[:12]}")

  def compile(self, src: str) -> bytes:
    build = mock_build(src) if self.mock else None
    try:
      code_object = compile_hip(src, self.arch, link=not self.mock)
      if DEBUG >= 5:
        print(assembly(src, self.arch))
    except BaseException:
      if build is not None:
        build.cancel()
      raise
    return AMDBinary(self.arch, code_object, build.result() if build is not None else b"").pack()
