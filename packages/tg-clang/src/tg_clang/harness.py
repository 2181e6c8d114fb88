"""The aarch64 harness process of one CLANG device in cross mode (harness.c is the other half, see its protocol).

The harness runs under qemu-aarch64 for the device's life. Buffers travel through shared memory (a memfd both map):
before a kernel runs, each buffer it gets is copied in, after it each is copied back. Buffers that share memory here
(views of one allocation) share it there too, so a kernel sees exactly what it would natively. Every reply is read
with a deadline: a harness that dies (a kernel's SIGSEGV kills qemu) or hangs becomes a HarnessError naming qemu and
the kernel, never a hang, and the next call starts a fresh harness (kernels are loaded into it again)."""
from __future__ import annotations

import mmap
import os
import select
import shutil
import stat
import struct
import subprocess
import tempfile
import threading
import time
import weakref
from typing import Any

import cffi

from tg_clang.cross import QEMU, SYSROOT, TG_QEMU_TIMEOUT, harness_binary

OP_LOAD, OP_FREE, OP_RUN = 1, 2, 3
HELLO = 0x54474133
HEADER = struct.Struct("<IIIIQ")  # op, a, b, c, d (harness.c's struct header)
REPLY = struct.Struct("<iI")  # status, message length
SLACK, ALIGN = 64, 64  # readable bytes around each buffer in the shared memory (kernels read whole vectors at the ends)
START_TIMEOUT = 60.0  # seconds for qemu to start the harness
_ffi = cffi.FFI()


class HarnessError(RuntimeError):
  """The aarch64 harness under qemu died, hung, or refused a kernel."""


def _regions(bufs: tuple[Any, ...]) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
  """The host memory the buffers lie in, as disjoint (address, size) regions (overlapping buffers merged), and each
  buffer's (region, offset in it)."""
  spans = []
  for b in bufs:
    view = memoryview(b)
    spans.append((int(_ffi.cast("uintptr_t", _ffi.from_buffer(view))), view.nbytes))
  merged: list[list[int]] = []
  for addr, size in sorted(set(spans)):
    if merged and addr <= merged[-1][0] + merged[-1][1]:
      merged[-1][1] = max(merged[-1][1], addr + size - merged[-1][0])
    else:
      merged.append([addr, size])
  where = []
  for addr, _ in spans:
    i = next(i for i, (start, size) in enumerate(merged) if start <= addr <= start + size)
    where.append((i, addr - merged[i][0]))
  return [(a, s) for a, s in merged], where


class Harness:
  """One harness process (started on first use, again after one died) and the shared memory it reads buffers from."""

  def __init__(self) -> None:
    self.lock = threading.Lock()  # one request at a time
    self.proc: subprocess.Popen[bytes] | None = None
    self.generation = 0  # which process kernels were loaded into: a fresh harness loads them again
    self.to_free: list[tuple[int, int]] = []  # kernels dropped since the last request (a finalizer does no I/O)
    self.shm: mmap.mmap | None = None
    self.shm_size, self.n_files = 0, 0
    # what this process owns, for the finalizer: the harness process, the memfd, a directory for kernels' shared
    # objects (each only until it is loaded), and the pid (a forked child that never ran a kernel owns none of them)
    self.owned: list[Any] = [None, os.memfd_create("tg_clang_aarch64"), tempfile.mkdtemp(prefix="tg_clang_aarch64_"), os.getpid()]
    weakref.finalize(self, Harness._cleanup, self.owned)

  @staticmethod
  def _cleanup(owned: list[Any]) -> None:
    proc, fd, tmp, pid = owned
    if pid != os.getpid():
      return
    if proc is not None and proc.poll() is None:
      proc.kill()
      proc.wait()
    os.close(fd)
    shutil.rmtree(tmp, ignore_errors=True)

  @property
  def tmp(self) -> str:
    return str(self.owned[2])

  # ---------- the process ----------

  def _start(self) -> None:
    exe = os.path.join(self.tmp, f"harness{self.generation}")
    with open(exe, "wb") as f:
      f.write(harness_binary())
    os.chmod(exe, stat.S_IRWXU)
    req_r, self.req = os.pipe()
    self.resp, resp_w = os.pipe()
    self.err = tempfile.TemporaryFile(prefix="tg_clang_qemu_", dir=self.tmp)  # what qemu and the harness print
    shm_fd = self.owned[1]
    try:
      # its own session: a Ctrl-C at the terminal reaches tg (which holds it while a kernel runs), not the harness
      self.proc = subprocess.Popen([QEMU, "-L", SYSROOT, exe, str(shm_fd), str(req_r), str(resp_w)], pass_fds=(shm_fd, req_r, resp_w),
                                   stdin=subprocess.DEVNULL, stdout=self.err, stderr=self.err, start_new_session=True)
    except OSError as e:
      raise self._fail(f"could not be started ({e})", "starting the harness") from None
    finally:
      os.close(req_r)
      os.close(resp_w)
    self.owned[0] = self.proc
    self.generation += 1
    self.to_free.clear()  # the kernels of the process before died with it
    status, msg = self._reply(START_TIMEOUT, "starting the harness")
    os.unlink(exe)  # qemu has it mapped
    if status != HELLO:
      raise self._fail(f"started, but said {status} {msg!r} instead of hello", "starting the harness")

  def _ensure(self) -> None:
    if self.owned[3] != os.getpid():  # a forked child shares its parent's pipes and memory: it starts its own harness
      self.proc, self.shm, self.shm_size = None, None, 0
      self.owned[:] = [None, os.memfd_create("tg_clang_aarch64"), tempfile.mkdtemp(prefix="tg_clang_aarch64_"), os.getpid()]
    if self.proc is None:
      self._start()

  def _fail(self, what: str, doing: str, ended: bool = False) -> HarnessError:
    """Kill the harness (the next request starts a fresh one) and the error that says what happened. `ended`: it closed
    its end, so it is exiting: wait a moment for its exit status (the pipe closes before the process is reaped)."""
    proc, self.proc = self.proc, None
    os.close(self.req)
    os.close(self.resp)
    code = None  # how it ended, unless tg ended it
    if proc is not None:
      if ended:
        try:
          proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
          pass
      if proc.poll() is None:
        proc.kill()
        proc.wait()
      else:
        code = proc.returncode
    self.err.seek(0)
    out = self.err.read().decode(errors="replace").strip()[-2000:]
    self.err.close()
    died = "" if code is None else f" (exit status {code})" if code >= 0 else f" (killed by signal {-code})"
    return HarnessError(f"the aarch64 harness under {QEMU} -L {SYSROOT} {what}{died} while {doing}" + (f":\n{out}" if out else "") +
                        "\n(the next kernel starts a fresh harness)")

  # ---------- the protocol ----------

  def _send(self, data: bytes, doing: str) -> None:
    try:
      view = memoryview(data)
      while view:
        view = view[os.write(self.req, view):]
    except OSError as e:  # EPIPE: it died
      raise self._fail(f"stopped reading requests ({e})", doing, ended=True) from None

  def _read(self, n: int, deadline: float, timeout: float, doing: str) -> bytes:
    out = b""
    while len(out) < n:
      left = deadline - time.monotonic()
      if left <= 0 or not select.select([self.resp], [], [], left)[0]:
        raise self._fail(f"did not answer within {timeout:g} s (TG_QEMU_TIMEOUT)", doing)
      if not (chunk := os.read(self.resp, n - len(out))):
        raise self._fail("died", doing, ended=True)
      out += chunk
    return out

  def _reply(self, timeout: float, doing: str) -> tuple[int, str]:
    deadline = time.monotonic() + timeout
    status, length = REPLY.unpack(self._read(REPLY.size, deadline, timeout, doing))
    return status, self._read(length, deadline, timeout, doing).decode(errors="replace")

  def _request(self, header: bytes, payload: bytes, doing: str, timeout: float) -> tuple[int, str]:
    frees, self.to_free = self.to_free, []
    try:
      self._send(b"".join(HEADER.pack(OP_FREE, k, 0, 0, 0) for gen, k in frees if gen == self.generation) + header + payload, doing)
      return self._reply(timeout, doing)
    except HarnessError:
      raise
    except BaseException:  # a Ctrl-C part way through a request: the stream is out of step, so this harness is done
      if self.proc is not None:
        self._fail("was interrupted", doing)
      raise

  # ---------- what programs ask for ----------

  def load(self, lib: bytes, name: str) -> tuple[int, int]:
    """Load a kernel's shared object: (the harness's generation, the kernel's number in it)."""
    with self.lock:
      return self._load(lib, name)

  def _load(self, lib: bytes, name: str) -> tuple[int, int]:
    self._ensure()
    self.n_files += 1
    path = os.path.join(self.tmp, f"k{self.n_files}.so")  # dlopen takes a path, and a new one each time (it reuses loaded paths)
    with open(path, "wb") as f:
      f.write(lib)
    try:
      status, msg = self._request(HEADER.pack(OP_LOAD, len(path.encode()), 0, 0, 0), path.encode(), f"loading kernel {name}", START_TIMEOUT)
    finally:
      os.unlink(path)
    if status < 0:
      raise HarnessError(f"the aarch64 harness could not load kernel {name}: {msg}")
    return self.generation, status

  def free(self, handle: tuple[int, int]) -> None:
    self.to_free.append(handle)  # sent with the next request: this runs in finalizers

  def run(self, prg: Any, bufs: tuple[Any, ...], vals: tuple[int, ...]) -> None:
    """Run prg (a CrossProgram) on bufs: copy them in, call its tg_entry, copy them back."""
    with self.lock:
      self._ensure()
      if prg.handle is None or prg.handle[0] != self.generation:
        prg.handle = self._load(prg.lib, prg.name)
      regions, where = _regions(bufs)
      offsets, end = [], SLACK
      for _, size in regions:
        offsets.append(end)
        end = -(-(end + size + SLACK) // ALIGN) * ALIGN
      with self._shared(end + SLACK) as shm:
        for (addr, size), off in zip(regions, offsets):
          shm[off:off + size] = _ffi.buffer(_ffi.cast("char*", addr), size)
        args = struct.pack(f"<{len(bufs)}Q{len(vals)}i", *(offsets[i] + delta for i, delta in where), *vals)
        header = HEADER.pack(OP_RUN, prg.handle[1], len(bufs), len(vals), self.shm_size)
        status, msg = self._request(header, args, f"running kernel {prg.name}", TG_QEMU_TIMEOUT.value)
        if status != 0:
          raise HarnessError(f"the aarch64 harness could not run kernel {prg.name}: {msg}")
        for (addr, size), off in zip(regions, offsets):
          _ffi.buffer(_ffi.cast("char*", addr), size)[:] = shm[off:off + size]

  def _shared(self, size: int) -> memoryview:
    """The shared memory, grown (to a power of two) when it is smaller than size."""
    if self.shm is None or self.shm_size < size:
      if self.shm is not None:
        self.shm.close()
      self.shm_size = max(1 << 20, 1 << (size - 1).bit_length())
      os.ftruncate(self.owned[1], self.shm_size)
      self.shm = mmap.mmap(self.owned[1], self.shm_size)
    return memoryview(self.shm)
