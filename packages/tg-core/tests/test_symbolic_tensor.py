"""Tensors with symbolic shapes: a bound Variable in a shape; one compiled kernel serves every value."""
from __future__ import annotations

import numpy as np
import pytest

from tg import Tensor, Variable
from tg.engine import realize

rng = np.random.default_rng(0)


def compiled() -> int:
  return len(realize.method_cache)


def check_compiles_once(fn, values: list[int]) -> None:  # type: ignore[no-untyped-def]
  """Run fn(n) for each value; after the first value, no new kernel may be compiled."""
  fn(values[0])
  before = compiled()
  for n in values[1:]:
    fn(n)
  assert compiled() == before, "a new value of the variable compiled a new kernel"


def test_elementwise() -> None:
  vi = Variable("i", 1, 10)

  def run(n: int) -> None:
    x, y = rng.standard_normal((3, n)).astype(np.float32), rng.standard_normal((3, n)).astype(np.float32)
    a, b = Tensor(x).reshape(3, vi.bind(n)), Tensor(y).reshape(3, vi.bind(n))
    out = ((a * b + 1).relu() - a.exp()).reshape(3, n).numpy()
    np.testing.assert_allclose(out, np.maximum(x * y + 1, 0) - np.exp(x), rtol=1e-5, atol=1e-5)
  check_compiles_once(run, [2, 3, 5, 7])


@pytest.mark.parametrize("axis", [0, 1])
def test_reductions(axis: int) -> None:
  vi = Variable("i", 1, 10)

  def run(n: int) -> None:
    x = rng.standard_normal((4, n)).astype(np.float32)
    a = Tensor(x).reshape(4, vi.bind(n))
    out_shape = (n,) if axis == 0 else (4,)
    np.testing.assert_allclose(a.sum(axis).reshape(out_shape).numpy(), x.sum(axis), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(a.max(axis).reshape(out_shape).numpy(), x.max(axis))
  check_compiles_once(run, [3, 1, 4, 9])


def test_matmul_over_symbolic_inner_axis() -> None:
  vi = Variable("k", 1, 16)

  def run(n: int) -> None:
    x, y = rng.standard_normal((3, n)).astype(np.float32), rng.standard_normal((n, 5)).astype(np.float32)
    out = (Tensor(x).reshape(3, vi.bind(n)) @ Tensor(y).reshape(vi.bind(n), 5)).numpy()
    np.testing.assert_allclose(out, x @ y, rtol=1e-4, atol=1e-4)
  check_compiles_once(run, [4, 7, 16, 1])


def test_shrink_by_variable() -> None:
  vi = Variable("n", 1, 8)
  x = rng.standard_normal((8, 3)).astype(np.float32)
  t = Tensor(x).realize()

  def run(n: int) -> None:
    part = t.shrink(((0, vi.bind(n)), None))
    np.testing.assert_allclose((part * 2).sum(0).numpy(), (x[:n] * 2).sum(0), rtol=1e-5, atol=1e-5)
  check_compiles_once(run, [8, 2, 5])


def np_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
  s = q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[-1])
  s = np.exp(s - s.max(-1, keepdims=True))
  return (s / s.sum(-1, keepdims=True)) @ v


def test_attention_with_variable_sequence_length() -> None:
  """A decoder step: one query against a key/value cache whose length changes every call."""
  heads, dim, max_len = 2, 8, 12
  cache_k = rng.standard_normal((heads, max_len, dim)).astype(np.float32)
  cache_v = rng.standard_normal((heads, max_len, dim)).astype(np.float32)
  k_all, v_all = Tensor(cache_k).realize(), Tensor(cache_v).realize()
  seq = Variable("seq", 1, max_len)

  def run(n: int) -> None:
    q = rng.standard_normal((heads, 1, dim)).astype(np.float32)
    k = k_all.shrink((None, (0, seq.bind(n)), None))
    v = v_all.shrink((None, (0, seq.bind(n)), None))
    out = Tensor(q).scaled_dot_product_attention(k, v).numpy()
    np.testing.assert_allclose(out, np_attention(q, cache_k[:, :n], cache_v[:, :n]), rtol=1e-4, atol=1e-5)
  check_compiles_once(run, [3, 5, 12, 1])


def test_symbolic_shape_reports() -> None:
  vi = Variable("i", 1, 10)
  a = Tensor(np.ones((2, 4), np.float32)).reshape(2, vi.bind(4))
  assert a.shape[1] == vi
  with pytest.raises(RuntimeError, match="concrete shape"):
    a.numpy()
  with pytest.raises(ValueError):
    Tensor(np.ones((2, 4), np.float32)).reshape(2, vi.bind(5))
  with pytest.raises(ValueError):
    vi.bind(11)
