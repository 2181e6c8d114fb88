"""ShapeTracker: a stack of Views. The last View is what the user sees; each View's flat index is read
as an index into the shape of the View before it. A View is pushed only when a reshape can't be
expressed in the last one, so most tensors stay a single View."""
from __future__ import annotations

from dataclasses import dataclass

from tg.codegen.uops import UOp
from tg.dtype import dtypes
from tg.helpers import prod
from tg.shape.view import View


@dataclass(frozen=True)
class ShapeTracker:
  views: tuple[View, ...]

  @staticmethod
  def from_shape(shape: tuple[int, ...]) -> ShapeTracker:
    return ShapeTracker((View.create(shape),))

  @property
  def shape(self) -> tuple[int, ...]:
    return self.views[-1].shape

  @property
  def contiguous(self) -> bool:
    return len(self.views) == 1 and self.views[0].contiguous

  @property
  def size(self) -> int:
    return prod(self.shape)

  def real_size(self) -> int:
    """How many elements of the underlying buffer a kernel may touch (its minimum length)."""
    if 0 in self.shape:
      return 0
    v = self.views[0]
    if v.mask is not None and any(b >= e for b, e in v.mask):
      return 0
    lo = [b for b, _ in v.mask] if v.mask is not None else [0] * len(v.shape)
    hi = [e - 1 for _, e in v.mask] if v.mask is not None else [s - 1 for s in v.shape]
    top = v.offset + sum(st * (h if st > 0 else lo_) for st, lo_, h in zip(v.strides, lo, hi))
    return int(top) + 1

  def __add__(self, other: ShapeTracker) -> ShapeTracker:
    """`other` applied on top of self (a view of a view), merging Views where one can hold both."""
    ret = self
    for v in other.views:
      ret = ShapeTracker(ret.views + (v,)).simplify()
    return ret

  def simplify(self) -> ShapeTracker:
    if len(self.views) >= 2 and (merged := _merge_views(self.views[-2], self.views[-1])) is not None:
      return ShapeTracker(self.views[:-2] + (merged,)).simplify()
    return self

  # ---------- movement ops ----------
  def reshape(self, new_shape: tuple[int, ...]) -> ShapeTracker:
    if (v := self.views[-1].reshape(new_shape)) is not None:
      return ShapeTracker(self.views[:-1] + (v,))
    return ShapeTracker(self.views + (View.create(new_shape),))

  def permute(self, axis: tuple[int, ...]) -> ShapeTracker:
    return ShapeTracker(self.views[:-1] + (self.views[-1].permute(axis),))

  def expand(self, new_shape: tuple[int, ...]) -> ShapeTracker:
    return ShapeTracker(self.views[:-1] + (self.views[-1].expand(new_shape),))

  def pad(self, arg: tuple[tuple[int, int], ...]) -> ShapeTracker:
    return ShapeTracker(self.views[:-1] + (self.views[-1].pad(arg),))

  def shrink(self, arg: tuple[tuple[int, int], ...]) -> ShapeTracker:
    return ShapeTracker(self.views[:-1] + (self.views[-1].shrink(arg),))

  def stride(self, mul: tuple[int, ...]) -> ShapeTracker:
    return ShapeTracker(self.views[:-1] + (self.views[-1].stride(mul),))

  # ---------- index expressions ----------
  def to_indexed_uops(self, idxs: list[UOp]) -> tuple[UOp, UOp]:
    """The flat buffer index and the validity (bool) for the element at `idxs` of the last View."""
    idx, valid = _view_index(self.views[-1], idxs)
    for v in reversed(self.views[:-1]):
      # unflatten idx into this view's shape, then index it
      sub, acc = [], 1
      for s in reversed(v.shape):
        sub.append((idx // acc) % s if s != 1 else UOp.const(dtypes.int32, 0))
        acc *= s
      nidx, nvalid = _view_index(v, list(reversed(sub)))
      idx, valid = nidx, valid.logical_and(nvalid)
    return idx, valid


def _view_index(v: View, idxs: list[UOp]) -> tuple[UOp, UOp]:
  idx = UOp.const(dtypes.int32, v.offset)
  valid = UOp.const(dtypes.bool, True)
  for i, st in zip(idxs, v.strides):
    if st != 0:
      idx = idx + i * st
  if v.mask is not None:
    for i, (b, e), s in zip(idxs, v.mask, v.shape):
      if b != 0:
        valid = valid.logical_and(i.ge(b))
      if e != s:
        valid = valid.logical_and(i.lt(e))
  return idx, valid


def _merge_views(vm2: View, vm1: View) -> View | None:
  """One View equal to vm1 read through vm2, in the cases that are cheap to prove."""
  if vm2.contiguous:
    return vm1
  if vm1.contiguous and vm1.shape == vm2.shape:
    return vm2
  if vm1.contiguous and vm1.size() == vm2.size():
    return vm2.reshape(vm1.shape)  # vm1 is a plain reshape of vm2
  return None
