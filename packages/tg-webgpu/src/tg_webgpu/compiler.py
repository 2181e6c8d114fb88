"""WGSLCompiler: WGSL source -> the same text as bytes, once wgpu has parsed and validated it.

wgpu compiles a shader for the hardware only when a pipeline is made (runtime.py), so there is no binary
to cache on disk; what this step adds is that a kernel wgpu rejects fails here, with its source shown.
"""
from __future__ import annotations

import functools
from typing import Any

from tg.device import Compiler
from tg.interrupts import hold_sigint
from tg_webgpu import gpu


class WGSLCompileError(RuntimeError):
  pass


@functools.lru_cache(maxsize=4096)
def shader_module(src: str) -> Any:
  """The device's shader module for `src` (parsed once: compile and load share it)."""
  try:
    # whole or not at all: a Ctrl-C inside wgpu's constructor left a half-made module whose __del__ then raised
    # ("Exception ignored ... no attribute '_internal'": reliability/test_interrupts.py on a loop compiling kernels)
    with hold_sigint():
      return gpu.device().create_shader_module(label="tg", code=src)
  except Exception as e:
    raise WGSLCompileError(f"wgpu rejected a WGSL kernel:\n{e}\n--- source ---\n{src}") from None


class WGSLCompiler(Compiler):
  def __init__(self) -> None:
    super().__init__(None)  # nothing worth caching: the output is the input

  def compile(self, src: str) -> bytes:
    shader_module(src)
    return src.encode()
