"""Indexing: `t[...]` with ints, slices, None, Ellipsis and tensors; `t[...] = v`; gather (masked_fill is in tensor_select).

Basic indices are movement ops (shrink, flip, reshape), so they cost nothing. Tensor (advanced) indices
select with one-hot masks that are summed over: `x[idx]` is sum_j where(idx == j, x[j], 0). That is
O(size of the indexed axis) work per output element, the price of expressing a gather with movement
and elementwise ops only.
"""
from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, Any

from tg.dtype import dtypes
from tg.errors import IndexShapeError, ShapeError
from tg.lazy import LazyBuffer
from tg.shape.symbolic import Node, sint

if TYPE_CHECKING:
  from tg.tensor import Tensor


def _as_index_tensor(idx: Any, device: str) -> Tensor | None:
  """A list, numpy array or Tensor of integers as an int32 Tensor; None for anything else."""
  from tg.tensor import Tensor
  if isinstance(idx, Tensor):
    if dtypes.is_float(idx.dtype):
      raise IndexError(f"tensors used as indices must be integer or bool, not {idx.dtype}")
    return idx.cast(dtypes.int32) if idx.dtype != dtypes.bool else None
  if isinstance(idx, list) or type(idx).__module__ == "numpy":
    import numpy as np
    arr = np.asarray(idx)
    if arr.dtype == bool or (arr.ndim == 0 and not np.issubdtype(arr.dtype, np.integer)):
      return None
    if arr.size == 0 and arr.dtype != bool:  # [] is float64 to numpy: an empty index
      arr = arr.astype(np.int32)
    if not np.issubdtype(arr.dtype, np.integer):
      raise IndexError(f"indices must be integers, got {arr.dtype}")
    return Tensor(arr.astype(np.int32), device=device)
  return None


def _split_indices(indices: Any) -> tuple[Any, ...]:
  """The indices of t[indices], one per position, as tinygrad 0.9.1 (and torch) read them: a list of ints is one index
  tensor; any other list or tuple holds one index per axis, in which an inner list or tuple is an index tensor."""
  if isinstance(indices, list) and all(isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in indices):  # numpy ints too
    return (indices,)
  if isinstance(indices, (list, tuple)):
    return tuple(list(i) if isinstance(i, tuple) else i for i in indices)
  return (indices,)


def _basic_index(indices: Any) -> bool:
  """Whether `indices` only slices (ints, slices of ints or sizes, None, Ellipsis): the selection is a view."""
  items = indices if isinstance(indices, tuple) else (indices,)
  return all(i is None or i is Ellipsis or (isinstance(i, (int, slice, Node)) and not isinstance(i, bool)) for i in items)


def _writable_target(t: Tensor, indices: Any) -> Tensor | None:
  """t[indices] as a view that writes into t's realized buffer, or None when t has no buffer of its own to write."""
  t.realize()
  lb = t.lazydata
  if not isinstance(lb, LazyBuffer):  # sharded: written by building the new value (no view writes across devices)
    return None
  if lb.base.realized is None or not (lb.base is lb or lb.writable_view()):
    return None
  target = t[indices]
  tl = target.lazydata
  return target if isinstance(tl, LazyBuffer) and tl.base is lb.base and tl.writable_view() else None


class IndexingMixin:
  def _take_every(self: Tensor, axis: int, step: int) -> Tensor:  # type: ignore[misc]
    """Every step-th element along `axis`, as pad + reshape + shrink."""
    n = self.shape[axis]
    if not isinstance(n, int):
      raise NotImplementedError(f"strided slicing of the symbolic axis {axis} ({n})")
    out = -(-n // step)
    x = self.pad(tuple((0, out * step - n) if i == axis else None for i in range(self.ndim)))
    x = x.reshape(self.shape[:axis] + (out, step) + self.shape[axis + 1:])
    x = x.shrink(tuple((0, 1) if i == axis + 1 else None for i in range(x.ndim)))
    return x.reshape(self.shape[:axis] + (out,) + self.shape[axis + 1:])

  def __getitem__(self: Tensor, indices: Any) -> Tensor:  # type: ignore[misc]
    indices = _split_indices(indices)
    indices = tuple(_as_index_tensor(i, self.device) if _as_index_tensor(i, self.device) is not None else i for i in indices)
    if any(type(i).__name__ == "Tensor" and i.dtype == dtypes.bool for i in indices):
      raise IndexError("indexing with a boolean mask needs its data to know the output size: use masked_fill or where")
    if sum(1 for i in indices if i is Ellipsis) > 1:
      raise IndexError("an index can only have a single ellipsis (...)")
    n_real = sum(1 for i in indices if i is not None and i is not Ellipsis)
    if n_real > self.ndim:
      raise IndexError(f"too many indices for a tensor of {self.ndim} dimensions: {n_real}")
    if any(i is Ellipsis for i in indices):  # identity, not ==: tensors compare elementwise
      e = next(k for k, i in enumerate(indices) if i is Ellipsis)
      indices = indices[:e] + (slice(None),) * (self.ndim - n_real) + indices[e + 1:]
    else:
      indices = indices + (slice(None),) * (self.ndim - n_real)
    x, dim = self, 0
    new_shape: list[sint] = []
    tensor_axes: list[tuple[int, Tensor]] = []  # (axis in the result of the basic indexing, index tensor)
    for idx in indices:
      if idx is None:
        new_shape.append(1)
        continue
      size = x.shape[dim]
      if type(idx).__name__ == "Tensor":
        tensor_axes.append((len(new_shape), idx))
        new_shape.append(size)
        dim += 1
        continue
      if not isinstance(size, int):  # a symbolic axis can only be taken whole
        if idx != slice(None):
          raise NotImplementedError(f"indexing the symbolic axis {dim} ({size}) with {idx}: use shrink")
        new_shape.append(size)
        dim += 1
        continue
      if isinstance(idx, Node) or (isinstance(idx, slice) and idx.step in (None, 1) and (isinstance(idx.start, Node) or isinstance(idx.stop, Node))):
        # a bound Variable as an index or slice bound (cache[:, start_pos:start_pos+1]): a shrink, symbolic as tinygrad's
        lo, hi = (idx, idx + 1) if isinstance(idx, Node) else (0 if idx.start is None else idx.start, size if idx.stop is None else idx.stop)
        x = x.shrink(tuple((lo, hi) if d == dim else None for d in range(x.ndim)))
        if not isinstance(idx, Node):
          new_shape.append(x.shape[dim])
        dim += 1
        continue
      if isinstance(idx, float):  # a number of the wrong kind: IndexError, as torch and tinygrad
        raise IndexError(f"bad index {idx!r}: use ints, slices, None, ..., or integer tensors")
      if isinstance(idx, bool) or not isinstance(idx, (int, slice)):
        raise TypeError(f"bad index {idx!r}: use ints, slices, None, ..., or integer tensors")
      if isinstance(idx, int):
        if not -size <= idx < size:
          raise IndexError(f"index {idx} is out of bounds for axis {dim} with size {size}")
        i = idx + size if idx < 0 else idx
        x = x.shrink(tuple((i, i + 1) if d == dim else None for d in range(x.ndim)))
      else:
        start, stop, step = idx.indices(size)
        if step > 0:
          lo, hi = start, max(start, stop)
        else:
          lo, hi = max(stop + 1, 0), max(start + 1, stop + 1)
        x = x.shrink(tuple((lo, hi) if d == dim else None for d in range(x.ndim)))
        if step < 0:
          x = x.flip(dim)
        if abs(step) > 1:
          x = x._take_every(dim, abs(step))
        new_shape.append(x.shape[dim])
      dim += 1
    x = x.reshape(tuple(new_shape))
    return x._index_with_tensors(tensor_axes) if tensor_axes else x

  def _index_with_tensors(self: Tensor, tensor_axes: list[tuple[int, Tensor]]) -> Tensor:  # type: ignore[misc]
    """x[..., I1, ..., Im, ...] for integer tensors at `tensor_axes`, with numpy's placement of the
    broadcast index shape: where the first index was if the indexed axes are adjacent, else in front."""
    from tg.tensor import Tensor, _broadcast_shape, _concrete
    axes = [a for a, _ in tensor_axes]
    try:
      bshape = _broadcast_shape(*[t.shape for _, t in tensor_axes])
    except ShapeError as e:
      raise IndexShapeError(f"index tensors can't be broadcast together: {e}") from None
    rest = [a for a in range(self.ndim) if a not in axes]
    # x with its indexed axes last, and a leading block for the index shape: (1.., *rest, *indexed)
    xp = self.permute(rest + axes).reshape((1,) * len(bshape) + tuple(self.shape[a] for a in rest + axes))
    mask: Tensor | None = None
    for k, (a, t) in enumerate(tensor_axes):
      n = _concrete(self.shape[a])
      t = (t < 0).where(t + n, t)  # negative indices count from the end
      hot_shape = (1,) * (len(bshape) + len(rest)) + tuple(n if j == k else 1 for j in range(len(axes)))
      hot = t._broadcast_to(bshape).reshape(tuple(bshape) + (1,) * (len(rest) + len(axes))) == Tensor.arange(n, device=self.device).reshape(hot_shape)
      mask = hot if mask is None else (mask & hot)
    assert mask is not None
    zero = 0.0 if dtypes.is_float(self.dtype) else 0
    out = mask.where(xp, zero).sum(tuple(range(-len(axes), 0)))
    out = out.cast(self.dtype) if out.dtype != self.dtype else out
    adjacent = axes == list(range(axes[0], axes[0] + len(axes)))
    if adjacent and axes[0] > 0:  # the index shape goes where the indexed axes were
      nb, before = len(bshape), sum(1 for a in rest if a < axes[0])
      order = list(range(nb, nb + before)) + list(range(nb)) + list(range(nb + before, nb + len(rest)))
      out = out.permute(order)
    return out

  def __setitem__(self: Tensor, indices: Any, value: Any) -> None:  # type: ignore[misc]
    """Write `value` into the selected elements, as a new value of this tensor (it keeps its identity).

    Basic indices (ints, slices, None, Ellipsis) select a view of the tensor's buffer: as in tinygrad, the tensor is
    realized and the value written through that view in place, at once, by one kernel (what else holds the buffer sees
    it, and a TinyJit captures the write). Other selections (tensors and lists of indices, or a tensor with no buffer
    of its own to write, such as a broadcast constant) are found by indexing a tensor of element positions the same
    way, then scattered with one-hot masks into a new value; where a position is selected twice the values add up."""
    from tg.tensor import Tensor, _concrete
    if self.requires_grad and self._ctx is None and not Tensor.no_grad:
      # NotImplementedError, tinygrad's class here, is a RuntimeError, torch's
      raise NotImplementedError("can't assign into a leaf tensor that requires grad: use .detach() or do it under Tensor.no_grad")
    v = value if isinstance(value, Tensor) else Tensor(value, device=self.device, dtype=self.dtype)
    if _basic_index(indices) and not v.requires_grad and not self.requires_grad and (target := _writable_target(self, indices)) is not None:
      while v.ndim > target.ndim and v.shape[0] == 1:
        v = v.reshape(v.shape[1:])
      if 0 not in target.shape:
        target.assign(v.cast(self.dtype)._broadcast_to(target.shape)).realize()
      return
    n = _concrete(self.numel())
    positions = Tensor.arange(n, device=self.device).reshape(self.shape)[indices]
    while v.ndim > positions.ndim and v.shape[0] == 1:  # extra leading size-1 axes broadcast away, as numpy
      v = v.reshape(v.shape[1:])
    v = v.cast(self.dtype)._broadcast_to(positions.shape).flatten()
    hot = positions.flatten().reshape(-1, 1) == Tensor.arange(n, device=self.device).reshape(1, n)
    selected = hot.any(0)
    zero = 0.0 if dtypes.is_float(self.dtype) else 0
    written = hot.where(v.reshape(-1, 1), zero).sum(0).cast(self.dtype)
    self.assign(selected.where(written, self.flatten()).reshape(self.shape).cast(self.dtype).contiguous()).realize()  # at once, as tinygrad

  def gather(self: Tensor, dim: int, index: Tensor) -> Tensor:  # type: ignore[misc]
    """out[i][j] = self[index[i][j]][j] for dim=0 (torch.gather): index has self's number of axes."""
    from tg.tensor import Tensor, _concrete
    d = self._resolve_axis(dim)
    if index.ndim != self.ndim:
      raise ShapeError(f"gather: index has {index.ndim} axes, the tensor {self.ndim}")
    if any(_concrete(i) > _concrete(s) for k, (i, s) in enumerate(zip(index.shape, self.shape)) if k != d):
      raise ShapeError(f"gather: index shape {index.shape} is larger than {self.shape} outside axis {d}")

    n = _concrete(self.shape[d])
    x = self.shrink(tuple(None if k == d else (0, i) for k, i in enumerate(index.shape)))
    x = x.unsqueeze(-1).transpose(d, -1)  # the gathered axis last, a size-1 axis in its place
    hot = index.unsqueeze(-1) == Tensor.arange(n, device=self.device)
    out = hot.where(x, 0.0 if dtypes.is_float(self.dtype) else 0).sum(-1)
    return out.cast(self.dtype) if out.dtype != self.dtype else out
