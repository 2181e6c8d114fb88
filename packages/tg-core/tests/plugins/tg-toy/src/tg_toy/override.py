"""An override of another package's device (entry point group tg.overrides, key PYTHON): with TG_TOY_OVERRIDE=1 it
wraps the PYTHON device's compiler so every compile is counted, the way a package would swap in a faster compiler.
Without the variable it changes nothing (tg-toy is installed in every test session)."""
from __future__ import annotations

import dataclasses
import os

from tg.device import Compiler
from tg.plugins import DeviceSpec, hookimpl

TG_PLUGIN_API_VERSION = 2
compiled: list[str] = []  # the device of each compile that went through the override


class CountingCompiler(Compiler):
  def __init__(self, inner: Compiler, device: str) -> None:
    super().__init__(None)
    self.inner, self.device = inner, device

  def compile(self, src: str) -> bytes:
    compiled.append(self.device)
    return self.inner.compile(src)


@hookimpl
def tg_device_override(device: str, spec: DeviceSpec) -> DeviceSpec | None:
  if os.environ.get("TG_TOY_OVERRIDE") != "1" or spec.compiler is None:
    return None
  inner = spec.compiler
  return dataclasses.replace(spec, compiler=lambda: CountingCompiler(inner(), device))
