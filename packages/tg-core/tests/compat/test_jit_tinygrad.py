"""TinyJit behaves as tinygrad 0.9.1's (issue 15): call 1 runs eagerly, call 2 captures, calls 3+ replay; unrealized
returns are realized in the capture; random ops draw new numbers on every replay; outputs with symbolic sizes come
back with this call's binding; input checks raise errors that are also AssertionErrors; long captures are split into
graph batches as tinygrad's JIT splits them. Numbers are checked against numpy and against the same function run
eagerly."""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tg import Device, GlobalCounters, Tensor, TinyJit, Variable
from tg.engine.jit import JitError, JitInputError
from tg.settings import Context
from tg.testing import second_instance

rng = np.random.default_rng(0)


def _arr(*shape: int) -> np.ndarray:
  return rng.standard_normal(shape).astype(np.float32)


# ---------- 1. call 1 eager, call 2 capture, calls 3+ replay ----------

def test_call_1_runs_eagerly_call_2_captures_later_calls_replay() -> None:
  calls: list[int] = []

  @TinyJit
  def f(a: Tensor, b: Tensor) -> Tensor:
    calls.append(1)
    return (a + b).realize()
  for i in range(5):
    x, y = _arr(4, 4), _arr(4, 4)
    np.testing.assert_allclose(f(Tensor(x), Tensor(y)).numpy(), x + y, rtol=1e-6)
    assert f.cnt == i + 1
    assert len(calls) == min(i + 1, 2), "the function runs on calls 1 and 2 only"
    assert len(f.jit_cache) == (0 if i == 0 else 1), "nothing is captured on call 1"


def test_a_function_that_launches_no_kernel_is_not_jitted() -> None:
  @TinyJit
  def f(a: Tensor) -> Tensor:
    return a
  x = Tensor(_arr(3)).realize()
  f(x)  # call 1 runs eagerly
  with pytest.raises(JitError, match="no kernel") as e:
    f(x)
  assert isinstance(e.value, AssertionError), "tinygrad's tests expect an AssertionError (\"didn't JIT anything\")"

  @TinyJit
  def g(a: Tensor, b: Tensor) -> None:
    return None
  with pytest.raises(AssertionError):
    for _ in range(3):
      g(Tensor(_arr(2)), Tensor(_arr(2)))


def test_tinyjit_inside_tinyjit_raises() -> None:
  @TinyJit
  def inner(t: Tensor) -> Tensor:
    return (t + 1).realize()

  @TinyJit
  def outer(t: Tensor) -> Tensor:
    return (inner(t) * 3).realize()
  with pytest.raises(RuntimeError, match="TinyJit inside another TinyJit is not supported"):
    outer(Tensor([1.0]))
  for i in range(4):  # the inner one still works on its own
    np.testing.assert_allclose(inner(Tensor([float(i)])).numpy(), [i + 1.0])


def test_jit_0_runs_the_function_every_call() -> None:
  calls: list[int] = []

  @TinyJit
  def f(a: Tensor) -> Tensor:
    calls.append(1)
    return (a * 2).realize()
  with Context(JIT=0):
    for i in range(4):
      np.testing.assert_allclose(f(Tensor([float(i)])).numpy(), [2.0 * i])
  assert len(calls) == 4 and f.jit_cache == []


def test_kernels_run_with_capturing_0_are_not_captured() -> None:
  scratch: list[Tensor] = []

  @TinyJit
  def f(a: Tensor) -> Tensor:
    with Context(CAPTURING=0):
      scratch.append(Tensor.zeros(4, 4).contiguous().realize())
    return (a + 1).realize()
  for i in range(4):
    np.testing.assert_allclose(f(Tensor([float(i)])).numpy(), [i + 1.0])
  assert len(f.jit_cache) == 1


# ---------- 2. unrealized returns ----------

_WRAPS: list[tuple[str, Callable[[Tensor], Any], Callable[[Any], Tensor]]] = [
  ("alone", lambda t: t, lambda r: r),
  ("list", lambda t: [t], lambda r: r[0]),
  ("tuple", lambda t: (t, 7), lambda r: r[0]),
  ("dict", lambda t: {"out": t}, lambda r: r["out"]),
]


@pytest.mark.parametrize("wrap,unwrap", [(w, u) for _, w, u in _WRAPS], ids=[n for n, _, _ in _WRAPS])
def test_unrealized_returns_are_realized_as_part_of_the_capture(wrap: Callable[[Tensor], Any], unwrap: Callable[[Any], Tensor]) -> None:
  @TinyJit
  def f(a: Tensor, b: Tensor) -> Any:
    return wrap(a * b + 1)
  for i in range(5):
    x, y = _arr(3, 4), _arr(3, 4)
    out = unwrap(f(Tensor(x), Tensor(y)))
    assert out.lazydata.base.realized is not None, f"call {i + 1} returned an unrealized tensor"
    np.testing.assert_allclose(out.numpy(), x * y + 1, rtol=1e-5, atol=1e-6)
  assert len(f.jit_cache) == 1


def test_unrealized_views_and_several_outputs() -> None:
  @TinyJit
  def f(a: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    s = a.exp()
    return s[1:3], (a * 2).realize(), s.sum(0)
  for _ in range(4):
    x = _arr(4, 3)
    v, d, t = f(Tensor(x))
    np.testing.assert_allclose(v.numpy(), np.exp(x)[1:3], rtol=1e-5)
    np.testing.assert_allclose(d.numpy(), x * 2, rtol=1e-6)
    np.testing.assert_allclose(t.numpy(), np.exp(x).sum(0), rtol=1e-5)


# ---------- 3. random numbers ----------

def _noisy(a: Tensor) -> Tensor:
  return (a + Tensor.rand(*a.shape)).realize()


def test_random_numbers_are_new_on_every_replay_and_follow_the_seed_as_eager() -> None:
  x = Tensor.zeros(64).contiguous().realize()
  Tensor.manual_seed(11)
  eager = [_noisy(x).numpy().copy() for _ in range(6)]
  Tensor.manual_seed(11)
  jf = TinyJit(_noisy)
  jit = [jf(x).numpy().copy() for _ in range(6)]
  assert len({o.tobytes() for o in jit}) == 6, "replays repeated their random numbers"
  for e, j in zip(eager, jit):
    assert 0 <= j.min() and j.max() < 1
    np.testing.assert_array_equal(j, e)


def test_manual_seed_after_the_capture_restarts_what_replays_draw() -> None:
  x = Tensor.zeros(32).contiguous().realize()
  jf = TinyJit(_noisy)
  Tensor.manual_seed(5)
  first = [jf(x).numpy().copy() for _ in range(4)]
  Tensor.manual_seed(5)
  again = [jf(x).numpy().copy() for _ in range(4)]  # all replays now
  for a, b in zip(first, again):
    np.testing.assert_array_equal(a, b)


def test_dropout_in_a_jitted_step_draws_a_new_mask_each_replay() -> None:
  ones = Tensor.ones(256).contiguous().realize()

  @TinyJit
  def step(a: Tensor) -> Tensor:
    with Tensor.train():
      return a.dropout(0.5)  # returned unrealized, too
  masks = [step(ones).numpy().copy() for _ in range(6)]
  assert len({m.tobytes() for m in masks}) == 6
  for m in masks:
    assert set(np.unique(m).tolist()) <= {0.0, 2.0} and 0.3 < (m > 0).mean() < 0.7


# ---------- 4. outputs with symbolic sizes ----------

def test_a_symbolic_output_has_the_shape_of_this_calls_binding() -> None:
  vi = Variable("i", 1, 10)

  @TinyJit
  def f(a: Tensor) -> Tensor:
    return (a * 2 + 1).realize()
  for n in [3, 5, 9, 2, 7, 9]:
    x = _arr(1, 1, n)
    out = f(Tensor(x).reshape(1, 1, vi.bind(n)))
    assert out.shape == (1, 1, vi.bind(n))
    np.testing.assert_allclose(out.reshape(1, 1, n).numpy(), x * 2 + 1, rtol=1e-6)


def test_kv_cache_read_up_to_a_bound_start_pos_argument() -> None:
  cache_np = _arr(10, 4)
  cache = Tensor(cache_np).realize()
  sp = Variable("start_pos", 1, 10)

  @TinyJit
  def f(q: Tensor, start_pos: Variable) -> tuple[Tensor, Tensor]:
    keys = cache.shrink(((0, start_pos), (0, 4)))
    return (keys * q).sum(0).realize(), (keys + 1).realize()
  for n in [2, 6, 3, 10, 1]:
    q = _arr(4)
    total, shifted = f(Tensor(q), sp.bind(n))
    np.testing.assert_allclose(total.numpy(), (cache_np[:n] * q).sum(0), rtol=1e-5, atol=1e-6)
    assert shifted.shape == (sp.bind(n), 4)
    np.testing.assert_allclose(shifted.reshape(n, 4).numpy(), cache_np[:n] + 1, rtol=1e-6)


def test_a_returned_view_at_start_pos_reads_this_calls_row() -> None:
  cache_np = _arr(10, 4)
  cache = Tensor(cache_np).realize()
  sp = Variable("start_pos", 0, 9)

  @TinyJit
  def f(q: Tensor, start_pos: Variable) -> tuple[Tensor, Tensor]:
    return (q * 2).realize(), cache.shrink(((start_pos, start_pos + 1), (0, 4)))  # a view: no kernel reads it
  for n in [1, 4, 0, 9, 5]:
    q = _arr(4)
    doubled, row = f(Tensor(q), sp.bind(n))
    np.testing.assert_allclose(doubled.numpy(), q * 2, rtol=1e-6)
    np.testing.assert_array_equal(row.numpy(), cache_np[n:n + 1])


def test_kv_cache_written_at_start_pos_inside_a_jitted_step() -> None:
  cache = Tensor.zeros(10, 4).contiguous().realize()
  ref = np.zeros((10, 4), np.float32)
  sp = Variable("start_pos", 0, 9)

  @TinyJit
  def step(x: Tensor, start_pos: Variable) -> tuple[Tensor, Tensor]:
    cache.shrink(((start_pos, start_pos + 1), (0, 4))).assign(x).realize()
    keys = cache.shrink(((0, start_pos + 1), (0, 4)))
    return keys.sum(0).realize(), keys
  for n in range(6):
    x = _arr(1, 4)
    ref[n] = x
    total, keys = step(Tensor(x), sp.bind(n))
    np.testing.assert_allclose(total.numpy(), ref[:n + 1].sum(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(keys.reshape(n + 1, 4).numpy(), ref[:n + 1])
  np.testing.assert_array_equal(cache.numpy(), ref)


def test_an_unbound_variable_argument_is_refused() -> None:
  @TinyJit
  def f(a: Tensor, n: Variable) -> Tensor:
    return (a * 2).realize()
  with pytest.raises(JitInputError, match="bind"):
    f(Tensor(_arr(3)), Variable("n", 1, 5))


# ---------- 5. inputs ----------

def test_data_copied_in_from_numpy_inside_the_function() -> None:
  @TinyJit
  def f(a: Tensor) -> Tensor:
    return a + Tensor([1.0, 2.0, 3.0])
  for _ in range(5):
    x = _arr(3)
    np.testing.assert_allclose(f(Tensor(x)).numpy(), x + [1, 2, 3], rtol=1e-6)


def test_data_made_from_python_inside_the_function_is_frozen_at_capture() -> None:
  seen = [0.0]

  @TinyJit
  def f(a: Tensor) -> Tensor:
    seen[0] += 1
    return (a + Tensor(np.full(3, seen[0], np.float32))).realize()
  outs = [f(Tensor(np.zeros(3, np.float32))).numpy()[0] for _ in range(4)]
  assert outs == [1.0, 2.0, 2.0, 2.0], "as in tinygrad, a replay doesn't run the Python that made the data"


def test_the_same_buffer_passed_twice_is_refused() -> None:
  @TinyJit
  def f(a: Tensor, b: Tensor) -> Tensor:
    return (a + b).realize()
  a = Tensor(_arr(4)).realize()
  with pytest.raises(JitInputError, match="same buffer") as e:
    f(a, a)
  assert isinstance(e.value, AssertionError)


def test_inputs_that_are_views_of_one_buffer() -> None:
  """tg copies a non-contiguous input to a buffer of its own each call, so two views of one buffer are two inputs
  (tinygrad refuses them as duplicates)."""
  @TinyJit
  def f(a: Tensor, b: Tensor) -> Tensor:
    return (a * b).realize()
  for _ in range(4):
    x = _arr(3, 4)
    t = Tensor(x).realize()
    left, right = t[:, :2], t[:, 2:]
    np.testing.assert_allclose(f(left, right).numpy(), x[:, :2] * x[:, 2:], rtol=1e-6)
    right.assign(Tensor.ones(3, 2)).realize()  # the views passed in are still views of t: not copies the jit swapped in
    np.testing.assert_array_equal(t.numpy()[:, 2:], np.ones((3, 2)))


@pytest.mark.parametrize("change", ["shape", "dtype", "device", "kwargs"])
def test_changed_inputs_raise_an_error_that_is_an_assertion_error(change: str) -> None:
  @TinyJit
  def f(a: Tensor, b: Tensor | None = None) -> Tensor:
    return (a * 2 + (0 if b is None else b)).realize()
  for _ in range(3):
    f(Tensor(_arr(4)))
  bad: dict[str, Callable[[], Tensor]] = {
    "shape": lambda: f(Tensor(_arr(5))),
    "dtype": lambda: f(Tensor(np.ones(4, np.int32))),
    "device": lambda: f(Tensor(_arr(4), device=second_instance())),
    "kwargs": lambda: f(Tensor(_arr(4)), b=Tensor(_arr(4))),
  }
  with pytest.raises(JitInputError, match="inputs changed") as e:
    bad[change]()
  assert isinstance(e.value, AssertionError) and isinstance(e.value, JitError)
  x = _arr(4)
  np.testing.assert_allclose(f(Tensor(x)).numpy(), x * 2, rtol=1e-6)  # and the jit goes on


@pytest.mark.parametrize("change", ["int", "float", "bool", "kwarg", "list", "tensor_in_list", "dropped", "added"])
def test_a_changed_python_argument_raises_instead_of_replaying_the_captured_value(change: str) -> None:
  """A non-tensor argument (a number, a flag, a list) is baked into the kernels at capture: tg replayed them whatever
  was passed (x * k gave x * 2 for every later k, as tinygrad does silently); a tensor inside a list is no input either
  (its captured buffer was read). Now a replay whose Python arguments differ from the capture's raises JitInputError;
  the same ones replay (NaN equal to NaN), and objects other than numbers, strings and containers are not compared."""
  @TinyJit
  def f(a: Tensor, k: Any = 2, flag: bool = True, extra: Any = None, **kw: Any) -> Tensor:
    k = k[0] if isinstance(k, list) else k
    return ((a * (k if not isinstance(k, Tensor) else k.item())) if flag else a).realize()
  x, model = Tensor(_arr(4)), object()
  same: dict[str, Callable[[], Tensor]] = {
    "int": lambda: f(x, 2), "float": lambda: f(x, 2.5), "bool": lambda: f(x, 2, True), "kwarg": lambda: f(x, k=3),
    "list": lambda: f(x, [3]), "tensor_in_list": lambda: f(x, 2, True, [t]), "dropped": lambda: f(x, 2, True, model),
    "added": lambda: f(x, 2),
  }
  bad: dict[str, Callable[[], Tensor]] = {
    "int": lambda: f(x, 3), "float": lambda: f(x, 2.25), "bool": lambda: f(x, 2, False), "kwarg": lambda: f(x, k=4),
    "list": lambda: f(x, [4]), "tensor_in_list": lambda: f(x, 2, True, [Tensor(_arr(4))]), "dropped": lambda: f(x, 2, True),
    "added": lambda: f(x, 2, True, 1.0),
  }
  t = Tensor(_arr(4))
  for _ in range(4):  # call 1, the capture, and replays with the same arguments
    out = same[change]().numpy()
  with pytest.raises(JitInputError, match="inputs changed") as e:
    bad[change]()
  assert isinstance(e.value, AssertionError)
  np.testing.assert_array_equal(same[change]().numpy(), out)  # and the jit goes on
  g = TinyJit(lambda a, v: (a * 2).realize())
  for _ in range(4):
    g(x, math.nan)  # NaN is the same argument as NaN


def test_the_capture_sets_the_inputs_replays_need() -> None:
  """As tinygrad: call 1 (eager) may have other shapes than call 2, which captures; replays must match call 2."""
  @TinyJit
  def f(a: Tensor) -> Tensor:
    return (a + 1).realize()
  for n in (4, 5, 5, 5):
    x = _arr(n)
    np.testing.assert_allclose(f(Tensor(x)).numpy(), x + 1, rtol=1e-6)
  with pytest.raises(JitInputError, match="inputs changed"):
    f(Tensor(_arr(4)))


# ---------- 6. symbolic sizes ----------

def _check_symbolic(f: Callable[..., Tensor], make: Callable[[int, Variable], tuple[list[np.ndarray], list[Tensor]]],
                    expect_shape: Callable[[int], tuple[int, ...]], kernels: int | None = None) -> None:
  """f jitted over inputs whose sizes come from Variable("i", 1, 10) bound to several n, against f run eagerly."""
  jf = TinyJit(f)
  vi = Variable("i", 1, 10)
  for n in [1, 3, 4, 2, 7, 10]:
    arrays, symbolic = make(n, vi.bind(n))
    out = jf(*symbolic)
    expected = f(*[Tensor(x) for x in arrays]).numpy()
    got = out.reshape(*expect_shape(n)).numpy() if any(not isinstance(s, int) for s in out.shape) else out.numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
  if kernels is not None:
    assert sum(len(getattr(ei.prg, "jit_cache", [ei])) for ei in jf.jit_cache) == kernels


def test_symbolic_elementwise() -> None:
  def make(n: int, v: Variable) -> tuple[list[np.ndarray], list[Tensor]]:
    a, b = _arr(3, n), _arr(3, n)
    return [a, b], [Tensor(a).reshape(3, v), Tensor(b).reshape(3, v)]
  _check_symbolic(lambda a, b: (a + b * 2).realize(), make, lambda n: (3, n), kernels=1)


def test_symbolic_matmul_then_a_kernel_without_symbols() -> None:
  def make(n: int, v: Variable) -> tuple[list[np.ndarray], list[Tensor]]:
    a, b = _arr(3, n), _arr(n, 5)
    return [a, b], [Tensor(a).reshape(3, v), Tensor(b).reshape(v, 5)]

  def f(a: Tensor, b: Tensor) -> Tensor:
    s = (a @ b).realize()
    return (s + s).realize()
  _check_symbolic(f, make, lambda n: (3, 5), kernels=2)


def test_symbolic_attention() -> None:
  q_np = _arr(2, 1, 4, 8)

  def make(n: int, v: Variable) -> tuple[list[np.ndarray], list[Tensor]]:
    k, val = _arr(2, n, 4, 8), _arr(2, n, 4, 8)
    return [q_np, k, val], [Tensor(q_np), Tensor(k).reshape(2, v, 4, 8), Tensor(val).reshape(2, v, 4, 8)]

  def f(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    return Tensor.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).realize()
  _check_symbolic(f, make, lambda n: (2, 4, 1, 8))


def test_symbolic_cat() -> None:
  def make(n: int, v: Variable) -> tuple[list[np.ndarray], list[Tensor]]:
    a, b = _arr(n, 3), _arr(2, 3)
    return [a, b], [Tensor(a).reshape(v, 3), Tensor(b)]
  _check_symbolic(lambda a, b: a.cat(b, dim=0).realize(), make, lambda n: (n + 2, 3))


def test_symbolic_mean_and_var() -> None:
  def make(n: int, v: Variable) -> tuple[list[np.ndarray], list[Tensor]]:
    a = _arr(3, n)
    return [a], [Tensor(a).reshape(3, v)]
  _check_symbolic(lambda a: a.mean(1).realize(), make, lambda n: (3,))
  _check_symbolic(lambda a: a.var().realize(), make, lambda n: ())


def test_symbolic_reshape_inside_the_function() -> None:
  def make(n: int, v: Variable) -> tuple[list[np.ndarray], list[Tensor]]:
    a = _arr(3, n)
    return [a], [Tensor(a).reshape(3, v)]
  _check_symbolic(lambda a: (a.reshape(a.shape[1], 3) * 2).realize(), make, lambda n: (n, 3))


# ---------- 7. graph batches ----------

def _long_chain(a: Tensor, b: Tensor, c: Tensor) -> Tensor:
  for _ in range(80):
    a = (a + b).realize()
  return (a * c).realize()  # 81 kernels


def _run_long_chain() -> TinyJit[Tensor]:
  x, y, z = _arr(10), _arr(10), _arr(10)
  ref = x.copy()
  for _ in range(80):
    ref = ref + y
  jf = TinyJit(_long_chain)
  for _ in range(4):
    np.testing.assert_allclose(jf(Tensor(x), Tensor(y), Tensor(z)).numpy(), ref * z, rtol=1e-4, atol=1e-4)
  return jf


def _batches(jf: TinyJit[Any]) -> list[int]:
  graph = Device[Device.DEFAULT].graph
  assert graph is not None
  assert all(isinstance(ei.prg, graph) for ei in jf.jit_cache)
  return [len(ei.prg.jit_cache) for ei in jf.jit_cache]


@pytest.mark.skipif(Device[Device.DEFAULT].graph is None, reason="the device has no graph to batch kernels into")
def test_long_captures_are_split_into_graph_batches() -> None:
  jf = _run_long_chain()
  assert _batches(jf) == [32, 49], "JIT_BATCH_SIZE (32) kernels, then twice as many, as tinygrad's JIT"
  with Context(JIT_BATCH_SIZE=4):
    jf = _run_long_chain()
  assert _batches(jf) == [4, 8, 16, 32, 21]
  GlobalCounters.reset()
  jf(Tensor(_arr(10)), Tensor(_arr(10)), Tensor(_arr(10)))
  assert GlobalCounters.kernel_count == 81


@pytest.mark.skipif(Device[Device.DEFAULT].graph is None, reason="the device has no graph")
def test_a_single_kernel_is_not_graphed() -> None:
  @TinyJit
  def f(a: Tensor) -> Tensor:
    return (a * 3).realize()
  for _ in range(3):
    f(Tensor(_arr(4)))
  assert len(f.jit_cache) == 1 and f.graph is None


@pytest.mark.skipif(Device[Device.DEFAULT].graph is None, reason="the device has no graph")
def test_jit_graph_0_replays_kernel_by_kernel() -> None:
  with Context(JIT_GRAPH=0):
    jf = _run_long_chain()
  assert len(jf.jit_cache) == 81 and jf.graph is None
