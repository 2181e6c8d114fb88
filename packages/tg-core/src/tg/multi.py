"""MultiLazyBuffer: one value held across several devices (`Tensor.shard`), as tinygrad 0.9's.

Each device holds a LazyBuffer of its own: with `axis` None every device holds the whole value (replicated); with an
axis, device i holds the i-th of equal slices along it (sharded). The MultiLazyBuffer answers the LazyBuffer methods the
autograd Functions call (e, r, movement ops, cast, const, ...) by calling them on every device's part, so a model, its
backward pass and its optimizer run unchanged on sharded tensors: one kernel per device for each kernel of one device.

What crosses devices is explicit and lazy (COPY nodes of the graph, run by the scheduler, device to host to device):
- a reduction over the sharded axis reduces each part, then combines the parts on every device (`all_reduce`);
- an op whose sources are split along different axes (or one split, one not) reshards them first: a replicated source
  is just sliced where it lies, a source split another way is gathered and sliced;
- a movement op that crosses slices (a pad, a shrink, a flip of the sharded axis, a reshape that would move elements
  between devices) is done on a gathered copy on every device, then sliced again when the new size still divides.
"""
from __future__ import annotations

import functools
from typing import Any

from tg.codegen.lowerer import REDUCE_ALU
from tg.dtype import ConstType, DType
from tg.errors import ShapeError
from tg.helpers import prod
from tg.lazy import LazyBuffer
from tg.ops import BinaryOps, ReduceOps, TernaryOps, UnaryOps
from tg.shape.symbolic import sint

RING_MIN_ELEMENTS = 1 << 16  # below this (or with two devices) every device adds up all the parts itself: fewer, bigger copies


def all_reduce(op: ReduceOps, lbs: list[LazyBuffer]) -> list[LazyBuffer]:
  """Every device's part combined with `op`, on every device. Each device combines the parts in the same order (or
  receives the same combined chunks), so the results are the same bits everywhere.

  Two devices, or small parts: each device gets a copy of every other part (n(n-1) copies of the whole part). More
  devices and large parts: a ring, whose every device sends 2(n-1)/n of a part in all (reduce-scatter, then all-gather)."""
  bop = REDUCE_ALU[op]
  n = len(lbs)
  if n == 1:
    return lbs
  size = prod(lbs[0].shape)
  if n <= 2 or not isinstance(size, int) or size < max(RING_MIN_ELEMENTS, n):
    return [functools.reduce(lambda a, b: a.e(bop, b), [x.copy_to_device(lb.device) for x in lbs]) for lb in lbs]
  # the ring: the flattened parts in n chunks; after reduce-scatter, device i holds chunk (i + 1) % n combined over all
  bounds = [size * c // n for c in range(n + 1)]
  chunks = [[lb.reshape((size,)).shrink(((bounds[c], bounds[c + 1]),)) for c in range(n)] for lb in lbs]
  devices = [lb.device for lb in lbs]
  for step in range(n - 1):
    sent = [(i, (i - step) % n) for i in range(n)]  # device i sends the chunk it has combined so far to device i + 1
    moved = [(i, c, chunks[i][c].copy_to_device(devices[(i + 1) % n])) for i, c in sent]
    for i, c, x in moved:
      dst = (i + 1) % n
      chunks[dst][c] = chunks[dst][c].e(bop, x)
  for step in range(n - 1):
    sent = [(i, (i + 1 - step) % n) for i in range(n)]  # then passes each combined chunk on around the ring
    moved = [(i, c, chunks[i][c].copy_to_device(devices[(i + 1) % n])) for i, c in sent]
    for i, c, x in moved:
      chunks[(i + 1) % n][c] = x
  # each device puts its chunks back together (in a kernel: each chunk padded to the whole length, then added)
  return [functools.reduce(lambda a, b: a.e(BinaryOps.ADD, b), [chunks[d][c].pad(((bounds[c], size - bounds[c + 1]),)) for c in range(n)])
          .reshape(lbs[d].shape) for d in range(n)]


def _slice(lb: LazyBuffer, axis: int, i: int, n: int) -> LazyBuffer:
  """The i-th of n equal slices of `lb` along `axis`."""
  size = lb.shape[axis]
  assert isinstance(size, int)
  sz = size // n
  return lb.shrink(tuple((sz * i, sz * (i + 1)) if a == axis else (0, s) for a, s in enumerate(lb.shape)))


def _check_divides(shape: tuple[sint, ...], axis: int, n: int) -> None:
  size = shape[axis]
  if not isinstance(size, int) or size % n != 0:
    raise ShapeError(f"can't shard axis {axis} of shape {shape} over {n} devices: its size must be a multiple of {n}")


def parts(lb: LazyBuffer | MultiLazyBuffer) -> list[LazyBuffer]:
  """The LazyBuffers behind a tensor's data: itself, or a sharded tensor's part on each of its devices."""
  return lb.lbs if isinstance(lb, MultiLazyBuffer) else [lb]


class MultiLazyBuffer:
  def __init__(self, lbs: list[LazyBuffer], axis: int | None) -> None:
    if not lbs:
      raise ValueError("a MultiLazyBuffer needs at least one device")
    if any(lb.dtype != lbs[0].dtype for lb in lbs):
      raise TypeError(f"the parts of a sharded tensor must share a dtype, not {[lb.dtype for lb in lbs]}")
    self.lbs, self.axis = lbs, axis
    self.dtype: DType = lbs[0].dtype
    self.device: tuple[str, ...] = tuple(lb.device for lb in lbs)
    shape = lbs[0].shape
    self.shape: tuple[sint, ...] = shape if axis is None else \
      tuple(sum(lb.shape[a] for lb in lbs) if a == axis else s for a, s in enumerate(shape))  # type: ignore[misc]
    self.size: sint = prod(self.shape)
    # a view of a realized value that a movement op across the split made by copying the parts together (`_whole`):
    # an assign into it can't reach the buffers it was cut from (Tensor.assign raises)
    self.gathered_view = False

  def __repr__(self) -> str:
    return f"<MLB {self.device} axis={self.axis} {self.shape} {self.dtype}>"

  @staticmethod
  def from_sharded(lb: LazyBuffer, devices: tuple[str, ...], axis: int | None) -> MultiLazyBuffer:
    """`lb` on `devices`: whole on each (axis None), or its i-th slice along `axis` on device i."""
    if axis is None:
      return MultiLazyBuffer([lb.copy_to_device(d) for d in devices], None)
    _check_divides(lb.shape, axis, len(devices))
    return MultiLazyBuffer([_slice(lb, axis, i, len(devices)).copy_to_device(d) for i, d in enumerate(devices)], axis)

  @property
  def realized(self) -> bool:
    return all(lb.base.realized is not None for lb in self.lbs)

  def is_unrealized_const(self) -> bool:
    return all(lb.is_unrealized_const() for lb in self.lbs)

  @property
  def const_value(self) -> ConstType:
    return self.lbs[0].const_value

  # ---------- resharding ----------
  def gathered(self, device: str) -> LazyBuffer:
    """The whole value on `device` (the slices copied there and put side by side in a kernel)."""
    if self.axis is None:
      here = [lb for lb in self.lbs if lb.device == device]
      return here[0] if here else self.lbs[0].copy_to_device(device)
    axis, total, parts, start = self.axis, self.shape[self.axis], [], 0
    for lb in self.lbs:
      sz = lb.shape[axis]
      parts.append(lb.copy_to_device(device).pad(tuple((start, total - start - sz) if a == axis else (0, 0) for a in range(len(self.shape)))))  # type: ignore[operator]
      start += sz  # type: ignore[assignment]
    return functools.reduce(lambda a, b: a.e(BinaryOps.ADD, b), parts)

  def to_axis(self, axis: int | None) -> MultiLazyBuffer:
    """The same value split along `axis` (None: whole on every device)."""
    if axis == self.axis:
      return self
    if self.axis is None:  # each device already has all of it: it keeps its own slice, nothing is copied
      assert axis is not None
      _check_divides(self.shape, axis, len(self.lbs))
      return MultiLazyBuffer([_slice(lb, axis, i, len(self.lbs)) for i, lb in enumerate(self.lbs)], axis)
    return MultiLazyBuffer([self.gathered(d) for d in self.device], None).to_axis(axis)

  def _whole(self, fn: Any) -> MultiLazyBuffer:
    """A movement op that crosses the slices: done on the whole value on every device, then split again along the same
    axis when the new size divides (else left whole on every device)."""
    axis = self.axis
    out = MultiLazyBuffer([fn(self.gathered(d)) for d in self.device], None)
    if axis is not None and axis < len(out.shape) and isinstance(s := out.shape[axis], int) and s % len(self.lbs) == 0 and s > 0:
      out = out.to_axis(axis)
    out.gathered_view = self.realized or self.gathered_view
    return out

  def _moved(self, lbs: list[LazyBuffer], axis: int | None) -> MultiLazyBuffer:
    """The result of a movement op done on each part: a view of what self is a view of."""
    out = MultiLazyBuffer(lbs, axis)
    out.gathered_view = self.gathered_view
    return out

  # ---------- compute ----------
  def e(self, op: UnaryOps | BinaryOps | TernaryOps, *in_srcs: MultiLazyBuffer) -> MultiLazyBuffer:
    srcs = (self, *in_srcs)
    for s in in_srcs:
      if not isinstance(s, MultiLazyBuffer) or s.device != self.device:
        raise RuntimeError(f"elementwise {op} of tensors on {[getattr(x, 'device', '?') for x in srcs]}: shard them over the same devices")
    axes = [s.axis for s in srcs if s.axis is not None]
    axis = axes[-1] if axes else None  # (tinygrad's choice: the last sharded source's axis)
    parts = [s.to_axis(axis).lbs for s in srcs]
    return MultiLazyBuffer([p[0].e(op, *p[1:]) for p in zip(*parts)], axis)

  def r(self, op: ReduceOps, axis: tuple[int, ...]) -> MultiLazyBuffer:
    if self.axis is not None and self.axis in axis:  # each device reduces its slice; the partial results are combined
      return MultiLazyBuffer(all_reduce(op, [lb.r(op, axis) for lb in self.lbs]), None)
    return MultiLazyBuffer([lb.r(op, axis) for lb in self.lbs], self.axis)

  def cast(self, dtype: DType, bitcast: bool = False) -> MultiLazyBuffer:
    return MultiLazyBuffer([lb.cast(dtype, bitcast) for lb in self.lbs], self.axis)

  def const(self, val: ConstType, shape: tuple[sint, ...] | None = None) -> MultiLazyBuffer:
    if shape is None or shape == self.shape:
      return MultiLazyBuffer([lb.const(val) for lb in self.lbs], self.axis)
    return MultiLazyBuffer([lb.const(val, shape) for lb in self.lbs], None)

  def contiguous(self) -> MultiLazyBuffer:
    return MultiLazyBuffer([lb.contiguous() for lb in self.lbs], self.axis)

  def copy_to_device(self, device: str) -> LazyBuffer:
    return self.gathered(device)

  def assign(self, x: MultiLazyBuffer) -> MultiLazyBuffer:
    x = x.to_axis(self.axis)
    return MultiLazyBuffer([lb.assign(v) for lb, v in zip(self.lbs, x.lbs)], self.axis)

  # ---------- movement ----------
  def _part_shape(self, shape: tuple[sint, ...], i: int) -> tuple[sint, ...]:
    """`shape` (of the whole) as device i's part sees it."""
    assert self.axis is not None
    return tuple(self.lbs[i].shape[self.axis] if a == self.axis else s for a, s in enumerate(shape))

  def reshape(self, arg: tuple[sint, ...]) -> MultiLazyBuffer:
    if self.axis is None:
      return self._moved([lb.reshape(arg) for lb in self.lbs], None)
    # the new sharded axis: one with the same product of the axes outside it, and a size the devices divide. Device i
    # holds the i-th n-th of the elements inside the old axis, for each outer index: the same elements as the i-th n-th
    # of the new axis, so nothing moves between devices
    outer = prod(self.shape[:self.axis])
    n = len(self.lbs)
    for new in range(len(arg)):
      if prod(arg[:new]) == outer and isinstance(size := arg[new], int) and size % n == 0 and size > 0:
        return self._moved([lb.reshape(tuple(size // n if a == new else s for a, s in enumerate(arg))) for lb in self.lbs], new)
    return self._whole(lambda lb: lb.reshape(arg))

  def permute(self, arg: tuple[int, ...]) -> MultiLazyBuffer:
    return self._moved([lb.permute(arg) for lb in self.lbs], arg.index(self.axis) if self.axis is not None else None)

  def expand(self, arg: tuple[sint, ...]) -> MultiLazyBuffer:
    if self.axis is None:
      return self._moved([lb.expand(arg) for lb in self.lbs], None)
    if arg[self.axis] != self.shape[self.axis]:
      return self._whole(lambda lb: lb.expand(arg))
    return self._moved([lb.expand(self._part_shape(arg, i)) for i, lb in enumerate(self.lbs)], self.axis)

  def pad(self, arg: tuple[tuple[sint, sint], ...]) -> MultiLazyBuffer:
    if self.axis is not None and arg[self.axis] != (0, 0):
      return self._whole(lambda lb: lb.pad(arg))
    return self._moved([lb.pad(arg) for lb in self.lbs], self.axis)

  def shrink(self, arg: tuple[tuple[sint, sint], ...]) -> MultiLazyBuffer:
    if self.axis is None:
      return self._moved([lb.shrink(arg) for lb in self.lbs], None)
    if arg[self.axis] != (0, self.shape[self.axis]):
      return self._whole(lambda lb: lb.shrink(arg))
    return self._moved([lb.shrink(tuple((0, lb.shape[a]) if a == self.axis else x for a, x in enumerate(arg))) for lb in self.lbs], self.axis)

  def stride(self, arg: tuple[int, ...]) -> MultiLazyBuffer:
    if self.axis is not None and arg[self.axis] != 1:
      return self._whole(lambda lb: lb.stride(arg))
    return self._moved([lb.stride(arg) for lb in self.lbs], self.axis)
