"""The index math of common kernels stays small: pinned sizes of simplified index expressions.

A regression here means generated kernels got slower (more integer ops per element), not wrong."""
from __future__ import annotations

from tg import Tensor
from tg.engine.schedule import create_schedule
from tg.helpers import Context
from tg.ops import BufferOps, MetaOps
from tg.shape.symbolic import AndNode, Node, SumNode


def terms(n: Node) -> int:
  return len(n.nodes) if isinstance(n, (SumNode, AndNode)) else (0 if n.min == n.max else 1)


def load_exprs(t: Tensor) -> list[tuple[Node, Node]]:
  ast = create_schedule([t.lazydata])[-1].ast
  return [op.arg.st.expr_idxs() for op in ast.lazyops() if op.op is BufferOps.LOAD]


def test_conv3x3_input_index() -> None:
  x, w = Tensor.empty(8, 64, 56, 56), Tensor.empty(64, 64, 3, 3)
  with Context(PACK=0):  # the weight as it is stored, not in the panels a CPU device would copy it into first
    (xi, xv), (wi, wv) = load_exprs(x.conv2d(w, padding=1))
  # input: batch, channel, output y, output x, kernel y, kernel x, minus the pad offset
  assert terms(xi) == 7, xi.render()
  assert "//" not in xi.render() and "%" not in xi.render()
  assert terms(xv) == 4, xv.render()  # 1 <= y+ky < 57 and 1 <= x+kx < 57, nothing more
  assert terms(wi) == 4 and wv.min == 1, wi.render()  # weight: cout, cin, ky, kx; always valid


def test_matmul_indices_are_plain_strides() -> None:
  a, b = Tensor.empty(32, 64), Tensor.empty(64, 16)
  (ai, av), (bi, bv) = load_exprs(a @ b)
  assert terms(ai) == 2 and terms(bi) == 2, (ai.render(), bi.render())
  assert av.min == 1 and bv.min == 1


def test_transposed_elementwise_is_one_view_and_two_terms() -> None:
  a = Tensor.empty(16, 32)
  ((ai, av),) = load_exprs(a.T + 1)
  assert terms(ai) == 2 and av.min == 1


def test_flip_and_slice_fold_into_the_offset() -> None:
  a = Tensor.empty(16, 32)
  ((ai, _),) = load_exprs(a[2:10, ::-1] * 2)
  assert terms(ai) == 3, ai.render()  # row*32 - col + offset


def test_padded_reshape_stays_linear() -> None:
  a = Tensor.empty(4, 6)
  ((ai, av),) = load_exprs(a.pad(((1, 1), (0, 0))).reshape(36).exp())
  assert terms(ai) == 2 and terms(av) == 2, (ai.render(), av.render())


def test_known_merges_stay_one_view() -> None:
  from tg.shape.shapetracker import ShapeTracker
  st = ShapeTracker.from_shape((4, 6))
  assert len(st.pad(((1, 1), (0, 0))).reshape((36,)).views) == 1  # pad of whole rows, flattened
  assert len(st.shrink(((1, 3), (0, 6))).reshape((2, 2, 3)).permute((2, 0, 1)).views) == 1  # permute of a reshape of a shrink
  assert len(st.permute((1, 0)).reshape((2, 3, 4)).views) == 1  # splitting an axis of a transpose
  assert len(st.permute((1, 0)).reshape((24,)).views) == 2  # flattening a transpose can't be one View
  # a view of a view merges when the composition is linear: a flip read through a transpose
  inner = ShapeTracker.from_shape((4, 6)).permute((1, 0))
  outer = ShapeTracker.from_shape((6, 4)).stride((-1, 1))
  assert len((inner + outer).views) == 1


def test_attention_over_a_symbolic_kv_cache_divides_by_nothing() -> None:
  """q @ keys.T and scores @ values of a decode step, keys and values read up to a bound start_pos from a preallocated
  cache: with the kernel's optimizations applied (head_dim split to unroll and vectorize), every load stays a plain
  stride per axis. A second View here made each load divide and take the remainder by the symbolic length."""
  from tg import Device, Variable
  from tg.codegen.kernel import Kernel
  sp = Variable("start_pos", 1, 1023).bind(130)
  cache, q = Tensor.empty(2, 12, 1024, 64), Tensor.empty(12, 1, 64)
  keys, values = (cache[i].shrink((None, (0, sp + 1), None)) for i in (0, 1))
  scores = q @ keys.transpose(-2, -1)
  for out in (scores, Tensor.empty(12, 1, 1024).shrink((None, None, (0, sp + 1))) @ values):
    for item in create_schedule([out.lazydata]):
      if item.ast.op not in (BufferOps.STORE, MetaOps.SINK):
        continue  # the EMPTY items that allocate the inputs
      k = Kernel(item.ast, Device[Device.DEFAULT].renderer).hand_coded_optimizations()
      for op in k.ast.lazyops():
        if op.op is BufferOps.LOAD:
          idx, _ = op.arg.st.expr_idxs()
          assert len(op.arg.st.views) == 1 and "//" not in idx.render() and "%" not in idx.render(), (k.applied_opts, op.arg.st)
