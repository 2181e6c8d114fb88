"""A failure while realizing (a MemoryError from the allocator, a compile error, a kernel that raises, Ctrl-C)
leaves every tensor with its right value or still to compute: a buffer counts as holding its value only once
the kernel that writes it ran (engine/realize.py). Each fault is injected at every point of a schedule in turn,
then the values are read back and compared with numpy, and the process goes on computing."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

from tg import Device, Tensor
from tg.device import Buffer
from tg.engine import realize
from tg.helpers import Context

rng = np.random.default_rng(0)


def arr(*shape: int) -> np.ndarray:
  return rng.standard_normal(shape).astype(np.float32)


class Injected(Exception):
  pass


@contextmanager
def fail_on(obj: Any, name: str, n: int, exc: Callable[[], BaseException]) -> Iterator[list[int]]:
  """obj.name raises exc() on its n-th call (1-based) while inside; yields the call count."""
  orig = getattr(obj, name)
  calls = [0]

  def wrapper(*args: Any, **kwargs: Any) -> Any:
    calls[0] += 1
    if calls[0] == n:
      raise exc()
    return orig(*args, **kwargs)

  setattr(obj, name, wrapper)
  try:
    yield calls
  finally:
    setattr(obj, name, orig)


def graph(a_np: np.ndarray, w_np: np.ndarray) -> tuple[list[Tensor], list[np.ndarray]]:
  """Several kernels that depend on each other: elementwise, a reduction, a matmul and what reads them."""
  a, w = Tensor(a_np).realize(), Tensor(w_np).realize()
  b = a * 2 + 1
  c = (a + 3).sum(axis=1)
  d = (b @ w).relu()
  e = d.sum() + c.max()
  bn = a_np * 2 + 1
  cn = (a_np + 3).sum(axis=1)
  dn = np.maximum(bn @ w_np, 0)
  return [b, c, d, e], [bn, cn, dn, dn.sum() + cn.max()]


def check(ts: list[Tensor], want: list[np.ndarray]) -> None:
  for t, w in zip(ts, want):
    np.testing.assert_allclose(t.numpy(), w, rtol=1e-4, atol=1e-4)


def inject_everywhere(obj: Any, name: str, exc: Callable[[], BaseException], before: Callable[[], None] = lambda: None) -> int:
  """Fail the n-th call of obj.name for n = 1, 2, ... until a realize gets through; every time, the tensors
  read back right afterwards. Returns how many points failed."""
  a_np, w_np = arr(8, 16), arr(16, 4)
  n = 1
  while True:
    ts, want = graph(a_np, w_np)
    before()
    with fail_on(obj, name, n, exc) as calls:
      try:
        Tensor.realize_all(*ts)
      except (Injected, MemoryError, KeyboardInterrupt):
        pass
      else:
        assert calls[0] < n, "the fault was swallowed"
        check(ts, want)
        return n - 1
    check(ts, want)  # right values: recomputed where the kernel didn't run
    check(*graph(a_np, w_np))  # and the process goes on computing
    n += 1


def test_issue_example_memory_error():
  a = Tensor(np.arange(8, dtype=np.float32)).realize()
  b = a * 2 + 1
  c = (a + 3).sum()
  with fail_on(Buffer, "allocate", 2, lambda: MemoryError("injected")), pytest.raises(MemoryError):
    Tensor.realize_all(b, c)
  np.testing.assert_equal(b.numpy(), np.arange(8) * 2 + 1)
  assert c.item() == sum(range(8)) + 24


def test_allocator_memory_error_at_every_point():
  assert inject_everywhere(Buffer, "allocate", lambda: MemoryError("injected")) >= 3


def test_compile_error_at_every_point():
  # every kernel compiles again, so each compile is a point to fail at
  assert inject_everywhere(realize, "CompiledRunner", lambda: Injected("compile failed"), before=realize.method_cache.clear) >= 3


def test_kernel_raises_at_every_point():
  assert inject_everywhere(realize, "run_kernel", lambda: Injected("kernel failed")) >= 3


def test_keyboard_interrupt_in_kernel_at_every_point():
  assert inject_everywhere(realize, "run_kernel", KeyboardInterrupt) >= 3


def test_assign_interrupted_is_old_or_new():
  """An interrupted in-place assign leaves its target at the old value (and the assign still to do) or the new one,
  and a value read before the assign keeps meaning the old data."""
  for n in range(1, 8):
    x_np, y_np = arr(16), arr(16)
    x, y = Tensor(x_np).realize(), Tensor(y_np).realize()
    old = x.detach()  # holds the old value
    s = (x * y).sum()  # reads the old value, unrealized
    x.assign(x * 2 + y)
    z = x + 1
    with fail_on(realize, "run_kernel", n, KeyboardInterrupt) as calls:
      try:
        Tensor.realize_all(x, z, s)
      except KeyboardInterrupt:
        pass
    ran_all = calls[0] < n
    new = x_np * 2 + y_np
    np.testing.assert_allclose(x.numpy(), new, rtol=1e-6)
    np.testing.assert_allclose(x.numpy(), new, rtol=1e-6)  # read twice: the assign ran once
    np.testing.assert_allclose(z.numpy(), new + 1, rtol=1e-6)
    np.testing.assert_allclose(old.numpy(), x_np, rtol=1e-6)
    np.testing.assert_allclose(s.numpy(), (x_np * y_np).sum(), rtol=1e-4)
    if ran_all:
      break


def test_assign_after_failure_does_not_change_pending_reads():
  """A kernel left to do by a failure reads its inputs as they were: an in-place write to one of them later
  waits until the pending kernel has run."""
  x_np = arr(16)
  x = Tensor(x_np).realize()
  b = (x * 3).sum()
  with fail_on(realize, "run_kernel", 1, KeyboardInterrupt), pytest.raises(KeyboardInterrupt):
    b.realize()
  x.assign(x * 0).realize()
  np.testing.assert_allclose(b.numpy(), (x_np * 3).sum(), rtol=1e-5)
  np.testing.assert_equal(x.numpy(), np.zeros(16))


def test_failed_tensor_dropped_frees_its_work():
  import gc
  import weakref
  a = Tensor(arr(64)).realize()
  b = a * 5
  with fail_on(realize, "run_kernel", 1, Injected), pytest.raises(Injected):
    b.realize()
  ref = weakref.ref(b.lazydata.base.buffer)
  del b
  gc.collect()
  assert ref() is None


def test_jit_replay_runs_pending_reads_first():
  """A kernel a failure left to do reads a parameter as it was: a TinyJit step that writes the parameter in place
  runs it first."""
  from tg import TinyJit
  w_np = arr(16)
  w = Tensor(w_np).realize()

  @TinyJit
  def step() -> Tensor:
    w.assign(w * 0.5 + 1)
    return w.realize()

  for _ in range(3):
    step()
  w_now = w.numpy()
  s = (w * 3).sum()
  with fail_on(realize, "run_kernel", 1, KeyboardInterrupt), pytest.raises(KeyboardInterrupt):
    s.realize()
  step()
  np.testing.assert_allclose(s.numpy(), (w_now * 3).sum(), rtol=1e-5)
  np.testing.assert_allclose(w.numpy(), w_now * 0.5 + 1, rtol=1e-6)


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT is a POSIX signal")
@Context(NEST_ASSIGN=0)  # m's and x's assigns in two kernels (else x's kernel computes m too), so the signal comes between them
def test_ctrl_c_during_jit_replay_finishes_the_step():
  from tg import TinyJit
  x_np = arr(8)
  x, m = Tensor(x_np).realize(), Tensor(np.zeros(8, np.float32)).realize()

  @TinyJit
  def step() -> Tensor:
    m.assign(m * 0.9 + x * 0.1)
    x.assign(x - m)
    return x.realize()

  xr, mr = x_np.copy(), np.zeros(8, np.float32)
  for _ in range(3):
    step()
    mr = mr * 0.9 + xr * 0.1
    xr = xr - mr
  step.graph = None  # kernel by kernel, so the signal comes between two of them
  orig, calls = realize.CompiledRunner.__call__, [0]

  def run(self: realize.CompiledRunner, *args: Any, **kwargs: Any) -> Any:
    calls[0] += 1
    if calls[0] == 1:
      os.kill(os.getpid(), signal.SIGINT)
    return orig(self, *args, **kwargs)

  realize.CompiledRunner.__call__ = run  # type: ignore[method-assign]
  try:
    with pytest.raises(KeyboardInterrupt):
      step()
  finally:
    realize.CompiledRunner.__call__ = orig  # type: ignore[method-assign]
  mr = mr * 0.9 + xr * 0.1
  xr = xr - mr
  assert calls[0] >= 2  # the step went on after the signal
  np.testing.assert_allclose(m.numpy(), mr, rtol=1e-5)
  np.testing.assert_allclose(x.numpy(), xr, rtol=1e-5)


SIGINT_CHILD = textwrap.dedent("""
  import sys, numpy as np
  from tg import Tensor
  rng = np.random.default_rng(1)
  N = int(sys.argv[1])
  ws = [rng.standard_normal((N, N)).astype(np.float32) / N ** 0.5 for _ in range(6)]
  W = [Tensor(w).realize() for w in ws]
  cur, it = (rng.standard_normal((N, N)).astype(np.float32), []), 0
  print("ready", flush=True)
  try:  # every step, and the loop between them: Ctrl-C may come anywhere (it once came at the `while` itself)
    while True:
      x_np, outs = rng.standard_normal((N, N)).astype(np.float32), []
      cur = (x_np, outs)  # one assignment: the input and the outputs computed from it
      x = Tensor(x_np)
      for w in W:
        x = (x @ w).relu() + 0.5
        outs.append(x)
      Tensor.realize_all(*outs)
      it += 1
  except KeyboardInterrupt:
    pass
  x_np, outs = cur
  err, h = 0.0, x_np
  for o, wn in zip(outs, ws):
    h = np.maximum(h @ wn, 0) + 0.5
    err = max(err, float(np.abs(o.numpy() - h).max()))
  y = (Tensor(x_np) @ W[0]).relu().numpy()  # and the process goes on computing
  err = max(err, float(np.abs(y - np.maximum(x_np @ ws[0], 0)).max()))
  print(f"interrupted after {it} steps, {len(outs)} outputs, max error {err:.3g}", flush=True)
  sys.exit(0 if err < 1e-3 else 1)
""")



@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process is a POSIX signal")
@pytest.mark.parametrize("delay", [0.2, 0.5, 0.9, 1.4])
def test_sigint_during_matmul_chain(tmp_path, delay):
  import time
  env = {**os.environ, "DEVICE": Device.DEFAULT, "CACHEDB": str(tmp_path / "cache.db")}
  n = 16 if Device.DEFAULT == "PYTHON" else 128  # the interpreter device is slow
  p = subprocess.Popen([sys.executable, "-c", SIGINT_CHILD, str(n)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
  assert p.stdout is not None
  assert p.stdout.readline().strip() == "ready"
  time.sleep(delay)
  p.send_signal(signal.SIGINT)
  try:
    out, err = p.communicate(timeout=60)
  except subprocess.TimeoutExpired:  # the Ctrl-C was lost (or a lock is held forever): show where it went
    p.kill()
    out, err = p.communicate()
    pytest.fail(f"the child did not stop within 60 s of Ctrl-C\n{out}\n{err[-3000:]}")
  assert p.returncode == 0, f"{out}\n{err[-3000:]}"
  assert "interrupted after" in out


def test_jit_replay_that_raises_part_way_finishes_the_step_when_read():
  """A replay whose k-th kernel raises (a device error, a MemoryError allocating scratch) has run the kernels before
  it: the rest of the step stays to do, as after a failed realize, and runs before anything reads what it writes.
  So parameters and optimizer state move together: never half a step, never a step applied twice."""
  from tg import TinyJit
  x_np = arr(8)
  x, m = Tensor(x_np).realize(), Tensor(np.zeros(8, np.float32)).realize()

  @TinyJit
  def step(g: Tensor) -> Tensor:
    m.assign(m * 0.9 + g * 0.1)
    x.assign(x - m)
    return (x * x).sum().realize()

  xr, mr = x_np.copy(), np.zeros(8, np.float32)

  def reference(g: np.ndarray) -> None:
    nonlocal xr, mr
    mr = mr * 0.9 + g * 0.1
    xr = xr - mr

  for _ in range(3):
    g = arr(8)
    step(Tensor(g))
    reference(g)
  step.graph = None  # kernel by kernel: the failure comes between two of them
  n_kernels = len(step.jit_cache)
  assert n_kernels >= 2
  for k in range(1, n_kernels + 1):
    g = arr(8)
    with fail_on(realize.CompiledRunner, "__call__", k, lambda: Injected("kernel failed")):
      with pytest.raises(Injected):
        step(Tensor(g))
    reference(g)  # read back, the step is whole
    np.testing.assert_allclose(m.numpy(), mr, rtol=1e-5, err_msg=f"kernel {k} of {n_kernels} failed")
    np.testing.assert_allclose(x.numpy(), xr, rtol=1e-5, err_msg=f"kernel {k} of {n_kernels} failed")
    g = arr(8)  # and the jit goes on
    loss = step(Tensor(g))
    reference(g)
    np.testing.assert_allclose(loss.numpy(), (xr * xr).sum(), rtol=1e-5)
    np.testing.assert_allclose(x.numpy(), xr, rtol=1e-5)
