"""Shared by tg-amd's tests: kernels of fixed ASTs rendered for AMD, and running compiled kernels on a MockDriver."""
from __future__ import annotations

import numpy as np

from tg import Tensor
from tg.codegen.kernel import Kernel, Opt
from tg.engine.schedule import create_schedule
from tg.renderer import Program
from tg_amd.compiler import AMDCompiler
from tg_amd.mock.driver import MockDriver
from tg_amd.program import AMDProgram
from tg_amd.renderer import AMDRenderer

# the ASTs are built on PYTHON: an AST doesn't depend on the device, and these tests need no GPU and no AMD_MOCK
DEV = "PYTHON"


def program(t: Tensor, opts: tuple[Opt, ...] = (), arch: str = "gfx1100") -> Program:
  si = create_schedule([t.lazydata])[-1]
  return Kernel(si.ast, AMDRenderer(arch)).apply_opts(list(opts)).to_program()


def upload(driver: MockDriver, a: np.ndarray) -> int:
  ptr = driver.alloc(a.nbytes)
  driver.copyin(ptr, memoryview(np.ascontiguousarray(a)).cast("B"))
  return ptr


def download(driver: MockDriver, ptr: int, like: np.ndarray) -> np.ndarray:
  out = np.empty_like(like)
  driver.copyout(memoryview(out).cast("B"), ptr)
  return out


def load(driver: MockDriver, src: str, name: str, arch: str = "gfx1100") -> AMDProgram:
  return AMDProgram(driver, name, AMDCompiler(arch, mock=True).compile_cached(src))
