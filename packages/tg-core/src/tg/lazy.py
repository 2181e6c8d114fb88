"""LazyBuffer: a node of the lazy graph.

A LazyBuffer is either a *base* (an op with sources, which owns a Buffer once computed) or a *view*
of a base (a ShapeTracker over it; movement ops only ever make views). Nothing is computed until the
scheduler is handed a graph; operations on constants fold right here.
"""
from __future__ import annotations

import weakref
from typing import Any

from tg.codegen.lowerer import REDUCE_ALU
from tg.device import Buffer, Device
from tg.dtype import ConstType, DType, dtypes, round_f32
from tg.helpers import prod
from tg.ops import BinaryOps, MetaOps, Op, ReduceOps, TernaryOps, UnaryOps, exec_alu
from tg.settings import PACK, SPLIT_REDUCEOP, SPLIT_REDUCEOP_THRESHOLD
from tg.shape.shapetracker import ShapeTracker
from tg.shape.symbolic import NumNode, is_sym, sint
from tg.shape.view import View


def _max_size(shape: tuple[sint, ...]) -> int:
  """Elements a buffer of `shape` needs for every value of its variables (one buffer serves them all)."""
  return prod(s if isinstance(s, int) else s.max for s in shape)


def _store_view(st: ShapeTracker) -> ShapeTracker | None:
  """`st` as one View a STORE can write through: each element of the view at an address of its own, and only those
  (no padded region, no repeated stride-0 axis). A strided slice is a padded, reshaped and shrunk stack of Views that
  addresses a plain strided window: read off its index expression. None when it isn't one."""
  if len(st.views) > 1:
    if not st.concrete:
      return None
    idx, valid = st.expr_idxs()
    strides = st.real_strides()
    if valid.min != 1 or any(x is None for x in strides):
      return None
    offset = idx.substitute({v: NumNode(0) for v in idx.vars()})
    assert isinstance(offset, NumNode)
    st = ShapeTracker((View.create(st.shape, strides, offset.b),))  # type: ignore[arg-type]
  v = st.views[0]
  return st if v.mask is None and all(s == 1 or st_ != 0 for s, st_ in zip(v.shape, v.strides)) else None


def _same_where_valid(read: ShapeTracker, written: ShapeTracker) -> bool:
  """Whether a padded read of the target (`a + a.shrink(...).pad(...)`) reads, wherever it reads memory at all, the
  element the kernel writes there (what the pad adds is a constant): safe in the kernel that writes it, as tinygrad allows."""
  if len(read.views) != 1 or len(written.views) != 1 or (mask := read.views[0].mask) is None:
    return False
  return read.shrink(mask) == written.shrink(mask)


def _reads_through_view(x: LazyBuffer, target: LazyBuffer) -> bool:
  """Whether the kernel computing x would read `target` other than element for element. Views compose on the way down:
  `(a + 1).T` reads `a` transposed although `a + 1` reads it in order. A reduction, or a value that gets a kernel of its
  own (contiguous, a copy), is computed before the assign runs, so what it reads doesn't count."""
  buf, target_st = target.base.buffer, target.st
  # a node read element for element (most of an optimizer's update: long elementwise chains) is keyed by itself alone:
  # hashing a ShapeTracker per node cost more than the rest of the walk
  seen: set[int | tuple[int, ShapeTracker]] = set()
  stack: list[tuple[LazyBuffer, ShapeTracker | None]] = [(x, None)]
  while stack:
    v, top = stack.pop()
    b = v._base or v
    plain = top is None and v is b
    st = b.st if plain else v.st + top if top is not None else v.st
    if (key := id(b) if plain else (id(b), st)) in seen:
      continue
    seen.add(key)
    if b.buffer is buf:  # the target, or an earlier assign into the same memory
      if st != target_st and not _same_where_valid(st, target_st):
        return True
      continue
    if b.realized is None and not b.forced_realize and not isinstance(b.op, ReduceOps):
      # b read element for element puts no view on top of its sources': composing with the identity cost a
      # ShapeTracker add and simplify per node
      under = None if plain or (st.contiguous and st.shape == b.shape) else st
      stack.extend((s, under) for s in b.srcs)
  return False


# a matmul-like sum is computed from packed operands (Renderer.matmul_panel, engine/packing.py) from this many
# multiply-adds on: below it the operands stay in cache (measured on bench/gpt2_block.py: packing its 2**27-MAC matmuls too made it slower)
PACK_MIN_MACS = 1 << 28
# ... and from PACK_MIN_MACS_LONG on where engine/packing.py finds an operand whose reads along the reduction span the
# device's L2 or more (a weight gradient's sum over batch x time, rows 2 KB apart)
PACK_MIN_MACS_LONG = 1 << 26
# ... and from PACK_MIN_MACS_LAYOUT on where the operands' layout calls for it (engine/packing.py): a short contraction
# of two operands contiguous along it (attention scores q @ k.T, K = 64), which a CPU would compute as dot products,
# and an operand read through a view with no plain strides (a transposed attention output)
PACK_MIN_MACS_LAYOUT = 1 << 25
# elements per output that one kernel of a split reduction combines by default (LazyBuffer._tree_reduce): a float32
# sum's error grows with the length of its sequential chains of adds, which this bounds. A device whose kernels keep
# more or fewer independent accumulators declares its own (Renderer.reduce_leaf; CPU devices: tg.renderer.cpu.cpu_reduce_leaf)
SUM_LEAF = 8192
SUM_LAST = 256  # at most this many partials are left for the last kernel of a split reduction
RUNS_ALIGN = 32  # a split kernel's partials are a multiple of this many (see LazyBuffer._tree_reduce)
# sums of products of at least PACK_MIN_MACS_LAYOUT multiply-adds, noted as they are built (with PACK on): before a graph is
# scheduled, engine/packing.py asks each one's device how to lay its operands out. Building the graph asks no device.
pack_candidates: weakref.WeakSet[LazyBuffer] = weakref.WeakSet()


_SCALAR = ShapeTracker.from_shape(())
_const_views: dict[tuple[int, ...], ShapeTracker] = {}
_operands: dict[tuple[Any, ...], LazyBuffer] = {}  # (see LazyBuffer.operand)


def _const_view(shape: tuple[sint, ...]) -> ShapeTracker:
  """The view that broadcasts a scalar to `shape` (all strides 0)."""
  if (st := _const_views.get(shape)) is None:  # type: ignore[arg-type]
    st = _SCALAR.reshape((1,) * len(shape)).expand(shape)
    if all(type(s) is int for s in shape):  # a symbolic shape is never kept (see cached_when_concrete)
      if len(_const_views) >= 4096:
        _const_views.clear()
      _const_views[shape] = st  # type: ignore[index]
  return st


_VARIES = object()  # (LazyBuffer._fold: a source that is not one constant)
_FORCED = frozenset((MetaOps.EMPTY, MetaOps.CONTIGUOUS, MetaOps.COPY, MetaOps.ASSIGN))  # ops whose result always gets a buffer


def add_reader(base: LazyBuffer, ref: weakref.ref[LazyBuffer]) -> None:
  """Record `ref` as reading `base`. Dead references are dropped whenever the list doubles, so a long-lived base (a weight
  read by every step) keeps a list about as long as its live readers, at an amortized constant cost per add."""
  readers = base.readers
  readers.append(ref)
  if len(readers) > base._readers_kept:
    prune_readers(base)


def prune_readers(base: LazyBuffer) -> None:
  """Drop the dead references from `base.readers`; the list may then grow to twice its live length before the next."""
  readers = base.readers
  readers[:] = [r for r in readers if r() is not None]
  base._readers_kept = 2 * len(readers) + 8


def live_readers(base: LazyBuffer) -> list[LazyBuffer]:
  """The bases reading `base` that are still alive."""
  return [r for ref in base.readers if (r := ref()) is not None]


class LazyBuffer:
  _structure: tuple[Any, ...]  # a CONST base's part of a graph's structure, once worked out (engine/schedule_cache.py)
  # A Ctrl-C can land at any bytecode of __init__, and the half-made node's __del__ then runs at once: it must find
  # `_base`, and must count off only an owner that was counted on (so `buffer` is set after its count goes up)
  _base: LazyBuffer | None = None

  def __init__(self, device: str, st: ShapeTracker, dtype: DType, op: Op | None = None, arg: Any = None,
               srcs: tuple[LazyBuffer, ...] = (), base: LazyBuffer | None = None) -> None:
    self.device, self.st, self.dtype = device, st, dtype
    self.shape, self.size = st.views[-1].shape, st.size
    self._base = base
    if base is None:
      # the bases that read this one, weakly: an in-place assign must know whether anything unrealized still needs the
      # old value (views don't count: what reads a view reads its base). A list of weak references, not a WeakSet:
      # this runs for every op built, and a WeakSet's add costs a callback object and a set insert (see add_reader)
      self.readers: list[weakref.ref[LazyBuffer]] = []
      self._readers_kept = 8
      ref = weakref.ref(self)
      for s in srcs:  # (add_reader, inline: this runs for every op built)
        readers = (rb := s._base or s).readers
        readers.append(ref)
        if len(readers) > rb._readers_kept:
          prune_readers(rb)
      self.op, self.arg, self.srcs = op, arg, srcs
      # an ASSIGN writes into the buffer of its target; everything else gets a buffer of its own
      size = st.size
      buf = srcs[1].base.buffer if op is MetaOps.ASSIGN else Buffer(device, size if type(size) is int else _max_size(st.shape), dtype)
      buf.lb_refcount += 1
      self.buffer: Buffer = buf
      self.forced_realize = op in _FORCED  # (a frozenset: an op is hashed by identity, where a tuple compares each)
    else:
      assert base._base is None, "a view's base must be a base"

  def __del__(self) -> None:
    # a base owns its buffer (Buffer.lb_refcount) until it goes; a view owns it through its base
    if self._base is None and (buf := getattr(self, "buffer", None)) is not None:
      buf.lb_refcount -= 1

  def set_buffer(self, buf: Buffer) -> None:
    """Make this base the owner of `buf` instead of its current buffer."""
    assert self._base is None, "only a base owns a buffer"
    old = self.buffer
    buf.lb_refcount += 1  # in this order, a Ctrl-C between two lines can only leave a count too high (see _base)
    self.buffer = buf
    old.lb_refcount -= 1

  def __repr__(self) -> str:
    if self._base is not None:
      return f"<LB view {self.device} {self.shape} {self.dtype} of {self.base!r}>"
    return f"<LB {self.device} {self.shape} {self.dtype} op={self.op} realized={self.realized is not None}>"

  @property
  def base(self) -> LazyBuffer:
    return self._base if self._base is not None else self

  @property
  def realized(self) -> Buffer | None:
    # a base's op becomes None once a schedule owns its computation (or data was copied in); its buffer holds the
    # value once no scheduled work is left to write it (engine/pending.py): until then it is still to compute
    b = self.base
    return b.buffer if b.op is None and b.buffer.pending is None else None

  # ---------- creation ----------
  @staticmethod
  def metaop(op: MetaOps | ReduceOps, shape: tuple[sint, ...], dtype: DType, device: str, arg: Any = None,
             srcs: tuple[LazyBuffer, ...] = ()) -> LazyBuffer:
    return LazyBuffer(device, ShapeTracker.from_shape(shape), dtype, op, arg, srcs)

  @staticmethod
  def from_buffer(buf: Buffer, shape: tuple[sint, ...]) -> LazyBuffer:
    """A realized LazyBuffer holding `buf` (e.g. data copied in from the host)."""
    ret = LazyBuffer(buf.device, ShapeTracker.from_shape(shape), buf.dtype, MetaOps.EMPTY)
    ret.set_buffer(buf)
    ret.op = None
    return ret

  def const(self, val: ConstType, shape: tuple[sint, ...] | None = None) -> LazyBuffer:
    """A constant of this buffer's dtype and device, shaped like it unless `shape` is given."""
    shape = self.shape if shape is None else shape
    return LazyBuffer.full(val, shape, self.dtype, self.device)

  @staticmethod
  def full(val: ConstType, shape: tuple[sint, ...], dtype: DType, device: str) -> LazyBuffer:
    # every op with a Python scalar builds one of these: a float is rounded to the dtype, or a comparison with the scalar
    # and a folded cast disagree with what a kernel computes (float64 as is, float32 by one struct round trip, as_const
    # converts, wraps or rounds the rest), and the view comes from a table
    if type(val) is float and dtype is dtypes.float32:
      val = round_f32(val)
    elif not (type(val) is float and dtype is dtypes.float64):
      val = dtypes.as_const(val, dtype)
    base = LazyBuffer(device, _SCALAR, dtype, MetaOps.CONST, val)
    return base._view(_const_view(shape)) if shape else base  # one view, not a reshape's and an expand's

  @staticmethod
  def operand(val: ConstType, shape: tuple[sint, ...], dtype: DType, device: str) -> LazyBuffer:
    """full(), shared: the Python scalar of a binary op (`x + 1.0`). An eager op with a scalar built its constant anew
    (two LazyBuffers and a Buffer made and dropped, 2 of the 20 us the op took); the same one now serves every op
    with that value, shape, dtype and device. Only for an operand the op consumes: full()'s result may be handed to a
    user who realizes it and assigns into it, which must never reach another op's constant. A shared one that was
    realized all the same (its op is no longer CONST) is made anew."""
    # a float zero by its bits: -0.0 == 0.0 (a nan, never equal, just misses)
    key = (val.hex() if type(val) is float and not val else val, type(val), shape, dtype, device)
    if (lb := _operands.get(key)) is not None and lb._base is not None and lb._base.op is MetaOps.CONST:
      return lb
    lb = LazyBuffer.full(val, shape, dtype, device)
    if lb._base is not None and all(type(s) is int for s in shape):  # (a symbolic shape is never kept, as _const_view)
      if len(_operands) >= 4096:
        _operands.clear()
      _operands[key] = lb
    return lb

  @staticmethod
  def iota(n: int, dtype: DType, device: str) -> LazyBuffer:
    """0, 1, ..., n-1 of the integer `dtype`: no data and no kernel of its own, each kernel that reads it computes the
    positions it reads (a view of it reads the index the view maps to; a padding reads 0)."""
    return LazyBuffer(device, ShapeTracker.from_shape((n,)), dtype, MetaOps.IOTA)

  def is_unrealized_const(self) -> bool:
    """A constant that is the same everywhere (no padded region)."""
    return (self._base or self).op is MetaOps.CONST and self.st.unmasked

  @property
  def const_value(self) -> ConstType:
    return self.base.arg  # type: ignore[no-any-return]

  # ---------- compute ----------
  def contiguous(self) -> LazyBuffer:
    if self.st.contiguous and self.base is self and self.op is not MetaOps.CONST:
      # already laid out in order: no copy, but it gets a buffer of its own rather than being inlined into its users,
      # as tinygrad's contiguous() promises (a value read before an assign overwrites what it reads must be computed first)
      if self.realized is None:
        self.forced_realize = True
      return self
    return LazyBuffer.metaop(MetaOps.CONTIGUOUS, self.shape, self.dtype, self.device, srcs=(self,))

  def cast(self, dtype: DType, bitcast: bool = False) -> LazyBuffer:
    if self.dtype == dtype:
      return self
    if bitcast and self.dtype.itemsize != dtype.itemsize:
      raise ValueError(f"bitcast from {self.dtype} to {dtype} needs equal item sizes")
    if self.is_unrealized_const() and not bitcast:
      return LazyBuffer.full(self.const_value, self.shape, dtype, self.device)
    op = UnaryOps.BITCAST if bitcast else UnaryOps.CAST
    return LazyBuffer.metaop(op, self.shape, dtype, self.device, dtype, (self,))  # type: ignore[arg-type]

  def copy_to_device(self, device: str) -> LazyBuffer:
    if device == self.device:
      return self
    if self.is_unrealized_const():
      return LazyBuffer.full(self.const_value, self.shape, self.dtype, device)
    if (b := self.base).op is MetaOps.IOTA:  # positions are no data: the same view of them on the other device
      return LazyBuffer.iota(b.shape[0], b.dtype, device)._view(self.st)  # type: ignore[arg-type]
    if Device[self.device].renderer is None:  # a storage device (it runs no kernels) copies out byte ranges
      return LazyBuffer.metaop(MetaOps.COPY, self.shape, self.dtype, device, srcs=(self._as_range(),))
    return LazyBuffer.metaop(MetaOps.COPY, self.shape, self.dtype, device, srcs=(self.contiguous(),))

  def _as_range(self) -> LazyBuffer:
    """This view as a realized buffer of its own, when it is one contiguous range of a realized buffer."""
    if self.base is self and self.realized is not None:
      return self
    v = self.st.views[0]
    if self.base.realized is None or len(self.st.views) != 1 or v.mask is not None or not isinstance(v.offset, int) or \
        v.strides != View.create(v.shape).strides:
      raise RuntimeError(f"device {self.device} runs no kernels: only a contiguous slice of a loaded tensor can be copied out, "
                         f"not this view {self.st}; copy the whole tensor to a compute device first")
    buf = self.base.realized.view(_max_size(self.shape), self.dtype, v.offset * self.dtype.itemsize)
    return LazyBuffer.from_buffer(buf, self.shape)

  def writable_view(self) -> bool:
    """Whether an assign can write through this view into its base: each element at an address of its own."""
    return _store_view(self.st) is not None

  def assign(self, x: LazyBuffer) -> LazyBuffer:
    """Write x into this buffer in place: a realized base, or a view of one (a slice, a permute, a reshape: x lands
    at the addresses the view reads). The result is the new value of the whole base (an ASSIGN whose arg is the view
    written, None for all of it), seen through this view. The kernel reads each element of the target at the index it
    writes, which is safe; when x reads the target through any other view (a transpose, a flip), x is computed into a
    temporary first."""
    target = self.base
    assert target.realized is not None, "assign needs a realized target"
    if (store := _store_view(self.st)) is None:
      raise RuntimeError(f"can't assign into {self.st}: a view that repeats (expand) or pads elements must be made contiguous first")
    if _reads_through_view(x, self):
      x = LazyBuffer.metaop(MetaOps.CONTIGUOUS, x.shape, x.dtype, x.device, srcs=(x,))
    ret = LazyBuffer(self.device, ShapeTracker.from_shape(target.shape), self.dtype, MetaOps.ASSIGN, None if self is target else store, (x, target))
    return ret if self is target else ret._view(self.st)

  def e(self, op: UnaryOps | BinaryOps | TernaryOps, *in_srcs: LazyBuffer) -> LazyBuffer:
    srcs = (self,) + in_srcs
    for s in in_srcs:
      if s.shape != self.shape:
        raise RuntimeError(f"elementwise {op} on shapes {[x.shape for x in srcs]}: broadcast them first")
    out_dtype = dtypes.bool if op is BinaryOps.CMPLT or op is BinaryOps.CMPNE else srcs[-1].dtype
    if (folded := self._fold(op, srcs, out_dtype)) is not None:
      return folded
    st = self.st if self.st.contiguous else ShapeTracker.from_shape(self.shape)  # (the same object when it can be)
    return LazyBuffer(self.device, st, out_dtype, op, None, srcs)

  def _fold(self, op: Op, srcs: tuple[LazyBuffer, ...], out_dtype: DType) -> LazyBuffer | None:
    # each source's value when it is a constant the same everywhere, else _VARIES: worked out once (every op built
    # with a Python scalar comes through here)
    vals, consts = [], 0
    for s in srcs:
      if (s._base or s).op is MetaOps.CONST and s.st.unmasked:
        vals.append((s._base or s).arg)
        consts += 1
      else:
        vals.append(_VARIES)
    if not consts:
      return None
    if consts == len(srcs):
      if op in (BinaryOps.IDIV, BinaryOps.MOD) and vals[1] == 0:
        return None
      return LazyBuffer.full(exec_alu(op, out_dtype, vals), self.shape, out_dtype, self.device)
    if op is BinaryOps.ADD or op is BinaryOps.MUL:  # x + 0 and x * 1 are x
      unit = 0 if op is BinaryOps.ADD else 1
      for i in (0, 1):
        if vals[1 - i] is not _VARIES and vals[1 - i] == unit:
          return srcs[i]
    if op is BinaryOps.IDIV and vals[1] is not _VARIES and vals[1] == 1:
      return srcs[0]
    return None

  def r(self, op: ReduceOps, axis: tuple[int, ...]) -> LazyBuffer:
    new_shape = tuple(1 if i in axis else s for i, s in enumerate(self.shape))
    if self.size == 0 and 0 not in new_shape:  # reducing nothing gives the identity
      return self.const({ReduceOps.SUM: 0.0, ReduceOps.PROD: 1.0, ReduceOps.MAX: dtypes.min(self.dtype)}[op], new_shape)
    if not axis or all(self.shape[a] == 1 for a in axis):
      return self.reshape(new_shape)
    if self.is_unrealized_const() and op is ReduceOps.SUM and all(isinstance(self.shape[a], int) for a in axis):
      return self.const(self.const_value * prod(self.shape[a] for a in axis), new_shape)
    if self.is_unrealized_const() and op is ReduceOps.MAX:
      return self.const(self.const_value, new_shape)
    if (split := self._split_reduce(op, axis)) is not None:
      return split
    ret = LazyBuffer.metaop(op, new_shape, self.dtype, self.device, axis, (self,))
    if op is ReduceOps.SUM and self._base is None and self.op is BinaryOps.MUL and PACK.value and \
        isinstance(macs := prod(self.shape), int) and macs >= min(PACK_MIN_MACS, PACK_MIN_MACS_LONG, PACK_MIN_MACS_LAYOUT):
      pack_candidates.add(ret)  # a large matmul-like sum: the scheduler may read its operands packed (engine/packing.py)
    return ret

  def _split_reduce(self, op: ReduceOps, axis: tuple[int, ...]) -> LazyBuffer | None:
    """A reduction of at least SPLIT_REDUCEOP_THRESHOLD elements (over one axis, or adjacent axes, taken as one) into
    fewer than 256 outputs becomes several kernels: partial results of chunks, then the reduction of those. The partials
    can run in parallel, and a sum of sums loses less precision than one long running sum: the reduction is split into
    a tree (_tree_reduce) whose every kernel adds at most twice the device's leaf (_sum_leaf) elements per output, so a float sum's rounding
    error grows with log(n), not n. None when the reduction isn't split."""
    if not SPLIT_REDUCEOP.value or not all(isinstance(s, int) for s in self.shape):
      return None
    axis = tuple(sorted(axis))
    n = prod(self.shape[i] for i in axis)
    assert isinstance(n, int)
    out_size = prod(s for i, s in enumerate(self.shape) if i not in axis)
    if n < SPLIT_REDUCEOP_THRESHOLD.value or out_size >= 256:  # enough outputs already to keep a device busy
      return None
    if op is ReduceOps.SUM and self._selects_one():  # one element per output: nothing to split (nor to round)
      return None
    if axis != tuple(range(axis[0], axis[-1] + 1)):  # axes apart (a batchnorm's (0, 2, 3)): moved to be adjacent and last, a
      return self._split_apart(op, axis, n)  # view the first kernel of the tree reads with strides (no copy)
    a, b = axis[0], axis[-1] + 1
    x = self.reshape(self.shape[:a] + (n,) + self.shape[b:]) if b - a > 1 else self
    return x._tree_reduce(op, a).reshape(tuple(1 if i in axis else s for i, s in enumerate(self.shape)))

  def _selects_one(self) -> bool:
    """Whether this is where(positions == index, x, 0) (a tensor index's, gather's or Embedding's one-hot sum, built
    from an arange): codegen/one_hot_select.py makes its sum one load per output, which a split into a tree of
    partial sums would make one load per partial and a kernel per level (a gather over 50257 logits was 5 kernels)."""
    if self.base.op is not TernaryOps.WHERE or self._base is not None:
      return False
    cond, _, zero = self.srcs
    if not (zero.is_unrealized_const() and zero.const_value == 0):  # (0 where the mask holds would be all the others)
      return False
    stack, seen, equality, positions = [cond.base], 0, False, False
    while stack and seen <= 24:  # (schedule.MAX_INDEX_MATH: the mask is small integer arithmetic)
      n = stack.pop()
      seen += 1
      positions = positions or n.op is MetaOps.IOTA
      equality = equality or (n.op is BinaryOps.CMPNE and n.dtype == dtypes.bool and n.srcs[1].is_unrealized_const()
                              and n.srcs[1].const_value is True and n.srcs[0].base.op is BinaryOps.CMPNE)
      if isinstance(n.op, (UnaryOps, BinaryOps, TernaryOps)):
        stack.extend(s.base for s in n.srcs)
    return equality and positions

  def _split_apart(self, op: ReduceOps, axis: tuple[int, ...], n: int) -> LazyBuffer:
    """The split reduction of axes that aren't adjacent: the kept axes first (in their order), the reduced ones after
    them, so that the tree's result reshapes back to the kept axes with 1s for the reduced ones. The reduced axes taken
    as one are not one strided view (a batchnorm's N, H*W), and a kernel reading two views pays a divide per element
    (3-4x slower): so the first kernel reduces runs of m inside the innermost reduced axes that do merge (H*W), a
    plain strided read, and the tree goes on over the partials. When no run size divides those axes they are a tree of
    their own first, or, shorter than RUNS_ALIGN, read with the rest as one merged axis."""
    keep = tuple(i for i in range(len(self.shape)) if i not in axis)
    kept = tuple(self.shape[i] for i in keep)
    x = self.permute(keep + axis)
    strides, inner, j = x.st.real_strides(), x.shape[-1], len(x.shape) - 1
    while j > len(keep) and (st := strides[j]) is not None and strides[j - 1] == st * x.shape[j]:
      j -= 1
      inner *= x.shape[j]
    assert isinstance(inner, int)
    m = next((m for m in self._run_lengths() if inner % m == 0), 0)
    if strides[-1] is not None and m:
      x = x.reshape(kept + (n // inner, inner))._reduce_chunks(op, len(keep) + 1, inner // m, m).reshape(kept + (n // m,))
    elif strides[-1] is not None and inner >= RUNS_ALIGN:  # a tree of its own per outer index: partials at most n / 32
      x = x.reshape(kept + (n // inner, inner))._tree_reduce(op, len(keep) + 1).reshape(kept + (n // inner,))
    else:  # a short inner axis: read through two views, where the compiler keeps one accumulator (a chain of m adds)
      x = x.reshape(kept + (n,))
    return x._tree_reduce(op, len(keep)).reshape(tuple(1 if i in axis else s for i, s in enumerate(self.shape)))

  def _sum_leaf(self) -> int:
    """The run length one kernel of a split reduction adds per output on this device (SUM_LEAF unless it declares one)."""
    renderer = Device[self.device].renderer
    return renderer.reduce_leaf if renderer is not None and renderer.reduce_leaf else SUM_LEAF

  def _run_lengths(self) -> tuple[int, ...]:
    """The run lengths a split kernel may take, best first: the device's leaf, then the powers of two near it."""
    leaf = self._sum_leaf()
    return (leaf, 2 * leaf, leaf // 2, leaf // 4)

  def _reduce_chunks(self, op: ReduceOps, a: int, chunks: int, m: int) -> LazyBuffer:
    """One kernel: axis `a` (chunks * m long) reduced in `chunks` runs of m, giving `chunks` partials along `a`. The
    reductions are built directly: neither is split again nor packed (not a product), and building them through r()
    was half the Python of an eager sum."""
    split = self.reshape(self.shape[:a] + (chunks, m) + self.shape[a + 1:])
    parts = LazyBuffer.metaop(op, split.shape[:a + 1] + (1,) + split.shape[a + 2:], self.dtype, self.device, (a + 1,), (split,))
    return parts.reshape(self.shape[:a] + (chunks,) + self.shape[a + 1:])

  def _tree_reduce(self, op: ReduceOps, a: int) -> LazyBuffer:
    """The reduction of axis `a` as a tree of kernels: each reduces runs of m elements into partials (m one of
    _run_lengths() that divides the axis, else the device's leaf, or SUM_LAST for a short axis), until at most
    SUM_LAST, or one run length, are left for the last kernel. Inside a kernel a run is summed by several accumulators
    (vector lanes, ACC_CHAINS), so each sequential chain of float adds stays short, whatever n is: with n = 16M and the
    default leaf, 2048 partials of 8192, then the total of those 2048 (a quarter leaf). Any other count left over is at
    most SUM_LAST for the last kernel, because a count with no power of two in it (2049 partials) gets neither vectors
    nor unrolled accumulators: one chain. The elements past the last whole run are a
    tree of their own, combined at the end: a shrink (padding with the identity would make the scheduler realize an
    input whose op isn't 0 at 0, a % or an exp, in full)."""
    n = self.shape[a]
    assert isinstance(n, int)
    # one kernel when few are left, or when what is left is one run a split kernel could take (it sums it as every
    # kernel of the tree sums a run: the same chains): 8192 partials of 64M floats were two kernels more (4096 + 2)
    if n <= SUM_LAST or n in self._run_lengths():
      return LazyBuffer.metaop(op, self.shape[:a] + (1,) + self.shape[a + 1:], self.dtype, self.device, (a,), (self,))
    leaf = self._sum_leaf()
    m = next((m for m in self._run_lengths() if n % m == 0 and n // m >= 2), leaf if n >= 2 * leaf else SUM_LAST)
    runs = n // m
    if runs > RUNS_ALIGN:  # a count of outputs with no power of two in it gets no LOCAL/UPCAST (a GPU thread then sums
      runs -= runs % RUNS_ALIGN  # a whole run alone): the runs that don't fit a multiple go to the tail
    rest = n - runs * m
    def part(lo: int, hi: int) -> LazyBuffer:
      return self.shrink(tuple((lo, hi) if i == a else (0, s) for i, s in enumerate(self.shape)))
    total = (part(0, runs * m) if rest else self)._reduce_chunks(op, a, runs, m)._tree_reduce(op, a)
    return total.e(REDUCE_ALU[op], part(runs * m, n)._tree_reduce(op, a)) if rest else total

  # ---------- movement: views only ----------
  def _view(self, new_st: ShapeTracker) -> LazyBuffer:
    shape, base = new_st.views[-1].shape, self._base or self
    if self.st.size == 0 or 0 in shape:  # nothing to read: an empty constant
      return LazyBuffer.metaop(MetaOps.CONST, shape, self.dtype, self.device, dtypes.as_const(0, self.dtype))
    if base.shape == shape and new_st.contiguous:
      return base
    return LazyBuffer(self.device, new_st, self.dtype, base=base)

  def reshape(self, arg: tuple[sint, ...]) -> LazyBuffer: return self._view(self.st.reshape(arg))
  def pad(self, arg: tuple[tuple[sint, sint], ...]) -> LazyBuffer: return self._view(self.st.pad(arg))
  def expand(self, arg: tuple[sint, ...]) -> LazyBuffer: return self._view(self.st.expand(arg))
  def permute(self, arg: tuple[int, ...]) -> LazyBuffer: return self._view(self.st.permute(arg))
  def shrink(self, arg: tuple[tuple[sint, sint], ...]) -> LazyBuffer:
    ret = self._view(self.st.shrink(arg))
    if ret is self.base and any(is_sym(x) for bounds in arg for x in bounds):
      # a symbolic shrink is a view even where, at this binding, it covers the whole buffer (row start_pos of a one-row
      # buffer): an assign through it must write the buffer in place, as through any view, not replace its value
      return LazyBuffer(self.device, ret.st, self.dtype, base=self.base)
    return ret
  def stride(self, arg: tuple[int, ...]) -> LazyBuffer: return self._view(self.st.stride(arg))
