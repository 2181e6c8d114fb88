"""CPU device instances side by side (tg/engine/streams.py): a schedule over two instances runs each one's kernels on a
thread of its own, each on its share of the cores; the numbers, the counters, the order between instances, failures and
Ctrl-C behave as in a run one after another. test_multi.py runs every sharded op both ways."""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any

import numpy as np
import pytest

from tg import Device, GlobalCounters, Tensor, TinyJit
from tg.engine import realize, streams
from tg.runtime import cpu
from tg.settings import JIT_GRAPH, STREAMS
from tg.testing import second_instance

rng = np.random.default_rng(1)


@pytest.fixture
def devs(monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
  if not streams.host_cores(Device.DEFAULT):
    pytest.skip("only CPU devices run instances side by side")
  monkeypatch.setattr(streams, "MIN_ITEM_S", 0.0)  # however small the work
  return (Device.DEFAULT, second_instance())


def _threads_of_launches(monkeypatch: pytest.MonkeyPatch) -> dict[str, set[str]]:
  """Record which thread runs each device's programs."""
  seen: dict[str, set[str]] = {}
  orig = realize.CompiledRunner.__call__

  def call(self: Any, *args: Any, **kwargs: Any) -> Any:
    seen.setdefault(self.device, set()).add(threading.current_thread().name)
    return orig(self, *args, **kwargs)
  monkeypatch.setattr(realize.CompiledRunner, "__call__", call)
  return seen


def _fail_first_kernel_on(device: str, error: BaseException, monkeypatch: pytest.MonkeyPatch) -> None:
  """The next program run on `device` raises `error`; the others run."""
  orig, calls = realize.CompiledRunner.__call__, [0]

  def failing(self: Any, *args: Any, **kwargs: Any) -> Any:
    if self.device == device:
      calls[0] += 1
      if calls[0] == 1:
        raise error
    return orig(self, *args, **kwargs)
  monkeypatch.setattr(realize.CompiledRunner, "__call__", failing)


def test_each_instance_runs_on_its_own_thread(devs: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
  seen = _threads_of_launches(monkeypatch)
  a, b = rng.standard_normal((64, 32), dtype=np.float32), rng.standard_normal((32, 16), dtype=np.float32)
  out = (Tensor(a).shard(devs, axis=0) @ Tensor(b).shard(devs)).relu()
  np.testing.assert_allclose(out.numpy(), np.maximum(a @ b, 0), rtol=1e-4, atol=1e-5)
  assert seen[devs[0]] == {f"tg_stream_{devs[0]}"} and seen[devs[1]] == {f"tg_stream_{devs[1]}"}


def test_streams_off_and_small_work_run_on_the_calling_thread(devs: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
  seen = _threads_of_launches(monkeypatch)
  a = rng.standard_normal((8, 8), dtype=np.float32)
  monkeypatch.setattr(STREAMS, "value", 0)
  np.testing.assert_allclose((Tensor(a).shard(devs, axis=0) * 3).numpy(), a * 3, rtol=1e-6)
  monkeypatch.setattr(STREAMS, "value", 1)
  monkeypatch.setattr(streams, "MIN_ITEM_S", 1.0)  # the default's reasoning: too little work to hand over
  np.testing.assert_allclose((Tensor(a).shard(devs, axis=0) * 4).numpy(), a * 4, rtol=1e-6)
  assert all(names == {threading.current_thread().name} for names in seen.values()), seen


def test_one_device_never_uses_streams(devs: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
  seen = _threads_of_launches(monkeypatch)
  a = rng.standard_normal((16, 16), dtype=np.float32)
  np.testing.assert_allclose(((Tensor(a) @ Tensor(a)) + 1).numpy(), a @ a + 1, rtol=1e-4, atol=1e-5)
  assert seen == {Device.DEFAULT: {threading.current_thread().name}}


def test_counters_as_one_after_another(devs: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
  a = rng.standard_normal((32, 32), dtype=np.float32)

  def step() -> tuple[int, int, int]:
    t = Tensor(a).shard(devs, axis=0).realize()
    GlobalCounters.reset()
    ((t * 2 + 1).sum(axis=1) + t.max()).realize()
    return GlobalCounters.kernel_count, GlobalCounters.global_ops, GlobalCounters.global_mem
  side = step()
  monkeypatch.setattr(STREAMS, "value", 0)
  assert step() == side and side[0] >= 4


def test_a_reader_on_another_instance_waits_for_the_writer(devs: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
  """The kernel writing a buffer on one instance is slow; a copy of it to the other instance, and that instance's work
  on the copy, must wait for it."""
  orig = realize.CompiledRunner.__call__

  def slow_on_first(self: Any, *args: Any, **kwargs: Any) -> Any:
    if self.device == devs[0]:
      time.sleep(0.05)
    return orig(self, *args, **kwargs)
  monkeypatch.setattr(realize.CompiledRunner, "__call__", slow_on_first)
  a = rng.standard_normal((16, 8), dtype=np.float32)
  for _ in range(3):
    x = (Tensor(a, device=devs[0]) * 2 + 1).to(devs[1]) * 3 - 1  # written on 0, copied to 1, used on 1
    y = Tensor(a).shard(devs, axis=0).sum(axis=0)  # an all-reduce: each instance reads the other's partial sum
    Tensor.realize_all(x, y)
    np.testing.assert_allclose(x.numpy(), (a * 2 + 1) * 3 - 1, rtol=1e-5)
    np.testing.assert_allclose(y.numpy(), a.sum(axis=0), rtol=1e-4, atol=1e-5)


def test_a_writer_waits_for_a_reader_on_another_instance(devs: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
  """An in-place assign on one instance overwrites what a slow copy to the other instance reads first."""
  orig = realize.BufferCopy.__call__

  def slow_copy(self: Any, *args: Any, **kwargs: Any) -> Any:
    time.sleep(0.05)
    return orig(self, *args, **kwargs)
  monkeypatch.setattr(realize.BufferCopy, "__call__", slow_copy)
  a = rng.standard_normal((8, 8), dtype=np.float32)
  w = Tensor(a, device=devs[0]).realize()
  moved = w.to(devs[1]) + 0.5
  w.assign(w * 10)
  Tensor.realize_all(moved, w)
  np.testing.assert_allclose(moved.numpy(), a + 0.5, rtol=1e-6)
  np.testing.assert_allclose(w.numpy(), a * 10, rtol=1e-6)


def test_a_failing_kernel_leaves_nothing_that_looks_computed(devs: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
  """One instance's kernel raises: the error reaches the caller once the other instance's work ended, and every tensor
  reads right afterwards (what didn't run is computed then)."""
  a = rng.standard_normal((16, 8), dtype=np.float32)
  t = Tensor(a).shard(devs, axis=0).realize()
  outs = [(t * 2 + 1).exp(), (t - 1).sum(axis=1), t.max()]
  _fail_first_kernel_on(devs[1], MemoryError("injected on the second instance"), monkeypatch)
  with pytest.raises(MemoryError, match="injected"):
    Tensor.realize_all(*outs)
  np.testing.assert_allclose(outs[0].numpy(), np.exp(a * 2 + 1), rtol=1e-5)
  np.testing.assert_allclose(outs[1].numpy(), (a - 1).sum(axis=1), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(outs[2].numpy(), a.max(), rtol=1e-6)


def test_a_failed_allocation_leaves_nothing_that_looks_computed(devs: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
  """A MemoryError while this thread allocates an item's buffers (the items handed out before it run or not)."""
  from tg.device import Buffer
  a = rng.standard_normal((16, 8), dtype=np.float32)
  t = Tensor(a).shard(devs, axis=0).realize()
  outs = [(t * 2 + 1).exp(), (t - 1).sum(axis=0)]
  orig, calls = Buffer.allocate, [0]

  def failing(self: Any, *args: Any, **kwargs: Any) -> Any:
    if self.device == devs[1]:
      calls[0] += 1
      if calls[0] == 2:
        raise MemoryError("injected allocation failure")
    return orig(self, *args, **kwargs)
  monkeypatch.setattr(Buffer, "allocate", failing)
  with pytest.raises(MemoryError, match="injected"):
    Tensor.realize_all(*outs)
  monkeypatch.setattr(Buffer, "allocate", orig)
  np.testing.assert_allclose(outs[0].numpy(), np.exp(a * 2 + 1), rtol=1e-5)
  np.testing.assert_allclose(outs[1].numpy(), (a - 1).sum(axis=0), rtol=1e-5, atol=1e-5)


def test_two_threads_realizing_sharded_work_at_once(devs: tuple[str, str]) -> None:
  """Each thread's run waits for the other's (no deadlock between their jobs in the streams), and both are right."""
  a = rng.standard_normal((32, 16), dtype=np.float32)
  results: dict[int, list[np.ndarray]] = {}

  def work(k: int) -> None:
    t = Tensor(a * (k + 1)).shard(devs, axis=0).realize()
    results[k] = [((t @ Tensor(a.T * 1.0).shard(devs)) + t.sum()).numpy() for _ in range(5)]
  threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
  for th in threads:
    th.start()
  for th in threads:
    th.join(timeout=120)
  assert not any(th.is_alive() for th in threads), "a thread hangs"
  for k in range(2):
    want = (a * (k + 1)) @ a.T + (a * (k + 1)).sum()
    for got in results[k]:
      np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


def test_an_in_place_step_interrupted_is_applied_once(devs: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
  """A failure on one instance during an in-place update of a sharded tensor: each part is updated exactly once, whether
  its kernel ran before the failure or after it (as what was left to do)."""
  a = rng.standard_normal((8, 4), dtype=np.float32)
  w = Tensor(a).shard(devs, axis=0).realize()
  _fail_first_kernel_on(devs[0], RuntimeError("injected"), monkeypatch)
  w.assign(w * 2 + 1)
  with pytest.raises(RuntimeError, match="injected"):
    w.realize()
  np.testing.assert_allclose(w.numpy(), a * 2 + 1, rtol=1e-6)
  w.assign(w * 2 + 1).realize()
  np.testing.assert_allclose(w.numpy(), (a * 2 + 1) * 2 + 1, rtol=1e-6)


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT is a POSIX signal")
def test_ctrl_c_waits_for_the_instances(devs: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
  """Ctrl-C while the instances run: KeyboardInterrupt comes once both ended, and the values are right (done, or still
  to do) afterwards."""
  a = rng.standard_normal((16, 8), dtype=np.float32)
  orig, sent = realize.CompiledRunner.__call__, [False]

  def interrupting(self: Any, *args: Any, **kwargs: Any) -> Any:
    if not sent[0]:
      sent[0] = True
      os.kill(os.getpid(), signal.SIGINT)
      time.sleep(0.05)
    return orig(self, *args, **kwargs)
  w = Tensor(a).shard(devs, axis=0).realize()
  monkeypatch.setattr(realize.CompiledRunner, "__call__", interrupting)
  w.assign(w * 3 - 2)
  out = (w + 1).sum(axis=0)
  with pytest.raises(KeyboardInterrupt):
    Tensor.realize_all(w, out)
  monkeypatch.setattr(realize.CompiledRunner, "__call__", orig)
  np.testing.assert_allclose(w.numpy(), a * 3 - 2, rtol=1e-6)
  np.testing.assert_allclose(out.numpy(), (a * 3 - 1).sum(axis=0), rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT is a POSIX signal")
@pytest.mark.parametrize("nth", [0, 1, 2, 3])
def test_ctrl_c_right_after_a_job_is_handed_out(devs: tuple[str, str], monkeypatch: pytest.MonkeyPatch, nth: int) -> None:
  """A Ctrl-C just after the calling thread handed a job to a stream, before it noted it: the job runs (the stream has
  it), so it must be noted done, or the next realize runs it again and an in-place write is applied twice (it was, on
  a loaded machine: w.assign(w * 3 - 2) came out as (w * 3 - 2) * 3 - 2)."""
  a = rng.standard_normal((16, 8), dtype=np.float32)
  orig, calls = streams.Dispatch.submit, [0]

  def submit(self: streams.Dispatch, *args: Any) -> streams.Job:
    job = orig(self, *args)
    calls[0] += 1
    if calls[0] == nth + 1:
      os.kill(os.getpid(), signal.SIGINT)
      for _ in range(1000):  # the signal is handled at one of these bytecodes, unless held
        pass
    return job
  w = Tensor(a).shard(devs, axis=0).realize()
  monkeypatch.setattr(streams.Dispatch, "submit", submit)
  w.assign(w * 3 - 2)
  out = (w + 1).sum(axis=0)
  try:
    Tensor.realize_all(w, out)
  except KeyboardInterrupt:
    pass
  monkeypatch.setattr(streams.Dispatch, "submit", orig)
  np.testing.assert_allclose(w.numpy(), a * 3 - 2, rtol=1e-6)
  np.testing.assert_allclose(out.numpy(), (a * 3 - 1).sum(axis=0), rtol=1e-5, atol=1e-5)


def _stream_jobs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
  """Record the thread that runs each job handed to a stream."""
  names: list[str] = []
  orig = streams.run_job

  def run_job(job: streams.Job, budget: int, broken: list[bool]) -> None:
    names.append(threading.current_thread().name)
    orig(job, budget, broken)
  monkeypatch.setattr(streams, "run_job", run_job)
  return names


def _sharded_step(devs: tuple[str, str], w_np: np.ndarray) -> tuple[Any, Tensor]:
  """A jitted step over weights replicated on both instances: a matmul of the batch split by rows, an all-reduce of
  its column sums, and an in-place update of the weights that needs both."""
  w = Tensor(w_np).shard(devs).realize()

  @TinyJit
  def step(x: Tensor) -> tuple[Tensor, Tensor]:
    out = (x @ w).relu()
    s = out.sum(axis=0)
    w.assign(w * 0.5 + s.reshape(1, -1) * 0.01)
    Tensor.realize_all(out, s, w)
    return out, s
  return step, w


def _reference_step(x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  out = np.maximum(x @ w, 0)
  s = out.sum(axis=0)
  return out, s, w * 0.5 + s * 0.01


@pytest.mark.parametrize("graph", [1, 0], ids=["graphed", "kernel_by_kernel"])
def test_tinyjit_replays_sharded_work_on_the_calling_thread(devs: tuple[str, str], monkeypatch: pytest.MonkeyPatch, graph: int) -> None:
  """A replay of sharded work runs its items one after another on the calling thread, each split over all the cores
  (handed to the streams, a 1024 and a 2048 matmul and a data-parallel MLP step replayed slower on 2 cores: see
  bench/README.md): right on new inputs, every in-place update applied once per call, counted as the capture was."""
  monkeypatch.setattr(JIT_GRAPH, "value", graph)
  names = _stream_jobs(monkeypatch)
  w_np = rng.standard_normal((16, 8), dtype=np.float32)
  step, w = _sharded_step(devs, w_np)
  for i in range(6):
    x_np = rng.standard_normal((12, 16), dtype=np.float32)
    x = Tensor(x_np).shard(devs, axis=0).realize()
    names.clear()
    GlobalCounters.reset()
    out, s = step(x)
    counted = GlobalCounters.kernel_count, GlobalCounters.global_ops, GlobalCounters.global_mem
    ran_on_streams = list(names)
    want_out, want_s, w_np = _reference_step(x_np, w_np)
    np.testing.assert_allclose(out.numpy(), want_out, rtol=1e-5, atol=1e-5, err_msg=f"call {i}")
    np.testing.assert_allclose(s.numpy(), want_s, rtol=1e-5, atol=1e-5, err_msg=f"call {i}")
    np.testing.assert_allclose(w.numpy(), w_np, rtol=1e-5, atol=1e-5, err_msg=f"call {i}")
    if i == 2:
      counted_at_replay = counted
    if i >= 2:  # replays
      assert ran_on_streams == [] and counted == counted_at_replay


@pytest.mark.parametrize("graph", [1, 0], ids=["graphed", "kernel_by_kernel"])
def test_a_tinyjit_replay_failing_on_one_instance_leaves_the_rest_to_do(devs: tuple[str, str], monkeypatch: pytest.MonkeyPatch,
                                                                        graph: int) -> None:
  """A kernel of one instance fails in a replay: what didn't run is done before anything reads it, so the step's
  in-place update is applied exactly once; the next replay goes on from there."""
  monkeypatch.setattr(JIT_GRAPH, "value", graph)
  w_np = rng.standard_normal((16, 8), dtype=np.float32)
  step, w = _sharded_step(devs, w_np)
  for _ in range(3):
    x_np = rng.standard_normal((12, 16), dtype=np.float32)
    step(Tensor(x_np).shard(devs, axis=0))
    w_np = _reference_step(x_np, w_np)[2]
  x_np = rng.standard_normal((12, 16), dtype=np.float32)
  x = Tensor(x_np).shard(devs, axis=0).realize()
  _fail_first_kernel_on(devs[1], MemoryError("injected into a replay"), monkeypatch)
  with pytest.raises(MemoryError, match="injected"):
    step(x)
  w_np = _reference_step(x_np, w_np)[2]
  np.testing.assert_allclose(w.numpy(), w_np, rtol=1e-5, atol=1e-5)
  x_np = rng.standard_normal((12, 16), dtype=np.float32)
  out, s = step(Tensor(x_np).shard(devs, axis=0))
  want_out, want_s, w_np = _reference_step(x_np, w_np)
  np.testing.assert_allclose(out.numpy(), want_out, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(s.numpy(), want_s, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(w.numpy(), w_np, rtol=1e-5, atol=1e-5)


def test_tinyjit_replay_of_sharded_work_checks_divisions_where_the_capture_did(devs: tuple[str, str]) -> None:
  """An integer division by zero in a replay of sharded work raises, and the jit goes on afterwards."""
  @TinyJit
  def f(a: Tensor, b: Tensor) -> Tensor:
    return ((a // b) * 3 + 1).realize()
  a = np.arange(1, 17, dtype=np.int32)
  for _ in range(3):
    b = rng.integers(1, 5, 16).astype(np.int32)
    np.testing.assert_array_equal(f(Tensor(a).shard(devs, axis=0), Tensor(b).shard(devs, axis=0)).numpy(), (a // b) * 3 + 1)
  assert f.div_flags.at
  b[11] = 0
  with pytest.raises(ZeroDivisionError):
    f(Tensor(a).shard(devs, axis=0), Tensor(b).shard(devs, axis=0))
  b[11] = 2
  np.testing.assert_array_equal(f(Tensor(a).shard(devs, axis=0), Tensor(b).shard(devs, axis=0)).numpy(), (a // b) * 3 + 1)


def test_the_cores_are_shared_out(monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5, 6, 7}, raising=False)
  monkeypatch.setattr(cpu.CPU_THREADS, "value", 8)
  assert streams.shares(2) == [(0, 1, 2, 3), (4, 5, 6, 7)]
  assert streams.shares(3) == [(0, 1), (2, 3), (4, 5)]
  monkeypatch.setattr(cpu.CPU_THREADS, "value", 4)  # CPU_THREADS of the cores
  assert streams.shares(2) == [(0, 1), (2, 3)]
  monkeypatch.setattr(cpu.CPU_THREADS, "value", 1)  # fewer cores than instances: a core each, in turn
  assert streams.shares(2) == [(0,), (0,)]


def test_each_instance_splits_on_its_share_of_the_cores(devs: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
  """With two cores for each instance, its split kernels use 2 threads: its stream's thread and one worker of its own."""
  here = tuple(sorted(os.sched_getaffinity(0)))[:1] * 2 if hasattr(os, "sched_getaffinity") else (0, 0)
  monkeypatch.setattr(streams, "shares", lambda n: [here] * n)
  budgets: dict[str, set[int | None]] = {}
  orig = realize.CompiledRunner.__call__

  def call(self: Any, *args: Any, **kwargs: Any) -> Any:
    budgets.setdefault(self.device, set()).add(getattr(cpu._local, "budget", None))
    return orig(self, *args, **kwargs)
  monkeypatch.setattr(realize.CompiledRunner, "__call__", call)
  a = rng.standard_normal((256, 256), dtype=np.float32)
  np.testing.assert_allclose((Tensor(a).shard(devs, axis=0) @ Tensor(a).shard(devs)).numpy(), a @ a, rtol=1e-3, atol=1e-3)
  assert budgets == {devs[0]: {2}, devs[1]: {2}}


def test_a_thread_with_a_budget_splits_on_workers_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.setattr(cpu.CPU_THREADS, "value", 8)
  seen: dict[int, set[int]] = {}
  lock = threading.Lock()

  both = threading.Barrier(2)  # (both callers alive throughout: a finished thread's ident may be given to the next)

  def caller(k: int) -> None:
    cpu.set_thread_budget(2)
    both.wait()
    for _ in range(20):
      def fxn(start: int, end: int) -> None:
        with lock:
          seen.setdefault(k, set()).add(threading.get_ident())
      cpu.run_split(fxn, 100)
    both.wait()
  threads = [threading.Thread(target=caller, args=(k,)) for k in range(2)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert all(len(ids) == 2 for ids in seen.values()), "each thread used itself and one worker"
  assert not seen[0] & seen[1], "workers of their own: no thread served both"


def test_streams_after_fork() -> None:
  """A forked child has none of the parent's stream threads: it starts its own."""
  import subprocess
  if not hasattr(os, "fork"):
    pytest.skip("no fork")
  code = ("import os, sys, numpy as np\n"
          "from tg import Tensor, Device\nfrom tg.engine import streams\nstreams.MIN_ITEM_S = 0.0\n"
          "devs = (Device.DEFAULT, Device.DEFAULT + ':1')\n"
          "if not streams.host_cores(Device.DEFAULT): sys.exit(0)\n"
          "a = np.arange(16, dtype=np.float32).reshape(4, 4)\n"
          "assert ((Tensor(a).shard(devs, axis=0) * 2).numpy() == a * 2).all()\n"
          "pid = os.fork()\n"
          "if pid == 0:\n"
          "  ok = ((Tensor(a).shard(devs, axis=0) + 1).numpy() == a + 1).all(); os._exit(0 if ok else 1)\n"
          "_, status = os.waitpid(pid, 0); sys.exit(os.waitstatus_to_exitcode(status))")
  env = {**os.environ, "DEVICE": Device.DEFAULT}
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False, env=env)
  assert out.returncode == 0, out.stderr
