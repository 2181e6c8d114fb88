"""Loop collapse: sums of a masked constant over a loop become a count; the numbers never change."""
from __future__ import annotations

import random

import numpy as np
import pytest

from tg import Device, Tensor
from tg.codegen.kernel import Kernel
from tg.codegen.loop_collapse import collapse_loops
from tg.codegen.uops import UOp, UOps
from tg.dtype import dtypes
from tg.engine.schedule import create_schedule
from tg.ops import BinaryOps, TernaryOps, UnaryOps, exec_alu

i32 = dtypes.int32


def _eval(u: UOp, env: dict[UOp, int]) -> int:
  if u in env:
    return env[u]
  if u.op is UOps.CONST:
    return u.arg  # type: ignore[no-any-return]
  if u.op is UOps.CAST:
    return _eval(u.src[0], env)
  if u.op is UOps.ALU:
    assert u.dtype is not None
    return exec_alu(u.arg, u.dtype, [_eval(s, env) for s in u.src])  # type: ignore[no-any-return]
  if u.op is UOps.REDUCE:  # brute force: run the loop
    r = u.src[1]
    return sum(_eval(u.src[0], {**env, r: i}) for i in range(_eval(r.src[0], env), _eval(r.src[1], env)))
  raise AssertionError(f"can't evaluate {u.op}")


def _cond(r: UOp, g: UOp, rnd: random.Random) -> UOp:
  k, c, b = rnd.choice([-5, -3, -2, -1, 1, 2, 4]), rnd.randint(-3, 3), rnd.randint(-20, 20)
  cmp = (r * k + g * c).lt(b) if rnd.random() < 0.7 else UOp.const(i32, b).lt(r * k + g * c)
  return cmp.alu(UnaryOps.NEG) if rnd.random() < 0.3 else cmp  # NEG of a bool is NOT


@pytest.mark.parametrize("seed", range(40))
def test_collapse_matches_the_loop(seed: int) -> None:
  rnd = random.Random(seed)
  g = UOp(UOps.SPECIAL, i32, (), ("gidx0", 0, 16))  # an index the sum doesn't loop over
  start, end = rnd.randint(-4, 3), rnd.randint(0, 12)
  r = UOp(UOps.RANGE, i32, (UOp.const(i32, start), UOp.const(i32, end)), (1000, True))
  terms = []
  for _ in range(rnd.randint(1, 3)):
    cond = _cond(r, g, rnd)
    if rnd.random() < 0.4:
      cond = cond.logical_and(_cond(r, g, rnd))
    terms.append(cond.alu(TernaryOps.WHERE, UOp.const(i32, rnd.randint(-3, 3)), UOp.const(i32, 0)))
  body = terms[0]
  for t in terms[1:]:
    body = body + t
  red = UOp(UOps.REDUCE, i32, (body, r), BinaryOps.ADD)
  sink = UOp(UOps.SINK, None, (red,))
  collapsed = collapse_loops(sink).src[0]
  assert not any(u.op is UOps.REDUCE for u in collapsed.toposort()), "this sum is collapsible"
  for gv in range(16):
    assert _eval(collapsed, {g: gv}) == _eval(red, {g: gv}), (seed, gv)


def _reduce_loops(t: Tensor) -> int:
  si = create_schedule([t.lazydata])[-1]
  k = Kernel(si.ast, Device[Device.DEFAULT].renderer).hand_coded_optimizations()
  return sum(1 for u in k.linearize() if u.op is UOps.RANGE and u.arg[1])


def _window_count(n: int) -> Tensor:
  """0..n-1 as a sum over a sliding window of a padded constant (tg's arange was this): row i of the window sees
  [0]*(n-1) + [1]*n shifted by i, so it holds i+1 ones."""
  length = 2 * n - 1
  x = Tensor.ones(n, dtype=dtypes.int32).pad(((n - 1, 0),))
  return x.reshape(1, length).expand(n, length).reshape(n * length).pad(((0, n),)).reshape(n, length + 1)[:, :n].sum(1) - 1


@pytest.mark.parametrize("n", [2, 5, 64, 200, 1000, 4097])
def test_arange_has_no_reduce_loop(n: int) -> None:
  np.testing.assert_equal(Tensor.arange(n).numpy(), np.arange(n))
  assert len(create_schedule([Tensor.arange(n).lazydata])) == 1 and _reduce_loops(Tensor.arange(n)) == 0
  np.testing.assert_equal(_window_count(min(n, 256)).numpy(), np.arange(min(n, 256)))
  assert _reduce_loops(_window_count(min(n, 256))) == 0


def test_masked_cumsums() -> None:
  np.testing.assert_equal(Tensor.ones(5, 7).cumsum(1).numpy(), np.ones((5, 7)).cumsum(1))
  np.testing.assert_equal(Tensor.ones(10).pad(((3, 2),)).cumsum().numpy(), np.pad(np.ones(10), (3, 2)).cumsum())
  np.testing.assert_equal(Tensor.full((4, 6), 3, dtype=dtypes.int32).pad(((1, 1), (2, 0))).cumsum(0).numpy(),
                          np.pad(np.full((4, 6), 3), ((1, 1), (2, 0))).cumsum(0))
  np.testing.assert_equal(Tensor.arange(3, 40, 3).numpy(), np.arange(3, 40, 3))
  np.testing.assert_equal(Tensor.arange(10, -7, -2).numpy(), np.arange(10, -7, -2))


def test_a_sum_of_data_keeps_its_loop() -> None:
  x = Tensor(np.arange(24, dtype=np.float32).reshape(4, 6)).realize()
  assert _reduce_loops(x.sum(1)) == 1
  np.testing.assert_equal(x.sum(1).numpy(), np.arange(24, dtype=np.float32).reshape(4, 6).sum(1))
