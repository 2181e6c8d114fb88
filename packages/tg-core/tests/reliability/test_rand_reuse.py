"""Eager random numbers reuse their kernels: the seed and the counter are read from a device buffer, not baked into
the kernel as constants. Streams stay distinct per call, manual_seed reproduces them, and a TinyJit replay draws
new numbers each time."""
import numpy as np

from tg import Tensor
from tg.engine import realize
from tg.engine.jit import TinyJit


def _kernels_built(f) -> int:  # type: ignore[no-untyped-def]
  before = set(realize.method_cache)
  f()
  return len(set(realize.method_cache) - before)


def test_eager_rand_compiles_once():
  Tensor.manual_seed(1)
  Tensor.rand(65).numpy()  # the first call compiles what every later call of this shape needs
  draws: list[np.ndarray] = []
  built = _kernels_built(lambda: [draws.append(Tensor.rand(65).numpy()) for _ in range(50)])
  assert built <= 2, f"50 calls to rand built {built} new kernels"
  assert len({d.tobytes() for d in draws}) == 50  # every call draws new numbers
  for d in draws:
    assert 0 <= d.min() and d.max() < 1 and 0.3 < d.mean() < 0.7


def test_randn_and_dropout_reuse_kernels():
  Tensor.manual_seed(2)
  x = Tensor.ones(16, 8)
  Tensor.randn(16, 8).numpy()
  with Tensor.train():
    x.dropout(0.5).numpy()
    assert _kernels_built(lambda: [(Tensor.randn(16, 8).numpy(), x.dropout(0.5).numpy()) for _ in range(10)]) <= 2


def test_manual_seed_reproduces():
  Tensor.manual_seed(42)
  a = [Tensor.rand(100).numpy() for _ in range(3)]
  Tensor.manual_seed(42)
  b = [Tensor.rand(100).numpy() for _ in range(3)]
  Tensor.manual_seed(43)
  c = Tensor.rand(100).numpy()
  for x, y in zip(a, b):
    np.testing.assert_equal(x, y)
  assert not np.array_equal(a[0], c) and not np.array_equal(a[0], a[1])


def test_lazy_rand_keeps_its_own_numbers():
  """A draw realized after later draws still has the numbers of its own call (manual_seed order)."""
  Tensor.manual_seed(7)
  first, second = Tensor.rand(50), Tensor.rand(50)
  s, f = second.numpy(), first.numpy()
  Tensor.manual_seed(7)
  np.testing.assert_equal(Tensor.rand(50).numpy(), f)
  np.testing.assert_equal(Tensor.rand(50).numpy(), s)


def test_jit_replay_draws_new_numbers():
  Tensor.manual_seed(3)

  @TinyJit
  def step(x: Tensor) -> Tensor:
    return (x + Tensor.rand(*x.shape)).realize()

  x = Tensor.zeros(33).contiguous().realize()
  outs = [step(x).numpy().copy() for _ in range(5)]
  assert len({o.tobytes() for o in outs}) == 5, "TinyJit replays gave the same random numbers"
