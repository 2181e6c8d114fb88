"""ShapeTracker: a stack of Views. The last View is what the user sees; each View's flat index is read
as an index into the shape of the View before it. A View is pushed only when a reshape can't be
expressed in the last one, so most tensors stay a single View."""
from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tg.helpers import prod
from tg.shape.symbolic import AndNode, LtNode, MulNode, Node, NumNode, SumNode, Variable, sint, smax, smin
from tg.shape.view import View, cached_when_concrete


@dataclass(frozen=True)
class ShapeTracker:
  views: tuple[View, ...]

  @staticmethod
  @cached_when_concrete
  def from_shape(shape: tuple[sint, ...]) -> ShapeTracker:
    return ShapeTracker((View.create(shape),))

  # cached (an instance's __dict__ answers before the descriptor once set): both are read for every op built
  @functools.cached_property
  def shape(self) -> tuple[sint, ...]:
    return self.views[-1].shape

  @functools.cached_property
  def contiguous(self) -> bool:
    return len(self.views) == 1 and self.views[0].contiguous

  @functools.cached_property
  def unmasked(self) -> bool:
    """No View pads: every element reads the buffer (a constant seen through it is the same everywhere)."""
    return all(v.mask is None for v in self.views)

  @functools.cached_property
  def size(self) -> sint:
    return prod(self.shape)

  @functools.cached_property
  def concrete(self) -> bool:
    """No View holds a symbolic Node (see cached_when_concrete)."""
    return all(v.concrete for v in self.views)

  @functools.cached_property
  def _hash(self) -> int:
    return hash(self.views)

  def __hash__(self) -> int:
    return self._hash

  def __reduce__(self) -> tuple[Any, ...]:  # the views only: a pickle (a disk cache key) must not depend on what was cached
    return ShapeTracker, (self.views,)

  def real_size(self) -> int:
    """How many elements of the underlying buffer a kernel may touch (its minimum length)."""
    if 0 in self.shape:
      return 0
    idx, valid = self.expr_idxs()
    return 0 if valid.max == 0 else idx.max + 1

  def vars(self) -> set[Variable]:
    out: set[Variable] = set()
    for v in self.views:
      for x in (*v.shape, *v.strides, v.offset, *(sum(v.mask, ()) if v.mask is not None else ())):
        if isinstance(x, Node):
          out |= x.vars()
    return out

  @property
  def var_vals(self) -> dict[Variable, int]:
    """The bound Variables in this tracker, unbound, with their values (tinygrad's name)."""
    return self.unbind()[1]

  def unbind(self) -> tuple[ShapeTracker, dict[Variable, int]]:
    """This tracker over unbound Variables, and the values the bound ones had: the kernel is compiled
    for the unbound form and run with the values."""
    bound = {v: v.unbind() for v in self.vars() if v.val is not None}
    if not bound:
      return self, {}
    subs = {v: u for v, (u, _) in bound.items()}

    def sub(x: sint) -> sint:
      return x.substitute(subs) if isinstance(x, Node) else x
    views = tuple(View.create(tuple(sub(s) for s in v.shape), tuple(sub(s) for s in v.strides), sub(v.offset),
                              tuple((sub(b), sub(e)) for b, e in v.mask) if v.mask is not None else None) for v in self.views)
    return ShapeTracker(views), {u: val for u, val in bound.values()}

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
  @cached_when_concrete
  def reshape(self, new_shape: tuple[sint, ...]) -> ShapeTracker:
    if (v := self.views[-1].reshape(new_shape)) is not None:
      return ShapeTracker(self.views[:-1] + (v,))
    return ShapeTracker(self.views + (View.create(new_shape),))

  @cached_when_concrete
  def permute(self, axis: tuple[int, ...]) -> ShapeTracker:
    return ShapeTracker(self.views[:-1] + (self.views[-1].permute(axis),))

  @cached_when_concrete
  def expand(self, new_shape: tuple[sint, ...]) -> ShapeTracker:
    return ShapeTracker(self.views[:-1] + (self.views[-1].expand(new_shape),))

  @cached_when_concrete
  def pad(self, arg: tuple[tuple[sint, sint], ...]) -> ShapeTracker:
    return ShapeTracker(self.views[:-1] + (self.views[-1].pad(arg),))

  @cached_when_concrete
  def shrink(self, arg: tuple[tuple[sint, sint], ...]) -> ShapeTracker:
    return ShapeTracker(self.views[:-1] + (self.views[-1].shrink(arg),))

  @cached_when_concrete
  def stride(self, mul: tuple[int, ...]) -> ShapeTracker:
    return ShapeTracker(self.views[:-1] + (self.views[-1].stride(mul),))

  # ---------- index expressions ----------
  def expr_idxs(self, idxs: Sequence[Node] | None = None) -> tuple[Node, Node]:
    """The flat buffer index and the validity (0/1) of the element at `idxs` of the last View.
    Without `idxs`, one Variable per axis ("idx0", ...) spanning that axis."""
    if idxs is None:
      idxs = [Variable(f"idx{i}", 0, s - 1) if isinstance(s, int) else Variable(f"idx{i}", 0, s.max - 1) for i, s in enumerate(self.shape)]
    idx, valid = _view_index(self.views[-1], idxs)
    for v in reversed(self.views[:-1]):
      if valid.max == 0:
        return NumNode(-1), valid
      # unflatten the flat index into this view's shape, then index it
      sub: list[Node] = []
      acc: sint = 1
      for s in reversed(v.shape):
        sub.append((idx // acc) % s if s != 1 else NumNode(0))
        acc = acc * s
      nidx, nvalid = _view_index(v, list(reversed(sub)))
      idx, valid = nidx, Node.ands([valid, nvalid])
    return idx, valid

  def axis_is_masked(self, axis: int) -> bool:
    _, valid = self.expr_idxs()
    return f"idx{axis}" in {v.expr for v in valid.vars()}

  def real_strides(self) -> tuple[sint | None, ...]:
    """Each axis' stride in the buffer, or None where it isn't one number (masks, several Views)."""
    if len(self.views) == 1 and self.views[0].mask is None:
      return self.views[0].strides
    return _real_strides(self.views)


def _view_index(v: View, idxs: Sequence[Node]) -> tuple[Node, Node]:
  idx = Node.sum([NumNode(v.offset) if isinstance(v.offset, int) else v.offset] + [i * st for i, st in zip(idxs, v.strides) if st != 0])
  valid: list[Node] = []
  if v.mask is not None:
    for i, (b, e), s in zip(idxs, v.mask, v.shape):
      if b != 0:
        valid.append(i >= b)
      if e != s:
        valid.append(i < e)
  return idx, Node.ands(valid)


@cached_when_concrete
def _merge_views(vm2: View, vm1: View) -> View | None:
  """One View equal to vm1 read through vm2, or None when no single View is."""
  if vm2.contiguous:
    return vm1
  if vm1.contiguous and vm1.shape == vm2.shape:
    return vm2
  if vm1.contiguous and vm1.size() == vm2.size() and (v := vm2.reshape(vm1.shape)) is not None:
    return v  # vm1 is a plain reshape of vm2
  if any(not isinstance(x, int) for x in (*vm1.shape, *vm2.shape, *vm1.strides, *vm2.strides, vm1.offset, vm2.offset)):
    return None
  # in general: one View exists exactly when the composed index is linear in each axis and the valid region is a box
  idxs: list[Node] = [Variable(f"_m{i}", 0, s - 1) for i, s in enumerate(vm1.shape) if isinstance(s, int)]
  idx, valid = ShapeTracker((vm2, vm1)).expr_idxs(idxs)
  if valid.max == 0:
    return View.create(vm1.shape, mask=((0, 0),) * len(vm1.shape)) if vm1.shape else None
  strides, offset = [0] * len(idxs), 0
  for t in idx.nodes if isinstance(idx, SumNode) else [idx]:
    if isinstance(t, NumNode):
      offset += t.b
    elif t in idxs:
      strides[idxs.index(t)] += 1
    elif isinstance(t, MulNode) and isinstance(t.b, int) and t.a in idxs:
      strides[idxs.index(t.a)] += t.b
    else:
      return None
  mask: list[tuple[sint, sint]] = [(0, s) for s in vm1.shape]
  for c in valid.nodes if isinstance(valid, AndNode) else ([] if valid.min == 1 else [valid]):
    if not isinstance(c, LtNode) or not isinstance(c.b, int):
      return None
    if c.a in idxs:  # i < b
      i = idxs.index(c.a)
      mask[i] = (mask[i][0], smin(mask[i][1], c.b))
    elif isinstance(c.a, MulNode) and c.a.b == -1 and c.a.a in idxs:  # -i < b, that is i >= 1 - b
      i = idxs.index(c.a.a)
      mask[i] = (smax(mask[i][0], 1 - c.b), mask[i][1])
    else:
      return None
  return View.create(vm1.shape, tuple(strides), offset, tuple(mask))


@cached_when_concrete
def _real_strides(views: tuple[View, ...]) -> tuple[sint | None, ...]:
  """ShapeTracker.real_strides of a stack of Views: read off the index expression, whose terms give each axis' stride."""
  st = ShapeTracker(views)
  idxs = [Variable(f"idx{i}", 0, (s if isinstance(s, int) else s.max) - 1) for i, s in enumerate(st.shape)]
  idx, valid = st.expr_idxs(idxs)
  terms = idx.nodes if isinstance(idx, SumNode) else [idx]
  out: list[sint | None] = []
  for i in idxs:
    coefs: list[sint] = []
    tangled = False
    for t in terms:
      if t == i:
        coefs.append(1)
      elif isinstance(t, MulNode) and t.a == i:
        coefs.append(t.b)
      elif isinstance(i, Variable) and i in t.vars():
        tangled = True
    out.append(None if tangled or (isinstance(i, Variable) and i in valid.vars()) or len(coefs) > 1 else (coefs[0] if coefs else 0))
  return tuple(out)
