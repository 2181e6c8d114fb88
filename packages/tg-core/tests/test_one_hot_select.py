"""One-hot sums become loads (codegen/one_hot_select.py): a tensor index, gather and Embedding read one element per
output instead of looping over the indexed axis; the numbers never change, and an index out of range still raises."""
from __future__ import annotations

import random
import subprocess
import sys

import numpy as np
import pytest
import torch
from test_loop_collapse import _eval
from test_ops import helper_test_op

from tg import Device, Tensor, dtypes
from tg.codegen.kernel import Kernel, OptOps
from tg.codegen.lowerer import REDUCE
from tg.codegen.one_hot_select import one_hot_sum, select_one_hot
from tg.codegen.uops import UOp, UOps
from tg.device import is_dtype_supported
from tg.engine.schedule import create_schedule
from tg.nn import Embedding
from tg.ops import BinaryOps, BufferOps, MetaOps, TernaryOps, UnaryOps

i32 = dtypes.int32
N = 997  # the indexed axis: a prime no other axis of these tests has, so a loop over it is a RANGE that ends at N


def _loops_over(t: Tensor, n: int = N) -> int:
  """Reduce loops of n iterations in the kernels that compute t (after the one-hot sums became loads)."""
  count = 0
  for si in create_schedule([t.lazydata]):
    if si.ast.op in (MetaOps.SINK, BufferOps.STORE):  # a kernel (not a copy)
      k = Kernel(si.ast, Device[Device.DEFAULT].renderer).hand_coded_optimizations()
      count += sum(1 for u in k.linearize() if u.op is UOps.RANGE and u.arg[1] and u.src[1].op is UOps.CONST and u.src[1].arg == n)
  return count


def _ints(shape: tuple[int, ...], lo: int, hi: int, dtype: type = np.int32, seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed).integers(lo, hi, size=shape).astype(dtype)


def test_index_reads_one_row_per_index() -> None:
  x = np.random.default_rng(1).standard_normal((N, 8)).astype(np.float32)
  idx = _ints((5,), 0, N)
  out = Tensor(x)[Tensor(idx)]
  assert _loops_over(out) == 0
  np.testing.assert_array_equal(out.numpy(), x[idx])


@pytest.mark.parametrize("shape,index", [
  ((5, N), lambda i: (slice(None), i)),       # a later axis
  ((N, 3, 4), lambda i: (i.reshape(2, 3),)),  # a 2-D index
  ((2, N, 3), lambda i: (slice(None), -1 - i.reshape(3, 2))),  # negative indices
], ids=["later axis", "2-D index", "negative"])
def test_index_forms(shape, index) -> None:
  x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
  idx = _ints((6,), 0, N)
  got = Tensor(x)[index(Tensor(idx))]
  assert _loops_over(got) == 0
  np.testing.assert_array_equal(got.numpy(), x[index(idx)])


def test_two_index_tensors_lose_both_loops() -> None:
  x = np.random.default_rng(3).standard_normal((31, 37)).astype(np.float32)
  i, j = _ints((4, 1), 0, 31), _ints((1, 5), 0, 37, seed=1)
  got = Tensor(x)[Tensor(i), Tensor(j)]
  assert _loops_over(got, 31) == 0 and _loops_over(got, 37) == 0
  np.testing.assert_array_equal(got.numpy(), x[i, j])


@pytest.mark.parametrize("npdt", [np.int64, np.uint8, np.int16])
def test_index_dtypes(npdt) -> None:
  if npdt is np.int64 and not is_dtype_supported(dtypes.int64):
    pytest.skip("no int64 on this device")
  n = 200 if npdt is np.uint8 else N
  x = np.arange(n * 3, dtype=np.int32).reshape(n, 3)
  idx = _ints((7,), 0, n, npdt)
  got = Tensor(x)[Tensor(idx)]
  assert _loops_over(got, n) == 0
  np.testing.assert_array_equal(got.numpy(), x[idx])


@pytest.mark.parametrize("dim", [0, 1])
def test_gather(dim: int) -> None:
  x = np.random.default_rng(4).standard_normal((N, 6) if dim == 0 else (6, N)).astype(np.float32)
  idx = _ints((5, 6) if dim == 0 else (6, 5), 0, N)
  got = Tensor(x).gather(dim, Tensor(idx))
  assert _loops_over(got) == 0
  np.testing.assert_array_equal(got.numpy(), torch.tensor(x).gather(dim, torch.tensor(idx, dtype=torch.int64)).numpy())


def test_a_long_axis_is_not_split_into_partial_sums() -> None:
  # a sum over 50000 elements into few outputs is split into a tree of partial sums (LazyBuffer._split_reduce), but a
  # one-hot sum has one element per output: one kernel that loads it (a gather over GPT-2's logits was 5 kernels)
  n = 50021
  x = np.random.default_rng(6).standard_normal((3, n)).astype(np.float32)
  idx = np.array([[0], [n - 1], [12345]], np.int32)
  got = Tensor(x).gather(1, Tensor(idx))
  kernels = [si for si in create_schedule([got.lazydata]) if si.ast.op in (MetaOps.SINK, BufferOps.STORE)]
  assert len(kernels) == 1 and _loops_over(got, n) == 0
  np.testing.assert_array_equal(got.numpy(), np.take_along_axis(x, idx, 1))


def test_embedding_forward_and_backward() -> None:
  Tensor.manual_seed(0)
  emb = Embedding(N, 16)
  idx = _ints((2, 9), 0, N)
  out = emb(Tensor(idx))
  assert _loops_over(out) == 0
  w = emb.weight.numpy()
  np.testing.assert_array_equal(out.numpy(), w[idx])
  # the gradient is a scatter (a sum over the tokens for each row): its numbers are unchanged
  emb.weight.requires_grad = True
  (emb(Tensor(idx)) * Tensor(np.arange(16, dtype=np.float32))).sum().backward()
  ref = torch.nn.functional.embedding(torch.tensor(idx, dtype=torch.int64), torch.tensor(w, requires_grad=True))
  tw = ref.grad_fn.next_functions[0][0].variable
  (ref * torch.arange(16, dtype=torch.float32)).sum().backward()
  assert emb.weight.grad is not None and tw.grad is not None
  np.testing.assert_allclose(emb.weight.grad.numpy(), tw.grad.numpy(), rtol=1e-6)


def test_index_gradient_matches_torch() -> None:
  idx = _ints((4,), 0, 7).tolist() + [3, 3]  # repeated rows: their gradients add up
  helper_test_op([(7, 5)], lambda x: x[torch.tensor(idx)] * 2, lambda x: x[Tensor(np.array(idx, np.int32))] * 2)


@pytest.mark.parametrize("view", ["expanded", "padded", "computed", "flipped"])
def test_index_into_views_and_computed_values(view: str) -> None:
  # the selected element is read through the view (its mask gates the load too) or computed at the index
  rng = np.random.default_rng(7)
  a, b = rng.standard_normal((N, 5)).astype(np.float32), rng.standard_normal((N, 1)).astype(np.float32)
  make = {"expanded": lambda t, u: u.expand(N, 5), "padded": lambda t, u: t.pad(((3, 0), (1, 1)))[:N],
          "computed": lambda t, u: (t * 2 + u).exp(), "flipped": lambda t, u: t.flip(0)}[view]
  ref = {"expanded": lambda: np.broadcast_to(b, (N, 5)), "padded": lambda: np.pad(a, ((3, 0), (1, 1)))[:N],
         "computed": lambda: np.exp(a * 2 + b), "flipped": lambda: a[::-1]}[view]()
  idx = np.array([0, 1, 2, N - 1, 500, 2], np.int32)
  got = make(Tensor(a), Tensor(b))[Tensor(idx)]
  assert _loops_over(got) == 0
  np.testing.assert_allclose(got.numpy(), ref[idx], rtol=1e-6)


@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16, dtypes.int8, dtypes.bool])
def test_gather_of_narrow_dtypes(dt) -> None:
  if not is_dtype_supported(dt):
    pytest.skip(f"no {dt} on this device")
  x = np.random.default_rng(8).standard_normal((N, 4)) * 10
  src = Tensor(x.astype(np.float32)).cast(dt).realize()
  idx = np.array([[5, 0, N - 1, 7]], np.int32)
  got = src.gather(0, Tensor(idx))
  assert got.dtype == dt and _loops_over(got) == 0
  np.testing.assert_array_equal(got.cast(dtypes.float32).numpy(), np.take_along_axis(src.cast(dtypes.float32).numpy(), idx, 0))


def test_an_index_out_of_range_reads_nothing_and_raises() -> None:
  # without the gate on the load, an index of 2^30 reads 4 GB past the buffer: a crash, so in a process of its own
  code = ("from tg import Tensor; import sys\n"
          "x = Tensor.ones(997, 4).contiguous().realize()\n"
          "for bad in (1 << 30, -(1 << 30), 997):\n"
          "  try:\n"
          "    x[Tensor([1, bad])].numpy()\n"
          "  except IndexError as e:\n"
          "    print('IndexError', e)\n"
          "  try:\n"
          "    x.gather(0, Tensor([[bad, 0, 0, 0]])).numpy()\n"
          "  except IndexError as e:\n"
          "    print('IndexError', e)\n"
          "# unchecked (the internal form, no guard): the gate alone keeps the load in bounds, and the element is 0\n"
          "got = x._index_with_tensors([(0, Tensor([1, 1 << 30, 2]))], [None]).numpy()\n"
          "print('unchecked', got[:, 0].tolist())\n")
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=_env())
  assert r.returncode == 0, r.stderr[-2000:]
  assert r.stdout.count("IndexError") == 6, r.stdout
  assert "unchecked [1.0, 0.0, 1.0]" in r.stdout, r.stdout


def _env() -> dict[str, str]:
  import os
  return {**os.environ, "DEVICE": Device.DEFAULT}


def _kernel(t: Tensor) -> Kernel:
  si = [si for si in create_schedule([t.lazydata]) if si.ast.op in (MetaOps.SINK, BufferOps.STORE)][-1]
  return Kernel(si.ast, Device[Device.DEFAULT].renderer)


def test_heuristics_lay_a_one_hot_sum_out_as_an_elementwise_kernel() -> None:
  # its loop is gone after the rewrite: the opts go to the output axes (an Embedding's row of 16 floats), none to the
  # reduce axis it no longer walks
  x, idx = Tensor.rand(N, 16).realize(), Tensor(_ints((8,), 0, N)).realize()
  k = _kernel(x[idx])
  reduce_axes = [i for i, kind in enumerate(k.kinds) if kind == REDUCE]
  assert one_hot_sum(k.reduceop, reduce_axes)
  k.hand_coded_optimizations()
  assert all(o.op not in (OptOps.UNROLL, OptOps.GROUP, OptOps.GROUPTOP) for o in k.applied_opts), k.applied_opts
  lim = Tensor(np.array([[10], [500]], np.int32))
  plain = _kernel((Tensor.arange(N).reshape(1, N) < lim).where(Tensor.rand(2, N), 0).sum(1))
  assert not one_hot_sum(plain.reduceop, [i for i, kind in enumerate(plain.kinds) if kind == REDUCE])


def test_sum_of_data_over_the_axis_keeps_its_loop() -> None:
  # a mask that is not one-hot (a comparison of order, not equality) leaves the reduce alone
  x = np.random.default_rng(5).standard_normal((3, N)).astype(np.float32)
  lim = Tensor(np.array([[10], [500], [996]], np.int32))
  got = (Tensor.arange(N).reshape(1, N) < lim).where(Tensor(x), 0).sum(1)
  assert _loops_over(got) == 1
  np.testing.assert_allclose(got.numpy(), np.where(np.arange(N)[None] < lim.numpy(), x, 0).sum(1), rtol=1e-5, atol=1e-5)


# ---- the rewrite itself, on UOps: against running the loop ----

@pytest.mark.parametrize("seed", range(40))
def test_select_matches_the_loop(seed: int) -> None:
  rnd = random.Random(seed)
  g = UOp(UOps.SPECIAL, i32, (), ("gidx0", 0, 40))  # stands for a loaded index: free of the loop
  start, end = rnd.randint(-4, 3), rnd.randint(0, 12)
  r = UOp(UOps.RANGE, i32, (UOp.const(i32, start), UOp.const(i32, end)), (1000, True))
  terms = []
  for _ in range(rnd.randint(1, 3)):
    k, a, c = rnd.choice([-3, -2, -1, 1, 2, 3]), rnd.randint(-5, 5), rnd.randint(-20, 0)
    lhs, rhs = r * k + a, g + c
    ne = lhs.alu(BinaryOps.CMPNE, rhs) if rnd.random() < 0.5 else rhs.alu(BinaryOps.CMPNE, lhs)
    eq = ne.alu(BinaryOps.CMPNE, UOp.const(dtypes.bool, True)) if rnd.random() < 0.5 else ne.alu(UnaryOps.NEG)
    x = r * rnd.randint(-3, 3) + g  # the selected value depends on r
    form = rnd.randrange(3)
    if form == 0:  # the NOT folded into the where (uops.fold): where(a != b, 0, x)
      terms.append(UOp(UOps.ALU, i32, (ne, UOp.const(i32, 0), x), TernaryOps.WHERE))
      continue
    if form == 1:  # another condition, checked at the selected r
      eq = eq.logical_and(r.lt(rnd.randint(0, 8)))
    terms.append(UOp(UOps.ALU, i32, (eq, x, UOp.const(i32, 0)), TernaryOps.WHERE))
  body = terms[0]
  for t in terms[1:]:
    body = body + t
  red = UOp(UOps.REDUCE, i32, (body, r), BinaryOps.ADD)
  selected = select_one_hot(UOp(UOps.SINK, None, (red,))).src[0]
  assert not any(u.op is UOps.REDUCE for u in selected.toposort()), "every term is one-hot"
  for gv in range(40):
    assert _eval(selected, {g: gv}) == _eval(red, {g: gv}), (seed, gv)


def test_a_term_without_an_equality_keeps_the_loop() -> None:
  g = UOp(UOps.SPECIAL, i32, (), ("gidx0", 0, 8))
  r = UOp(UOps.RANGE, i32, (UOp.const(i32, 0), UOp.const(i32, 10)), (1000, True))
  one_hot = r.alu(BinaryOps.CMPNE, g).alu(UnaryOps.NEG).alu(TernaryOps.WHERE, r, UOp.const(i32, 0))
  ordered = r.lt(g).alu(TernaryOps.WHERE, r, UOp.const(i32, 0))
  red = UOp(UOps.REDUCE, i32, (one_hot + ordered, r), BinaryOps.ADD)
  assert select_one_hot(UOp(UOps.SINK, None, (red,))).src[0] is red
