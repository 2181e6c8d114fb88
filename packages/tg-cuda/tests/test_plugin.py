"""tg-cuda as a plugin: it registers, says why it can't run (and how to run anyway), and the mock is opt-in."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tg.plugins import installed_devices
from tg_cuda.driver import load_libcuda
from tg_cuda.nvrtc import nvrtc_version


def _libcuda_loads() -> bool:
  try:
    load_libcuda()
    return True
  except Exception:
    return False


def _run(code: str, **env: str) -> str:
  full = {k: v for k, v in os.environ.items() if k not in ("CUDA_MOCK", "DEVICE")}
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**full, **env}, check=True)
  return out.stdout.strip()


def test_cuda_registers_through_its_entry_point() -> None:
  devs = {d.name: d for d in installed_devices()}
  assert devs["CUDA"].package == "tg-cuda" and devs["CUDA"].module == "tg_cuda.plugin"


def test_nvrtc_comes_from_the_wheel() -> None:
  assert nvrtc_version() == (12, 9)


def test_without_a_driver_the_reason_says_how_to_mock() -> None:
  why = _run("from tg import Device; print(Device.availability('CUDA'))", CUDA_MOCK="0")
  if _libcuda_loads():
    assert why == ""
  else:
    assert why.startswith("libcuda.so.1 not found (no NVIDIA driver)") and "CUDA_MOCK=1" in why


def test_mock_is_usable_but_never_the_default() -> None:
  code = "from tg import Device; from tg.plugins import device_spec; print(repr(Device.availability('CUDA')), device_spec('CUDA').priority)"
  assert _run(code, CUDA_MOCK="1") == "'' -10"


def test_python_m_tg_cuda_says_mock() -> None:
  assert "mock" in _run("import runpy; runpy.run_module('tg_cuda', run_name='__main__')", CUDA_MOCK="1")


def test_mock_without_a_cxx_compiler_is_explained() -> None:
  why = _run("from tg import Device; print(Device.availability('CUDA'))", CUDA_MOCK="1", TG_GPU_MOCK_CXX="/nonexistent/g++")
  assert "C++ compiler" in why


def test_bad_arch_is_refused() -> None:
  from tg_cuda.compiler import CUDACompiler
  with pytest.raises(ValueError, match="sm_XX"):
    CUDACompiler("80")


def test_cache_key_names_nvrtc_and_arch() -> None:
  from tg_cuda.compiler import CUDACompiler
  key = CUDACompiler("sm_86").cachekey
  assert key is not None and "nvrtc12.9" in key and "sm_86" in key
  assert CUDACompiler("sm_86", mock=True).cachekey != key, "a mock binary carries a CPU build: never shared with GPU ones"


def test_mock_runs_without_ptxas_and_says_so() -> None:
  out = _run("from tg import Tensor; print((Tensor([1, 2, 3], device='CUDA') * 2).tolist())",
             CUDA_MOCK="1", TG_PTXAS="/nonexistent/ptxas", DEBUG="1", CACHELEVEL="0")
  assert "no ptxas on PATH" in out and out.endswith("[2, 4, 6]")


def test_tg_devices_says_when_cuda_runs_in_mock_mode() -> None:
  line = next(ln for ln in _run("from tg.devices import report; print(report())", CUDA_MOCK="1").splitlines() if ln.startswith("CUDA"))
  assert "usable" in line and "mock mode" in line
  if not _libcuda_loads():
    line = next(ln for ln in _run("from tg.devices import report; print(report())").splitlines() if ln.startswith("CUDA"))
    assert "not usable" in line and "CUDA_MOCK=1" in line


def test_each_instance_is_its_own_gpu() -> None:
  """CUDA:1 opens GPU 1 (in mock mode: a second mock GPU with its own memory), not GPU 0 again."""
  code = ("from tg import Tensor, Device; a = Tensor([1.0, 2.0], device='CUDA'); b = Tensor([3.0, 4.0], device='CUDA:1')\n"
          "print((a * 2).tolist(), (b * 2).tolist(), (b.to('CUDA') + a).tolist())\n"
          "d0, d1 = Device['CUDA'].allocator.driver, Device['CUDA:1'].allocator.driver\n"
          "print(d0 is not d1, d0.ordinal, d1.ordinal, b.lazydata.base.realized._buf in d1.memory, b.lazydata.base.realized._buf in d0.memory)")
  assert _run(code, CUDA_MOCK="1").splitlines() == ["[2.0, 4.0] [6.0, 8.0] [4.0, 6.0]", "True 0 1 True False"]


def test_missing_gpu_ordinal_is_explained() -> None:
  why = _run("from tg import Device; print(Device.availability('CUDA:9'))", CUDA_MOCK="1")
  assert why == "CUDA:9 is GPU number 9, but there are 8 GPUs here (CUDA:0 to CUDA:7)"
