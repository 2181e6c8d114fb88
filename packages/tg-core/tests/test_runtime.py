"""The parts below the scheduler: DEBUG output, the compile cache, the allocator, and ExecItems."""
from __future__ import annotations

import ctypes
import mmap
import os
import subprocess
import sys

import numpy as np
import pytest

from tg import Device, Tensor, dtypes
from tg.device import HOST_ALIGN, HUGE_PAGE, HUGE_PAGE_MIN, Compiler, HostAllocator, LRUAllocator
from tg.helpers import Context, GlobalCounters, diskcache_get, diskcache_put


def run_py(code: str, **env: str) -> subprocess.CompletedProcess[str]:
  env = {**os.environ, "DEVICE": Device.DEFAULT, **env}
  return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)


PROGRAM = "from tg import Tensor; print((Tensor([1.0, 2.0, 3.0]) * 2 + 1).tolist())"


def test_debug2_prints_each_kernel_with_its_time() -> None:
  out = run_py(PROGRAM, DEBUG="2")
  assert out.returncode == 0, out.stderr
  kernel_lines = [line for line in out.stdout.splitlines() if line.startswith("***")]
  assert kernel_lines, out.stdout
  assert all(Device.DEFAULT[:7] in line and "tm" in line and "GFLOPS" in line for line in kernel_lines)
  assert out.stdout.splitlines()[-1] == "[3.0, 5.0, 7.0]"


def test_debug4_prints_the_source() -> None:
  quiet, loud = run_py(PROGRAM, DEBUG="2"), run_py(PROGRAM, DEBUG="4")
  assert loud.returncode == 0, loud.stderr
  # DEBUG=4 adds the rendered source of the kernel (its name appears in the source) to DEBUG=2's lines
  assert len(loud.stdout.splitlines()) > len(quiet.stdout.splitlines())
  name = next(line for line in quiet.stdout.splitlines() if line.startswith("***")).split()[3]
  assert any(name in line and not line.startswith("***") for line in loud.stdout.splitlines())


class CountingCompiler(Compiler):
  def __init__(self, cachekey: str | None) -> None:
    super().__init__(cachekey)
    self.calls = 0

  def compile(self, src: str) -> bytes:
    self.calls += 1
    return src.encode()


def test_compile_cache_hits_skip_the_compiler() -> None:
  key = f"test_compile_{os.getpid()}_{np.random.randint(1 << 30)}"
  a, b = CountingCompiler(key), CountingCompiler(key)
  assert a.compile_cached("int x;") == b"int x;" and a.calls == 1
  assert b.compile_cached("int x;") == b"int x;" and b.calls == 0  # served from the disk cache
  assert b.compile_cached("int y;") == b"int y;" and b.calls == 1


def test_cachelevel0_disables_the_cache() -> None:
  key = f"test_nocache_{os.getpid()}_{np.random.randint(1 << 30)}"
  with Context(CACHELEVEL=0):
    a, b = CountingCompiler(key), CountingCompiler(key)
    a.compile_cached("int z;")
    b.compile_cached("int z;")
    assert (a.calls, b.calls) == (1, 1)
    assert diskcache_put("test_table", "k", 1) == 1 and diskcache_get("test_table", "k") is None


def test_compiler_without_cachekey_never_caches() -> None:
  a = CountingCompiler(None)
  a.compile_cached("int w;")
  a.compile_cached("int w;")
  assert a.calls == 2


class CountingAllocator(LRUAllocator):
  def __init__(self) -> None:
    super().__init__()
    self.allocs = 0

  def _alloc(self, size: int, options: object) -> bytearray:
    self.allocs += 1
    return bytearray(size)


def _address(b: object) -> int:
  return ctypes.addressof(ctypes.c_char.from_buffer(memoryview(b).cast("B")))  # type: ignore[arg-type]


@pytest.mark.parametrize("huge_pages", [0, 1])
def test_host_allocator_slack_is_readable_and_never_handed_out(huge_pages: int) -> None:
  """CPU devices may read a vector past either end of a buffer (Renderer.overread_bytes): the allocator's slack. A new
  buffer is zeros, whether a bytearray or (from HUGE_PAGE_MIN bytes on) a mapping of its own."""
  alloc = HostAllocator(slack=64)
  with Context(HUGE_PAGES=huge_pages):
    for n in (4, 100, 4096, 1 << 20, HUGE_PAGE_MIN, HUGE_PAGE_MIN + 4100):
      mv = memoryview(alloc.alloc(n))
      assert mv.nbytes == n and mv.readonly is False
      whole = mv.obj  # the backing bytearray or mapping: the buffer sits at least 64 bytes in, with at least 64 more after it
      start = _address(mv) - _address(whole)
      assert start >= 64 and len(whole) - start - n >= 64
      assert mv.tobytes() == bytes(n)
      mv[:] = b"\xff" * n
      assert whole[:start] == bytes(start) and whole[start + n:] == bytes(len(whole) - start - n), "a write reached the slack"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")
def test_large_host_buffers_start_on_a_huge_page_and_ask_for_huge_pages() -> None:
  """From HUGE_PAGE_MIN bytes on a host buffer is its own private mapping, starting on a 2 MiB boundary and advised
  MADV_HUGEPAGE (the kernel's "hg" flag on the mapping; whether it gets huge pages is the OS's choice); HUGE_PAGES=0
  and smaller buffers keep bytearrays."""
  def mapping_flags(address: int) -> list[str]:
    inside = False
    for line in open("/proc/self/smaps"):
      head = line.split()
      if "-" in head[0] and len(head) >= 5:
        lo, hi = (int(x, 16) for x in head[0].split("-"))
        inside = lo <= address < hi
        if inside:
          assert head[1][3] == "p", f"a {head[1]} mapping: shared anonymous memory gets no huge pages"
      elif inside and head[0] == "VmFlags:":
        return head[1:]
    raise AssertionError(f"no mapping holds {address:#x}")

  alloc = HostAllocator(slack=64)
  with Context(HUGE_PAGES=1):
    big, small = alloc.alloc(HUGE_PAGE_MIN + 100), alloc.alloc(HUGE_PAGE_MIN - 1)
  with Context(HUGE_PAGES=0):
    off = alloc.alloc(HUGE_PAGE_MIN + 100)
  assert _address(big) % HUGE_PAGE == 0
  assert isinstance(small.obj, bytearray) and isinstance(off.obj, bytearray)
  if hasattr(mmap, "MADV_HUGEPAGE") and open("/sys/kernel/mm/transparent_hugepage/enabled").read().find("[never]") < 0:
    assert "hg" in mapping_flags(_address(big))
  x = Tensor.arange(HUGE_PAGE_MIN // 4 + 7, dtype=dtypes.int32).realize()  # a kernel's output in such a buffer
  np.testing.assert_equal(x[-3:].numpy(), np.arange(HUGE_PAGE_MIN // 4 + 4, HUGE_PAGE_MIN // 4 + 7))


def test_host_memory_exhausted_is_a_memory_error_and_the_process_goes_on() -> None:
  """Past the address space limit a large host buffer (an mmap) fails as MemoryError, not OSError, so the LRU
  allocator frees its cache and tries again, and the caller sees the usual error; smaller buffers still work."""
  if not sys.platform.startswith("linux"):
    pytest.skip("RLIMIT_AS")
  code = """
import resource
from tg.device import HostAllocator
from tg.helpers import Context
resource.setrlimit(resource.RLIMIT_AS, (8 << 30, resource.getrlimit(resource.RLIMIT_AS)[1]))
alloc = HostAllocator(slack=64)
for huge in (1, 0):
  with Context(HUGE_PAGES=huge):
    try:
      alloc.alloc(16 << 30)
    except MemoryError as e:
      print("MemoryError", huge, e)
    m = alloc.alloc(8 << 20)
    m[-1] = 7
print("ok", m[-1])
"""
  out = run_py(code)
  assert out.returncode == 0 and "MemoryError 1" in out.stdout and "MemoryError 0" in out.stdout, out.stdout + out.stderr
  assert out.stdout.strip().endswith("ok 7"), out.stdout


def test_host_buffers_are_aligned_to_a_cache_line() -> None:
  """Every host buffer starts on a 64-byte boundary, with or without slack, small or large (malloc puts a large
  bytearray's bytes 16 past a page: a 64-byte vector load from there straddles two cache lines)."""
  for alloc in (HostAllocator(), HostAllocator(slack=64), HostAllocator(slack=32)):
    for n in (1, 12, 100, 4096, 300_000, 1 << 22):
      assert _address(alloc.alloc(n)) % HOST_ALIGN == 0, (alloc.slack, n)
  t = Tensor.ones(1 << 18).contiguous().realize()  # a kernel's output, on the test device
  if isinstance(Device[Device.DEFAULT].allocator, HostAllocator):
    assert _address(t.lazydata.buffer._buf) % HOST_ALIGN == 0


def test_cpu_devices_allocate_the_slack_their_loads_read() -> None:
  renderer, allocator = Device[Device.DEFAULT].renderer, Device[Device.DEFAULT].allocator
  if renderer is None or not renderer.overread_bytes:
    pytest.skip(f"{Device.DEFAULT}'s loads never read past a buffer")
  assert isinstance(allocator, HostAllocator) and allocator.slack >= renderer.overread_bytes


def test_lru_allocator_reuses_freed_buffers() -> None:
  alloc = CountingAllocator()
  x = alloc.alloc(64)
  alloc.free(x, 64)
  assert alloc.alloc(64) is x and alloc.allocs == 1
  alloc.alloc(32)
  assert alloc.allocs == 2
  alloc.free(x, 64)
  alloc.free_cache()
  assert not alloc.cache


def test_same_kernel_compiles_once() -> None:
  from tg.engine import realize
  a, b = Tensor([1.0, 2.0, 3.0]).realize(), Tensor([4.0, 5.0, 6.0]).realize()
  (a * b - a).realize()
  n = len(realize.method_cache)
  (b * a - b).realize()  # same AST, other buffers
  assert len(realize.method_cache) == n


def test_global_counters_count_kernels() -> None:
  a = Tensor([1.0, 2.0, 3.0]).realize()
  GlobalCounters.reset()
  (a + 1).realize()
  assert GlobalCounters.kernel_count == 1 and GlobalCounters.global_ops > 0


def test_profile_writes_a_chrome_trace(tmp_path) -> None:  # type: ignore[no-untyped-def]
  import json
  path = tmp_path / "trace.json"
  out = run_py(PROGRAM, PROFILE="1", PROFILE_PATH=str(path))
  assert out.returncode == 0, out.stderr
  events = json.loads(path.read_text())["traceEvents"]
  assert events and all(e["ph"] == "X" and e["dur"] >= 0 and e["pid"] == Device.DEFAULT for e in events)


def test_graph_writes_the_lazy_graph(tmp_path) -> None:  # type: ignore[no-untyped-def]
  path = tmp_path / "graph.dot"
  out = run_py("from tg import Tensor; (Tensor([[1.0, 2.0]]).softmax(1) * 2).realize()", GRAPH="1", GRAPH_PATH=str(path))
  assert out.returncode == 0, out.stderr
  dot = path.read_text()
  assert dot.startswith("digraph tg") and "MAX" in dot and "SUM" in dot and "->" in dot
  assert "GRAPH: wrote" in out.stdout


# ---------- splitting a CPU kernel across threads (tg.runtime.cpu) ----------

def test_run_split_runs_every_slice_once_on_its_own_thread(monkeypatch: pytest.MonkeyPatch) -> None:
  import threading

  from tg.runtime import cpu
  monkeypatch.setattr(cpu.CPU_THREADS, "value", 4)
  for outer in (1, 3, 4, 10, 1000):
    seen: list[tuple[int, int, int]] = []
    lock = threading.Lock()

    def fxn(start: int, end: int) -> None:
      with lock:
        seen.append((start, end, threading.get_ident()))
    cpu.run_split(fxn, outer)
    covered = sorted(i for start, end, _ in seen for i in range(start, end))
    assert covered == list(range(outer)), outer
    assert len(seen) == min(4, outer) and len({t for *_, t in seen}) == len(seen), "one slice per thread"
    assert threading.get_ident() in {t for *_, t in seen}, "the caller runs a slice itself"


def test_run_split_raises_a_workers_error_after_every_slice_ends(monkeypatch: pytest.MonkeyPatch) -> None:
  import threading
  import time

  from tg.runtime import cpu
  monkeypatch.setattr(cpu.CPU_THREADS, "value", 3)
  finished: list[int] = []

  def fxn(start: int, end: int) -> None:
    if start != 0:
      if start == 1:
        raise ValueError("slice 1 failed")
      time.sleep(0.05)
    finished.append(start)
  with pytest.raises(ValueError, match="slice 1 failed"):
    cpu.run_split(fxn, 3)
  assert sorted(finished) == [0, 2], "the other slices ran to their end before the error was raised"
  cpu.run_split(lambda start, end: finished.append(start), 3)  # the workers still work
  assert sorted(finished[2:]) == [0, 1, 2]
  assert threading.active_count() >= 3


def test_run_split_from_several_threads_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
  import threading

  from tg.runtime import cpu
  monkeypatch.setattr(cpu.CPU_THREADS, "value", 2)
  totals = [0] * 4

  def caller(k: int) -> None:
    for _ in range(50):
      parts: list[int] = []
      cpu.run_split(lambda start, end: parts.append(end - start), 100)
      totals[k] += sum(parts)
  threads = [threading.Thread(target=caller, args=(k,)) for k in range(4)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert totals == [5000] * 4


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_run_split_in_a_forked_child() -> None:
  """A forked child has none of the parent's worker threads: it starts its own."""
  from tg.runtime import cpu
  cpu.run_split(lambda start, end: None, 8)  # the parent's workers exist
  code = ("import os, sys; from tg.runtime import cpu; cpu.CPU_THREADS.value = 2; cpu.run_split(lambda s, e: None, 8)\n"
          "pid = os.fork()\n"
          "if pid == 0:\n"
          "  out = []; cpu.run_split(lambda s, e: out.append(e - s), 8); os._exit(0 if sorted(out) == [4, 4] else 1)\n"
          "_, status = os.waitpid(pid, 0); sys.exit(os.waitstatus_to_exitcode(status))")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
  assert out.returncode == 0, out.stderr


def test_run_split_after_an_interrupted_launch(monkeypatch: pytest.MonkeyPatch) -> None:
  """A caller interrupted while its worker still ran (Ctrl-C in a notebook) leaves that slice's completion behind:
  the next launch waits for the slice, then neither takes its completion for its own nor raises its error."""
  import time

  from tg.runtime import cpu
  monkeypatch.setattr(cpu.CPU_THREADS, "value", 2)
  cpu.run_split(lambda start, end: None, 2)  # the worker exists
  worker = cpu._workers[0]
  log: list[str] = []

  def slow(start: int, end: int) -> None:
    time.sleep(0.1)
    log.append("old slice")
    raise KeyboardInterrupt  # what the interrupted caller would have raised: never the next caller's error
  worker.post(slow, 0, 1)  # posted, never waited for
  parts: list[tuple[int, int]] = []
  cpu.run_split(lambda start, end: parts.append((start, end)), 10)
  assert sorted(parts) == [(0, 5), (5, 10)] and log == ["old slice"]
  worker.post(slow, 0, 1)
  time.sleep(0.2)  # this time the old slice is done before the next launch
  parts.clear()
  cpu.run_split(lambda start, end: parts.append((start, end)), 10)
  assert sorted(parts) == [(0, 5), (5, 10)]


# ---------- copies between devices: a direct path, or through host memory (Allocator.transfer) ----------

def test_host_to_host_copies_take_the_direct_path(monkeypatch: pytest.MonkeyPatch) -> None:
  """Between two instances with host memory (and from a DISK file) one memcpy, no copy out to a temporary."""
  dev = Device.DEFAULT
  if not isinstance(Device[dev].allocator, HostAllocator):
    pytest.skip("the test device's buffers are not host memory")
  used: list[str] = []
  orig_transfer, orig_copyout = HostAllocator.transfer, HostAllocator.copyout

  def transfer(self: HostAllocator, *args: object) -> bool:
    ok = orig_transfer(self, *args)  # type: ignore[arg-type]
    used.append("transfer" if ok else "no path")
    return ok

  def copyout(self: HostAllocator, *args: object) -> None:
    used.append("copyout")
    orig_copyout(self, *args)  # type: ignore[arg-type]
  monkeypatch.setattr(HostAllocator, "transfer", transfer)
  monkeypatch.setattr(HostAllocator, "copyout", copyout)
  a = np.arange(24, dtype=np.float32).reshape(4, 6)
  moved = (Tensor(a, device=dev) * 2).to(f"{dev}:1").realize()
  assert used == ["transfer"]
  np.testing.assert_array_equal(moved.numpy(), a * 2)
  back = (moved[1:3] + 1).to(dev).realize()  # a slice, copied back
  np.testing.assert_array_equal(back.numpy(), a[1:3] * 2 + 1)
  assert used.count("transfer") == 2


def test_a_copy_without_a_direct_path_goes_through_host_memory(monkeypatch: pytest.MonkeyPatch) -> None:
  dev = Device.DEFAULT
  if not isinstance(Device[dev].allocator, HostAllocator):
    pytest.skip("the test device's buffers are not host memory")
  monkeypatch.setattr(HostAllocator, "transfer", lambda self, dest, src_allocator, src, nbytes: False)
  a = np.arange(10, dtype=np.int32)
  np.testing.assert_array_equal((Tensor(a, device=dev) + 1).to(f"{dev}:1").numpy(), a + 1)
  empty = Tensor(np.zeros((0, 3), np.float32), device=dev).to(f"{dev}:1")
  assert empty.numpy().shape == (0, 3)


def test_disk_to_device_copies_directly(tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch) -> None:
  """Loading from a file (a DISK tensor's slice) into a host-memory device: one copy, from the mapping."""
  dev = Device.DEFAULT
  if not isinstance(Device[dev].allocator, HostAllocator):
    pytest.skip("the test device's buffers are not host memory")
  from tg.nn.state import safe_load, safe_save
  a = np.arange(64, dtype=np.float32)
  path = os.path.join(os.fspath(tmp_path), "weights.safetensors")
  safe_save({"w": Tensor(a, device=dev), "b": Tensor(a[:5] * 2, device=dev)}, path)
  with open(path, "rb") as f:
    saved = f.read()
  calls: list[bool] = []
  orig = HostAllocator.transfer

  def transfer(self: HostAllocator, *args: object) -> bool:
    calls.append(ok := orig(self, *args))  # type: ignore[arg-type]
    return ok
  monkeypatch.setattr(HostAllocator, "transfer", transfer)
  loaded = safe_load(path)
  np.testing.assert_array_equal(loaded["w"].to(dev).numpy(), a)
  np.testing.assert_array_equal(loaded["b"].to(dev).numpy(), a[:5] * 2)
  np.testing.assert_array_equal(loaded["w"][8:24].to(dev).numpy(), a[8:24])  # a slice of the mapping
  assert calls == [True, True, True]
  with open(path, "rb") as f:
    assert f.read() == saved  # the file is untouched
