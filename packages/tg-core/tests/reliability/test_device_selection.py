"""Choosing the default device and loading plugins: a bad TG_PLUGINS names the unknown plugins and lists the known
ones; a better device that is installed but unusable (TG_CLANG pointing nowhere, clang missing) is named once on
stderr with the reason and the device picked instead, never a silent fall back to the PYTHON interpreter."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tg.plugins import installed_devices

INSTALLED = {d.name for d in installed_devices()}
needs_clang = pytest.mark.skipif("CLANG" not in INSTALLED, reason="tg-clang is not installed")
needs_clang_llvm = pytest.mark.skipif(not {"CLANG", "LLVM"} <= INSTALLED, reason="tg-clang and tg-llvm are not both installed")
DEFAULT = "from tg import Device; print(Device.DEFAULT); print(Device.DEFAULT); print(Device.describe_default())"


def run_py(code: str, **env: str) -> subprocess.CompletedProcess[str]:
  # no device asked for, whatever the environment running the tests says
  base = {k: v for k, v in os.environ.items() if k != "DEVICE" and not (k in INSTALLED and v == "1") and k != "CUDA_MOCK"}
  return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**base, **env}, check=False, timeout=120)


def test_unknown_plugin_names_are_named_and_known_ones_listed() -> None:
  out = run_py(DEFAULT, TG_PLUGINS="XQZW")  # a name close to no device's (NOPE is close to OPENCL, when that is installed)
  assert out.returncode != 0
  last = out.stderr.strip().splitlines()[-1]
  assert "TG_PLUGINS=XQZW names XQZW, which no installed package provides" in last, out.stderr
  assert "PYTHON" in last and "install tg-clang" not in out.stderr
  out = run_py(DEFAULT, TG_PLUGINS="PYTHON,PYTHN,XQZW")
  assert "names PYTHN (did you mean PYTHON?), XQZW" in out.stderr, out.stderr


@needs_clang
def test_unusable_clang_is_named_when_falling_back_to_the_interpreter() -> None:
  out = run_py(DEFAULT, TG_PLUGINS="CLANG,PYTHON,DISK", TG_CLANG="/nonexistent/clang")
  assert out.returncode == 0, out.stderr
  assert out.stdout.splitlines()[:2] == ["PYTHON", "PYTHON"]
  warnings = [ln for ln in out.stderr.splitlines() if ln.startswith("tg: ")]
  assert len(warnings) == 1, out.stderr  # once, however often DEFAULT is read
  assert "using device PYTHON" in warnings[0] and "CLANG is installed but not usable" in warnings[0] and "TG_CLANG=/nonexistent/clang" in warnings[0]
  assert out.stdout.splitlines()[2].startswith("PYTHON (the best usable of PYTHON; CLANG is installed but not usable")


@needs_clang_llvm
def test_llvm_is_picked_when_clang_is_unusable() -> None:
  out = run_py(DEFAULT, TG_PLUGINS="CLANG,LLVM,PYTHON,DISK", TG_CLANG="/nonexistent/clang")
  assert out.returncode == 0, out.stderr
  assert out.stdout.splitlines()[0] == "LLVM"
  assert "tg: using device LLVM, because CLANG is installed but not usable" in out.stderr


@needs_clang
def test_no_warning_when_the_best_device_is_usable_or_a_device_is_asked_for() -> None:
  out = run_py(DEFAULT, TG_PLUGINS="CLANG,PYTHON,DISK")
  assert out.returncode == 0 and "tg: " not in out.stderr, out.stderr
  assert out.stdout.splitlines()[2] == "CLANG (the best usable of CLANG, PYTHON)"
  out = run_py(DEFAULT, TG_PLUGINS="CLANG,PYTHON,DISK", TG_CLANG="/nonexistent/clang", DEVICE="PYTHON")
  assert out.returncode == 0 and "tg: " not in out.stderr, out.stderr
  assert out.stdout.splitlines()[2] == "PYTHON (asked for by DEVICE=PYTHON)"


def test_no_usable_device_says_what_to_install() -> None:
  out = run_py(DEFAULT, TG_PLUGINS="DISK")
  assert out.returncode != 0
  assert "no usable tg device" in out.stderr and "pip install tg-llvm" in out.stderr


def test_tinygrad_style_name_is_read_as_text() -> None:
  # NAME=1 asks for a device; an unrelated variable that happens to share a device's name (CUDA=/usr/local/cuda) is no error
  out = run_py(DEFAULT, PYTHON="1")
  assert out.returncode == 0 and out.stdout.splitlines()[2] == "PYTHON (asked for by PYTHON=1)", out.stderr
  out = run_py(DEFAULT, CUDA="/usr/local/cuda", TG_PLUGINS="PYTHON,DISK")
  assert out.returncode == 0 and out.stdout.splitlines()[0] == "PYTHON", out.stderr


def test_falling_back_to_the_interpreter_is_said_even_with_nothing_better_installed() -> None:
  out = run_py(DEFAULT, TG_PLUGINS="PYTHON,DISK")
  assert out.returncode == 0 and out.stdout.splitlines()[0] == "PYTHON", out.stderr
  warnings = [ln for ln in out.stderr.splitlines() if ln.startswith("tg: ")]
  assert len(warnings) == 1 and "using device PYTHON, an interpreter (slow)" in warnings[0] and "pip install tg-llvm" in warnings[0], out.stderr
  assert "tg: " not in run_py(DEFAULT, TG_PLUGINS="PYTHON,DISK", DEVICE="PYTHON").stderr
