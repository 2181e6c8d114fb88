"""Op-by-op tests: forward results and gradients of tg against torch (CPU), compared with numpy's assert helpers."""
import numpy as np
import pytest

from tg import Tensor, dtypes
from tg.device import is_dtype_supported

# float32 tolerances: general ops, reductions/matmul (summation order differs), transcendental ops
F32 = {"atol": 1e-5, "rtol": 1e-4}
TRANS = {"atol": 1e-4, "rtol": 1e-3}


def helper_test_op(shapes, torch_fn, tg_fn, atol=1e-6, rtol=1e-3, grad_atol=1e-4, grad_rtol=1e-3, forward_only=False, low=-2, high=2,
                   vals=None):
  """Run torch_fn and tg_fn on the same inputs; compare the forward results and, unless forward_only, the input gradients
  of out.sum().backward(). Inputs are seeded random float32 arrays of `shapes` in [low, high), or the arrays in `vals`."""
  torch = pytest.importorskip("torch")
  if vals is None:
    rng = np.random.default_rng(0)
    np_ins = [np.asarray(rng.uniform(low, high, size=s), dtype=np.float32) for s in shapes]
  else:
    np_ins = [np.asarray(v) for v in vals]
    np_ins = [v.astype(np.float32) if v.dtype == np.float64 else v for v in np_ins]
  needs_grad = [not forward_only and np.issubdtype(v.dtype, np.floating) for v in np_ins]
  ts = [torch.tensor(v, requires_grad=g) for v, g in zip(np_ins, needs_grad)]
  tgs = [Tensor(v, requires_grad=g) for v, g in zip(np_ins, needs_grad)]

  tout = torch_fn(*ts)
  gout = tg_fn(*tgs)
  ref = tout.detach().numpy()
  assert gout.shape == tuple(tout.shape), f"shape mismatch: tg {gout.shape} vs torch {tuple(tout.shape)}"
  got = gout.numpy()
  assert got.dtype == ref.dtype, f"dtype mismatch: tg {got.dtype} vs torch {ref.dtype}"
  assert got.shape == ref.shape
  if np.issubdtype(ref.dtype, np.floating):
    np.testing.assert_allclose(got, ref, atol=atol, rtol=rtol)
  else:
    np.testing.assert_array_equal(got, ref)

  if forward_only or not np.issubdtype(ref.dtype, np.floating) or not any(needs_grad):
    return
  tout.sum().backward()
  gout.sum().backward()
  for i, (t, g) in enumerate(zip(ts, tgs)):
    if not needs_grad[i]:
      continue
    if t.grad is None:  # not differentiably connected to the output (e.g. the condition of a where)
      assert g.grad is None or not np.any(g.grad.numpy()), f"input {i}: torch has no gradient, tg has a nonzero one"
      continue
    assert g.grad is not None, f"input {i}: tg gradient is None"
    assert g.grad.shape == tuple(t.grad.shape), f"input {i}: grad shape {g.grad.shape} vs {tuple(t.grad.shape)}"
    np.testing.assert_allclose(g.grad.numpy(), t.grad.numpy(), atol=grad_atol, rtol=grad_rtol, err_msg=f"gradient of input {i}")


def _nonzero(shape, seed=1, low=0.5, high=2.0):
  """Random float32 values with |x| in [low, high) and random sign: safe denominators."""
  rng = np.random.default_rng(seed)
  return (rng.uniform(low, high, size=shape) * rng.choice([-1.0, 1.0], size=shape)).astype(np.float32)


def _uniform(shape, seed=0, low=-2.0, high=2.0):
  return np.random.default_rng(seed).uniform(low, high, size=shape).astype(np.float32)


def _no_ties(shape, seed=0):
  """Distinct float32 values in [-1, 1) so max/min have a unique argmax/argmin."""
  n = int(np.prod(shape))
  return (np.random.default_rng(seed).permutation(n).reshape(shape).astype(np.float32) / max(n, 1) * 2 - 1)


def _small_ints(shape, seed=0):
  """Integer-valued float32 values in [-2, 2]: comparisons then hit ties and equalities."""
  return np.random.default_rng(seed).integers(-2, 3, size=shape).astype(np.float32)


BROADCAST_SHAPES = [
  [(3, 4), (3, 4)],
  [(3, 1), (1, 4)],
  [(4,), (3, 4)],
  [(2, 1, 4), (3, 1)],
  [(), (3, 4)],
  [(1,), (2, 3)],
  [(2, 3, 1), (1, 1, 5)],
]

# ---------- elementwise binary ----------


@pytest.mark.parametrize("shapes", BROADCAST_SHAPES)
def test_add(shapes):
  helper_test_op(shapes, lambda x, y: x + y, lambda x, y: x + y)


@pytest.mark.parametrize("shapes", BROADCAST_SHAPES)
def test_sub(shapes):
  helper_test_op(shapes, lambda x, y: x - y, lambda x, y: x - y)


@pytest.mark.parametrize("shapes", BROADCAST_SHAPES)
def test_mul(shapes):
  helper_test_op(shapes, lambda x, y: x * y, lambda x, y: x * y)


@pytest.mark.parametrize("shapes", BROADCAST_SHAPES)
def test_div(shapes):
  helper_test_op(None, lambda x, y: x / y, lambda x, y: x / y, **F32, vals=[_uniform(shapes[0]), _nonzero(shapes[1])])


@pytest.mark.parametrize("scalar", [2, 2.5, -3.0, 0.0])
def test_add_scalar(scalar):
  helper_test_op([(3, 4)], lambda x: x + scalar, lambda x: x + scalar)
  helper_test_op([(3, 4)], lambda x: scalar + x, lambda x: scalar + x)


@pytest.mark.parametrize("scalar", [2, 2.5, -3.0, 0.0])
def test_sub_scalar(scalar):
  helper_test_op([(3, 4)], lambda x: x - scalar, lambda x: x - scalar)


@pytest.mark.parametrize("scalar", [2, 2.5, -3.0, 0.0])
def test_rsub_scalar(scalar):
  helper_test_op([(3, 4)], lambda x: scalar - x, lambda x: scalar - x)


@pytest.mark.parametrize("scalar", [2, 2.5, -3.0, 0.0])
def test_mul_scalar(scalar):
  helper_test_op([(3, 4)], lambda x: x * scalar, lambda x: x * scalar)
  helper_test_op([(3, 4)], lambda x: scalar * x, lambda x: scalar * x)


@pytest.mark.parametrize("scalar", [2, 4.0, -0.5, 3.0])
def test_div_scalar(scalar):
  helper_test_op([(3, 4)], lambda x: x / scalar, lambda x: x / scalar, **F32)


@pytest.mark.parametrize("scalar", [2, 1.5, -3.0, 0.0])
def test_rdiv_scalar(scalar):
  helper_test_op(None, lambda x: scalar / x, lambda x: scalar / x, **F32, vals=[_nonzero((3, 4))])


@pytest.mark.parametrize("shapes", [[(3, 4)], [(2, 1, 3)], [()]])
def test_chained_scalar_ops(shapes):
  helper_test_op(shapes, lambda x: (2 - x) * 3 / (x * x + 1) + 0.5, lambda x: (2 - x) * 3 / (x * x + 1) + 0.5, **F32)

# ---------- pow ----------


@pytest.mark.parametrize("exponent", [2, 3, 2.0, 1, 0])
def test_pow_scalar_exponent_any_base(exponent):
  # integer-valued exponents are defined for negative bases too
  helper_test_op([(3, 4)], lambda x: x ** exponent, lambda x: x ** exponent, **TRANS)


@pytest.mark.parametrize("exponent", [0.5, 1.7, -1, -1.5, 2.5])
def test_pow_scalar_exponent_positive_base(exponent):
  helper_test_op([(3, 4)], lambda x: x ** exponent, lambda x: x ** exponent, **TRANS, low=0.5, high=2)


@pytest.mark.parametrize("base", [2, 0.5, 3.0, 1.0])
def test_pow_scalar_base(base):
  helper_test_op([(3, 4)], lambda x: base ** x, lambda x: base ** x, **TRANS)


@pytest.mark.parametrize("shapes", [[(3, 4), (3, 4)], [(3, 1), (1, 4)], [(4,), (2, 4)]])
def test_pow_tensor_tensor(shapes):
  helper_test_op(None, lambda x, y: x ** y, lambda x, y: x ** y, **TRANS, vals=[_uniform(shapes[0], low=0.5, high=2), _uniform(shapes[1], seed=1)])

# ---------- elementwise unary ----------


@pytest.mark.parametrize("shape", [(3, 4), (), (1,), (2, 1, 3)])
def test_neg(shape):
  helper_test_op([shape], lambda x: -x, lambda x: -x)
  helper_test_op([shape], lambda x: x.neg(), lambda x: x.neg())


@pytest.mark.parametrize("shape", [(3, 4), (), (2, 1, 3)])
def test_exp(shape):
  helper_test_op([shape], lambda x: x.exp(), lambda x: x.exp(), **TRANS)


def test_exp_wide_range():
  helper_test_op([(40,)], lambda x: x.exp(), lambda x: x.exp(), **TRANS, grad_rtol=1e-3, low=-10, high=10)


@pytest.mark.parametrize("shape", [(3, 4), (), (2, 1, 3)])
def test_log(shape):
  helper_test_op([shape], lambda x: x.log(), lambda x: x.log(), **TRANS, low=0.25, high=4)


def test_log_wide_range():
  helper_test_op([(40,)], lambda x: x.log(), lambda x: x.log(), **TRANS, low=1e-3, high=1e3)


@pytest.mark.parametrize("shape", [(3, 4), (), (2, 1, 3)])
def test_sqrt(shape):
  helper_test_op([shape], lambda x: x.sqrt(), lambda x: x.sqrt(), **F32, low=0.25, high=4)


@pytest.mark.parametrize("low,high", [(-2, 2), (-8, 8)])
def test_sin(low, high):
  helper_test_op([(5, 8)], lambda x: x.sin(), lambda x: x.sin(), **TRANS, low=low, high=high)


@pytest.mark.parametrize("shape", [(3, 4), (), (2, 1, 3)])
def test_relu(shape):
  helper_test_op([shape], lambda x: x.relu(), lambda x: x.relu())


@pytest.mark.parametrize("low,high", [(-2, 2), (-10, 10)])
def test_sigmoid(low, high):
  helper_test_op([(5, 8)], lambda x: x.sigmoid(), lambda x: x.sigmoid(), **F32, low=low, high=high)


@pytest.mark.parametrize("low,high", [(-2, 2), (-10, 10)])
def test_tanh(low, high):
  helper_test_op([(5, 8)], lambda x: x.tanh(), lambda x: x.tanh(), **F32, low=low, high=high)

# ---------- comparisons and where ----------

CMP_OPS = [
  ("lt", lambda x, y: x < y),
  ("le", lambda x, y: x <= y),
  ("gt", lambda x, y: x > y),
  ("ge", lambda x, y: x >= y),
  ("eq", lambda x, y: x == y),
  ("ne", lambda x, y: x != y),
]


@pytest.mark.parametrize("name,op", CMP_OPS, ids=[n for n, _ in CMP_OPS])
@pytest.mark.parametrize("shapes", [[(3, 4), (3, 4)], [(3, 1), (1, 4)], [(4,), (3, 4)], [(), (2, 3)]])
def test_cmp_tensor_tensor(name, op, shapes):
  helper_test_op(None, op, op, forward_only=True, vals=[_small_ints(shapes[0]), _small_ints(shapes[1], seed=1)])


@pytest.mark.parametrize("name,op", CMP_OPS, ids=[n for n, _ in CMP_OPS])
@pytest.mark.parametrize("scalar", [0, 1.0, -0.5])
def test_cmp_tensor_scalar(name, op, scalar):
  helper_test_op(None, lambda x: op(x, scalar), lambda x: op(x, scalar), forward_only=True, vals=[_small_ints((3, 4))])
  helper_test_op(None, lambda x: op(scalar, x), lambda x: op(scalar, x), forward_only=True, vals=[_small_ints((3, 4))])


@pytest.mark.parametrize("name,op", CMP_OPS, ids=[n for n, _ in CMP_OPS])
def test_cmp_result_dtype_is_bool(name, op):
  a, b = Tensor(_small_ints((3, 4))), Tensor(_small_ints((3, 4), seed=1))
  assert op(a, b).dtype == dtypes.bool
  assert op(a, 1.0).dtype == dtypes.bool
  np.testing.assert_array_equal(op(a, b).numpy(), op(_small_ints((3, 4)), _small_ints((3, 4), seed=1)))


def _cond(shape, seed=2):
  """A random bool condition array (an input that needs no gradient)."""
  return np.random.default_rng(seed).random(size=shape) > 0.5


@pytest.mark.parametrize("shapes", [[(3, 4), (3, 4), (3, 4)], [(3, 1), (1, 4), (3, 4)], [(4,), (3, 4), (1,)], [(2, 3, 1), (3, 4), ()]])
def test_where_static(shapes):
  helper_test_op(None, lambda c, a, b: torch_where(c, a, b), lambda c, a, b: Tensor.where(c, a, b),
                 vals=[_cond(shapes[0]), _uniform(shapes[1]), _uniform(shapes[2], seed=1)])


@pytest.mark.parametrize("shapes", [[(3, 4), (3, 4), (3, 4)], [(3, 1), (1, 4), (3, 4)], [(1, 4), (3, 1), (4,)]])
def test_where_method(shapes):
  helper_test_op(None, lambda c, a, b: torch_where(c, a, b), lambda c, a, b: c.where(a, b),
                 vals=[_cond(shapes[0]), _uniform(shapes[1]), _uniform(shapes[2], seed=1)])


def test_where_cond_from_comparison():
  helper_test_op(None, lambda x, a, b: torch_where(x > a, a, b), lambda x, a, b: (x > a).where(a, b),
                 vals=[_uniform((3, 4), seed=3), _uniform((3, 4)), _uniform((1, 4), seed=1)])


def test_where_cond_from_tensor_that_requires_grad():
  # the condition comes from an input that requires grad; that input gets no gradient (as in torch)
  helper_test_op([(3, 4), (3, 4), (3, 4)], lambda c, a, b: torch_where(c > 0, a, b), lambda c, a, b: (c > 0).where(a, b))


def test_where_scalar_branch():
  helper_test_op(None, lambda c, a: torch_where(c, a, 0.5), lambda c, a: c.where(a, 0.5), vals=[_cond((3, 4)), _uniform((3, 4))])
  helper_test_op(None, lambda c, b: torch_where(c, -1.5, b), lambda c, b: c.where(-1.5, b), vals=[_cond((3, 4)), _uniform((3, 4))])


def test_where_same_tensor_both_branches():
  helper_test_op(None, lambda c, a: torch_where(c, a * 2, a.exp()), lambda c, a: c.where(a * 2, a.exp()), **TRANS,
                 vals=[_cond((3, 4)), _uniform((3, 4))])


def torch_where(cond, a, b):
  torch = pytest.importorskip("torch")
  return torch.where(cond, a, b)

# ---------- reductions ----------


def _tdims(axis, ndim):
  """torch dims for a tg axis argument: None means every axis."""
  return tuple(range(ndim)) if axis is None else axis


REDUCE_CASES = [
  ((3, 4), None),
  ((3, 4), 0),
  ((3, 4), 1),
  ((3, 4), -1),
  ((2, 3, 4), (0, 2)),
  ((2, 3, 4), (-1, -3)),
  ((2, 3, 4), (1,)),
  ((3, 1, 4), 1),
  ((1, 5), 0),
  ((5,), 0),
  ((5,), None),
  ((2, 3, 4), (0, 1, 2)),
]


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("shape,axis", REDUCE_CASES)
def test_sum(shape, axis, keepdim):
  helper_test_op([shape], lambda x: x.sum(dim=_tdims(axis, x.ndim), keepdim=keepdim), lambda x: x.sum(axis=axis, keepdim=keepdim), **F32)


def test_sum_default_args():
  helper_test_op([(3, 4)], lambda x: x.sum(), lambda x: x.sum(), **F32)
  helper_test_op([(3, 4)], lambda x: x.sum(1), lambda x: x.sum(1), **F32)


def test_sum_scalar_tensor():
  helper_test_op([()], lambda x: x.sum(), lambda x: x.sum())


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("shape,axis", REDUCE_CASES)
def test_mean(shape, axis, keepdim):
  helper_test_op([shape], lambda x: x.mean(dim=_tdims(axis, x.ndim), keepdim=keepdim), lambda x: x.mean(axis=axis, keepdim=keepdim), **F32)


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("shape,axis", REDUCE_CASES)
def test_max(shape, axis, keepdim):
  helper_test_op(None, lambda x: x.amax(dim=_tdims(axis, x.ndim), keepdim=keepdim), lambda x: x.max(axis=axis, keepdim=keepdim),
                 vals=[_no_ties(shape)])


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("shape,axis", REDUCE_CASES)
def test_min(shape, axis, keepdim):
  helper_test_op(None, lambda x: x.amin(dim=_tdims(axis, x.ndim), keepdim=keepdim), lambda x: x.min(axis=axis, keepdim=keepdim),
                 vals=[_no_ties(shape, seed=3)])


def test_max_min_negative_values():
  # all-negative input: a max that starts its accumulator at 0 would be wrong
  vals = [_no_ties((3, 5)) - 5]
  helper_test_op(None, lambda x: x.amax(dim=1), lambda x: x.max(axis=1), vals=vals)
  helper_test_op(None, lambda x: x.amin(dim=0), lambda x: x.min(axis=0), vals=[-v for v in vals])


def test_reduce_of_expression():
  helper_test_op([(3, 4), (3, 4)], lambda x, y: (x * y + 1).sum(dim=1), lambda x, y: (x * y + 1).sum(axis=1), **F32)
  helper_test_op([(3, 4), (4,)], lambda x, y: (x - y).amax(dim=0), lambda x, y: (x - y).max(axis=0), **F32)

# ---------- movement ----------


@pytest.mark.parametrize("shape,new", [
  ((3, 4), (4, 3)),
  ((3, 4), (12,)),
  ((3, 4), (2, -1)),
  ((3, 4), (-1,)),
  ((2, 3, 4), (6, 4)),
  ((2, 3, 4), (4, -1, 2)),
  ((3, 4), (1, 3, 1, 4)),
  ((1, 3, 1), (3,)),
  ((1,), ()),
  ((), (1, 1)),
])
def test_reshape(shape, new):
  helper_test_op([shape], lambda x: x.reshape(new), lambda x: x.reshape(new))


def test_reshape_varargs():
  helper_test_op([(2, 6)], lambda x: x.reshape(3, 4), lambda x: x.reshape(3, 4))
  helper_test_op([(2, 6)], lambda x: x.reshape(-1, 2), lambda x: x.reshape(-1, 2))


@pytest.mark.parametrize("shape,order", [
  ((2, 3, 4), (2, 0, 1)),
  ((2, 3, 4), (1, 0, 2)),
  ((2, 3, 4), (0, 1, 2)),
  ((3, 4), (1, 0)),
  ((2, 1, 3, 1), (3, 2, 1, 0)),
])
def test_permute(shape, order):
  helper_test_op([shape], lambda x: x.permute(order), lambda x: x.permute(order))
  helper_test_op([shape], lambda x: x.permute(*order), lambda x: x.permute(*order))


@pytest.mark.parametrize("shape,d0,d1", [((3, 4), 0, 1), ((2, 3, 4), 0, 2), ((2, 3, 4), -1, -2), ((2, 3, 4), 1, 1)])
def test_transpose(shape, d0, d1):
  helper_test_op([shape], lambda x: x.transpose(d0, d1), lambda x: x.transpose(d0, d1))


def test_T():
  helper_test_op([(3, 4)], lambda x: x.T, lambda x: x.T)


@pytest.mark.parametrize("shape,new", [
  ((1, 4), (3, 4)),
  ((3, 1), (3, 5)),
  ((3, 1), (-1, 5)),
  ((1, 1, 4), (2, 3, 4)),
  ((2, 1, 4), (2, 3, -1)),
  ((1,), (6,)),
])
def test_expand(shape, new):
  helper_test_op([shape], lambda x: x.expand(new), lambda x: x.expand(new))
  helper_test_op([shape], lambda x: x.expand(*new), lambda x: x.expand(*new))


def _torch_pad_arg(arg, ndim):
  """tg pad arg (one (before, after) or None per axis) -> torch.nn.functional.pad's flat list, last axis first."""
  flat = []
  for p in reversed(list(arg) + [None] * (ndim - len(arg))):
    flat += list(p) if p is not None else [0, 0]
  return flat


@pytest.mark.parametrize("shape,arg", [
  ((3, 4), ((1, 2), (0, 1))),
  ((3, 4), ((0, 0), (3, 0))),
  ((3, 4), (None, (1, 1))),
  ((3, 4), ((2, 0), None)),
  ((2, 3, 4), ((1, 0), (0, 2), (1, 1))),
  ((5,), ((2, 3),)),
  ((1, 1), ((1, 1), (1, 1))),
])
def test_pad(shape, arg):
  torch = pytest.importorskip("torch")
  helper_test_op([shape], lambda x: torch.nn.functional.pad(x, _torch_pad_arg(arg, x.ndim)), lambda x: x.pad(arg))


def test_pad_value():
  torch = pytest.importorskip("torch")
  arg = ((1, 2), (0, 1))
  helper_test_op([(3, 4)], lambda x: torch.nn.functional.pad(x, _torch_pad_arg(arg, 2), value=1.5), lambda x: x.pad(arg, value=1.5))


@pytest.mark.parametrize("shape,arg,sl", [
  ((4, 3), ((1, 3), (0, 2)), (slice(1, 3), slice(0, 2))),
  ((4, 3), (None, (1, 3)), (slice(None), slice(1, 3))),
  ((4, 3), ((0, 4), (0, 3)), (slice(0, 4), slice(0, 3))),
  ((2, 3, 4), ((1, 2), (0, 3), (2, 4)), (slice(1, 2), slice(0, 3), slice(2, 4))),
  ((6,), ((2, 5),), (slice(2, 5),)),
  ((4, 3), ((2, 2), (0, 3)), (slice(2, 2), slice(0, 3))),
])
def test_shrink(shape, arg, sl):
  helper_test_op([shape], lambda x: x[sl], lambda x: x.shrink(arg))


@pytest.mark.parametrize("shape,axis", [
  ((3, 4), 0),
  ((3, 4), 1),
  ((3, 4), -1),
  ((3, 4), (0, 1)),
  ((2, 3, 4), (0, 2)),
  ((2, 3, 4), (-1, -2)),
  ((2, 1, 3), 1),
  ((5,), 0),
])
def test_flip(shape, axis):
  dims = axis if isinstance(axis, tuple) else (axis,)
  helper_test_op([shape], lambda x: x.flip(dims), lambda x: x.flip(axis))


def test_slice_range_and_step():
  helper_test_op([(5, 6)], lambda x: x[1:3, ::2], lambda x: x[1:3, ::2])
  helper_test_op([(5, 6)], lambda x: x[1:, 1:5:3], lambda x: x[1:, 1:5:3])
  helper_test_op([(5, 6)], lambda x: x[-3:-1], lambda x: x[-3:-1])


def test_slice_reverse():
  helper_test_op([(5, 6)], lambda x: x.flip(0), lambda x: x[::-1])
  helper_test_op([(5, 6)], lambda x: x[:, 1::2].flip(1), lambda x: x[:, ::-2])


def test_slice_int_index():
  helper_test_op([(5, 6)], lambda x: x[:, 1], lambda x: x[:, 1])
  helper_test_op([(5, 6)], lambda x: x[-1], lambda x: x[-1])
  helper_test_op([(5, 6)], lambda x: x[2, -2], lambda x: x[2, -2])
  helper_test_op([(2, 3, 4)], lambda x: x[1, :, 2], lambda x: x[1, :, 2])


def test_slice_ellipsis():
  helper_test_op([(2, 3, 4)], lambda x: x[..., 0], lambda x: x[..., 0])
  helper_test_op([(2, 3, 4)], lambda x: x[1, ...], lambda x: x[1, ...])
  helper_test_op([(2, 3, 4)], lambda x: x[..., 1:3], lambda x: x[..., 1:3])


def test_slice_none_adds_axis():
  helper_test_op([(3, 4)], lambda x: x[None], lambda x: x[None])
  helper_test_op([(3, 4)], lambda x: x[:, None, 1:], lambda x: x[:, None, 1:])

# ---------- matmul ----------


@pytest.mark.parametrize("shapes", [
  [(8, 16), (16, 4)],
  [(1, 16), (16, 1)],
  [(16,), (16, 4)],
  [(8, 16), (16,)],
  [(16,), (16,)],
  [(2, 4, 8), (2, 8, 3)],
  [(2, 4, 8), (8, 3)],
  [(4, 8), (2, 8, 3)],
])
def test_matmul(shapes):
  helper_test_op(shapes, lambda x, y: x @ y, lambda x, y: x @ y, **F32)


@pytest.mark.parametrize("shapes", [[(8, 16), (16, 4)], [(16,), (16, 4)], [(2, 4, 8), (2, 8, 3)]])
def test_dot(shapes):
  helper_test_op(shapes, lambda x, y: x.matmul(y), lambda x, y: x.dot(y), **F32)
  helper_test_op(shapes, lambda x, y: x.matmul(y), lambda x, y: x.matmul(y), **F32)

# ---------- cast ----------


def test_cast_float_to_int32():
  torch = pytest.importorskip("torch")
  helper_test_op([(3, 5)], lambda x: x.to(torch.int32), lambda x: x.cast(dtypes.int32), forward_only=True, low=-10, high=10)


def test_cast_float_to_int32_dtype():
  t = Tensor(_uniform((3, 4), low=-10, high=10)).cast(dtypes.int32)
  assert t.dtype == dtypes.int32
  np.testing.assert_array_equal(t.numpy(), _uniform((3, 4), low=-10, high=10).astype(np.int32))


def test_cast_int_to_float():
  torch = pytest.importorskip("torch")
  ints = np.random.default_rng(0).integers(-100, 100, size=(3, 4)).astype(np.int32)
  helper_test_op(None, lambda x: x.to(torch.float32), lambda x: x.cast(dtypes.float32), forward_only=True, vals=[ints])


@pytest.mark.skipif(not is_dtype_supported(dtypes.float16), reason="the device has no float16 (Renderer.missing_dtypes)")
def test_cast_float16_round_trip():
  torch = pytest.importorskip("torch")
  helper_test_op([(3, 5)], lambda x: x.to(torch.float16).to(torch.float32), lambda x: x.cast(dtypes.float16).cast(dtypes.float32), atol=0, rtol=0)
  helper_test_op([(3, 5)], lambda x: x.to(torch.float16), lambda x: x.cast(dtypes.float16), atol=0, rtol=0, forward_only=True)


@pytest.mark.skipif(not is_dtype_supported(dtypes.float16), reason="the device has no float16 (Renderer.missing_dtypes)")
def test_cast_float16_round_trip_grad():
  torch = pytest.importorskip("torch")
  helper_test_op([(3, 5)], lambda x: (x.to(torch.float16).to(torch.float32) * x), lambda x: x.cast(dtypes.float16).cast(dtypes.float32) * x,
                 atol=1e-5, rtol=1e-3, grad_atol=1e-3, grad_rtol=1e-3)


def test_cast_bool():
  torch = pytest.importorskip("torch")
  helper_test_op(None, lambda x: x.to(torch.bool), lambda x: x.cast(dtypes.bool), forward_only=True, vals=[_small_ints((3, 4))])
