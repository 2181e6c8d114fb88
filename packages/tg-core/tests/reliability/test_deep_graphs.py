"""Graphs where values are reused: every level of `x = f(x, x, x)` uses the last level three times, so a walk that
visits a node once per path to it (lowering, ShapeTracker rewrites, hashing the kernel's AST) costs 3^depth.
Eight levels took 112 s to realize before those walks went through each node once; forty must take well under a
second on any device (the bound below is only a hang guard)."""
import time

import numpy as np
import pytest

from tg import Device, Tensor


def _levels(x, n):
  for _ in range(n):
    x = x * 0.5 + x * x * 0.25 - x * 0.125
  return x


@pytest.mark.parametrize("depth", [8, 40])
def test_a_deep_fused_graph_with_reuse_realizes_in_time(depth):
  a = np.linspace(-0.5, 0.5, 16).astype(np.float32)
  t = time.perf_counter()
  got = _levels(Tensor(a), depth).numpy()
  assert time.perf_counter() - t < 30, "lowering revisits shared subexpressions"
  np.testing.assert_allclose(got, _levels(a, depth), rtol=1e-5, atol=1e-30)


def test_backward_through_a_deep_graph_with_reuse():
  torch = pytest.importorskip("torch")
  depth = 8 if Device.DEFAULT == "PYTHON" else 20
  a = np.linspace(-0.5, 0.5, 16).astype(np.float32)
  x = Tensor(a, requires_grad=True)
  t = time.perf_counter()
  _levels(x, depth).sum().backward()
  got = x.grad.numpy()
  assert time.perf_counter() - t < 30
  xt = torch.tensor(a, requires_grad=True)
  _levels(xt, depth).sum().backward()
  np.testing.assert_allclose(got, xt.grad.numpy(), rtol=1e-4, atol=1e-30)


def test_equal_asts_built_apart_compare_equal_quickly():
  # two kernels' ASTs built separately share no nodes: comparing them (the compile cache does) goes pair by pair once
  from tg.dtype import dtypes
  from tg.ops import BinaryOps, BufferOps, ConstBuffer, LazyOp
  from tg.shape.shapetracker import ShapeTracker

  def build():
    x = LazyOp(BufferOps.CONST, (), ConstBuffer(1.0, dtypes.float32, ShapeTracker.from_shape((4,))))
    for _ in range(60):
      x = LazyOp(BinaryOps.ADD, (x, LazyOp(BinaryOps.MUL, (x, x))))
    return x
  a, b = build(), build()
  t = time.perf_counter()
  assert a == b and hash(a) == hash(b) and a is not b
  assert time.perf_counter() - t < 1


def test_a_deep_kernel_ast_prints_each_node_once():
  """DEBUG=3 prints each kernel's AST: a node read by several others is written once and numbered, then referred to
  (written out as a tree, forty levels would be 3^40 lines)."""
  from tg.engine.schedule import create_schedule
  x = Tensor(np.linspace(-0.5, 0.5, 16).astype(np.float32)).realize()
  ast = create_schedule([_levels(x, 40).lazydata])[-1].ast
  t = time.perf_counter()
  text = repr(ast)
  assert time.perf_counter() - t < 5
  assert len(text.splitlines()) < 20 * len(ast.lazyops())
  assert "#0 LazyOp(" in text and ("#0,\n" in text or "#0)" in text)
