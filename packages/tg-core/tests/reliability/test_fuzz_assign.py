"""Fuzzing in-place assigns (hypothesis): random programs of whole assigns into a few buffers, each new value an
elementwise mix of the buffers' current values (some read through a flip, some old values kept by a later reader),
realized together in one schedule, give numpy's numbers. This is what the scheduler may merge into one kernel of
several outputs (NEST_ASSIGN: an optimizer's moments and parameter) or must keep apart and order (a read at another
element, an old value read after the write). Each program runs with the merging on and off: the same numbers, or
the same refusal (a value that needs a buffer both before and after an assign overwrites it is an error, as in
tinygrad).

CI runs a bounded number of examples, derandomized when $CI is set. The larger run:
  TG_FUZZ_EXAMPLES=1000 python -m pytest packages/tg-core/tests/reliability/test_fuzz_assign.py --tg-device CLANG -x -q
"""
from __future__ import annotations

import os

import numpy as np
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

from tg import Device, Tensor
from tg.helpers import Context

EXAMPLES = int(os.getenv("TG_FUZZ_EXAMPLES", "0")) or (30 if Device.DEFAULT == "PYTHON" else 40)
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=bool(os.getenv("CI")), database=None,
                    phases=set(Phase) - {Phase.explain}, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
CYCLE = "the schedule has a cycle"

# one assign: (a's buffer, a flipped?, b's buffer, b flipped?, constant, kind, target buffer, keep the target's old value?)
Step = tuple[int, bool, int, bool, float, str, int, bool]


def _run(steps: list[Step], start: list[np.ndarray], nest: int) -> str | None:
  """Run the program with NEST_ASSIGN=nest and check every value against numpy; the refusal's message, if refused."""
  now = [x.copy() for x in start]
  with Context(NEST_ASSIGN=nest):
    ts = [Tensor(x.copy()).realize() for x in now]
    kept: list[tuple[Tensor, np.ndarray]] = []  # old values a later reader holds
    for ja, fa, jb, fb, c, kind, i, keep in steps:
      a, an = (ts[ja].flip(0), now[ja][::-1]) if fa else (ts[ja], now[ja])
      b, bn = (ts[jb].flip(0), now[jb][::-1]) if fb else (ts[jb], now[jb])
      if kind == "mix":
        value, vn = a * c + b, an * np.float32(c) + bn
      elif kind == "mul":
        value, vn = a * b + c, an * bn + np.float32(c)
      else:
        value, vn = (a * a + 1.0).sqrt() - b, np.sqrt(an * an + np.float32(1.0)) - bn
      if keep:
        kept.append((ts[i] * 1, now[i].copy()))  # (x * 1 is x itself: the value before this assign)
      ts[i].assign(value)
      now[i] = vn.astype(np.float32)
    try:
      Tensor.realize_all(*ts, *(t for t, _ in kept))
    except RuntimeError as e:
      if CYCLE not in str(e):
        raise
      return str(e)
    for t, want in [*zip(ts, now), *kept]:
      np.testing.assert_allclose(t.numpy(), want, rtol=1e-5, atol=1e-5)
  return None


@SETTINGS
@given(st.data())
def test_random_assign_programs_match_numpy(data: st.DataObject) -> None:
  draw = data.draw
  n = draw(st.sampled_from([4, 8, 12]), label="length")
  k = draw(st.integers(2, 4), label="buffers")
  rng = np.random.default_rng(draw(st.integers(0, 2**16), label="seed"))
  start = [rng.uniform(-2, 2, n).astype(np.float32) for _ in range(k)]
  buf = st.integers(0, k - 1)
  step = st.tuples(buf, st.booleans(), buf, st.booleans(), st.sampled_from([0.5, -1.0, 2.0]), st.sampled_from(["mix", "mul", "sqrt"]),
                   buf, st.integers(0, 3).map(lambda x: x == 0))
  steps = draw(st.lists(step, min_size=1, max_size=6), label="assigns")
  merged, apart = _run(steps, start, 1), _run(steps, start, 0)
  event("refused (a cycle)" if apart else "computed")
  assert merged == apart, f"NEST_ASSIGN=1: {merged}; NEST_ASSIGN=0: {apart}"
