"""Splitting a CPU kernel across threads, the runtime's half: running the slices (see tg.renderer.cpu).

CPU_THREADS - 1 worker threads are shared by every CPU device; the calling thread runs the first slice itself. The
kernel function must release the GIL while it runs (cffi and ctypes calls do). A thread given a budget (CPU device
instances running side by side, engine/streams.py) splits its kernels over that many threads of its own instead.

Each worker waits on a lock of its own, which the caller releases once the worker's slice is posted, and releases
another when the slice is done: two lock operations per worker and launch. concurrent.futures (its queue, futures and
condition variables) cost 2-3x that: launching a kernel that returns at once took 85 us with it and 51 us with the
locks, and 280 and 133 us right after a gc.collect(); a 16M-float sum, 1.73 -> 1.60 ms (torch: 1.60). Each launch still
wakes a Python thread and hands it the GIL (30-53 us on a 2-core VM): a device whose kernels are native code may run
the slices on threads of its own outside Python, and leave only threads with a budget (thread_budget) to run_split.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

from tg.settings import CPU_THREADS


class _Worker:
  """A thread that runs one posted slice at a time. Slices are numbered: a caller interrupted while it waited (Ctrl-C
  in a notebook) leaves its slice's completion behind, and the next caller must not take that for its own."""

  def __init__(self) -> None:
    self.go, self.done = threading.Lock(), threading.Lock()
    self.go.acquire()
    self.done.acquire()
    self.task: tuple[int, Callable[[int, int], object], int, int] | None = None
    self.posted = self.finished = 0  # the number of the last slice posted, and of the last one finished
    self.error: BaseException | None = None  # the exception of slice `finished`, if it raised
    self.thread = threading.Thread(target=self._loop, name="tg_cpu", daemon=True)
    self.thread.start()

  def _loop(self) -> None:
    while True:
      self.go.acquire()
      assert self.task is not None
      n, fxn, start, end = self.task
      error = None
      try:
        fxn(start, end)
      except BaseException as e:  # handed to the caller, which raises it
        error = e
      self.error, self.finished = error, n
      if self.done.locked():  # else a completion nobody waited for is still pending (see wait)
        self.done.release()

  def post(self, fxn: Callable[[int, int], object], start: int, end: int) -> None:
    self.wait()  # the slice of an interrupted caller first: its `go` may not be taken yet
    self.posted += 1
    self.task = (self.posted, fxn, start, end)
    self.go.release()

  def wait(self) -> BaseException | None:
    while self.finished != self.posted:
      # a completion left by an interrupted caller wakes this early, hence the loop. No wakeup can be lost (the worker
      # releases `done` whenever it is held); the timeout only turns a bug here into a slow poll instead of a hang
      self.done.acquire(timeout=0.1)
    return self.error


_workers: list[_Worker] = []
_launch = threading.Lock()  # one split kernel at a time uses the shared workers (callers on other threads wait)
_local = threading.local()  # per thread: `budget`, the threads its split kernels may use (None: CPU_THREADS), and
# `workers`, its own pool when it has a budget (engine/streams.py: each CPU device instance running beside others on
# its share of the cores)


def _reset_after_fork() -> None:
  global _workers, _launch, _local
  _workers, _launch, _local = [], threading.Lock(), threading.local()  # a forked child has none of its parent's threads


os.register_at_fork(after_in_child=_reset_after_fork)


def slices(outer: int, n: int) -> list[tuple[int, int]]:
  """[0, outer) cut into n contiguous slices whose lengths differ by at most one."""
  cuts = [outer * k // n for k in range(n + 1)]
  return [(cuts[k], cuts[k + 1]) for k in range(n)]


def set_thread_budget(n: int | None) -> None:
  """How many threads a kernel split on this thread may use from now on (None: CPU_THREADS, from the shared pool; a
  number: this thread's own workers, so threads with budgets split their kernels at the same time)."""
  _local.budget = n


def thread_budget() -> int | None:
  """The threads a kernel split on this thread may use (set_thread_budget), None when it has no budget of its own."""
  return getattr(_local, "budget", None)


def own_workers() -> list[_Worker]:
  """The workers this thread's split kernels use when it has a budget (set_thread_budget)."""
  return _local.__dict__.setdefault("workers", [])


def run_split(fxn: Callable[[int, int], Any], outer: int) -> None:
  """Call fxn(start, end) once per slice of [0, outer), one slice per thread, and wait for all of them."""
  budget = thread_budget()
  parts = slices(outer, max(1, min(CPU_THREADS.value if budget is None else budget, outer)))
  if len(parts) == 1:
    fxn(*parts[0])
    return
  if budget is not None:
    _run_slices(own_workers(), fxn, parts)
    return
  with _launch:
    _run_slices(_workers, fxn, parts)


def _run_slices(workers: list[_Worker], fxn: Callable[[int, int], Any], parts: list[tuple[int, int]]) -> None:
  while len(workers) < len(parts) - 1:
    workers.append(_Worker())
  for w, (start, end) in zip(workers, parts[1:]):
    w.post(fxn, start, end)
  try:
    fxn(*parts[0])
  finally:  # every posted slice finishes before the caller goes on (they write the same buffers)
    errors = [w.wait() for w in workers[:len(parts) - 1]]
  if (error := next((e for e in errors if e is not None), None)) is not None:
    raise error
