"""The gradient of a tensor index (x[idx], nn.Embedding) is a scatter-add of the output's gradient into the indexed rows.
Written as a one-hot sum it is a sum over every token for every row of x (GPT-2's 50257 x 768 table and 128 tokens:
5G select-adds, seconds); tensor_index builds it from each token's row with its duplicates added (tokens^2 x row) and
a table of which token each row takes (rows x tokens compares), so it costs about what torch's scatter does. The numbers
must be torch's: duplicates add up, a NaN or inf stays in its own row, rows no token took are zero."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import tg.tensor_scatter as tensor_scatter
from tg import Device, Tensor, dtypes
from tg.codegen.kernel import Kernel
from tg.device import is_dtype_supported
from tg.engine.schedule import create_schedule
from tg.errors import IndexOutOfRangeError
from tg.nn import Embedding
from tg.ops import BufferOps, MetaOps


@pytest.fixture(params=["one-hot", "pairs", "sorted"])
def either_form(request, monkeypatch):
  """Each scatter in each of tensor_scatter.row_sums' forms, at any size (each is the cheapest somewhere)."""
  monkeypatch.setattr(tensor_scatter, "FORCE_FORM", request.param)


def _skip_interpreted() -> None:
  """The work-bound tests realize tens of millions of element operations: minutes on the PYTHON interpreter, whose
  numbers for every form are checked at small sizes (either_form)."""
  if Device.DEFAULT == "PYTHON":
    pytest.skip("tens of millions of interpreted element operations")


def _work(t: Tensor) -> int:
  """The operations the kernels that compute t do (the napkin estimate each program carries)."""
  total = 0
  for si in create_schedule([t.lazydata]):
    if si.ast.op in (MetaOps.SINK, BufferOps.STORE):
      total += int(Kernel(si.ast, Device[Device.DEFAULT].renderer).hand_coded_optimizations().to_program().op_estimate)
  return total


def _ints(shape: tuple[int, ...], lo: int, hi: int, seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed).integers(lo, hi, size=shape).astype(np.int32)


def _torch_grad(x: np.ndarray, fn, g: np.ndarray) -> np.ndarray:
  tx = torch.tensor(x, requires_grad=True)
  fn(tx).backward(torch.tensor(g))
  assert tx.grad is not None
  return tx.grad.numpy()


def _tg_grad(x: np.ndarray, fn, g: np.ndarray, dtype=dtypes.float32) -> tuple[Tensor, Tensor]:
  tx = Tensor(x, dtype=dtype, requires_grad=True)
  out = fn(tx)
  out.backward(Tensor(g, dtype=dtype))
  assert tx.grad is not None
  return out, tx.grad


@pytest.mark.usefixtures("either_form")
def test_embedding_gradient_adds_duplicates_as_torch() -> None:
  v, d = 997, 24
  idx = _ints((3, 11), 0, v)
  idx[1, 4] = idx[0, 0] = idx[2, 10]  # one row taken three times
  w = np.random.default_rng(1).standard_normal((v, d)).astype(np.float32)
  g = np.random.default_rng(2).standard_normal((3, 11, d)).astype(np.float32)
  emb = Embedding(v, d)
  emb.weight = Tensor(w, requires_grad=True)
  emb(Tensor(idx)).backward(Tensor(g))
  ref = _torch_grad(w, lambda tw: torch.nn.functional.embedding(torch.tensor(idx, dtype=torch.int64), tw), g)
  assert emb.weight.grad is not None
  np.testing.assert_allclose(emb.weight.grad.numpy(), ref, rtol=1e-6, atol=1e-6)


@pytest.mark.usefixtures("either_form")
@pytest.mark.parametrize("shape,index", [
  ((50, 6), lambda i: (i,)),                         # rows
  ((4, 50, 3), lambda i: (slice(None), i)),          # a later axis, axes before and after it
  ((50, 5), lambda i: (-1 - i.reshape(2, -1),)),     # negative indices, a 2-D index
  ((9, 50), lambda i: (slice(None), i.reshape(-1, 2))),
], ids=["rows", "middle axis", "negative 2-D", "last axis"])
def test_index_gradient_forms(shape, index) -> None:
  x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
  idx = _ints((12,), 0, 50)
  idx[:3] = idx[5]
  out_shape = x[index(idx)].shape
  g = np.random.default_rng(4).standard_normal(out_shape).astype(np.float32)
  out, grad = _tg_grad(x, lambda t: t[index(Tensor(idx))], g)
  np.testing.assert_array_equal(out.numpy(), x[index(idx)])
  ref = _torch_grad(x, lambda t: t[index(torch.tensor(idx, dtype=torch.int64))], g)
  np.testing.assert_allclose(grad.numpy(), ref, rtol=1e-6, atol=1e-6)


@pytest.mark.usefixtures("either_form")
def test_two_index_tensors() -> None:
  x = np.random.default_rng(5).standard_normal((13, 4, 17)).astype(np.float32)
  i, j = _ints((6, 1), 0, 13), _ints((1, 5), 0, 17, seed=1)
  i[0, 0] = i[3, 0]
  g = np.random.default_rng(6).standard_normal((6, 5, 4)).astype(np.float32)
  _, grad = _tg_grad(x, lambda t: t[Tensor(i), :, Tensor(j)], g)
  ref = _torch_grad(x, lambda t: t[torch.tensor(i, dtype=torch.int64), :, torch.tensor(j, dtype=torch.int64)], g)
  np.testing.assert_allclose(grad.numpy(), ref, rtol=1e-6, atol=1e-6)


@pytest.mark.usefixtures("either_form")
def test_more_tokens_than_rows() -> None:
  # (a small table and many tokens: the sum over the tokens for each row is the cheaper form then; same numbers)
  x = np.random.default_rng(7).standard_normal((5, 8)).astype(np.float32)
  idx = _ints((40,), 0, 5)
  g = np.random.default_rng(8).standard_normal((40, 8)).astype(np.float32)
  _, grad = _tg_grad(x, lambda t: t[Tensor(idx)], g)
  np.testing.assert_allclose(grad.numpy(), _torch_grad(x, lambda t: t[torch.tensor(idx, dtype=torch.int64)], g), rtol=1e-5, atol=1e-6)


@pytest.mark.usefixtures("either_form")
def test_nan_and_inf_stay_in_their_rows() -> None:
  x = np.zeros((30, 4), np.float32)
  idx = np.array([3, 7, 7, 12, 3, 20], np.int32)
  g = np.ones((6, 4), np.float32)
  g[0, 1] = np.nan      # row 3, with a finite duplicate
  g[1, 2] = np.inf      # row 7 ...
  g[2, 2] = -np.inf     # ... plus -inf: nan, as torch
  g[3, 0] = np.inf      # row 12 alone
  _, grad = _tg_grad(x, lambda t: t[Tensor(idx)], g)
  ref = _torch_grad(x, lambda t: t[torch.tensor(idx, dtype=torch.int64)], g)
  np.testing.assert_array_equal(grad.numpy(), ref)  # nan where torch has it, and only there
  assert np.isnan(ref).sum() == 2 and np.isinf(ref).sum() == 1


@pytest.mark.usefixtures("either_form")
def test_empty_index_gives_a_zero_gradient() -> None:
  x = np.ones((10, 3), np.float32)
  _, grad = _tg_grad(x, lambda t: t[Tensor(np.zeros((0,), np.int32))], np.zeros((0, 3), np.float32))
  np.testing.assert_array_equal(grad.numpy(), np.zeros((10, 3), np.float32))


@pytest.mark.usefixtures("either_form")
@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16])
def test_half_gradient(dt) -> None:
  if not is_dtype_supported(dt):
    pytest.skip(f"no {dt} on this device")
  x = np.random.default_rng(9).standard_normal((60, 8)).astype(np.float32)
  idx = _ints((20,), 0, 60)
  idx[:4] = 11
  g = np.random.default_rng(10).standard_normal((20, 8)).astype(np.float32)
  tdt = torch.float16 if dt == dtypes.float16 else torch.bfloat16
  _, grad = _tg_grad(x, lambda t: t[Tensor(idx)], g, dtype=dt)
  assert grad.dtype == dt
  tx = torch.tensor(x, dtype=tdt, requires_grad=True)
  tx[torch.tensor(idx, dtype=torch.int64)].backward(torch.tensor(g, dtype=tdt))
  assert tx.grad is not None
  np.testing.assert_allclose(grad.float().numpy(), tx.grad.float().numpy(), rtol=1e-2, atol=1e-2)


def test_gradient_work_does_not_multiply_rows_tokens_and_width() -> None:
  _skip_interpreted()
  # a sum over the tokens for each element of the table is rows x tokens x width (41M here); the scatter's parts are
  # tokens^2 x width, rows x tokens and rows x width (about 2M)
  v, d, t = 20011, 32, 64
  idx = _ints((t,), 0, v)
  idx[:5] = idx[40]
  w = Tensor.randn(v, d, requires_grad=True)
  g = np.random.default_rng(11).standard_normal((t, d)).astype(np.float32)
  w[Tensor(idx)].backward(Tensor(g))
  assert w.grad is not None
  work = _work(w.grad)
  assert work < min(v * t * d // 2, 10 * (t * t * d + v * t + v * d)), f"the gradient's kernels do {work} operations"
  ref = np.zeros((v, d), np.float32)
  np.add.at(ref, idx, g)
  np.testing.assert_allclose(w.grad.numpy(), ref, rtol=1e-6, atol=1e-6)


@pytest.mark.usefixtures("either_form")
def test_gradient_accumulates_over_calls() -> None:
  x = np.random.default_rng(12).standard_normal((40, 3)).astype(np.float32)
  idx = np.array([1, 5, 5, 39], np.int32)
  tx = Tensor(x, requires_grad=True)
  for _ in range(2):
    (tx[Tensor(idx)] * 3).sum().backward()
  ref = np.zeros_like(x)
  np.add.at(ref, idx, 6.0)
  assert tx.grad is not None
  np.testing.assert_allclose(tx.grad.numpy(), ref)


@pytest.mark.usefixtures("either_form")
def test_an_index_out_of_range_still_raises_in_the_gradient() -> None:
  # the forward result is never realized: the gradient alone must not drop the bad token silently
  tx = Tensor(np.ones((50, 4), np.float32), requires_grad=True)
  emb = Embedding(50, 4)
  emb.weight = tx
  emb(Tensor(np.array([3, 50, 7], np.int32))).sum().backward()
  assert tx.grad is not None
  with pytest.raises(IndexOutOfRangeError):
    tx.grad.numpy()


# ---------- setitem with tensor indices: rows written, not elements searched ----------

@pytest.mark.parametrize("shape,index,vshape", [
  ((300, 7), lambda i: (i,), (40, 7)),                            # rows
  ((300, 7), lambda i: (i,), (7,)),                               # one row broadcast
  ((5, 300, 3), lambda i: (slice(None), i), (5, 40, 3)),          # a middle axis
  ((5, 300, 3), lambda i: (Ellipsis, i, slice(None)), (1, 40, 1)),  # Ellipsis, a broadcast value
  ((300, 4), lambda i: (-1 - i.reshape(8, 5),), (8, 5, 4)),       # negative indices, a 2-D index
  ((6, 300), lambda i: (slice(None), i), (6, 40)),                # the last axis
], ids=["rows", "row broadcast", "middle axis", "ellipsis", "negative 2-D", "last axis"])
def test_setitem_rows(shape, index, vshape) -> None:
  idx = _ints((40,), 0, 300)
  idx[10:20] = idx[3]  # repeated: the last value written wins, as numpy
  x = np.random.default_rng(13).standard_normal(shape).astype(np.float32)
  v = np.random.default_rng(14).standard_normal(vshape).astype(np.float32)
  v[0, ...] = np.nan
  t = Tensor(x).realize()
  t[index(Tensor(idx))] = Tensor(v)
  ref = x.copy()
  ref[index(idx)] = v
  np.testing.assert_array_equal(t.numpy(), ref)


def test_setitem_two_index_tensors_apart() -> None:
  x = np.random.default_rng(15).standard_normal((30, 4, 20)).astype(np.float32)
  i, j = _ints((6, 1), 0, 30), _ints((1, 5), 0, 20, seed=1)
  v = np.random.default_rng(16).standard_normal((6, 5, 4)).astype(np.float32)
  t = Tensor(x).realize()
  t[Tensor(i), :, Tensor(j)] = Tensor(v)
  ref = x.copy()
  ref[i, :, j] = v
  np.testing.assert_array_equal(t.numpy(), ref)


def test_setitem_rows_of_ints_and_bools() -> None:
  for dt, npdt in [(dtypes.int32, np.int32), (dtypes.bool, np.bool_)]:
    x = (np.arange(600) % 3 == 0).astype(npdt).reshape(200, 3) if npdt is np.bool_ else np.arange(600, dtype=npdt).reshape(200, 3)
    v = np.ones((4, 3), npdt)
    t = Tensor(x, dtype=dt).realize()
    t[Tensor(np.array([5, 199, 5, 0], np.int32))] = Tensor(v, dtype=dt)
    ref = x.copy()
    ref[[5, 199, 5, 0]] = v
    np.testing.assert_array_equal(t.numpy(), ref)


def test_setitem_row_index_out_of_range_raises_and_writes_nothing() -> None:
  x = np.arange(40, dtype=np.float32).reshape(10, 4)
  t = Tensor(x).realize()
  with pytest.raises(IndexOutOfRangeError):
    t[Tensor(np.array([1, 10], np.int32))] = 0.0
  np.testing.assert_array_equal(t.numpy(), x)


def test_setitem_rows_work_does_not_multiply_selected_and_all_elements(monkeypatch) -> None:
  _skip_interpreted()
  # element by element, each of the t x d written elements was compared with each of the v x d positions (2.6G
  # compares here); by rows, v x t compares and v x d selects
  v, d, t = 20011, 32, 64
  idx = _ints((t,), 0, v)
  x = Tensor.zeros(v, d).contiguous().realize()
  vals = np.random.default_rng(17).standard_normal((t, d)).astype(np.float32)
  works: list[int] = []
  assign = Tensor.assign

  def measured(self: Tensor, value: Tensor) -> Tensor:
    works.append(_work(value))
    return assign(self, value)
  monkeypatch.setattr(Tensor, "assign", measured)
  x[Tensor(idx)] = Tensor(vals)
  ref = np.zeros((v, d), np.float32)
  ref[idx] = vals
  np.testing.assert_array_equal(x.numpy(), ref)
  assert len(works) == 1 and works[0] < 10 * (v * t + v * d), f"the new value's kernels do {works} operations"


def test_many_tokens_take_the_sorted_form() -> None:
  _skip_interpreted()
  # 4096 tokens into 5000 rows (many repeats): tokens^2 x width would be the pairs' 1.1G; the sorted form orders the
  # tokens by counting (tokens^2 compares, no width) and scans runs of one row (log2(tokens) passes of tokens x width)
  v, d, t = 5000, 64, 4096
  costs = tensor_scatter.form_costs(t, d, v)
  assert min(costs, key=costs.__getitem__) == "sorted"
  idx = _ints((t,), 0, v, seed=3)
  g = np.random.default_rng(18).standard_normal((t, d)).astype(np.float32)
  g[7, 3] = np.inf
  w = Tensor.randn(v, d, requires_grad=True)
  w[Tensor(idx)].backward(Tensor(g))
  assert w.grad is not None
  assert _work(w.grad) < costs["pairs"] // 3
  ref = np.zeros((v, d), np.float64)
  np.add.at(ref, idx, g.astype(np.float64))
  np.testing.assert_allclose(w.grad.numpy(), ref, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("t,p,form", [(128, 50257, "pairs"), (12288, 50257, "sorted"), (40, 5, "one-hot")])
def test_form_by_napkin_cost(t, p, form) -> None:
  # GPT-2's embedding: one prompt's 128 tokens, a training batch of 12 x 1024; a small table read many times
  costs = tensor_scatter.form_costs(t, 768 if p > 5 else 8, p)
  assert min(costs, key=costs.__getitem__) == form


# ---------- index_add and index_copy: the same writes along any dim ----------

@pytest.mark.usefixtures("either_form")
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_index_add_and_index_copy_as_torch(dim) -> None:
  shape = (30, 7, 5)
  n = shape[dim]
  idx = np.array([3, 0, n - 1, 3, 2, 3, 0], np.int64) % n
  src_shape = tuple(len(idx) if k == dim % 3 else s for k, s in enumerate(shape))
  x = np.random.default_rng(19).standard_normal(shape).astype(np.float32)
  src = np.random.default_rng(20).standard_normal(src_shape).astype(np.float32)
  gout = np.random.default_rng(21).standard_normal(shape).astype(np.float32)
  for name, kw in [("index_add", {"alpha": 2.0}), ("index_add", {}), ("index_copy", {})]:
    tx, ts = Tensor(x, requires_grad=True), Tensor(src, requires_grad=True)
    out = getattr(tx, name)(dim, Tensor(idx.astype(np.int32)), ts, **kw)
    out.backward(Tensor(gout))
    rx, rs = torch.tensor(x, requires_grad=True), torch.tensor(src, requires_grad=True)
    ref = getattr(rx, name)(dim, torch.tensor(idx), rs, **kw)
    ref.backward(torch.tensor(gout))
    if name == "index_copy":  # a repeated index: torch leaves which write wins undefined; tg's (and numpy's) is the last
      ref = torch.tensor(x).index_copy(dim, torch.tensor(idx), rs.detach())
      np.testing.assert_array_equal(out.numpy(), _last_write(x, dim, idx, src))
    else:
      np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-6, atol=1e-6)
    assert tx.grad is not None and ts.grad is not None and rx.grad is not None and rs.grad is not None
    np.testing.assert_allclose(tx.grad.numpy(), rx.grad.numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ts.grad.numpy(), rs.grad.numpy(), rtol=1e-6, atol=1e-6)


def _last_write(x: np.ndarray, dim: int, idx: np.ndarray, src: np.ndarray) -> np.ndarray:
  out = np.moveaxis(x.copy(), dim, 0)
  s = np.moveaxis(src, dim, 0)
  for i, p in enumerate(idx):
    out[p] = s[i]
  return np.moveaxis(out, 0, dim)


def test_index_add_out_of_range_raises() -> None:
  with pytest.raises(IndexOutOfRangeError):
    Tensor.zeros(5, 3).index_add(0, Tensor([1, 5]), Tensor.ones(2, 3)).numpy()
  with pytest.raises(IndexOutOfRangeError):
    Tensor.zeros(5, 3).index_copy(0, Tensor([-1]), Tensor.ones(1, 3)).numpy()


def test_index_add_work_does_not_multiply_rows_tokens_and_width() -> None:
  _skip_interpreted()
  v, d, t = 20011, 32, 64
  idx = _ints((t,), 0, v)
  src = np.random.default_rng(22).standard_normal((t, d)).astype(np.float32)
  out = Tensor.zeros(v, d).contiguous().index_add(0, Tensor(idx), Tensor(src))
  assert _work(out) < min(v * t * d // 2, 10 * (t * t * d + v * t + v * d)), _work(out)
  ref = np.zeros((v, d), np.float32)
  np.add.at(ref, idx, src)
  np.testing.assert_allclose(out.numpy(), ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("int64", [True, False], ids=["int64 key", "two-part order"])
def test_sorted_form_past_int32_keys(monkeypatch, int64) -> None:
  # the order by (row, token) as one key needs int64 past 2^31 (rows x tokens); a device without int64 compares the
  # two parts instead: both forced here with a small key bound
  if int64 and not is_dtype_supported(dtypes.int64):
    pytest.skip("no int64 on this device")
  monkeypatch.setattr(tensor_scatter, "FORCE_FORM", "sorted")
  if not int64:
    monkeypatch.setattr(tensor_scatter, "is_dtype_supported", lambda dt, device=None: dt != dtypes.int64)
  monkeypatch.setattr(tensor_scatter, "_KEY_LIMIT", 10)
  idx = _ints((50,), 0, 20, seed=4)
  g = np.random.default_rng(23).standard_normal((50, 3)).astype(np.float32)
  w = Tensor.zeros(20, 3, requires_grad=True)
  w[Tensor(idx)].backward(Tensor(g))
  ref = np.zeros((20, 3), np.float32)
  np.add.at(ref, idx, g)
  assert w.grad is not None
  np.testing.assert_allclose(w.grad.numpy(), ref, rtol=1e-5, atol=1e-6)
