"""Kernel: one kernel AST on its way to source for one renderer (optimize -> lower -> linearize -> render).

Optimizations reshape the kernel's iteration space without changing what it computes:
  UPCAST(axis, n)  split n off an output axis and unroll it: n outputs per thread, kept in registers
  UNROLL(axis, n)  split n off a reduce axis and unroll it: n elements reduced per loop iteration
  PADTO(axis, n)   pad an output axis up to a multiple of n (the padding is computed from in-bounds reads, never stored:
                   Lowerer._unmasked_index)
  LOCAL(axis, n)   split n off an output axis into the workgroup: n threads of one workgroup share it
  GROUP(axis, n)   split n off a reduce axis across the threads of a workgroup: each thread reduces its share,
                   the partial results meet in local memory after a barrier, where the group's first thread
                   combines them (neighbouring threads read neighbouring elements on every step: coalesced loads)
  GROUPTOP(axis, n) the same with the n taken off the top: each thread reduces one contiguous run
  BLOCK(axis, n)   loop blocking for caches: split n off an output axis and iterate it innermost among the output
                   loops, its blocks outermost, so a block of n rows (or tiles) sweeps the other output axes while its
                   inputs stay in cache
  NOLOCALS         promise not to use locals (the heuristics then add none)
  TC(None, i)      tensor cores: the renderer's i-th tensor core (amt) computes the kernel's matmul, a warp per output tile:
                   M, N and K of the tile are split off an output axis only A varies along, one only B varies along
                   and a reduce axis. Needs a sum of products of the tensor core's input dtype into its output dtype,
                   tile-divisible sizes, and comes first; after it only UPCAST applies
LOCAL, GROUP and GROUPTOP need a renderer with workgroups and local memory (`has_local`).
Axis numbers count the kernel's full shape (see `Kernel.full_shape`; the unrolled axes an opt adds go last
inside their group, so earlier axis numbers stay valid). A bad action raises KernelOptError; it never
miscompiles.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import auto

from tg.codegen.devectorize import devectorize
from tg.codegen.linearize import linearize
from tg.codegen.loop_collapse import collapse_loops
from tg.codegen.lowerer import GLOBAL, GROUP, LOCAL, REDUCE, TC, UNROLL, UPCAST, AxisKind, Lowerer, default_axis_kinds, full_shape, kernel_stores
from tg.codegen.one_hot_select import one_hot_sum, select_one_hot
from tg.codegen.tensor_core import TensorCorePlan, operand_as
from tg.codegen.transcendental import rewrite_transcendentals
from tg.codegen.uops import UOp, UOps
from tg.helpers import DEBUG, prod, to_function_name
from tg.ops import BinaryOps, BufferOps, ConstBuffer, LazyOp, MemBuffer, MetaOps, OpEnum, ReduceOps, UnaryOps
from tg.renderer import Program, Renderer
from tg.settings import VECTORIZE
from tg.shape.shapetracker import ShapeTracker
from tg.shape.symbolic import Node, sint

# copies of the kernel body one thread may hold, a vector's lanes counting as one copy: more only bloats code and registers
MAX_UNROLLED = 256


class OptOps(OpEnum):
  UPCAST = auto(); UNROLL = auto(); PADTO = auto(); LOCAL = auto(); GROUP = auto(); GROUPTOP = auto()  # noqa: E702
  NOLOCALS = auto(); TC = auto(); BLOCK = auto()  # noqa: E702


@dataclass(frozen=True, order=True)
class Opt:
  op: OptOps
  axis: int | None = None
  amt: int = 0  # 0: the whole axis

  def __repr__(self) -> str:
    return f"Opt(op={self.op.name}, axis={self.axis}, amt={self.amt})"


class KernelOptError(ValueError):
  pass


AXIS_KIND_NAMES = {GLOBAL: "global", REDUCE: "reduce", UPCAST: "upcast", UNROLL: "unroll", LOCAL: "local", GROUP: "group", TC: "tensor-core"}


def _map_sts(ast: LazyOp, fxn: object) -> LazyOp:
  """The AST with every buffer's ShapeTracker replaced by fxn(st). Each node is mapped once (an AST is a DAG: a node
  shared by many parents must not be rebuilt once per path to it)."""
  done: dict[LazyOp, LazyOp] = {}

  def rec(op: LazyOp) -> LazyOp:
    if (hit := done.get(op)) is not None:
      return hit
    if op.op in BufferOps:
      arg = op.arg
      new = MemBuffer(arg.idx, arg.dtype, fxn(arg.st)) if isinstance(arg, MemBuffer) else ConstBuffer(arg.val, arg.dtype, fxn(arg.st))  # type: ignore[operator]
      out = LazyOp(op.op, tuple(rec(s) for s in op.src), new)
    else:
      out = LazyOp(op.op, tuple(rec(s) for s in op.src), op.arg)
    done[op] = out
    return out
  return rec(ast)


class Kernel:
  def __init__(self, ast: LazyOp, renderer: Renderer) -> None:
    if not (ast.op is BufferOps.STORE or (ast.op is MetaOps.SINK and ast.src and all(s.op is BufferOps.STORE for s in ast.src))):
      raise ValueError(f"a kernel AST is rooted at a STORE or at a SINK of STOREs, not {ast.op}")
    self.ast, self.renderer = ast, renderer
    self.kinds: tuple[AxisKind, ...] = default_axis_kinds(ast)
    self.applied_opts: list[Opt] = []
    self.tc: TensorCorePlan | None = None

  @property
  def full_shape(self) -> tuple[sint, ...]:
    return full_shape(self.ast)

  @property
  def reduceop(self) -> LazyOp | None:
    return next((op for op in self.ast.lazyops() if isinstance(op.op, ReduceOps)), None)

  @property
  def name(self) -> str:
    kind = "r" if self.reduceop is not None else "E"
    dims = "_".join(str(s.render()) if isinstance(s, Node) else str(s) for s, k in zip(self.full_shape, self.kinds) if k in (GLOBAL, REDUCE))
    return to_function_name(f"{kind}_{dims}") if dims else f"{kind}_0"

  def copy(self) -> Kernel:
    ret = Kernel.__new__(Kernel)
    ret.ast, ret.renderer, ret.kinds, ret.applied_opts, ret.tc = self.ast, self.renderer, self.kinds, list(self.applied_opts), self.tc
    return ret

  # ---------- optimizations ----------
  def _split(self, axis: int, amt: int, new_kind: AxisKind, top: bool = False) -> None:
    """Split `amt` off the end of `axis` (off its start if `top`) into a new axis of `new_kind`, placed right after it."""
    def split(st: ShapeTracker) -> ShapeTracker:
      s = st.shape[axis]
      if s == 1:
        return st.reshape(st.shape[:axis] + (1, 1) + st.shape[axis + 1:])
      if not top:
        return st.reshape(st.shape[:axis] + (s // amt, amt) + st.shape[axis + 1:])  # type: ignore[operator]
      st = st.reshape(st.shape[:axis] + (amt, s // amt) + st.shape[axis + 1:])  # type: ignore[operator]
      order = list(range(len(st.shape)))
      order[axis], order[axis + 1] = axis + 1, axis
      return st.permute(tuple(order))
    self.ast = _map_sts(self.ast, split)
    if (r := self.reduceop) is not None:  # the reduce's axes move along, and a split-off reduce axis is reduced too
      reduced = new_kind in (UNROLL, GROUP) or (new_kind == TC and self.kinds[axis] == REDUCE)
      axes = tuple(a + (a > axis) for a in r.arg) + ((axis + 1,) if reduced else ())
      self.ast = _replace(self.ast, r, LazyOp(r.op, r.src, tuple(sorted(axes))))
    self.kinds = self.kinds[:axis + 1] + (new_kind,) + self.kinds[axis + 1:]
    if self.tc is not None:  # the tile axes after the split one move up by one
      t = self.tc
      self.tc = TensorCorePlan(t.tc, t.m + (t.m > axis), t.n + (t.n > axis), t.k + (t.k > axis), t.a_first)

  def _block(self, axis: int, amt: int) -> None:
    """Split `amt` off global `axis`: the blocks (the outer part) become the outermost loop and the `amt` (the inner
    part) the innermost output loop (loops nest in axis order). For the first output axis only the inner part moves."""
    self._split(axis, amt, GLOBAL)
    others = [i for i, k in enumerate(self.kinds) if k == GLOBAL and i not in (axis, axis + 1)]
    order = [i for i in range(len(self.kinds)) if i != axis + 1]
    order.insert(order.index(others[-1]) + 1, axis + 1)
    if others[0] < axis:  # an output loop outside the blocks: they go before it
      order.remove(axis)
      order.insert(order.index(others[0]), axis)
    self.ast = _map_sts(self.ast, lambda st: st.permute(tuple(order)))
    if (r := self.reduceop) is not None:
      self.ast = _replace(self.ast, r, LazyOp(r.op, r.src, tuple(sorted(order.index(a) for a in r.arg))))
    self.kinds = tuple(self.kinds[i] for i in order)

  def apply_opt(self, opt: Opt) -> None:
    shape, kinds = self.full_shape, self.kinds
    if self.tc is not None and opt.op is not OptOps.UPCAST:
      raise KernelOptError(f"{opt}: a tensor-core kernel takes only UPCASTs after TC (its workgroup is the warp)")
    if opt.op in (OptOps.LOCAL, OptOps.GROUP, OptOps.GROUPTOP, OptOps.TC):
      if not (self.renderer.has_local and self.renderer.global_ids):
        raise KernelOptError(f"{opt}: renderer {type(self.renderer).__name__} has no workgroups with local memory")
      if opt.op is OptOps.TC:
        self._apply_tc(opt)
        return
      if OptOps.NOLOCALS in [o.op for o in self.applied_opts]:
        raise KernelOptError(f"{opt}: the kernel was promised NOLOCALS")
    if opt.op is OptOps.NOLOCALS:
      if any(k in (LOCAL, GROUP) for k in kinds):
        raise KernelOptError(f"{opt}: the kernel already uses locals")
      self.applied_opts.append(opt)
      return
    if opt.axis is None or not 0 <= opt.axis < len(shape):
      raise KernelOptError(f"{opt}: axis out of range for the kernel shape {shape}")
    size = shape[opt.axis]
    if not isinstance(size, int):
      raise KernelOptError(f"{opt}: axis {opt.axis} has the symbolic size {size}")
    amt = opt.amt if opt.amt != 0 else size
    if opt.op is OptOps.PADTO:
      if kinds[opt.axis] != GLOBAL:
        raise KernelOptError(f"{opt}: only output (global) axes can be padded: the padding is computed but never stored")
      if amt <= 0:
        raise KernelOptError(f"{opt}: pad to a positive multiple")
      new = -(-size // amt) * amt
      if new != size:
        self.ast = _map_sts(self.ast, lambda st: st.pad(tuple((0, new - size) if i == opt.axis else (0, 0) for i in range(len(st.shape)))))
      self.applied_opts.append(opt)
      return
    if opt.op is OptOps.BLOCK:
      if self.renderer.global_ids:
        raise KernelOptError(f"{opt}: output axes are hardware indices on {type(self.renderer).__name__}, not loops to reorder")
      if kinds[opt.axis] != GLOBAL or amt <= 1 or size % amt or amt == size:
        raise KernelOptError(f"{opt}: needs a global axis that {amt} divides into more than one block")
      if sum(k == GLOBAL for k in kinds) < 2:
        raise KernelOptError(f"{opt}: the kernel has one output loop: there is nothing to sweep")
      self._block(opt.axis, amt)
      self.applied_opts.append(opt)
      return
    want = GLOBAL if opt.op in (OptOps.UPCAST, OptOps.LOCAL) else REDUCE
    if kinds[opt.axis] != want:
      raise KernelOptError(f"{opt}: axis {opt.axis} is a {AXIS_KIND_NAMES[kinds[opt.axis]]} axis, "
                           f"{opt.op.name} needs a {'global' if want == GLOBAL else 'reduce'} one")
    if amt <= 1 or size % amt:
      raise KernelOptError(f"{opt}: {amt} must be > 1 and divide the axis size {size}")
    new_kind = {OptOps.UPCAST: UPCAST, OptOps.UNROLL: UNROLL, OptOps.LOCAL: LOCAL, OptOps.GROUP: GROUP, OptOps.GROUPTOP: GROUP}[opt.op]
    if new_kind in (UPCAST, UNROLL):
      sizes = [s for s, k in zip(shape, kinds) if k in (UPCAST, UNROLL) and isinstance(s, int)] + [amt]
      # the lanes of one vector are one copy: the widest power-of-two axis a vector of the kernel's dtype can hold
      width = max((self.renderer.vector_width(op.arg.dtype) for op in self.ast.lazyops() if op.op in BufferOps), default=1)
      lanes = max((x for x in sizes if x <= width and x & (x - 1) == 0), default=1)
      if (unrolled := prod(sizes) // lanes) > MAX_UNROLLED:
        raise KernelOptError(f"{opt}: {unrolled} unrolled copies (of vectors of {lanes}) is more than {MAX_UNROLLED}")
    else:
      self._check_workgroup(opt, amt)
    self._split(opt.axis, amt, new_kind, top=opt.op is OptOps.GROUPTOP)
    self.applied_opts.append(opt)

  def _apply_tc(self, opt: Opt) -> None:
    r = self.renderer
    if not r.tensor_cores:
      raise KernelOptError(f"{opt}: renderer {type(r).__name__} declares no tensor cores")
    if not 0 <= opt.amt < len(r.tensor_cores):
      raise KernelOptError(f"{opt}: renderer {type(r).__name__} has {len(r.tensor_cores)} tensor cores, amt picks one of them")
    if self.applied_opts:
      raise KernelOptError(f"{opt}: TC must be the first opt, the tile axes are split from the unoptimized kernel")
    tc = r.tensor_cores[opt.amt]
    reduces = {op for op in self.ast.lazyops() if isinstance(op.op, ReduceOps)}
    red = self.reduceop
    if red is None or len(reduces) != 1 or red.op is not ReduceOps.SUM or red.dtype != tc.dtype_out:
      raise KernelOptError(f"{opt}: {tc.name} needs one sum into {tc.dtype_out}")
    mul = red.src[0].src[0] if red.src[0].op is UnaryOps.CAST else red.src[0]
    if mul.op is not BinaryOps.MUL or any(operand_as(s, tc.dtype_in) is None for s in mul.src):
      raise KernelOptError(f"{opt}: {tc.name} needs the sum of a product of two {tc.dtype_in} operands")

    def varies(side: LazyOp, axis: int) -> bool:  # an operand moves along `axis` (masked views count as moving)
      return any(op.arg.st.real_strides()[axis] != 0 for op in side.lazyops() if op.op is BufferOps.LOAD)

    shape = self.full_shape
    (m_size, n_size, k_size), plan = tc.dims, None
    for a, b in ((mul.src[0], mul.src[1]), (mul.src[1], mul.src[0])):
      ms = [i for i, k in enumerate(self.kinds) if k == GLOBAL and varies(a, i) and not varies(b, i) and _divides(m_size, shape[i])]
      ns = [i for i, k in enumerate(self.kinds) if k == GLOBAL and varies(b, i) and not varies(a, i) and _divides(n_size, shape[i])]
      ks = [i for i, k in enumerate(self.kinds) if k == REDUCE and varies(a, i) and varies(b, i) and _divides(k_size, shape[i])]
      if ms and ns and ks:
        plan = (ms[-1], ns[-1], ks[-1], a is mul.src[0])
        break
    if plan is None:
      raise KernelOptError(f"{opt}: no output axes of sizes divisible by {m_size} and {n_size} that only one operand moves along, "
                           f"or no reduce axis divisible by {k_size}, in the shape {shape}")
    m, n, k, a_first = plan
    for axis, amt in sorted(((m, m_size), (n, n_size), (k, k_size)), reverse=True):  # the highest first: lower numbers stay
      self._split(axis, amt, TC)
    inner = {x: x + 1 + sum(1 for y in (m, n, k) if y < x) for x in (m, n, k)}
    self.tc = TensorCorePlan(tc, inner[m], inner[n], inner[k], a_first)
    self.applied_opts.append(opt)

  def _check_workgroup(self, opt: Opt, amt: int) -> None:
    r = self.renderer
    threads = prod(s for s, k in zip(self.full_shape, self.kinds) if k in (LOCAL, GROUP) and isinstance(s, int)) * amt
    if threads > r.local_max_threads:
      raise KernelOptError(f"{opt}: {threads} threads in a workgroup is more than the device's {r.local_max_threads}")
    if opt.op in (OptOps.GROUP, OptOps.GROUPTOP):
      reduces = [op for op in self.ast.lazyops() if isinstance(op.op, ReduceOps)]
      upcasts = prod(s for s, k in zip(self.full_shape, self.kinds) if k == UPCAST and isinstance(s, int))
      smem = sum(op.dtype.itemsize for op in set(reduces)) * threads * upcasts
      if smem > r.shared_max:
        raise KernelOptError(f"{opt}: {smem} bytes of local memory is more than the device's {r.shared_max}")

  def apply_opts(self, opts: list[Opt]) -> Kernel:
    for o in opts:
      self.apply_opt(o)
    return self

  def hand_coded_optimizations(self) -> Kernel:
    """The opts the heuristics choose for this kernel and its renderer (tg.codegen.heuristics), applied."""
    from tg.codegen.heuristics import hand_coded_optimizations
    return hand_coded_optimizations(self)

  # ---------- to source ----------
  def vector_axis(self) -> int | None:
    """The UPCAST or UNROLL axis to lower as vectors (see Lowerer): of a power-of-two size the renderer has vectors for, the
    one whose lanes times contiguous loads is the most: the widest vector that most loads read whole.
    None without one, for group reductions (their partials are scalars) and with VECTORIZE=0."""
    if not self.renderer.vector_bytes or GROUP in self.kinds or self.tc is not None or not VECTORIZE.value:
      return None
    best, best_score = None, 0
    reduce_free = not any(k in (REDUCE, UNROLL) for k in self.kinds)
    for i, (size, kind) in enumerate(zip(self.full_shape, self.kinds)):
      # an UNROLL axis works too: a vector accumulator, whose lanes are combined after the reduce loops
      if kind not in (UPCAST, UNROLL) or not isinstance(size, int) or size < 2 or size & (size - 1):
        continue
      contiguous = [op for op in self.ast.lazyops() if op.op in (BufferOps.LOAD, BufferOps.STORE)
                    and size <= self.renderer.vector_width(op.arg.dtype) and op.arg.st.real_strides()[i] == 1]
      loads, stores = sum(op.op is BufferOps.LOAD for op in contiguous), sum(op.op is BufferOps.STORE for op in contiguous)
      # lanes times the contiguous loads: a reduce's loads run on every iteration, its store once at the end (it only
      # breaks ties there); in an elementwise kernel a store counts twice, a scatter costs most
      score = size * (loads + stores * (2 if reduce_free else 0)) + stores
      if score > best_score:
        best, best_score = i, score
    return best

  def linearize(self) -> list[UOp]:
    self.lowerer = Lowerer(self.ast, self.renderer, self.kinds, self.vector_axis(), self.tc)
    # every buffer of the AST is a parameter, read or not (folding may drop a read: a where on a constant condition):
    # a program is called with all of its schedule item's buffers, parameter i being buffer i (Program.buf_count)
    for op in self.ast.lazyops():
      if op.op in (BufferOps.LOAD, BufferOps.STORE):
        self.lowerer.buffer(op.arg)
    sink = self.lowerer.lower()
    sink = select_one_hot(sink)  # a sum over a one-hot mask (a tensor index, gather, Embedding) becomes one load
    sink = collapse_loops(sink)  # arange-like sums of a masked constant become a count: no loop
    # transcendental fallback: ops the renderer can't compute become basic ALU ops, on vectors as on scalars (kernels
    # without them are untouched)
    r = self.renderer
    fma = r.fused_mulacc and r.cpu_target is not None and r.cpu_target.fma  # MULACC is then one rounding (an FMA instruction)
    sink = rewrite_transcendentals(sink, r.transcendental_fallback, fma)
    # then the vector operations the renderer can't write as such become one scalar operation per lane
    def keep(u: UOp) -> bool:
      return r.keeps_vector(u) and all(r.vector_width(x.dtype.scalar()) >= x.dtype.count for x in (u, *u.src) if x.dtype is not None)
    sink = devectorize(sink, keep)
    if DEBUG >= 6:  # the UOp graph before linearizing: each node once, sources by number
      graph = sink.toposort()
      for i, u in enumerate(graph):
        print(f"graph {i:4d} {u.op!s:20s} {u.dtype!s:20s} {[graph.index(s) for s in u.src]} {u.arg!r}")
    self.uops = linearize(sink, self.renderer.fused_mulacc, self.lowerer.buffers.values())
    # a dtype the device can't hold may also arise inside a kernel (a CAST to float16 between float32 buffers): refused
    # here, before the renderer writes a type the device's compiler doesn't know
    if (missing := self.renderer.missing_dtypes) and \
       (dt := next((u.dtype for u in self.uops if u.dtype is not None and u.dtype.scalar() in missing), None)) is not None:
      raise NotImplementedError(f"{self.renderer.device or type(self.renderer).__name__} has no {dt.scalar()} in kernels")
    if DEBUG >= 5:
      for i, u in enumerate(self.uops):
        print(f"{i:4d} {u.op!s:20s} {u.dtype!s:20s} {[self.uops.index(s) if s in self.uops else s.op for s in u.src]} {u.arg!r}")
    return self.uops

  def to_program(self) -> Program:
    uops = self.linearize()
    src = self.renderer.render(self.name, uops)
    if DEBUG >= 3 and self.applied_opts:
      print(f"{self.name}: {self.applied_opts}")
    if DEBUG >= 4:
      print(src)
    global_size = tuple(self.lowerer.global_size) if self.renderer.global_ids else ()
    local_size = tuple(self.lowerer.local_size) if self.renderer.global_ids else ()
    loads = [op for op in self.ast.lazyops() if op.op is BufferOps.LOAD]
    reduce_axes = [i for i, kind in enumerate(self.kinds) if kind in (REDUCE, UNROLL, GROUP)]
    stores = sum(s.arg.dtype.itemsize * prod(s.arg.st.shape) for s in kernel_stores(self.ast))
    # napkin math for DEBUG=2: one op per ALU/reduce node per point of the iteration space. A one-hot sum's loop is gone
    # (one_hot_select): one point per output, and a load moving along the reduce axes reads one element per output
    one_hot = one_hot_sum(self.reduceop, reduce_axes)
    outputs = prod(s for i, s in enumerate(self.full_shape) if i not in reduce_axes)
    space = outputs if one_hot else prod(self.full_shape)
    def read(st: ShapeTracker) -> sint:
      return outputs if one_hot and any(st.real_strides()[r] != 0 for r in reduce_axes) else st.real_size()
    mem = sum(op.arg.dtype.itemsize * read(op.arg.st) for op in loads) + stores
    ops = space * sum(1 for op in self.ast.lazyops() if op.op not in BufferOps and op.op is not MetaOps.SINK)
    buf_count = len({u.arg for u in uops if u.op is UOps.DEFINE_GLOBAL})
    assert [u.arg for u in uops if u.op is UOps.DEFINE_GLOBAL] == list(range(buf_count)), "buffer parameters are 0..n-1 in order"
    variables = tuple(u.arg for u in uops if u.op is UOps.DEFINE_VAR)
    return Program(self.name, src, self.renderer.device, global_size, local_size, variables, buf_count, ops, mem, uops)


def _divides(amt: int, size: sint) -> bool:
  return isinstance(size, int) and size % amt == 0


def _replace(ast: LazyOp, old: LazyOp, new: LazyOp) -> LazyOp:
  if ast is old or ast == old:
    return new
  return LazyOp(ast.op, tuple(_replace(s, old, new) for s in ast.src), ast.arg)
