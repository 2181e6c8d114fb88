"""Splitting a CPU kernel across threads, the runtime's half: running the slices (see tg.renderer.cpu).

One pool of CPU_THREADS - 1 workers is shared by every CPU device; the calling thread runs the first slice
itself. The kernel function must release the GIL while it runs (cffi and ctypes calls do).
"""
from __future__ import annotations

import concurrent.futures
import os
from collections.abc import Callable

from tg.helpers import getenv

CPU_THREADS: int = getenv("CPU_THREADS", os.cpu_count() or 1)
_pool: concurrent.futures.ThreadPoolExecutor | None = None


def _thread_pool() -> concurrent.futures.ThreadPoolExecutor:
  global _pool
  if _pool is None:
    _pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, CPU_THREADS - 1), thread_name_prefix="tg_cpu")
  return _pool


def slices(outer: int, n: int) -> list[tuple[int, int]]:
  """[0, outer) cut into n contiguous slices whose lengths differ by at most one."""
  cuts = [outer * k // n for k in range(n + 1)]
  return [(cuts[k], cuts[k + 1]) for k in range(n)]


def run_split(fxn: Callable[[int, int], object], outer: int) -> None:
  """Call fxn(start, end) once per slice of [0, outer), one slice per thread, and wait for all of them."""
  parts = slices(outer, max(1, min(CPU_THREADS, outer)))
  futures = [_thread_pool().submit(fxn, start, end) for start, end in parts[1:]]
  fxn(*parts[0])
  for f in futures:
    f.result()
