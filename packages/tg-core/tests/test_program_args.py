"""A program is called with exactly its buffer parameters (tg.renderer.Program): all of its schedule item's buffers,
parameter i being buffer i, also those the kernel never reads once folded. A device that checks its calls
(OpenCL's clSetKernelArg) must never see more arguments than the kernel has, nor fewer."""
from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from tg import Device, Tensor
from tg.codegen.kernel import Kernel
from tg.codegen.uops import UOps
from tg.engine.realize import CompiledRunner
from tg.engine.schedule import ScheduleItem, create_schedule
from tg.renderer import Program
from tg.renderer.cstyle import CStyleLanguage


def _item(t: Tensor) -> ScheduleItem:
  sched = create_schedule([t.lazydata])
  assert len(sched) == 1, f"expected one kernel (the inputs are realized), got {len(sched)}"
  return sched[0]


def _source_params(p: Program) -> int | None:
  """The number of buffer parameters in a C-family kernel's signature (None for other languages)."""
  if not isinstance(Device[Device.DEFAULT].renderer, CStyleLanguage):
    return None
  sig = p.src[p.src.index(f"{p.function_name}("):]
  # the list ends at the body's brace: a parameter may have parentheses of its own (MSL's [[buffer(0)]])
  return len(re.findall(r"\bdata\d+\b", sig[:sig.index(") {")]))


class _Strict:
  """A program wrapper that refuses a call whose buffers are not exactly the kernel's parameters, as OpenCL does."""

  def __init__(self, inner: Any, params: int) -> None:
    self.inner, self.params, self.calls = inner, params, 0

  def __call__(self, *bufs: Any, **kwargs: Any) -> Any:
    assert len(bufs) == self.params, f"called with {len(bufs)} buffers, the kernel has {self.params} parameters"
    self.calls += 1
    return self.inner(*bufs, **kwargs)


@pytest.mark.parametrize("cond", [True, False])
def test_unread_buffer_is_still_a_parameter(cond: bool) -> None:
  a, b = Tensor(np.arange(6, dtype=np.float32)), Tensor(np.full(6, 7, np.float32))
  t = Tensor.full((6,), cond).where(a, b)  # the condition folds: one of the two inputs is never read
  si = _item(t)
  k = Kernel(si.ast, Device[Device.DEFAULT].renderer)
  k.hand_coded_optimizations()
  p = k.to_program()
  loads = {u.src[0].arg for u in p.uops if u.op is UOps.LOAD and u.src[0].op is UOps.DEFINE_GLOBAL}
  assert len(loads) < len(si.bufs) - 1, f"the kernel should read fewer buffers than it has inputs: reads {loads}"
  assert p.buf_count == len(si.bufs) == len([u for u in p.uops if u.op is UOps.DEFINE_GLOBAL])
  assert _source_params(p) in (None, len(si.bufs)), p.src
  runner = CompiledRunner(p)
  runner.clprg = strict = _Strict(runner.clprg, p.buf_count)
  for buf in si.bufs:
    buf.ensure_allocated()
  runner(list(si.bufs), si.var_vals, wait=True)
  assert strict.calls == 1
  want = a.numpy() if cond else b.numpy()
  np.testing.assert_array_equal(np.frombuffer(si.bufs[0].as_buffer(), dtype=np.float32), want)


def test_wrong_number_of_buffers_is_refused_before_the_call() -> None:
  a = Tensor(np.arange(6, dtype=np.float32))
  si = _item(a + 1)
  k = Kernel(si.ast, Device[Device.DEFAULT].renderer)
  runner = CompiledRunner(k.to_program())
  runner.clprg = strict = _Strict(runner.clprg, runner.p.buf_count)
  for buf in si.bufs:
    buf.ensure_allocated()
  with pytest.raises(ValueError, match="2 buffer parameters, called with 3"):
    runner([*si.bufs, si.bufs[1]], {})
  assert strict.calls == 0
