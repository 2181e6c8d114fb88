"""The lowerer: a kernel AST (LazyOps over ShapeTrackers) -> a UOp graph rooted at a SINK.

Each axis of the kernel's full shape becomes an index: a hardware thread id (SPECIAL) or a loop
(RANGE) for output axes, depending on what the renderer declares, and a loop for reduced axes.
Each LOAD/CONST turns its ShapeTracker into an index and a validity expression over those indices.
"""
from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from enum import Enum, IntEnum
from typing import NamedTuple

from tg.codegen.tensor_core import TensorCorePlan, operand_as
from tg.codegen.uops import UOp, UOps
from tg.dtype import ConstType, DType, PtrDType, dtypes
from tg.helpers import prod
from tg.ops import BinaryOps, BufferOps, LazyOp, MemBuffer, MetaOps, Op, ReduceOps, TernaryOps, UnaryOps
from tg.renderer import Renderer
from tg.shape.shapetracker import ShapeTracker
from tg.shape.symbolic import AndNode, DivNode, LtNode, ModNode, MulNode, Node, NumNode, SumNode, Variable, sint


class IndexOverflow(Exception):
  """An index expression of a kernel leaves the range of the index dtype it is being lowered in."""


_INT_RANGE = {dt: (dtypes.min(dt), dtypes.max(dt)) for dt in (dtypes.int32, dtypes.int64)}


def _fits(dt: DType, lo: object, hi: object) -> bool:
  d_lo, d_hi = _INT_RANGE[dt] if dt in _INT_RANGE else (dtypes.min(dt), dtypes.max(dt))
  return bool(d_lo <= lo and hi <= d_hi)  # type: ignore[operator]


def node_to_uop(node: sint, ctx: dict[Variable, UOp], dt: DType = dtypes.int32) -> UOp:
  """A symbolic expression as UOps of the integer dtype `dt`: Variables come from `ctx` (loop indices, thread ids, kernel
  arguments). Raises IndexOverflow when it, or any value computed on the way, can leave `dt`'s range (a Node's bounds
  are Python ints: they show what the device's wrapping arithmetic would hide)."""
  if isinstance(node, (int, NumNode)):
    val = node if isinstance(node, int) else node.b
    if not _fits(dt, val, val):
      raise IndexOverflow(f"{val} doesn't fit {dt}")
    return UOp.const(dt, val)
  if isinstance(node, Variable):
    return ctx[node]
  if not _fits(dt, node.min, node.max):
    raise IndexOverflow(f"{node} reaches [{node.min}, {node.max}], beyond {dt}")
  return _node_to_uop(node, ctx, dt)


def _node_bounds(node: sint) -> tuple[int, int]:
  return (node, node) if isinstance(node, int) else (node.min, node.max)


def _node_to_uop(node: Node, ctx: dict[Variable, UOp], dt: DType) -> UOp:
  if isinstance(node, (DivNode, ModNode)) and node.a.min < 0:
    # symbolic // and % are floor division; C's / and % truncate toward zero. Shift the numerator by a
    # multiple of the divisor until it can't be negative, where the two agree: (a + k*b)//b - k.
    b_min = node.b if isinstance(node.b, int) else node.b.min
    k = (-node.a.min + b_min - 1) // b_min  # ceil(-a.min / b.min)
    if not _fits(dt, 0, node.a.max + k * (node.b if isinstance(node.b, int) else node.b.max)):
      raise IndexOverflow(f"the shifted numerator of {node} leaves {dt}")
    shifted = node_to_uop(node.a, ctx, dt) + node_to_uop(node.b * k, ctx, dt)
    b = node_to_uop(node.b, ctx, dt)
    return shifted.alu(BinaryOps.IDIV, b) + (-k) if isinstance(node, DivNode) else shifted.alu(BinaryOps.MOD, b)
  if isinstance(node, (MulNode, DivNode, ModNode, LtNode)):
    a, b = node_to_uop(node.a, ctx, dt), node_to_uop(node.b, ctx, dt)
    op = {MulNode: BinaryOps.MUL, DivNode: BinaryOps.IDIV, ModNode: BinaryOps.MOD, LtNode: BinaryOps.CMPLT}[type(node)]
    return a.alu(op, b)
  if isinstance(node, SumNode):
    ret = node_to_uop(node.nodes[0], ctx, dt)
    lo, hi = _node_bounds(node.nodes[0])
    for n in node.nodes[1:]:
      ret = ret + node_to_uop(n, ctx, dt)
      n_lo, n_hi = _node_bounds(n)
      lo, hi = lo + n_lo, hi + n_hi
      if not _fits(dt, lo, hi):  # a partial sum can pass the range that the whole sum stays in
        raise IndexOverflow(f"a partial sum of {node} leaves {dt}")
    return ret
  if isinstance(node, AndNode):
    ret = node_to_uop(node.nodes[0], ctx, dt)
    for n in node.nodes[1:]:
      ret = ret.logical_and(node_to_uop(n, ctx, dt))
    return ret
  raise NotImplementedError(f"can't lower {type(node).__name__}")


def full_shape(ast: LazyOp) -> tuple[sint, ...]:
  """The iteration space: the shape every load is indexed in (the reduce input's shape, if any)."""
  reduceop = next((op for op in ast.lazyops() if isinstance(op.op, ReduceOps)), None)
  for op in (reduceop.src[0] if reduceop is not None else ast).lazyops():
    if op.op in (BufferOps.LOAD, BufferOps.CONST, BufferOps.IOTA):
      return op.arg.st.shape  # type: ignore[no-any-return]
  return kernel_stores(ast)[0].arg.st.shape  # type: ignore[no-any-return]


def nested_reduces(ast: LazyOp) -> dict[LazyOp, None]:
  """The reductions that are part of another reduction's input, innermost last."""
  out: dict[LazyOp, None] = {}
  for r in ast.lazyops():
    if isinstance(r.op, ReduceOps):
      out.update((x, None) for x in r.src[0].lazyops() if isinstance(x.op, ReduceOps))
  return out


def kernel_stores(ast: LazyOp) -> tuple[LazyOp, ...]:
  """The STOREs of a kernel AST: the root itself, or the sources of a SINK (a kernel with several outputs)."""
  return ast.src if ast.op is MetaOps.SINK else (ast,)


def _float_to_int(x: UOp, via: DType) -> UOp:
  """The float x converted to the signed integer `via`, defined for every x: NaN, infinities and values outside `via`'s
  range give its lowest value (what x86 gives for all of them; an ARM core saturates instead), so the result doesn't
  depend on the machine, nor on whether the compiler converted a scalar or a vector's lanes."""
  assert x.dtype is not None
  bits = via.itemsize * 8
  inside = UOp.const(x.dtype.scalar(), -2.0 ** (bits - 1)).lt(x).logical_and(x.lt(2.0 ** (bits - 1)))  # (NaN: False)
  return inside.alu(TernaryOps.WHERE, x.cast(via), UOp.const(via.scalar(), -2 ** (bits - 1)))


def _bf16_to_float(bits16: UOp) -> UOp:
  return UOp(UOps.BITCAST, dtypes.float32.vec(bits16.count), (bits16.cast(dtypes.uint32).alu(BinaryOps.SHL, UOp.const(dtypes.uint32, 16)),))


def _float_to_bf16_bits(x: UOp) -> UOp:
  """Round a float32 to the nearest bfloat16 (ties to even) and return its 16 bits as uint32."""
  bits = UOp(UOps.BITCAST, dtypes.uint32.vec(x.count), (x,))
  lsb = bits.alu(BinaryOps.SHR, UOp.const(dtypes.uint32, 16)).alu(BinaryOps.AND, UOp.const(dtypes.uint32, 1))
  return (bits + 0x7FFF + lsb).alu(BinaryOps.SHR, UOp.const(dtypes.uint32, 16))


def _emulated_bf16_bitcast(x: UOp, src: DType, dst: DType) -> UOp:
  """BITCAST where a bfloat16 is held as the float32 of the same value: its 16 bits are that float32's top half (exact,
  so the rounding in _float_to_bf16_bits changes nothing), moved through uint16 to or from the other 16-bit dtype."""
  n = x.count
  if src == dtypes.bfloat16:
    bits = _float_to_bf16_bits(x).cast(dtypes.uint16.vec(n))
    return bits if dst == dtypes.uint16 else UOp(UOps.BITCAST, dst.vec(n), (bits,))
  bits = x if src == dtypes.uint16 else UOp(UOps.BITCAST, dtypes.uint16.vec(n), (x,))
  return _bf16_to_float(bits)


REDUCE_ALU: dict[Op, BinaryOps] = {ReduceOps.SUM: BinaryOps.ADD, ReduceOps.PROD: BinaryOps.MUL, ReduceOps.MAX: BinaryOps.MAX}

# independent accumulators one thread keeps in a reduce loop: its outputs' (UPCAST) and, when those are fewer, the
# unrolled copies' own. One accumulator makes each iteration's add wait for the last one's; with 8 the loads of several
# iterations are in flight at once (measured on a 16M-float sum over 2 threads, hand-written C with 16-float vectors:
# 1 accumulator 0.9-1.2 ms, 4: 0.8-0.9 ms, 8: 0.55-0.8 ms)
ACC_CHAINS = 8

class AxisKind(str, Enum):
  """How one axis of a kernel's iteration space is iterated (see kernel.py for how optimizations set them). A str
  enum: each compares equal to its letter, as tinygrad's axis colors do."""
  GLOBAL = "g"  # an output axis: a loop, or a hardware index (Renderer.global_ids)
  REDUCE = "r"  # a reduced axis: a loop
  UPCAST = "u"  # an output axis unrolled into copies (or a vector's lanes) of one thread
  UNROLL = "n"  # a reduced axis unrolled into copies (or lanes) per loop iteration
  LOCAL = "l"   # an output axis across the threads of a workgroup
  GROUP = "G"   # a reduced axis across the threads of a workgroup, combined in local memory
  TC = "t"      # an axis of a tensor core's tile (M, N or K), which the warp's threads and fragments cover (Lowerer._tc_reduce)

  def __repr__(self) -> str:
    return repr(self.value)

  def __str__(self) -> str:
    return self.value


GLOBAL, REDUCE, UPCAST, UNROLL, LOCAL, GROUP, TC = AxisKind


class LoopKind(IntEnum):
  """What a loop (a RANGE) runs over."""
  OUTPUT = 0  # an output axis, on renderers whose output axes are loops
  REDUCE = 1  # a reduced axis; a reduction nested in another's input runs a copy of them of its own
  GROUP = 2   # a group's partial results, combined by its first thread


LOOPS_PER_KIND = 100  # a kernel has fewer axes of one kind than this


class LoopId(NamedTuple):
  """A RANGE's arg, as renderers read it (docs/uops.md): a number that orders the output loops and tells every loop
  of a kernel apart, and whether it is a reduce loop. `LoopId.of` numbers them: kind, copy and axis in blocks of
  LOOPS_PER_KIND, so no two loops of a kernel share a number, and an output loop's number is its axis."""
  number: int
  is_reduce: bool

  @staticmethod
  def of(kind: LoopKind, axis: int, copy: int = 0) -> LoopId:
    assert 0 <= axis < LOOPS_PER_KIND and copy >= 0, f"loop {axis} (copy {copy}) of a kernel"
    return LoopId((copy * len(LoopKind) + kind) * LOOPS_PER_KIND + axis, kind is not LoopKind.OUTPUT)


def fold_dims(sizes: list[sint], max_dims: tuple[int, ...] | None, name: str) -> tuple[list[sint], list[Variable], list[Node], Node | None]:
  """Fit a kernel's output axes (outermost first) onto a device's launch dims (dim 0 = x, the innermost axis).

  Returns the launch dim sizes, a Variable `__<name><d>` per dim, and per axis its index as an expression of them.
  Each axis gets its own dim where the device allows (the innermost axis on x keeps neighbouring threads on
  neighbouring elements); axes beyond the device's dim count are merged into the outermost dim, and a dim longer
  than the device allows is split over a spare dim. When that can't fit, the outputs are numbered in one row-major
  sequence that is cut into dims by divisors, or, when no divisors fit (a prime count past a dim's limit), into dims
  whose product is a little more than the count: then the returned guard (else None) is the Node that holds only
  for the launch's threads that have an output, and every load and store of the kernel is gated by it. Without
  `max_dims` every axis is its own dim."""
  def variables(dims: list[sint]) -> list[Variable]:
    return [Variable(f"__{name}{d}", 0, (s if isinstance(s, int) else s.max) - 1) for d, s in enumerate(dims)]

  def unpack(whole: Node, axes: list[int]) -> dict[int, Node]:  # row-major digits of `whole`, innermost axis first
    out, stride = {}, 1
    for j, a in enumerate(axes):
      idx = whole // stride if j == len(axes) - 1 else (whole // stride) % sizes[a]
      out[a] = idx if isinstance(idx, Node) else NumNode(idx)
      stride = stride * sizes[a]  # type: ignore[assignment]
    return out

  if not sizes:
    return [], [], [], None
  n = len(max_dims) if max_dims is not None else len(sizes)
  groups = [[len(sizes) - 1 - d] for d in range(min(n - 1, len(sizes)))]
  if len(sizes) >= n:  # the outermost dim takes every remaining axis
    groups.append(list(range(len(sizes) - n, -1, -1)))
  dims: list[sint] = [prod(sizes[a] for a in g) for g in groups]
  splits: dict[int, int] = {}  # a dim too long for the device, split over a spare dim as hi * k + lo
  for d, size in enumerate(list(dims)):
    if max_dims is not None and isinstance(size, int) and size > max_dims[d]:
      e = len(dims)
      k = _largest_divisor(size, max_dims[d]) if e < len(max_dims) else 1
      if k < 2 or size // k > max_dims[e]:
        return _fold_linear(sizes, max_dims, variables, unpack)
      splits[d], dims[d] = e, k
      dims.append(size // k)
  launch = variables(dims)
  idxs: dict[int, Node] = {}
  for d, g in enumerate(groups):
    idxs.update(unpack(launch[d] + launch[splits[d]] * dims[d] if d in splits else launch[d], g))
  return dims, launch, [idxs[a] for a in range(len(sizes))], None


def _largest_divisor(n: int, m: int) -> int:
  """The largest divisor of n that is at most m, in O(sqrt(n)) steps (counting down from m takes up to m: 2^31 for a
  a GPU grid's x)."""
  if n <= m:
    return n
  root = math.isqrt(n)
  for q in range(-(-n // m), root + 1):  # the cofactor q = n // k, smallest first: divisors k >= sqrt(n)
    if n % q == 0:
      return n // q
  return next(k for k in range(min(m, root), 0, -1) if n % k == 0)


def _fold_linear(sizes: list[sint], max_dims: tuple[int, ...], variables: Callable[[list[sint]], list[Variable]],
                 unpack: Callable[[Node, list[int]], dict[int, Node]]) -> tuple[list[sint], list[Variable], list[Node], Node | None]:
  total = prod(sizes)
  if not isinstance(total, int):
    raise ValueError(f"outputs of symbolic sizes {sizes} don't fit the device's launch limits {max_dims}")
  dims = _cut_by_divisors(total, max_dims)
  guard = dims is None
  if dims is None:  # no exact cut: round up, the extra threads do nothing (guarded)
    dims = _cut_rounding_up(total, max_dims)
  launch = variables(dims)  # type: ignore[arg-type]
  whole: Node = NumNode(0)
  for d in reversed(range(len(dims))):
    whole = whole * dims[d] + launch[d]
  idxs = unpack(whole, list(range(len(sizes) - 1, -1, -1)))
  return dims, launch, [idxs[a] for a in range(len(sizes))], (whole < total) if guard else None  # type: ignore[return-value]


def _cut_by_divisors(total: int, max_dims: tuple[int, ...]) -> list[int] | None:
  """Launch dims (x first) whose product is exactly `total`, each within its limit, or None."""
  dims, rest = [], total
  for m in max_dims:
    k = _largest_divisor(rest, m)
    dims.append(k)
    rest //= k
  return dims if rest == 1 else None


def _cut_rounding_up(total: int, max_dims: tuple[int, ...]) -> list[int]:
  """Launch dims (x first) within their limits whose product is at least `total`, with few spare threads: each dim
  but the last is as large as allowed, the outer ones then cover the rest rounded up."""
  dims, rest = [], total
  for d, m in enumerate(max_dims):
    k = rest if d == len(max_dims) - 1 else min(rest, m)
    if k > m:
      raise ValueError(f"{total} outputs don't fit the device's launch limits {max_dims}")
    dims.append(k)
    rest = -(-rest // k)
  return dims


def default_axis_kinds(ast: LazyOp) -> tuple[AxisKind, ...]:
  reduceop = next((op for op in ast.lazyops() if isinstance(op.op, ReduceOps)), None)
  axes = set(reduceop.arg) if reduceop is not None else set()
  return tuple(REDUCE if i in axes else GLOBAL for i in range(len(full_shape(ast))))


class Lowerer:
  """Lowers one kernel AST. `axis_kinds` says, per axis of the full shape, how it is iterated: a global index
  (loop or thread id), a reduce loop, or unrolled in place (UPCAST for output axes: one value per element, kept
  in registers; UNROLL for reduce axes: several elements summed per loop iteration).

  `vector_axis`, an UPCAST (or UNROLL) axis, is lowered as one vector value instead of one scalar per element: its index is
  the Variable `lane`, and every value that depends on it has a vector dtype of the axis' size. A load or store
  whose index moves by one per lane (and whose validity doesn't depend on the lane) becomes one vector LOAD/STORE
  where the renderer has the vector type; the others gather or scatter lane by lane. Values that don't depend on
  the lane stay scalars, computed once, and are broadcast where they meet a vector."""

  def __init__(self, ast: LazyOp, renderer: Renderer, axis_kinds: tuple[AxisKind, ...] | None = None, vector_axis: int | None = None,
               tc: TensorCorePlan | None = None) -> None:
    self.ast, self.renderer = ast, renderer
    self.vector_axis, self.tc = vector_axis, tc
    self.emulate_bf16 = dtypes.bfloat16 in renderer.unsupported_dtypes
    self.reduceop = next((op for op in ast.lazyops() if isinstance(op.op, ReduceOps)), None)
    self.nested = nested_reduces(ast)
    self.full_shape = full_shape(ast)
    self.kinds = axis_kinds if axis_kinds is not None else default_axis_kinds(ast)
    assert len(self.kinds) == len(self.full_shape), f"axis kinds {self.kinds} for shape {self.full_shape}"
    self.buffers: dict[int, UOp] = {}
    self.idt: DType = dtypes.int32  # the index dtype (see lower)
    self.lanes = 1
    if vector_axis is not None:
      size = self.full_shape[vector_axis]
      assert self.kinds[vector_axis] in (UPCAST, UNROLL) and isinstance(size, int) and size > 1, f"can't vectorize axis {vector_axis}"
      assert GROUP not in self.kinds, "group reductions keep scalar partials"
      self.lanes = size
    self.lane = Variable("__lane", 0, self.lanes - 1)

  def vdt(self, dt: DType) -> DType:
    """The dtype a value of `dt` is computed in."""
    return dtypes.float32 if self.emulate_bf16 and dt == dtypes.bfloat16 else dt

  def buffer(self, mb: MemBuffer) -> UOp:
    if mb.dtype.scalar() in self.renderer.missing_dtypes:
      raise NotImplementedError(f"{self.renderer.device or type(self.renderer).__name__} has no {mb.dtype} in kernels")
    if mb.idx not in self.buffers:
      dt = dtypes.uint16 if self.emulate_bf16 and mb.dtype == dtypes.bfloat16 else mb.dtype
      self.buffers[mb.idx] = UOp(UOps.DEFINE_GLOBAL, dt.ptr(), (), mb.idx)
    return self.buffers[mb.idx]

  def _combos(self, kind: AxisKind) -> list[dict[int, Node]]:
    """Every assignment of constant indices to the axes of `kind` (the unrolled copies)."""
    axes = [i for i, k in enumerate(self.kinds) if k == kind and i != self.vector_axis]
    out: list[dict[int, Node]] = [{}]
    for i in axes:
      size = self.full_shape[i]
      assert isinstance(size, int), "only concrete axes can be unrolled"
      out = [{**c, i: NumNode(v)} for c in out for v in range(size)]
    return out

  def _uop(self, node: sint) -> UOp:
    return node_to_uop(node, self.ctx, self.idt)

  def lower(self) -> UOp:
    """The kernel's UOp graph. Its indices, loop counters and index arithmetic are int32 where every value they can take
    (their symbolic bounds: loop ranges, thread ids, buffer offsets, and each step of the arithmetic between) fits, else
    int64: only kernels over 2^31 elements (or offsets) pay for 64-bit index math."""
    try:
      return self._lower_in(dtypes.int32)
    except IndexOverflow as e:
      if dtypes.int64 in self.renderer.missing_dtypes:
        raise ValueError(f"{self.renderer.device or type(self.renderer).__name__} indexes kernels with 32-bit ints, and this kernel "
                         f"(shape {self.full_shape}) needs indices beyond 2^31-1 ({e}): split the tensor into parts under 2^31 "
                         "elements or use another device") from None
      return self._lower_in(dtypes.int64)

  def _lower_in(self, idt: DType) -> UOp:
    self.idt = idt
    # the kernel's symbolic sizes are arguments: one DEFINE_VAR per Variable (an int32 argument, widened to the index dtype)
    self.ctx: dict[Variable, UOp] = {}
    self._lowered: dict[tuple[LazyOp, tuple[Node, ...], int, int], tuple[UOp, dict[Variable, UOp]]] = {}
    # (also those only in a buffer's offset or mask: a KV cache written at a symbolic start_pos)
    st_vars = [op.arg.st.vars() for op in self.ast.lazyops() if op.op in BufferOps]
    for v in sorted(set().union(*[s.vars() for s in self.full_shape if isinstance(s, Node)], *st_vars), key=lambda v: v.expr):
      if not _fits(dtypes.int32, v.min, v.max):
        raise ValueError(f"symbolic size {v.expr} ranges over [{v.min}, {v.max}], beyond the int32 a kernel argument is")
      self.ctx[v] = UOp(UOps.DEFINE_VAR, dtypes.int32, (), v).cast(idt)
    self.arguments = set(self.ctx)  # the kernel's symbolic sizes: values it is given, not indices it runs over
    self.idx: dict[int, Node] = {}  # index of each global, local, group and reduce axis
    self.launch_guard: Node | None = None  # set when the launch has more threads than outputs (fold_dims)
    self.global_size: list[sint] = []
    self.local_size: list[int] = []
    self.reduce_ranges: list[UOp] = []
    self.reduce_vars: list[Variable] = []
    self.group_partials: dict[tuple[LazyOp, tuple[Node, ...]], tuple[UOp, UOp, int]] = {}
    self.stored_where: Node | None = None
    axes = {kind: [i for i, k in enumerate(self.kinds) if k == kind and self.full_shape[i] != 1] for kind in (GLOBAL, LOCAL, GROUP, REDUCE)}
    for i, size in enumerate(self.full_shape):
      if size == 1:  # a size-1 axis needs no index
        self.idx[i] = NumNode(0)
    if self.vector_axis is not None:
      self.idx[self.vector_axis] = self.lane
    if self.renderer.global_ids:
      # output axes are hardware indices: workgroups (gidx) and threads inside one (lidx: LOCAL, then GROUP axes)
      for name, ax, max_dims, sizes_out in (("gidx", axes[GLOBAL], self.renderer.global_max, self.global_size),
                                            ("lidx", axes[LOCAL] + axes[GROUP], self.renderer.local_max, self.local_size)):
        dims, launch, exprs, guard = fold_dims([self.full_shape[i] for i in ax], max_dims, name)
        if guard is not None:  # more threads than outputs: the extra ones load and store nothing
          self.launch_guard = guard if self.launch_guard is None else Node.ands([self.launch_guard, guard])
        sizes_out.extend(dims)  # type: ignore[arg-type]
        for d, (size, var) in enumerate(zip(dims, launch)):
          self.ctx[var] = UOp(UOps.SPECIAL, dtypes.int32, (), (f"{name}{d}", d, size)).cast(idt)  # hardware ids are 32-bit
        self.idx.update(zip(ax, exprs))
      if self.tc is not None:  # the workgroup is one warp: its threads share each tile (no LOCAL or GROUP axes with TC)
        assert not self.local_size, "a tensor-core kernel's workgroup is its warp"
        threads = self.tc.tc.threads
        self.tc_lane = Variable("__tc_lane", 0, threads - 1)
        self.local_size.append(threads)
        self.ctx[self.tc_lane] = UOp(UOps.SPECIAL, dtypes.int32, (), ("lidx0", 0, threads)).cast(idt)
    else:
      for n, i in enumerate(axes[GLOBAL]):
        size = self.full_shape[i]
        self.global_size.append(size)
        var = self.idx[i] = Variable(f"__gidx{n}", 0, (size if isinstance(size, int) else size.max) - 1)
        self.ctx[var] = UOp(UOps.RANGE, idt, (UOp.const(idt, 0), self._uop(size)), LoopId.of(LoopKind.OUTPUT, n))
    for i in axes[REDUCE]:
      size = self.full_shape[i]
      var = self.idx[i] = Variable(f"__ridx{len(self.reduce_ranges)}", 0, (size if isinstance(size, int) else size.max) - 1)
      self.reduce_ranges.append(UOp(UOps.RANGE, idt, (UOp.const(idt, 0), self._uop(size)),
                                    LoopId.of(LoopKind.REDUCE, len(self.reduce_ranges))))
      self.reduce_vars.append(var)
      self.ctx[var] = self.reduce_ranges[-1]
    stores: list[UOp] = []
    for store in kernel_stores(self.ast):  # several outputs share the loops and every common subexpression
      st: ShapeTracker = store.arg.st
      out_shape = tuple(1 if k in (REDUCE, UNROLL, GROUP) or (self.tc is not None and i == self.tc.k) else s
                        for i, (s, k) in enumerate(zip(self.full_shape, self.kinds)))
      if st.shape != out_shape:
        st = st.reshape(out_shape)
      for upcast in self._combos(UPCAST):
        out_idxs = [upcast.get(i, self.idx.get(i, NumNode(0))) if k not in (REDUCE, UNROLL, GROUP) else NumNode(0) for i, k in enumerate(self.kinds)]
        self.stored_where = self._stored_where(out_idxs, out_shape)
        for elem in range(self.tc.tc.elements[2] if self.tc is not None else 1):
          if self.tc is not None:  # each element of this thread's fragment of the tile is an output
            self.tc_elem = elem
            out_idxs[self.tc.m], out_idxs[self.tc.n] = (_node(x) for x in self.tc.tc.layout_c(self.tc_lane, elem))
            out_idxs[self.tc.k] = NumNode(0)
          val = self._lower(store.src[0], out_idxs)
          if self.emulate_bf16 and store.arg.dtype == dtypes.bfloat16:
            val = _float_to_bf16_bits(val).cast(dtypes.uint16)
          stores.extend(self._store(store.arg, st, out_idxs, val))
    if self.group_partials:  # a group's result is stored once, by its first thread (see _group_reduce)
      first = self._uop(self._group_lin()).lt(1)
      # the block follows every barrier: a barrier must be reached by all of the group's threads
      block = UOp(UOps.IF, None, (first, *(barrier for _, barrier, _ in self.group_partials.values())))
      stores = [UOp(UOps.STORE, None, s.src + (block,)) for s in stores]
    return UOp(UOps.SINK, None, tuple(stores))

  def _stored_where(self, out_idxs: list[Node], out_shape: tuple[sint, ...]) -> Node | None:
    """Where the kernel stores its outputs at `out_idxs`, when every store stores in the same places and that isn't
    everywhere: a PADTO'd kernel computes its padded outputs but stores only the real ones (the validity of its
    stores), or a launch has more threads than outputs. A load whose validity is exactly this one feeds only values
    that are never stored where it is invalid: it may read any element there (see _unmasked_index)."""
    if self.tc is not None:
      return None
    wheres = set()
    for store in kernel_stores(self.ast):
      st: ShapeTracker = store.arg.st
      _, valid, _ = self._lane_exprs(st if st.shape == out_shape else st.reshape(out_shape), out_idxs)
      wheres.add(valid)
    where = wheres.pop() if len(wheres) == 1 else None
    return None if where is None or isinstance(where, NumNode) or self.lane in where.vars() else where

  def _unmasked_index(self, nidx: Node, nvalid: Node) -> UOp | None:
    """The index to load from, with no mask, for a load whose validity is the stores' (_stored_where): its own where it
    is valid, else that of the same element at a valid output, an in-bounds one (the value read there is never
    stored). The select is on the part of the index that the validity depends on (a padded row's offset, not the
    reduce loop's step), so it is loop-invariant and the compiler hoists it: a matmul tile padded to 6 rows (AVX2)
    that kept a masked load of each row in its reduce loop ran at 48 GFLOP/s, against 112 for the same tile unpadded.
    None (keep the mask) when the output with the validity's indices at 0 isn't valid, or the validity depends on a
    symbolic size (whose 0 may be no value the kernel is ever given)."""
    zero: dict[Variable, Node] = {v: NumNode(0) for v in nvalid.vars()}
    if zero.keys() & self.arguments or nvalid.substitute(zero) != NumNode(1):
      return None
    if not _fits(self.idt, *_node_bounds(nidx)):  # (its parts may fit where the whole doesn't)
      raise IndexOverflow(f"{nidx} leaves {self.idt}")
    terms = list(nidx.nodes) if isinstance(nidx, SumNode) else [nidx]
    fixed = [t for t in terms if not t.vars() - zero.keys()]  # the terms the loops and lanes leave alone
    moving = [t for t in terms if t.vars() - zero.keys()]
    if any(t.vars() & zero.keys() for t in moving):  # a term of both (a // over a padded row and a loop): the whole index
      fixed, moving = terms, []
    here = Node.sum(fixed) if fixed else NumNode(0)
    there = here.substitute(zero)
    idx = self._uop(here) if here == there else \
      self._uop(nvalid).cast(dtypes.bool).alu(TernaryOps.WHERE, self._uop(here), self._uop(there))
    return idx + self._uop(Node.sum(moving)) if moving else idx

  def _element(self, mb: MemBuffer) -> DType:
    """The dtype a buffer holds in the kernel (bfloat16 emulated as its 16 bits)."""
    dt = self.buffer(mb).dtype
    assert isinstance(dt, PtrDType)
    return dt.base

  def _lane_exprs(self, st: ShapeTracker, idxs: list[Node]) -> tuple[Node, Node, list[tuple[Node, Node]] | None]:
    """A buffer's index and validity at `idxs`; when they depend on the lane, also each lane's (index, validity)."""
    nidx, nvalid = st.expr_idxs(idxs)
    if self.launch_guard is not None:
      nvalid = Node.ands([nvalid, self.launch_guard])
    if self.lanes == 1 or self.lane not in nidx.vars() | nvalid.vars():
      return nidx, nvalid, None
    return nidx, nvalid, [(nidx.substitute({self.lane: NumNode(k)}), nvalid.substitute({self.lane: NumNode(k)})) for k in range(self.lanes)]

  def _consecutive(self, lanes: list[tuple[Node, Node]], dt: DType) -> bool:
    """The lanes' elements are consecutive from lane 0's on, in a vector type the renderer has (aligned if it must be)."""
    base = lanes[0][0]
    if any((i - base) != k for k, (i, _) in enumerate(lanes)) or self.renderer.vector_width(dt) < self.lanes:
      return False
    return not self.renderer.vector_align or (base % self.lanes) == 0

  def _vector_access(self, lanes: list[tuple[Node, Node]], dt: DType) -> bool:
    """One vector LOAD/STORE can do these lanes: consecutive elements and one validity for all of them."""
    return self._consecutive(lanes, dt) and all(v == lanes[0][1] for _, v in lanes)

  def _store(self, mb: MemBuffer, st: ShapeTracker, idxs: list[Node], val: UOp) -> list[UOp]:
    nidx, nvalid, lanes = self._lane_exprs(st, idxs)
    buf = self.buffer(mb)
    if lanes is not None and not self._vector_access(lanes, self._element(mb)):  # scatter, one lane at a time
      return [s for k, (i, v) in enumerate(lanes) for s in self._store_at(buf, i, v, val.gep(k))]
    if lanes is not None:  # one vector store from lane 0's index on
      return self._store_at(buf, *lanes[0], val.broadcast(self.lanes))
    return self._store_at(buf, nidx, nvalid, val)

  def _store_at(self, buf: UOp, nidx: Node, nvalid: Node, val: UOp) -> list[UOp]:
    valid = self._uop(nvalid).cast(dtypes.bool)
    if valid.op is UOps.CONST and not valid.arg:
      return []  # an unrolled copy that lands wholly in padding (PADTO) stores nothing
    return [UOp(UOps.STORE, None, (buf, self._uop(nidx), val) + (() if valid.op is UOps.CONST else (valid,)))]

  @contextlib.contextmanager
  def _reduce_loops(self, op: LazyOp) -> Iterator[list[UOp]]:
    """The reduce loops `op` runs over, in effect while its input is lowered: the kernel's own, or for a reduction
    nested in another's input a copy of them of its own, which the reduce axes' variables then stand for (the context
    `self.ctx` maps variables to UOps; lowering under another context gives other UOps, and `_lower` caches by it)."""
    if op not in self.nested:
      yield self.reduce_ranges
      return
    copy = list(self.nested).index(op) + 1
    ranges = [UOp(UOps.RANGE, r.dtype, r.src, LoopId.of(LoopKind.REDUCE, i, copy)) for i, r in enumerate(self.reduce_ranges)]
    outer = self.ctx
    self.ctx = {**outer, **dict(zip(self.reduce_vars, ranges))}
    try:
      yield ranges
    finally:
      self.ctx = outer

  def _reduce(self, op: LazyOp, idxs: list[Node]) -> UOp:
    """This thread's reduction: over the reduce loops, with the unrolled elements combined in each iteration.

    A reduction inside another's input (softmax's max inside its sum of exps, a mean inside a variance) runs first,
    over loops of its own: the reduce axes' indices point at those loops while its input is lowered."""
    alu = REDUCE_ALU[op.op]
    vals = []
    with self._reduce_loops(op) as ranges:
      for unroll in self._combos(UNROLL):  # reduce and group axes take their indices, unrolled axes each of their values
        ridxs = [self.idx[i] if k in (REDUCE, GROUP) or i == self.vector_axis else unroll[i] if k == UNROLL else idxs[i]
                 for i, k in enumerate(self.kinds)]
        vals.append(self._lower(op.src[0], ridxs))
    across = self.vector_axis is not None and self.kinds[self.vector_axis] == UNROLL
    # the unrolled copies go round-robin into up to ACC_CHAINS // outputs accumulators, combined after the loops
    outputs = prod(s for i, (s, k) in enumerate(zip(self.full_shape, self.kinds)) if k == UPCAST and i != self.vector_axis)
    chains = max(1, min(len(vals), ACC_CHAINS // outputs)) if ranges else 1
    accs = []
    for c in range(chains):
      acc = vals[c]
      for v in vals[c + chains::chains]:
        acc = acc.alu(alu, v)
      if across:  # the lanes are elements of this reduction: a vector accumulator, its lanes combined after the loops
        acc = acc.broadcast(self.lanes)
      accs.append(UOp(UOps.REDUCE, acc.dtype, (acc, *ranges), alu) if ranges else acc)  # no loop left: all unrolled
    red = accs[0]
    for a in accs[1:]:
      red = red.alu(alu, a)
    if across:  # the vector's lanes combined in a tree of halves: log2(lanes) vector ops instead of lanes - 1 scalar
      # ones (a 64-long softmax row's max, a LayerNorm's mean of 128: the scalar chain was most of the kernel), and a
      # float sum's error grows with the tree's depth, not the lane count. A renderer that splits vector ops adds the
      # same pairs lane by lane
      n, scalar = self.lanes, red.dtype.scalar() if red.dtype is not None else None
      while n > 1 and n % 2 == 0 and scalar is not None:
        n //= 2
        lo, hi = (UOp(UOps.VECTORIZE, scalar.vec(n), tuple(red.gep(i) for i in range(k, k + n))) if n > 1 else red.gep(k) for k in (0, n))
        red = lo.alu(alu, hi)
      lanes = [red.gep(i) for i in range(n)] if n > 1 else [red]
      red = lanes[0]
      for x in lanes[1:]:
        red = red.alu(alu, x)
    return red

  def _tc_reduce(self, op: LazyOp, idxs: list[Node]) -> UOp:
    """A sum of products by tensor core: per step of the reduce loops, one WMMA of the warp's tile. This thread
    loads its fragments of A and B (the elements the tensor core's layout gives its lane) and holds its fragment of
    the accumulator; the result is that fragment, one output per element (see lower)."""
    assert self.tc is not None
    plan, tc = self.tc, self.tc.tc
    mul = op.src[0].src[0] if op.src[0].op is UnaryOps.CAST else op.src[0]
    a, b = (operand_as(s, tc.dtype_in) for s in (mul.src if plan.a_first else mul.src[::-1]))
    assert a is not None and b is not None, "Kernel.apply_opt(TC) checked the operands"
    base = [self.idx[i] if k == REDUCE else idxs[i] for i, k in enumerate(self.kinds)]

    def fragment(side: LazyOp, layout: Callable[[Node, int], tuple[Node, Node]], axes: tuple[int, int], n: int) -> UOp:
      elems = []
      for i in range(n):
        ix = list(base)
        ix[plan.m], ix[plan.n], ix[plan.k] = NumNode(0), NumNode(0), NumNode(0)
        ix[axes[0]], ix[axes[1]] = (_node(x) for x in layout(self.tc_lane, i))
        elems.append(self._lower(side, ix))
      return UOp(UOps.VECTORIZE, tc.dtype_in.vec(n), tuple(elems))
    frag_a = fragment(a, tc.layout_a, (plan.m, plan.k), tc.elements[0])
    frag_b = fragment(b, tc.layout_b, (plan.k, plan.n), tc.elements[1])
    acc_dt = tc.dtype_out.vec(tc.elements[2])
    wmma = UOp(UOps.WMMA, acc_dt, (frag_a, frag_b, UOp.const(acc_dt, 0)), tc.name)
    # the linearizer folds the sum into the WMMA's accumulator operand: acc = WMMA(a, b, acc)
    return UOp(UOps.REDUCE, acc_dt, (wmma, *self.reduce_ranges), BinaryOps.ADD) if self.reduce_ranges else wmma

  def _axes_lin(self, kinds: tuple[AxisKind, ...]) -> Node:
    """The row-major linear index of the axes of `kinds`."""
    lin: Node = NumNode(0)
    for i, k in enumerate(self.kinds):
      if k in kinds:
        lin = lin * self.full_shape[i] + self.idx[i]
    return lin

  def _group_lin(self) -> Node:
    return self._axes_lin((GROUP,))

  def _group_reduce(self, op: LazyOp, idxs: list[Node]) -> UOp:
    """A reduction shared by the threads of a workgroup (GROUP axes): each thread reduces its share and writes it to
    local memory; after a barrier, a loop combines the group's partials. All upcast copies are written before the
    one barrier, so the barrier is the same node whichever copy is being lowered.

    Where only the kernel's stores need the result, the combining loop runs in the IF block of the group's first
    thread (see lower()); a reduction nested in another's input is needed by every thread for its own partial,
    so every thread combines that one, before the block."""
    alu = REDUCE_ALU[op.op]
    upcasts = self._combos(UPCAST)
    group = prod(s for s, k in zip(self.full_shape, self.kinds) if k == GROUP)
    threads = prod(s for s, k in zip(self.full_shape, self.kinds) if k in (LOCAL, GROUP))
    assert isinstance(group, int) and isinstance(threads, int)
    dt = self.vdt(op.dtype)
    # its value depends only on the output position (global and local axes): lowered again, for another unrolled
    # copy of the reduction it is nested in or because it is also stored, it is the same reduction
    key = (op, tuple(i for i, k in zip(idxs, self.kinds) if k in (GLOBAL, LOCAL)))
    if key not in self.group_partials:
      thread = self._axes_lin((LOCAL,)) * group + self._group_lin()  # a LOCAL thread's group partials are one run
      partials = []
      for upcast in upcasts:
        partials.append(self._reduce(op, [upcast.get(i, x) if k == UPCAST else x for i, (x, k) in enumerate(zip(idxs, self.kinds))]))
      n = len(self.group_partials)  # after the partials: a reduction nested in this one has taken its number
      local = UOp(UOps.DEFINE_LOCAL, dt.ptr(), (), (f"temp{n}", threads * len(upcasts)))
      stores = [UOp(UOps.STORE, None, (local, self._uop(thread + c * threads), p)) for c, p in enumerate(partials)]
      barrier = UOp(UOps.BARRIER, None, tuple(stores))
      self.group_partials[key] = (local, barrier, n)
    local, barrier, n = self.group_partials[key]
    c = next(c for c, upcast in enumerate(upcasts) if all(idxs[i] == v for i, v in upcast.items()))
    # sum the run of partials of this thread's LOCAL position
    r = UOp(UOps.RANGE, self.idt, (UOp.const(self.idt, 0), UOp.const(self.idt, group)), LoopId.of(LoopKind.GROUP, n))
    base = self._uop((self._axes_lin((LOCAL,)) * group) + c * threads)
    ld = UOp(UOps.LOAD, dt, (local, base + r, barrier))
    return UOp(UOps.REDUCE, dt, (ld, r), alu)

  def _load(self, op: LazyOp, nidx: Node, nvalid: Node, lanes: int = 1) -> UOp:
    """A LOAD (or CONST) at one index and validity; `lanes` > 1 loads that many consecutive elements as a vector."""
    dt = self.vdt(op.arg.dtype)
    unmasked = None
    if self.stored_where is not None and nvalid == self.stored_where:  # invalid only where nothing is stored
      if op.op is BufferOps.CONST:
        return UOp.const(dt, self._const_val(op))
      if op.op is BufferOps.IOTA:
        return self._uop(nidx).cast(dt)
      if (unmasked := self._unmasked_index(nidx, nvalid)) is not None:
        nvalid = NumNode(1)
    idx, valid = unmasked if unmasked is not None else self._uop(nidx), self._uop(nvalid).cast(dtypes.bool)
    if op.op is BufferOps.CONST or op.op is BufferOps.IOTA:  # a value with no memory: the constant, or the index itself
      c = UOp.const(dt, self._const_val(op)) if op.op is BufferOps.CONST else self._uop(nidx).cast(dt)
      return c if valid.op is UOps.CONST and valid.arg else valid.alu(TernaryOps.WHERE, c, UOp.const(dt, 0))
    buf = self.buffer(op.arg)
    ldt = self._element(op.arg).vec(lanes)
    if valid.op is UOps.CONST:
      ld = UOp(UOps.LOAD, ldt, (buf, idx)) if valid.arg else UOp.const(ldt, 0)
    else:
      ld = UOp(UOps.LOAD, ldt, (buf, idx, valid, UOp.const(ldt, 0)))
    return _bf16_to_float(ld) if ldt.scalar() != op.arg.dtype else ld

  def _lane_stride(self, lanes: list[tuple[Node, Node]]) -> int | None:
    """s where lane k's index is lane 0's + k * s for a number s, and every lane has lane 0's validity; else None."""
    base, valid = lanes[0]
    step = lanes[1][0] - base
    if not isinstance(step, NumNode) or any(v != valid or (i - base) != k * step.b for k, (i, v) in enumerate(lanes)):
      return None
    return step.b  # type: ignore[no-any-return]

  def _vector_iota(self, op: LazyOp, lane0: tuple[Node, Node], stride: int) -> UOp:
    """The positions an IOTA's lanes read, lane 0's + k * stride: one broadcast and one vector add, where each lane
    computed its own index (a one-hot compare in a loop unrolled by 8 did 8 index computations per step)."""
    dt = self.vdt(op.arg.dtype)
    steps = UOp(UOps.VECTORIZE, dt.vec(self.lanes), tuple(UOp.const(dt, k * stride) for k in range(self.lanes)))
    out = self._uop(lane0[0]).cast(dt).broadcast(self.lanes).alu(BinaryOps.ADD, steps)
    valid = self._uop(lane0[1]).cast(dtypes.bool)
    if valid.op is UOps.CONST and valid.arg:
      return out
    return valid.broadcast(self.lanes).alu(TernaryOps.WHERE, out, UOp.const(dt.vec(self.lanes), 0))

  def _const_val(self, op: LazyOp) -> ConstType:
    """A CONST's value; an emulated bfloat16 one is held in a float32, so it is rounded to bfloat16 here, or the float32
    literal would carry digits the bfloat16 has not (0.1 compared unequal to a bfloat16 tensor's 0.1)."""
    if self.emulate_bf16 and op.arg.dtype == dtypes.bfloat16:
      return dtypes.as_const(op.arg.val, dtypes.bfloat16)
    return op.arg.val  # type: ignore[no-any-return]

  def _masked_load(self, op: LazyOp, lanes: list[tuple[Node, Node]]) -> UOp:
    """Consecutive elements whose validity differs by lane (a padded image's row at its edges): one vector LOAD
    with a mask, a VECTORIZE of each lane's validity; masked-off lanes read nothing and are 0."""
    mask = UOp(UOps.VECTORIZE, dtypes.bool.vec(self.lanes), tuple(self._uop(v).cast(dtypes.bool) for _, v in lanes))
    ldt = self._element(op.arg).vec(self.lanes)
    ld = UOp(UOps.LOAD, ldt, (self.buffer(op.arg), self._uop(lanes[0][0]), mask, UOp.const(ldt, 0)))
    return _bf16_to_float(ld) if ldt.scalar() != op.arg.dtype else ld

  def _float_to_int_via(self, src: DType, dst: DType) -> DType | None:
    """The signed integer a float is converted to first (`_float_to_int`) on its way to the integer `dst`, then wrapped
    to `dst` as an integer cast is; None: directly. C and compiler IRs leave a float out of an integer's range undefined,
    and clang converted it one way in a scalar and another in a vector's lanes: 300.0 -> uint8 gave 44 in a tensor of 1
    element and 255 in one of 8, NaN -> int8 0 and -128. Through int32 (int64 for uint32 and int64, where the device has
    it) these are torch's numbers on x86: -1.0 -> uint8 255, 300.0 -> 44, NaN -> 0, 3e9 -> int32 -2**31.
    tg.dtype.dtypes.as_const folds constants the same way."""
    if not dtypes.is_float(src) or not dtypes.is_int(dst) or dst == dtypes.uint64:
      return None
    if dst in (dtypes.uint32, dtypes.int64):
      return dtypes.int64 if dtypes.int64 not in self.renderer.missing_dtypes else None
    return dtypes.int32

  def _lower(self, op: LazyOp, idxs: list[Node]) -> UOp:
    """`op`'s value at `idxs`, lowered once per (node, indices, loop context): an AST is a DAG, and a value used k times
    by values used k times would otherwise be lowered k^depth times (x*x + x nested 8 deep took minutes)."""
    key = (op, tuple(idxs), id(self.ctx), getattr(self, "tc_elem", 0))
    if (hit := self._lowered.get(key)) is not None:
      return hit[0]
    out = self._lower_uncached(op, idxs)
    self._lowered[key] = (out, self.ctx)  # holding the context keeps its id from being reused by another
    return out

  def _lower_uncached(self, op: LazyOp, idxs: list[Node]) -> UOp:
    if op.op is BufferOps.LOAD or op.op is BufferOps.CONST or op.op is BufferOps.IOTA:
      nidx, nvalid, lanes = self._lane_exprs(op.arg.st, idxs)
      if lanes is None:  # the same element in every lane: a scalar
        return self._load(op, nidx, nvalid)
      if op.op is BufferOps.LOAD and self._vector_access(lanes, self._element(op.arg)):
        return self._load(op, *lanes[0], lanes=self.lanes)
      if op.op is BufferOps.LOAD and self.renderer.masked_vector_loads and self._consecutive(lanes, self._element(op.arg)):
        return self._masked_load(op, lanes)
      if op.op is BufferOps.IOTA and (stride := self._lane_stride(lanes)) is not None:
        return self._vector_iota(op, lanes[0], stride)
      return UOp(UOps.VECTORIZE, self.vdt(op.arg.dtype).vec(self.lanes), tuple(self._load(op, i, v) for i, v in lanes))
    if isinstance(op.op, ReduceOps):
      if self.tc is not None:
        return self._tc_reduce(op, idxs).gep(self.tc_elem)
      return self._group_reduce(op, idxs) if GROUP in self.kinds else self._reduce(op, idxs)
    srcs = [self._lower(s, idxs) for s in op.src]
    if op.op is UnaryOps.CAST:
      out = srcs[0]
      if (via := self._float_to_int_via(op.src[0].dtype, op.arg)) is not None:
        out = _float_to_int(out, self.vdt(via))
      out = out.cast(self.vdt(op.arg))
      if self.emulate_bf16 and op.arg == dtypes.bfloat16:  # round to bfloat16's precision, kept in a float32
        out = _bf16_to_float(_float_to_bf16_bits(out))
      return out
    if op.op is UnaryOps.BITCAST:
      if self.emulate_bf16 and dtypes.bfloat16 in (op.arg, op.src[0].dtype):
        return _emulated_bf16_bitcast(srcs[0], op.src[0].dtype, op.arg)
      return UOp(UOps.BITCAST, op.arg.vec(srcs[0].count), (srcs[0],))
    out = srcs[0].alu(op.op, *srcs[1:])  # type: ignore[arg-type]
    if self.emulate_bf16 and op.dtype == dtypes.bfloat16:  # each bfloat16 result is rounded, as on hardware
      out = _bf16_to_float(_float_to_bf16_bits(out))
    return out


def _node(x: sint | Node) -> Node:
  return x if isinstance(x, Node) else NumNode(x)


def lower_ast(ast: LazyOp, renderer: Renderer) -> UOp:
  return Lowerer(ast, renderer).lower()
