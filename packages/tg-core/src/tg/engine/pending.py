"""Scheduled work not run yet, so that a failed realize leaves nothing that looks computed but isn't.

create_schedule drops the graph of every base it schedules: from then on the schedule is the only recipe for the
value. A `PendingWork` holds those ScheduleItems in order, and each buffer an item writes points to it
(`Buffer.pending`) until the last item writing it ran; a LazyBuffer counts as realized only then
(LazyBuffer.realized). When a run fails (a MemoryError from the allocator, a compile error, a kernel that raises,
Ctrl-C), the items that didn't run stay in their PendingWork: a tensor whose buffer they write is still to compute,
and the next schedule that reads it (or overwrites something they read, an in-place assign) first runs the items it
needs (`settle`). Items are run in their order, and an item that shares memory with a needed one (it writes what
the needed one reads or writes, or reads what it writes: the memory planner lets buffers take turns in one
allocation) runs too, so the items run later see the memory as the full run would have.

An item counts as run once its program returned: a program that raises is taken as not having written anything.
Ctrl-C (SIGINT) is held back while a program runs and its buffers are marked, and raised right after, so an
in-place assign ends at its old value (still to do) or its new one (done), never half or twice applied.
"""
from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from tg.device import Buffer
from tg.engine.memory import root
from tg.interrupts import hold_sigint

if TYPE_CHECKING:
  from tg.engine.schedule import ScheduleItem

# the PendingWorks that still have items; weak: a PendingWork nobody can read from any more (its tensors are gone)
# is garbage, not debt
_open: weakref.WeakSet[PendingWork] = weakref.WeakSet()


def has_open() -> bool:
  """Whether some scheduled work is still to run (a run failed part way, or a schedule was made and not run)."""
  return bool(_open)


class Work(Protocol):
  """What a PendingWork holds: a ScheduleItem, or the rest of a TinyJit replay that failed part way (engine/jit.py)."""
  @property
  def outputs(self) -> Sequence[Buffer]: ...
  @property
  def bufs(self) -> Sequence[Buffer]: ...


class PendingWork:
  """Work items still to run, in order; the buffers they write are pending on it. `lower` gives what runs an item
  (by default a ScheduleItem's compiled program, realize.lower_to_run)."""

  def __init__(self, items: Iterable[Work], lower: Callable[[Any], Callable[[], object]] | None = None) -> None:
    self.items: list[Work] = list(items)
    self.lower = lower
    self.writes: dict[Buffer, int] = {}  # buffer -> how many of the items write it
    for si in self.items:
      self._mark(si)
    if self.items:
      _open.add(self)

  def _mark(self, si: Work) -> None:
    for b in si.outputs:
      b.pending = self
      self.writes[b] = self.writes.get(b, 0) + 1

  def add(self, si: Work, before: Work) -> None:
    """One more item, right before `before`; its outputs are pending from now on."""
    self.items.insert(next(i for i, x in enumerate(self.items) if x is before), si)
    self._mark(si)

  def _done(self, si: Work) -> None:
    for b in si.outputs:
      if (n := self.writes.get(b, 0) - 1) > 0:
        self.writes[b] = n
        continue
      self.writes.pop(b, None)
      if b.pending is self:
        b.pending = None

  def take(self, items: Iterable[Work]) -> None:
    """Hand `items` over to another PendingWork (run_schedule's, after memory planning): they are not ours any more."""
    ids = {id(si) for si in items}
    for si in self.items:
      if id(si) in ids:
        self._done(si)
    self._remove(ids)

  def _remove(self, ids: set[int]) -> None:
    self.items = [si for si in self.items if id(si) not in ids]
    if not self.items:
      _open.discard(self)

  def finished(self, si: Work) -> None:
    """`si`, one of ours, ran (elsewhere than `run`: engine/streams.py): it is done."""
    self._done(si)
    self._remove({id(si)})

  def needed(self, read: set[Buffer], written: set[Buffer]) -> list[Work]:
    """The items that must run before something reads the memory of `read` and writes that of `written` (roots):
    those writing what is read or written, reading what is written, and, back to front, those each of them needs."""
    read, written = set(read), set(written)
    out: list[Work] = []
    for si in reversed(self.items):
      outs = {root(b) for b in si.outputs}
      ins = {root(b) for b in si.bufs[len(si.outputs):]}
      if outs & (read | written) or ins & written:
        out.append(si)
        read |= ins
        written |= outs
    return out[::-1]

  def run(self, items: list[Work], lower: Callable[[Any], Callable[[], object]]) -> None:
    """Run `items` (ours, in our order): `lower` compiles one and returns what runs it; each item whose run returned
    is done. Stops at the first that raises, which stays to do with the rest."""
    ran: set[int] = set()
    try:
      for si in items:
        go = lower(si)  # compiling (BEAM search, say) may take long: Ctrl-C stops it at once
        with hold_sigint():
          go()
          self._done(si)
          ran.add(id(si))
    finally:
      self._remove(ran)


def adopt(schedule: list[ScheduleItem], planned: list[ScheduleItem]) -> PendingWork:
  """The PendingWork of `planned`, the memory-planned copy of `schedule`, taking `schedule`'s items from the
  PendingWork create_schedule made for them (with Ctrl-C held: no buffer is without its work in between)."""
  with hold_sigint():
    owners = {id(w): w for si in schedule for b in si.outputs if (w := b.pending) is not None}
    if len(owners) == 1 and _same((mine := next(iter(owners.values()))).items, schedule):  # the usual case: swap in the planned items
      for old, new in zip(schedule, planned):
        if old is not new:
          mine._done(old)
          mine._mark(new)
      mine.items = list(planned)
      return mine
    for other in owners.values():
      other.take(schedule)
    return PendingWork(planned)


def _same(a: Sequence[Work], b: Sequence[Work]) -> bool:
  return len(a) == len(b) and all(x is y for x, y in zip(a, b))


def settle(read: set[Buffer], written: set[Buffer]) -> None:
  """Run the pending items anything reading `read` and writing `written` (roots) needs first: a schedule over
  tensors a failed run left to compute, or one that overwrites in place what a pending item reads."""
  if not _open:
    return
  from tg.engine.realize import lower_to_run
  for w in list(_open):
    if (todo := w.needed(read, written)):
      w.run(todo, lower=w.lower or (lambda si: lower_to_run(si, capture=False)))


def settle_graph(bases: Iterable[object]) -> None:
  """settle() for a lazy graph about to be scheduled: the pending buffers it reads, the targets it assigns to."""
  if not _open:
    return
  from tg.lazy import LazyBuffer
  from tg.ops import MetaOps
  read: set[Buffer] = set()
  written: set[Buffer] = set()
  seen: set[int] = set()
  stack = [b for b in bases if isinstance(b, LazyBuffer)]
  while stack:
    b = stack.pop().base
    if id(b) in seen:
      continue
    seen.add(id(b))
    if b.op is None:
      if b.buffer.pending is not None:
        read.add(root(b.buffer))
      continue
    if b.op is MetaOps.ASSIGN:
      written.add(root(b.buffer))
    stack.extend(b.srcs)
  if read or written:
    settle(read, written)
