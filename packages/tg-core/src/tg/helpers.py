"""Small shared utilities: env config (getenv, ContextVar, Context), DEBUG, counters and the disk cache."""
from __future__ import annotations

import contextlib
import functools
import hashlib
import math
import os
import pickle
import sqlite3
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

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


# ---------- configuration from the environment ----------

@functools.cache
def getenv(key: str, default: Any = 0) -> Any:
  """Read an env var, converted to the type of `default` (int by default)."""
  return type(default)(os.getenv(key, default))


class ContextVar:
  """A named setting, initialised from the environment and changeable with `Context(NAME=value)`."""
  _cache: dict[str, ContextVar] = {}
  value: int
  key: str

  def __new__(cls, key: str, default_value: int) -> ContextVar:
    if key in ContextVar._cache:
      return ContextVar._cache[key]
    instance = ContextVar._cache[key] = super().__new__(cls)
    instance.key, instance.value = key, getenv(key, default_value)
    return instance

  def __bool__(self) -> bool: return bool(self.value)
  def __ge__(self, x: int) -> bool: return self.value >= x
  def __gt__(self, x: int) -> bool: return self.value > x
  def __lt__(self, x: int) -> bool: return self.value < x
  def __le__(self, x: int) -> bool: return self.value <= x
  def __repr__(self) -> str: return f"ContextVar({self.key}={self.value})"


class Context(contextlib.ContextDecorator):
  """Temporarily override ContextVars: `with Context(DEBUG=2): ...`."""
  stack: list[dict[str, int]] = [{}]

  def __init__(self, **kwargs: int) -> None:
    self.kwargs = kwargs

  def __enter__(self) -> None:
    self.old = {k: ContextVar._cache[k].value for k in self.kwargs if k in ContextVar._cache}
    for k, v in self.kwargs.items():
      ContextVar(k, v).value = v

  def __exit__(self, *args: Any) -> None:
    for k in self.kwargs:
      if k in self.old:
        ContextVar._cache[k].value = self.old[k]


DEBUG, CACHELEVEL = ContextVar("DEBUG", 0), ContextVar("CACHELEVEL", 2)


# ---------- counters ----------

class GlobalCounters:
  """Totals since the last reset: ops and memory traffic of kernels run, their time, kernel count."""
  global_ops: int = 0
  global_mem: int = 0
  time_sum_s: float = 0.0
  kernel_count: int = 0
  mem_used: int = 0       # bytes in allocated Buffers now (not reset: it is a level, not a total)
  mem_used_peak: int = 0  # the high-water mark of mem_used since the last reset

  @staticmethod
  def reset() -> None:
    GlobalCounters.global_ops, GlobalCounters.global_mem = 0, 0
    GlobalCounters.time_sum_s, GlobalCounters.kernel_count = 0.0, 0
    GlobalCounters.mem_used_peak = GlobalCounters.mem_used


class Timing(contextlib.ContextDecorator):
  def __init__(self, prefix: str = "", enabled: bool = True) -> None:
    self.prefix, self.enabled = prefix, enabled

  def __enter__(self) -> None:
    self.st = time.perf_counter_ns()

  def __exit__(self, *exc: Any) -> None:
    self.et = time.perf_counter_ns() - self.st
    if self.enabled:
      print(f"{self.prefix}{self.et * 1e-6:6.2f} ms")


# ---------- the disk cache: one sqlite file under the user cache dir ----------

def _cache_dir() -> str:
  if sys.platform == "darwin":
    base = os.path.expanduser("~/Library/Caches")
  else:
    base = os.getenv("XDG_CACHE_HOME", os.path.expanduser("~/.cache"))
  return os.path.join(base, "tg")


CACHEDB: str = getenv("CACHEDB", os.path.join(_cache_dir(), "cache.db"))
_db_connection: sqlite3.Connection | None = None
_db_tables: set[str] = set()
_CACHE_VERSION = 1


def _db() -> sqlite3.Connection:
  global _db_connection
  if _db_connection is None:
    os.makedirs(os.path.dirname(CACHEDB), exist_ok=True)
    _db_connection = sqlite3.connect(CACHEDB, timeout=30, isolation_level=None)
    _db_connection.execute("PRAGMA journal_mode=WAL")
  return _db_connection


def _cache_key(key: Any) -> str:
  return hashlib.sha256(pickle.dumps(key)).hexdigest()


def diskcache_get(table: str, key: Any) -> Any:
  """The cached value for `key` in `table`, or None. Nothing is read when CACHELEVEL=0."""
  if CACHELEVEL.value == 0:
    return None
  table = f"{table}_v{_CACHE_VERSION}"
  try:
    row = _db().execute(f"SELECT val FROM '{table}' WHERE key=?", (_cache_key(key),)).fetchone()
  except sqlite3.OperationalError:
    return None  # table not created yet
  return pickle.loads(row[0]) if row is not None else None


def diskcache_put(table: str, key: Any, val: Any) -> Any:
  if CACHELEVEL.value == 0:
    return val
  table = f"{table}_v{_CACHE_VERSION}"
  conn = _db()
  if table not in _db_tables:
    conn.execute(f"CREATE TABLE IF NOT EXISTS '{table}' (key TEXT PRIMARY KEY, val BLOB)")
    _db_tables.add(table)
  conn.execute(f"REPLACE INTO '{table}' (key, val) VALUES (?, ?)", (_cache_key(key), pickle.dumps(val)))
  return val


def diskcache(func: Callable[..., T]) -> Callable[..., T]:
  """Cache a pure function's results on disk, keyed by its arguments."""
  def wrapper(*args: Any, **kwargs: Any) -> T:
    key = (args, tuple(sorted(kwargs.items())))
    if (ret := diskcache_get(func.__name__, key)) is not None:
      return ret
    return diskcache_put(func.__name__, key, func(*args, **kwargs))
  return wrapper


@contextlib.contextmanager
def cpu_time_ns() -> Iterator[list[int]]:
  out = [0]
  st = time.perf_counter_ns()
  yield out
  out[0] = time.perf_counter_ns() - st
