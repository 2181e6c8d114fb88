"""Which Driver this process uses: the GPU (libcuda), or with CUDA_MOCK=1 the CPU mock. CUDA_ARCH=sm_XX overrides
the architecture kernels are compiled for (default: the GPU's; sm_80 in mock mode)."""
from __future__ import annotations

import functools

from tg.helpers import DEBUG
from tg.settings import Setting
from tg_cuda.driver import LIBCUDA, CUDADriver, CUDAError, Driver, load_libcuda
from tg_cuda.mock.build import host_cxx
from tg_cuda.nvrtc import NVRTCError, load_nvrtc

CUDA_MOCK = Setting("CUDA_MOCK", 0, "1: CUDA without a GPU: kernels still go through NVRTC and ptxas, then run on the CPU "
                    "(see packages/tg-cuda/README.md)")
CUDA_ARCH = Setting("CUDA_ARCH", "", "the architecture CUDA kernels are compiled for, e.g. `sm_89` (unset: the GPU's; sm_80 in mock mode)",
                    read_once="when the CUDA device opens")
MOCK_HINT = "set CUDA_MOCK=1 to run CUDA kernels on the CPU (mock mode)"


def is_mock() -> bool:
  return bool(CUDA_MOCK.value)


def unavailable_reason() -> str:
  """"" when CUDA is usable here, otherwise a sentence saying what is missing and what to do."""
  try:
    load_nvrtc()
  except NVRTCError as e:
    return str(e)
  if is_mock():
    return "" if host_cxx() is not None else "CUDA_MOCK=1 builds kernels for the CPU with a C++ compiler: install g++ (or set TG_CUDA_MOCK_CXX)"
  try:
    load_libcuda()
  except OSError:
    return f"{LIBCUDA} not found (no NVIDIA driver); {MOCK_HINT}"
  except CUDAError as e:
    return f"the NVIDIA driver has no usable GPU ({e}); {MOCK_HINT}"
  return ""


@functools.cache
def get_driver() -> Driver:
  arch = CUDA_ARCH.value or None
  if is_mock():
    from tg_cuda.mock.driver import MockDriver
    driver: Driver = MockDriver(arch)
  else:
    driver = CUDADriver(arch)
  if DEBUG >= 1:
    print(f"CUDA: {driver.name}")
  return driver
