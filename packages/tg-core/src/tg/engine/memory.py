"""The memory planner: buffers that only one run can see share memory when their lifetimes don't overlap.

A run is one schedule (a `realize`) or one TinyJit capture (replayed as a whole). A buffer is *internal* to a run,
and may share memory, only when all of these hold; anything in doubt is left alone, because a wrong reuse is silent
data corruption:
  1. a schedule computed it (`track` records it as its ScheduleItem is made): it is not host data copied in, not a
     view into another buffer's memory, and never the target of an in-place assign (that is state, it outlives runs);
  2. no LazyBuffer owns it (Buffer.lb_refcount, counted by the lazy graph: a base adds itself as it is made and
     removes itself as it goes), so no Tensor, view, autograd context or unrealized graph can read it later.
     create_schedule drops the graph it schedules, so once it returns only what someone still holds stays alive;
     this is also what keeps the outputs of a realize and a TinyJit's return values out. The count can only be too
     high (a LazyBuffer in a reference cycle counts until a gc pass frees it), which costs a reuse, never data;
  3. it is on a device that runs kernels (a storage device's memory is a file), and not a TinyJit input;
  4. the run writes it before it reads it (its first use is as an item's output; in a schedule it holds no data yet).
Its lifetime is [item that first writes it, item that last reads it]. Internal buffers of the same device whose
lifetimes don't overlap share one allocation: the same bytes, or the front of a bigger one through Buffer.view when
the device's allocator has views. Buffers the planner makes are internal by construction, so a TinyJit capture,
whose kernels ran on planned schedules, is planned again over the whole capture.

NO_MEMORY_PLANNER=1 (or `Context(NO_MEMORY_PLANNER=1)`) turns it off, to rule it out when debugging.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tg.device import Allocator, Buffer, Device
from tg.helpers import DEBUG
from tg.ops import MetaOps
from tg.settings import NO_MEMORY_PLANNER

if TYPE_CHECKING:
  from tg.engine.realize import ExecItem
  from tg.engine.schedule import ScheduleItem
  from tg.lazy import LazyBuffer



def track(lb: LazyBuffer) -> None:
  """Record the buffer of a base a schedule computes (rule 1)."""
  if lb.op is MetaOps.ASSIGN:
    lb.buffer.plannable = False  # written in place: the kernel reads the old value, so the bytes must stay its own
  elif lb.buffer.plannable is None:
    lb.buffer.plannable = True


def is_internal(buf: Buffer) -> bool:
  """Whether nothing outside the run that uses `buf` can read it afterwards (rules 1-3, without TinyJit inputs)."""
  return buf.plannable is True and buf.lb_refcount == 0 and Device[buf.device].renderer is not None


def _planned(buf: Buffer) -> Buffer:
  buf.plannable = True  # nothing but ScheduleItems and ExecItems ever holds what the planner makes
  return buf


def _has_views(device: str) -> bool:
  return type(Device[device].allocator).view is not Allocator.view


def _lifetimes(uses: Sequence[Sequence[Buffer]], candidates: set[Buffer]) -> dict[Buffer, tuple[int, int]]:
  """[first, last] item of each candidate whose first use writes it (rule 4); the others drop out."""
  span: dict[Buffer, tuple[int, int]] = {}
  read_first: set[Buffer] = set()
  for i, bufs in enumerate(uses):
    for k, b in enumerate(bufs):
      if b not in candidates or b in read_first:
        continue
      if b in span:
        span[b] = (span[b][0], i)
      elif k == 0 and not any(x is b for x in bufs[1:]):  # an item writes bufs[0] only
        span[b] = (i, i)
      else:
        read_first.add(b)
  return span


@dataclasses.dataclass
class _Slot:
  """One allocation and the buffers that take turns in it."""
  free_from: int  # the first item at which the slot can take another buffer
  nbytes: int = 0
  users: list[Buffer] = dataclasses.field(default_factory=list)


def _assign(span: dict[Buffer, tuple[int, int]]) -> list[_Slot]:
  """Greedy in schedule order: each buffer takes a free slot that it may share, the smallest that holds it (or else
  the biggest, which then grows: that costs less than a new one), or a new slot when none is free."""
  pools: dict[tuple[Any, ...], list[_Slot]] = {}  # the slots buffers of one device (and options) may share
  views: dict[str, bool] = {}
  for b in sorted(span, key=lambda b: (span[b][0], -b.nbytes)):
    first, last = span[b]
    if b.device not in views:
      views[b.device] = _has_views(b.device)
    # without views, a slot is shared only by buffers of the very same dtype and size
    pool = pools.setdefault((b.device, b.options) if views[b.device] else (b.device, b.options, b.dtype, b.size), [])
    free = [s for s in pool if s.free_from <= first]
    fitting = [s for s in free if s.nbytes >= b.nbytes]
    slot = min(fitting, key=lambda s: s.nbytes) if fitting else max(free, key=lambda s: s.nbytes) if free else None
    if slot is None:
      pool.append(slot := _Slot(0))
    slot.users.append(b)
    slot.free_from, slot.nbytes = last + 1, max(slot.nbytes, b.nbytes)
  return [s for pool in pools.values() for s in pool]


def root(b: Buffer) -> Buffer:
  """The buffer that owns the memory `b` is in."""
  while b._base is not None:
    b = b._base
  return b


def _plan(uses: Sequence[Sequence[Buffer]], roots: set[Buffer]) -> dict[Buffer, Buffer]:
  """Which of `roots` (buffers that own their memory) move into another one's memory. A root's lifetime covers
  every use of it and of the views into it."""
  moves: dict[Buffer, Buffer] = {}
  for s in _assign(_lifetimes([[root(b) for b in bufs] for bufs in uses], roots)):
    mem = max(s.users, key=lambda b: b.nbytes)  # the biggest user's memory becomes the slot's: one allocation less
    moves.update({r: mem for r in s.users if r is not mem})
  return moves


class _Remap(dict[Buffer, Buffer]):
  """old buffer -> new buffer, for every buffer whose memory moved (`moves`: root -> the memory it moved into);
  filled in as buffers are looked up, so each old buffer gets one new one."""

  def __init__(self, moves: dict[Buffer, Buffer]) -> None:
    super().__init__()
    self.moves = moves

  def __missing__(self, b: Buffer) -> Buffer:
    if (mem := self.moves.get(root(b))) is None:
      return b
    # every buffer the planner places sits at the front of its memory, so a view at offset 0 is the same bytes
    self[b] = mem if (b.dtype, b.size) == (mem.dtype, mem.size) else _planned(mem.view(b.size, b.dtype, 0))
    return self[b]


def _report(what: str, before: Sequence[Buffer], after: Sequence[Buffer]) -> None:
  def total(bufs: Sequence[Buffer]) -> tuple[int, int]:
    roots = {id(r): r for r in map(root, bufs)}
    return len(roots), sum(r.nbytes for r in roots.values())
  (n0, b0), (n1, b1) = total(before), total(after)
  print(f"memory planner ({what}): {n0} allocations, {b0 / 1e6:.3f} MB -> {n1} allocations, {b1 / 1e6:.3f} MB")


def plan_schedule(schedule: list[ScheduleItem]) -> list[ScheduleItem]:
  """The schedule with its internal buffers sharing memory (a new list; the items given are not changed)."""
  if NO_MEMORY_PLANNER.value or len(schedule) < 2:  # (one item's buffers are all in use at once: nothing to share)
    return schedule
  # fresh buffers only: a schedule's own outputs are plain buffers with nothing in them yet
  roots = {b for si in schedule for b in si.bufs if b._base is None and not b.is_allocated() and is_internal(b)}
  if len(roots) < 2 or not (moves := _plan([si.bufs for si in schedule], roots)):  # one buffer shares with nothing
    return schedule
  remap = _Remap(moves)
  if DEBUG >= 2:
    _report("schedule", list(roots), [remap[b] for b in roots])
  return [dataclasses.replace(si, bufs=tuple(remap[b] for b in si.bufs)) for si in schedule]


def plan_jit(jit_cache: list[ExecItem], keep: set[Buffer]) -> None:
  """Make the internal buffers of a TinyJit capture share memory, in place in the ExecItems. `keep` holds the
  buffers of the jitted call's inputs and return values, which are never planned."""
  if NO_MEMORY_PLANNER:
    return
  bufs = list({id(b): b for ei in jit_cache for b in ei.bufs}.values())
  written_first = _lifetimes([ei.bufs for ei in jit_cache], set(bufs))
  # memory is planned only when every buffer in it qualifies: a view the planner didn't make, a kept buffer or one
  # read before it is written pins the memory it is in
  pinned = {root(b) for b in bufs if b in keep or b not in written_first or not is_internal(b)} | {root(b) for b in keep}
  roots = {r for r in map(root, bufs) if r not in pinned and is_internal(r)}
  if not (moves := _plan([ei.bufs for ei in jit_cache], roots)):
    return
  remap = _Remap(moves)
  if DEBUG >= 1:
    _report("TinyJit", [b for b in bufs if root(b) in roots], [remap[b] for b in bufs if root(b) in roots])
  for ei in jit_cache:
    ei.bufs[:] = [remap[b] for b in ei.bufs]
