"""Indexing: basic and advanced `t[...]` against numpy (placement rules) and torch (gradients), `t[...] = v`,
gather and masked_fill."""
import numpy as np
import pytest
from test_ops import F32, _uniform, helper_test_op

from tg import Tensor, dtypes
from tg.device import is_dtype_supported

torch = pytest.importorskip("torch")

SHAPE = (3, 4, 5)


def _grad_ref(shape, idx, w):
  """d/dx sum(x[idx] * w) with numpy: index an array of flat positions the same way and scatter-add w there."""
  pos = np.arange(int(np.prod(shape))).reshape(shape)[idx]
  return np.bincount(np.asarray(pos).ravel(), weights=np.asarray(w, dtype=np.float64).ravel(), minlength=int(np.prod(shape))).reshape(shape)


def _as_tg_index(idx, kind):
  """The numpy index with its integer arrays as lists, numpy arrays, or int32/int64 Tensors."""
  if not isinstance(idx, tuple):
    # as a 1-tuple: a whole index that is a list of lists is a tuple of indices to tinygrad 0.9.1 and torch (numpy reads
    # one index array), while (list,) is one index array to all of them
    return _as_tg_index((idx,), kind)
  out = []
  for i in idx:
    if isinstance(i, np.ndarray):
      i = {"list": i.tolist(), "numpy": i, "tensor": Tensor(i.astype(np.int32)), "tensor64": Tensor(i.astype(np.int64))}[kind]
    out.append(i)
  return tuple(out)


def _check_index(shape, idx, kind="list"):
  x = _uniform(shape)
  ref = x[idx]
  gx = Tensor(x, requires_grad=True)
  out = gx[_as_tg_index(idx, kind)]
  assert out.shape == ref.shape, f"shape: tg {out.shape} vs numpy {ref.shape}"
  np.testing.assert_array_equal(out.numpy(), ref)
  w = np.random.default_rng(1).uniform(-1, 1, size=ref.shape).astype(np.float32)
  (out * Tensor(w)).sum().backward()
  np.testing.assert_allclose(gx.grad.numpy(), _grad_ref(shape, idx, w), atol=1e-6, rtol=1e-6)


# ---------- basic indexing ----------

BASIC = [
  np.s_[1], np.s_[-1], np.s_[1, 2], np.s_[-1, -2, -3], np.s_[0, :, 4],
  np.s_[0:2], np.s_[1:], np.s_[:-1], np.s_[-2:], np.s_[-100:100], np.s_[2:1], np.s_[:, 10:20], np.s_[3:],
  np.s_[::2], np.s_[1::2, ::3], np.s_[:, 1:4:2, ::4], np.s_[::7], np.s_[0:3:5],
  np.s_[::-1], np.s_[:, ::-1, ::-3], np.s_[2:0:-1], np.s_[:, :, -1:-4:-1], np.s_[:, -1::-1], np.s_[1:2:-1], np.s_[:, :, ::-2],
  np.s_[None], np.s_[:, None], np.s_[None, 1, None, ::2, None], np.s_[1, None, ::-1],
  np.s_[...], np.s_[..., 1], np.s_[1, ...], np.s_[1, ..., None, 2], np.s_[..., ::-2], np.s_[None, ..., None], np.s_[0, 1, 2, ...],
  np.s_[..., None, :2], np.s_[:, ..., 3],
]


@pytest.mark.parametrize("idx", BASIC, ids=[repr(i) for i in BASIC])
def test_basic_index(idx):
  _check_index(SHAPE, idx)



@pytest.mark.parametrize("idx", [
  np.s_[::-2],
  np.s_[:, 3:0:-2],
  np.s_[::-2, 1],
], ids=["::-2", ":,3:0:-2", "::-2,1"])
def test_basic_index_negative_step_on_inner_axis(idx):
  _check_index(SHAPE, idx)


@pytest.mark.parametrize("idx", [np.s_[::-2], np.s_[:, 3:0:-2], np.s_[::-2, 1]], ids=["::-2", ":,3:0:-2", "::-2,1"])
def test_basic_index_negative_step_on_inner_axis_forward(idx):
  x = _uniform(SHAPE)
  np.testing.assert_array_equal(Tensor(x)[idx].numpy(), x[idx])


def test_basic_index_vs_torch_grad():
  helper_test_op([SHAPE], lambda x: x[1:, None, ::2, -1], lambda x: x[1:, None, ::2, -1])
  helper_test_op([SHAPE], lambda x: x[..., 1:4:2] * x[..., :2], lambda x: x[..., 1:4:2] * x[..., :2])


def test_index_of_0d_and_1d():
  t = Tensor([5.0, 6.0, 7.0])
  assert t[1].shape == () and t[1].item() == 6.0
  assert t[-1].item() == 7.0
  s = Tensor(3.0)
  assert s[None].shape == (1,) and s[...].shape == ()
  np.testing.assert_array_equal(s[None, None].numpy(), np.array([[3.0]], dtype=np.float32))


def test_index_int_tensor_values():
  a = np.arange(60, dtype=np.int32).reshape(SHAPE)
  for idx in (np.s_[1, ::-2], np.s_[..., 2], np.s_[None, :, 1:3]):
    got = Tensor(a)[idx]
    assert got.dtype == dtypes.int32
    np.testing.assert_array_equal(got.numpy(), a[idx])


# ---------- advanced (integer array) indexing ----------

ADVANCED = [
  # one index array
  np.s_[np.array([0, 2, -1])],
  np.s_[np.array([[0, 1], [2, 0]])],
  np.s_[np.array([2, 2, 0, 2])],  # duplicates: gradients add up
  np.s_[:, np.array([1, 3])],
  np.s_[..., np.array([0, -1, 2])],
  np.s_[1:3, np.array([0, -1])],
  np.s_[::2, np.array([[1], [2]]), ::-1],
  np.s_[1, np.array([3, 0])],
  np.s_[None, np.array([1, 0])],
  # two or three index arrays, broadcast together
  np.s_[np.array([0, 1]), np.array([2, 3])],
  np.s_[np.array([[0], [1]]), np.array([2, 3, -1])],
  np.s_[np.array([1]), np.array([2]), np.array([3])],
  np.s_[np.array([0, 2, 0]), np.array([1, 1, 1]), np.array([4, 4, 4])],  # the same element thrice
  np.s_[np.array([2, 1, 0]), :, np.array([[0], [4]])],
  # adjacent index arrays not at the front: the index shape goes where they were
  np.s_[:, np.array([0, 1]), np.array([2, 3])],
  np.s_[:, np.array([[0, 3]]), np.array([[1], [4]])],
  np.s_[1:, np.array([0, 1]), np.array([-1, -2])],
  # non-adjacent (split by a slice or None): the index shape goes in front
  np.s_[np.array([0, 1]), :, np.array([2, 3])],
  np.s_[np.array([0, 1]), 1:3, np.array([2, 3])],
  np.s_[None, np.array([0, 1]), :, np.array([1, 2])],
  np.s_[np.array([0, 1]), None, np.array([1, 2])],
  np.s_[np.array([[0, 2]]), ::-1, np.array([[1], [3]])],
]
KINDS = ["list", "numpy", "tensor", "tensor64"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("idx", ADVANCED, ids=[str(i) for i in range(len(ADVANCED))])
def test_advanced_index(idx, kind):
  if kind == "tensor64" and not is_dtype_supported(dtypes.int64):
    pytest.skip("device has no int64 (WGSL has none: WEBGPU)")
  _check_index(SHAPE, idx, kind)


@pytest.mark.parametrize("idx", [
  (0, slice(None), [1, 2]),
  ([0, 1], 1, [2, 3]),
  (slice(None), 0, [1, 3, 1]),
])
def test_int_and_index_array_placement_as_torch(idx):
  # an int next to an index array: numpy counts the int as an index array (so x[0, :, [1, 2]] puts the index shape first),
  # torch counts it as a basic index; tg follows torch
  helper_test_op([SHAPE], lambda x: x[idx], lambda x: x[idx])


@pytest.mark.parametrize("idx", [
  [0, 2, 2, -1],
  ([[0, 0], [1, 2]], [1, 1]),
  (slice(None), [3, 3, 0], slice(1, 4)),
  ([2, 2], slice(None), [1, 1]),
])
def test_advanced_index_grad_vs_torch(idx):
  helper_test_op([SHAPE], lambda x: x[idx], lambda x: x[idx])
  helper_test_op([SHAPE], lambda x: x[idx].exp() * 2, lambda x: x[idx].exp() * 2, **F32)


def test_advanced_index_on_int_and_bool_tensors():
  a = np.arange(20, dtype=np.int32).reshape(4, 5)
  got = Tensor(a)[[3, 0], [1, -1]]
  assert got.dtype == dtypes.int32
  np.testing.assert_array_equal(got.numpy(), a[[3, 0], [1, -1]])
  b = a % 3 == 0
  gb = Tensor(b)[:, [4, 0]]
  assert gb.dtype == dtypes.bool
  np.testing.assert_array_equal(gb.numpy(), b[:, [4, 0]])


def test_index_with_computed_tensor():
  # an index tensor that is itself the output of ops (argmax), not data
  x = _uniform((4, 6))
  idx = Tensor(x).argmax(1)
  np.testing.assert_array_equal(Tensor(x)[Tensor.arange(4), idx].numpy(), x.max(1))


def test_index_errors():
  t = Tensor.ones(*SHAPE)
  with pytest.raises(IndexError):
    t[0, 0, 0, 0]
  with pytest.raises(IndexError):
    t[..., 0, ...]
  with pytest.raises(IndexError):
    t[3]
  with pytest.raises(IndexError):
    t[:, -5]
  with pytest.raises(IndexError):
    t[Tensor([0.0, 1.0])]
  with pytest.raises(IndexError):
    t[[0.5, 1.0]]
  with pytest.raises(IndexError):
    t[Tensor([True, False, True])]
  with pytest.raises(TypeError):
    t["a"]
  with pytest.raises(ValueError):
    t[[0, 1], [[0, 1, 2]], [0, 1, 2, 3]]  # index shapes (2,), (1, 3), (4,) don't broadcast


# ---------- __setitem__ ----------

SETITEM = [
  (np.s_[1], 5.0),
  (np.s_[-1, 2], -3.0),
  (np.s_[:, 2], "row"),
  (np.s_[::2], 0.0),
  (np.s_[1:3, ::-1], "full"),
  (np.s_[..., -1], "col1"),
  (np.s_[:, 1:4:2, ::2], "full"),
  (np.s_[None, 0], "full"),
  (np.s_[np.array([0, 2])], 7.0),
  (np.s_[np.array([0, 2]), np.array([1, 3])], "full"),
  (np.s_[:, np.array([3, -2]), 1:3], "full"),
  (np.s_[np.array([[0], [2]]), :, np.array([4, 0])], "bcast_last"),
  (np.s_[...], "row"),
]


def _value(kind, target_shape, rng):
  if not isinstance(kind, str):
    return kind, kind
  vshape = {"full": target_shape, "row": target_shape[-1:], "col1": target_shape[:-1] + (1,), "bcast_last": (1, target_shape[-1])}[kind]
  v = rng.uniform(-5, 5, size=vshape).astype(np.float32)
  return v, Tensor(v)


@pytest.mark.parametrize("kind", ["list", "tensor"])
@pytest.mark.parametrize("idx,value", SETITEM, ids=[str(i) for i in range(len(SETITEM))])
def test_setitem(idx, value, kind):
  rng = np.random.default_rng(3)
  x = _uniform(SHAPE)
  np_v, tg_v = _value(value, x[idx].shape, rng)
  t = Tensor(x)
  alias = t
  t[_as_tg_index(idx, kind)] = tg_v
  ref = x.copy()
  ref[idx] = np_v
  assert t is alias and t.shape == SHAPE and t.dtype == dtypes.float32
  np.testing.assert_array_equal(alias.numpy(), ref)


def test_setitem_int_tensor_and_casts():
  a = np.arange(12, dtype=np.int32).reshape(3, 4)
  t = Tensor(a)
  t[:, 1] = 2.7  # cast to the tensor's dtype, as torch
  t[0] = Tensor([9, 8, 7, 6])
  ref = torch.tensor(a)
  ref[:, 1] = 2.7
  ref[0] = torch.tensor([9, 8, 7, 6])
  assert t.dtype == dtypes.int32
  np.testing.assert_array_equal(t.numpy(), ref.numpy())


def test_setitem_then_compute():
  t = Tensor.zeros(3, 3)
  t[1, :] = 1.0
  t[:, 1] = Tensor([2.0, 3.0, 4.0])
  np.testing.assert_array_equal((t * 2 + 1).numpy(), np.array([[1, 5, 1], [3, 7, 3], [1, 9, 1]], dtype=np.float32))
  t[0, 0] = 5.0  # repeated writes keep stacking on the latest value
  assert t.sum().item() == 1.0 + 1 + 2 + 3 + 4 + 5


def test_setitem_value_with_leading_unit_axes():
  t, ref = Tensor.zeros(2, 3), torch.zeros(2, 3)
  ref[0] = torch.ones(1, 3)
  ref[1, 2] = torch.tensor([5.0])
  t[0] = Tensor.ones(1, 3)
  t[1, 2] = Tensor([5.0])
  np.testing.assert_array_equal(t.numpy(), ref.numpy())


@pytest.mark.parametrize("index,value_shape", [(slice(0, 2), (3, 3)), (slice(0, 2), (2, 2, 3)), ((0, slice(None)), (2,)),
                                               ([0, 2], (3, 3))])
def test_setitem_of_a_value_that_does_not_broadcast_raises_and_writes_nothing(index, value_shape):
  """A value whose shape doesn't broadcast to the selection is an error (torch: RuntimeError), in place or through a
  scatter, and the tensor keeps what it held."""
  t = Tensor(np.arange(12, dtype=np.float32).reshape(4, 3)).realize()
  ref = torch.arange(12, dtype=torch.float32).reshape(4, 3)
  with pytest.raises(RuntimeError):
    ref[index] = torch.ones(value_shape)
  with pytest.raises(ValueError, match=r"broadcast|expand"):
    t[index] = Tensor.ones(*value_shape)
  np.testing.assert_array_equal(t.numpy(), np.arange(12, dtype=np.float32).reshape(4, 3))


@pytest.mark.parametrize("index", [slice(5, None), slice(2, 2), [], "empty_tensor", (slice(None), slice(3, 1))])
def test_setitem_of_an_empty_selection_writes_nothing(index):
  """t[5:] = 3 on 4 rows selects nothing: torch and numpy leave the tensor as it is; tg raised 'max of an empty axis of
  shape (0, 3) has no identity' (the scatter's last-write search over no values). A value that can't broadcast to
  the empty selection still raises."""
  idx = Tensor(np.zeros(0, np.int32)) if index == "empty_tensor" else index
  tidx = torch.zeros(0, dtype=torch.long) if index == "empty_tensor" else index
  for value in (3.0, Tensor(np.float32(7.0))):
    t, ref = Tensor(np.arange(12, dtype=np.float32).reshape(4, 3)).realize(), torch.arange(12, dtype=torch.float32).reshape(4, 3)
    t[idx] = value
    ref[tidx] = value if isinstance(value, float) else torch.tensor(7.0)
    np.testing.assert_array_equal(t.numpy(), ref.numpy())
  with pytest.raises(ValueError, match=r"broadcast|expand"):
    t[idx] = Tensor.ones(2, 2)


def test_masked_fill_in_place_with_a_mask_larger_than_the_tensor_raises():
  """masked_fill_ can't grow the tensor it writes (torch: RuntimeError): a mask that broadcasts it to more axes, or a
  larger axis, is an error and nothing is written."""
  t = Tensor(np.zeros((2, 3), np.float32)).realize()
  for mask_shape in [(4, 2, 3), (2, 2, 3)]:
    with pytest.raises(RuntimeError):
      torch.zeros(2, 3).masked_fill_(torch.ones(mask_shape, dtype=torch.bool), 1.0)
    with pytest.raises(ValueError, match=r"broadcast|expand"):
      t.masked_fill_(Tensor(np.ones(mask_shape, bool)), 1.0)
  np.testing.assert_array_equal(t.numpy(), np.zeros((2, 3), np.float32))


def test_setitem_on_leaf_requiring_grad_raises():
  w = Tensor([1.0, 2.0, 3.0], requires_grad=True)
  with pytest.raises(RuntimeError):
    w[0] = 5.0
  d = w.detach()
  d[0] = 5.0
  np.testing.assert_array_equal(d.numpy(), np.array([5.0, 2.0, 3.0], dtype=np.float32))


def test_setitem_on_leaf_under_no_grad():
  w = Tensor([1.0, 2.0, 3.0], requires_grad=True)
  with Tensor.no_grad():
    w[0] = 5.0
  np.testing.assert_array_equal(w.numpy(), np.array([5.0, 2.0, 3.0], dtype=np.float32))


def test_setitem_in_graph_gradient():
  # writing into a non-leaf: gradients flow to the written value and to the untouched elements, as torch
  xs, vs = _uniform((3, 4)), _uniform((4,), seed=1)
  tx, tv = torch.tensor(xs, requires_grad=True), torch.tensor(vs, requires_grad=True)
  ty = tx * 2
  ty[1] = tv * 3
  (ty * ty).sum().backward()
  gx, gv = Tensor(xs, requires_grad=True), Tensor(vs, requires_grad=True)
  gy = gx * 2
  gy[1] = gv * 3
  (gy * gy).sum().backward()
  np.testing.assert_allclose(gy.numpy(), ty.detach().numpy(), **F32)
  np.testing.assert_allclose(gx.grad.numpy(), tx.grad.numpy(), **F32)
  np.testing.assert_allclose(gv.grad.numpy(), tv.grad.numpy(), **F32)


def test_setitem_of_a_value_that_requires_grad_passes_its_gradient():
  # z[:3] = x with x a leaf requiring grad: z joins the graph, as torch (its gradient was silently dropped)
  zs, xs = _uniform((8, 8)), _uniform((8,), seed=1)
  zt, xt = torch.tensor(zs), torch.tensor(xs, requires_grad=True)
  zt[:3] = xt
  (zt * zt).sum().backward()
  z, x = Tensor(zs), Tensor(xs, requires_grad=True)
  z[:3] = x
  (z * z).sum().backward()
  np.testing.assert_allclose(z.numpy(), zt.detach().numpy(), **F32)
  np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), **F32)


@pytest.mark.parametrize("kind", ["list", "tensor"])
def test_setitem_with_a_repeated_index_keeps_the_last_value(kind):
  # numpy, torch on CPU and tinygrad write the last of the values for one position; tg added them up
  for shape, idx, value in [((3,), [1, 1, 1], [5.0, 6.0, 7.0]), ((3, 2), [0, 2, 0], [[1.0, 1.0], [3.0, 3.0], [2.0, 2.0]]),
                            ((4,), [3, -1, 0], [1.5, -2.5, 4.0])]:
    ref = np.arange(np.prod(shape), dtype=np.float32).reshape(shape) + 10
    t = Tensor(ref.copy())
    t[idx if kind == "list" else Tensor(idx)] = Tensor(value)
    ref[idx] = value
    np.testing.assert_array_equal(t.numpy(), ref)
  t = Tensor([10.0, 20.0, 30.0])
  t[[1, 1]] = 7.0  # one scalar written twice is written once
  assert t.tolist() == [10.0, 7.0, 30.0]


def test_setitem_with_many_repeated_and_negative_indices():
  n, k = 1000, 300
  rng = np.random.default_rng(k)
  idx = rng.integers(-n, n, k)
  idx[::7] = idx[3]  # repeated: the last of its values is written (and once as a negative index)
  idx[5] = idx[3] - n if idx[3] >= 0 else idx[3] + n
  vals = rng.standard_normal(k).astype(np.float32)
  ref = np.arange(n, dtype=np.float32)
  t = Tensor(ref.copy()).realize()
  t[Tensor(idx.astype(np.int32))] = Tensor(vals)
  ref[idx] = vals
  np.testing.assert_array_equal(t.numpy(), ref)


# ---------- gather ----------


@pytest.mark.parametrize("dim,ishape", [(0, (3, 4, 5)), (0, (5, 2, 3)), (1, (3, 4, 5)), (1, (2, 6, 1)), (2, (3, 4, 7)), (-1, (1, 2, 3)),
                                        (-2, (2, 1, 5))])
@pytest.mark.skipif(not is_dtype_supported(dtypes.int64), reason="device has no int64 (WGSL has none: WEBGPU)")
def test_gather(dim, ishape):
  n = SHAPE[dim]
  idx = np.random.default_rng(5).integers(0, n, size=ishape).astype(np.int64)  # duplicates along dim: gradients add up
  helper_test_op(None, lambda x, i: torch.gather(x, dim, i), lambda x, i: x.gather(dim, i), vals=[_uniform(SHAPE), idx])


def test_gather_int32_index_and_int_data():
  x = np.arange(12, dtype=np.int32).reshape(3, 4)
  idx = np.array([[0, 0], [3, 1], [2, 2]])
  got = Tensor(x).gather(1, Tensor(idx.astype(np.int32)))
  assert got.dtype == dtypes.int32
  np.testing.assert_array_equal(got.numpy(), torch.gather(torch.tensor(x), 1, torch.tensor(idx)).numpy())


def test_gather_errors():
  x = Tensor.ones(3, 4)
  with pytest.raises(ValueError):
    x.gather(1, Tensor([0, 1]))
  with pytest.raises(ValueError):
    x.gather(1, Tensor.zeros(4, 2, dtype=dtypes.int32))
  with pytest.raises(IndexError):
    x.gather(2, Tensor.zeros(3, 2, dtype=dtypes.int32))
  for bad in (Tensor([[1.7], [2.2], [0.0]]), Tensor([[True], [False], [True]])):  # torch: "Expected dtype int64 for index"
    with pytest.raises(TypeError, match="integer"):
      x.gather(1, bad)


# ---------- masked_fill ----------


@pytest.mark.parametrize("mshape", [(3, 4), (1, 4), (3, 1), ()])
@pytest.mark.parametrize("value", [0.0, -1e9, 2.5, float("-inf")])
def test_masked_fill(mshape, value):
  mask = np.random.default_rng(6).random(size=mshape) < 0.5
  helper_test_op(None, lambda x, m: x.masked_fill(m, value), lambda x, m: x.masked_fill(m, value), vals=[_uniform((3, 4)), mask])


def test_masked_fill_int_and_dtype():
  x = np.arange(6, dtype=np.int32).reshape(2, 3)
  m = np.array([[True, False, True]])
  got = Tensor(x).masked_fill(Tensor(m), -1)
  assert got.dtype == dtypes.int32
  np.testing.assert_array_equal(got.numpy(), torch.tensor(x).masked_fill(torch.tensor(m), -1).numpy())
