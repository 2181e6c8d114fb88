"""Integer division by zero as a Python ZeroDivisionError, checked lazily (as torch raises on CPU).

Kernels never trap: every renderer gives a defined value for x // 0 and x % 0 (0) and INT_MIN // -1 (INT_MIN).
The error is the Tensor's job, at no cost for float division and little for integer division:

- a divisor known now (a Python 0, or an unrealized constant 0) raises at once, in the Tensor op;
- a divisor that is a computed tensor gets a *guard*: a lazy bool scalar `(divisor == 0).any()` registered
  here against the result's LazyBuffer. When tensors are realized (`Tensor.realize`, `.numpy()`, `.item()`,
  ... all go through `tg.tensor._run`), `with_guards` walks the unrealized graph of the targets; the guards of
  division results found in it are realized in the same schedule (one tiny reduction each, fused by the
  scheduler where it can), and `check` reads their flags after the schedule ran and raises ZeroDivisionError
  if one is set. A guard whose division result is never realized is dropped with it (weak reference).
- A failed guard stays: reading the same division result again raises again.

Under TinyJit the guards' kernels are captured with the rest; `recording` collects the flag buffers the capture
checked, the jit keeps them out of its scratch memory, and `check_flags` reads them after every replay.
"""
from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from dataclasses import dataclass

from tg.device import Buffer
from tg.lazy import LazyBuffer

ERROR = "integer division or modulo by zero: a divisor tensor of //, % or idiv holds a 0"


@dataclass(eq=False)
class _Guard:
  result: weakref.ref[LazyBuffer]  # the division's result (a base)
  flag: LazyBuffer                 # bool scalar: any divisor element is 0
  failed: bool = False


_pending: list[_Guard] = []
_recorders: list[list[Buffer]] = []  # while a TinyJit captures: the flag buffers its checks read


def guard(result: LazyBuffer, divisor_is_zero_anywhere: LazyBuffer) -> None:
  """Register the check of one integer division whose divisor is a tensor."""
  flag = divisor_is_zero_anywhere
  if flag.is_unrealized_const():  # known now: no kernel needed
    if flag.const_value:
      raise ZeroDivisionError(ERROR)
    return
  _pending.append(_Guard(weakref.ref(result.base), flag))


def _graph_ids(targets: list[LazyBuffer]) -> set[int]:
  """ids of the bases the targets are computed from: themselves (realized or not) and their unrealized ancestors."""
  seen: set[int] = set()
  stack = [t.base for t in targets]
  while stack:
    b = stack.pop()
    if id(b) in seen:
      continue
    seen.add(id(b))
    if b.realized is None:
      stack.extend(s.base for s in b.srcs)
  return seen


def with_guards(targets: list[LazyBuffer]) -> tuple[list[LazyBuffer], list[_Guard]]:
  """The targets plus the flags of the guards of division results they depend on, and those guards. Free when
  no integer division with a tensor divisor is pending."""
  if not _pending:
    return targets, []
  _pending[:] = [g for g in _pending if g.result() is not None]
  ids = _graph_ids(targets)
  hit = [g for g in _pending if id(g.result()) in ids]
  flags = {id(g.flag): g.flag for g in hit if not g.failed and g.flag.base.realized is None}  # // and % share one
  return targets + list(flags.values()), hit


def check(hit: list[_Guard]) -> None:
  """After the schedule of `with_guards` ran: raise ZeroDivisionError if a divisor held a zero."""
  if not hit:
    return
  failed = False
  for g in hit:
    if _recorders and g.flag.base.buffer not in _recorders[-1]:
      _recorders[-1].append(g.flag.base.buffer)
    if not g.failed:
      g.failed = bool(g.flag.base.buffer.as_buffer()[0])
    failed |= g.failed
  ok = {id(g) for g in hit if not g.failed}
  _pending[:] = [g for g in _pending if id(g) not in ok]
  if failed:
    raise ZeroDivisionError(ERROR)


@contextlib.contextmanager
def recording() -> Iterator[list[Buffer]]:
  """Collect the flag buffers that the checks made inside the block read (TinyJit's capture)."""
  flags: list[Buffer] = []
  _recorders.append(flags)
  try:
    yield flags
  finally:
    _recorders.pop()


def check_flags(flags: list[Buffer]) -> None:
  """After a TinyJit replay, which ran the guards' kernels again: raise ZeroDivisionError if a divisor held a zero."""
  if any(f.as_buffer()[0] for f in flags):
    raise ZeroDivisionError(ERROR)
