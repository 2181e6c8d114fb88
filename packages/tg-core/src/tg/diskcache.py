"""The disk cache: one sqlite file under the user cache dir, holding compiled programs and BEAM's choices.

It is only a cache, so nothing read from it is trusted and nothing about it may fail a computation:
- every value is stored sealed with its length and sha256; a value that doesn't match (a flipped bit, a cut blob)
  or doesn't unpickle is a miss, deleted so that it is rebuilt. Compiled shared objects are loaded with dlopen,
  where a damaged file means SIGBUS or an ld.so assertion, not an exception: they must never reach it damaged.
- a database sqlite can't read (truncated, overwritten, corrupt pages) is moved aside to `<CACHEDB>.broken` and a
  new one is started; if even that fails the cache is off for this process. Each is said once on stderr. Only a
  regular file is ever moved: a CACHEDB that names a directory, or a file sqlite can't open at all (no permission),
  turns the cache off for this process and is left as it is; an empty CACHEDB turns it off without a word.
- keys are digests of a canonical text (`stable_key`), the same in every process and under every PYTHONHASHSEED.
Several processes may use one file at once: sqlite's WAL mode serializes the writers, and a lock file makes the
repair of a broken database happen once, not once per process.
"""
from __future__ import annotations

import dataclasses
import enum
import hashlib
import os
import pickle
import sqlite3
import stat
import struct
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from tg.interrupts import hold_sigint
from tg.settings import CACHEDB as _CACHEDB_SETTING
from tg.settings import CACHELEVEL

T = TypeVar("T")

CACHEDB: str = _CACHEDB_SETTING.value  # read once, at import (see tg.settings)
_CACHE_VERSION = 2  # 2: sealed values, canonical keys (tables of version 1 are never read)


class CacheWarning(RuntimeWarning):
  """The disk cache was damaged or unusable; tg went on without the damaged part."""


# ---------- sealed values: length and checksum travel with the bytes ----------

_SEAL = struct.Struct("<4sQ32s")  # magic, payload length, sha256 of the payload
_MAGIC = b"tgc2"


def seal(payload: bytes) -> bytes:
  return _SEAL.pack(_MAGIC, len(payload), hashlib.sha256(payload).digest()) + payload


def unseal(blob: Any) -> bytes | None:
  """The payload of a sealed blob, or None when anything about it is wrong."""
  if not isinstance(blob, bytes) or len(blob) < _SEAL.size:
    return None
  magic, length, digest = _SEAL.unpack_from(blob)
  payload = blob[_SEAL.size:]
  if magic != _MAGIC or length != len(payload) or hashlib.sha256(payload).digest() != digest:
    return None
  return payload


# ---------- canonical keys ----------

def _canonical(x: Any, out: list[str], seen: dict[tuple[type, Any], int]) -> None:
  """Append a text for `x` that depends only on its value: no id(), no hash(), no set or dict iteration order."""
  if x is None or isinstance(x, (bool, int, str, bytes)):
    out.append(repr(x))
  elif isinstance(x, float):
    out.append(x.hex())
  elif isinstance(x, enum.Enum):
    out.append(f"{type(x).__qualname__}.{x.name}")
  elif isinstance(x, (tuple, list)):
    out.append("(" if isinstance(x, tuple) else "[")
    for v in x:
      _canonical(v, out, seen)
      out.append(",")
    out.append(")" if isinstance(x, tuple) else "]")
  elif isinstance(x, (set, frozenset, dict)):
    items = sorted(stable_key(kv) for kv in (x.items() if isinstance(x, dict) else x))
    out.append(f"{type(x).__name__}{{{','.join(items)}}}")
  elif dataclasses.is_dataclass(x) or hasattr(x, "render"):  # a dataclass (LazyOp, View, DType, ...) or a symbolic Node
    memo = (type(x), x)
    if (ref := seen.get(memo)) is not None:  # a shared subgraph is written once: a DAG's text stays linear in its size
      out.append(f"@{ref}")
      return
    seen[memo] = len(seen)
    out.append(f"{type(x).__module__}.{type(x).__qualname__}(")
    if dataclasses.is_dataclass(x):
      for f in dataclasses.fields(x):
        _canonical(getattr(x, f.name), out, seen)
        out.append(",")
    else:
      out.append(repr(x.render(ctx="DEBUG")))
    out.append(")")
  else:
    raise TypeError(f"a disk cache key can't hold a {type(x).__qualname__}: it has no canonical form that is the same in every process")


def stable_key(x: Any) -> str:
  """The sha256 of `x`'s canonical text: equal values give the same key in every process (unlike pickle, which
  carries cached hashes, and hash(), which PYTHONHASHSEED changes)."""
  out: list[str] = []
  _canonical(x, out, {})
  return hashlib.sha256("".join(out).encode()).hexdigest()


# ---------- the database ----------

class _Store:
  conn: sqlite3.Connection | None = None
  pid: int = -1                    # a connection is not shared with a forked child: it opens its own
  ident: tuple[int, int] | None = None  # (st_dev, st_ino) of the file we opened: only that file is ever moved aside
  tables: set[str] = set()
  disabled: bool = False           # the cache could not be opened even after a repair: off for this process
  warned: set[str] = set()


_lock = threading.RLock()  # one connection per process, used from any thread


def _warn_once(kind: str, msg: str) -> None:
  if kind not in _Store.warned:
    _Store.warned.add(kind)
    warnings.warn(f"tg: {msg}", CacheWarning, stacklevel=2)


@contextmanager
def _file_lock() -> Iterator[None]:
  """Excludes other processes while a database is opened or moved aside (no lock where fcntl or the file is missing)."""
  fd = None
  try:
    with hold_sigint():  # a Ctrl-C right after os.open returned would lose fd and, after flock, its lock: held forever
      try:
        import fcntl
        fd = os.open(CACHEDB + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
      except (ImportError, OSError):
        pass
    yield
  finally:
    if fd is not None:
      os.close(fd)  # releases the lock


def _open() -> sqlite3.Connection:
  os.makedirs(os.path.dirname(os.path.abspath(CACHEDB)), exist_ok=True)
  with _file_lock():
    try:  # the file this attempt sees: if it proves damaged, only this file is moved aside, never a newer one
      st = os.stat(CACHEDB)
      _Store.ident = (st.st_dev, st.st_ino)
    except OSError:
      _Store.ident = None
    conn = sqlite3.connect(CACHEDB, timeout=30, isolation_level=None, check_same_thread=False)
    try:
      conn.execute("PRAGMA journal_mode=WAL")
      conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # reads the schema: a damaged header fails here
    except BaseException:
      conn.close()
      raise
    st = os.stat(CACHEDB)
  _Store.conn, _Store.pid, _Store.ident, _Store.tables = conn, os.getpid(), (st.st_dev, st.st_ino), set()
  return conn


def _close() -> None:
  if _Store.conn is not None and _Store.pid == os.getpid():
    try:
      _Store.conn.close()
    except sqlite3.Error:
      pass
  _Store.conn = None


def _db() -> sqlite3.Connection:
  if _Store.conn is None or _Store.pid != os.getpid():
    _Store.conn = None
    return _open()
  return _Store.conn


def _is_busy(e: sqlite3.Error | OSError) -> bool:
  return isinstance(e, sqlite3.OperationalError) and ("locked" in str(e) or "busy" in str(e))


def _not_damage(e: sqlite3.Error | OSError) -> bool:
  """Errors that say nothing about the file's health (a value too big, a read-only file): skipped, never repaired."""
  return isinstance(e, (sqlite3.DataError, sqlite3.IntegrityError, sqlite3.ProgrammingError, sqlite3.InterfaceError)) or \
         (isinstance(e, sqlite3.OperationalError) and "readonly" in str(e))


def _unopenable(e: sqlite3.Error | OSError) -> bool:
  """sqlite can't open CACHEDB at all: a directory, a file it may not read, a path through something that isn't a
  directory. Nothing says the file is damaged (a damaged one opens, then fails to read), so it is never moved aside."""
  if isinstance(e, sqlite3.OperationalError) and "unable to open" in str(e):
    return True
  try:
    st = os.stat(CACHEDB)
  except OSError:
    return False
  return not stat.S_ISREG(st.st_mode)


def _repair(e: sqlite3.Error | OSError) -> None:
  """`e` says the database can't be read: move it (with its WAL files) aside and start a new one."""
  _close()
  moved = ""
  with _file_lock():
    try:
      st = os.stat(CACHEDB)
      # another process may have repaired it already: a file that isn't the one we opened is the new one
      if (st.st_dev, st.st_ino) == _Store.ident and stat.S_ISREG(st.st_mode):  # (never a directory the user named)
        for suffix in ("-wal", "-shm", ""):  # the WAL first: a stale one must never be replayed into the new database
          if os.path.exists(CACHEDB + suffix):
            os.replace(CACHEDB + suffix, f"{CACHEDB}.broken{suffix}")
        moved = f"; moved it to {CACHEDB}.broken"
    except OSError:
      pass
  _Store.ident = None
  try:
    _open()
    _warn_once("db", f"the disk cache {CACHEDB} could not be read ({e}){moved} and started a new one")
  except (sqlite3.Error, OSError) as e2:
    _Store.disabled = True
    _warn_once("db", f"the disk cache {CACHEDB} could not be read ({e}) nor recreated ({e2}): running without it")


def _run(fn: Callable[[sqlite3.Connection], T], default: T) -> T:
  """fn(connection), or `default` when the cache can't answer (repaired for the next call where it is broken)."""
  if _Store.disabled or not CACHEDB:
    return default
  with _lock:
    for attempt in range(2):
      if _Store.disabled:
        return default
      try:
        return fn(_db())
      except (sqlite3.Error, OSError) as e:
        if isinstance(e, sqlite3.OperationalError) and str(e).startswith("no such table"):
          return default
        if _is_busy(e) or _not_damage(e):  # e.g. another process held it for the whole timeout
          _warn_once("skip", f"the disk cache {CACHEDB} could not be used ({e}): skipped it this time")
          return default
        if _unopenable(e):
          _close()
          _Store.disabled = True
          _warn_once("db", f"the disk cache {CACHEDB} could not be opened ({e}): running without it")
          return default
        if attempt == 0:
          _repair(e)
    return default


def _table(table: str) -> str:
  return f"{table}_v{_CACHE_VERSION}"


def diskcache_get(table: str, key: Any) -> Any:
  """The cached value for `key` in `table`, or None. Nothing is read when CACHELEVEL=0.

  `key` is a `stable_key` digest or anything `stable_key` accepts (str, bytes, numbers, enums, tuples, dataclasses)."""
  if CACHELEVEL.value == 0:
    return None
  name, k = _table(table), stable_key(key)
  blob = _run(lambda c: c.execute(f"SELECT val FROM '{name}' WHERE key=?", (k,)).fetchone(), None)
  if blob is None:
    return None
  if (payload := unseal(blob[0])) is not None:
    try:
      return pickle.loads(payload)
    except Exception:  # sealed by us, yet unreadable: written by another version of a class
      pass
  _run(lambda c: c.execute(f"DELETE FROM '{name}' WHERE key=?", (k,)), None)
  _warn_once("entry", f"a damaged entry in the disk cache {CACHEDB} (table {name}) was ignored and will be rebuilt")
  return None


def diskcache_put(table: str, key: Any, val: Any) -> Any:
  """Store `val` under `key` (see diskcache_get) and return it. A cache that can't be written is skipped."""
  if CACHELEVEL.value == 0:
    return val
  name, k, blob = _table(table), stable_key(key), seal(pickle.dumps(val))

  def put(c: sqlite3.Connection) -> None:
    if name not in _Store.tables:
      c.execute(f"CREATE TABLE IF NOT EXISTS '{name}' (key TEXT PRIMARY KEY, val BLOB)")
      _Store.tables.add(name)
    c.execute(f"REPLACE INTO '{name}' (key, val) VALUES (?, ?)", (k, blob))
  _run(put, None)
  return val


def diskcache(func: Callable[..., T]) -> Callable[..., T]:
  """Cache a pure function's results on disk, keyed by its arguments (which `stable_key` must accept)."""
  def wrapper(*args: Any, **kwargs: Any) -> T:
    key = (args, tuple(sorted(kwargs.items())))
    if (ret := diskcache_get(func.__name__, key)) is not None:
      return ret
    return diskcache_put(func.__name__, key, func(*args, **kwargs))
  return wrapper
