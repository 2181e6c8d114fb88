"""The select, sort, scatter and rearrange ops (tg/tensor_select.py) against torch: forward values and dtypes, the
gradient of a randomly weighted sum (so a permuted gradient shows), negative dims, ints, empty tensors, NaN, errors.
Sizes are small: the PYTHON device interprets every kernel."""
import math
import warnings

import numpy as np
import pytest

from tg import Device, Tensor, dtypes
from tg.device import is_dtype_supported
from tg.errors import AxisError, DTypeError, IndexOutOfRangeError, ShapeError, TgArgumentError

torch = pytest.importorskip("torch")


def _np(x):
  return x.detach().numpy() if isinstance(x, torch.Tensor) else x.numpy()


def _same(got, ref, tol=1e-5, exact_dtype=True):
  """tg result == torch result: shape, values (NaN where torch has NaN) and, for values, dtype. Indices are compared
  as numbers: tg's are int32, torch's int64."""
  g, r = _np(got), _np(ref)
  assert g.shape == r.shape, f"shape {g.shape} vs torch {r.shape}"
  if exact_dtype:
    assert g.dtype == r.dtype, f"dtype {g.dtype} vs torch {r.dtype}"
  if np.issubdtype(r.dtype, np.floating):
    np.testing.assert_allclose(g.astype(np.float64), r.astype(np.float64), atol=tol, rtol=tol, equal_nan=True)
  else:
    np.testing.assert_array_equal(g.astype(np.int64), r.astype(np.int64))


def _grads(tg_fn, torch_fn, *arrays, tol=1e-5, pick=0):
  """Compare the forward results and the gradients of sum(out * w) for a fixed random w; `pick` selects the
  differentiable output of an op that returns (values, indices)."""
  tts = [torch.tensor(a, requires_grad=np.issubdtype(a.dtype, np.floating)) for a in arrays]
  gts = [Tensor(a, requires_grad=np.issubdtype(a.dtype, np.floating)) for a in arrays]
  tout, gout = torch_fn(*tts), tg_fn(*gts)
  if isinstance(tout, tuple):
    for a, b in zip(gout, tout):
      _same(a, b, tol, exact_dtype=False)
    tout, gout = tout[pick], gout[pick]
  _same(gout, tout, tol)
  w = np.random.default_rng(7).uniform(0.5, 2, size=tout.shape).astype(np.float32)
  (tout * torch.tensor(w)).sum().backward()
  (gout * Tensor(w)).sum().backward()
  for t, g in zip(tts, gts):
    if t.requires_grad:
      assert g.grad is not None
      _same(g.grad, t.grad, tol)


def _ti(idx):
  """An index array as an int32 tensor: torch wants int64 indices, devices without int64 (WEBGPU) can't load them."""
  return Tensor(np.asarray(idx).astype(np.int32))


def _rand(*shape, seed=0):
  return np.random.default_rng(seed).uniform(-2, 2, size=shape).astype(np.float32)


def _distinct(*shape, seed=0):
  n = int(np.prod(shape))
  return (np.random.default_rng(seed).permutation(n).reshape(shape).astype(np.float32) - n / 2) / 4


PATHS = pytest.mark.parametrize("network", [False, True], ids=["pairwise", "network"])


@pytest.fixture
def use_network(monkeypatch):
  """Sort and the scans have two paths: the one-pass pairwise compare of short axes, and the log-depth networks of
  long ones. use_network(True) takes the networks on the short axes of these tests by lowering the threshold."""
  import tg.tensor_select
  def use(on):
    if on:
      monkeypatch.setattr(tg.tensor_select, "NETWORK_ABOVE", 0)
  return use


# ---------- sort, argsort, topk ----------

@pytest.mark.parametrize("dim,descending,network", [(-1, False, False), (0, True, False), (-1, True, True)])
def test_sort_values_indices_grad(dim, descending, network, use_network):
  use_network(network)
  _grads(lambda x: x.sort(dim, descending), lambda x: torch.sort(x, dim=dim, descending=descending, stable=True), _distinct(5, 6))


@PATHS
def test_sort_stable_ties_and_nan(network, use_network):
  use_network(network)
  x = np.array([[2, 1, 2, 0, 1, 2, 0], [1, 1, 1, 1, 1, 1, 1]], dtype=np.float32)
  x[0, 1] = x[1, 3] = np.nan
  x[1, 5] = -0.0
  for desc in (False, True):
    v, i = Tensor(x).sort(-1, descending=desc)
    tv, ti = torch.sort(torch.tensor(x), dim=-1, descending=desc, stable=True)
    _same(v, tv)
    _same(i, ti, exact_dtype=False)


def test_sort_ints_halfs_bools_and_edges():
  xi = np.random.default_rng(1).integers(-5, 5, size=(3, 9)).astype(np.int32)
  v, i = Tensor(xi).sort(0, descending=True)
  tv, ti = torch.sort(torch.tensor(xi), dim=0, descending=True, stable=True)
  _same(v, tv)
  _same(i, ti, exact_dtype=False)
  assert i.dtype == dtypes.int32
  xb = np.array([True, False, True, False])
  _same(Tensor(xb).sort()[0], torch.sort(torch.tensor(xb))[0])
  for shape, dim in [((0, 4), -1), ((0, 4), 0), ((3, 1), 1), ((), 0)]:
    x = np.zeros(shape, dtype=np.float32)
    v, i = Tensor(x).sort(dim)
    tv, ti = torch.sort(torch.tensor(x), dim=dim)
    _same(v, tv)
    _same(i, ti, exact_dtype=False)


def test_argsort_topk():
  x = _distinct(4, 6, seed=3)
  _same(Tensor(x).argsort(-1, descending=True), torch.argsort(torch.tensor(x), dim=-1, descending=True), exact_dtype=False)
  _grads(lambda t: t.topk(3), lambda t: torch.topk(t, 3), x)
  _grads(lambda t: t.topk(2, dim=0, largest=False), lambda t: torch.topk(t, 2, dim=0, largest=False), x)
  v, i = Tensor(x).topk(0)
  assert v.shape == (4, 0) and i.shape == (4, 0)
  xi = np.array([1, 3, 3, 2], dtype=np.int32)
  _same(Tensor(xi).topk(2)[1], torch.topk(torch.tensor(xi), 2)[1], exact_dtype=False)
  with pytest.raises(TgArgumentError):
    Tensor(x).topk(7)


# ---------- scatter family ----------

def _perm_index(shape, n, seed=0):
  """An index of `shape` whose columns are distinct (no repeated target) into an axis of n along dim 0."""
  rng = np.random.default_rng(seed)
  return np.stack([rng.permutation(n)[:shape[0]] for _ in range(shape[1])], axis=1).astype(np.int64)


def test_scatter_src_value_and_grad():
  idx = _perm_index((3, 4), 5)
  _grads(lambda s, x: s.scatter(0, _ti(idx), x), lambda s, x: s.scatter(0, torch.tensor(idx), x), _rand(5, 4), _rand(3, 4, seed=1))
  big = _rand(4, 6, seed=1)  # src larger than index: only its leading block is used (torch's backward fails on it)
  _same(Tensor(_rand(5, 4)).scatter(0, _ti(idx), Tensor(big)), torch.tensor(_rand(5, 4)).scatter(0, torch.tensor(idx), torch.tensor(big)))
  idx1 = np.array([[2, 0], [1, 3], [0, 3]])  # dim -1, index smaller than self in both axes
  _grads(lambda s, x: s.scatter(-1, _ti(idx1), x), lambda s, x: s.scatter(-1, torch.tensor(idx1), x), _rand(4, 5), _rand(3, 2, seed=2))
  xi = np.arange(20, dtype=np.int32).reshape(5, 4)
  _same(Tensor(xi).scatter(0, _ti(idx), 7), torch.tensor(xi).scatter(0, torch.tensor(idx), 7))
  _same(Tensor(xi).scatter(0, _ti(idx), value=-1), torch.tensor(xi).scatter(0, torch.tensor(idx), value=-1))


def test_scatter_repeated_index_last_write_wins_and_reduce_arg():
  idx = np.array([[0, 1, 0], [0, 2, 2]])
  src = np.array([[1., 2., 3.], [4., 5., 6.]], dtype=np.float32)
  got = Tensor.zeros(3, 3).scatter(1, _ti(idx), Tensor(src)).numpy()
  np.testing.assert_array_equal(got, [[3., 2., 0.], [4., 0., 6.], [0., 0., 0.]])
  for reduce in ("add", "multiply"):
    x = _rand(3, 3)
    with warnings.catch_warnings():  # torch deprecates reduce= with a tensor src, tinygrad programs may still use it
      warnings.simplefilter("ignore")
      ref = torch.tensor(x).scatter(1, torch.tensor(idx), torch.tensor(src), reduce=reduce)
    _same(Tensor(x).scatter(1, _ti(idx), Tensor(src), reduce=reduce), ref)


def test_scatter_add_repeats_and_grad():
  idx = np.array([[0, 1, 0, 3], [2, 2, 2, 0]])
  _grads(lambda s, x: s.scatter_add(0, _ti(idx), x), lambda s, x: s.scatter_add(0, torch.tensor(idx), x), _rand(4, 4), _rand(2, 4, seed=1))
  xi = np.arange(16, dtype=np.int32).reshape(4, 4)
  si = np.ones((2, 4), dtype=np.int32)
  _same(Tensor(xi).scatter_add(-2, _ti(idx), Tensor(si)), torch.tensor(xi).scatter_add(-2, torch.tensor(idx), torch.tensor(si)))


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
def test_scatter_reduce(reduce):
  idx = np.array([[0, 1, 0, 3, 0], [2, 2, 2, 0, 0]])
  for include_self in (True, False):
    # self and src share no value: torch's amax/amin backward splits the gradient with an equal self even when
    # include_self=False (self was not a candidate), which tg does not copy
    _grads(lambda s, x: s.scatter_reduce(1, _ti(idx), x, reduce, include_self=include_self),
           lambda s, x: s.scatter_reduce(1, torch.tensor(idx), x, reduce, include_self=include_self),
           _distinct(2, 4), _distinct(2, 5, seed=1) + 0.125)
    xi = np.arange(-4, 4, dtype=np.int32).reshape(2, 4)
    si = np.array([[3, -4, 5, 1, -7], [2, 9, -3, 4, 4]], dtype=np.int32)
    _same(Tensor(xi).scatter_reduce(1, _ti(idx), Tensor(si), reduce, include_self=include_self),
          torch.tensor(xi).scatter_reduce(1, torch.tensor(idx), torch.tensor(si), reduce, include_self=include_self))


def test_scatter_errors():
  x = Tensor.zeros(3, 4)
  with pytest.raises(ShapeError):
    x.scatter(0, Tensor([0, 1]), 1.0)  # index of another rank
  with pytest.raises(DTypeError):
    x.scatter(0, Tensor([[0.5]]), 1.0)
  with pytest.raises(AxisError):
    x.scatter(2, Tensor([[0]]), 1.0)
  with pytest.raises(RuntimeError):  # torch-style except clauses catch them too
    x.scatter_reduce(0, Tensor([[0]]), Tensor([[1.0]]), "median")


@pytest.mark.parametrize("bad", [3, 5, -1])
def test_scatter_index_out_of_range_raises(bad):
  # torch raises 'index 3 is out of bounds for dimension 0 with size 3'; tg wrote nowhere for that element and
  # returned the rest as if it were right
  x, src = Tensor(_rand(3, 4)), Tensor(_rand(1, 4))
  idx = Tensor([[bad, 0, 0, 0]])
  for run in (lambda: x.scatter(0, idx, src), lambda: x.scatter(0, idx, 2.0), lambda: x.scatter_add(0, idx, src),
              lambda: x.scatter_reduce(0, idx, src, "amax"), lambda: x.scatter(0, idx, src, reduce="multiply")):
    with pytest.raises(IndexOutOfRangeError, match=f"index {bad} is out of bounds for dimension 0 with size 3"):
      run().numpy()
  # a computed index (not a constant) is checked when the result is realized
  with pytest.raises(IndexOutOfRangeError):
    x.scatter(1, (Tensor([[1, 2], [0, 1], [3, 3]]) + 1).contiguous(), 1.0).numpy()
  assert x.scatter(1, Tensor([[3, 0]]), 1.0).numpy()[0].tolist()[3] == 1.0  # the last position is in range


def test_index_select_and_index_add():
  idx = np.array([3, 0, 3, 1])
  _grads(lambda x: x.index_select(1, _ti(idx)), lambda x: x.index_select(1, torch.tensor(idx)), _rand(3, 5))
  _grads(lambda x: x.index_select(-2, _ti(idx)), lambda x: x.index_select(-2, torch.tensor(idx)), _rand(5, 2))
  xi = np.arange(10, dtype=np.int32).reshape(5, 2)
  _same(Tensor(xi).index_select(0, _ti(idx)), torch.tensor(xi).index_select(0, torch.tensor(idx)))
  _grads(lambda s, x: s.index_add(0, _ti(idx), x, alpha=2.0), lambda s, x: s.index_add(0, torch.tensor(idx), x, alpha=2.0),
         _rand(5, 3), _rand(4, 3, seed=1))
  _same(Tensor(xi).index_add(-2, _ti(idx), Tensor(xi[:4])), torch.tensor(xi).index_add(-2, torch.tensor(idx), torch.tensor(xi[:4])))
  with pytest.raises(ShapeError):
    Tensor(xi).index_add(0, _ti(idx), Tensor(xi))


def test_index_copy_index_fill_take_along_dim_kthvalue():
  idx = np.array([2, 0])
  _grads(lambda s, x: s.index_copy(1, _ti(idx), x), lambda s, x: s.index_copy(1, torch.tensor(idx), x), _rand(2, 3), _rand(2, 2, seed=1))
  got = Tensor.zeros(3).index_copy(0, _ti([1, 1]), Tensor([4.0, 5.0]))  # a repeated index: the last write wins
  np.testing.assert_array_equal(got.numpy(), [0.0, 5.0, 0.0])
  _grads(lambda t: t.index_fill(-2, _ti([1]), -1.5), lambda t: t.index_fill(-2, torch.tensor([1]), -1.5), _rand(3, 2))
  xi = np.arange(6, dtype=np.int32).reshape(2, 3)
  _same(Tensor(xi).index_fill(1, _ti(idx), 7), torch.tensor(xi).index_fill(1, torch.tensor(idx), 7))
  ti = np.array([[0, 2], [1, 1]])  # broadcasts against (1, 3) outside dim 1
  _grads(lambda t: t.take_along_dim(_ti(ti), 1), lambda t: torch.take_along_dim(t, torch.tensor(ti), 1), _rand(1, 3))
  _grads(lambda t: t.take_along_dim(_ti([5, 0])), lambda t: torch.take_along_dim(t, torch.tensor([5, 0])), _rand(2, 3))
  x = _distinct(3, 4)
  x[1, 2] = np.nan
  for k, dim, keep in [(2, -1, False), (3, 0, True)]:
    for a, b in zip(Tensor(x).kthvalue(k, dim, keep), torch.kthvalue(torch.tensor(x), k, dim, keep)):
      _same(a, b, exact_dtype=False)
  with pytest.raises(TgArgumentError):
    Tensor(x).kthvalue(5)


def test_masked_fill_matches_torch():
  x = _rand(3, 4)
  m = np.array([True, False, True, False])
  _grads(lambda t: t.masked_fill(Tensor(m), -math.inf), lambda t: t.masked_fill(torch.tensor(m), -math.inf), x)
  _grads(lambda t, v: t.masked_fill(Tensor(m), v), lambda t, v: t.masked_fill(torch.tensor(m), v), x, np.array(3.0, dtype=np.float32))
  row = Tensor(_rand(4, seed=3))  # a value tensor that broadcasts, as tinygrad's masked_fill (a where) takes it
  np.testing.assert_allclose(Tensor(x).masked_fill(Tensor(m), row).numpy(), np.where(m, row.numpy(), x))
  xi = np.arange(12, dtype=np.int32).reshape(3, 4)
  for value in (5, 2.5, -2.5, True):
    _same(Tensor(xi).masked_fill(Tensor(m), value), torch.tensor(xi).masked_fill(torch.tensor(m), value))


# ---------- rearranging ----------

def test_roll():
  x = _rand(3, 4, 5)
  for shifts, dims in [((1, -2), (0, 2)), (-7, -1), (13, None), ((2, 2), (1, 1))]:
    _grads(lambda t: t.roll(shifts, dims), lambda t: torch.roll(t, shifts, dims), x)
  xi = np.arange(6, dtype=np.int32).reshape(2, 3)
  _same(Tensor(xi).roll(1, 1), torch.roll(torch.tensor(xi), 1, 1))
  _same(Tensor(np.zeros((0, 3), np.float32)).roll(1, 0), torch.roll(torch.zeros(0, 3), 1, 0))


def test_diag():
  for k in (1, -2):
    _grads(lambda t: t.diag(k), lambda t: torch.diag(t, k), _rand(3))
  for shape, k in (((3, 5), 0), ((3, 5), 2), ((5, 3), -1), ((3, 5), -4), ((3, 5), 6)):
    _grads(lambda t: t.diag(k), lambda t: torch.diag(t, k), _rand(*shape))
  xi = np.arange(4, dtype=np.int32)
  _same(Tensor(xi).diag(1), torch.diag(torch.tensor(xi), 1))
  with pytest.raises(ShapeError):
    Tensor.zeros(2, 2, 2).diag()


def test_diagonal_and_repeat_interleave():
  x = _rand(2, 3, 4)
  for off, d1, d2 in [(0, 0, 1), (1, -1, 1), (-1, 2, 0), (5, 1, 2)]:
    _grads(lambda t: t.diagonal(off, d1, d2), lambda t: torch.diagonal(t, off, d1, d2), x)
  for reps, dim in [(2, 1), (3, -1), (2, None), (0, 0)]:
    _grads(lambda t: t.repeat_interleave(reps, dim), lambda t: t.repeat_interleave(reps, dim), x)
  with pytest.raises(AxisError):
    Tensor(x).diagonal(0, 1, -2)
  with pytest.raises(TgArgumentError):
    Tensor(x).repeat_interleave(Tensor([1, 2]))


def test_tril_triu_offsets():
  for fn in ("tril", "triu"):
    for k in (-1, 2):
      _grads(lambda t: getattr(t, fn)(k), lambda t: getattr(torch, fn)(t, k), _rand(2, 3, 4))
    xi = np.arange(12, dtype=np.int32).reshape(4, 3)
    for k in (-4, 9):
      _same(getattr(Tensor(xi), fn)(k), getattr(torch, fn)(torch.tensor(xi), k))


def test_narrow_movedim_tile():
  x = _rand(3, 4, 5)
  _grads(lambda t: t.narrow(1, 1, 2), lambda t: t.narrow(1, 1, 2), x)
  _grads(lambda t: t.narrow(-1, -3, 3), lambda t: t.narrow(-1, -3, 3), x)
  with pytest.raises(TgArgumentError):
    Tensor(x).narrow(0, 2, 2)
  for src, dst in [((0, 1), (2, 0)), (-1, 0), ((), ())]:
    _grads(lambda t: t.movedim(src, dst), lambda t: torch.movedim(t, src, dst), x)
  with pytest.raises(AxisError):
    Tensor(x).movedim((0, 0), (1, 2))
  for reps in ((2,), (2, 1, 1, 2), (0, 1)):
    _grads(lambda t: t.tile(reps), lambda t: t.tile(reps), _rand(2, 3))


def test_unfold():
  x = _rand(2, 9)
  for dim, size, step in [(1, 3, 2), (0, 2, 1), (-1, 9, 5), (1, 0, 2)]:
    _grads(lambda t: t.unfold(dim, size, step), lambda t: t.unfold(dim, size, step), x)
  with pytest.raises(TgArgumentError):
    Tensor(x).unfold(1, 10, 1)


def test_pixel_shuffle_and_unshuffle():
  x = _rand(2, 8, 2, 3)
  _grads(lambda t: t.pixel_shuffle(2), lambda t: torch.nn.functional.pixel_shuffle(t, 2), x)
  _grads(lambda t: t.pixel_unshuffle(2), lambda t: torch.nn.functional.pixel_unshuffle(t, 2), _rand(1, 2, 4, 6))
  with pytest.raises(ShapeError):
    Tensor(x).pixel_shuffle(3)


def test_meshgrid():
  a, b, c = _rand(3), _rand(2, seed=1), _rand(4, seed=2)
  for indexing in ("ij", "xy"):
    got = Tensor.meshgrid(Tensor(a), Tensor(b), Tensor(c), indexing=indexing)
    ref = torch.meshgrid(torch.tensor(a), torch.tensor(b), torch.tensor(c), indexing=indexing)
    for g, r in zip(got, ref):
      _same(g, r)
  _grads(lambda x, y: Tensor.meshgrid([x, y], indexing="xy")[0] * Tensor.meshgrid(x, y, indexing="xy")[1],
         lambda x, y: torch.meshgrid([x, y], indexing="xy")[0] * torch.meshgrid(x, y, indexing="xy")[1], a, b)
  with pytest.raises(TgArgumentError):
    Tensor.meshgrid(Tensor(a), indexing="yx")


# ---------- scans ----------

@PATHS
def test_cumprod(network, use_network):
  use_network(network)
  x = _rand(3, 6)
  x[1, 2] = 0.0  # a zero: the gradient past it is not prod/x
  x[2, 1] = x[2, 4] = 0.0
  for dim in (1,) if network else (1, -2):
    _grads(lambda t: t.cumprod(dim), lambda t: t.cumprod(dim), x)
  if network:  # one network is enough for the rest
    return
  xi = np.array([[1, -2, 3, 2], [5, 0, 2, 1]], dtype=np.int32)
  _same(Tensor(xi).cumprod(1), torch.tensor(xi).cumprod(1), exact_dtype=is_dtype_supported(dtypes.int64))
  _same(Tensor(np.zeros((0, 3), np.float32)).cumprod(0), torch.zeros(0, 3).cumprod(0))


@pytest.mark.parametrize("op,network", [("cummax", False), ("cummin", False), ("cummax", True)])
def test_cummax_cummin(op, network, use_network):
  use_network(network)
  _grads(lambda t: getattr(t, op)(-2), lambda t: getattr(torch, op)(t, -2), _distinct(5, 2, seed=1))
  x = np.array([1., 3., 3., 2., np.nan, 5., np.nan, 1., 0.], dtype=np.float32)
  for a, b in zip(getattr(Tensor(x), op)(0), getattr(torch, op)(torch.tensor(x), 0)):
    _same(a, b, exact_dtype=False)
  if network:  # one network is enough for the rest
    return
  _grads(lambda t: getattr(t, op)(1), lambda t: getattr(torch, op)(t, 1), _distinct(3, 7))
  xi = np.array([[1, 3, 3, 2, 5, 5, -1, -1]], dtype=np.int32)
  for a, b in zip(getattr(Tensor(xi), op)(-1), getattr(torch, op)(torch.tensor(xi), -1)):
    _same(a, b, exact_dtype=False)


# ---------- counting and searching ----------

def test_bincount():
  x = np.array([0, 1, 1, 3, 6, 1], dtype=np.int32)
  w = _rand(6)
  _same(Tensor(x).bincount(), torch.tensor(x).bincount(), exact_dtype=is_dtype_supported(dtypes.int64))
  _same(Tensor(x).bincount(minlength=10), torch.tensor(x).bincount(minlength=10), exact_dtype=False)
  _same(Tensor(x).bincount(Tensor(w)), torch.tensor(x).bincount(torch.tensor(w)))  # torch has no gradient for it
  _same(Tensor(np.zeros(0, np.int32)).bincount(minlength=3), torch.zeros(0, dtype=torch.int32).bincount(minlength=3), exact_dtype=False)
  with pytest.raises(TgArgumentError):
    Tensor([1, -1]).bincount()
  with pytest.raises(DTypeError):
    Tensor([1.0]).bincount()


def test_searchsorted():
  s = np.array([1., 2., 2., 3., 5.], dtype=np.float32)
  v = np.array([[0., 2., 2.5], [3., np.nan, np.inf]], dtype=np.float32)
  for kw in ({}, {"right": True}, {"side": "right"}, {"side": "left"}):
    _same(Tensor(s).searchsorted(Tensor(v), **kw), torch.searchsorted(torch.tensor(s), torch.tensor(v), **kw), exact_dtype=False)
  s2 = np.sort(_rand(2, 6), axis=-1)
  v2 = _rand(2, 3, seed=4)
  _same(Tensor.searchsorted(Tensor(s2), Tensor(v2)), torch.searchsorted(torch.tensor(s2), torch.tensor(v2)), exact_dtype=False)
  si = np.array([1, 3, 3, 7], dtype=np.int32)
  _same(Tensor(si).searchsorted(3, right=True), torch.searchsorted(torch.tensor(si), 3, right=True), exact_dtype=False)
  assert Tensor(si).searchsorted(Tensor([3]), out_int32=True).dtype == dtypes.int32
  with pytest.raises(TgArgumentError):
    Tensor(s).searchsorted(Tensor(v), right=True, side="left")


def test_bad_dims_raise_axis_error_that_is_index_and_runtime_error():
  x = Tensor.zeros(2, 3)
  for fn in (lambda: x.sort(2), lambda: x.cumprod(-3), lambda: x.roll(1, 5), lambda: x.narrow(2, 0, 1), lambda: x.index_select(3, Tensor([0]))):
    with pytest.raises(AxisError) as e:
      fn()
    assert isinstance(e.value, IndexError) and isinstance(e.value, RuntimeError)


def test_device_is_the_default():
  assert Tensor.zeros(3).sort()[0].device == Device.DEFAULT


def test_nonzero():
  _same(Tensor(np.array([[0, 2], [3, 0]], np.int32)).argwhere(), torch.argwhere(torch.tensor([[0, 2], [3, 0]])), exact_dtype=False)
  for x in (np.array([[0, 1.5, 0], [np.nan, 0, -2]], np.float32), np.array([0, 0, 4, 9], np.int32), np.array(3.0, np.float32),
            np.zeros((2, 0), np.float32), np.zeros((2, 2), np.float32)):
    _same(Tensor(x).nonzero(), torch.tensor(x).nonzero(), exact_dtype=False)
    for a, b in zip(Tensor(x).nonzero(as_tuple=True), torch.tensor(x).nonzero(as_tuple=True)):
      _same(a, b, exact_dtype=False)


def test_in_place_variants():
  idx = np.array([[0, 2], [1, 0]])
  for name, args in [("scatter_", (1, _ti(idx), 5.0)), ("scatter_add_", (1, _ti(idx), Tensor(_rand(2, 2)))),
                     ("scatter_reduce_", (1, _ti(idx), Tensor(_rand(2, 2)), "amax")), ("index_add_", (0, _ti([1, 1]), Tensor(_rand(2, 3)))),
                     ("index_copy_", (1, _ti([2]), Tensor(_rand(2, 1)))), ("index_fill_", (1, _ti([0]), 3.0)),
                     ("masked_fill_", (Tensor([True, False, True]), -1.0))]:
    t = Tensor(_rand(2, 3)).contiguous()
    want = getattr(t, name[:-1])(*args).numpy()
    assert getattr(t, name)(*args) is t
    np.testing.assert_allclose(t.numpy(), want)


def test_empty_and_broadcast_edges():
  e = np.zeros((0, 3), np.float32)
  _same(Tensor(e).index_select(1, _ti([2, 0])), torch.tensor(e).index_select(1, torch.tensor([2, 0])))
  _same(Tensor(_rand(2, 3)).index_select(1, _ti(np.zeros(0))), torch.tensor(_rand(2, 3)).index_select(1, torch.zeros(0, dtype=torch.long)))
  _same(Tensor(_rand(2, 3)).scatter(0, _ti(np.zeros((0, 3))), 1.0), torch.tensor(_rand(2, 3)).scatter(0, torch.zeros(0, 3, dtype=torch.long), 1.0))
  for op in ("cummax", "cummin"):
    for a, b in zip(getattr(Tensor(e), op)(0), getattr(torch, op)(torch.tensor(e), 0)):
      _same(a, b, exact_dtype=False)
  _same(Tensor(np.zeros(0, np.float32)).diag(), torch.diag(torch.zeros(0)))
  _same(Tensor(e).unfold(1, 2, 1), torch.tensor(e).unfold(1, 2, 1))
  m = np.array([[True], [False]])  # the mask broadcasts against self, as torch's out-of-place masked_fill
  _grads(lambda t: t.masked_fill(Tensor(m), 0.5), lambda t: t.masked_fill(torch.tensor(m), 0.5), _rand(2, 3))


@pytest.mark.skipif(not is_dtype_supported(dtypes.float16), reason="the device has no float16")
def test_float16_forward():
  x = _distinct(3, 5).astype(np.float16)
  t, r = Tensor(x), torch.tensor(x)
  idx = np.array([[0, 2, 1, 0, 2]])
  for got, ref in [(t.sort(0)[0], torch.sort(r, 0)[0]), (t.topk(2)[0], torch.topk(r, 2)[0]), (t.cumprod(1), r.cumprod(1)),
                   (t.cummax(1)[0], r.cummax(1)[0]), (t.roll(2, 1), r.roll(2, 1)), (t.diag(), torch.diag(r)),
                   (t.scatter_add(0, _ti(idx), t), r.scatter_add(0, torch.tensor(idx), r)),
                   (t.index_select(1, _ti([4, 0])), r.index_select(1, torch.tensor([4, 0]))),
                   (t.masked_fill(t > 0, 1.5), r.masked_fill(r > 0, 1.5)), (t.unfold(1, 2, 2), r.unfold(1, 2, 2))]:
    _same(got, ref, tol=1e-3)


def test_under_tinyjit_replays_follow_the_input():
  from tg.engine.jit import TinyJit

  @TinyJit
  def step(x):
    v, i = x.topk(2)
    return v.realize(), i.realize(), x.cummax(1)[0].realize()

  rng = np.random.default_rng(5)
  for _ in range(4):  # eager, capture, then replays
    x = rng.uniform(-1, 1, size=(2, 5)).astype(np.float32)
    v, i, c = step(Tensor(x))
    tv, ti = torch.topk(torch.tensor(x), 2)
    _same(v, tv)
    _same(i, ti, exact_dtype=False)
    _same(c, torch.cummax(torch.tensor(x), 1)[0])
