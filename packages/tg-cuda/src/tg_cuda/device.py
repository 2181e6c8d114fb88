"""Which Driver this process uses: the GPU (libcuda), or with CUDA_MOCK=1 the CPU mock. CUDA_ARCH=sm_XX overrides
the architecture kernels are compiled for (default: the GPU's; sm_80 in mock mode)."""
from __future__ import annotations

import functools
import os

from tg.helpers import DEBUG
from tg_cuda.driver import LIBCUDA, CUDADriver, CUDAError, Driver, load_libcuda
from tg_cuda.mock.build import host_cxx
from tg_cuda.nvrtc import NVRTCError, load_nvrtc

MOCK_HINT = "set CUDA_MOCK=1 to run CUDA kernels on the CPU (mock mode)"


def is_mock() -> bool:
  return os.getenv("CUDA_MOCK", "0") not in ("", "0")


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
  arch = os.getenv("CUDA_ARCH") or None
  if is_mock():
    from tg_cuda.mock.driver import MockDriver
    driver: Driver = MockDriver(arch)
  else:
    driver = CUDADriver(arch)
  if DEBUG >= 1:
    print(f"CUDA: {driver.name}")
  return driver
