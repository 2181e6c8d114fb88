"""The Mac runtime (tg_metal.runtime.MetalDriver) against fake_metal.c, a stand-in for libobjc, Metal.framework and
libdispatch built here: every message goes through a real objc_msgSend-style trampoline to a C function of the
method's signature, so a wrong ctypes signature (an MTLSize passed wrongly, a missing argument) shows up as wrong
values in the fake's log. Also checked: errors come back from NSError out-parameters, autoreleased objects are made
inside a pool, retains and releases balance. Kernels don't run (the fake is not a GPU)."""
from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from typing import Any

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
pytestmark = pytest.mark.skipif(shutil.which("cc") is None or platform.machine() not in ("x86_64", "aarch64") or sys.platform != "linux",
                                reason="the fake Objective-C runtime is built with cc for x86_64/aarch64 Linux")

SCRIPT = r"""
import ctypes, json, sys
from tg_metal import objc
objc.LIBOBJC = objc.METAL = objc.LIBSYSTEM = sys.argv[1]
objc.COREGRAPHICS = "/nonexistent/CoreGraphics"
from tg_metal.runtime import Launch, MetalBinary, MetalCompileError, MetalDriver
fake = ctypes.CDLL(sys.argv[1])
fake.fake_log.restype = ctypes.c_char_p
K_BUFFER, K_CMDBUF, K_ENCODER, K_STRING, K_OPTIONS = 6, 11, 12, 2, 7
out = {}
d = MetalDriver()
out["name"], out["bfloat_family"] = d.name, d.simdgroup_matrix
a, b = d.alloc(64), d.alloc(16)
d.copyin(a, memoryview(bytes(range(64))))
back = bytearray(8)
d.copyout(memoryview(back), a.view(8))
out["copy"] = list(back)
src = "#include <metal_stdlib>\nkernel void k(device float* data0 [[buffer(0)]]) {}"
fn = d.function(MetalBinary(src), "k")
out["max_threads"] = fn.max_threads
try:
  d.compile_msl("not a kernel")
except MetalCompileError as e:
  out["compile_error"] = str(e).splitlines()[0]
lib_fn = d.function(MetalBinary(src, metallib=src.encode()), "k")
launches = [Launch(fn, (a.view(16), b), (7, -3), (4, 2, 1), (32, 1, 1)), Launch(lib_fn, (b,), (), (1, 1, 1), (8, 4, 2))]
out["no_wait"] = d.run(launches[:1], wait=False)
out["wait"] = d.run(launches, wait=True)
d.free(a); d.free(b)
out["live"] = {"buffers": fake.fake_live(K_BUFFER), "command buffers": fake.fake_live(K_CMDBUF), "encoders": fake.fake_live(K_ENCODER),
               "strings": fake.fake_live(K_STRING), "options": fake.fake_live(K_OPTIONS)}
out["log"] = fake.fake_log().decode()
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
  so = str(tmp_path_factory.mktemp("fake") / "fake_metal.so")
  subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", so, os.path.join(HERE, "fake_metal.c")], check=True)
  p = subprocess.run([sys.executable, "-c", SCRIPT, so], capture_output=True, text=True, timeout=120, check=False)
  assert p.returncode == 0, p.stderr
  return json.loads(p.stdout)  # type: ignore[no-any-return]


def test_device_and_shared_buffers(result: dict[str, Any]) -> None:
  assert result["name"] == "Fake Apple M1" and result["bfloat_family"] is True
  assert "newBuffer 64 options 0\n" in result["log"]  # MTLResourceStorageModeShared
  assert result["copy"] == list(range(8, 16))  # copies go through contents, at the view's offset


def test_compiles_with_fast_math_off_and_reports_nserror(result: dict[str, Any]) -> None:
  assert "compile fast_math=0" in result["log"] and "compile fast_math=1" not in result["log"]
  assert result["compile_error"] == "Metal can't compile the kernel: program_source:1:1: error: no kernel"
  assert result["max_threads"] == 1024
  assert "metallib" in result["log"]


def test_dispatch_arguments_arrive_as_declared(result: dict[str, Any]) -> None:
  log = result["log"]
  first = ("set pipeline k\nset buffer 0: 64 bytes + 16\nset buffer 1: 16 bytes + 0\nset bytes 2: 4 bytes = 7\nset bytes 3: 4 bytes = -3\n"
           "dispatch (4, 2, 1) x (32, 1, 1)\n")
  assert log.count(first) == 2, log
  # the batch: one command buffer, one encoder, both dispatches, then one commit
  assert first + "set pipeline k\nset buffer 0: 16 bytes + 0\ndispatch (1, 1, 1) x (8, 4, 2)\nendEncoding\ncommit\n" in log, log
  assert log.count("commandBuffer\n") == 2 and log.count("commit\n") == 2 and log.count("wait\n") == 2
  assert result["no_wait"] is None and result["wait"] == pytest.approx(0.25)


def test_autoreleased_objects_are_pooled_and_references_balance(result: dict[str, Any]) -> None:
  assert "WITHOUT POOL" not in result["log"] and "OVER-RELEASE" not in result["log"], result["log"]
  assert result["live"] == {"buffers": 0, "command buffers": 0, "encoders": 0, "strings": 0, "options": 0}


FAKE_XCRUN = """#!/bin/sh
# xcrun -sdk macosx metal|metallib ...: logs its arguments; "compiles" by copying
echo "$@" >> "$(dirname "$0")/calls"
[ "$1 $2" = "-sdk macosx" ] || exit 2
tool=$3; shift 3
case "$tool $1" in
  "metal --version") echo "Apple metal version 32023.404 (fake)"; exit 0;;
esac
while [ $# -gt 0 ]; do
  case "$1" in -o) out=$2; shift 2;; -c|-fno-fast-math) shift;; *) in=$1; shift;; esac
done
grep -q "kernel void" "$in" || { echo "$in:1:1: error: no kernel" >&2; exit 1; }
cp "$in" "$out"
"""


def test_xcrun_metal_makes_a_metallib_in_two_steps(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
  from tg_metal import compiler
  from tg_metal.runtime import MetalBinary, MetalCompileError
  xcrun = tmp_path / "xcrun"
  xcrun.write_text(FAKE_XCRUN)
  xcrun.chmod(0o755)
  monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
  compiler.xcrun_metal_version.cache_clear()
  try:
    c = compiler.MetalCompiler(mock=False)
    assert c.xcrun == "Apple metal version 32023.404 (fake)" and c.cachekey is not None  # metallibs are cached on disk
    src = "#include <metal_stdlib>\nkernel void k() {}"
    b = MetalBinary.unpack(c.compile(src))
    assert b.msl == src and b.metallib == src.encode() and b.mock == b""
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls[1].startswith("-sdk macosx metal -fno-fast-math -c ") and calls[1].endswith(".air")
    assert calls[2].startswith("-sdk macosx metallib ") and calls[2].endswith(".metallib")
    with pytest.raises(MetalCompileError, match="no kernel"):
      c.compile("junk")
  finally:
    compiler.xcrun_metal_version.cache_clear()
