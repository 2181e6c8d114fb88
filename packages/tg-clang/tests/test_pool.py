"""The C thread pool that runs split kernels (tg_clang.pool): the same numbers as one thread and as Python's threads,
for any thread count, after the pool's threads went to sleep, from several Python threads at once, and in a forked
child (which has none of its parent's threads)."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import tg_clang.pool
import tg_clang.runtime
from tg import Tensor
from tg.helpers import Context
from tg.renderer.cpu_target import cpu_target

pytestmark = pytest.mark.skipif(cpu_target().cross, reason="cross mode runs every kernel in the harness, on one thread")
rng = np.random.default_rng(0)
N = 1 << 21  # (x * 2 + 1).relu() * x over N floats is split (CPU_THREAD_MIN_WORK)


def _work(x: Tensor) -> Tensor:
  return ((x * 2 + 1).relu() * x).realize()


def _expected(x_np: np.ndarray) -> np.ndarray:
  return np.maximum(x_np * 2 + 1, 0) * x_np


@pytest.mark.parametrize("threads", [1, 2, 3, 5, 16])
def test_split_kernel_on_any_number_of_threads(threads: int, monkeypatch: pytest.MonkeyPatch) -> None:
  x_np = rng.standard_normal(N).astype(np.float32)
  x = Tensor(x_np, device="CLANG").realize()
  calls, run = [], tg_clang.pool.run
  monkeypatch.setattr(tg_clang.pool, "run", lambda *a: (calls.append(a[-1]), run(*a)))
  with Context(CPU_THREADS=threads):
    got_pool = _work(x).numpy()
    assert calls == ([threads] if threads > 1 else []), calls  # split over the pool's threads (one thread: no pool)
    monkeypatch.setattr(tg_clang.runtime, "C_POOL", False)
    got_python = _work(x).numpy()
  np.testing.assert_array_equal(got_pool, _expected(x_np))
  np.testing.assert_array_equal(got_python, got_pool)
  # a matmul (a split reduction) and a short outer loop (fewer rows than threads)
  a, b = rng.standard_normal((256, 384)).astype(np.float32), rng.standard_normal((384, 512)).astype(np.float32)
  monkeypatch.setattr(tg_clang.runtime, "C_POOL", True)
  with Context(CPU_THREADS=threads):
    np.testing.assert_allclose((Tensor(a, device="CLANG") @ Tensor(b, device="CLANG")).numpy(), a @ b, rtol=1e-4, atol=1e-3)
    s = rng.standard_normal((3, 1 << 20)).astype(np.float32)
    np.testing.assert_allclose(Tensor(s, device="CLANG").sum(1).numpy(), s.sum(1, dtype=np.float64), rtol=1e-5)


def test_split_kernel_after_the_threads_slept() -> None:
  x_np = rng.standard_normal(N).astype(np.float32)
  x = Tensor(x_np, device="CLANG").realize()
  with Context(CPU_THREADS=2):
    for pause in (0.0, 0.01, 0.3):
      time.sleep(pause)  # the pool's threads spin 200 us after a job, then sleep until the next
      np.testing.assert_array_equal(_work(x).numpy(), _expected(x_np))


def test_split_kernels_from_several_python_threads() -> None:
  xs = [rng.standard_normal(N).astype(np.float32) for _ in range(4)]
  ts = [Tensor(x, device="CLANG").realize() for x in xs]
  results: dict[int, np.ndarray] = {}
  def run(i: int) -> None:
    for _ in range(5):
      results[i] = _work(ts[i]).numpy()
  threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
  with Context(CPU_THREADS=2):
    for t in threads:
      t.start()
    for t in threads:
      t.join()
  for i, x in enumerate(xs):
    np.testing.assert_array_equal(results[i], _expected(x))


def test_split_kernel_in_a_forked_child() -> None:
  code = textwrap.dedent(f"""
    import os, sys, numpy as np
    from tg import Tensor
    from tg.helpers import Context
    x_np = np.arange({N}, dtype=np.float32) / {N}
    x = Tensor(x_np, device="CLANG").realize()
    want = np.maximum(x_np * 2 + 1, 0) * x_np
    with Context(CPU_THREADS=2):
      assert (((x * 2 + 1).relu() * x).numpy() == want).all()  # the parent's pool has its threads now
      pid = os.fork()
      if pid == 0:
        ok = (((x * 2 + 1).relu() * x).numpy() == want).all()
        os._exit(0 if ok else 3)
      _, status = os.waitpid(pid, 0)
      assert ((x * 2 + 1).relu() * x).numpy().tolist() == want.tolist()
    print("child", os.waitstatus_to_exitcode(status))
  """)
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
  assert out.returncode == 0 and "child 0" in out.stdout, out.stderr[-2000:]
