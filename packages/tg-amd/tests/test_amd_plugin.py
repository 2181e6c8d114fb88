"""tg-amd as a plugin: it registers, says why it can't run (and what to install, or how to run anyway), the mock is
opt-in and pretends 8 GPUs, and a TinyJit replay goes through a (mock) HIP graph."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from tg.plugins import installed_devices
from tg_amd.driver import load_libhip
from tg_amd.mock.driver import MockDriver


def _libhip_loads() -> bool:
  try:
    load_libhip()
    return True
  except Exception:
    return False


def _run(code: str, **env: str) -> str:
  # CACHELEVEL=0: the children leave the compile cache alone
  full = {k: v for k, v in os.environ.items() if k not in ("AMD_MOCK", "DEVICE", "AMD_ARCH")}
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**full, "CACHELEVEL": "0", **env}, check=True)
  return out.stdout.strip()


def test_amd_registers_through_its_entry_point() -> None:
  devs = {d.name: d for d in installed_devices()}
  assert devs["AMD"].package == "tg-amd" and devs["AMD"].module == "tg_amd.plugin"


def test_tg_devices_says_why_amd_is_not_usable_and_what_to_install() -> None:
  out = subprocess.run([sys.executable, "-m", "tg.devices"], capture_output=True, text=True, check=False,
                       env={k: v for k, v in os.environ.items() if k not in ("AMD_MOCK", "DEVICE")})
  line = next(ln for ln in out.stdout.splitlines() if ln.startswith("AMD"))
  if _libhip_loads():
    assert "not usable" not in line
  else:
    assert "not usable" in line and "libamdhip64.so not found" in line and "ROCm" in line and "AMD_MOCK=1" in line


def test_mock_is_usable_but_never_the_default() -> None:
  code = "from tg import Device; from tg.plugins import device_spec; print(repr(Device.availability('AMD')), device_spec('AMD').priority)"
  assert _run(code, AMD_MOCK="1") == "'' -10"
  line = next(ln for ln in _run("from tg.devices import report; print(report())", AMD_MOCK="1").splitlines() if ln.startswith("AMD"))
  assert "usable" in line and "mock mode" in line


def test_python_m_tg_amd_says_mock_and_target() -> None:
  out = _run("import runpy; runpy.run_module('tg_amd', run_name='__main__')", AMD_MOCK="1", AMD_ARCH="gfx1151")
  assert "mock" in out and "arch:    gfx1151" in out and "clang" in out


def test_missing_clang_is_explained() -> None:
  why = _run("from tg import Device; print(Device.availability('AMD'))", AMD_MOCK="1", TG_AMD_CLANG="/nonexistent/clang")
  assert "apt-get install clang-16 lld-16" in why


def test_debug_4_shows_the_kernel_and_the_code_object_is_for_amd_arch() -> None:
  code = ("from tg import Tensor, Device\n"
          "import struct; from tg_amd.bundle import AMDBinary\n"
          "print((Tensor([1.0, 2.0, 3.0], device='AMD') * 2).tolist())\n"
          "src = 'extern \"C\" __attribute__((global)) void __attribute__((amdgpu_flat_work_group_size(1, 1))) k(float* a) { a[0] = 1.0f; }'\n"
          "co = AMDBinary.unpack(Device['AMD'].compiler.compile(src)).code_object\n"
          "print(Device['AMD'].renderer.arch, struct.unpack_from('<H', co, 18)[0], hex(struct.unpack_from('<I', co, 48)[0] & 0xff))")
  out = _run(code, AMD_MOCK="1", DEBUG="4", AMD_ARCH="gfx1030")
  assert "__attribute__((global))" in out and "__builtin_amdgcn_workgroup_id_x()" in out
  assert out.splitlines()[-2:] == ["[2.0, 4.0, 6.0]", "gfx1030 224 0x36"], "EM_AMDGPU, EF_AMDGPU_MACH_AMDGCN_GFX1030"


def test_each_instance_is_its_own_gpu() -> None:
  """AMD:1 opens GPU 1 (in mock mode: a second mock GPU with its own memory), not GPU 0 again."""
  code = ("from tg import Tensor, Device; a = Tensor([1.0, 2.0], device='AMD'); b = Tensor([3.0, 4.0], device='AMD:1')\n"
          "print((a * 2).tolist(), (b * 2).tolist(), (b.to('AMD') + a).tolist())\n"
          "d0, d1 = Device['AMD'].allocator.driver, Device['AMD:1'].allocator.driver\n"
          "print(d0 is not d1, d0.ordinal, d1.ordinal, b.lazydata.base.realized._buf in d1.memory, b.lazydata.base.realized._buf in d0.memory)")
  assert _run(code, AMD_MOCK="1").splitlines() == ["[2.0, 4.0] [6.0, 8.0] [4.0, 6.0]", "True 0 1 True False"]


def test_missing_gpu_ordinal_is_explained() -> None:
  why = _run("from tg import Device; print(Device.availability('AMD:9'))", AMD_MOCK="1")
  assert why == "AMD:9 is GPU number 9, but there are 8 GPUs here (AMD:0 to AMD:7)"


@pytest.fixture
def mock_amd(monkeypatch: pytest.MonkeyPatch) -> str:
  """The AMD device in mock mode, whatever this process's environment says."""
  from tg import Device
  from tg_amd import device
  monkeypatch.setattr(device.AMD_MOCK, "value", 1)
  if not isinstance(device.get_driver(), MockDriver):
    pytest.skip("AMD is already open on a GPU in this process")
  Device["AMD"]
  return "AMD"


def test_jit_replays_through_a_hip_graph(mock_amd: str) -> None:
  from tg import Tensor, TinyJit
  from tg_amd.graph import AMDGraph
  rng = np.random.default_rng(0)
  w = Tensor(rng.standard_normal((8, 4)).astype(np.float32), device=mock_amd).realize()

  @TinyJit
  def f(x: Tensor) -> Tensor:
    return ((x @ w).realize().relu() + 1).realize()  # two kernels: a lone one is not graphed
  for _ in range(4):
    x = rng.standard_normal((3, 8)).astype(np.float32)
    np.testing.assert_allclose(f(Tensor(x, device=mock_amd)).numpy(), np.maximum(x @ w.numpy(), 0) + 1, rtol=1e-5, atol=1e-5)
  assert isinstance(f.graph, AMDGraph)


def test_jit_graph_with_a_symbolic_size(mock_amd: str) -> None:
  from tg import Tensor, TinyJit, Variable
  v = Variable("n", 1, 16)

  @TinyJit
  def f(x: Tensor) -> Tensor:  # kernels whose arguments (and maybe launch dims) depend on n
    return ((x * 2 + 1).realize() * 3).sum(1).realize()
  for n in (3, 5, 9, 16, 2):
    x = np.arange(2 * n, dtype=np.float32).reshape(2, n)
    out = f(Tensor(x, device=mock_amd).reshape(2, v.bind(n)))
    np.testing.assert_allclose(out.numpy(), ((x * 2 + 1) * 3).sum(1))
  assert f.graph is not None and f.graph.updated == list(range(len(f.kernels)))
