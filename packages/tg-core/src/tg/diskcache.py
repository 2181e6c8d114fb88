"""The disk cache: one sqlite file under the user cache dir, holding compiled programs and BEAM's choices."""
from __future__ import annotations

import hashlib
import os
import pickle
import sqlite3
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from tg.helpers import CACHELEVEL, getenv

T = TypeVar("T")


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
