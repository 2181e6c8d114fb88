"""Which Driver this process uses: the Mac's GPU (Metal.framework), or with METAL_MOCK=1 the CPU mock.

A Mac has one Metal GPU (MTLCreateSystemDefaultDevice). METAL:1, METAL:2, ... are further instances of it, as CLANG:1 is
of the CPU: each has its own command queue and its own buffers, so tg's copies between instances and the tests of
multi-device code run; they share the GPU's time and memory."""
from __future__ import annotations

import functools

from tg.helpers import DEBUG
from tg.settings import Setting
from tg_metal.objc import is_macos
from tg_metal.runtime import Driver, MetalError

METAL_MOCK = Setting("METAL_MOCK", 0, "1: METAL without a Mac: every kernel's MSL is checked by clang++ and run on the CPU "
                     "(see packages/tg-metal/README.md)")
MOCK_HINT = "set METAL_MOCK=1 to check METAL kernels with clang++ and run them on the CPU (mock mode)"


def is_mock() -> bool:
  return bool(METAL_MOCK.value)


def unavailable_reason() -> str:
  """"" when METAL is usable here, otherwise a sentence saying what is missing and what to do."""
  if is_mock():
    from tg.runtime.gpu_mock import host_cxx
    from tg_metal.mock.check import check_cxx
    if check_cxx() is None:
      return "METAL_MOCK=1 checks every kernel's MSL with clang++: install clang (apt-get install clang), or set TG_METAL_CHECK_CXX"
    if host_cxx() is None:
      return "METAL_MOCK=1 builds kernels for the CPU with a C++ compiler: install g++ (or set TG_GPU_MOCK_CXX)"
    return ""
  if not is_macos():
    return f"METAL needs macOS (Metal.framework on an Apple GPU or a Mac's AMD/Intel GPU); {MOCK_HINT}"
  try:
    from tg_metal.runtime import system_device
    system_device()  # the GPU only: no command queue is made just to ask
  except (OSError, MetalError) as e:
    return f"no usable Metal GPU ({e})"
  return ""


@functools.cache
def get_driver(ordinal: int = 0) -> Driver:
  """The driver of instance METAL:ordinal, made once: every part of that instance shares it."""
  if is_mock():
    from tg_metal.mock.driver import MockDriver
    driver: Driver = MockDriver()
  else:
    from tg_metal.runtime import MetalDriver
    driver = MetalDriver()
  if DEBUG >= 1:
    print(f"METAL: {driver.name}")
  return driver
