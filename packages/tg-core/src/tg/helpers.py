"""Small shared utilities and counters. The settings (getenv, ContextVar, Context, DEBUG) live in tg.settings and are
re-exported here; the disk cache is in tg.diskcache."""
from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

# the disk cache lives in tg.diskcache; its names stay importable from here
from tg.diskcache import CACHEDB as CACHEDB
from tg.diskcache import diskcache as diskcache
from tg.diskcache import diskcache_get as diskcache_get
from tg.diskcache import diskcache_put as diskcache_put

# the settings registry lives in tg.settings; these are its tinygrad names, re-exported
from tg.settings import CACHELEVEL as CACHELEVEL
from tg.settings import DEBUG as DEBUG
from tg.settings import Context as Context
from tg.settings import ContextVar as ContextVar
from tg.settings import getenv as getenv

T = TypeVar("T")


# ---------- small pure helpers ----------

def prod(xs: Iterable[Any], start: Any = 1) -> Any:
  return math.prod(xs, start=start)  # symbolic Nodes too: it only multiplies


def flatten(xss: Iterable[Iterable[T]]) -> list[T]:
  return [x for xs in xss for x in xs]


def dedup(xs: Iterable[T]) -> list[T]:
  return list(dict.fromkeys(xs))


def all_same(xs: list[Any]) -> bool:
  return all(x == xs[0] for x in xs)


def all_int(xs: tuple[Any, ...]) -> bool:
  return all(isinstance(x, int) for x in xs)


def argsort(xs: list[Any]) -> list[int]:
  return sorted(range(len(xs)), key=xs.__getitem__)


def argfix(*x: Any) -> tuple[Any, ...]:
  """Accept f(1, 2), f((1, 2)) and f([1, 2]) alike, as torch does for shapes and axes."""
  if x and isinstance(x[0], (tuple, list)):
    if len(x) != 1:
      raise ValueError(f"bad arguments {x}: pass either one sequence or several ints")
    return tuple(x[0])
  return x


def make_pair(x: int | tuple[int, ...], cnt: int = 2) -> tuple[int, ...]:
  return (x,) * cnt if isinstance(x, int) else x


def round_up(n: int, m: int) -> int:
  return -(-n // m) * m


def colored(s: str, color: str | None) -> str:
  codes = {"red": 31, "green": 32, "yellow": 33, "blue": 34, "magenta": 35, "cyan": 36, "white": 37}
  return f"\u001b[{codes[color]}m{s}\u001b[0m" if color is not None else s


def ansilen(s: str) -> int:
  import re
  return len(re.sub(r"\x1b\[(K|.*?m)", "", s))


def to_function_name(s: str) -> str:
  return "".join(c if c.isalnum() or c == "_" else f"{ord(c):02X}" for c in s)


def is_finite_number(x: float) -> bool:
  return not (math.isinf(x) or math.isnan(x))


# ---------- counters ----------

class _GlobalCounters:
  """Totals since the last reset: ops and memory traffic of kernels run, their time, kernel count.

  One instance, `GlobalCounters` (tinygrad's name, read and reset the same way). Its fields are slots of an instance,
  not class attributes: every kernel run bumps several, and setting a class attribute costs three times as much."""
  __slots__ = ("global_mem", "global_ops", "kernel_count", "mem_used", "mem_used_peak", "time_sum_s")

  def __init__(self) -> None:
    self.global_ops: int = 0
    self.global_mem: int = 0
    self.time_sum_s: float = 0.0
    self.kernel_count: int = 0
    self.mem_used: int = 0       # bytes in allocated Buffers now (not reset: it is a level, not a total)
    self.mem_used_peak: int = 0  # the high-water mark of mem_used since the last reset

  def reset(self) -> None:
    self.global_ops, self.global_mem, self.time_sum_s, self.kernel_count = 0, 0, 0.0, 0
    self.mem_used_peak = self.mem_used


GlobalCounters = _GlobalCounters()


class Timing(contextlib.ContextDecorator):
  def __init__(self, prefix: str = "", enabled: bool = True) -> None:
    self.prefix, self.enabled = prefix, enabled

  def __enter__(self) -> None:
    self.st = time.perf_counter_ns()

  def __exit__(self, *exc: Any) -> None:
    self.et = time.perf_counter_ns() - self.st
    if self.enabled:
      print(f"{self.prefix}{self.et * 1e-6:6.2f} ms")


@contextlib.contextmanager
def cpu_time_ns() -> Iterator[list[int]]:
  out = [0]
  st = time.perf_counter_ns()
  yield out
  out[0] = time.perf_counter_ns() - st
