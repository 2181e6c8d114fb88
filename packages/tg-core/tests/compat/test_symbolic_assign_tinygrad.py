"""tinygrad 0.9.1's behaviour for symbolic sizes (shape/symbolic.py, test_symbolic_ops.py) and for `assign`
(test_assign.py, test_setitem.py): the same numbers, and the kernel counts tinygrad's tests check."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

from tg import Tensor, Variable
from tg.helpers import GlobalCounters
from tg.shape.symbolic import NumNode, create_ge_node, create_lt_node, sym_render

rng = np.random.default_rng(0)


def rand(*shape: int) -> np.ndarray:
  return rng.standard_normal(shape).astype(np.float32)


# ---------- 1. arithmetic between Python ints and symbolic nodes ----------

def test_int_and_node_both_orders() -> None:
  i = Variable("i", 1, 10)
  assert 2 * i == i * 2
  assert (i * 4) / 2 == i * 2  # exact division stays symbolic
  assert (i * 4) // 2 == i * 2
  assert 127 // (i * 128) == 0 and 127 % (i * 128) == 127
  assert 128 // (i * 128 + 128) == 0 and 128 % (i * 128 + 128) == 128
  assert 0 // (i * 128) == 0 and 0 % (i * 128) == 0
  assert 128 // NumNode(4) == 32 and 128 % NumNode(4) == 0
  assert i // i == 1 and i % i == 0
  n = (10 // i).substitute({i: NumNode(3)})
  assert n == 3 and (10 % i).substitute({i: NumNode(4)}) == 2


def test_true_division_that_may_not_be_an_integer_raises_type_error() -> None:
  i = Variable("i", 1, 10)
  with pytest.raises(TypeError):
    10 / (i * 2)
  with pytest.raises(TypeError):
    (i * 3) / 2
  with pytest.raises(TypeError):
    i / 2.0


def test_lt_ge_helpers_and_rendering() -> None:
  assert create_lt_node(Variable("a", 3, 8), 8).render() == "(a<8)"
  assert create_ge_node(Variable("a", 3, 8), 3) == 1
  assert create_lt_node(Variable("idx", 0, 511) * 4 + Variable("lane", 0, 3), 512).render() == "(idx<128)"
  assert create_ge_node(Variable("a", 0, 5) * 4, 12).render() == "((a*-1)<-2)"
  assert sym_render(3) == "3" and sym_render(Variable("a", 0, 5) * 2) == "(a*2)"
  a, b = Variable("a", 0, 3), Variable("b", 0, 3)
  assert a * b == b * a
  assert hash(NumNode(1)) == hash(1)
  x = Variable("a", 3, 8) * 2
  assert pickle.loads(pickle.dumps(x)) == x


def test_shapetracker_var_vals_and_view_unbind() -> None:
  from tg.shape.shapetracker import ShapeTracker
  from tg.shape.view import View
  x = Variable("x", 1, 100).bind(3)
  st = ShapeTracker.from_shape((10, 10, 10)).shrink(((x, x + 3), (3, 7), (2, 5))).reshape((3 * 4 * 3,))
  assert st.var_vals == {Variable("x", 1, 100): 3}
  assert ShapeTracker.from_shape((3, 4)).var_vals == {}
  view, vals = View.create(shape=(Variable("v", 1, 100).bind(3), 4)).unbind()
  assert view == View.create(shape=(Variable("v", 1, 100), 4)) and vals == {Variable("v", 1, 100): 3}
  assert Tensor.rand(3, 5).shrink(((0, 2), (Variable("i", 1, 5), Variable("i", 1, 5) + 1))).shape == (2, 1)  # unbound: taken


# ---------- 2. tensor ops over symbolic sizes give the concrete results ----------

def test_reshape_symbolic_to_bound_value() -> None:
  vi = Variable("i", 1, 10).bind(3)
  a = rand(3, 3)
  t = Tensor(a).reshape(3, vi)
  assert t.reshape(3, vi).shape == (3, vi)
  np.testing.assert_allclose(t.reshape(3, 3).numpy(), a)
  with pytest.raises(ValueError):
    t.reshape(3, 4)


@pytest.mark.parametrize("n", [1, 3])
def test_matmul_softmax_sum_mean_var(n: int) -> None:
  vi = Variable("i", 1, 10).bind(n)
  a, b = rand(3, n), rand(n, 4)
  ta, tb = Tensor(a).reshape(3, vi), Tensor(b).reshape(vi, 4)
  np.testing.assert_allclose((ta @ tb).numpy(), a @ b, atol=1e-5, rtol=1e-5)
  e = np.exp(a - a.max(1, keepdims=True))
  np.testing.assert_allclose(ta.softmax(1).reshape(3, n).numpy(), e / e.sum(1, keepdims=True), atol=1e-6, rtol=1e-5)
  np.testing.assert_allclose(ta.sum(1).numpy(), a.sum(1), atol=1e-5, rtol=1e-5)
  np.testing.assert_allclose(ta.mean(1).numpy(), a.mean(1), atol=1e-6, rtol=1e-5)
  np.testing.assert_allclose(ta.mean().numpy(), a.mean(), atol=1e-6, rtol=1e-5)
  if n > 1:
    np.testing.assert_allclose(ta.var(1).numpy(), a.var(1, ddof=1), atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(ta.std().numpy(), a.std(ddof=1), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("n", [1, 4])
def test_attention_over_symbolic_keys(n: int) -> None:
  vi = Variable("i", 1, 10).bind(n)
  q, k, v = rand(2, 4, 1, 8), rand(2, 4, n, 8), rand(2, 4, n, 8)
  out = Tensor(q).scaled_dot_product_attention(Tensor(k).reshape(2, 4, vi, 8), Tensor(v).reshape(2, 4, vi, 8)).numpy()
  s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(8)
  w = np.exp(s - s.max(-1, keepdims=True))
  np.testing.assert_allclose(out, (w / w.sum(-1, keepdims=True)) @ v, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("n", [1, 3])
def test_cat_along_symbolic_axis(n: int) -> None:
  vi = Variable("i", 1, 10).bind(n)
  vj = Variable("j", 1, 10).bind(2)
  a, b = rand(3, n), rand(3, 2)
  out = Tensor(a).reshape(3, vi).cat(Tensor(b), dim=1)
  assert out.shape == (3, vi + 2)
  np.testing.assert_allclose(out.reshape(3, n + 2).numpy(), np.concatenate([a, b], 1))
  out2 = Tensor(a).reshape(3, vi).cat(Tensor(b).reshape(3, vj), dim=1)
  assert out2.shape == (3, vi + vj)
  np.testing.assert_allclose(out2.reshape(3, n + 2).numpy(), np.concatenate([a, b], 1))
  out0 = Tensor(a.T.copy()).reshape(vi, 3).cat(Tensor(b.T.copy()), dim=0)
  np.testing.assert_allclose(out0.reshape(n + 2, 3).numpy(), np.concatenate([a.T, b.T], 0))


def test_shrink_with_symbolic_bounds() -> None:
  vi = Variable("i", 1, 5).bind(2)
  a = rand(7, 11)
  out = Tensor(a).shrink(((vi, vi + 2), (vi, vi + 2)))
  np.testing.assert_allclose(out.numpy(), a[2:4, 2:4])
  np.testing.assert_allclose(out.reshape(2, 2).numpy(), a[2:4, 2:4])


# ---------- 3. assign: in place, into views, diamonds, and the kernels it takes ----------

# a float32 sum of 32 standard normals is off by up to ~32 ulps of its terms' size (~1e-5), whatever its own size: a
# sum near zero (which one depends on the module's random stream, so on test order) needs an absolute tolerance
TOL_SUM32 = 1e-5


def kernels(fn) -> int:  # type: ignore[no-untyped-def]
  kc = GlobalCounters.kernel_count
  fn()
  return GlobalCounters.kernel_count - kc


def test_assign_keeps_the_buffer() -> None:
  a, b = Tensor(np.arange(16, dtype=np.float32)).reshape(4, 4).realize(), Tensor(np.arange(16, dtype=np.float32)).reshape(4, 4).realize()
  before = a.lazydata.base.realized
  a += b
  a.realize()
  assert a.lazydata.base.realized is before
  np.testing.assert_allclose(a.numpy(), np.arange(16).reshape(4, 4) * 2)


def test_assign_contiguous_takes_two_kernels_as_tinygrad() -> None:
  b = Tensor.rand(4, 4).realize()
  a = Tensor.rand(4, 4).realize() + 1
  assert kernels(lambda: b.assign(a.contiguous()).realize()) == 2
  b2 = Tensor.rand(4, 4).realize()
  ap = (Tensor.rand(4, 4).realize() + 1).permute((1, 0))
  assert kernels(lambda: b2.assign(ap.contiguous()).realize()) == 2


def test_assign_diamonds() -> None:
  # the old value read through a contiguous() is computed before the assign overwrites it
  for make in (lambda: Tensor.full((4,), 2.0), lambda: Tensor.full((4,), 2.0).contiguous()):
    a = Tensor.ones(4).contiguous().realize()
    times_a = a * 3
    a.assign(make())
    np.testing.assert_allclose((a + (times_a - 1).contiguous()).numpy(), 4)
  a = Tensor.ones(4).contiguous().realize()
  times_a = a * 3
  a.assign(Tensor.full((4,), 2.0))
  np.testing.assert_allclose((a.contiguous() + (times_a - 1).contiguous()).numpy(), 4)
  a = Tensor.ones(4).contiguous().realize()
  a.assign(Tensor.full((4,), 2.0).contiguous())
  np.testing.assert_allclose((a + a * 3).numpy(), 8)


def test_assign_diamond_cycle_raises() -> None:
  a = Tensor.ones(4).contiguous().realize()
  times_a = a * 3
  a.assign(Tensor.full((4,), 2.0).contiguous())
  with pytest.raises(RuntimeError, match="cycle"):
    (a + (times_a - 1)).numpy()


def test_crossover_and_double_diamond() -> None:
  a, b = Tensor.full((4,), 2).contiguous().realize(), Tensor.full((4,), 3).contiguous().realize()
  a += b
  b += a
  Tensor.realize(a, b)
  np.testing.assert_equal(a.numpy(), 5)
  np.testing.assert_equal(b.numpy(), 8)
  a, b = Tensor.full((4,), 2).contiguous().realize(), Tensor.full((4,), 3).contiguous().realize()
  a_prev, b_prev = a * 4, b + 3
  b += a_prev.contiguous()
  a += b_prev.contiguous()
  Tensor.realize(a, b)
  np.testing.assert_equal(b.numpy(), 11)
  np.testing.assert_equal(a.numpy(), 8)


def test_assign_into_shrunk_view_writes_the_buffer() -> None:
  t = Tensor.zeros(6, 6).contiguous().realize()
  n = np.zeros((6, 6), np.float32)
  for i in range(6):
    v = Variable("v", 0, 6).bind(i)
    t.shrink(((v, v + 1), None)).assign(Tensor.full((1, 6), float(i + 1)).contiguous()).realize()
    n[i] = i + 1
    np.testing.assert_allclose(t.numpy(), n)


def test_kv_cache_written_at_start_pos() -> None:
  cache = Tensor.zeros(2, 8, 3).contiguous().realize()
  ref = np.zeros((2, 8, 3), np.float32)
  for pos in range(4):
    new = rand(2, 1, 3)
    sp = Variable("start_pos", 0, 7).bind(pos)
    if pos % 2:
      cache[:, sp:sp + 1].assign(Tensor(new)).realize()
    else:
      cache[:, sp:sp + 1] = Tensor(new)
    ref[:, pos:pos + 1] = new
    np.testing.assert_allclose(cache.numpy(), ref)
  np.testing.assert_allclose(cache.shrink((None, (0, 4), None)).numpy(), ref[:, :4])
  sp = Variable("start_pos", 0, 7).bind(2)
  np.testing.assert_allclose(cache[:, sp].numpy(), ref[:, 2])
  np.testing.assert_allclose(cache[1, :sp + 1].reshape(3, 3).numpy(), ref[1, :3])


def test_assign_into_permuted_view_writes_through_it() -> None:
  # tinygrad refuses (RuntimeError "contiguous"); tg writes through the permuted view, as torch's in-place ops do
  a = Tensor(np.arange(16, dtype=np.float32).reshape(4, 4)).realize()
  at = a.permute(1, 0)
  at += Tensor(np.ones((4, 4), np.float32))
  at.realize()
  np.testing.assert_allclose(a.numpy(), np.arange(16).reshape(4, 4) + 1)
  a2 = Tensor(np.arange(16, dtype=np.float32).reshape(4, 4)).realize()
  b2 = Tensor(np.arange(16, dtype=np.float32).reshape(4, 4)).realize()
  a2.assign(a2.permute(1, 0) + b2).realize()  # reads the target transposed: computed into a temporary first
  np.testing.assert_allclose(a2.numpy(), np.arange(16).reshape(4, 4).T + np.arange(16).reshape(4, 4))


def test_assign_into_a_view_as_large_as_the_buffer_writes_the_buffer() -> None:
  # a view that covers the whole buffer is still a view: the tensor it was cut from sees the write, as through a part of
  # it (tinygrad and torch alike); these moved the old value aside for the holder instead and dropped the write for it
  t = Tensor.zeros(2, 2).contiguous().realize()
  t.reshape(4).assign(Tensor([1.0, 2.0, 3.0, 4.0])).realize()
  np.testing.assert_array_equal(t.numpy(), [[1, 2], [3, 4]])
  doubled = t * 2  # a value computed from the old contents keeps them
  t.reshape(1, 4).assign(Tensor([[5.0, 6.0, 7.0, 8.0]])).realize()
  np.testing.assert_array_equal(t.numpy(), [[5, 6], [7, 8]])
  np.testing.assert_array_equal(doubled.numpy(), [[2, 4], [6, 8]])
  # a row at a bound Variable of a one-row buffer (a KV cache of one position, an embedding copied row by row)
  src = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4)).realize()
  one = Tensor.zeros(1, 4).contiguous().realize()
  row, tok = Variable("row", 0, 5).bind(0), Variable("tok", 0, 2).bind(2)
  one.shrink(((row, row + 1), None)).assign(src.shrink(((tok, tok + 1), None))).realize()
  np.testing.assert_array_equal(one.numpy(), [[8, 9, 10, 11]])
  one[row:row + 1] = src[1:2]
  np.testing.assert_array_equal(one.numpy(), [[4, 5, 6, 7]])


def test_assign_masked_view_read() -> None:
  a = Tensor.ones(4, 4).contiguous().realize()
  b = a.shrink((None, (0, 2))).pad((None, (0, 2)), 2)
  a.assign(a + b)
  a.realize()
  np.testing.assert_equal(a.numpy(), np.ones((4, 4)) + np.pad(np.ones((4, 2)), ((0, 0), (0, 2)), constant_values=2))


# ---------- setitem (tinygrad's test_setitem.py cases) ----------

SETITEM_CASES = [
  ((6, 6), (slice(2, 4), slice(3, 5)), np.ones((2, 2), np.float32)),
  ((6, 6), (slice(2, 4), slice(3, 5)), np.array([1.0, 2.0], np.float32)),
  ((6, 6), (slice(2, 4), slice(3, 5)), 1.0),
  ((6, 6), (3, 4), 1.0),
  ((6, 6), (3, None, 4, None), 1.0),
  ((4, 4, 4, 4), (Ellipsis, slice(1, 3), slice(None)), np.array(4, np.float32)),
  ((4, 4, 4, 4), (Ellipsis, slice(1, 3)), 4),
  ((4, 4, 4, 4), (2, slice(1, 3), None, 1), 4),
  ((4, 4, 4, 4), (slice(1, 3), slice(None), slice(0, 4, 2)), 4),
  ((4, 4, 4, 4), (slice(1, 3), slice(None), slice(None), slice(0, 3)), 4),
  ((6, 6), (slice(1, 5, 2), slice(0, 5, 3)), 1.0),
  ((6, 6), (slice(5, 1, -2), slice(5, 0, -3)), 1.0),
]


@pytest.mark.parametrize("shape,index,value", SETITEM_CASES)
def test_setitem_basic_writes_in_place_with_one_kernel(shape: tuple[int, ...], index: tuple, value: object) -> None:
  t = Tensor.zeros(shape).contiguous().realize()
  buf = t.lazydata.base.realized
  view = t.reshape(-1)  # another tensor over the same buffer sees the write, as in tinygrad
  n = np.zeros(shape, np.float32)
  n[index] = value
  v = Tensor(value) if isinstance(value, np.ndarray) else value
  if isinstance(v, Tensor):
    v.realize()
  assert kernels(lambda: t.__setitem__(index, v)) == 1
  assert t.lazydata.base.realized is buf
  np.testing.assert_allclose(t.numpy(), n)
  np.testing.assert_allclose(view.numpy(), n.reshape(-1))


def test_setitem_into_unrealized_and_inplace_operators() -> None:
  t = Tensor.arange(4).reshape(2, 2)
  t[1] = 5
  np.testing.assert_equal(t.numpy(), [[0, 1], [5, 5]])
  for op, ref in ((lambda x: x.__iadd__(2), [4, 5]), (lambda x: x.__isub__(1), [1, 2]), (lambda x: x.__imul__(2), [4, 6]),
                  (lambda x: x.__ipow__(2), [4, 9]), (lambda x: x.__ixor__(5), [7, 6])):
    t = Tensor.arange(4).reshape(2, 2).contiguous()
    row = t[1]
    t[1] = op(row)
    np.testing.assert_equal(t.numpy(), [[0, 1], ref])
  t = Tensor.arange(4).reshape(2, 2).contiguous()
  t[1] += 2
  t = t.contiguous()
  t[1] -= 1  # tinygrad 0.9.1 fails here (an expected failure in its tests)
  np.testing.assert_equal(t.numpy(), [[0, 1], [3, 4]])


def test_setitem_keeps_dtype_and_fancy_and_grad_rules() -> None:
  for dt in ("int32", "float32", "bool"):
    for v in (5.0, 5, True):
      t = Tensor.ones(6, 6, dtype=dt).contiguous()
      t[1] = v
      assert t.dtype.name == {"int32": "int", "float32": "float", "bool": "bool"}[dt]
  t = Tensor.zeros(6, 6).contiguous()
  t[[1, 2], [3, 2]] = 3  # tinygrad 0.9.1 can't (NotImplementedError); tg scatters
  n = np.zeros((6, 6))
  n[[1, 2], [3, 2]] = 3
  np.testing.assert_allclose(t.numpy(), n)
  with pytest.raises(NotImplementedError):  # as tinygrad; also a RuntimeError, as torch's
    Tensor.rand(8, 8, requires_grad=True)[:3] = Tensor.rand(8)
  z = Tensor.rand(8, 8)
  z[:3] = Tensor.rand(8)


def test_setitem_at_a_bound_variable_offset() -> None:
  t = Tensor.zeros(6, 6).contiguous().realize()
  n = np.zeros((6, 6), np.float32)
  for i in range(6):
    v = Variable("v", 0, 6).bind(i)
    t.shrink(((v, v + 1), None)).assign(Tensor.full((1, 6), float(i + 1)).contiguous()).realize()
    n[i, :] = i + 1
  np.testing.assert_allclose(t.numpy(), n)


def test_assign_of_a_reduction_is_one_kernel() -> None:
  a = Tensor(rand(32, 32)).realize()
  b = Tensor.full((32,), 1.0).contiguous().realize()
  r = a.sum(axis=1)
  b.assign(r + b)
  assert kernels(lambda: b.realize()) == 1  # the reduction is computed in the assign's kernel, as in tinygrad
  np.testing.assert_allclose(b.numpy(), a.numpy().sum(1) + 1, rtol=1e-5)
  c = Tensor(rand(8)).realize()
  ref = c.numpy() - c.numpy().mean()
  c.assign(c - c.mean())  # the reduction reads the buffer the assign overwrites: computed first, in a kernel of its own
  np.testing.assert_allclose(c.numpy(), ref, rtol=1e-5, atol=1e-6)


def test_assign_reading_the_target_through_a_padded_view_is_one_kernel() -> None:
  a = Tensor.ones(4, 4).contiguous().realize()
  a.assign(a + a.shrink((None, (0, 2))).pad((None, (0, 2)), 2))  # nothing else holds the old value: no copy of it
  assert kernels(lambda: a.realize()) == 1
  np.testing.assert_equal(a.numpy(), np.ones((4, 4)) + np.pad(np.ones((4, 2)), ((0, 0), (0, 2)), constant_values=2))


def test_setitem_views_alias_computed_values_keep_the_old() -> None:
  # views of the buffer (and the tensor itself) see the write, as in tinygrad and torch; a value computed lazily from
  # the old contents before the write keeps meaning what it meant (torch computes it eagerly), at the cost of one copy
  rng2 = np.random.default_rng(1)
  t = Tensor.zeros(6, 7).contiguous().realize()
  n = np.zeros((6, 7), np.float32)
  alias = t.reshape(42)
  for it in range(16):
    a, b = sorted(rng2.integers(0, 7, 2))
    c, d = sorted(rng2.integers(0, 8, 2))
    sl = (slice(a, b), slice(c, d, 2)) if it % 2 else (slice(b, a, -1), slice(d, c, -1))
    if n[sl].size == 0:
      continue
    v = rng2.standard_normal(n[sl].shape).astype(np.float32)
    doubled, before = t * 2, n.copy()
    if it % 3 == 0:
      t[sl] += Tensor(v)
      n[sl] += v
    else:
      t[sl] = Tensor(v)
      n[sl] = v
    np.testing.assert_allclose(doubled.numpy(), 2 * before, rtol=1e-6)
    np.testing.assert_allclose(t.numpy(), n, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(alias.numpy(), n.reshape(42), rtol=1e-5, atol=1e-6)


def test_assigns_sharing_a_reduction_are_one_kernel() -> None:
  a = Tensor(rand(32, 32)).realize()
  b, c, d = (Tensor.full((32,), float(v)).contiguous().realize() for v in (1, 2, 3))
  r = a.sum(axis=1)
  b.assign(r + b)
  c.assign(r + c)
  d.assign(r + d)
  assert kernels(lambda: Tensor.realize(b, c, d)) == 1  # as tinygrad's multi-output kernel
  for t, v in ((b, 1), (c, 2), (d, 3)):
    np.testing.assert_allclose(t.numpy(), a.numpy().sum(1) + v, rtol=1e-5, atol=TOL_SUM32)
  # assigns that read each other's buffers are not merged (one would read what another already wrote)
  e, f, g = (Tensor.full((32,), float(v)).contiguous().realize() for v in (1, 2, 3))
  r = a.sum(axis=1)
  e.assign(r + f)
  f.assign(r + e)  # the new e, as in tinygrad: 2r + 2
  Tensor.realize(e, f)
  np.testing.assert_allclose(e.numpy(), a.numpy().sum(1) + 2, rtol=1e-5, atol=TOL_SUM32)
  np.testing.assert_allclose(f.numpy(), 2 * a.numpy().sum(1) + 2, rtol=1e-5, atol=TOL_SUM32)
  r = a.sum(axis=1)
  e.assign(r + g)
  g.assign(r + f)
  f.assign(r * 0 + 7)
  Tensor.realize(e, g, f)
  np.testing.assert_allclose(g.numpy(), 3 * a.numpy().sum(1) + 2, rtol=1e-5, atol=TOL_SUM32)
  np.testing.assert_allclose(f.numpy(), 7, rtol=1e-5, atol=TOL_SUM32)


def test_assign_of_a_view_of_a_computation_on_the_target() -> None:
  # (a + 1).T reads a transposed although a + 1 reads it in order: computed into a temporary before a is overwritten
  an = np.arange(16, dtype=np.float32).reshape(4, 4)
  a = Tensor(an).realize()
  a.assign((a + 1).permute(1, 0))
  np.testing.assert_allclose(a.numpy(), (an + 1).T)
  x = Tensor.ones(4, 4).contiguous().realize()  # tinygrad refuses this one (RuntimeError "contiguous")
  x.assign(x + x.shrink((None, (0, 2))).pad((None, (0, 2)), 2).permute(1, 0))
  np.testing.assert_allclose(x.numpy(), np.ones((4, 4)) + np.pad(np.ones((4, 2)), ((0, 0), (0, 2)), constant_values=2).T)
  b = Tensor(an).realize()
  r = Tensor(rand(4, 4, 4)).realize()
  b.assign(r.sum(axis=1) + b.permute(1, 0))  # tinygrad: RuntimeError "contiguous"
  np.testing.assert_allclose(b.numpy(), r.numpy().sum(1) + an.T, rtol=1e-5)
