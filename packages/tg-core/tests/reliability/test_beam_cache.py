"""BEAM's choice, cached on disk, is found again by a second process, whatever its PYTHONHASHSEED: the cache key is
a digest of a canonical text of the kernel, not a pickle of objects that carry per-process hashes."""
import os
import sqlite3
import subprocess
import sys

import numpy as np

from tg import Device, Tensor
from tg.codegen.kernel import Kernel
from tg.engine.schedule import create_schedule
from tg.engine.search import beam_key

SEARCH = """
import numpy as np
import tg.engine.search as search
from tg import Tensor
timed = [0]
_time = search._time
def counted(*args, **kwargs):
  timed[0] += 1
  return _time(*args, **kwargs)
search._time = counted
a = np.arange(256, dtype=np.float32).reshape(16, 16)
got = (Tensor(a) * 2 + 1).sum(axis=1).numpy()
assert np.allclose(got, (a * 2 + 1).sum(axis=1)), got
print("TIMED", timed[0])
"""


def _search(db: str, seed: str) -> int:
  env = {**os.environ, "CACHEDB": db, "DEVICE": Device.DEFAULT, "BEAM": "2", "BEAM_WORKERS": "2", "PYTHONHASHSEED": seed, "CACHELEVEL": "2"}
  p = subprocess.run([sys.executable, "-c", SEARCH], env=env, capture_output=True, text=True, timeout=240)
  assert p.returncode == 0, p.stderr[-3000:]
  return int(p.stdout.split("TIMED")[1])


def test_a_second_process_finds_the_first_ones_choice(tmp_path):
  db = str(tmp_path / "cache.db")
  assert _search(db, "1") > 0, "the first process searches"
  assert _search(db, "2") == 0, "the second process (another hash seed) times nothing: its choice came from the disk cache"
  c = sqlite3.connect(db)
  tables = [r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE name LIKE 'beam_search%'")]
  assert len(tables) == 1 and c.execute(f"SELECT count(*) FROM '{tables[0]}'").fetchone()[0] == 1
  c.close()


def test_the_key_depends_on_the_kernel_and_the_beam_width():
  def ast(x):
    (si,) = create_schedule([x.lazydata])
    return si.ast
  renderer = Device[Device.DEFAULT].renderer
  a = np.ones((4, 4), np.float32)
  k1, k2, k3 = (Kernel(ast(x), renderer) for x in ((Tensor(a) + 1).sum(1), (Tensor(a) + 1).sum(1), (Tensor(a) + 2).sum(1)))
  assert beam_key(k1, Device.DEFAULT, 2) == beam_key(k2, Device.DEFAULT, 2), "equal kernels share a key"
  assert beam_key(k1, Device.DEFAULT, 2) != beam_key(k3, Device.DEFAULT, 2), "another constant is another kernel"
  assert beam_key(k1, Device.DEFAULT, 2) != beam_key(k1, Device.DEFAULT, 3)
