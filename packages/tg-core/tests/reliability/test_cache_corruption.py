"""A damaged disk cache is a miss, never a failed compile or a crashed process.

Each case fills a fresh cache in one process, damages it (the sqlite file truncated, overwritten with random bytes,
pages corrupted; a cached compiled object cut in half or bit-flipped), and runs the same kernel in a second process:
it must exit 0 with the right numbers, say once on stderr which file was damaged, and leave a cache that a third
process uses without a word. Every process has its own CACHEDB, so the user's cache is never touched.
"""
import os
import sqlite3
import subprocess
import sys

import pytest

from tg import Device

KERNEL = """
import numpy as np
from tg import Tensor
a = np.arange(64, dtype=np.float32).reshape(8, 8)
got = (Tensor(a) * 3 + 1).sum(axis=1).numpy()
assert np.allclose(got, (a * 3 + 1).sum(axis=1)), got
print("OK")
"""


def _run(db: str, code: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
  env = {**os.environ, "CACHEDB": db, "DEVICE": Device.DEFAULT, "CACHELEVEL": "2", "DISABLE_COMPILER_CACHE": "0",
         "XDG_CACHE_HOME": os.path.dirname(db)}
  return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout)


def _ok(p: subprocess.CompletedProcess[str]) -> None:
  assert p.returncode == 0 and "OK" in p.stdout, f"rc={p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr[-3000:]}"


def _checkpoint(db: str) -> None:
  """Move the WAL into the database file, so that damaging the file damages every entry."""
  c = sqlite3.connect(db)
  c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
  c.close()


def _entries(db: str) -> list[tuple[str, str, bytes]]:
  c = sqlite3.connect(db)
  tables = [r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")]
  rows = [(t, k, v) for t in tables for k, v in c.execute(f"SELECT key, val FROM '{t}'")]
  c.close()
  return rows


def _rewrite_entries(db: str, damage) -> int:
  rows = [(t, k, v) for t, k, v in _entries(db) if t.startswith("compile_")]
  c = sqlite3.connect(db)
  for t, k, v in rows:
    c.execute(f"UPDATE '{t}' SET val=? WHERE key=?", (damage(bytes(v)), k))
  c.commit()
  c.close()
  return len(rows)


def _flip(v: bytes) -> bytes:
  b = bytearray(v)
  for i in range(60, len(b), 61):  # past any header: the ELF/program bytes themselves
    b[i] ^= 0x5A
  return bytes(b)


def _damage_file(db: str, how: str) -> None:
  size = os.path.getsize(db)
  if how == "truncated":
    os.truncate(db, size // 2 + 100)  # not a whole number of pages
  elif how == "random_bytes":
    with open(db, "wb") as f:
      f.write(os.urandom(size))
  elif how == "corrupt_pages":  # the header survives, every later page is garbage
    with open(db, "r+b") as f:
      f.seek(4096)
      f.write(os.urandom(size - 4096))
  elif how == "empty_header":
    with open(db, "r+b") as f:
      f.write(b"\0" * 100)


@pytest.fixture(scope="module")
def filled(tmp_path_factory) -> bytes:
  """A cache holding the kernel's compiled object, made once for the module."""
  db = str(tmp_path_factory.mktemp("filled") / "cache.db")
  _ok(_run(db, KERNEL))
  if not os.path.exists(db):
    return b""
  _checkpoint(db)
  with open(db, "rb") as f:
    return f.read()


def _warned_once(p: subprocess.CompletedProcess[str], db: str) -> None:
  lines = [ln for ln in p.stderr.splitlines() if "CacheWarning" in ln]
  assert len(lines) == 1 and db in lines[0], f"expected one warning naming {db}:\n{p.stderr[-3000:]}"


def _fill_compiled(tmp_path, filled: bytes) -> str:
  db = str(tmp_path / "cache.db")
  with open(db, "wb") as f:
    f.write(filled)
  if not any(t.startswith("compile_") for t, _, _ in _entries(db)):
    pytest.skip(f"{Device.DEFAULT} caches no compiled objects")
  return db


@pytest.mark.parametrize("how", ["truncated", "random_bytes", "corrupt_pages"])
def test_a_damaged_database_is_rebuilt(tmp_path, filled, how):
  db = _fill_compiled(tmp_path, filled)
  _damage_file(db, how)
  p = _run(db, KERNEL)
  _ok(p)
  if how != "corrupt_pages" or "CacheWarning" in p.stderr:  # garbage pages that no lookup reads may go unnoticed
    _warned_once(p, db)
  again = _run(db, KERNEL)
  _ok(again)
  assert "CacheWarning" not in again.stderr, again.stderr


@pytest.mark.parametrize("damage", [lambda v: v[:len(v) // 2], _flip], ids=["cut_in_half", "bit_flipped"])
def test_a_damaged_compiled_object_is_recompiled(tmp_path, filled, damage):
  db = _fill_compiled(tmp_path, filled)
  _rewrite_entries(db, damage)
  p = _run(db, KERNEL)
  _ok(p)
  _warned_once(p, db)
  again = _run(db, KERNEL)
  _ok(again)
  assert "CacheWarning" not in again.stderr, again.stderr
  from tg.diskcache import unseal
  assert all(unseal(v) is not None for t, _, v in _entries(db) if t.startswith("compile_")), "the entries were rebuilt"


DIRECT = """
from tg.helpers import diskcache_get, diskcache_put
print("GOT", repr(diskcache_get("t", ("k", 1))))
diskcache_put("t", ("k", 1), b"value" * 100)
assert diskcache_get("t", ("k", 1)) == b"value" * 100
print("OK")
"""


@pytest.mark.parametrize("how", ["truncated", "empty_header"])
def test_get_and_put_survive_a_broken_database_on_any_device(tmp_path, how):
  db = str(tmp_path / "cache.db")
  first = _run(db, DIRECT)
  _ok(first)
  assert "GOT None" in first.stdout
  _checkpoint(db)
  _damage_file(db, how)
  p = _run(db, DIRECT)
  _ok(p)
  _warned_once(p, db)
  assert os.path.exists(db + ".broken"), "the damaged file is kept aside"
  assert "GOT None" in p.stdout, "a broken database is a miss"


def test_a_sealed_value_must_match_its_length_and_checksum():
  from tg.diskcache import seal, unseal
  blob = seal(b"compiled object" * 50)
  assert unseal(blob) == b"compiled object" * 50 and unseal(seal(b"")) == b""
  for bad in (blob[:len(blob) // 2], blob + b"x", blob[:-1] + bytes([blob[-1] ^ 1]), b"", b"tgc2", None, "text", blob[:20]):
    assert unseal(bad) is None


def test_a_directory_that_cannot_hold_a_database_runs_without_the_cache(tmp_path):
  blocker = tmp_path / "file"
  blocker.write_text("not a directory")
  p = _run(str(blocker / "cache.db"), KERNEL)
  _ok(p)


def test_a_cachedb_that_names_a_directory_is_left_alone(tmp_path):
  """A CACHEDB naming a directory (a user's mistake) runs without the cache: the directory isn't moved aside as a
  "broken database" (it was: renamed to <dir>.broken, a fresh sqlite file in its place)."""
  folder = tmp_path / "mydata"
  folder.mkdir()
  (folder / "notes.txt").write_text("precious")
  p = _run(str(folder), "from tg.diskcache import diskcache_put\ndiskcache_put('t', 'k', 1)\n" + KERNEL)  # (any device uses it)
  _ok(p)
  assert "running without it" in p.stderr
  assert folder.is_dir() and (folder / "notes.txt").read_text() == "precious"
  assert not any(x.name.startswith("mydata.broken") for x in tmp_path.iterdir())


def test_an_empty_cachedb_turns_the_cache_off_and_writes_nothing(tmp_path):
  env = {**os.environ, "CACHEDB": "", "DEVICE": Device.DEFAULT, "CACHELEVEL": "2", "DISABLE_COMPILER_CACHE": "0"}
  p = subprocess.run([sys.executable, "-c", KERNEL], env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
  _ok(p)
  assert list(tmp_path.iterdir()) == [] and "CacheWarning" not in p.stderr


WRITER = """
import sys
from tg.helpers import diskcache_get, diskcache_put
me = int(sys.argv[1])
for i in range(100):
  diskcache_put("conc", ("k", i % 40), bytes([i % 40]) * (1000 + i % 40))
  got = diskcache_get("conc", ("k", (i * 7) % 40))
  assert got is None or got == bytes([(i * 7) % 40]) * (1000 + (i * 7) % 40), (i, got[:8])
print("OK")
"""


def test_concurrent_writers_stay_consistent(tmp_path):
  db = str(tmp_path / "cache.db")
  env = {**os.environ, "CACHEDB": db, "CACHELEVEL": "2"}
  procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(n)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
           for n in range(3)]
  for p in procs:
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0 and "OK" in out, err[-3000:]
    assert "CacheWarning" not in err, err
  rows = [(k, v) for t, k, v in _entries(db) if t.startswith("conc")]
  assert len(rows) == 40


def test_processes_that_find_the_damage_together_repair_it_once(tmp_path):
  db = str(tmp_path / "cache.db")
  _ok(_run(db, DIRECT))
  _checkpoint(db)
  _damage_file(db, "random_bytes")
  env = {**os.environ, "CACHEDB": db, "CACHELEVEL": "2"}
  procs = [subprocess.Popen([sys.executable, "-c", DIRECT], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
  for p in procs:
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0 and "OK" in out, err[-3000:]
  rows = [v for t, _, v in _entries(db) if t.startswith("t_")]
  assert len(rows) == 1, "one working database, holding the entry"
