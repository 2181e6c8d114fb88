"""View: one strided window onto a flat buffer (shape, strides, offset and an optional validity mask).
Any of them may be symbolic (contain Variables).

Every movement op is arithmetic on these five fields; no data moves. `pad` grows the shape and records
the valid region in `mask` (reads outside it give 0); `reshape` re-expresses the same addresses with
a new shape when it can, and returns None when it can't (the ShapeTracker then stacks a new View).
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from tg.helpers import prod
from tg.shape.symbolic import Node, NumNode, Variable, bound_value, is_sym, sint, smax, smin


def _concrete(x: Any) -> bool:
  """x (an int, None, a tuple of them, a View...) holds no symbolic Node."""
  if type(x) is int or x is None:
    return True
  if type(x) is tuple:  # a loop, not all(...): this runs on every view operation
    for e in x:
      if type(e) is not int and not _concrete(e):
        return False
    return True
  if isinstance(x, Node):
    return False
  return getattr(x, "concrete", True)  # a View or ShapeTracker knows (cached); anything else holds no Node


F = TypeVar("F", bound=Callable[..., Any])


def cached_when_concrete(fn: F) -> F:
  """Cache fn's results for arguments without symbolic Nodes. Views are immutable, and a model builds the same ones
  on every call (a conv's graph spent half its Python time on them). Symbolic ones are never cached: a bound Variable
  equals the same Variable bound to another value, so a cached result could carry the wrong binding."""
  cached = functools.lru_cache(maxsize=8192)(fn)

  @functools.wraps(fn)
  def wrapper(*args: Any, **kwargs: Any) -> Any:
    return cached(*args, **kwargs) if _concrete(args) and (not kwargs or _concrete(tuple(kwargs.values()))) else fn(*args, **kwargs)
  return wrapper  # type: ignore[return-value]


def _always(x: sint | bool) -> bool:
  """True when the comparison `x` holds for every value of its variables."""
  return x.min == 1 if isinstance(x, Node) else bool(x)


def strides_for_shape(shape: tuple[sint, ...]) -> tuple[sint, ...]:
  """Row-major strides, with 0 for size-1 dimensions (so equal views compare equal)."""
  strides: list[sint] = []
  acc: sint = 1
  for s in reversed(shape):
    strides.append(acc if s != 1 else 0)
    acc *= s
  return tuple(reversed(strides))


def _canonical_strides(shape: tuple[sint, ...], strides: tuple[sint, ...]) -> tuple[sint, ...]:
  return tuple(0 if s == 1 else st for s, st in zip(shape, strides))


@dataclass(frozen=True)
class View:
  shape: tuple[sint, ...]
  strides: tuple[sint, ...]
  offset: sint
  mask: tuple[tuple[sint, sint], ...] | None
  contiguous: bool

  @staticmethod
  @cached_when_concrete
  def create(shape: tuple[sint, ...], strides: tuple[sint, ...] | None = None, offset: sint = 0,
             mask: tuple[tuple[sint, sint], ...] | None = None) -> View:
    if any(isinstance(s, int) and s < 0 for s in shape):
      raise ValueError(f"shape can't have negative sizes: {shape}")
    if any(isinstance(s, NumNode) for s in shape):  # (i+2)-i is 2: a plain int, so the shape reads as concrete
      shape = tuple(s.b if isinstance(s, NumNode) else s for s in shape)
    strides = _canonical_strides(shape, strides) if strides is not None else strides_for_shape(shape)
    if mask is not None:
      if all(m == (0, s) for m, s in zip(mask, shape)):
        mask = None
      elif any(_always(b >= e) for b, e in mask):  # nothing is valid: every read is 0
        strides, offset, mask = (0,) * len(shape), 0, ((0, 0),) * len(shape)
    contiguous = offset == 0 and mask is None and strides == strides_for_shape(shape)
    return View(shape, strides, offset, mask, contiguous)

  @functools.cached_property
  def concrete(self) -> bool:
    """No field holds a symbolic Node."""
    return _concrete((self.shape, self.strides, self.offset, self.mask))

  # hashed once: views are keys of the caches above and of the schedule cache's structures, hashed on every lookup
  @functools.cached_property
  def _hash(self) -> int:
    return hash((self.shape, self.strides, self.offset, self.mask, self.contiguous))

  def __hash__(self) -> int:
    return self._hash

  def __reduce__(self) -> tuple[Any, ...]:  # the fields only: a pickle (a disk cache key) must not depend on what was cached
    return View, (self.shape, self.strides, self.offset, self.mask, self.contiguous)

  def size(self) -> sint:
    return prod(self.shape)

  def vars(self) -> set[Variable]:
    fields = (*self.shape, *self.strides, self.offset, *(sum(self.mask, ()) if self.mask is not None else ()))
    return set().union(*[x.vars() for x in fields if isinstance(x, Node)])

  def unbind(self) -> tuple[View, dict[Variable, int]]:
    """This View over unbound Variables, and the values the bound ones had."""
    from tg.shape.shapetracker import ShapeTracker
    st, var_vals = ShapeTracker((self,)).unbind()
    return st.views[0], var_vals

  # ---------- movement ops ----------
  def permute(self, axis: tuple[int, ...]) -> View:
    return View.create(tuple(self.shape[a] for a in axis), tuple(self.strides[a] for a in axis), self.offset,
                       tuple(self.mask[a] for a in axis) if self.mask is not None else None)

  def expand(self, new_shape: tuple[sint, ...]) -> View:
    if 0 in self.shape:
      return View.create(new_shape)
    mask = None
    if self.mask is not None:
      mask = tuple(m if s == ns else ((0, 0) if m == (0, 0) else (0, ns)) for m, s, ns in zip(self.mask, self.shape, new_shape))
    return View.create(new_shape, self.strides, self.offset, mask)

  def shrink(self, arg: tuple[tuple[sint, sint], ...]) -> View:
    offset = self.offset + sum(b * st for (b, _), st in zip(arg, self.strides))
    mask = None
    if self.mask is not None:
      mask = tuple((smax(mb, b) - b, smin(me, e) - b) for (mb, me), (b, e) in zip(self.mask, arg))
      mask = tuple((b, smax(b, e)) for b, e in mask)
    return View.create(tuple(e - b for b, e in arg), self.strides, offset, mask)

  def pad(self, arg: tuple[tuple[sint, sint], ...]) -> View:
    if all(b == 0 and a == 0 for b, a in arg):
      return self
    shape = tuple(s + b + a for s, (b, a) in zip(self.shape, arg))
    old_mask = self.mask if self.mask is not None else tuple((0, s) for s in self.shape)
    mask = tuple((mb + b, me + b) for (mb, me), (b, _) in zip(old_mask, arg))
    offset = self.offset - sum(b * st for (b, _), st in zip(arg, self.strides))
    return View.create(shape, self.strides, offset, mask)

  def stride(self, mul: tuple[int, ...]) -> View:
    """Take every mul-th element along each axis; a negative mul walks the axis backwards (flip)."""
    offset = self.offset + sum(st * (s - 1) for s, st, m in zip(self.shape, self.strides, mul) if m < 0)
    strides = tuple(st * m for st, m in zip(self.strides, mul))
    shape = tuple((s + abs(m) - 1) // abs(m) for s, m in zip(self.shape, mul))
    mask = None
    if self.mask is not None:
      mask = tuple(
        (((mb if m > 0 else s - me) + abs(m) - 1) // abs(m), ((me if m > 0 else s - mb) + abs(m) - 1) // abs(m))
        for (mb, me), s, m in zip(self.mask, self.shape, mul))
    return View.create(shape, strides, offset, mask)

  def reshape(self, new_shape: tuple[sint, ...]) -> View | None:
    """The same addresses under `new_shape`, or None when one View can't express them."""
    if self.shape == new_shape:
      return self
    if not _same_size(self.shape, new_shape):
      raise ValueError(f"can't reshape {self.shape} to {new_shape}: sizes differ")
    if 0 in self.shape:
      return View.create(new_shape)
    if self.contiguous:
      return View.create(new_shape)
    if self.mask is not None and any(_always(b >= e) for b, e in self.mask):  # nothing valid: stays so
      return View.create(new_shape, mask=((0, 0),) * len(new_shape)) if new_shape else None  # a 0-d View has no mask to say it
    # only size-1 axes added or removed: carry strides and mask over unchanged
    if tuple(s for s in self.shape if s != 1) == tuple(s for s in new_shape if s != 1):
      keep = [i for i, s in enumerate(self.shape) if s != 1]
      strides: list[sint] = []
      mask: list[tuple[sint, sint]] = []
      j = 0
      for s in new_shape:
        if s == 1:
          strides.append(0)
          mask.append((0, 1) if self.mask is None or all(self.mask[i] != (0, 0) for i in range(len(self.shape))) else (0, 0))
        else:
          strides.append(self.strides[keep[j]])
          mask.append(self.mask[keep[j]] if self.mask is not None else (0, s))
          j += 1
      return View.create(new_shape, tuple(strides), self.offset, tuple(mask) if self.mask is not None else None)
    if any(is_sym(x) for x in self.shape + new_shape + self.strides + ((self.offset,) + sum(self.mask, ()) if self.mask else ())):
      return self._reshape_concrete_middle(new_shape)
    new_strides = _reshape_strides(self.shape, self.strides, new_shape)
    if new_strides is None:
      return None
    if self.mask is None:
      return View.create(new_shape, new_strides, self.offset)
    # the addresses reshape exactly; the valid region must stay a box in the new shape
    new_mask = _reshape_mask(self.mask, self.shape, new_shape)  # type: ignore[arg-type]
    return View.create(new_shape, new_strides, self.offset, new_mask) if new_mask is not None else None

  def _reshape_concrete_middle(self, new_shape: tuple[sint, ...]) -> View | None:
    """reshape of a symbolic view whose symbolic axes are untouched: the axes both shapes start and end with are kept
    as they are (strides, mask), and the concrete axes between them reshape as in a concrete view. A kernel splitting a
    concrete axis of a KV cache read (keys (heads, start_pos + 1, head_dim), head_dim split for unrolling) stays one
    View: without this it stacked a second one and every load divided by the symbolic length."""
    n = min(len(self.shape), len(new_shape))
    pre = 0
    while pre < n and self.shape[pre] == new_shape[pre]:
      pre += 1
    post = 0
    while post < n - pre and self.shape[len(self.shape) - 1 - post] == new_shape[len(new_shape) - 1 - post]:
      post += 1
    old_mid, new_mid = self.shape[pre:len(self.shape) - post], new_shape[pre:len(new_shape) - post]
    mid_strides = self.strides[pre:len(self.shape) - post]
    mid_mask = self.mask[pre:len(self.shape) - post] if self.mask is not None else ()
    if not _concrete(old_mid + new_mid + mid_strides) or prod(old_mid) != prod(new_mid):
      return None
    if not all(m == (0, s) for m, s in zip(mid_mask, old_mid)):  # a masked middle axis would need its box reshaped
      return None
    strides = _reshape_strides(old_mid, mid_strides, new_mid)
    if strides is None:
      return None
    keep_end = len(self.shape) - post
    new_strides = self.strides[:pre] + strides + self.strides[keep_end:]
    new_mask = None if self.mask is None else self.mask[:pre] + tuple((0, s) for s in new_mid) + self.mask[keep_end:]
    return View.create(new_shape, new_strides, self.offset, new_mask)


def _same_size(a: tuple[sint, ...], b: tuple[sint, ...]) -> bool:
  """Equal sizes: symbolically, or for the values the variables are bound to."""
  pa, pb = prod(a), prod(b)
  if pa == pb:
    return True
  try:
    return bound_value(pa) == bound_value(pb)
  except RuntimeError:
    return False


def _axis_groups(old: list[int], new: list[int]) -> list[tuple[int, int, int, int]]:
  """Match runs of old axes to runs of new axes with equal products: (old start, old end, new start, new end)."""
  groups = []
  oi = ni = 0
  while ni < len(new) and oi < len(old):
    np_, op_ = new[ni], old[oi]
    nj, oj = ni + 1, oi + 1
    while np_ != op_:
      if np_ < op_:
        np_ *= new[nj]
        nj += 1
      else:
        op_ *= old[oj]
        oj += 1
    groups.append((oi, oj, ni, nj))
    ni, oi = nj, oj
  return groups


def _reshape_mask(mask: tuple[tuple[int, int], ...], old_shape: tuple[int, ...], new_shape: tuple[int, ...]) -> tuple[tuple[int, int], ...] | None:
  """The valid box `mask` of old_shape as a box of new_shape, or None when it isn't one.

  Axes are matched in groups of equal product. In each group the old box is flattened to one range
  (possible when every inner axis is whole, or the outer range is a single row), and the range is
  split over the new axes the same way."""
  old = [(s, m) for s, m in zip(old_shape, mask) if s != 1]
  new_idx = [i for i, s in enumerate(new_shape) if s != 1]
  new = [new_shape[i] for i in new_idx]
  out: list[tuple[int, int]] = []
  for oi, oj, ni, nj in _axis_groups([s for s, _ in old], new):
    lo, hi = old[oi][1]
    for s, (b, e) in old[oi + 1:oj]:
      if (b, e) == (0, s):
        lo, hi = lo * s, hi * s
      elif hi - lo == 1:
        lo, hi = lo * s + b, lo * s + e
      else:
        return None
    for k in range(ni, nj):
      inner = prod(new[k + 1:nj])
      if lo % inner == 0 and hi % inner == 0:
        out.append((lo // inner, hi // inner))
        lo, hi = 0, inner
      elif lo // inner == (hi - 1) // inner:
        out.append((lo // inner, lo // inner + 1))
        lo, hi = lo % inner, (hi - 1) % inner + 1
      else:
        return None
  full = [(0, 1)] * len(new_shape)
  for i, m in zip(new_idx, out):
    full[i] = m
  return tuple(full)


def _reshape_strides(old_shape: tuple[Any, ...], old_strides: tuple[Any, ...], new_shape: tuple[Any, ...]) -> tuple[int, ...] | None:
  """Strides that address the same elements under new_shape, when groups of old axes that merge are
  themselves laid out contiguously relative to each other (numpy's no-copy reshape rule)."""
  old = [(s, st) for s, st in zip(old_shape, old_strides) if s != 1]
  new_idx = [i for i, s in enumerate(new_shape) if s != 1]
  new = [new_shape[i] for i in new_idx]
  out = [0] * len(new)
  for oi, oj, ni, nj in _axis_groups([s for s, _ in old], new):
    for ok in range(oi, oj - 1):  # the merged old axes must be contiguous with each other
      if old[ok][1] != old[ok + 1][0] * old[ok + 1][1]:
        return None
    out[nj - 1] = old[oj - 1][1]
    for nk in range(nj - 1, ni, -1):
      out[nk - 1] = out[nk] * new[nk]
  strides = [0] * len(new_shape)
  for i, st in zip(new_idx, out):
    strides[i] = st
  return tuple(strides)
