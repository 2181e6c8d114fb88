"""tinygrad 0.9.1's Tensor API, exactly: signatures and results that tinygrad programs rely on (stack, one_hot, squeeze,
reshape with None, fancy indexing with lists and tuples, var/std edge cases, pow's gradient, operators, schedule, ...),
checked against tinygrad's documented behaviour and, where tinygrad is silent, against torch. Also the error classes of
tg.errors: each bad-argument error is both the Pythonic class and torch's RuntimeError."""
import math

import numpy as np
import pytest

from tg import Device, Tensor, Variable, dtypes
from tg.errors import AxisError, DTypeError, GradientError, ShapeError, TgArgumentError

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore:.*degrees of freedom:UserWarning")


# a device whose float math needn't be IEEE (WGSL: WEBGPU) may make 0 * inf a 0 or exp2(inf) a 0: the inf/nan of gradients
# and of powers of 0 are checked where floats are strict
STRICT = getattr(Device[Device.DEFAULT].renderer, "strict_float", True)
needs_strict_float = pytest.mark.skipif(not STRICT, reason="the device's float math needn't give IEEE inf/nan (WGSL allows it: WEBGPU)")


def _check(got: Tensor, ref: "torch.Tensor") -> None:
  assert got.shape == tuple(ref.shape)
  np.testing.assert_allclose(got.numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-6)


# ---------- stack ----------

def test_stack_tinygrad_signature():
  a, b, c = Tensor([1.0, 2.0]), Tensor([3.0, 4.0]), Tensor([5.0, 6.0])
  ta, tb, tc = torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0]), torch.tensor([5.0, 6.0])
  _check(Tensor.stack(a, b, dim=1), torch.stack([ta, tb], dim=1))
  _check(a.stack(b), torch.stack([ta, tb]))
  _check(a.stack(b, c, dim=-1), torch.stack([ta, tb, tc], dim=-1))
  _check(a.stack(), torch.stack([ta]))


def test_stack_list_forms():
  a, b = Tensor([1.0, 2.0]), Tensor([3.0, 4.0])
  ta, tb = torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0])
  _check(Tensor.stack([a, b]), torch.stack([ta, tb]))
  _check(Tensor.stack([a, b], 1), torch.stack([ta, tb], 1))
  _check(Tensor.stack((a, b), dim=-1), torch.stack((ta, tb), dim=-1))
  with pytest.raises(IndexError):
    a.stack(b, dim=3)


# ---------- shapes ----------

def test_one_hot_dtype_is_tinygrads():
  got = Tensor([0, 2, 1]).one_hot(3)
  assert got.dtype == dtypes.int32  # tinygrad 0.9.1: where(1, 0) of a bool, the default int
  np.testing.assert_array_equal(got.numpy(), np.eye(3, dtype=np.int32)[[0, 2, 1]])


@pytest.mark.parametrize("dim", [0, -1, None])
def test_squeeze_0d(dim):
  x = Tensor(3.0)
  assert (x.squeeze() if dim is None else x.squeeze(dim)).shape == ()
  assert x.squeeze(dim).item() == 3.0


@pytest.mark.parametrize("dim", [1, -2, 10])
def test_squeeze_0d_bad_dim(dim):
  with pytest.raises(IndexError):
    Tensor(3.0).squeeze(dim)


@pytest.mark.parametrize("shape,dim", [((1, 3, 1), 0), ((1, 3, 1), -1), ((1, 3, 1), 1), ((1, 1), None), ((1,), 0), ((2, 1, 1), None)])
def test_squeeze_size1(shape, dim):
  x = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
  ref = torch.tensor(x).squeeze() if dim is None else torch.tensor(x).squeeze(dim)
  got = Tensor(x).squeeze() if dim is None else Tensor(x).squeeze(dim)
  _check(got, ref)


def test_cumsum_0d_and_empty():
  assert Tensor(3.0).cumsum().shape == ()
  assert Tensor(3.0).cumsum().item() == 3.0
  assert Tensor(3.0).cumsum(-1).item() == 3.0
  assert Tensor.ones(0, 3).cumsum(0).shape == (0, 3)
  with pytest.raises(IndexError):
    Tensor(3.0).cumsum(1)


@pytest.mark.parametrize("args,shape", [((None, -1), (2, 12)), ((2, None, -1), (2, 3, 4)), (((None, 12),), (2, 12)), ((-1, None, 4), (2, 3, 4)),
                                        ((None, None, None), (2, 3, 4)), ((-1,), (24,))])
def test_reshape_none_keeps_dim(args, shape):
  x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
  got = Tensor(x).reshape(*args)
  assert got.shape == shape
  np.testing.assert_array_equal(got.numpy(), x.reshape(shape))


def test_reshape_errors():
  with pytest.raises(RuntimeError):
    Tensor.ones(3, 4).reshape(-1, -1, 2)
  with pytest.raises(ValueError):
    Tensor.ones(3, 4).reshape(5, -1)
  with pytest.raises(ShapeError):
    Tensor.ones(3, 4).reshape(5, 3)


def test_size():
  x = Tensor.ones(2, 3, 4)
  assert x.size() == (2, 3, 4)
  assert x.size(1) == 3 and x.size(-1) == 4
  with pytest.raises(IndexError):
    x.size(3)


# ---------- fancy indexing ----------

_X = np.arange(60, dtype=np.float32).reshape(3, 4, 5)


@pytest.mark.parametrize("name,idx", [
  ("tuple_in_tuple", lambda T: ((1, 0),)),
  ("tuple_then_slice", lambda T: ((2, 0), slice(1, 3))),
  ("tensor_and_list", lambda T: (T([1, 0]), [2, 0])),
  ("list_and_tensor", lambda T: ([1, 0], T([2, 3]))),
  ("list_slice_list", lambda T: ([1, 0], slice(None), [2, 4])),
  ("broadcast_lists", lambda T: ([[0], [2]], [[1, 3]])),
  ("nested_list", lambda T: ([[0, 1], [2, 1]],)),
  ("neg_list", lambda T: ([-1, 0],)),
  ("int_and_list", lambda T: (1, [0, 3])),
  ("ellipsis_list", lambda T: (Ellipsis, [0, 4])),
  ("numpy_index", lambda T: (np.array([2, 0]),)),
  ("numpy_ints_list", lambda T: [np.int64(2), np.int32(0)]),
  ("tensor_scalar", lambda T: (T(1),)),
])
def test_fancy_indexing(name, idx):
  ref = torch.tensor(_X)[idx(torch.tensor)]
  got = Tensor(_X)[idx(Tensor)]
  _check(got, ref)


@pytest.mark.parametrize("idx", [[[0, 1], [1, 0]], [[0, 2], [1, 3], [4, 0]], [[1], slice(None), [0, 2]]])
def test_list_of_lists_is_a_tuple(idx):
  # tinygrad 0.9.1 (and torch before 2.9, with a warning): an index list that isn't all ints is a tuple of indices
  _check(Tensor(_X)[idx], torch.tensor(_X)[tuple(idx)])


def test_fancy_indexing_grad():
  tx, gx = torch.tensor(_X, requires_grad=True), Tensor(_X, requires_grad=True)
  tx[([0, 1], [1, 0])].sum().backward()
  gx[[[0, 1], [1, 0]]].sum().backward()
  np.testing.assert_array_equal(gx.grad.numpy(), tx.grad.numpy())


# ---------- var / std ----------

@pytest.mark.parametrize("fn", ["var", "std"])
@pytest.mark.parametrize("x,kw", [([[1.0], [2.0]], dict(axis=1)), ([[1.0], [2.0]], dict(axis=1, keepdim=True)), ([1.0, 2.0], dict(correction=2)),
                                  ([1.0, 1.0], dict(correction=2)), ([1.0, 2.0], dict(correction=3)), ([1.0, 2.0, 4.0], dict(correction=0)),
                                  ([5.0], {})])
def test_var_std_small_n(fn, x, kw):
  tkw = {("dim" if k == "axis" else k): v for k, v in kw.items()}
  ref = getattr(torch.tensor(x), fn)(**tkw)
  got = getattr(Tensor(x), fn)(**kw)
  _check(got, ref)


@pytest.mark.parametrize("correction", [0, 1, 5])
@needs_strict_float
def test_std_grad_where_the_deviation_is_zero(correction):
  # torch: std's gradient is 0 where std is 0 (not sqrt's inf times 0), nan where it is nan (tinygrad's test_std_one_in_axis)
  x = np.random.default_rng(0).uniform(-2, 2, size=(1, 2, 3, 1, 5)).astype(np.float32)
  tx, gx = torch.tensor(x, requires_grad=True), Tensor(x, requires_grad=True)
  rt, rg = tx.std(dim=(0, 3), correction=correction), gx.std(axis=(0, 3), correction=correction)
  np.testing.assert_array_equal(rg.numpy(), rt.detach().numpy())
  (rt + 1).square().mean().backward()
  (rg + 1).square().mean().backward()
  np.testing.assert_array_equal(gx.grad.numpy(), tx.grad.numpy())


@needs_strict_float
def test_std_length1_axis_grad_is_nan():
  tx, gx = torch.tensor([[1.0], [2.0]], requires_grad=True), Tensor([[1.0], [2.0]], requires_grad=True)
  tx.std(1).sum().backward()
  gx.std(1).sum().backward()
  np.testing.assert_array_equal(gx.grad.numpy(), tx.grad.numpy())


# ---------- pow: forward and gradient as torch, at 0 and for negative bases ----------

_BASES = np.array([-2.0, -1.5, -1.0, 0.0, 0.5, 2.0], dtype=np.float32)
_EXPS = np.array([2.0, 2.0, 3.0, 0.0, -1.0, 0.5], dtype=np.float32)


def _pow_check(fn, two=False):
  tb, te = torch.tensor(_BASES, requires_grad=True), torch.tensor(_EXPS, requires_grad=True)
  gb, ge = Tensor(_BASES, requires_grad=True), Tensor(_EXPS, requires_grad=True)
  rt, rg = (fn(tb, te), fn(gb, ge)) if two else (fn(tb), fn(gb))
  ok = slice(None) if STRICT else _BASES != 0  # at a zero base: inf, and gradients of inf * 0
  np.testing.assert_allclose(rg.numpy()[ok], rt.detach().numpy()[ok], rtol=1e-5, atol=1e-6)
  rt.sum().backward()
  rg.sum().backward()
  np.testing.assert_allclose(gb.grad.numpy()[ok], tb.grad.numpy()[ok], rtol=1e-5, atol=1e-6, err_msg="gradient of the base")
  if two:
    np.testing.assert_allclose(ge.grad.numpy()[ok], te.grad.numpy()[ok], rtol=1e-5, atol=1e-6, err_msg="gradient of the exponent")


@pytest.mark.parametrize("e", [2, 3, 0.5, -1, -2, -3, 1.5, 2.5, -0.5, 0, 1, 4, 7, 2.0])
def test_pow_const_exponent(e):
  _pow_check(lambda x: x ** e)


@pytest.mark.parametrize("b", [2, 2.5, 0, 0.0, -2, 1])
def test_pow_const_base(b):
  _pow_check(lambda x: b ** x)


def test_pow_tensor_tensor():
  _pow_check(lambda x, e: x ** e, two=True)
  _pow_check(lambda x, e: e ** x, two=True)


def test_pow_ints():
  x = Tensor([-3, -1, 0, 2, 5])
  np.testing.assert_array_equal((x ** 2).numpy(), np.array([9, 1, 0, 4, 25]))
  assert (x ** 2).dtype == x.dtype
  np.testing.assert_allclose((x ** 0.5).numpy(), torch.tensor([-3, -1, 0, 2, 5]).pow(0.5).numpy(), rtol=1e-6)
  np.testing.assert_allclose((2 ** Tensor([-1.0, 3.0, 10.0])).numpy(), [0.5, 8.0, 1024.0], rtol=1e-6)


def test_pow_big_exponent_of_negative_base():
  # beyond float32's 2**24 every float is an even integer
  np.testing.assert_array_equal((Tensor([-1.0, -1.0]) ** Tensor([3e9, 3.0])).numpy(), np.array([1.0, -1.0], dtype=np.float32))


def test_pow_special_values_as_c_and_torch():
  # C's pow (torch's): (-1) ** +-inf is 1 (tg: nan from inf * log2(1)); -0.0 to an odd integer power keeps its sign
  # (-0.0 ** -1 is -inf, ** 3 is -0.0; tg gave inf and 0.0), to any other power it is +0.0 or +inf
  inf, nan = math.inf, math.nan
  b = np.array([-1.0, -1.0, -1.0, 1.0, -1.0, -0.0, -0.0, -0.0, -0.0, -0.0, -0.0, -0.0, 0.0, -2.0, -0.5, -inf, -inf], np.float32)
  e = np.array([inf, -inf, nan, nan, 3.0, -1.0, -3.0, 3.0, -2.0, 2.0, 0.5, -0.5, -1.0, inf, -inf, -3.0, 2.0], np.float32)
  want = torch.tensor(b).pow(torch.tensor(e)).numpy()
  got = Tensor(b).pow(Tensor(e)).numpy()
  np.testing.assert_array_equal(got, want)
  np.testing.assert_array_equal(np.signbit(got) & ~np.isnan(got), np.signbit(want) & ~np.isnan(want))  # (a NaN's sign means nothing)
  np.testing.assert_array_equal((Tensor([-1.0, -1.0]) ** inf).numpy(), [1.0, 1.0])
  np.testing.assert_array_equal(((-1.0) ** Tensor([inf, -inf, nan])).numpy(), torch.tensor(-1.0).pow(torch.tensor([inf, -inf, nan])).numpy())


# ---------- operators ----------

def test_rxor_and_invert():
  x = np.array([1, 2, -3, 0], dtype=np.int32)
  np.testing.assert_array_equal((1 ^ Tensor(x)).numpy(), 1 ^ x)
  np.testing.assert_array_equal((~Tensor(x)).numpy(), ~x)
  np.testing.assert_array_equal((~Tensor(x.astype(np.uint8))).numpy(), ~x.astype(np.uint8))
  np.testing.assert_array_equal((~Tensor([True, False])).numpy(), np.array([False, True]))
  np.testing.assert_array_equal((True ^ Tensor([True, False])).numpy(), np.array([False, True]))
  np.testing.assert_array_equal((3 & Tensor(x)).numpy(), 3 & x)
  np.testing.assert_array_equal((3 | Tensor(x)).numpy(), 3 | x)
  with pytest.raises(TypeError):
    ~Tensor([1.0])
  with pytest.raises(RuntimeError):
    ~Tensor([1.0])


@pytest.mark.parametrize("a,b", [(7, [2, -3, 5]), (-7, [2, -3, 5]), (7.5, [2.0, -3.0, 0.5]), (-7.5, [2.0, -3.0, 4.0])])
def test_rmod(a, b):
  np.testing.assert_allclose((a % Tensor(b)).numpy(), (a % torch.tensor(b)).numpy(), rtol=1e-6)
  np.testing.assert_allclose((Tensor(b) % a).numpy(), (torch.tensor(b) % a).numpy(), rtol=1e-6)


# ---------- methods tinygrad programs call ----------

def test_sequential():
  out = Tensor([1.0, 2.0, 3.0]).sequential([lambda x: x * 2, lambda x: x + 1])
  np.testing.assert_array_equal(out.numpy(), np.array([3.0, 5.0, 7.0], dtype=np.float32))
  assert Tensor([1.0]).sequential([]).numpy().tolist() == [1.0]


def test_replace():
  x = Tensor([1.0, 2.0])
  y = Tensor([5, 6], dtype=dtypes.int32)
  assert x.replace(y) is x
  assert x.dtype == dtypes.int32 and x.numpy().tolist() == [5, 6]
  with pytest.raises(ValueError):
    x.replace(Tensor([1.0, 2.0, 3.0]))


def test_to_in_place():
  x = Tensor([1.0, 2.0], requires_grad=True)
  x.grad = Tensor([3.0, 4.0])
  dev = x.device
  assert x.to_(dev) is None  # as tinygrad: in place, returns nothing
  assert x.device == dev and x.numpy().tolist() == [1.0, 2.0]
  assert x.grad.numpy().tolist() == [3.0, 4.0]


def test_to_keeps_the_gradient_graph():
  # tinygrad's TestMoveTensor.test_to_grad: the gradient flows back across a copy to another device
  from tg import Device
  d0, d1 = f"{Device.DEFAULT}:0", f"{Device.DEFAULT}:1"
  x = Tensor.eye(3, requires_grad=True, device=d0)
  y = Tensor([[2.0, 0, -2.0]], requires_grad=True, device=d0)
  z = y.matmul(x).to(d1).sum()
  assert z.device == Device.canonicalize(d1)
  z.backward()
  np.testing.assert_array_equal(x.grad.numpy(), [[2, 2, 2], [0, 0, 0], [-2, -2, -2]])
  assert x.grad.device == x.device and y.grad.device == y.device
  assert Tensor([1.0], requires_grad=None).to(d1).requires_grad is None


def test_contiguous_backward():
  tx = torch.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
  gx = Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
  (tx.T * tx).sum().backward()
  out = gx.T.contiguous_backward() * gx
  np.testing.assert_array_equal(out.numpy(), (tx.T * tx).detach().numpy())
  out.sum().backward()
  np.testing.assert_array_equal(gx.grad.numpy(), tx.grad.numpy())


def test_schedule():
  from tg.engine.realize import run_schedule
  from tg.engine.schedule import ScheduleItem
  a = Tensor([1.0, 2.0]) + 1
  b = Tensor([3.0, 4.0]) * 2
  sched = a.schedule(b)
  assert len(sched) >= 2 and all(isinstance(si, ScheduleItem) for si in sched)
  run_schedule(sched)
  assert a.numpy().tolist() == [2.0, 3.0] and b.numpy().tolist() == [6.0, 8.0]


def test_schedule_with_vars():
  from tg.engine.realize import run_schedule
  vi = Variable("i", 1, 10)
  x = Tensor(np.ones((3, 3), dtype=np.float32)).reshape(3, vi.bind(3)) + 1
  sched, var_vals = x.schedule_with_vars()
  assert len(sched) >= 1 and isinstance(var_vals, dict)
  assert list(var_vals.values()) == [3]
  run_schedule(sched)
  assert x.reshape(3, 3).numpy().tolist() == [[2.0] * 3] * 3
  with pytest.raises(RuntimeError):  # a schedule with a bound variable needs schedule_with_vars
    (Tensor(np.ones((3, 3), dtype=np.float32)).reshape(3, vi.bind(3)) + 2).schedule()


# ---------- gradients: comparisons have none ----------

@pytest.mark.parametrize("op", [lambda x: x < 2, lambda x: x > 2, lambda x: x == 2, lambda x: x != 2, lambda x: x >= 2, lambda x: x <= 2])
def test_backward_through_comparison_raises(op):
  x = Tensor([1.0, 3.0], requires_grad=True)
  c = op(x)
  assert not c.requires_grad
  with pytest.raises(GradientError):
    c.sum().backward()
  with pytest.raises(RuntimeError):  # as torch: "element 0 of tensors does not require grad"
    c.float().mul(2).sum().backward()


def test_comparison_inside_a_graph_still_differentiates():
  tx, gx = torch.tensor([1.0, 3.0], requires_grad=True), Tensor([1.0, 3.0], requires_grad=True)
  (torch.where(tx < 2, tx, tx * 3).sum() + (tx < 2).sum()).backward()
  ((gx < 2).where(gx, gx * 3).sum() + (gx < 2).sum()).backward()
  np.testing.assert_array_equal(gx.grad.numpy(), tx.grad.numpy())


# ---------- clip ----------

def test_clip_like_torch():
  x = np.array([-2.0, 0.0, 1.0, 3.0], dtype=np.float32)
  for lo, hi in [(0.0, 1.0), (None, 1.0), (0.0, None), (2.0, 1.0)]:
    tx, gx = torch.tensor(x, requires_grad=True), Tensor(x, requires_grad=True)
    rt, rg = tx.clamp(lo, hi), gx.clip(lo, hi)
    np.testing.assert_array_equal(rg.numpy(), rt.detach().numpy())
    rt.sum().backward()
    rg.sum().backward()
    np.testing.assert_array_equal(gx.grad.numpy(), tx.grad.numpy())
  with pytest.raises(TgArgumentError):
    Tensor(x).clip(None, None)


# ---------- error classes ----------

_ERRORS = [
  ("flip_twice", lambda: Tensor.ones(3, 4).flip((0, 0)), AxisError),
  ("flip_same", lambda: Tensor.ones(3, 4).flip((1, -1)), AxisError),
  ("flip_range", lambda: Tensor.ones(3, 4).flip(2), AxisError),
  ("permute_short", lambda: Tensor.ones(3, 4, 5).permute((0, 2)), AxisError),
  ("permute_repeat", lambda: Tensor.ones(3, 4, 5).permute((0, 0, 1)), AxisError),
  ("permute_long", lambda: Tensor.ones(3, 4).permute((0, 1, 1, 1)), AxisError),
  ("gather_ndim", lambda: Tensor.ones(3, 4).gather(1, Tensor([0, 1])), ShapeError),
  ("gather_big", lambda: Tensor.ones(3, 4).gather(1, Tensor.zeros(4, 2, dtype=dtypes.int32)), ShapeError),
  ("gather_axis", lambda: Tensor.ones(3, 4).gather(2, Tensor.zeros(3, 2, dtype=dtypes.int32)), AxisError),
  ("matmul", lambda: Tensor.ones(3, 4) @ Tensor.ones(5, 2), ShapeError),
  ("matmul_0d", lambda: Tensor.ones(()) @ Tensor.ones(3), ShapeError),
  ("einsum_count", lambda: Tensor.einsum("ij,jk->ik", Tensor.ones(2, 2)), TgArgumentError),
  ("einsum_letters", lambda: Tensor.einsum("ijk->ik", Tensor.ones(2, 2)), ShapeError),
  ("einsum_sizes", lambda: Tensor.einsum("ij,jk->ik", Tensor.ones(2, 3), Tensor.ones(4, 2)), ShapeError),
  # torch: "output subscript i appears more than once in the output"; tg's permute raised an AxisError about (0, 0, 1)
  ("einsum_output_twice", lambda: Tensor.einsum("ij->ii", Tensor.ones(2, 2)), TgArgumentError),
  ("reshape", lambda: Tensor.ones(3, 4).reshape(5, 2), ShapeError),
  ("reshape_two_minus1", lambda: Tensor.ones(3, 4).reshape(-1, -1), TgArgumentError),
  ("expand", lambda: Tensor.ones(3, 4).expand(3, 5), ShapeError),
  ("expand_fewer", lambda: Tensor.ones(3, 4).expand(4), ShapeError),
  ("pad_len", lambda: Tensor.ones(3, 4).pad(((1, 1),)), ShapeError),
  ("pad_negative", lambda: Tensor.ones(3, 4).pad(((1, 1), (-1, 0))), TgArgumentError),
  ("cat", lambda: Tensor.ones(2, 3).cat(Tensor.ones(2, 4), dim=0), ShapeError),
  ("stack", lambda: Tensor.ones(2).stack(Tensor.ones(3)), ShapeError),
  ("broadcast", lambda: Tensor.ones(3, 4) + Tensor.ones(2, 4), ShapeError),
  ("shrink", lambda: Tensor.ones(3, 4).shrink(((0, 4), None)), ShapeError),
  ("sum_axis", lambda: Tensor.ones(3, 4).sum(2), AxisError),
  ("index_broadcast", lambda: Tensor.ones(3, 4, 5)[[0, 1], [[0, 1, 2]]], ShapeError),
  ("bitwise_float", lambda: Tensor([1.0]) ^ Tensor([2.0]), DTypeError),
]


@pytest.mark.parametrize("name,fn,cls", _ERRORS, ids=[e[0] for e in _ERRORS])
def test_error_classes(name, fn, cls):
  with pytest.raises(cls) as info:
    fn()
  assert isinstance(info.value, RuntimeError), "every tg argument error is also torch's RuntimeError"
  pythonic = {ShapeError: ValueError, TgArgumentError: ValueError, AxisError: IndexError, DTypeError: TypeError}[cls]
  assert isinstance(info.value, pythonic)
  assert str(info.value)
  if cls is ShapeError:
    assert isinstance(info.value, AssertionError), "tinygrad asserts shapes: its programs catch AssertionError"


def test_index_broadcast_error_is_also_index_error():
  # torch and tinygrad raise IndexError for index tensors that don't broadcast; tg's is also a ShapeError (ValueError)
  with pytest.raises(IndexError):
    Tensor.ones(3, 4, 5)[[0, 1], [[0, 1, 2]]]


def test_where_on_a_constant_condition_reads_the_right_buffer():
  # a kernel whose first input is folded away (unread) still takes every buffer in order: it used to shift the
  # arguments, and this where read x where it should read y (found through pow's gradient at a constant base)
  x, y = Tensor([1.0, 2.0, 3.0]).realize(), Tensor([10.0, 20.0, 30.0]).realize()
  np.testing.assert_array_equal(Tensor.full((3,), False).where(x, y).numpy(), np.array([10.0, 20.0, 30.0], dtype=np.float32))
  np.testing.assert_array_equal(Tensor.full((3,), True).where(x, y).numpy(), np.array([1.0, 2.0, 3.0], dtype=np.float32))


def test_tensor_from_lists_of_arrays_and_wrapping_ints():
  # tinygrad's test_tensor_list_ndarray and test_tensor_list_special_values
  data = [np.array([1, 2, 3]), np.array([1, 2, 3])]
  np.testing.assert_equal(Tensor(data).numpy(), np.array(data))
  np.testing.assert_equal(Tensor([np.array(1.0), np.array(2.0)]).numpy(), np.array([1.0, 2.0]))
  ints = [1 << 33, 1 << 32, (1 << 31) + 5, 1]
  ints = ints + [-x for x in ints]
  np.testing.assert_equal(Tensor(ints, dtype=dtypes.uint32).numpy(), np.array(ints).astype(np.uint32))
  np.testing.assert_equal(Tensor(ints, dtype=dtypes.int32).numpy(), np.array(ints).astype(np.int32))


def test_training_and_no_grad_compare_as_bools():
  assert Tensor.training == False and Tensor.training != True  # noqa: E712 (tinygrad programs write it so)
  with Tensor.train():
    assert Tensor.training == True  # noqa: E712
  assert Tensor.no_grad == False  # noqa: E712
