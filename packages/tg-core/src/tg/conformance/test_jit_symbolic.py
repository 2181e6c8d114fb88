"""Kernels with symbolic sizes (a bound Variable: one compiled kernel for every value), TinyJit replays with new
inputs (through the device's graph when it has one), several kernels per realize, and seeded random numbers."""
from __future__ import annotations

import numpy as np
import pytest

from tg import Tensor, TinyJit, Variable
from tg.conformance._kit import device

pytestmark = pytest.mark.needs("kernels")


def test_symbolic_sizes(rng: np.random.Generator) -> None:
  v = Variable("n", 1, 20)
  for n in (3, 1, 17, 20, 8):
    x, y = rng.standard_normal((3, n)).astype(np.float32), rng.standard_normal((n, 4)).astype(np.float32)
    a = Tensor(x).reshape(3, v.bind(n))
    np.testing.assert_allclose((a * 2 + 1).reshape(3, n).numpy(), x * 2 + 1, rtol=1e-6)
    np.testing.assert_allclose(a.sum(1).numpy(), x.sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose((a @ Tensor(y).reshape(v.bind(n), 4)).numpy(), x @ y, rtol=1e-5, atol=1e-5)


def _two_kernels(a: Tensor, b: Tensor) -> Tensor:
  return ((a + b).contiguous() * a).sum(1).realize()  # an elementwise kernel then a reduction: graphed together


def test_jit_replays_with_new_inputs(rng: np.random.Generator) -> None:
  f = TinyJit(_two_kernels)
  for i in range(6):
    x, y = rng.standard_normal((8, 5)).astype(np.float32), rng.standard_normal((8, 5)).astype(np.float32)
    np.testing.assert_allclose(f(Tensor(x), Tensor(y)).numpy(), ((x + y) * x).sum(1), rtol=1e-5, atol=1e-5, err_msg=f"call {i}")


@pytest.mark.needs("graph")
def test_jit_uses_the_device_graph(rng: np.random.Generator) -> None:
  f = TinyJit(_two_kernels)
  for _ in range(4):
    x = rng.standard_normal((8, 5)).astype(np.float32)
    np.testing.assert_allclose(f(Tensor(x), Tensor(x)).numpy(), (2 * x * x).sum(1), rtol=1e-5, atol=1e-5)
  assert getattr(f, "graph", None) is not None, f"{device()} declares a graph but TinyJit replayed without one"


def test_jit_with_a_symbolic_size(rng: np.random.Generator) -> None:
  v = Variable("m", 1, 12)

  @TinyJit
  def f(a: Tensor) -> Tensor:
    return ((a * 3).contiguous() + 1).sum(0).realize()
  for n in (4, 7, 4, 12, 1, 9):
    x = rng.standard_normal((n, 3)).astype(np.float32)
    np.testing.assert_allclose(f(Tensor(x).reshape(v.bind(n), 3)).numpy(), (x * 3 + 1).sum(0), rtol=1e-5, atol=1e-5)


def test_many_kernels_in_one_realize(rng: np.random.Generator) -> None:
  x = rng.standard_normal((16, 16)).astype(np.float32)
  t = Tensor(x)
  outs = [(t * i).contiguous().sum(i % 2) for i in range(1, 6)] + [t.exp().contiguous().max(), (t @ t).relu()]
  Tensor.realize(*outs)
  for i in range(1, 6):
    np.testing.assert_allclose(outs[i - 1].numpy(), (x * i).sum(i % 2), rtol=1e-5, atol=1e-4)
  np.testing.assert_allclose(outs[5].item(), np.exp(x).max(), rtol=1e-5)
  np.testing.assert_allclose(outs[6].numpy(), np.maximum(x @ x, 0), rtol=1e-4, atol=1e-4)


def test_seeded_random_numbers_repeat() -> None:
  """Random numbers are computed by kernels from the seed: the same seed gives the same numbers, here and on the
  reference interpreter; another seed gives others."""
  def draw(dev: str) -> tuple[np.ndarray, np.ndarray]:
    Tensor.manual_seed(1234)
    return Tensor.rand(1001, device=dev).numpy(), Tensor.randn(3, 5, device=dev).numpy()
  u, n = draw(device())
  u2, n2 = draw(device())
  np.testing.assert_array_equal(u, u2)
  np.testing.assert_array_equal(n, n2)
  assert ((u >= 0) & (u < 1)).all() and 0.4 < u.mean() < 0.6
  ref_u, ref_n = draw("PYTHON")
  np.testing.assert_array_equal(u, ref_u)
  np.testing.assert_allclose(n, ref_n, rtol=1e-5, atol=1e-6)
  Tensor.manual_seed(1235)
  assert not np.array_equal(Tensor.rand(1001).numpy(), u)
