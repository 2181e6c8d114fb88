"""Nothing grows without bound: the UOp intern table holds its nodes weakly, compiled runners don't keep their
kernel graphs, the method cache is bounded, and a dropped TinyJit frees its buffers, graph and programs."""
from __future__ import annotations

import gc
import os
import sys
import weakref

import numpy as np
import pytest

from tg import Device, Tensor, TinyJit
from tg.codegen.uops import UOp, UOps
from tg.engine import realize


def rss_mib() -> float:
  with open("/proc/self/statm") as f:
    return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


needs_proc = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads RSS from /proc/self/statm")
slow_device = Device.DEFAULT == "PYTHON"


def test_uop_interning_is_weak():
  a = UOp(UOps.CONST, None, (), 12345)
  assert UOp(UOps.CONST, None, (), 12345) is a
  ref = weakref.ref(a)
  n = len(UOp._cache)
  del a
  assert ref() is None and len(UOp._cache) == n - 1  # freed at once, no gc pass needed
  f1, f2 = UOp(UOps.CONST, None, (), -0.0), UOp(UOps.CONST, None, (), 0.0)
  assert f1 is not f2 and UOp(UOps.CONST, None, (), float("nan")) is UOp(UOps.CONST, None, (), float("nan"))


def test_intern_table_shrinks_after_kernels():
  """Six matmul sizes compiled: the nodes of their kernel graphs are gone once compiled (was 495 -> 10,695)."""
  gc.collect()
  before = len(UOp._cache)
  for n in (3, 5, 7, 9, 11, 13) if slow_device else (8, 16, 24, 32, 48, 64):
    a, b = np.ones((n, n), np.float32), np.full((n, n), 2, np.float32)
    np.testing.assert_allclose((Tensor(a) @ Tensor(b)).numpy(), a @ b)
  gc.collect()
  assert len(UOp._cache) <= before + 50, f"{before} -> {len(UOp._cache)} interned UOps"


def test_method_cache_is_bounded(monkeypatch):
  monkeypatch.setattr(realize, "METHOD_CACHE_SIZE", 4)
  x = Tensor(np.arange(4, dtype=np.float32)).realize()
  for c in range(10):
    np.testing.assert_allclose((x * (c + 0.5)).numpy(), np.arange(4) * (c + 0.5))
  assert len(realize.method_cache) <= 4
  np.testing.assert_allclose((x * 0.5).numpy(), np.arange(4) * 0.5)  # evicted, built again


def _jit_run(c: float, n: int = 16) -> TinyJit:
  @TinyJit
  def f(x: Tensor, y: Tensor) -> Tensor:
    return ((x @ y) + c).relu().sum(0).realize()
  x, y = Tensor(np.ones((n, n), np.float32)).realize(), Tensor(np.ones((n, n), np.float32)).realize()
  for _ in range(4):
    out = f(x, y)
  np.testing.assert_allclose(out.numpy(), np.full(n, (n + c) * n))
  return f


def test_dropped_jit_frees_buffers_graph_and_programs():
  f = _jit_run(0.25)
  refs = [weakref.ref(b) for ei in f.jit_cache for b in ei.bufs] + [weakref.ref(ei.prg) for ei in f.jit_cache]
  if f.graph is not None:
    refs.append(weakref.ref(f.graph))
  realize.method_cache.clear()  # the programs are shared through the method cache until it lets go of them
  del f
  gc.collect()
  assert all(r() is None for r in refs)


def test_dropped_jits_with_their_own_kernels_free_their_programs(monkeypatch):
  """Each TinyJit has its own kernel (its constant differs): once the method cache is full, every new one pushes an
  old one out, and a dropped jit's programs go with it (before, every runner ever compiled stayed)."""
  monkeypatch.setattr(realize, "METHOD_CACHE_SIZE", 2)
  refs = []
  for i in range(8):
    f = _jit_run(100.0 + i, n=4)
    refs += [weakref.ref(ei.prg) for ei in f.jit_cache]
    del f
  gc.collect()
  alive = {id(p) for r in refs if (p := r()) is not None}  # a kernel every jit shares counts once
  assert len(alive) <= 2


@needs_proc
def test_200_dropped_jits_keep_rss_flat():
  """200 TinyJits made, captured, replayed and dropped (40 on the slow PYTHON interpreter)."""
  n = 40 if slow_device else 200
  for _ in range(10):  # warm up: allocator caches, compiled kernels
    _jit_run(3.0)
  gc.collect()
  r0 = rss_mib()
  for _ in range(n):
    _jit_run(3.0)
  gc.collect()
  grown = rss_mib() - r0
  assert grown < 3.0, f"RSS grew {grown:.2f} MiB over {n} dropped TinyJits"


SHUTDOWN_CHILD = """
import gc
from tg.nn import Linear
from tg.nn.optim import Adam
layers = [Linear(784, 512), Linear(512, 512), Linear(512, 10)]
opt = Adam([l.weight for l in layers])
everything = gc.get_objects()  # (a heap profiler's snapshot) holds the buffers until the modules are torn down
gc.callbacks.append(lambda phase, info: None)
print("done")
"""


def test_buffers_freed_during_interpreter_shutdown_print_nothing():
  """Buffers that live until interpreter shutdown are freed after tg's modules were emptied (GlobalCounters is None
  then): they free quietly, with no "Exception ignored" traceback per buffer on the way out."""
  import subprocess
  r = subprocess.run([sys.executable, "-c", SHUTDOWN_CHILD], capture_output=True, text=True, timeout=120,
                     env={**os.environ, "DEVICE": Device.DEFAULT})
  assert r.returncode == 0 and r.stdout.strip() == "done", r.stderr[-3000:]
  assert "Exception ignored" not in r.stderr, r.stderr[-3000:]
