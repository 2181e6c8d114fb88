"""Ctrl-C and NVRTC. NVRTC's first compile in a process puts its own SIGINT handler in place for about 20 ms; that
handler calls exit(4) from inside the signal handler (and can deadlock there, in malloc: a hang). A Ctrl-C landing
there killed a CUDA_MOCK test child with exit code 4 in 2 runs of 100, and once hung it. tg-cuda does that first
compile when its compiler is made (the device opens), so compiles in a user's realize never swap the handler."""
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytest.importorskip("cffi")
from tg_cuda.nvrtc import find_nvrtc

pytestmark = [pytest.mark.skipif(find_nvrtc() is None, reason="NVRTC is not installed"),
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads glibc's struct sigaction; SIGINT is POSIX")]

WATCH_CHILD = textwrap.dedent("""
  import ctypes, signal, threading, time
  libc = ctypes.CDLL(None)
  class SigAction(ctypes.Structure):  # glibc's struct sigaction on Linux: the handler comes first
    _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_ulong * 16), ("flags", ctypes.c_int), ("restorer", ctypes.c_void_p)]
  def handler():
    sa = SigAction()
    libc.sigaction(signal.SIGINT, None, ctypes.byref(sa))
    return sa.handler
  from tg_cuda.compiler import CUDACompiler
  from tg_cuda.nvrtc import compile_cuda
  CUDACompiler("sm_80", mock=True)  # as the device opens
  python_handler, seen, done = handler(), set(), []
  def compiles():
    for i in range(4):
      compile_cuda('extern "C" __global__ void k(float* a) { a[0] = %d.0f; }' % i, "compute_80", {})
    done.append(1)
  t = threading.Thread(target=compiles)
  t.start()
  while not done:
    seen.add(handler())
    time.sleep(0.00005)
  t.join()
  print("foreign handlers:", len(seen - {python_handler}))
""")


def test_compiles_after_the_device_opens_keep_pythons_sigint_handler():
  r = subprocess.run([sys.executable, "-c", WATCH_CHILD], capture_output=True, text=True, timeout=120)
  assert r.returncode == 0, r.stderr[-2000:]
  assert "foreign handlers: 0" in r.stdout, r.stdout


CTRL_C_CHILD = textwrap.dedent("""
  from tg_cuda.compiler import CUDACompiler
  from tg_cuda.nvrtc import compile_cuda
  CUDACompiler("sm_80", mock=True)
  n = 0
  print("ready", flush=True)
  try:
    while True:  # a new source each time: every call is a real compile
      compile_cuda('extern "C" __global__ void k(float* a) { a[threadIdx.x] = %d.0f; }' % n, "compute_80", {})
      n += 1
  except KeyboardInterrupt:
    print(f"interrupted after {n} compiles", flush=True)
  compile_cuda('extern "C" __global__ void k(float* a) { a[0] = 1.0f; }', "compute_80", {})  # and it compiles on
  print("compiled again", flush=True)
""")


@pytest.mark.parametrize("delay", [0.01, 0.05, 0.3])
def test_ctrl_c_while_nvrtc_compiles_is_a_keyboard_interrupt(delay):
  p = subprocess.Popen([sys.executable, "-c", CTRL_C_CHILD], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  assert p.stdout is not None and p.stdout.readline().strip() == "ready"
  time.sleep(delay)
  p.send_signal(signal.SIGINT)
  try:
    out, err = p.communicate(timeout=60)
  except subprocess.TimeoutExpired:
    p.kill()
    out, err = p.communicate()
    pytest.fail(f"the process hung after Ctrl-C\n{out}\n{err[-2000:]}")
  assert p.returncode == 0 and "compiled again" in out, f"exit {p.returncode}\n{out}\n{err[-2000:]}"
