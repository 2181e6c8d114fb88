"""Indexing: `t[...]` with ints, slices, None, Ellipsis and tensors; `t[...] = v`; gather (masked_fill is in tensor_select).

Basic indices are movement ops (shrink, flip, reshape), so they cost nothing. Tensor (advanced) indices
select with one-hot masks that are summed over: `x[idx]` is sum_j where(idx == j, x[j], 0), which
codegen/one_hot_select.py turns into one load at idx per output element.

The other direction, a write to rows named by indices (x[idx]'s gradient, `x[idx] = v`), is tensor_scatter's: each
row of x finds the last index naming it and reads that index's row, after a gradient has added up repeated indices'.

An index out of range would match nothing and select 0, so it is an error (IndexOutOfRangeError, as torch): a Python
int or a list of indices is checked now; an index tensor lives on the device, and `_range_guard` registers a lazy
check of it (tg.divcheck's guards: one small reduction, read when the result is realized).
"""
from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, Any

import tg.divcheck as divcheck
from tg.dtype import DType, dtypes
from tg.errors import DTypeError, IndexOutOfRangeError, IndexShapeError, ShapeError
from tg.helpers import argsort, prod
from tg.lazy import LazyBuffer
from tg.shape.symbolic import Node, sint
from tg.tensor_math import _with_vjp
from tg.tensor_scatter import last_token, row_sums, rows_at

if TYPE_CHECKING:
  from tg.tensor import Tensor


def _as_index(idx: Any) -> Tensor | Any | None:
  """An integer Tensor as is, a list or numpy array of integers as an integer numpy array (checked against its axis's
  size on the host, then made a tensor); None for anything else."""
  from tg.tensor import Tensor
  if isinstance(idx, Tensor):
    if dtypes.is_float(idx.dtype):
      raise IndexError(f"tensors used as indices must be integer or bool, not {idx.dtype}")
    return idx if idx.dtype != dtypes.bool else None
  if isinstance(idx, list) or type(idx).__module__ == "numpy":
    import numpy as np
    arr = np.asarray(idx)
    if arr.dtype == bool or (arr.ndim == 0 and not np.issubdtype(arr.dtype, np.integer)):
      return None
    if arr.size == 0 and arr.dtype != bool:  # [] is float64 to numpy: an empty index
      arr = arr.astype(np.int32)
    if not np.issubdtype(arr.dtype, np.integer):
      raise IndexError(f"indices must be integers, got {arr.dtype}")
    return arr
  return None


_INT32_MAX = 2 ** 31 - 1


def _wide(t: Tensor, n: int = 0) -> Tensor:
  """Integer indices in a dtype that holds both their values and the axis sizes compared with them (an int8 index into
  300 elements can't be compared with 300 in int8): int32, or their own dtype where that is wider, or int64 for an axis
  of `n` > 2**31 - 1 elements (compared in int32, its size wrapped negative and every index was "out of range")."""
  if n > _INT32_MAX:
    return t if t.dtype in (dtypes.int64, dtypes.uint64) else t.cast(dtypes.int64)
  return t if t.dtype in (dtypes.int32, dtypes.int64, dtypes.uint32, dtypes.uint64) else t.cast(dtypes.int32)


def _selectable(x: Tensor) -> Tensor:
  """x as the one-hot sum selects it: a half float in float32, which its sum accumulates in anyway. Selected in its own
  dtype, a device that emulates it rounds each where() to it, and the sum's term is no longer a where that
  codegen/one_hot_select.py makes one load (a bfloat16 LLaMA's embedding walked the whole vocabulary per element)."""
  return x.cast(dtypes.float32) if x.dtype in (dtypes.float16, dtypes.bfloat16) else x


def _index_dtype(n: int) -> DType:
  """The dtype positions along an axis of n elements are computed in: int32, int64 past its range."""
  return dtypes.int64 if n > _INT32_MAX else dtypes.int32


def _range_guard(results: list[Tensor], idx: Tensor, lo: int, hi: int, error: divcheck.ErrorFn, keep: Tensor | None = None) -> None:
  """Make `results` raise error(an offending value) where an element of the integer tensor `idx` (where `keep`) is
  outside [lo, hi): at once when that is known now (a constant index), else when one is realized, through a lazy
  guard (tg.divcheck), one small reduction of idx shared by them. The results are the op's value and its one-hot
  mask: the backward pass reads the mask, not the value, so a step that only realizes the gradients is checked too."""
  from tg.multi import MultiLazyBuffer
  from tg.tensor import _parts
  if 0 in idx.shape:
    return
  w = _wide(idx, max(abs(lo), abs(hi)))
  bad = w >= hi
  if lo > 0 or not dtypes.is_unsigned(w.dtype):  # (an unsigned index is never below 0)
    bad = bad | (w < lo)
  if keep is not None:
    bad = bad & keep

  def detail() -> LazyBuffer:  # the failure path only: the largest value above the range, else the smallest below
    d = bad.where(w, 0)
    mx = d.max()
    v = (mx > 0).where(mx, d.min())
    lb = (v.to(v.device[0]) if isinstance(v.device, tuple) else v).lazydata
    assert isinstance(lb, LazyBuffer)
    return lb

  flag = bad.any()
  fl = flag.lazydata if isinstance(flag.lazydata, LazyBuffer) and flag.lazydata.is_unrealized_const() else flag.contiguous().lazydata
  # every part of a sharded result is guarded, by the flag on its device where there is one
  flags = fl.to_axis(None).lbs if isinstance(fl, MultiLazyBuffer) else [fl]
  on = {f.device: f for f in flags}
  for rp in _parts([r.lazydata for r in results]):
    divcheck.guard(rp, on.get(rp.device, flags[0]), error, detail)


def _bounds_error(dim: int, size: int, op: str = "") -> divcheck.ErrorFn:
  """The error of an index out of range for axis `dim` of `size` elements: torch's message, prefixed with the op."""
  valid = f"[{-size}, {size})" if not op else f"[0, {size})"

  def error(value: int | None) -> BaseException:
    which = f"index {value}" if value is not None else "an index"
    return IndexOutOfRangeError(f"{op + ': ' if op else ''}{which} is out of bounds for dimension {dim} with size {size} (valid: {valid})")
  return error


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


def _row_selection(t: Tensor, indices: Any) -> tuple[list[int], list[Any]] | None:
  """t[indices] as whole rows of the indexed axes: (those axes, their index tensors or integer arrays) when indices are
  only integer index tensors (or lists) and full slices (`:`, `...`), else None."""
  items = [i if (a := _as_index(i)) is None else a for i in _split_indices(indices)]
  ellipses = [k for k, i in enumerate(items) if i is Ellipsis]  # (identity: a tensor compares elementwise)
  if len(ellipses) > 1 or len(items) - len(ellipses) > t.ndim:
    return None  # (an error: __getitem__ says which)
  if ellipses:
    e = ellipses[0]
    items = items[:e] + [slice(None)] * (t.ndim - len(items) + 1) + items[e + 1:]
  items += [slice(None)] * (t.ndim - len(items))
  axes, idx = [], []
  for k, i in enumerate(items):
    if isinstance(i, slice) and i == slice(None):
      continue
    if type(i).__module__ == "numpy" or (type(i).__name__ == "Tensor" and dtypes.is_int(i.dtype)):
      axes.append(k)
      idx.append(i)
    else:
      return None
  return (axes, idx) if axes else None


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


def _check_targets(results: list[Tensor], target: Tensor, n_classes: int, ignore_index: int, keep: Tensor) -> None:
  """A loss's class targets (other than `keep`'s ignore_index) out of [0, n_classes) make the results (the loss, the
  one-hot mask that picks the targets) raise when realized (torch: IndexError "Target 3 is out of bounds."): a one-hot
  of such a target picks nothing, a silently wrong loss and gradient."""
  def error(value: int | None) -> BaseException:
    which = f"Target {value}" if value is not None else "A target"
    return IndexOutOfRangeError(f"{which} is out of bounds: the classes are 0 to {n_classes - 1} (or ignore_index={ignore_index})")
  _range_guard(results, target, 0, n_classes, error, keep)


def _one_hot_error(num_classes: int) -> divcheck.ErrorFn:
  def error(value: int | None) -> BaseException:
    which = f"class {value}" if value is not None else "a class"
    return IndexOutOfRangeError(f"one_hot: {which} is out of range for num_classes={num_classes} (valid: 0 to {num_classes - 1})")
  return error


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
    from tg.tensor import Tensor
    indices = tuple(i if (a := _as_index(i)) is None else a for i in _split_indices(indices))
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
    dims: list[int | None] = []  # of each index tensor: its axis in self (for the error), None where checked on the host
    for idx in indices:
      if idx is None:
        new_shape.append(1)
        continue
      size = x.shape[dim]
      if type(idx).__module__ == "numpy":  # a list or array of indices: known now, so checked now (no guard)
        if idx.size and isinstance(size, int) and not (-size <= int(idx.min()) and int(idx.max()) < size):
          bad = int(idx.max()) if int(idx.max()) >= size else int(idx.min())
          raise _bounds_error(dim, size)(bad)
        idx = Tensor(idx.astype("int64" if size > _INT32_MAX else "int32"), device=self.device)  # (in range: no value changes)
        dims.append(None)
      elif type(idx).__name__ == "Tensor":
        dims.append(dim)
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
    return x._index_with_tensors(tensor_axes, dims) if tensor_axes else x

  def _index_with_tensors(self: Tensor, tensor_axes: list[tuple[int, Tensor]], dims: list[int | None],  # type: ignore[misc]
                          op: str = "") -> Tensor:
    """x[..., I1, ..., Im, ...] for integer tensors at `tensor_axes`, with numpy's placement of the
    broadcast index shape: where the first index was if the indexed axes are adjacent, else in front. Each index
    tensor with a dim (its axis in the tensor indexed, for the error) gets its range checked: [-n, n), or [0, n) for an
    `op` named (Embedding: torch's takes no negative index, and the error names it)."""
    from tg.tensor import Tensor, _broadcast_shape, _concrete
    axes = [a for a, _ in tensor_axes]
    try:
      bshape = _broadcast_shape(*[t.shape for _, t in tensor_axes])
    except ShapeError as e:
      raise IndexShapeError(f"index tensors can't be broadcast together: {e}") from None
    rest = [a for a in range(self.ndim) if a not in axes]
    # x with its indexed axes last, and a leading block for the index shape: (1.., *rest, *indexed)
    xp = self.permute(rest + axes).reshape((1,) * len(bshape) + tuple(self.shape[a] for a in rest + axes))
    # the gradient is a scatter of the output's (tensor_scatter.row_sums), where the one-hot sum's own would search every
    # index for each element of x; symbolic sizes keep the one-hot sum's
    scatter = bool(self.requires_grad) and all(isinstance(s, int) for s in (*self.shape, *bshape))
    if scatter:
      xp = xp.detach()
    mask: Tensor | None = None
    wanted: list[Tensor] = []  # each index in range, broadcast
    for k, (a, t) in enumerate(tensor_axes):
      n = _concrete(self.shape[a])
      t = _wide(t, n)
      if not op:
        t = (t < 0).where(t + n, t)  # negative indices count from the end (out of range ones are __getitem__'s error)
      pos = _index_dtype(n)  # (int64 past 2**31 elements: int32 wrapped them)
      t = t.cast(pos) if t.dtype != pos else t
      wanted.append(t._broadcast_to(bshape))
      hot_shape = (1,) * (len(bshape) + len(rest)) + tuple(n if j == k else 1 for j in range(len(axes)))
      hot = wanted[-1].reshape(tuple(bshape) + (1,) * (len(rest) + len(axes))) == \
        Tensor.arange(n, device=self.device, dtype=pos).reshape(hot_shape)
      mask = hot if mask is None else (mask & hot)
    assert mask is not None
    zero = 0.0 if dtypes.is_float(self.dtype) else 0
    out = mask.where(_selectable(xp), zero).sum(tuple(range(-len(axes), 0)))
    out = out.cast(self.dtype) if out.dtype != self.dtype else out

    def guard(results: list[Tensor]) -> None:
      for (a, t), dim in zip(tensor_axes, dims):
        if dim is not None:
          n = _concrete(self.shape[a])
          _range_guard(results, t, 0 if op else -n, n, _bounds_error(dim, n, op))

    if scatter:
      sizes, x_order = tuple(_concrete(self.shape[a]) for a in axes + rest), axes + rest

      def vjp(g: Tensor) -> list[Tensor]:
        indexed, t_n = sizes[:len(axes)], prod(bshape)
        pt = _index_dtype(max(prod(indexed), t_n))
        pos = wanted[0].cast(pt)
        for t, n in zip(wanted[1:], indexed[1:]):  # the row in the indexed axes, row-major
          pos = pos * n + t.cast(pt)
        rows = row_sums(_selectable(g).reshape(t_n, prod(sizes[len(axes):])), pos.reshape(t_n), prod(indexed))
        grad = rows.cast(self.dtype).reshape(sizes).permute(argsort(x_order))
        guard([grad])  # a token out of range raises here too: the forward's value may never be realized
        return [grad]
      out = _with_vjp(out, [self], vjp)
    guard([out, mask])
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
    way, then scattered with one-hot masks into a new value; where a position is selected twice the last value is written."""
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
    if (rows := _row_selection(self, indices)) is not None and self._set_rows(*rows, v):
      return
    n = _concrete(self.numel())
    positions = Tensor.arange(n, device=self.device).reshape(self.shape)[indices]
    if any(isinstance(i, Tensor) for i in _split_indices(indices)):
      positions.realize()  # an index tensor out of range raises here (its guard), before anything is written: as torch
    while v.ndim > positions.ndim and v.shape[0] == 1:  # extra leading size-1 axes broadcast away, as numpy
      v = v.reshape(v.shape[1:])
    v = v.cast(self.dtype)._broadcast_to(positions.shape).flatten()
    k = v.shape[0]
    if k == 0:  # nothing selected (t[5:] of 4 rows): nothing to write, as torch and numpy (the value did broadcast)
      return
    hot = positions.flatten().reshape(-1, 1) == Tensor.arange(n, device=self.device).reshape(1, n)
    # a position selected more than once gets the last of its values, as numpy, torch on CPU and tinygrad: the number
    # (from 1) of the last value for each position, 0 where none is
    last = hot.where(Tensor.arange(1, k + 1, device=self.device).reshape(k, 1), 0).max(0)
    zero = 0.0 if dtypes.is_float(self.dtype) else 0
    written = (hot & (Tensor.arange(1, k + 1, device=self.device).reshape(k, 1) == last.reshape(1, n))).where(v.reshape(-1, 1), zero).sum(0)
    self.assign((last > 0).where(written.cast(self.dtype), self.flatten()).reshape(self.shape).contiguous()).realize()  # at once, as tinygrad

  def _set_rows(self: Tensor, axes: list[int], indices: list[Any], v: Tensor) -> bool:  # type: ignore[misc]
    """self[indices] = v where indices index whole rows (_row_selection): for each row of the indexed axes, the last
    index that names it (rows x indices compares), and that index's row of v read (one load per element). Element by
    element, each written element was searched for among all of self's. False where it doesn't apply (symbolic or
    empty axes): the element search then writes."""
    from tg.tensor import Tensor
    rest = [a for a in range(self.ndim) if a not in axes]
    shape = tuple(s for s in self.shape if isinstance(s, int))
    if len(shape) != self.ndim or 0 in shape:
      return False
    sizes = [shape[a] for a in axes]
    p_n, pt = prod(sizes), _index_dtype(prod(sizes))
    tensors: list[tuple[int, Tensor]] = []
    dims: list[int | None] = []
    for k, (a, idx) in enumerate(zip(axes, indices)):
      if type(idx).__module__ == "numpy":  # a list or array of indices: known now, so checked now, as __getitem__
        n = sizes[k]
        if idx.size and not (-n <= int(idx.min()) and int(idx.max()) < n):
          raise _bounds_error(a, n)(int(idx.max()) if int(idx.max()) >= n else int(idx.min()))
        idx = Tensor(idx.astype("int64" if n > _INT32_MAX else "int32"), device=self.device)
        dims.append(None)
      else:
        dims.append(a)
      tensors.append((k, idx))
    # each index's row: the indices applied to the row numbers (their range checked and negatives wrapped as in x[i])
    pos = Tensor.arange(p_n, device=self.device, dtype=pt).reshape(sizes)._index_with_tensors(tensors, dims)
    pos.realize()  # an index out of range raises here, before anything is written: as torch
    bshape = pos.shape
    adjacent = axes == list(range(axes[0], axes[0] + len(axes)))
    off = axes[0] if adjacent else 0  # where numpy puts the index shape among the other axes
    out_shape = tuple(shape[a] for a in rest[:off]) + bshape + tuple(shape[a] for a in rest[off:])
    while v.ndim > len(out_shape) and v.shape[0] == 1:  # extra leading size-1 axes broadcast away, as numpy
      v = v.reshape(v.shape[1:])
    v = v.cast(self.dtype)._broadcast_to(out_shape)
    t_n, nb = prod(bshape), len(bshape)
    if t_n == 0:  # nothing selected: nothing to write (the value did broadcast)
      return True
    v_rows = v.permute(list(range(off, off + nb)) + list(range(off)) + list(range(off + nb, len(out_shape)))).reshape(t_n, -1)
    last = last_token(pos.reshape(t_n), p_n)
    written = rows_at(last, _selectable(v_rows)).cast(self.dtype)
    new = (last.reshape(p_n, 1) >= 0).where(written, self.permute(axes + rest).reshape(p_n, -1))
    self.assign(new.reshape(sizes + [shape[a] for a in rest]).permute(argsort(axes + rest))).realize()
    return True

  def gather(self: Tensor, dim: int, index: Tensor) -> Tensor:  # type: ignore[misc]
    """out[i][j] = self[index[i][j]][j] for dim=0 (torch.gather): index has self's number of axes."""
    from tg.tensor import Tensor, _concrete
    d = self._resolve_axis(dim)
    if not dtypes.is_int(index.dtype):  # a float index matched no position and gathered zeros
      raise DTypeError(f"gather: index must be an integer tensor, got {index.dtype}")
    if (self.ndim == 0 or index.ndim == 0) and max(self.ndim, 1) == max(index.ndim, 1):
      # a 0-d tensor or index counts as 1-d of one element (torch): the result has the index's shape
      return self.reshape(self.shape or (1,)).gather(0, index.reshape(index.shape or (1,))).reshape(index.shape)
    if index.ndim != self.ndim:
      raise ShapeError(f"gather: index has {index.ndim} axes, the tensor {self.ndim}")
    if any(_concrete(i) > _concrete(s) for k, (i, s) in enumerate(zip(index.shape, self.shape)) if k != d):
      raise ShapeError(f"gather: index shape {index.shape} is larger than {self.shape} outside axis {d}")

    n = _concrete(self.shape[d])
    x = self.shrink(tuple(None if k == d else (0, i) for k, i in enumerate(index.shape)))
    x = x.unsqueeze(-1).transpose(d, -1)  # the gathered axis last, a size-1 axis in its place
    hot = index.unsqueeze(-1) == Tensor.arange(n, device=self.device)
    out = hot.where(_selectable(x), 0.0 if dtypes.is_float(self.dtype) else 0).sum(-1)
    out = out.cast(self.dtype) if out.dtype != self.dtype else out
    _range_guard([out, hot], index, 0, n, _bounds_error(d, n, "gather"))  # as torch, no negative indices
    return out
