"""CPU device instances running side by side: a schedule over several of them (Tensor.shard over two instances of a CPU
device) runs each instance's kernels on a thread of its own, every instance on its share of the cores.

Run one after another, each kernel of a sharded op split across all cores, two instances are slower than one device
doing all the work: twice the launches, each split into slices half as large, and every split pays for waking the
cores. Side by side, each instance runs its half on CPU_THREADS / n cores with no more launches than one device.

The calling thread does everything but the kernels themselves: it compiles each item and allocates its buffers (in
schedule order, so what it does is what a run one after another does), counts it in GlobalCounters and marks it done
(engine/pending.py); an instance's thread (a `Stream`) only calls the programs, in the order given. An item waits for
the items of other instances it depends on: those that write memory it reads or writes, or read memory it writes
(memory.root: the memory planner lets buffers share an allocation). Items on one instance run in order, as they would
one after another.

A failure stops nothing that doesn't depend on it: an item that raised, every later item of its instance and every
item that waits on one of those are not run, and stay to do (PendingWork); items that ran are done. The caller waits
for every item it handed out before it returns or raises (with Ctrl-C held: an item either ran or didn't, as in a run
one after another), then raises the first failure in schedule order.

Only for devices whose kernels run on this machine's cores in the calling thread (DeviceSpec.host_cores), and only
when the kernels are large enough to pay for handing them over (`worth`). Not under
PROFILE or DEBUG >= 2 (which time each kernel), nor while TinyJit captures (which records kernels in order).
"""
from __future__ import annotations

import os
import sys
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from tg.device import Buffer, Device
from tg.engine.memory import root
from tg.interrupts import hold_sigint
from tg.runtime.cpu import own_workers, set_thread_budget
from tg.settings import CPU_THREADS, STREAMS

# how much work the items of a run must have, on average, for its instances to run side by side: seconds of one core,
# estimated from each kernel's ops (at 50 GFLOP/s) and bytes (at 10 GB/s). Waking a stream's thread, and a thread
# waiting for another's item, costs 10-100 us each time; with many small items (an eager training step on 2 cores:
# 98 kernels, 0.2 ms each) those waits and the GIL's hand-offs cost more than the overlap gains (measured: 24 -> 27-33
# ms), with few large ones (a sharded 1024 matmul: 3 kernels of 0.3-10 ms per instance) it gains (12.1 -> 11.8 ms)
MIN_ITEM_S = 1e-3
CORE_FLOPS, CORE_BYTES = 50e9, 10e9
SWITCH_S = 5e-5  # the GIL's switch interval while items are handed out (see run_jobs)


class Job:
  """One item handed to a stream: `launch()` runs its program; `after` are the jobs of other streams it waits for."""
  __slots__ = ("after", "done", "error", "launch", "ok")

  def __init__(self, launch: Callable[[], object], after: list[Job]) -> None:
    self.launch, self.after = launch, after
    self.ok = False  # it ran and returned
    self.error: BaseException | None = None
    self.done = threading.Event()


class Stream:
  """A thread that runs the jobs of one device instance in order. A job whose instance failed earlier in this run, or
  which waits for a job that didn't run, is not run."""

  def __init__(self, device: str) -> None:
    self.device = device
    self.queue: deque[tuple[Job, tuple[int, ...], list[bool]]] = deque()
    self.cores: tuple[int, ...] = ()  # the cores this thread is pinned to (its instance's share in the current run)
    self.ready = threading.Condition(threading.Lock())
    threading.Thread(target=self._loop, name=f"tg_stream_{device}", daemon=True).start()

  def submit(self, job: Job, cores: tuple[int, ...], broken: list[bool]) -> None:
    with self.ready:
      self.queue.append((job, cores, broken))
      self.ready.notify()

  def _loop(self) -> None:
    while True:
      with self.ready:
        while not self.queue:
          self.ready.wait()
        job, cores, broken = self.queue.popleft()
      if cores != self.cores:
        self.cores = cores
        _pin(cores)
      run_job(job, len(cores), broken)


def run_job(job: Job, budget: int, broken: list[bool]) -> None:
  """Run `job` once the jobs it waits for ended, with `budget` threads for its split kernels, unless one of them didn't
  run or its instance failed before (`broken`, which a failure sets: later jobs of the instance are in schedule order)."""
  try:
    for dep in job.after:
      dep.done.wait()
    if not broken[0] and all(dep.ok for dep in job.after):
      set_thread_budget(budget)
      job.launch()
      job.ok = True
  except BaseException as e:  # handed to the caller, which raises it
    job.error = e
  finally:
    if not job.ok:
      broken[0] = True
    job.done.set()


def shares(n: int) -> list[tuple[int, ...]]:
  """The cores of each of n instances: CPU_THREADS of the cores this process may use, cut in n equal runs (a core each,
  taken in turn, when there are fewer cores than instances)."""
  usable = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
  usable = usable[:max(1, CPU_THREADS.value)]
  per = max(1, len(usable) // n)
  return [tuple(usable[(k * per + i) % len(usable)] for i in range(per)) for k in range(n)]


def _pin(cores: tuple[int, ...]) -> None:
  """Keep this thread (and the workers it starts) on `cores`. Unpinned, the scheduler at times ran both instances'
  threads on one core for a whole kernel (a sharded 1024 matmul took 12 ms or 18-20 ms, by chance)."""
  if hasattr(os, "sched_setaffinity"):
    try:
      os.sched_setaffinity(0, cores)
      for w in own_workers():  # (started on an earlier share)
        if w.thread.native_id is not None:
          os.sched_setaffinity(w.thread.native_id, cores)
    except OSError:  # (a core taken away meanwhile, a container that forbids it: left where the scheduler puts it)
      pass


_streams: dict[str, Stream] = {}
_streams_lock = threading.Lock()


def _reset_after_fork() -> None:
  global _streams, _streams_lock, _one_run
  _streams, _streams_lock, _one_run = {}, threading.Lock(), threading.Lock()  # a forked child has none of its parent's threads


os.register_at_fork(after_in_child=_reset_after_fork)


def stream(device: str) -> Stream:
  with _streams_lock:
    if (s := _streams.get(device)) is None:
      s = _streams[device] = Stream(device)
    return s


def host_cores(device: str) -> bool:
  """Whether `device` runs its kernels on this machine's cores, in the calling thread (DeviceSpec.host_cores)."""
  return bool(Device[device].spec.host_cores)


def several_cpu_instances(devices: set[str]) -> bool:
  """Whether `devices` are two or more instances that could run side by side (their kernels on this machine's cores)."""
  return STREAMS.value > 0 and len(devices) >= 2 and all(host_cores(d) for d in devices)


def worth(estimates: Sequence[tuple[int, int]]) -> bool:
  """Whether items with these (ops, bytes) estimates are large enough, on average, to run side by side (MIN_ITEM_S)."""
  work_s = sum(ops / CORE_FLOPS + nbytes / CORE_BYTES for ops, nbytes in estimates)
  return work_s >= MIN_ITEM_S * len(estimates)


class Dispatch:
  """Hands a run's items to the streams of their devices, in schedule order, each waiting for the items of other
  devices it depends on. `wait()` returns once every item handed out finished (run or not)."""

  def __init__(self, devices: Sequence[str]) -> None:
    self.cores = shares(len(devices))
    self.index = {d: k for k, d in enumerate(devices)}
    self.broken: dict[str, list[bool]] = {d: [False] for d in devices}
    self.jobs: list[Job] = []
    self.writer: dict[Buffer, tuple[str, Job]] = {}              # memory root -> the last job writing it
    self.readers: dict[Buffer, list[tuple[str, Job]]] = {}       # memory root -> the jobs reading it since

  def submit(self, device: str, outputs: Sequence[Buffer], inputs: Sequence[Buffer], launch: Callable[[], object]) -> Job:
    after: dict[int, Job] = {}
    outs, ins = {root(b) for b in outputs}, {root(b) for b in inputs}
    for r in outs | ins:
      if (w := self.writer.get(r)) is not None and w[0] != device:
        after[id(w[1])] = w[1]
    for r in outs:
      for d, j in self.readers.get(r, ()):
        if d != device:
          after[id(j)] = j
    job = Job(launch, list(after.values()))
    for r in outs:
      self.writer[r] = (device, job)
      self.readers[r] = []
    for r in ins - outs:
      self.readers.setdefault(r, []).append((device, job))
    self.jobs.append(job)
    stream(device).submit(job, self.cores[self.index[device]], self.broken[device])
    return job

  def wait(self) -> None:
    """Until every job handed out has ended (the caller holds Ctrl-C: see run_jobs)."""
    for job in self.jobs:
      job.done.wait()


def first_error(jobs: Sequence[Job]) -> BaseException | None:
  return next((j.error for j in jobs if j.error is not None), None)


def run_jobs(items: Sequence[Any], device: Callable[[Any], str], prepare: Callable[[Any], tuple[Sequence[Buffer], Sequence[Buffer],
             Callable[[], object]]], finish: Callable[[Any], None]) -> None:
  """Run `items` side by side on their devices' streams: `prepare(item)` (on this thread, in order: allocating its
  buffers) gives its outputs, inputs and what launches it; `finish(item)` is called here for each item that ran,
  in order, once all have ended. Raises what this thread raised while preparing, else the first item's error."""
  with _one_run:
    _run_jobs(items, device, prepare, finish)


# one run at a time hands out jobs: two threads realizing at once could each leave a job waiting, in one stream, behind
# a job of the other's that waits for one of its own queued behind it in another stream (a deadlock)
_one_run = threading.Lock()


def _run_jobs(items: Sequence[Any], device: Callable[[Any], str], prepare: Callable[[Any], tuple[Sequence[Buffer], Sequence[Buffer],
              Callable[[], object]]], finish: Callable[[Any], None]) -> None:
  d = Dispatch(list(dict.fromkeys(device(it) for it in items)))
  handed: list[tuple[Any, Job]] = []
  switch = sys.getswitchinterval()
  try:
    # while this thread hands out items it holds the GIL, and a stream whose kernel returned waits for it: up to the
    # switch interval (5 ms) each time, unless that is short
    sys.setswitchinterval(min(switch, SWITCH_S))
    for it in items:
      outputs, inputs, launch = prepare(it)
      with hold_sigint():  # handed out and noted as one step: a Ctrl-C between the two left a job that ran unmarked (an
        # in-place write then ran again on the next realize: w.assign(w * 3 - 2) applied twice), or one noted that
        # never reached its stream (the wait below then hung)
        handed.append((it, d.submit(device(it), outputs, inputs, launch)))
  finally:
    sys.setswitchinterval(switch)
    with hold_sigint():  # every job handed out ends, and each that ran is marked, before the caller goes on: Ctrl-C waits
      d.wait()
      for it, job in handed:
        if job.ok:
          finish(it)
  if (error := first_error([job for _, job in handed])) is not None:
    raise error
