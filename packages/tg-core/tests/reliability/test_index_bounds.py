"""Index tensors out of range are a Python error, never a silent 0: t[idx] (IndexError, as torch), gather and
take_along_dim (an IndexError that is also torch's RuntimeError), Embedding (IndexError), cross_entropy, nll_loss and
sparse_categorical_crossentropy with a target class out of range (IndexError; the ignore_index still counts for
nothing). The indices live on the device, so the check is lazy (tg.divcheck's guards, as integer division by zero):
it raises when the result is realized, and after that the process goes on. Valid indices (negative ones in range for
t[idx]) give torch's and numpy's values."""
import numpy as np
import pytest
import torch

from tg import Device, Tensor, TinyJit, divcheck, dtypes
from tg.nn import Embedding

X = np.arange(12, dtype=np.float32).reshape(3, 4)


def _raises(exc, fn, *words):
  with pytest.raises(exc) as e:
    fn()
  for w in words:
    assert w in str(e.value), f"{w!r} not in {str(e.value)!r}"
  return e.value


# ---------- t[idx] ----------
@pytest.mark.parametrize("idx, bad, dim, size", [
  ([5, -7], 5, 0, 3), ([0, -4], -4, 0, 3), ([[2, 3]], 3, 0, 3), ([2**31 - 1], 2**31 - 1, 0, 3)])
def test_getitem_1d_out_of_range_raises(idx, bad, dim, size):
  x = Tensor([1., 2., 3.])
  y = x[Tensor(idx)]  # lazy: nothing is known yet
  _raises(IndexError, y.tolist, f"index {bad} is out of bounds for dimension {dim} with size {size}")
  _raises(IndexError, lambda: (y * 2).sum().item())  # also through ops that consume the result


def test_issue_examples():
  _raises(IndexError, lambda: Tensor([1., 2., 3.])[Tensor([5, -7])].tolist(), "out of bounds")
  _raises(RuntimeError, lambda: Tensor([[1., 2.]]).gather(1, Tensor([[-1]])).tolist(), "gather", "dimension 1", "size 2")


@pytest.mark.parametrize("make", [
  lambda x: x[1:, Tensor([4])],             # dimension 1 has size 4
  lambda x: x[Tensor([[0], [3]]), :2],      # dimension 0 has size 3
  lambda x: x[Tensor([0]), Tensor([-5])],
  lambda x: x[:, None, Tensor([-5, 1])],
  lambda x: x[::2, Tensor([9])],
  lambda x: x[..., Tensor([[4, 0]])],
], ids=["slice-then-index", "index-then-slice", "two-indices", "none-and-negative", "index-step-index", "ellipsis"])
def test_getitem_2d_out_of_range_raises(make):
  _raises(IndexError, lambda: make(Tensor(X)).numpy(), "is out of bounds for dimension", "with size")


@pytest.mark.parametrize("idx", [[-1], [-3, 2, 0, -2], [[0, -1], [1, -3]]])
def test_getitem_in_range_and_negative_matches_torch(idx):
  x = np.array([1., 2., 3.], dtype=np.float32)
  np.testing.assert_equal(Tensor(x)[Tensor(idx)].numpy(), torch.from_numpy(x)[torch.tensor(idx)].numpy())
  if all(isinstance(i, int) for i in idx):  # (a list of lists is one index per axis, as tinygrad)
    np.testing.assert_equal(Tensor(x)[idx].numpy(), x[idx])


@pytest.mark.parametrize("key", [
  lambda T: (slice(1, None), T([-1, 0, 3])), lambda T: (T([[-3], [2]]), slice(None, 2)), lambda T: (T([0, -1]), T([-4, 3])),
  lambda T: (slice(None), None, T([-2, 1])), lambda T: (T([2]), slice(None, None, 2)), lambda T: (Ellipsis, T([[3, -4]]))])
def test_getitem_2d_in_range_matches_numpy(key):
  k = key(Tensor)
  np.testing.assert_equal(Tensor(X)[k].numpy(), X[key(np.array)])


def test_index_dtypes_in_range_and_wide_values():
  x = Tensor([1., 2., 3.])
  assert x[Tensor([-1, 2], dtype=dtypes.int8)].tolist() == [3., 3.]
  assert x[Tensor([2, 0], dtype=dtypes.uint8)].tolist() == [3., 1.]
  big = np.arange(300, dtype=np.float32)
  assert Tensor(big)[Tensor([-1, -200], dtype=dtypes.int16)].tolist() == [299., 100.]  # -1 + 300 doesn't fit an int8
  _raises(IndexError, lambda: x[Tensor([3], dtype=dtypes.uint8)].tolist(), "index 3 is out of bounds")
  _raises(IndexError, lambda: x[Tensor([-4], dtype=dtypes.int8)].tolist(), "index -4 is out of bounds")


def test_int64_index_that_would_wrap_to_int32_raises():
  x = Tensor([1., 2., 3.])
  if dtypes.int64 not in getattr(Device[Device.DEFAULT].renderer, "missing_dtypes", ()):
    _raises(IndexError, lambda: x[Tensor([2**32 + 1], dtype=dtypes.int64)].tolist(), "out of bounds")  # not x[1]
  _raises(IndexError, lambda: x[np.array([2**32 + 1])], "out of bounds")


def test_host_indices_raise_at_once(monkeypatch):
  """A list or numpy array is known on the host: checked now, with no guard (as a Python int index)."""
  x = Tensor(X)
  _raises(IndexError, lambda: x[[0, 3]], "index 3 is out of bounds for dimension 0 with size 3")
  _raises(IndexError, lambda: x[:, np.array([-5])], "index -5 is out of bounds for dimension 1 with size 4")
  _raises(IndexError, lambda: x[[0], [7]], "index 7 is out of bounds for dimension 1 with size 4")
  guards = []
  monkeypatch.setattr(divcheck, "guard", lambda *a, **k: guards.append(a))
  np.testing.assert_equal(x[[0, -1], 1:].numpy(), X[[0, -1], 1:])
  np.testing.assert_equal(x[1:, -1].numpy(), X[1:, -1])
  np.testing.assert_equal(x[np.array([2, -3]), 0].numpy(), X[[2, -3], 0])
  assert not guards  # no guard (and no extra kernel) for host indices, ints or slices
  x[Tensor([0])]
  assert len(guards) == 2  # an index tensor: the result and its one-hot mask, one flag


def test_constant_index_tensor_raises_at_once():
  x = Tensor([1., 2., 3.])
  _raises(IndexError, lambda: x[Tensor.full((2,), 3, dtype=dtypes.int32)], "index 3 is out of bounds")
  assert x[Tensor.full((2,), -1, dtype=dtypes.int32)].tolist() == [3., 3.]


def test_empty_axis():
  x = Tensor.zeros(0, 2)
  assert x[Tensor.zeros(0, dtype=dtypes.int32)].shape == (0, 2)
  _raises(IndexError, lambda: x[Tensor([0])].numpy(), "index 0 is out of bounds for dimension 0 with size 0")


def test_setitem_out_of_range_raises_and_writes_nothing():
  t = Tensor([1., 2., 3.]).realize()
  with pytest.raises(IndexError):
    t[Tensor([0, 5])] = Tensor([9., 9.])
  assert t.tolist() == [1., 2., 3.]
  t[Tensor([0, -1])] = Tensor([7., 8.])
  assert t.tolist() == [7., 2., 8.]


def test_getitem_backward_in_range():
  x = Tensor([1., 2., 3.], requires_grad=True)
  x[Tensor([-1, 0, -1])].sum().backward()
  assert x.grad.tolist() == [1., 0., 2.]


# ---------- gather, take_along_dim ----------
@pytest.mark.parametrize("index, bad", [([[-1]], -1), ([[2]], 2), ([[0], [1]], None)])
def test_gather_out_of_range_raises(index, bad):
  x = Tensor([[1., 2.], [3., 4.]])
  if bad is None:
    assert x.gather(1, Tensor(index)).tolist() == torch.tensor([[1., 2.], [3., 4.]]).gather(1, torch.tensor(index)).tolist()
    return
  e = _raises(RuntimeError, lambda: x.gather(1, Tensor(index)).tolist(), "gather", f"index {bad} is out of bounds for dimension 1 with size 2")
  assert isinstance(e, IndexError)


def test_gather_matches_torch():
  rng = np.random.default_rng(0)
  x = rng.standard_normal((3, 5)).astype(np.float32)
  for d in (0, 1):
    idx = rng.integers(0, x.shape[d], size=(3, 4) if d == 1 else (2, 5))
    got = Tensor(x).gather(d, Tensor(idx.astype(np.int32))).numpy()  # (int32: a device may have no int64)
    np.testing.assert_equal(got, torch.from_numpy(x).gather(d, torch.from_numpy(idx)).numpy())


def test_take_along_dim_out_of_range_raises():
  x = Tensor([1., 2., 3.])
  _raises(RuntimeError, lambda: x.take_along_dim(Tensor([3])).tolist(), "out of bounds for dimension 0 with size 3")
  assert x.take_along_dim(Tensor([2, 0])).tolist() == [3., 1.]


# ---------- Embedding ----------
def test_embedding_out_of_range_raises():
  emb = Embedding(3, 2)
  w = emb.weight.numpy()
  np.testing.assert_equal(emb(Tensor([[0, 2], [1, 1]])).numpy(), w[[[0, 2], [1, 1]]])
  _raises(IndexError, lambda: emb(Tensor([[0, 3]])).numpy(), "index 3 is out of bounds for dimension 0 with size 3")


def test_embedding_negative_index_raises():
  # torch's Embedding takes no negative index (t[idx] does, and tg's Embedding read the last row for -1)
  with pytest.raises(IndexError):
    torch.nn.Embedding(3, 2)(torch.tensor([-1]))
  emb = Embedding(3, 2)
  _raises(IndexError, lambda: emb(Tensor([[0, -1]])).numpy(), "Embedding", "index -1 is out of bounds for dimension 0 with size 3")
  emb.weight.requires_grad = True
  emb(Tensor([2, -3])).sum().backward()  # the gradient alone is checked too
  _raises(IndexError, emb.weight.grad.numpy, "index -3")


def test_gradients_alone_are_checked():
  """A step that realizes only the gradients (loss.backward(); opt.step(), the loss never read) is checked as well:
  the backward pass reads the one-hot mask, which is guarded with the result."""
  emb = Embedding(3, 2)
  emb.weight.requires_grad = True
  emb(Tensor([[0, 3]])).sum().backward()
  _raises(IndexError, emb.weight.grad.numpy, "index 3 is out of bounds")
  x = Tensor([[1., 2.], [3., 4.]], requires_grad=True)
  x.gather(1, Tensor([[0], [2]])).sum().backward()
  _raises(RuntimeError, x.grad.numpy, "gather")
  logits = Tensor(np.zeros((2, 3), dtype=np.float32), requires_grad=True)
  logits.cross_entropy(Tensor([0, 3])).backward()
  _raises(IndexError, logits.grad.numpy, "Target 3 is out of bounds")
  ok = Tensor([[1., 2.], [3., 4.]], requires_grad=True)
  ok.gather(1, Tensor([[1], [0]])).sum().backward()
  assert ok.grad.tolist() == [[0., 1.], [1., 0.]]


# ---------- losses ----------
LOGITS = np.array([[1., 2., 3.], [0.5, -1., 2.], [0., 0., 1.]], dtype=np.float32)


@pytest.mark.parametrize("target", [[0, 3, 1], [0, -1, 2], [7, 0, 0]])
def test_cross_entropy_bad_target_raises(target):
  bad = next(t for t in target if not 0 <= t < 3)
  loss = Tensor(LOGITS).cross_entropy(Tensor(target))
  _raises(IndexError, loss.item, f"Target {bad} is out of bounds")
  _raises(IndexError, loss.item, f"Target {bad} is out of bounds")  # again: the loss read is not an answer
  _raises(IndexError, lambda: Tensor(LOGITS).log_softmax(1).nll_loss(Tensor(target), reduction="none").numpy(), "out of bounds")
  _raises(IndexError, lambda: Tensor(LOGITS).cross_entropy(Tensor(target), label_smoothing=0.1, reduction="sum").item(), "out of bounds")


def _torch_ce(target, **kw):
  return torch.nn.functional.cross_entropy(torch.from_numpy(LOGITS), torch.tensor(target), **kw).item()


@pytest.mark.parametrize("target, kw", [([0, -100, 2], {}), ([0, 5, 2], {"ignore_index": 5}), ([0, 1, 2], {}),
                                        ([-100, 1, -100], {"reduction": "none"}), ([2, -100, 0], {"label_smoothing": 0.2})])
def test_cross_entropy_ignore_index_still_works(target, kw):
  got = Tensor(LOGITS).cross_entropy(Tensor(target), **kw).numpy()
  want = torch.nn.functional.cross_entropy(torch.from_numpy(LOGITS), torch.tensor(target), **kw).numpy()
  np.testing.assert_allclose(got, want, rtol=1e-6)


def test_sparse_categorical_crossentropy():
  ok = Tensor(LOGITS).sparse_categorical_crossentropy(Tensor([0, -1, 2])).item()  # -1: the ignore_index
  np.testing.assert_allclose(ok, _torch_ce([0, -1, 2], ignore_index=-1), rtol=1e-6)
  _raises(IndexError, lambda: Tensor(LOGITS).sparse_categorical_crossentropy(Tensor([0, 3, 2])).item(), "Target 3 is out of bounds")
  _raises(IndexError, lambda: Tensor(LOGITS).sparse_categorical_crossentropy(Tensor([0, -2, 2])).item(), "Target -2 is out of bounds")


# ---------- after the error ----------
def test_process_goes_on_and_the_error_stays():
  x = Tensor([1., 2., 3.])
  bad = x[Tensor([1, 5])]
  _raises(IndexError, bad.tolist)
  _raises(IndexError, bad.tolist)  # reading the same result again raises again
  assert x[Tensor([1, -1])].tolist() == [2., 3.]  # a good one works and isn't blamed
  assert (x * 2).tolist() == [2., 4., 6.]
  assert x.tolist() == [1., 2., 3.]
  assert (Tensor([7, 8]) // Tensor([2, 4])).tolist() == [3, 2]


def test_unrelated_realize_is_not_blamed():
  bad = Tensor([1., 2.])[Tensor([2])]
  assert Tensor([1., 2.])[Tensor([1])].tolist() == [2.]
  _raises(IndexError, bad.realize)


def test_zero_division_and_index_errors_keep_their_classes():
  with pytest.raises(ZeroDivisionError):
    (Tensor([1, 2]) // Tensor([0, 1])).tolist()
  with pytest.raises(IndexError):
    Tensor([1, 2])[Tensor([2])].tolist()


# ---------- TinyJit ----------
def test_out_of_range_raises_on_jit_replay():
  """As division by zero: the guard's kernel is captured with the rest, and its flag read after every replay (the
  message then can't name the value: the inputs of the step are not kept)."""
  x = Tensor([1., 2., 3.]).realize()

  @TinyJit
  def f(idx: Tensor) -> Tensor:
    return (x[idx] * 2).realize()

  for _ in range(3):  # run, capture, replay
    assert f(Tensor([2, -1]).realize()).tolist() == [6., 6.]
  _raises(IndexError, lambda: f(Tensor([0, 3]).realize()), "out of bounds for dimension 0 with size 3")
  assert f(Tensor([-3, 1]).realize()).tolist() == [2., 4.]
  with pytest.raises(ZeroDivisionError):  # division guards keep their own error under the jit
    g = TinyJit(lambda a, b: (a // b).realize())
    for _ in range(3):
      g(Tensor([4]).realize(), Tensor([2]).realize())
    g(Tensor([4]).realize(), Tensor([0]).realize())


# ---------- index_select, index_add, index_copy, index_fill ----------
def test_index_ops_out_of_range_raise_as_torch():
  """An index matching nothing selected 0 or wrote nowhere. torch raises for each; index_fill alone counts negative
  indices from the end."""
  t = torch.from_numpy(X.copy())
  x = Tensor(X)
  src = np.ones((1, 4), dtype=np.float32)
  cases = {
    "index_select": lambda i: x.index_select(0, Tensor([i])),
    "index_add": lambda i: x.index_add(0, Tensor([i]), Tensor(src)),
    "index_copy": lambda i: x.index_copy(0, Tensor([i]), Tensor(src)),
    "index_fill": lambda i: x.index_fill(0, Tensor([i]), 7.0),
  }
  ref = {
    "index_select": lambda i: t.index_select(0, torch.tensor([i])),
    "index_add": lambda i: t.index_add(0, torch.tensor([i]), torch.from_numpy(src)),
    "index_copy": lambda i: t.index_copy(0, torch.tensor([i]), torch.from_numpy(src)),
    "index_fill": lambda i: t.index_fill(0, torch.tensor([i]), 7.0),
  }
  for name, op in cases.items():
    for i in (0, 2):
      np.testing.assert_equal(op(i).numpy(), ref[name](i).numpy(), err_msg=name)
    _raises(IndexError, op(3).numpy, "index 3 is out of bounds for dimension 0 with size 3")
    if name == "index_fill":
      np.testing.assert_equal(op(-1).numpy(), ref[name](-1).numpy())
      _raises(IndexError, op(-4).numpy, "index -4 is out of bounds")
    else:
      _raises(IndexError, op(-1).numpy, "index -1 is out of bounds", name)
  assert (x + 1).sum().item() == X.sum() + 12  # and the process goes on


# ---------- one_hot ----------
@pytest.mark.parametrize("vals, bad", [([0, 3], 3), ([-1, 1], -1), ([2, 7, -2], 7)])
def test_one_hot_out_of_range_raises(vals, bad):
  """torch.nn.functional.one_hot raises for a class outside [0, num_classes); here it raised nothing and gave a row of
  zeros. The losses' ignore_index rows still give zeros inside them (the losses check their targets themselves)."""
  with pytest.raises(RuntimeError):
    torch.nn.functional.one_hot(torch.tensor(vals), 3)
  _raises(IndexError, lambda: Tensor(vals).one_hot(3).numpy(), f"class {bad}", "num_classes=3")
  np.testing.assert_array_equal(Tensor([0, 2, 1]).one_hot(3).numpy(), np.eye(3, dtype=np.int32)[[0, 2, 1]])
  logits = Tensor([[1.0, 2.0, 3.0], [3.0, 1.0, 0.5]])
  want = torch.nn.functional.cross_entropy(torch.tensor(logits.numpy()), torch.tensor([-1, 2]), ignore_index=-1).item()
  assert logits.sparse_categorical_crossentropy(Tensor([-1, 2])).item() == pytest.approx(want, rel=1e-6)


def test_one_hot_takes_integers_only():
  with pytest.raises(TypeError, match="integer"):
    Tensor([1.0, 0.0]).one_hot(2)


# ---------- the check comes before the kernels that use the indices ----------
def _embedding_step():
  """An Embedding, its Adam, and a training step of it (loss.backward(); opt.step(), as tinygrad's)."""
  from tg.nn.optim import Adam
  emb = Embedding(5, 3)
  opt = Adam([emb.weight], lr=0.1)

  def step(tokens: Tensor) -> Tensor:
    opt.zero_grad()
    loss = (emb(tokens) ** 2).sum()
    loss.backward()
    opt.step()
    return loss.realize()
  return emb, opt, step


def _state(emb, opt):
  return [emb.weight.numpy().copy()] + [t.numpy().copy() for t in opt.m + opt.v]


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "TinyJit"])
def test_a_step_with_a_bad_index_changes_no_weight(jit):
  """A training step whose tokens are out of range raises before any of its kernels ran: the weights and the
  optimizer's moments are what they were (the guards' flags are computed and read first, in a schedule of their own;
  a TinyJit replay reads them where its capture did, between its kernels), and the next good step trains on."""
  emb, opt, step = _embedding_step()
  with Tensor.train():
    f = TinyJit(step) if jit else step
    for _ in range(3):
      f(Tensor([[0, 4], [2, 2]]).realize())
    before = _state(emb, opt)
    _raises(IndexError, lambda: f(Tensor([[0, 5], [2, 2]]).realize()), "out of bounds for dimension 0 with size 5")
    for got, want in zip(_state(emb, opt), before):
      np.testing.assert_array_equal(got, want)
    f(Tensor([[1, 3], [2, 2]]).realize())
    assert not np.array_equal(emb.weight.numpy(), before[0])


def test_a_failed_check_leaves_the_results_lazy():
  """The checked result is never computed from the bad indices: it stays lazy, and raises each time it is read."""
  x = Tensor([1., 2., 3.]).realize()
  y = x[Tensor([0, 3])] * 2
  _raises(IndexError, y.realize)
  assert y.lazydata.base.realized is None
  _raises(IndexError, y.numpy)
