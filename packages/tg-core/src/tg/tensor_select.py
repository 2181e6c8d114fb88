"""Ops that select, sort, scatter and rearrange elements: sort/topk, scatter and index updates, masked_fill, roll,
diag/diagonal, unfold, pixel_shuffle, meshgrid, cumulative products and maxima, bincount, searchsorted, nonzero.
Each is a composition of Tensor ops (movement ops, where, compares, reductions), so it runs on every device and its
gradient (where it has one) comes for free.

- Selecting by index (scatter, index_select, index_add, bincount, searchsorted) compares each index with every
  position of the axis (one-hot masks that are summed): O(len(index) * size of the axis) work, no data-dependent
  addressing. An index out of range (or negative, which torch refuses) selects nothing instead of raising.
- Shapes never depend on the data, except bincount's (max + 1) and nonzero's (the count): those read one number
  back (a sync; such a function can't be captured by TinyJit).
- Indices these ops return (sort, argsort, topk, cummax/cummin, searchsorted, nonzero) are int32, as tg's argmax
  (tinygrad's choice; torch's are int64), and int64 only where an index can pass int32's range.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tg.dtype import DType, dtypes
from tg.errors import AxisError, DTypeError, ShapeError, TgArgumentError
from tg.helpers import prod
from tg.tensor_index import _bounds_error, _range_guard, _selectable
from tg.tensor_math import _with_vjp
from tg.tensor_scatter import last_token, row_sums, rows_at

if TYPE_CHECKING:
  from tg.tensor import Tensor


def _stage(x: Tensor) -> Tensor:
  """A realized step of a network (a sort's compare-exchange, a scan's step), forward and backward. Each step reads
  the previous one twice (an element and its partner): unrealized, a kernel would inline the whole network below it,
  2^steps loads per element."""
  return x.contiguous().contiguous_backward()


# Axes up to this length sort and scan in one pass that compares every pair (O(n^2) work, a few kernels); longer ones
# use the log-depth networks (O(n log^2 n) or O(n log n) work, but one realized kernel per step, scheduled from
# Python). On the C CPU device, sorting (8, 1000) took 16 ms pairwise and 267 ms as a network (55 stages); the two met around
# n = 4096-16384 (noisy, shared machine). 1024 keeps the n^2 pass's work per row at about a million compares.
NETWORK_ABOVE = 1024


def _zero(dt: DType) -> Any:
  """The zero constant of `dt` as the Python type `where` keeps `dt` with."""
  return False if dt == dtypes.bool else (0.0 if dtypes.is_float(dt) else 0)


def _dims(arg: Any) -> tuple[int, ...]:
  return (arg,) if isinstance(arg, int) else tuple(arg)


def _after(a: Tensor, ia: Tensor, b: Tensor, ib: Tensor, n: int, descending: bool) -> Tensor:
  """Where element (a, ia) belongs after (b, ib) in the sorted order: a strict total order on (padding, value, index).

  Padding (index >= n) goes last; NaN is larger than every number (last ascending, first descending, as torch);
  equal values keep their original order, so the sort is stable."""
  def greater(x: Tensor, y: Tensor) -> Tensor:
    return (x > y) | (x.isnan() & y.isnan().logical_not()) if dtypes.is_float(x.dtype) else x > y
  equal = (a == b) | (a.isnan() & b.isnan()) if dtypes.is_float(a.dtype) else a == b
  wrong = greater(b, a) if descending else greater(a, b)
  pad_a, pad_b = ia >= n, ib >= n
  return (pad_a != pad_b).where(pad_a, wrong | (equal & (ia > ib)))


def _picks_are_cheaper(n: int, k: int) -> bool:
  """Whether topk of k from n (past NETWORK_ABOVE) is cheaper as k picks than as the sorting network's
  log2(N)*(log2(N)+1)/2 stages, a kernel each over the axis and every one different: compiling them is most of a first
  call (136 for a vocabulary of 50257, half a minute on a CPU). A pick is about 11 kernels over the axis (its reductions
  split in trees), the same ones every pick, compiled once (about 25 in all): picks while they launch no more kernels
  than the network (k <= 12 of 50257)."""
  depth = (n - 1).bit_length()
  return 11 * k <= depth * (depth + 1) // 2


class SelectMixin:
  def _dim(self: Tensor, dim: int) -> int:  # type: ignore[misc]
    """`dim` as a non-negative axis; a 0-d tensor takes dim 0 and -1, as torch."""
    n = max(self.ndim, 1)
    if not isinstance(dim, int) or not -n <= dim < n:
      raise AxisError(f"dim {dim} is out of range for a tensor with {self.ndim} dimensions (expected -{n} to {n - 1})")
    return dim + n if dim < 0 else dim

  # ---------- rearranging ----------
  def movedim(self: Tensor, source: int | Sequence[int], destination: int | Sequence[int]) -> Tensor:  # type: ignore[misc]
    """Move the axes at `source` to the places `destination`; the others keep their order (torch.movedim)."""
    src, dst = [self._dim(a) for a in _dims(source)], [self._dim(a) for a in _dims(destination)]
    if len(src) != len(dst):
      raise TgArgumentError(f"movedim: source {source} and destination {destination} name different numbers of dims")
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
      raise AxisError(f"movedim: repeated dim in source {source} or destination {destination}")
    if self.ndim == 0:
      return self
    order: list[int | None] = [None] * self.ndim
    for s, d in zip(src, dst):
      order[d] = s
    rest = iter(a for a in range(self.ndim) if a not in src)
    return self.permute(tuple(next(rest) if o is None else o for o in order))

  moveaxis = movedim

  def narrow(self: Tensor, dim: int, start: int, length: int) -> Tensor:  # type: ignore[misc]
    """`length` elements of `dim` from `start` (negative counts from the end), as a view (torch.narrow)."""
    from tg.tensor import _concrete
    d = self._dim(dim)
    n = _concrete(self.shape[d])
    if not -n <= start <= n:
      raise TgArgumentError(f"narrow: start {start} is out of range for dim {d} of size {n}")
    start = start + n if start < 0 else start
    if length < 0 or start + length > n:
      raise TgArgumentError(f"narrow: start {start} + length {length} passes the end of dim {d} (size {n})")
    return self.shrink(tuple((start, start + length) if i == d else None for i in range(self.ndim)))

  def tile(self: Tensor, dims: int | Sequence[int], *more: int) -> Tensor:  # type: ignore[misc]
    """Repeat the tensor `dims[i]` times along each axis; fewer counts than axes leave the leading axes alone,
    more add leading axes (torch.tile)."""
    reps = _dims(dims) + tuple(more)
    if any(r < 0 for r in reps):
      raise TgArgumentError(f"tile: negative repeat counts {reps}")
    return self.repeat((1,) * (self.ndim - len(reps)) + reps)

  def roll(self: Tensor, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Tensor:  # type: ignore[misc]
    """Shift elements along `dims` by `shifts`, wrapping around; without dims the flattened tensor is rolled."""
    from tg.tensor import _concrete
    if dims is None:
      if not isinstance(shifts, int) and len(_dims(shifts)) != 1:
        raise TgArgumentError(f"roll without dims takes one shift, got {shifts}")
      return self.flatten().roll(_dims(shifts)[0], 0).reshape(self.shape)
    sh, ds = _dims(shifts), _dims(dims)
    if len(sh) != len(ds):
      raise TgArgumentError(f"roll: shifts {shifts} and dims {dims} differ in length")
    x = self
    for s, dim in zip(sh, ds):
      d = x._dim(dim)
      if x.ndim == 0:
        continue
      n = _concrete(x.shape[d])
      if n == 0 or s % n == 0:
        continue
      k = s % n  # x repeated twice along d and read from n-k on is x rolled by k
      x = x.repeat(tuple(2 if i == d else 1 for i in range(x.ndim))).shrink(tuple((n - k, 2 * n - k) if i == d else None for i in range(x.ndim)))
    return x

  def diag(self: Tensor, diagonal: int = 0) -> Tensor:  # type: ignore[misc]
    """A 1-d tensor as a square matrix with it on the `diagonal`-th diagonal; a 2-d tensor's `diagonal`-th diagonal."""
    from tg.tensor import Tensor, _concrete
    if self.ndim == 1:
      n, k = _concrete(self.shape[0]), abs(diagonal)
      eye = Tensor.arange(n, device=self.device).reshape(n, 1) == Tensor.arange(n, device=self.device).reshape(1, n)
      sq = eye.where(self.reshape(1, n), _zero(self.dtype))
      return sq.pad(((0, k), (k, 0)) if diagonal >= 0 else ((k, 0), (0, k)))
    if self.ndim != 2:
      raise ShapeError(f"diag takes a 1-d or 2-d tensor, got shape {self.shape}")
    return self.diagonal(diagonal)

  def diagonal(self: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:  # type: ignore[misc]
    """The `offset`-th diagonal of the planes (dim1, dim2), as a last axis (torch.diagonal); a view, no copy."""
    from tg.tensor import _concrete
    a, b = self._dim(dim1), self._dim(dim2)
    if self.ndim < 2 or a == b:
      raise AxisError(f"diagonal needs two distinct dims of a tensor of at least 2 dims, got {dim1} and {dim2} for shape {self.shape}")
    x = self.movedim((a, b), (-2, -1))
    r, c = _concrete(x.shape[-2]), _concrete(x.shape[-1])
    start, length = (offset, min(r, c - offset)) if offset >= 0 else (-offset * c, min(r + offset, c))
    flat = x.flatten(-2)  # element i of the diagonal is (c + 1) * i past its first element in a flattened plane
    if length <= 0:
      return flat.shrink(tuple([None] * (flat.ndim - 1) + [(0, 0)]))
    return flat[..., start:start + (length - 1) * (c + 1) + 1:c + 1]

  def repeat_interleave(self: Tensor, repeats: int, dim: int | None = None) -> Tensor:  # type: ignore[misc]
    """Each element `repeats` times in a row along `dim` (the flattened tensor without one), as torch's with an int
    count; a tensor of per-element counts would give a shape that depends on the data, and is refused."""
    if not isinstance(repeats, int) or isinstance(repeats, bool):
      raise TgArgumentError(f"repeat_interleave takes an int count, got {type(repeats).__name__} (per-element counts make a data-dependent shape)")
    if repeats < 0:
      raise TgArgumentError(f"repeat_interleave: repeats must be non-negative, got {repeats}")
    x = self.flatten() if dim is None else self
    d = 0 if dim is None else self._dim(dim)
    if x.ndim == 0:
      x = x.reshape(1)
    x = x.unsqueeze(d + 1)
    return x.expand(x.shape[:d + 1] + (repeats,) + x.shape[d + 2:]).flatten(d, d + 1)

  def unfold(self: Tensor, dimension: int, size: int, step: int) -> Tensor:  # type: ignore[misc]
    """Every window of `size` elements along `dimension`, `step` apart: that axis becomes the window count, and a
    last axis of `size` is added (torch.Tensor.unfold)."""
    from tg.tensor import _concrete
    d = self._dim(dimension)
    x = self.reshape(1) if self.ndim == 0 else self
    n = _concrete(x.shape[d])
    if step <= 0:
      raise TgArgumentError(f"unfold: step must be positive, got {step}")
    if not 0 <= size <= n:
      raise TgArgumentError(f"unfold: size {size} must be between 0 and the size of dim {d} ({n})")
    out = (n - size) // step + 1
    x = x.movedim(d, -1)
    if size == 0 or _concrete(x.numel()) == 0:  # no windows to build: an empty view (the gradient stays connected)
      x = x.shrink(tuple([None] * (x.ndim - 1) + [(0, size)])).unsqueeze(-2)
      w = x.expand(x.shape[:-2] + (out, size))
    else:
      w = x._pool((size,), step)  # (*others, out, size)
    w = w.movedim(-2, d)
    return w.reshape(w.shape[1:]) if self.ndim == 0 else w

  def pixel_shuffle(self: Tensor, upscale_factor: int) -> Tensor:  # type: ignore[misc]
    """(*, C*r*r, H, W) -> (*, C, H*r, W*r) (torch.nn.functional.pixel_shuffle)."""
    from tg.tensor import _concrete
    r = upscale_factor
    if self.ndim < 3 or r <= 0 or _concrete(self.shape[-3]) % (r * r):
      raise ShapeError(f"pixel_shuffle: needs (*, C*{r}*{r}, H, W) with r > 0, got shape {self.shape}")
    *pre, c, h, w = self.shape
    x = self.reshape(tuple(pre) + (c // (r * r), r, r, h, w))
    n = len(pre)
    x = x.permute(tuple(range(n)) + (n, n + 3, n + 1, n + 4, n + 2))
    return x.reshape(tuple(pre) + (c // (r * r), h * r, w * r))

  def pixel_unshuffle(self: Tensor, downscale_factor: int) -> Tensor:  # type: ignore[misc]
    """(*, C, H*r, W*r) -> (*, C*r*r, H, W), the inverse of pixel_shuffle."""
    from tg.tensor import _concrete
    r = downscale_factor
    if self.ndim < 3 or r <= 0 or _concrete(self.shape[-1]) % r or _concrete(self.shape[-2]) % r:
      raise ShapeError(f"pixel_unshuffle: needs (*, C, H*{r}, W*{r}) with r > 0, got shape {self.shape}")
    *pre, c, h, w = self.shape
    n = len(pre)
    x = self.reshape(tuple(pre) + (c, h // r, r, w // r, r))
    x = x.permute(tuple(range(n)) + (n, n + 2, n + 4, n + 1, n + 3))
    return x.reshape(tuple(pre) + (c * r * r, h // r, w // r))

  @staticmethod
  def meshgrid(*tensors: Any, indexing: str = "ij") -> tuple[Tensor, ...]:
    """Grids from 1-d tensors: output k varies along axis k (indexing="ij"), or with the first two axes swapped
    ("xy", numpy's default). Outputs are expanded views (torch.meshgrid)."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
      tensors = tuple(tensors[0])
    if indexing not in ("ij", "xy"):
      raise TgArgumentError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    if not tensors:
      raise TgArgumentError("meshgrid needs at least one tensor")
    if any(t.ndim > 1 for t in tensors):
      raise ShapeError(f"meshgrid takes 0-d or 1-d tensors, got shapes {[t.shape for t in tensors]}")
    flat = [t.reshape(-1) for t in tensors]
    axis_of = list(range(len(flat)))
    if indexing == "xy" and len(flat) >= 2:
      axis_of[0], axis_of[1] = 1, 0
    shape = [0] * len(flat)
    for t, a in zip(flat, axis_of):
      shape[a] = t.shape[0]
    return tuple(t.reshape(tuple(-1 if i == a else 1 for i in range(len(flat)))).expand(tuple(shape)) for t, a in zip(flat, axis_of))

  # ---------- sorting ----------
  def sort(self: Tensor, dim: int = -1, descending: bool = False, stable: bool = False) -> tuple[Tensor, Tensor]:  # type: ignore[misc]
    """(values, indices) sorted along `dim`. Always stable (equal values keep their order); NaN sorts as the largest.

    An axis of n <= NETWORK_ABOVE: each element's rank is the count of elements that go before it, and the values
    are picked by rank (one-hot). Longer: a bitonic sorting network over the axis padded to a power of two N,
    log2(N)*(log2(N)+1)/2 compare-exchange stages, each a where between the tensor and a flipped view of it (its
    partners), realized so the next stage reads a buffer instead of recomputing the whole network."""
    from tg.tensor import Tensor, _concrete, _index_dtype
    d = self._dim(dim)
    n = _concrete(self.shape[d]) if self.ndim else 1
    idt = _index_dtype(n, self.device)
    if n <= 1 or _concrete(self.numel()) == 0:
      return self, Tensor.zeros(self.shape, dtype=idt, device=self.device)
    x = self.movedim(d, -1)
    key = x.cast(dtypes.int32) if x.dtype == dtypes.bool else x  # bools compare as ints
    values, idx = key._sort_by_rank(descending, idt) if n <= NETWORK_ABOVE else key._sort_network(descending, idt)
    return values.cast(self.dtype).movedim(-1, d), idx.movedim(-1, d)

  def _sort_by_rank(self: Tensor, descending: bool, idt: DType) -> tuple[Tensor, Tensor]:  # type: ignore[misc]
    from tg.tensor import Tensor, _concrete
    n = _concrete(self.shape[-1])
    ar = Tensor.arange(n, device=self.device, dtype=idt)
    before = _after(self.unsqueeze(-1), ar.reshape(n, 1), self.unsqueeze(-2), ar.reshape(1, n), n, descending)
    rank = before.sum(-1, acc_dtype=idt)  # (..., n): where element i goes
    at = rank.unsqueeze(-2) == ar.reshape(n, 1)  # (..., r, i): element i goes to place r
    values = at.where(self.unsqueeze(-2), _zero(self.dtype)).sum(-1).cast(self.dtype)
    return values, at.where(ar, 0).sum(-1, acc_dtype=idt)

  def _sort_network(self: Tensor, descending: bool, idt: DType) -> tuple[Tensor, Tensor]:  # type: ignore[misc]
    from tg.tensor import Tensor, _concrete
    n, pre = _concrete(self.shape[-1]), self.shape[:-1]
    big = 1 << (n - 1).bit_length()
    key = self.pad(tuple([None] * len(pre) + [(0, big - n)]))
    idx = Tensor.arange(big, device=self.device, dtype=idt).reshape((1,) * len(pre) + (big,)).expand(pre + (big,))
    is_high = Tensor.arange(2, device=self.device).reshape(2, 1) == 1  # the second half of each pair
    size = 2
    while size <= big:
      half = size // 2
      while half >= 1:
        # pairs (i, partner) as axes (blocks, 2, half): the first step of each merge compares mirrored positions
        shape = pre + (big // (2 * half), 2, half)
        k5, i5 = key.reshape(shape), idx.reshape(shape)
        axes = (-2, -1) if half == size // 2 else (-2,)
        pk, pi = k5.flip(axes), i5.flip(axes)
        # the lower of a pair takes its partner when it belongs after it, the upper when it doesn't (a strict order)
        swap = _after(k5, i5, pk, pi, n, descending) != is_high
        key = _stage(swap.where(pk, k5).reshape(pre + (big,)))
        idx = swap.where(pi, i5).reshape(pre + (big,)).contiguous()
        half //= 2
      size *= 2
    keep = tuple([None] * len(pre) + [(0, n)])
    return key.shrink(keep), idx.shrink(keep)

  def argsort(self: Tensor, dim: int = -1, descending: bool = False, stable: bool = False) -> Tensor:  # type: ignore[misc]
    return self.sort(dim, descending, stable)[1]

  def topk(self: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> tuple[Tensor, Tensor]:  # type: ignore[misc]
    """The k largest (or smallest) elements along `dim` and their indices, largest first (smallest first): a sort of
    the axis, or k picks of one each where that is cheaper (_picks_are_cheaper)."""
    from tg.tensor import _concrete, _index_dtype
    d = self._dim(dim)
    n = _concrete(self.shape[d]) if self.ndim else 1
    if not 0 <= k <= n:
      raise TgArgumentError(f"topk: k={k} is out of range for dim {d} of size {n}")
    if self.ndim and n > NETWORK_ABOVE and 0 < k and _picks_are_cheaper(n, k):
      x = self.movedim(d, -1)
      key = x.cast(dtypes.int32) if x.dtype == dtypes.bool else x  # bools compare as ints
      values, indices = key._topk_picks(k, largest, _index_dtype(n, self.device))
      return values.cast(self.dtype).movedim(-1, d), indices.movedim(-1, d)
    values, indices = self.sort(d, descending=largest)
    if self.ndim == 0:
      return values, indices
    keep = tuple((0, k) if i == d else None for i in range(self.ndim))
    return values.shrink(keep), indices.shrink(keep)

  def _topk_picks(self: Tensor, k: int, largest: bool, idt: DType) -> tuple[Tensor, Tensor]:  # type: ignore[misc]
    """topk over the last axis as k picks, each the first element of the sort's order among those not yet taken: the
    largest (smallest) value, a NaN counting as larger than any, the lowest index among equals. Each pick is the same
    kernels (a max, the first index reaching it, a gather, the taken mask), so they compile once."""
    from tg.tensor import Tensor, _concrete
    n = _concrete(self.shape[-1])
    far = n - Tensor.arange(n, device=self.device, dtype=idt)  # the first of several hits has the largest
    nan = self.isnan() if dtypes.is_float(self.dtype) else None
    taken = Tensor.zeros(self.shape, dtype=dtypes.bool, device=self.device).contiguous()
    values, indices = [], []
    for _ in range(k):
      free = taken.logical_not()
      num = free if nan is None else free & nan.logical_not()
      if largest:
        best = num.where(self, dtypes.min(self.dtype)).max(-1, keepdim=True)
      else:
        best = num.where(self, dtypes.max(self.dtype)).min(-1, keepdim=True)
      hit = num & (self == best)
      if nan is not None:  # NaN first when largest, last when smallest
        free_nan = free & nan
        hit = free_nan.any(-1, keepdim=True).where(free_nan, hit) if largest else num.any(-1, keepdim=True).where(hit, free_nan)
      pick = (n - hit.where(far, 0).max(-1, keepdim=True)).contiguous()
      one = far == n - pick
      values.append(one.where(self, _zero(self.dtype)).sum(-1, keepdim=True).cast(self.dtype))
      indices.append(pick)
      taken = (taken | one).contiguous()  # a buffer per pick: the next reads it, not every pick before it
    return values[0].cat(*values[1:], dim=-1), indices[0].cat(*indices[1:], dim=-1)

  def kthvalue(self: Tensor, k: int, dim: int = -1, keepdim: bool = False) -> tuple[Tensor, Tensor]:  # type: ignore[misc]
    """The k-th smallest element along `dim` (k from 1) and its index (torch.kthvalue); NaN counts as the largest."""
    from tg.tensor import _concrete
    d = self._dim(dim)
    n = _concrete(self.shape[d]) if self.ndim else 1
    if not 1 <= k <= n:
      raise TgArgumentError(f"kthvalue: k={k} is out of range for dim {d} of size {n}")
    values, indices = self.sort(d)
    if self.ndim == 0:
      return values, indices
    pick = tuple((k - 1, k) if i == d else None for i in range(self.ndim))
    values, indices = values.shrink(pick), indices.shrink(pick)
    return (values, indices) if keepdim else (values.squeeze(d), indices.squeeze(d))

  # ---------- scans ----------
  def _scan_steps(self: Tensor) -> list[int]:  # type: ignore[misc]
    """The shifts of a log-depth (Hillis-Steele) scan over the last axis: 1, 2, 4, ... below its length."""
    from tg.tensor import _concrete
    n, out, s = _concrete(self.shape[-1]), [], 1
    while s < n:
      out.append(s)
      s *= 2
    return out

  def _shift_last(self: Tensor, s: int, fill: Any) -> Tensor:  # type: ignore[misc]
    """x[..., i - s] along the last axis, `fill` for i < s."""
    from tg.tensor import _concrete
    n = _concrete(self.shape[-1])
    lead: list[Any] = [None] * (self.ndim - 1)
    return self.shrink(lead + [(0, n - s)]).pad(lead + [(s, 0)], value=fill)

  def _prefix_windows(self: Tensor, fill: Any) -> Tensor:  # type: ignore[misc]
    """(..., n) -> (..., n, n): row i holds x[i-n+1 .. i] along the last axis, `fill` before the start."""
    from tg.tensor import _concrete
    n = _concrete(self.shape[-1])
    return self.pad(tuple([None] * (self.ndim - 1) + [(n - 1, 0)]), value=fill)._pool((n,))

  def cumprod(self: Tensor, dim: int, dtype: DType | None = None) -> Tensor:  # type: ignore[misc]
    """Running product along `dim`. Ints and bools multiply in int64 as torch (int32 where the device has no int64).

    A short axis multiplies each prefix window; a long one takes log2(n) steps, each multiplying by the running
    product 2^k back. Products of elements, never divisions, so zeros have the exact gradient."""
    from tg.dtype import to_dtype
    from tg.tensor import _concrete
    d = self._dim(dim)
    x = self.cast(to_dtype(dtype)) if dtype is not None else self if dtypes.is_float(self.dtype) else self.cast(self._int_acc())
    if self.ndim == 0:
      return x
    x = x.movedim(d, -1)
    if _concrete(x.shape[-1]) == 0:
      return x.movedim(-1, d)
    if _concrete(x.shape[-1]) <= NETWORK_ABOVE:  # the product of each prefix window, in one kernel
      return x._prefix_windows(1).prod(-1).cast(x.dtype).movedim(-1, d)
    for s in x._scan_steps():
      x = _stage(x * x._shift_last(s, 1))
    return x.movedim(-1, d)

  def _cum_extreme(self: Tensor, dim: int, largest: bool) -> tuple[Tensor, Tensor]:  # type: ignore[misc]
    """cummax/cummin: the running extreme and the index of its last occurrence; a NaN wins from where it occurs."""
    from tg.tensor import Tensor, _concrete, _index_dtype
    d = self._dim(dim)
    n = _concrete(self.shape[d]) if self.ndim else 1
    idt = _index_dtype(n, self.device)
    if self.ndim == 0 or n == 0:
      return self, Tensor.zeros(self.shape, dtype=idt, device=self.device)
    x = self.movedim(d, -1)
    x = x.cast(dtypes.int32) if x.dtype == dtypes.bool else x
    fill = dtypes.min(x.dtype) if largest else dtypes.max(x.dtype)  # loses to everything
    if n <= NETWORK_ABOVE:
      # the last position in each prefix holding its extreme; the values are picked there, so the gradient goes
      # to that one element (as torch's), not split between equal ones as max()'s would be
      ar = Tensor.arange(n, device=self.device, dtype=idt)
      w, pos = x.detach()._prefix_windows(fill), ar._prefix_windows(-1)
      ext = (w.max(-1) if largest else w.min(-1)).unsqueeze(-1)
      hit = (w == ext) | (w.isnan() & ext.isnan()) if dtypes.is_float(x.dtype) else w == ext
      idx = hit.where(pos, -1).max(-1)
      values = (idx.unsqueeze(-1) == ar).where(x.unsqueeze(-2), _zero(x.dtype)).sum(-1).cast(x.dtype)
      return values.cast(self.dtype).movedim(-1, d), idx.movedim(-1, d)
    idx = Tensor.arange(n, device=self.device, dtype=idt).reshape((1,) * (x.ndim - 1) + (n,)).expand(x.shape)
    for s in x._scan_steps():
      px, pi = x._shift_last(s, fill), idx._shift_last(s, 0)
      better = (px > x) if largest else (px < x)  # the earlier one wins only if strictly better
      if dtypes.is_float(x.dtype):
        better = better | (px.isnan() & x.isnan().logical_not())
      x, idx = _stage(better.where(px, x)), better.where(pi, idx).contiguous()
    return x.cast(self.dtype).movedim(-1, d), idx.movedim(-1, d)

  def cummax(self: Tensor, dim: int) -> tuple[Tensor, Tensor]:  # type: ignore[misc]
    """(values, indices): the running maximum along `dim` and where it was (the last of equal maxima), as torch."""
    return self._cum_extreme(dim, largest=True)

  def cummin(self: Tensor, dim: int) -> tuple[Tensor, Tensor]:  # type: ignore[misc]
    return self._cum_extreme(dim, largest=False)

  # ---------- scatter and index updates ----------
  def _scatter_parts(self: Tensor, dim: int, index: Tensor, src: Tensor | Any, name: str) -> tuple[int, Tensor, Tensor]:  # type: ignore[misc]
    """Check scatter's arguments; the axis, the one-hot of index along it (index.shape + (size of dim,)), and src
    cut to index's shape in self's dtype."""
    from tg.tensor import Tensor, _concrete
    d = self._dim(dim)
    if dtypes.is_float(index.dtype) or index.dtype == dtypes.bool:
      raise DTypeError(f"{name}: index must be an integer tensor, got {index.dtype}")
    if index.ndim != self.ndim:
      raise ShapeError(f"{name}: index has {index.ndim} dims, self {self.ndim}")
    ishape = tuple(_concrete(s) for s in index.shape)
    if any(i > _concrete(s) for k, (i, s) in enumerate(zip(ishape, self.shape)) if k != d):
      raise ShapeError(f"{name}: index shape {index.shape} is larger than self {self.shape} outside dim {d}")
    if isinstance(src, Tensor):
      if src.ndim != self.ndim or any(i > _concrete(s) for i, s in zip(ishape, src.shape)):
        raise ShapeError(f"{name}: index shape {index.shape} is larger than src {src.shape}")
      src = src.shrink(tuple((0, i) for i in ishape)).cast(self.dtype)
    else:
      src = Tensor.full(ishape, src, dtype=self.dtype, device=self.device)
    n = _concrete(self.shape[d]) if self.ndim else 1
    hot = index.reshape(ishape + (1,)) == Tensor.arange(n, device=self.device, dtype=index.dtype)
    # an index outside [0, n) matches no position and wrote nowhere: raise as torch (and gather) do, no negatives
    _range_guard([hot], index, 0, n, _bounds_error(d, n, name))
    return d, hot, src

  def _scattered(self: Tensor, d: int, t: Tensor) -> Tensor:  # type: ignore[misc]
    """A reduction over index's `d` with the target axis last (index.shape without d + (n,)) as self's layout: the
    target axis back at d and the other axes padded to self's sizes (with zeros: the written mask hides them)."""
    from tg.tensor import _concrete
    if self.ndim == 0:
      return t.reshape(())
    t = t.movedim(-1, d)
    return t.pad(tuple(None if k == d else (0, _concrete(s) - _concrete(i)) for k, (s, i) in enumerate(zip(self.shape, t.shape))))

  def scatter(self: Tensor, dim: int, index: Tensor, src: Tensor | Any = None, value: Any = None,  # type: ignore[misc]
              reduce: str | None = None) -> Tensor:
    """out[index[i][j]][j] = src[i][j] for dim=0 (torch.scatter); src may be a number (or give `value=`).
    reduce="add"/"multiply" as torch's. Where an index repeats, the last write wins (torch leaves that undefined)."""
    from tg.tensor import Tensor, _concrete
    if src is None:
      if value is None:
        raise TgArgumentError("scatter needs src (a tensor or a number) or value")
      src = value
    if reduce is not None:
      if reduce not in ("add", "multiply"):
        raise TgArgumentError(f"scatter: reduce must be 'add' or 'multiply', got {reduce!r}")
      return self.scatter_reduce(dim, index, src if isinstance(src, Tensor) else Tensor.full(index.shape, src, dtype=self.dtype, device=self.device),
                                 "sum" if reduce == "add" else "prod")
    d, hot, s = self._scatter_parts(dim, index, src, "scatter")
    if _concrete(index.numel()) == 0:
      return self
    if self.ndim == 0:
      return hot.reshape(()).where(s, self)
    # keep only the last write to each position: its index along d is the largest among the writes
    m = _concrete(hot.shape[d])
    pos = Tensor.arange(m, device=self.device).reshape(tuple(m if k == d else 1 for k in range(hot.ndim)))
    last = hot.where(pos, -1).max(d, keepdim=True)
    hot_last = hot & (pos == last)
    written = self._scattered(d, hot.any(d))
    picked = self._scattered(d, hot_last.where(s.unsqueeze(-1), _zero(self.dtype)).sum(d).cast(self.dtype))
    return written.where(picked, self)

  def scatter_add(self: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:  # type: ignore[misc]
    """self with src added at index along dim (torch.scatter_add); repeated indices add up."""
    return self.scatter_reduce(dim, index, src, "sum")

  def scatter_reduce(self: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, include_self: bool = True) -> Tensor:  # type: ignore[misc]
    """Reduce the src values scattered to each position with "sum", "prod", "mean", "amax" or "amin", together with
    self's value there unless include_self is False; positions nothing is scattered to keep self (torch's).
    The integer mean rounds down, as torch's."""
    if reduce not in ("sum", "prod", "mean", "amax", "amin"):
      raise TgArgumentError(f"scatter_reduce: reduce must be sum, prod, mean, amax or amin, got {reduce!r}")
    from tg.tensor import _concrete
    d, hot, s = self._scatter_parts(dim, index, src, "scatter_reduce")
    dt = self.dtype
    if _concrete(index.numel()) == 0:
      return self
    if self.ndim == 0:
      hot, s = hot.reshape(1, 1), s.reshape(1)
    sv = s.unsqueeze(-1)
    count = self._scattered(d, hot.sum(d if self.ndim else 0))
    written = count > 0
    if reduce in ("sum", "mean"):
      acc = self._scattered(d, hot.where(sv, _zero(dt)).sum(d if self.ndim else 0).cast(dt))
      if include_self:
        acc = acc + self
      if reduce == "sum":
        return written.where(acc, self).cast(dt)
      cnt = (count + 1 if include_self else count).cast(dt)
      mean = acc.floordiv(written.where(cnt, 1)) if not dtypes.is_float(dt) else acc / written.where(cnt, 1)
      return written.where(mean, self).cast(dt)
    if reduce == "prod":
      acc = self._scattered(d, hot.where(sv, 1).prod(d if self.ndim else 0).cast(dt))
      return written.where(acc * self if include_self else acc, self).cast(dt)
    largest, ax = reduce == "amax", d if self.ndim else 0
    vals = hot.where(sv, dtypes.min(dt) if largest else dtypes.max(dt))
    if include_self:  # self as one more candidate along the reduced axis, so ties with it share the gradient as torch's
      own = self.reshape(1) if self.ndim == 0 else self.shrink(tuple(None if k == d else (0, i) for k, i in enumerate(hot.shape[:-1])))
      vals = vals.cat(own.movedim(d, -1).unsqueeze(ax), dim=ax)
    ext = vals.max(ax) if largest else vals.min(ax)
    return written.where(self._scattered(d, ext.cast(dt)), self).cast(dt)

  def index_select(self: Tensor, dim: int, index: Tensor) -> Tensor:  # type: ignore[misc]
    """The entries at `index` (1-d) along `dim` (torch.index_select)."""
    d, _, hot = self._index_hot(dim, index, "index_select")  # (m, n)
    if self.ndim == 0:
      return self
    x = self.movedim(d, -1).unsqueeze(-2)  # (..., 1, n)
    return hot.where(x, _zero(self.dtype)).sum(-1).cast(self.dtype).movedim(-1, d)

  def _index_hot(self: Tensor, dim: int, index: Tensor, name: str, from_end: bool = False) -> tuple[int, int, Tensor]:  # type: ignore[misc]
    """Check a 1-d index of positions along `dim` (negative ones counted from the end with `from_end`); the axis,
    len(index), and its one-hot (len(index), size of dim). An index out of range raises when the result is realized
    (it matched nothing: wrote nowhere)."""
    from tg.tensor import Tensor, _concrete
    d = self._dim(dim)
    if index.ndim > 1 or dtypes.is_float(index.dtype) or index.dtype == dtypes.bool:
      raise TgArgumentError(f"{name}: index must be a 0-d or 1-d integer tensor, got {index.dtype} of shape {index.shape}")
    m, n = _concrete(index.numel()), _concrete(self.shape[d]) if self.ndim else 1
    lo = -n if from_end and not dtypes.is_unsigned(index.dtype) else 0
    at = (index < 0).where(index + n, index) if lo else index
    hot = at.reshape(m, 1) == Tensor.arange(n, device=self.device, dtype=index.dtype).reshape(1, n)
    _range_guard([hot], index, lo, n, _bounds_error(d, n, "" if lo else name))
    return d, m, hot

  def _index_write(self: Tensor, dim: int, index: Tensor, source: Tensor, name: str) -> Tensor | None:  # type: ignore[misc]
    """index_add's sum or index_copy's last write of source's rows at index along dim, as rows written
    (tensor_scatter), where a one-hot sum searched every index for each element of self. None for symbolic sizes
    (the one-hot sum then writes). The value is computed from detached inputs: the caller gives its gradient."""
    from tg.tensor import _index_dtype
    d, m, _ = self._index_hot(dim, index, name)  # (the checks)
    self._index_source(d, m, source, name)
    if not all(isinstance(x, int) for x in (*self.shape, m)):
      return None
    n = self.shape[d]
    assert isinstance(n, int) and isinstance(m, int)
    moved = self.detach().movedim(d, 0)
    rows = _selectable(source.detach().cast(self.dtype).movedim(d, 0).reshape(m, prod(moved.shape[1:])))
    pos = index.reshape(m).cast(_index_dtype(n, self.device))
    if name == "index_add":
      written = row_sums(rows, pos, n)
    else:
      last = last_token(pos, n)
      written = (last >= 0).reshape(n, 1).where(rows_at(last, rows), moved.reshape(n, rows.shape[1]))
    out = written.cast(self.dtype).reshape(moved.shape).movedim(0, d)
    _range_guard([out], index, 0, n, _bounds_error(d, n, name))  # (the value no longer reads the one-hot's check)
    return out

  def _index_source(self: Tensor, d: int, m: int, source: Tensor, name: str) -> Tensor:  # type: ignore[misc]
    """source checked to be self's shape with m at d, in self's dtype, with d moved last and a size-1 axis after it."""
    want = tuple(m if k == d else s for k, s in enumerate(self.shape))
    if source.shape != want:
      raise ShapeError(f"{name}: source shape {source.shape} should be {want} (self's, with {m} = len(index) at dim {d})")
    return source.cast(self.dtype).movedim(d, -1).unsqueeze(-1)  # (..., m, 1)

  def _along(self: Tensor, d: int, t: Tensor) -> Tensor:  # type: ignore[misc]
    """A (size of dim d,) tensor shaped to broadcast along axis d of self."""
    return t.reshape(t.shape + (1,) * (self.ndim - d - 1))

  def index_add(self: Tensor, dim: int, index: Tensor, source: Tensor, alpha: Any = 1) -> Tensor:  # type: ignore[misc]
    """self with alpha * source[..., i, ...] added at index[i] along `dim` (torch.index_add); repeats add up."""
    if self.ndim == 0:
      return self + self._index_hot(dim, index, "index_add")[2].any() * alpha * source.reshape(()).cast(self.dtype)
    if (added := self._index_write(dim, index, source, "index_add")) is not None:
      d = self._dim(dim)
      value = (self.detach() + (added * alpha if alpha != 1 else added)).cast(self.dtype)
      return _with_vjp(value, [self, source], lambda g: [g, (g.index_select(d, index) * alpha).cast(source.dtype)])
    d, m, hot = self._index_hot(dim, index, "index_add")
    s = self._index_source(d, m, source, "index_add")
    added = hot.where(s, _zero(self.dtype)).sum(-2).cast(self.dtype).movedim(-1, d)
    return (self + (added * alpha if alpha != 1 else added)).cast(self.dtype)

  def index_copy(self: Tensor, dim: int, index: Tensor, source: Tensor) -> Tensor:  # type: ignore[misc]
    """self with source[..., i, ...] written at index[i] along `dim` (torch.index_copy); where an index repeats, the
    last write wins (torch leaves that undefined)."""
    from tg.tensor import Tensor
    if self.ndim == 0:
      return self._index_hot(dim, index, "index_copy")[2].any().where(source.reshape(()).cast(self.dtype), self)
    if (copied := self._index_write(dim, index, source, "index_copy")) is not None:
      d = self._dim(dim)

      def vjp(g: Tensor) -> list[Tensor]:  # as torch: every row of source gets its target's gradient, repeats too
        kept = self._along(d, self._index_hot(dim, index, "index_copy")[2].any(0)).where(_zero(g.dtype), g)
        return [kept, g.index_select(d, index).cast(source.dtype)]
      return _with_vjp(copied, [self, source], vjp)
    d, m, hot = self._index_hot(dim, index, "index_copy")
    s = self._index_source(d, m, source, "index_copy")
    if m == 0:
      return self
    row = Tensor.arange(m, device=self.device).reshape(m, 1)
    last = hot & (row == hot.where(row, -1).max(0, keepdim=True))  # the last i writing each position
    picked = last.where(s, _zero(self.dtype)).sum(-2).cast(self.dtype).movedim(-1, d)
    return self._along(d, hot.any(0)).where(picked, self)

  def index_fill(self: Tensor, dim: int, index: Tensor, value: Tensor | Any) -> Tensor:  # type: ignore[misc]
    """self with `value` (a number or 0-d tensor) at the positions `index` along `dim` (torch.index_fill)."""
    from tg.tensor import Tensor
    d, _, hot = self._index_hot(dim, index, "index_fill", from_end=True)  # (torch's index_fill alone counts from the end)
    v = value.cast(self.dtype) if isinstance(value, Tensor) else Tensor.full((), value, device=self.device).cast(self.dtype)
    return (hot.any() if self.ndim == 0 else self._along(d, hot.any(0))).where(v, self)

  def take_along_dim(self: Tensor, indices: Tensor, dim: int | None = None) -> Tensor:  # type: ignore[misc]
    """gather along `dim` with self and indices broadcast against each other outside it (torch.take_along_dim);
    without dim, both are flattened."""
    from tg.tensor import _broadcast_shape
    if dim is None:
      return self.flatten().gather(0, indices.flatten())
    d = self._dim(dim)
    if indices.ndim != self.ndim:
      raise ShapeError(f"take_along_dim: indices have {indices.ndim} dims, self {self.ndim}")
    outside = _broadcast_shape(*(tuple(1 if k == d else s for k, s in enumerate(t.shape)) for t in (self, indices)))
    x = self.expand(tuple(self.shape[d] if k == d else s for k, s in enumerate(outside)))
    return x.gather(d, indices.expand(tuple(indices.shape[d] if k == d else s for k, s in enumerate(outside))))

  def masked_fill(self: Tensor, mask: Tensor, value: Tensor | Any) -> Tensor:  # type: ignore[misc]
    """`value` where mask is True, self elsewhere; mask broadcasts with self. The result keeps self's dtype (a float
    value into an int tensor is truncated, as torch; tinygrad 0.9.1 made it float). `value` is a number or a tensor,
    which gets the gradient of the filled places; torch takes only a 0-d one, tinygrad any that broadcasts, as here."""
    from tg.tensor import Tensor
    if isinstance(value, Tensor):
      v = value.cast(self.dtype)
    else:
      v = Tensor.full((), value, device=self.device).cast(self.dtype)
    return mask.cast(dtypes.bool).where(v, self)

  # in place, as torch's trailing-underscore methods: the result is assigned to this tensor
  def scatter_(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:  # type: ignore[misc]
    return self.assign(self.scatter(*args, **kwargs))

  def scatter_add_(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:  # type: ignore[misc]
    return self.assign(self.scatter_add(*args, **kwargs))

  def scatter_reduce_(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:  # type: ignore[misc]
    return self.assign(self.scatter_reduce(*args, **kwargs))

  def index_add_(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:  # type: ignore[misc]
    return self.assign(self.index_add(*args, **kwargs))

  def index_copy_(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:  # type: ignore[misc]
    return self.assign(self.index_copy(*args, **kwargs))

  def index_fill_(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:  # type: ignore[misc]
    return self.assign(self.index_fill(*args, **kwargs))

  def masked_fill_(self: Tensor, mask: Tensor, value: Tensor | Any) -> Tensor:  # type: ignore[misc]
    return self.assign(SelectMixin.masked_fill(self, mask, value)._broadcast_to(self.shape))

  # ---------- counting and searching ----------
  def nonzero(self: Tensor, as_tuple: bool = False) -> Tensor | tuple[Tensor, ...]:  # type: ignore[misc]
    """The indices of the non-zero elements (NaN counts) in row-major order: (count, ndim), or one (count,) tensor per
    axis with as_tuple=True (torch.nonzero). The count depends on the data, so it is read back once (a sync: not
    jittable). The k-th non-zero is found by comparing the running count with k: O(count * numel) work."""
    from tg.tensor import Tensor, _concrete
    n, idt = _concrete(self.numel()), dtypes.int32
    if n == 0:
      return tuple(Tensor.zeros(0, dtype=idt, device=self.device) for _ in range(self.ndim)) if as_tuple else \
        Tensor.zeros(0, self.ndim, dtype=idt, device=self.device)
    flat = (self != _zero(self.dtype)).reshape(n)
    count = int(flat.sum().item())
    rank = flat.cast(idt).cumsum(0) - 1
    hot = flat & (rank == Tensor.arange(count, device=self.device, dtype=idt).reshape(count, 1))  # (count, n)
    pos = hot.where(Tensor.arange(n, device=self.device, dtype=idt), 0).sum(1, acc_dtype=idt)  # flat index of each
    cols, stride = [], 1
    for k, s in enumerate(reversed(self.shape)):
      c = pos.idiv(stride) if stride > 1 else pos
      cols.append(c % _concrete(s) if k < self.ndim - 1 else c)
      stride *= _concrete(s)
    cols = cols[::-1]
    if as_tuple:
      return tuple(cols) if cols else (Tensor.zeros(count, dtype=idt, device=self.device),)
    return Tensor.stack(cols, dim=1) if cols else Tensor.zeros(count, 0, dtype=idt, device=self.device)

  def argwhere(self: Tensor) -> Tensor:  # type: ignore[misc]
    return self.nonzero()  # type: ignore[return-value]

  def bincount(self: Tensor, weights: Tensor | None = None, minlength: int = 0) -> Tensor:  # type: ignore[misc]
    """How often each value 0..max occurs in a 1-d tensor of non-negative ints (the sum of `weights` there).

    The length max(self)+1 depends on the data, so the max is read back (one sync: not jittable). Counts have sum's
    dtype (int64 where the device has it); weights keep their float dtype, int weights give the default float."""
    from tg.tensor import Tensor, _concrete
    if self.ndim != 1:
      raise ShapeError(f"bincount takes a 1-d tensor, got shape {self.shape}")
    if dtypes.is_float(self.dtype) or self.dtype == dtypes.bool:
      raise DTypeError(f"bincount takes integers, got {self.dtype}")
    if minlength < 0:
      raise TgArgumentError(f"bincount: minlength must be non-negative, got {minlength}")
    m = _concrete(self.shape[0])
    if weights is not None and weights.shape != self.shape:
      raise ShapeError(f"bincount: weights shape {weights.shape} should be {self.shape}")
    length = minlength
    if m:
      hi, lo = Tensor.stack([self.max(), self.min()]).tolist()
      if lo < 0:
        raise TgArgumentError(f"bincount takes non-negative values, got {lo}")
      length = max(length, int(hi) + 1)
    hot = self.reshape(m, 1) == Tensor.arange(length, device=self.device, dtype=self.dtype).reshape(1, length)
    if weights is None:
      return hot.sum(0)
    w = weights if dtypes.is_float(weights.dtype) else weights.cast(dtypes.default_float)
    return hot.where(w.reshape(m, 1), 0.0).sum(0)

  def searchsorted(self: Tensor, values: Tensor | Any, *, out_int32: bool = False, right: bool = False,  # type: ignore[misc]
                   side: str | None = None) -> Tensor:
    """For each of `values`, the index in this sorted sequence (its last axis) where it would be inserted to keep
    the order: before equal elements, or after them with right=True / side="right" (torch.searchsorted, called as
    `sorted_sequence.searchsorted(values)` or `Tensor.searchsorted(sorted_sequence, values)`). NaN counts as the
    largest value. Each value is compared with every element: O(len) work, no binary search."""
    from tg.tensor import Tensor, _concrete, _index_dtype
    if side is not None:
      if side not in ("left", "right") or (side == "left" and right):
        raise TgArgumentError(f"searchsorted: side must be 'left' or 'right' and agree with right={right}, got {side!r}")
      right = side == "right"
    if self.ndim == 0:
      raise ShapeError("searchsorted needs a sorted sequence of at least 1 dimension, got a 0-d tensor")
    scalar = not isinstance(values, Tensor)
    v = values if isinstance(values, Tensor) else Tensor.full((), values, device=self.device)
    if self.ndim > 1 and (v.ndim != self.ndim or v.shape[:-1] != self.shape[:-1]):
      raise ShapeError(f"searchsorted: values {v.shape} and the sorted sequence {self.shape} differ outside the last dim")
    if scalar and self.ndim > 1:
      raise ShapeError("searchsorted: a number as value needs a 1-d sorted sequence")
    seq = self.unsqueeze(-2) if self.ndim > 1 else self  # (..., 1, M) against (..., K, 1)
    vv = v.unsqueeze(-1)
    if right:
      before = (seq <= vv) | vv.isnan() if dtypes.is_float(vv.dtype) or dtypes.is_float(seq.dtype) else seq <= vv
    else:
      before = (seq < vv) | (vv.isnan() & seq.isnan().logical_not()) if dtypes.is_float(vv.dtype) or dtypes.is_float(seq.dtype) else seq < vv
    idt = dtypes.int32 if out_int32 else _index_dtype(_concrete(self.shape[-1]), self.device)
    return before.cast(idt).sum(-1, acc_dtype=idt)
