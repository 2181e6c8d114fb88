"""Which Driver this process uses: the GPU (libcuda), or with CUDA_MOCK=1 the CPU mock. CUDA_ARCH=sm_XX overrides
the architecture kernels are compiled for (default: the GPU's; sm_80 in mock mode)."""
from __future__ import annotations

import functools

from tg.helpers import DEBUG
from tg.settings import Setting
from tg_cuda.driver import LIBCUDA, CUDADriver, CUDAError, Driver, device_count
from tg_cuda.mock.build import host_cxx
from tg_cuda.nvrtc import NVRTCError, load_nvrtc

CUDA_MOCK = Setting("CUDA_MOCK", 0, "1: CUDA without a GPU: kernels still go through NVRTC and ptxas, then run on the CPU "
                    "(see packages/tg-cuda/README.md)")
CUDA_ARCH = Setting("CUDA_ARCH", "", "the architecture CUDA kernels are compiled for, e.g. `sm_89` (unset: the GPU's; sm_80 in mock mode)",
                    read_once="when the CUDA device opens")
MOCK_HINT = "set CUDA_MOCK=1 to run CUDA kernels on the CPU (mock mode)"
MOCK_GPUS = 8  # how many GPUs mock mode pretends to have (CUDA:0 .. CUDA:7), each with its own memory


def is_mock() -> bool:
  return bool(CUDA_MOCK.value)


def unavailable_reason(ordinal: int = 0) -> str:
  """"" when GPU `ordinal` (CUDA:n) is usable here, otherwise a sentence saying what is missing and what to do."""
  try:
    load_nvrtc()
  except NVRTCError as e:
    return str(e)
  if is_mock():
    if host_cxx() is None:
      return "CUDA_MOCK=1 builds kernels for the CPU with a C++ compiler: install g++ (or set TG_GPU_MOCK_CXX)"
    count = MOCK_GPUS
  else:
    try:
      count = device_count()
    except OSError:
      return f"{LIBCUDA} not found (no NVIDIA driver); {MOCK_HINT}"
    except CUDAError as e:
      return f"the NVIDIA driver has no usable GPU ({e}); {MOCK_HINT}"
  if ordinal >= count:
    return f"CUDA:{ordinal} is GPU number {ordinal}, but there {'is 1 GPU' if count == 1 else f'are {count} GPUs'} here (CUDA:0 to CUDA:{count - 1})"
  return ""


@functools.cache
def get_driver(ordinal: int = 0) -> Driver:
  """The driver of GPU `ordinal` (device CUDA:ordinal), made once: every part of that device instance shares it."""
  arch = CUDA_ARCH.value or None
  if is_mock():
    from tg_cuda.mock.driver import MockDriver
    driver: Driver = MockDriver(arch, ordinal)
  else:
    driver = CUDADriver(arch, ordinal)
  if DEBUG >= 1:
    print(f"CUDA: {driver.name}")
  return driver
