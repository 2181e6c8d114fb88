"""Lazy checks of values that live on the device: integer division by zero as a Python ZeroDivisionError (as torch
raises on CPU), and index tensors out of range as an IndexError (tg.tensor_index: t[idx], gather, Embedding, the
cross-entropy targets).

Kernels never trap: every renderer gives a defined value for x // 0 and x % 0 (0) and INT_MIN // -1 (INT_MIN), and an
index that matches nothing selects 0. The error is the Tensor's job, at no cost for float division and little for
integer division and tensor indices:

- a value known now (a Python 0 divisor, an unrealized constant, a list of indices) raises at once, in the Tensor op;
- a computed tensor gets a *guard*: a lazy bool scalar (`(divisor == 0).any()`, `((idx < -n) | (idx >= n)).any()`)
  registered here against the result's LazyBuffer, with the error to raise. When tensors are realized
  (`Tensor.realize`, `.numpy()`, `.item()`, ... all go through `tg.tensor._run`), `with_guards` walks the unrealized
  graph of the targets; the flags of the guards of results found in it are realized first, in a schedule of their own
  (one tiny reduction each), and `check` reads them and raises the error of the first one set (built by the guard's
  `error`, given the offending value its `detail` computes then, on the failure path only), before the targets are
  scheduled. A guard whose result is never realized is dropped with it (weak reference).
- A failed guard stays: reading the same result again raises again.

The flags are realized and read before the guarded results are (`tg.tensor._run`: two schedules), so a failed check
raises before any kernel that uses the bad value ran: the results stay lazy, and a training step updates no weight.
Under TinyJit the guards' kernels are captured with the rest; `recording` collects the flag buffers the capture
checked (with their errors, and after how many kernels), the jit keeps them out of its scratch memory and ends a
graph batch there, and `check_flags` reads them at that point of every replay (the error then names no value: the
step's inputs are not kept).
"""
from __future__ import annotations

import contextlib
import struct
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from tg.device import Buffer
from tg.lazy import LazyBuffer

ERROR = "integer division or modulo by zero: a divisor tensor of //, % or idiv holds a 0"

# builds a failed guard's exception, given an offending value (None where it isn't known: after a TinyJit replay)
ErrorFn = Callable[[int | None], BaseException]


def _zero_division(value: int | None) -> BaseException:
  return ZeroDivisionError(ERROR)


@dataclass(eq=False)
class _Guard:
  result: weakref.ref[LazyBuffer]  # the guarded op's result (a base)
  flag: LazyBuffer                 # bool scalar: the check failed (a divisor element is 0, an index is out of range)
  error: ErrorFn = _zero_division
  detail: Callable[[], LazyBuffer] | None = None  # builds a scalar: an offending value (the failure path only)
  failed: bool = False
  value: int | None = None         # the offending value, once failed


class Checks(list[Buffer]):
  """The flag buffers a TinyJit capture checked, with the error of each (keyed by id: the list holds the buffers) and
  where it was checked: after how many of the capture's kernels (`position` counts them)."""
  def __init__(self, position: Callable[[], int]) -> None:
    super().__init__()
    self.errors: dict[int, ErrorFn] = {}
    self.position = position
    self.at: dict[int, list[Buffer]] = {}  # kernels run before the check -> the flags it read

  def note(self, flag: Buffer, error: ErrorFn) -> None:
    self.append(flag)
    self.errors[id(flag)] = error
    self.at.setdefault(self.position(), []).append(flag)


_pending: list[_Guard] = []
_recorders: list[Checks] = []  # while a TinyJit captures: the flag buffers its checks read


def guard(result: LazyBuffer, flag: LazyBuffer, error: ErrorFn = _zero_division, detail: Callable[[], LazyBuffer] | None = None) -> None:
  """Register a check of `result`: realizing it raises `error` if the bool scalar `flag` is True (an integer division's
  divisor holds a 0: the default error; an index is out of range). `detail` builds a scalar naming an offending
  value for the message, only once the check failed."""
  if flag.is_unrealized_const():  # known now: no kernel needed
    if flag.const_value:
      raise error(None if detail is None else _read_value(detail()))
    return
  _pending.append(_Guard(weakref.ref(result.base), flag, error, detail))


def _read_value(lb: LazyBuffer) -> int:
  """The value of an int scalar, computed now without the guards' checks (they are the ones raising)."""
  if lb.is_unrealized_const():
    return int(lb.const_value)
  from tg.engine.realize import realize_lazybuffers  # (the error path only; tg.engine imports this module)
  if lb.base is not lb or not lb.st.contiguous:
    lb = lb.contiguous()
  realize_lazybuffers([lb])
  assert lb.dtype.fmt is not None
  return int(struct.unpack_from(lb.dtype.fmt, lb.base.buffer.as_buffer())[0])


def _reached(targets: list[LazyBuffer], wanted: set[int]) -> set[int]:
  """Which of the bases `wanted` (by id) the targets are computed from (themselves, realized or not, and their
  unrealized ancestors). The walk ends once all are found: a training step's one pending guard (its loss's class
  targets) is near the loss, and walking on through the whole backward graph cost 0.3 ms a step."""
  seen: set[int] = set()
  found: set[int] = set()
  stack = [t.base for t in reversed(targets)]  # the first target first (a step's loss, before the optimizer's updates)
  while stack:
    b = stack.pop()
    if (i := id(b)) in seen:
      continue
    seen.add(i)
    if i in wanted:
      found.add(i)
      if len(found) == len(wanted):
        break
    if b.realized is None:
      stack.extend(s.base for s in b.srcs)
  return found


def with_guards(targets: list[LazyBuffer]) -> tuple[list[LazyBuffer], list[_Guard]]:
  """The flags still to compute of the guards of results the targets depend on, and those guards. Free when no
  guard is pending."""
  if not _pending:
    return [], []
  _pending[:] = [g for g in _pending if g.result() is not None]
  if not _pending:
    return [], []
  ids = _reached(targets, {id(g.result()) for g in _pending})
  hit = [g for g in _pending if id(g.result()) in ids]
  flags = {id(g.flag): g.flag for g in hit if not g.failed and g.flag.base.realized is None}  # // and % share one
  return list(flags.values()), hit


def check(hit: list[_Guard], targets: list[LazyBuffer] | None = None) -> None:
  """Once the flags of `with_guards` are realized, before the guarded results are: raise the error of the first failed
  guard (a divisor held a zero, an index was out of range), after cancelling the in-place assigns of `targets`."""
  if not hit:
    return
  new = []
  for g in hit:
    if _recorders and g.flag.base.buffer not in _recorders[-1]:
      _recorders[-1].note(g.flag.base.buffer, g.error)
    if not g.failed:
      g.failed = bool(g.flag.base.buffer.as_buffer()[0])
      if g.failed:
        new.append(g)
  ok = {id(g) for g in hit if not g.failed}
  _pending[:] = [g for g in _pending if id(g) not in ok]
  values: dict[int, int] = {}  # of each flag: guards that share one (an op's value and its mask) share the value
  for g in new:  # after the bookkeeping: computing the value runs a kernel, which may fail in its turn
    if g.detail is not None:
      if id(g.flag) not in values:
        values[id(g.flag)] = _read_value(g.detail())
      g.value, g.detail = values[id(g.flag)], None  # (dropping what the detail holds: the index tensor)
  if (first := next((g for g in hit if g.failed), None)) is not None:
    if targets is not None:
      _cancel_assigns(targets)
    raise first.error(first.value)


def _cancel_assigns(targets: list[LazyBuffer]) -> None:
  """A failed check cancels the realize that met it as a whole, as torch's step stops at the bad index: each in-place
  assign in the targets' graph whose target holds its value (an optimizer's parameters and moments, its step count)
  is dropped, and its tensor keeps that value (no kernel of the realize ran). What else the targets are computed from
  stays lazy, and raises again where it depends on the failed check."""
  from tg.interrupts import hold_sigint  # (the failure path only)
  from tg.ops import MetaOps
  seen: set[int] = set()
  stack = [t.base for t in targets]
  with hold_sigint():  # an assign is dropped whole or not at all
    while stack:
      b = stack.pop()
      if id(b) in seen or b.op is None:
        continue
      seen.add(id(b))
      stack.extend(s.base for s in b.srcs)
      if b.op is MetaOps.ASSIGN and b.srcs[1].base.realized is not None:
        b.op, b.srcs = None, ()  # its buffer is its target's: realized, with the value it had


def check_read(lb: LazyBuffer) -> None:
  """Before the data of a realized tensor is read: raise again if it is the result of a failed guard (its values are
  the kernels' defined stand-ins, not an answer)."""
  g = next((g for g in _pending if g.failed and g.result() is lb.base), None)
  if g is not None:
    raise g.error(g.value)


@contextlib.contextmanager
def recording(position: Callable[[], int]) -> Iterator[Checks]:
  """Collect the flag buffers that the checks made inside the block read, their errors, and where each was read:
  after `position()` kernels of the capture (TinyJit's)."""
  flags = Checks(position)
  _recorders.append(flags)
  try:
    yield flags
  finally:
    _recorders.pop()


def check_flags(flags: list[Buffer], errors: dict[int, ErrorFn]) -> None:
  """Where a TinyJit replay reaches a check of its capture, its guards' kernels run again: raise the error of the first
  flag set."""
  for f in flags:
    if f.as_buffer()[0]:
      raise errors.get(id(f), _zero_division)(None)
