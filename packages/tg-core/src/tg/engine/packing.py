"""Packed operands for large matmul-like sums: a rewrite of the lazy graph, made just before it is scheduled.

Building the graph only notes the candidates (`tg.lazy.pack_candidates`: a SUM over a MUL of at least
`tg.lazy.PACK_MIN_MACS_LAYOUT` multiply-adds, with PACK on), asking no device anything. Here each candidate's device's
renderer decides: with `Renderer.matmul_panel` p > 1, a sum of at least `tg.lazy.PACK_MIN_MACS` products, one of
`PACK_MIN_MACS_LONG` with an operand whose reads along the reduction span the device's L2 (`_reduce_span`), or one
of `PACK_MIN_MACS_LAYOUT` over a short reduction both operands are contiguous along (`_short_dot`), reads each operand
that has an output axis of its own from a copy of it laid out in panels along that axis (see `packed_product`), so
that the register tile reads one sequential stream; an operand read through a padding that isn't packed (a conv's
image) is read from a copy of its padded region, with no masks. In any candidate, an operand read through a view with
no plain strides along the reduction (a transposed attention output, heads x positions read as positions x features)
and not packed is read from a plain copy of that view (`_plain`). The copies are ordinary kernels (CONTIGUOUS)
of the same schedule.

It runs before the schedule cache computes the graph's structure: a graph built again the same way is rewritten the
same way, so its structure, and the plan found for it, include the packing copies.
"""
from __future__ import annotations

import weakref

import tg.lazy
from tg.codegen.heuristics.cpu import row_padding
from tg.device import Device
from tg.helpers import prod
from tg.lazy import LazyBuffer, add_reader, pack_candidates
from tg.ops import BinaryOps, ReduceOps, TernaryOps, UnaryOps
from tg.shape.shapetracker import ShapeTracker

# a padded operand is read from a copy of its padded region (see _unpadded) only while that copy holds at most this many
# times the elements the padding surrounds: a conv's padding of 1 around 56 x 56 is 1.07
MAX_PADDED_COPY = 2


def pack_noted() -> None:
  """Rewrite every sum noted since the last call whose device packs, and which is still to be scheduled."""
  while pack_candidates:
    r = pack_candidates.pop()
    if r.op is not ReduceOps.SUM:  # scheduled already (or realized): nothing to rewrite
      continue
    if (packed := packed_product(r.srcs[0], r.arg)) is not None:
      r.srcs = (packed,)
      add_reader(packed, weakref.ref(r))


def _panels(x: LazyBuffer, own: int, p: int, axis: tuple[int, ...], padded: int) -> LazyBuffer:
  """x, an operand of a matmul-like sum over `axis`, copied with its `own` axis split into blocks of p and the p moved
  innermost (A (M, K) is stored as (M/p, K, p)), without the axes it is broadcast along; returned as a view of x's
  shape. The block index goes before the reduce axes where they come first (a weight gradient's sum over the batch
  and time axes of (B, T, M, N)): each panel is one run of K x p, not p elements of every row of K. An `own` axis of fewer
  than `padded` elements (a multiple of p, see _panel_rows) is padded with zeros to it, the view reading only its real
  rows."""
  if (base := x.base).realized is None and isinstance(base.op, (UnaryOps, BinaryOps, TernaryOps)):
    # computed first in its own layout (its buffer, read by the copy), not inside the copy: fused into it, a producer's
    # math (a LayerNorm's backward, 60 inputs) runs in the panel order, its inputs gathered across rows a few lanes at
    # a time (a char-level GPT's gradient panels: 2-4 ms each instead of 0.3)
    base.contiguous()
  compact = _compact(x)
  if (size := compact.shape[own]) != padded:
    compact = compact.pad(tuple((0, padded - size) if i == own else (0, 0) for i in range(len(compact.shape))))
  split = compact.shape[:own] + (padded // p, p) + compact.shape[own + 1:]
  rest = [i for i in range(len(split)) if i not in (own, own + 1)]
  first = min(axis)  # (an index below `own` is the same in `split`)
  at = rest.index(first) if first < own else next((j for j, i in enumerate(rest) if i > own), len(rest))
  order = tuple(rest[:at] + [own] + rest[at:]) + (own + 1,)
  packed = compact.reshape(split).permute(order).contiguous()
  back = packed.permute(tuple(order.index(i) for i in range(len(order)))).reshape(compact.shape)
  if padded != size:
    back = back.shrink(tuple((0, size) if i == own else (0, n) for i, n in enumerate(back.shape)))
  return back.expand(x.shape)


def _panel_rows(size: int, q: int, rows: bool) -> int | None:
  """The rows of a copy of an operand's `own` axis of `size` in panels of q (at least two panels): `size` where q divides
  it; else, for the register tile's rows (`rows`), which it pads (codegen/heuristics/cpu.py `tile_rows`), the size the
  tile pads it to (`row_padding`: 512 rows to 516 for AVX2's 6, 256 to 264), so that every row the tile reads, padded
  or not, lies in the copy and a row's index needs no wrap-around; None where neither holds."""
  if size < 2 * q:
    return None
  if size % q == 0:
    return size
  multiples = row_padding(size, q) if rows else ()
  return -(-size // multiples[0]) * multiples[0] if multiples else None


def _unpadded(x: LazyBuffer) -> LazyBuffer | None:
  """x, an operand read through a padding (a view with a mask: a conv's padded image), as the same view of a copy of the
  padded region, so that the sum's kernel reads it with no mask; None when x has no mask, or the copy would be large.

  A masked read is a select in the innermost loop, on every load of the operand: a CPU can't keep such an operand in a
  broadcast register tile (measured on bench/'s 3x3 conv, one thread of a Zen 3 EPYC: 46 GFLOP/s masked, 74 from a
  padded copy, which costs one pass over the image). The copy is the masked view's own shape without the axes it
  broadcasts along (a pooled image repeats the padded image along its window axes), those broadcast again after it,
  then the views above the masked one as they were."""
  views = x.st.views
  last = max((i for i, v in enumerate(views) if v.mask is not None), default=None)
  if last is None or not all(isinstance(s, int) for v in views for s in v.shape):
    return None
  v = views[last]
  assert v.mask is not None
  if any(st == 0 and (lo, hi) != (0, n) for st, n, (lo, hi) in zip(v.strides, v.shape, v.mask)):
    return None  # a broadcast axis cut by the mask: its copies differ, one copy of it would not do
  region = tuple((0, 1) if st == 0 else (0, n) for st, n in zip(v.strides, v.shape))
  valid = prod(hi - lo for st, (lo, hi) in zip(v.strides, v.mask) if st != 0)
  if prod(hi for _, hi in region) > MAX_PADDED_COPY * max(1, valid):  # type: ignore[operator]
    return None
  copy = x.base._view(ShapeTracker(views[:last + 1])).shrink(region).contiguous().expand(v.shape)
  return copy._view(copy.st + ShapeTracker(views[last + 1:]))


def _window_copy(x: LazyBuffer, axis: tuple[int, ...]) -> bool:
  """x reads some of its elements more than once along the sum's output and reduce axes (a conv's image: a sliding
  window, its output columns and window columns stepping through the same memory). A panel copy of it would store every
  window apart, an im2col of (window) times the image's size; reading it in place reads each element from cache."""
  reads = prod(s for s, st in zip(x.shape, x.st.real_strides()) if st != 0)
  return bool(reads > x.base.st.size)  # type: ignore[operator]


def _reduce_span(x: LazyBuffer, axis: tuple[int, ...]) -> int | None:
  """The bytes x's reads span along the reduction `axis` (None: its view has no plain strides there). A register tile
  reads a strip of an operand one element (or vector) per step of the reduction and sweeps the same strip for the
  next tile; its steps a row apart map to few cache sets, and a strip spanning S bytes of rows R bytes apart keeps
  only L2 / R of its K lines in an L2 of power-of-two sets (2 KB rows: 256 on a 512 KiB L2, 1024 on a 2 MiB one):
  spanning the L2 (K x R >= L2), the strip is read from L3 on every sweep. Measured, the kernel alone, 2 threads of
  an AVX-512 Xeon (2 MiB L2): 128 x K by K x 512 unpacked K=512 310 GFLOP/s, 1024 150, 2048 142, packed 303 and 325;
  a 2-core Zen 3 EPYC (512 KiB L2), (256 x 512) @ (512 x 512) 1192 -> 878 us packed."""
  strides = x.st.real_strides()
  if any(strides[a] is None for a in axis):
    return None
  return x.dtype.itemsize * max(x.shape[a] * abs(strides[a]) for a in axis)  # type: ignore[operator,arg-type,type-var]


# the longest contraction (in bytes of each operand's run) that a CPU packs though it is small and both operands are
# contiguous along it (see _short_dot)
SHORT_DOT_BYTES = 1024


def _short_dot(mul: LazyBuffer, axis: tuple[int, ...]) -> bool:
  """Both operands are contiguous along the one reduce axis, of at most SHORT_DOT_BYTES (q @ k.T: K = 64 floats). A CPU
  computes such a sum unpacked as dot products (codegen/heuristics/cpu.py `apply_dot_tile`): a vector accumulator per
  output whose lanes are added up after K / lanes steps, which for a short K is about as much work as the steps. With
  the operand of the inner output axis packed in panels, the register tile broadcasts the other instead. Measured on a
  2-core Zen 3 EPYC (AVX2), (12 x 256 x K) @ (12 x K x 256).T, the kernels summed: K = 32 1158 -> 726 us, 64 1648 -> 1051,
  128 2413 -> 1981, 256 3918 -> 3464, the copy included; at K = 784 (the MLP's x @ W.T) about the same either way."""
  if len(axis) != 1:
    return False
  a, size = axis[0], mul.shape[axis[0]]
  return isinstance(size, int) and all(x.st.real_strides()[a] == 1 for x in mul.srcs) and \
    size * max(x.dtype.itemsize for x in mul.srcs) <= SHORT_DOT_BYTES


def _compact(x: LazyBuffer) -> LazyBuffer:
  """x without the axes it is broadcast along (each shrunk to one element): what a copy of it needs to store."""
  return x.shrink(tuple((0, 1) if st == 0 else (0, s) for s, st in zip(x.shape, x.st.real_strides())))


def _plain(x: LazyBuffer, axis: tuple[int, ...]) -> LazyBuffer:
  """x, or x read from a contiguous copy of its view when the view has no plain strides along the reduction `axis`
  and reads no element twice (`_window_copy`): the positions x features matrix of a transposed attention output,
  whose rows are runs of 64 floats 64 KB apart, becomes plain rows (the GPT-2 block's output projection, 256 x 768 by
  768 x 768, on a 2-core Zen 3 EPYC: 5.1 -> 2.5 ms, the copy included)."""
  if _reduce_span(x, axis) is not None or _window_copy(x, axis):
    return x
  return _compact(x).contiguous().expand(x.shape)


def packed_product(mul: LazyBuffer, axis: tuple[int, ...]) -> LazyBuffer | None:
  """`mul`, the product summed over `axis` by a large matmul-like sum (a matmul, a conv) on a device that packs, computed
  from copies of its operands laid out in panels; None when nothing is packed. An operand's own axes are the output axes
  it moves along and the other operand is broadcast on (A's rows, B's columns, a conv weight's output channels); p of
  the innermost one at a time become the operand's innermost axis, after the reduce axes, so that a register tile p
  wide reads it as one sequential stream (p is Renderer.matmul_panel for the tile's vector side, matmul_panel_rows for
  its rows). An operand is packed when that axis is a multiple of its p, or is the tile's rows and a little padding
  makes it one (`_panel_rows`; at least two panels either way), its view has plain
  strides once its padding is taken off (`_unpadded`), and it reads no element twice (`_window_copy`). An operand that
  isn't packed is read from its padded copy (`_unpadded`), if it has one."""
  renderer = Device[mul.device].renderer
  p = renderer.matmul_panel if renderer is not None else 0
  if p < 2 or mul.op is not BinaryOps.MUL or not all(isinstance(s, int) for s in mul.shape):
    return None
  if any(all(st[k] == 0 for k in axis) for st in (s.st.real_strides() for s in mul.srcs)):
    return None  # an operand that doesn't move along the reduction: not a contraction
  l2 = renderer.cpu_target.l2_bytes if renderer is not None and renderer.cpu_target is not None else None
  macs = prod(mul.shape)
  panels = macs >= tg.lazy.PACK_MIN_MACS or (l2 is not None and macs >= tg.lazy.PACK_MIN_MACS_LONG and any(
    (span := _reduce_span(x, axis)) is not None and span >= l2 for x in mul.srcs)) or (
    l2 is not None and macs >= tg.lazy.PACK_MIN_MACS_LAYOUT and _short_dot(mul, axis))
  if not panels:  # (a padded copy too is only for the sums that get panels)
    out = [_plain(x, axis) for x in mul.srcs]
    return None if out == list(mul.srcs) else out[0].e(BinaryOps.MUL, out[1])
  srcs = tuple(_unpadded(x) or x for x in mul.srcs)
  strides = [s.st.real_strides() for s in srcs]
  owns, packable = [], []
  for mine, other in ((strides[0], strides[1]), (strides[1], strides[0])):
    own = [i for i in range(len(mul.shape)) if i not in axis and mine[i] != 0 and other[i] == 0]
    owns.append(own[-1] if own else -1)
    packable.append(bool(own) and None not in mine)
  packable = [can and not _window_copy(x, axis) for x, can in zip(srcs, packable)]
  # the operand along the output's innermost own axis (B's columns) is the register tile's vector side, panels of p;
  # the other (A's rows) its broadcast rows, panels of matmul_panel_rows. An operand packed alone (a conv's weight:
  # its image, a sliding window, isn't) is the vector side
  assert renderer is not None
  rows = renderer.matmul_panel_rows or p
  panel = [p, p] if not all(packable) else [p if owns[0] > owns[1] else rows, p if owns[1] > owns[0] else rows]
  # the tile's rows may be padded to fill their panels (_panel_rows; not columns, which would be vector lanes of every
  # store) where the other operand's panel, one run over the whole reduction, stays in the L1 from one row tile to the
  # next: then the rows' reads are what the copy speeds up. Measured on a 2-core Zen 3 EPYC (AVX2, 32 KiB L1d, panels
  # of 8 floats), dy.T @ x with 512 rows padded to 516: a 256-long reduction (8 KiB panels) 2.49 -> 2.08 ms, the copy
  # included; a 2048-long one (64 KiB panels, streamed from the L2 either way) no faster, its copy 0.7-1.2 ms more; a
  # 1024 matmul (1026 rows, 32 KiB panels) 15.8-16.0 -> 15.3-15.4 ms
  l1 = renderer.cpu_target.l1d_bytes if renderer.cpu_target is not None else 0
  pad_rows = all(packable) and rows != p and prod(mul.shape[a] for a in axis) * p * max(x.dtype.itemsize for x in mul.srcs) <= l1
  out = []
  for x, read, own_axis, can, q in zip(mul.srcs, srcs, owns, packable, panel):
    size = mul.shape[own_axis] if own_axis >= 0 else 0
    padded = _panel_rows(size, q, rows=pad_rows and q == rows) if can else None  # type: ignore[arg-type]
    # a panel copy is read without masks already: it is made from the operand as it was, padding and all
    out.append(_panels(x, own_axis, q, axis, padded) if padded is not None else _plain(read, axis))
  return None if out == list(mul.srcs) else out[0].e(BinaryOps.MUL, out[1])
