"""TinyJit: capture on the second call, replay after, with new inputs and symbolic sizes."""
from __future__ import annotations

import numpy as np
import pytest

from tg import GlobalCounters, Tensor, TinyJit, Variable
from tg.engine.jit import JitError
from tg.nn import Linear
from tg.nn.optim import Adam
from tg.nn.state import get_parameters

rng = np.random.default_rng(0)


def test_replays_with_new_inputs() -> None:
  calls = []

  @TinyJit
  def f(a: Tensor, b: Tensor) -> Tensor:
    calls.append(1)
    return (a * b + 1).relu().sum(1).realize()
  for _ in range(5):
    x, y = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((4, 3)).astype(np.float32)
    np.testing.assert_allclose(f(Tensor(x), Tensor(y)).numpy(), np.maximum(x * y + 1, 0).sum(1), rtol=1e-5, atol=1e-6)
  assert len(calls) == 2, "the function runs on the first two calls only; later calls replay its kernels"
  assert len(f.jit_cache) >= 1


def test_replay_runs_the_captured_kernels_only() -> None:
  @TinyJit
  def f(a: Tensor) -> Tensor:
    return ((a + 1) * 2).contiguous().exp().realize()
  for _ in range(2):
    f(Tensor(rng.standard_normal(8).astype(np.float32)))
  x = Tensor(rng.standard_normal(8).astype(np.float32))
  GlobalCounters.reset()
  f(x)
  assert GlobalCounters.kernel_count == len(f.kernels)


def test_changed_shape_or_dtype_is_an_error() -> None:
  @TinyJit
  def f(a: Tensor) -> Tensor:
    return (a * 2).realize()
  for _ in range(3):
    f(Tensor(np.ones(4, np.float32)))
  with pytest.raises(JitError, match="inputs changed"):
    f(Tensor(np.ones(5, np.float32)))
  with pytest.raises(JitError, match="inputs changed"):
    f(Tensor(np.ones(4, np.int32)))


def test_unrealized_return_is_realized_in_the_capture() -> None:
  @TinyJit
  def f(a: Tensor) -> Tensor:
    return a * 2
  for i in range(4):
    np.testing.assert_allclose(f(Tensor(np.full(4, i, np.float32))).numpy(), np.full(4, 2.0 * i))
  assert len(f.jit_cache) == 1


def test_symbolic_size_changes_between_calls() -> None:
  vi = Variable("n", 1, 16)

  @TinyJit
  def f(a: Tensor) -> Tensor:
    return (a * 2 + 1).sum(1).realize()
  for n in [3, 5, 2, 9, 16]:
    x = rng.standard_normal((4, n)).astype(np.float32)
    out = f(Tensor(x).reshape(4, vi.bind(n)))
    np.testing.assert_allclose(out.numpy(), (x * 2 + 1).sum(1), rtol=1e-5, atol=1e-5)


class MLP:
  def __init__(self) -> None:
    self.l1, self.l2 = Linear(8, 16), Linear(16, 4)

  def __call__(self, x: Tensor) -> Tensor:
    return self.l2(self.l1(x).relu())


def _train(jit: bool, steps: int = 6) -> tuple[list[float], np.ndarray]:
  Tensor.manual_seed(0)
  model = MLP()
  opt = Adam(get_parameters(model), lr=0.01)

  def step(x: Tensor, y: Tensor) -> Tensor:
    with Tensor.train():
      loss = model(x).sparse_categorical_crossentropy(y)
      opt.zero_grad()
      loss.backward()
      opt.step()
    return loss.realize()
  run = TinyJit(step) if jit else step
  data = np.random.default_rng(1)
  losses = []
  for _ in range(steps):
    x, y = data.standard_normal((16, 8)).astype(np.float32), data.integers(0, 4, 16).astype(np.int32)
    losses.append(run(Tensor(x), Tensor(y)).item())
  return losses, model.l1.weight.numpy()


def test_whole_training_step() -> None:
  eager_losses, eager_w = _train(jit=False)
  jit_losses, jit_w = _train(jit=True)
  np.testing.assert_allclose(jit_losses, eager_losses, rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(jit_w, eager_w, rtol=1e-4, atol=1e-6)


def test_device_graph_is_used_when_offered() -> None:
  from tg import Device

  @TinyJit
  def f(a: Tensor) -> Tensor:
    return ((a + 1).realize() * 2).realize()  # two kernels: a lone kernel is not graphed, as in tinygrad
  for _ in range(3):
    x = rng.standard_normal(8).astype(np.float32)
    np.testing.assert_allclose(f(Tensor(x)).numpy(), (x + 1) * 2, rtol=1e-6)
  assert (f.graph is not None) == (Device[Device.DEFAULT].graph is not None)


def test_replay_of_realized_whole_buffers_and_everything_else() -> None:
  """Realized whole buffers take the replay's one-pass input path (engine/jit._plain_inputs); views, lazy tensors, the
  same buffer twice and changed inputs take the general one, with the same results and errors."""
  @TinyJit
  def f(a: Tensor, scale: float, b: Tensor) -> Tensor:
    return (a * 2 + b).realize()
  def data(n: int = 6) -> np.ndarray:
    return rng.standard_normal(n).astype(np.float32)
  for _ in range(3):
    f(Tensor(data()).realize(), 1.0, Tensor(data()).realize())
  x, y = data(), data()
  np.testing.assert_allclose(f(Tensor(x).realize(), 1.0, Tensor(y).realize()).numpy(), x * 2 + y, rtol=1e-6)  # plain
  np.testing.assert_allclose(f(Tensor(x), 1.0, Tensor(y) + 0).numpy(), x * 2 + y, rtol=1e-6)  # lazy: realized first
  big = data(12)
  np.testing.assert_allclose(f(Tensor(big).realize()[::2], 1.0, Tensor(y).realize()).numpy(), big[::2] * 2 + y, rtol=1e-6)  # a view
  same = Tensor(x).realize()
  with pytest.raises(JitError, match="same buffer"):
    f(same, 1.0, same)
  with pytest.raises(JitError, match="inputs changed"):
    f(Tensor(data(7)).realize(), 1.0, Tensor(data(7)).realize())
  with pytest.raises(JitError, match="inputs changed"):
    f(Tensor(x.astype(np.int32)).realize(), 1.0, Tensor(y).realize())
  np.testing.assert_allclose(f(Tensor(y).realize(), 1.0, Tensor(x).realize()).numpy(), y * 2 + x, rtol=1e-6)  # and on


def test_a_capture_records_only_its_own_threads_kernels() -> None:
  """Another thread's eager in-place update while a jit captures is not part of the capture: replays don't apply it
  again (the capture was one list for the process, and every replay added 1 to the other thread's accumulator)."""
  import threading
  acc = Tensor.zeros(4).contiguous().realize()
  capturing, updated = threading.Event(), threading.Event()

  def other() -> None:
    capturing.wait(10)
    acc.assign(acc + 1).realize()
    updated.set()
  th = threading.Thread(target=other)
  th.start()

  @TinyJit
  def f(x: Tensor) -> Tensor:
    y = (x * 2).contiguous().realize()
    if f.cnt == 1:  # the capture: the other thread's update runs now
      capturing.set()
      assert updated.wait(10)
    return (y + 1).realize()
  for i in range(5):
    x = np.full(4, i, np.float32)
    np.testing.assert_array_equal(f(Tensor(x)).numpy(), x * 2 + 1)
  th.join()
  np.testing.assert_array_equal(acc.numpy(), np.ones(4, np.float32))


def test_jits_running_in_two_threads_are_not_nested() -> None:
  """A jit called while another thread is inside a jit's function is not "inside another TinyJit"."""
  import threading
  import time
  inside, results = threading.Event(), {}

  @TinyJit
  def slow(x: Tensor) -> Tensor:
    inside.set()
    time.sleep(0.3)
    return (x + 1).realize()

  @TinyJit
  def other(x: Tensor) -> Tensor:
    return (x * 2).realize()
  th = threading.Thread(target=lambda: results.setdefault("slow", slow(Tensor(np.ones(4, np.float32))).numpy()))
  th.start()
  assert inside.wait(10)
  np.testing.assert_array_equal(other(Tensor(np.ones(4, np.float32))).numpy(), np.full(4, 2, np.float32))
  th.join()
  np.testing.assert_array_equal(results["slow"], np.full(4, 2, np.float32))
  with pytest.raises(JitError, match="inside another"):  # (nesting in one thread still raises)
    TinyJit(lambda x: other(x))(Tensor(np.ones(4, np.float32)))
