"""Fuzzing the kernel optimizer (hypothesis): random opt sequences never change what a kernel computes.

A random small graph (elementwise with broadcasts, reductions over random axes of views that are flipped, padded,
shrunk or permuted, matmul-like sums, int reductions, half matmuls for the tensor core) is scheduled; its last kernel
runs unoptimized and then with a random sequence of opts (any op, any axis, any amount, valid or not). Each opt
either applies or raises KernelOptError, leaving the kernel as it was; the optimized kernel's numbers equal the
unoptimized kernel's and numpy's.

CI runs a bounded number of examples, derandomized when $CI is set. The larger run (examples per test):
  TG_FUZZ_EXAMPLES=2000 CACHEDB=/tmp/fuzz.db python -m pytest packages/tg-core/tests/reliability/test_fuzz_kernel_opts.py \\
    --tg-device CLANG -x -q
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from tg import Device, Tensor, dtypes
from tg.codegen.kernel import Kernel, KernelOptError, Opt, OptOps
from tg.device import is_dtype_supported
from tg.engine.realize import CompiledRunner
from tg.engine.schedule import create_schedule


def _settings(ci_examples: int) -> settings:
  return settings(max_examples=int(os.getenv("TG_FUZZ_EXAMPLES", "0")) or ci_examples, deadline=None, derandomize=bool(os.getenv("CI")),
                  database=None, phases=set(Phase) - {Phase.explain}, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


SETTINGS, SETTINGS_VALID = _settings(25), _settings(10)  # the file: about 13 s of CPU on CLANG with a cold compile cache
SIZES = st.integers(1, 17)
ALL_OPS = [OptOps.UPCAST, OptOps.UNROLL, OptOps.LOCAL, OptOps.GROUP, OptOps.GROUPTOP, OptOps.PADTO, OptOps.BLOCK, OptOps.NOLOCALS,
           OptOps.TC]


@dataclass(frozen=True)
class Case:
  """A graph to build: `kind` picks the builder, `shape` and `params` its sizes and choices, `seed` the data."""
  kind: str
  shape: tuple[int, ...]
  params: tuple[int, ...]
  seed: int

  def arrays(self) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(self.seed)
    a = rng.standard_normal(self.shape).astype(np.float32)
    b = rng.standard_normal(self.other_shape()).astype(np.float32)
    if self.kind == "int":
      a, b = (rng.integers(-9, 10, x.shape).astype(np.int32) for x in (a, b))
    if self.kind == "tc" and is_dtype_supported(dtypes.float16):  # without float16: the same matmul in float32
      a, b = a.astype(np.float16), b.astype(np.float16)
    return a, b

  def other_shape(self) -> tuple[int, ...]:
    if self.kind in ("matmul", "tc"):
      return (self.shape[-1], self.params[0])
    # a broadcast of the first: the axes in params' mask have size 1
    return tuple(1 if self.params[0] >> i & 1 else s for i, s in enumerate(self.shape))


def _view(x, how: int):  # type: ignore[no-untyped-def]
  """The same movement on a Tensor or an ndarray: none, flip, pad then shrink, shrink, permute (reversed axes)."""
  is_np = isinstance(x, np.ndarray)
  if how == 1:
    return np.flip(x, 0) if is_np else x.flip(0)
  if how == 2:  # pad by one on both sides of axis 0, then keep all but the first row: a masked view
    pads = [(1, 1)] + [(0, 0)] * (x.ndim - 1)
    y = np.pad(x, pads) if is_np else x.pad(pads)
    return y[1:] if is_np else y.shrink([(1, y.shape[0])] + [None] * (x.ndim - 1))
  if how == 3 and x.shape[-1] > 1:
    return x[..., 1:] if is_np else x.shrink([None] * (x.ndim - 1) + [(1, x.shape[-1])])
  if how == 4:
    order = tuple(reversed(range(x.ndim)))
    return np.transpose(x, order) if is_np else x.permute(order)
  return x


def _broadcasts(small: tuple[int, ...], big: tuple[int, ...]) -> bool:
  return len(small) == len(big) and all(s in (1, t) for s, t in zip(small, big))


def _graph(case: Case, a, b):  # type: ignore[no-untyped-def]
  """The case's graph on a and b, Tensors or ndarrays alike."""
  is_np = isinstance(a, np.ndarray)
  p = case.params
  if case.kind in ("matmul", "tc"):
    return [a @ b]
  if case.kind == "elementwise":
    x = _view(a, p[1])
    y = b if _broadcasts(b.shape, x.shape) else 0.5
    z = [x + y, x * y, np.maximum(x, y) if is_np else x.maximum(y), np.where(x < y, x, y * 2) if is_np else (x < y).where(x, y * 2)][p[2] % 4]
    return [z * 2 + 1]
  x = _view(a, p[1])
  axes = tuple(i for i in range(x.ndim) if p[3] >> i & 1) or (x.ndim - 1,)
  keep = bool(p[4])
  def red(op: str, z, keepdim: bool = keep):  # type: ignore[no-untyped-def]
    return getattr(z, op)(axis=axes, keepdims=keepdim) if is_np else getattr(z, op)(axes, keepdim=keepdim)
  if case.kind == "nested":  # a softmax's statistics: a reduce inside the other's input
    e = x - red("max", x, True)
    return [red("sum", np.exp(e) if is_np else e.exp())]
  if case.kind == "multi":  # two reductions of one input, realized together (one kernel with two stores, or two)
    return [red("sum", x * 2) + 1, red("max", x)]
  if case.kind == "const":  # a reduce of masked constants and an arange (no loads: loop collapse removes the loop)
    ones = np.ones(x.shape, np.float32) if is_np else Tensor.ones(*x.shape)
    pads = [(1, 2)] + [(0, 0)] * (x.ndim - 1)
    padded = np.pad(ones, pads) if is_np else ones.pad(pads)
    n = padded.shape[-1]
    z = padded * (np.arange(n, dtype=np.float32) if is_np else Tensor.arange(n).cast(dtypes.float32))
    return [red("sum", z)]
  # reductions ("reduce", "int"): sum or max of a (view of) a times b over the axes in mask p[3], keepdim p[4]
  z = x * (b if _broadcasts(b.shape, x.shape) else 0.5) if p[2] % 2 else x + 1
  return [red("max" if p[2] >= 2 else "sum", z) + 1]


@st.composite
def cases(draw: Callable) -> Case:  # type: ignore[type-arg]
  kind = draw(st.sampled_from(["elementwise", "reduce", "reduce", "matmul", "int", "tc", "nested", "multi", "const"]))
  seed = draw(st.integers(0, 2**16))
  if kind == "tc":  # sizes the tensor core tile (16 x 8 x 16) divides, small enough for the PYTHON emulator
    m, k, n = draw(st.sampled_from([16, 32])), draw(st.sampled_from([16, 32])), draw(st.sampled_from([8, 16]))
    return Case(kind, (m, k), (n,), seed)
  if kind == "matmul":
    return Case(kind, (draw(SIZES), draw(SIZES)), (draw(SIZES),), seed)
  shape = tuple(draw(st.lists(SIZES, min_size=1, max_size=4).filter(lambda s: int(np.prod(s)) <= 2048)))
  return Case(kind, shape, (draw(st.integers(0, 7)), draw(st.integers(0, 4)), draw(st.integers(0, 3)), draw(st.integers(0, 7)),
                            draw(st.integers(0, 1))), seed)


# an opt: its op, its axis (None for TC and NOLOCALS as the optimizer writes them; often out of range), its amount
# or ("fit", op, i, j): the op on axis i (modulo the kernel's axes, when applied) by the j-th divisor of its size (or 0),
# which gives far more opts that apply than drawing axis and amount blindly
AMOUNTS = st.sampled_from([0, 0, 1, 2, 2, 3, 4, 5, 8, 16, -2])
RawOpt = tuple[OptOps, int | None, int] | tuple[str, OptOps, int, int]
opts_strategy = st.lists(st.one_of(st.tuples(st.sampled_from(ALL_OPS), st.one_of(st.none(), st.integers(-1, 9)), AMOUNTS),
                                   st.tuples(st.just("fit"), st.sampled_from(ALL_OPS), st.integers(0, 9), st.integers(0, 9))), min_size=1, max_size=6)


def _resolve(k: Kernel, raw: RawOpt) -> Opt:
  if raw[0] != "fit":
    op, axis, amt = raw  # type: ignore[misc]
    return Opt(op, None, max(amt, 0) % 2) if op is OptOps.TC else Opt(op, axis, amt)  # TC names no axis; amt picks the core
  _, op, i, j = raw  # type: ignore[misc]
  if op in (OptOps.TC, OptOps.NOLOCALS) or not k.full_shape:  # a kernel of one scalar has no axis: any is out of range
    return Opt(op, None if op in (OptOps.TC, OptOps.NOLOCALS) else i, 0)
  axis = i % len(k.full_shape)
  size = k.full_shape[axis]
  amts = [0, 2, 3, 4, 8, 16] if op is OptOps.PADTO or not isinstance(size, int) else [0] + [d for d in range(2, size + 1) if size % d == 0]
  return Opt(op, axis, amts[j % len(amts)])


def _schedule(case: Case):  # type: ignore[no-untyped-def]
  """The schedule item of the case's last kernel, the kernels before it run (unoptimized)."""
  a, b = case.arrays()
  sched = create_schedule([o.lazydata for o in _graph(case, Tensor(a), Tensor(b))])
  for si in sched[:-1]:
    _run(Kernel(si.ast, Device[Device.DEFAULT].renderer), si)
  return sched[-1]


def _check_numpy(case: Case) -> None:
  """The case's graph realized as usual (the optimizer's heuristics) against numpy."""
  a, b = case.arrays()
  tol = 2e-2 if case.kind == "tc" else 1e-4
  for got, want in zip(_graph(case, Tensor(a), Tensor(b)), _graph(case, a.astype(np.float32), b.astype(np.float32))):
    want = np.asarray(want, np.float64)
    np.testing.assert_allclose(got.numpy(), want, rtol=tol, atol=tol * max(1.0, float(np.abs(want).max(initial=0))), err_msg=str(case))


def _run(k: Kernel, si) -> list[np.ndarray]:  # type: ignore[no-untyped-def]
  CompiledRunner(k.to_program())([b.ensure_allocated() for b in si.bufs], {})
  return [np.frombuffer(out.as_buffer(), dtype=out.dtype.np).astype(np.float64) for out in si.outputs]


def _assert_same(got: list[np.ndarray], want: list[np.ndarray], tol: float, msg: str) -> None:
  assert len(got) == len(want), msg
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, rtol=tol, atol=tol * max(1.0, float(np.abs(w).max(initial=0))), err_msg=msg)


def _state(k: Kernel) -> tuple:  # type: ignore[type-arg]
  return k.ast, k.kinds, tuple(k.applied_opts), k.tc


def _unoptimized(case: Case):  # type: ignore[no-untyped-def]
  """The last kernel's schedule item and its unoptimized outputs (the case checked against numpy first)."""
  _check_numpy(case)
  si = _schedule(case)
  return si, _run(Kernel(si.ast, Device[Device.DEFAULT].renderer), si)


def check_case(case: Case, raw_opts: list[RawOpt]) -> list[Opt]:
  si, base = _unoptimized(case)
  renderer = Device[Device.DEFAULT].renderer
  k = Kernel(si.ast, renderer)
  for raw in raw_opts:
    opt = _resolve(k, raw)
    before = _state(k)
    try:
      k.apply_opt(opt)
    except KernelOptError:
      assert _state(k) == before, f"a rejected {opt} changed the kernel"
  _assert_same(_run(k, si), base, 2e-2 if case.kind == "tc" else 1e-5, f"{case} {k.applied_opts}")
  # replaying the applied opts on a fresh kernel gives the same kernel
  assert _state(Kernel(si.ast, renderer).apply_opts(list(k.applied_opts))) == _state(k)
  return k.applied_opts


U, R, P, L, G, GT = OptOps.UPCAST, OptOps.UNROLL, OptOps.PADTO, OptOps.LOCAL, OptOps.GROUP, OptOps.GROUPTOP


# pinned cases, so that every backend's CI run covers each path whatever the random draws give
@example(Case("reduce", (1,), (0, 0, 0, 0, 0), 0), [("fit", U, 0, 0)])  # one scalar: no axes
@example(Case("tc", (16, 32), (8,), 1), [(OptOps.TC, None, 0), (U, 0, 2)])
@example(Case("reduce", (8, 12), (0, 0, 1, 2, 0), 2), [(GT, 1, 4), (L, 0, 2), (U, 0, 2)])
@example(Case("elementwise", (7, 5), (1, 2, 3, 0, 0), 3), [(P, 0, 4), (U, 0, 4), (P, 2, 8), (U, 2, 8)])
@example(Case("const", (5, 6), (0, 0, 0, 2, 1), 4), [(R, 1, 0), (U, 0, 2)])
@example(Case("nested", (4, 16), (0, 0, 0, 2, 0), 5), [(G, 1, 4), (U, 0, 2), (R, 3, 2)])
@example(Case("multi", (6, 9), (0, 4, 0, 2, 1), 6), [(R, 1, 3), (U, 0, 2), (OptOps.BLOCK, 0, 3)])
@example(Case("int", (9, 4), (1, 1, 3, 1, 0), 7), [(U, 1, 4), (R, 0, 3), (P, 0, 16)])
@example(Case("matmul", (17, 13), (11,), 8), [(P, 0, 4), (P, 1, 8), (U, 0, 4), (U, 1, 8), (R, 2, 0), (OptOps.BLOCK, 0, 2)])
@SETTINGS
@given(cases(), opts_strategy)
def test_random_opts_match_unoptimized(case: Case, raw_opts: list[RawOpt]) -> None:
  check_case(case, raw_opts)


def _valid_next(k: Kernel) -> list[Opt]:
  out = []
  for axis in range(len(k.full_shape)):
    for op in (OptOps.UPCAST, OptOps.UNROLL, OptOps.LOCAL, OptOps.GROUP, OptOps.GROUPTOP, OptOps.PADTO, OptOps.BLOCK):
      for amt in (0, 2, 3, 4, 5, 8, 16):
        o = Opt(op, axis, amt)
        c = k.copy()
        try:
          c.apply_opt(o)
        except KernelOptError:
          continue
        if op is not OptOps.PADTO or c.full_shape != k.full_shape:  # a PADTO that pads nothing is left out
          out.append(o)
  for o in (Opt(OptOps.TC, None, 0), Opt(OptOps.NOLOCALS)):
    try:
      k.copy().apply_opt(o)
      out.append(o)
    except KernelOptError:
      pass
  return out


@example(Case("reduce", (16, 3, 5), (2, 2, 1, 5, 1), 9), [3, 14, 15, 92, 65])
@SETTINGS_VALID
@given(cases(), st.lists(st.integers(0, 10**6), min_size=1, max_size=5))
def test_valid_opt_sequences_match_unoptimized(case: Case, picks: list[int]) -> None:
  """Unlike random opts, which are mostly rejected, each step here picks one of the opts valid at that point."""
  si, base = _unoptimized(case)
  k = Kernel(si.ast, Device[Device.DEFAULT].renderer)
  for p in picks:
    if not (valid := _valid_next(k)):
      break
    k.apply_opt(valid[p % len(valid)])
  _assert_same(_run(k, si), base, 2e-2 if case.kind == "tc" else 1e-5, f"{case} {k.applied_opts}")


def test_fuzzer_reaches_every_opt() -> None:
  """The strategies can produce kernels on which each op applies (a guard against a fuzzer that tests nothing)."""
  renderer = Device[Device.DEFAULT].renderer
  seen: set[OptOps] = set()
  # the tc case is 16 x 16 x 16: a whole number of tiles of every tensor core (CUDA's 16x8x16, AMD's 16x16x16, METAL's 8x8x8)
  for case in [Case("reduce", (8, 6), (0, 0, 0, 2, 0), 0), Case("matmul", (16, 16), (8,), 0), Case("tc", (16, 16), (16,), 0)]:
    si = _schedule(case)
    seen |= {o.op for o in _valid_next(Kernel(si.ast, renderer))}
  want = {OptOps.UPCAST, OptOps.UNROLL, OptOps.PADTO, OptOps.NOLOCALS}
  want |= {OptOps.LOCAL, OptOps.GROUP, OptOps.GROUPTOP} if renderer.has_local and renderer.global_ids else {OptOps.BLOCK}
  want |= {OptOps.TC} if renderer.tensor_cores and renderer.has_local else set()
  assert want <= seen, want - seen
