"""tg-metal as a plugin: it registers, says on Linux that METAL needs macOS (and how to run anyway), the mock is opt-in
and usable, and the Objective-C layer imports everywhere with every message it sends declared."""
from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import tempfile

import pytest

from tg.plugins import installed_devices
from tg_metal import objc, runtime

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src", "tg_metal")


def _run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
  full = {k: v for k, v in os.environ.items() if k not in ("METAL_MOCK", "DEVICE")}
  with tempfile.TemporaryDirectory() as d:  # a compile cache of its own: the shared one stays untouched
    full["CACHEDB"] = os.path.join(d, "cache.db")
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env={**full, **env}, check=False, timeout=300)


def test_metal_registers_through_its_entry_point() -> None:
  devs = {d.name: d for d in installed_devices()}
  assert devs["METAL"].package == "tg-metal" and devs["METAL"].module == "tg_metal.plugin"


@pytest.mark.skipif(sys.platform == "darwin", reason="off macOS only")
def test_tg_devices_says_metal_needs_macos() -> None:
  p = _run("-m", "tg.devices", METAL_MOCK="0")
  assert p.returncode == 0, p.stderr
  line = next(x for x in p.stdout.splitlines() if x.startswith("METAL "))
  assert "not usable" in line and "needs macOS" in line and "METAL_MOCK=1" in line


def test_mock_is_usable_and_never_the_default() -> None:
  p = _run("-m", "tg.devices", METAL_MOCK="1")
  line = next(x for x in p.stdout.splitlines() if x.startswith("METAL "))
  assert "usable (mock mode, METAL_MOCK=1" in line, line
  p = _run("-c", "from tg import Device; print(Device.DEFAULT)", METAL_MOCK="1")
  assert p.stdout.strip() != "METAL", p.stdout


def test_mock_runs_and_debug4_shows_checked_msl() -> None:
  code = "from tg import Tensor; print((Tensor([1.0, 2.0, 3.0]) * 2 + 1).tolist())"
  p = _run("-c", code, METAL_MOCK="1", DEVICE="METAL", DEBUG="4")
  assert p.returncode == 0, p.stderr
  assert "[3.0, 5.0, 7.0]" in p.stdout
  assert "kernel void" in p.stdout and "passed clang++ -fsyntax-only" in p.stdout


def test_second_instance_has_its_own_memory() -> None:
  code = "from tg import Tensor; a = Tensor([1.0, 2.0], device='METAL'); print((a.to('METAL:1') * 3).tolist())"
  p = _run("-c", code, METAL_MOCK="1")
  assert p.returncode == 0, p.stderr
  assert "[3.0, 6.0]" in p.stdout


def test_objc_layer_imports_without_loading_anything() -> None:
  # on Linux there is no libobjc: importing the runtime must not touch it
  p = _run("-c", "import tg_metal.runtime, tg_metal.objc, tg_metal.plugin; print('ok')")
  assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr


def test_every_message_sent_is_declared() -> None:
  import ast
  sent: set[str] = set()
  for name in ("runtime.py", "objc.py"):
    with open(os.path.join(SRC, name)) as f:
      tree = ast.parse(f.read())
    for node in ast.walk(tree):
      if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "send" and len(node.args) >= 2:
        sel = node.args[1]
        assert isinstance(sel, ast.Constant) and isinstance(sel.value, str), ast.dump(node)
        n_args = len(node.args) - 2
        assert sel.value in objc.SIGNATURES, f"{sel.value} has no signature"
        # an Objective-C selector has one colon per argument
        assert sel.value.count(":") == n_args == len(objc.SIGNATURES[sel.value][1]), sel.value
        sent.add(sel.value)
  assert {"newLibraryWithSource:options:error:", "dispatchThreadgroups:threadsPerThreadgroup:", "setBytes:length:atIndex:"} <= sent


def test_signatures_match_their_selectors_and_mtlsize_is_three_nsuintegers() -> None:
  for sel, (_, args) in objc.SIGNATURES.items():
    assert sel.count(":") == len(args), sel
    objc.prototype(sel)  # a valid ctypes function type
  assert ctypes.sizeof(objc.MTLSize) == 3 * ctypes.sizeof(ctypes.c_ulong)
  with pytest.raises(objc.ObjCError, match="no declared signature"):
    objc.prototype("undeclaredSelector:")


def test_binary_round_trips() -> None:
  b = runtime.MetalBinary("kernel void k() {}", b"MTLB\x00lib", b"\x7fELF so")
  assert runtime.MetalBinary.unpack(b.pack()) == b
  with pytest.raises(runtime.MetalError, match="not a tg-metal binary"):
    runtime.MetalBinary.unpack(b"\x7fELF")
