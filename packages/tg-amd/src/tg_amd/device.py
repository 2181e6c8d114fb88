"""Which Driver this process uses: the GPU (ROCm's HIP runtime), or with AMD_MOCK=1 the CPU mock. AMD_ARCH=gfxNNNN
overrides the target kernels are compiled for (default: the GPU's; gfx1100 in mock mode)."""
from __future__ import annotations

import functools

from tg.helpers import DEBUG
from tg.runtime.gpu_mock import host_cxx
from tg.settings import Setting
from tg_amd.driver import LIBHIP, Driver, HIPDriver, HIPError, device_count
from tg_amd.toolchain import ToolMissing, find_clang, find_lld

AMD_MOCK = Setting("AMD_MOCK", 0, "1: AMD without a GPU: kernels still go through clang and lld to code objects, then run on the CPU "
                   "(see packages/tg-amd/README.md)")
AMD_ARCH = Setting("AMD_ARCH", "", "the gfx target AMD kernels are compiled for, e.g. `gfx1100` (unset: the GPU's; gfx1100 in mock mode)",
                   read_once="when the AMD device opens")
MOCK_HINT = "set AMD_MOCK=1 to run AMD kernels on the CPU (mock mode)"
MOCK_GPUS = 8  # how many GPUs mock mode pretends to have (AMD:0 .. AMD:7), each with its own memory
MOCK_ARCH = "gfx1100"


def is_mock() -> bool:
  return bool(AMD_MOCK.value)


def unavailable_reason(ordinal: int = 0) -> str:
  """"" when GPU `ordinal` (AMD:n) is usable here, otherwise a sentence saying what is missing and what to do."""
  try:
    find_clang()
    find_lld()
  except ToolMissing as e:
    return str(e)
  if is_mock():
    if host_cxx() is None:
      return "AMD_MOCK=1 builds kernels for the CPU with a C++ compiler: install g++ (or set TG_GPU_MOCK_CXX)"
    count = MOCK_GPUS
  else:
    try:
      count = device_count()
    except OSError:
      return f"{LIBHIP} not found (no ROCm HIP runtime: install ROCm, e.g. the hip-runtime-amd package); {MOCK_HINT}"
    except HIPError as e:
      return f"the HIP runtime has no usable GPU ({e}); {MOCK_HINT}"
  if ordinal >= count:
    return f"AMD:{ordinal} is GPU number {ordinal}, but there {'is 1 GPU' if count == 1 else f'are {count} GPUs'} here (AMD:0 to AMD:{count - 1})"
  return ""


@functools.cache
def get_driver(ordinal: int = 0) -> Driver:
  """The driver of GPU `ordinal` (device AMD:ordinal), made once: every part of that device instance shares it."""
  arch = AMD_ARCH.value or None
  if is_mock():
    from tg_amd.mock.driver import MockDriver
    driver: Driver = MockDriver(arch or MOCK_ARCH, ordinal)
  else:
    driver = HIPDriver(arch, ordinal)
  if DEBUG >= 1:
    print(f"AMD: {driver.name}")
  return driver
