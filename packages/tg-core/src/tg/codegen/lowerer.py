"""The lowerer: a kernel AST (LazyOps over ShapeTrackers) -> a UOp graph rooted at a SINK.

Each axis of the kernel's full shape becomes an index: a hardware thread id (SPECIAL) or a loop
(RANGE) for output axes, depending on what the renderer declares, and a loop for reduced axes.
Each LOAD/CONST turns its ShapeTracker into an index and a validity expression over those indices.
"""
from __future__ import annotations

from tg.codegen.uops import UOp, UOps
from tg.dtype import DType, dtypes
from tg.ops import BinaryOps, BufferOps, LazyOp, MemBuffer, ReduceOps, TernaryOps, UnaryOps
from tg.renderer import Renderer
from tg.shape.shapetracker import ShapeTracker
from tg.shape.symbolic import AndNode, DivNode, LtNode, ModNode, MulNode, Node, NumNode, SumNode, Variable, sint


def node_to_uop(node: sint, ctx: dict[Variable, UOp]) -> UOp:
  """A symbolic expression as UOps: Variables come from `ctx` (loop indices, thread ids, kernel arguments)."""
  i32 = dtypes.int32
  if isinstance(node, int):
    return UOp.const(i32, node)
  if isinstance(node, NumNode):
    return UOp.const(i32, node.b)
  if isinstance(node, Variable):
    return ctx[node]
  if isinstance(node, (DivNode, ModNode)) and node.a.min < 0:
    # symbolic // and % are floor division; C's / and % truncate toward zero. Shift the numerator by a
    # multiple of the divisor until it can't be negative, where the two agree: (a + k*b)//b - k.
    b_min = node.b if isinstance(node.b, int) else node.b.min
    k = (-node.a.min + b_min - 1) // b_min  # ceil(-a.min / b.min)
    shifted = node_to_uop(node.a, ctx) + node_to_uop(node.b * k, ctx)
    b = node_to_uop(node.b, ctx)
    return shifted.alu(BinaryOps.IDIV, b) + (-k) if isinstance(node, DivNode) else shifted.alu(BinaryOps.MOD, b)
  if isinstance(node, (MulNode, DivNode, ModNode, LtNode)):
    a, b = node_to_uop(node.a, ctx), node_to_uop(node.b, ctx)
    op = {MulNode: BinaryOps.MUL, DivNode: BinaryOps.IDIV, ModNode: BinaryOps.MOD, LtNode: BinaryOps.CMPLT}[type(node)]
    return a.alu(op, b)
  if isinstance(node, SumNode):
    ret = node_to_uop(node.nodes[0], ctx)
    for n in node.nodes[1:]:
      ret = ret + node_to_uop(n, ctx)
    return ret
  if isinstance(node, AndNode):
    ret = node_to_uop(node.nodes[0], ctx)
    for n in node.nodes[1:]:
      ret = ret.logical_and(node_to_uop(n, ctx))
    return ret
  raise NotImplementedError(f"can't lower {type(node).__name__}")


def full_shape(ast: LazyOp) -> tuple[sint, ...]:
  """The iteration space: the shape every load is indexed in (the reduce input's shape, if any)."""
  for op in ast.lazyops():
    if op.op in (BufferOps.LOAD, BufferOps.CONST):
      return op.arg.st.shape  # type: ignore[no-any-return]
  return ast.arg.st.shape  # type: ignore[no-any-return]


def _bf16_to_float(bits16: UOp) -> UOp:
  return UOp(UOps.BITCAST, dtypes.float32, (bits16.cast(dtypes.uint32).alu(BinaryOps.SHL, UOp.const(dtypes.uint32, 16)),))


def _float_to_bf16_bits(x: UOp) -> UOp:
  """Round a float32 to the nearest bfloat16 (ties to even) and return its 16 bits as uint32."""
  bits = UOp(UOps.BITCAST, dtypes.uint32, (x,))
  lsb = bits.alu(BinaryOps.SHR, UOp.const(dtypes.uint32, 16)).alu(BinaryOps.AND, UOp.const(dtypes.uint32, 1))
  return (bits + 0x7FFF + lsb).alu(BinaryOps.SHR, UOp.const(dtypes.uint32, 16))


class Lowerer:
  def __init__(self, ast: LazyOp, renderer: Renderer) -> None:
    self.ast, self.renderer = ast, renderer
    self.emulate_bf16 = dtypes.bfloat16 in renderer.unsupported_dtypes
    self.reduceop = next((op for op in ast.lazyops() if op.op in ReduceOps), None)
    self.full_shape = full_shape(ast)
    reduce_axes = set(self.reduceop.arg) if self.reduceop is not None else set()
    self.global_dims = [i for i in range(len(self.full_shape)) if i not in reduce_axes]
    self.buffers: dict[int, UOp] = {}

  def vdt(self, dt: DType) -> DType:
    """The dtype a value of `dt` is computed in."""
    return dtypes.float32 if self.emulate_bf16 and dt == dtypes.bfloat16 else dt

  def buffer(self, mb: MemBuffer) -> UOp:
    if mb.idx not in self.buffers:
      dt = dtypes.uint16 if self.emulate_bf16 and mb.dtype == dtypes.bfloat16 else mb.dtype
      self.buffers[mb.idx] = UOp(UOps.DEFINE_GLOBAL, dt.ptr(), (), mb.idx)
    return self.buffers[mb.idx]

  def lower(self) -> UOp:
    i32 = dtypes.int32
    # the kernel's symbolic sizes are arguments: one DEFINE_VAR per Variable
    self.ctx: dict[Variable, UOp] = {}
    for v in sorted(set().union(*[s.vars() for s in self.full_shape if isinstance(s, Node)]), key=lambda v: v.expr):
      self.ctx[v] = UOp(UOps.DEFINE_VAR, i32, (), v)
    self.global_idxs: dict[int, Node] = {}
    self.global_size: list[sint] = []
    for i in self.global_dims:
      size = self.full_shape[i]
      if size == 1:  # a size-1 axis needs no index
        self.global_idxs[i] = NumNode(0)
        continue
      n = len(self.global_size)
      self.global_size.append(size)
      var = self.global_idxs[i] = Variable(f"__gidx{n}", 0, (size if isinstance(size, int) else size.max) - 1)
      if self.renderer.global_ids:
        self.ctx[var] = UOp(UOps.SPECIAL, i32, (), (f"gidx{n}", n, size))
      else:
        self.ctx[var] = UOp(UOps.RANGE, i32, (UOp.const(i32, 0), node_to_uop(size, self.ctx)), (n, False))
    self.reduce_idxs: dict[int, Node] = {}
    self.reduce_ranges: list[UOp] = []
    if self.reduceop is not None:
      for i in sorted(self.reduceop.arg):
        size = self.full_shape[i]
        if size == 1:  # a size-1 axis needs no loop
          self.reduce_idxs[i] = NumNode(0)
          continue
        n = len(self.reduce_ranges)
        var = self.reduce_idxs[i] = Variable(f"__ridx{n}", 0, (size if isinstance(size, int) else size.max) - 1)
        self.ctx[var] = UOp(UOps.RANGE, i32, (UOp.const(i32, 0), node_to_uop(size, self.ctx)), (len(self.global_size) + n, True))
        self.reduce_ranges.append(self.ctx[var])
    full_idxs = [self.global_idxs[i] if i in self.global_idxs else self.reduce_idxs[i] for i in range(len(self.full_shape))]
    out_idxs = [self.global_idxs.get(i, NumNode(0)) for i in range(len(self.full_shape))]
    self.idxs: dict[str, list[Node]] = {"full": full_idxs, "out": out_idxs}
    store = self.ast
    val = self._lower(store.src[0], "full" if self.reduceop is None else "out")
    st: ShapeTracker = store.arg.st
    if st.shape != self.full_shape:
      st = st.reshape(tuple(1 if i in self.reduce_idxs else s for i, s in enumerate(self.full_shape)))
    idx = node_to_uop(st.expr_idxs(out_idxs)[0], self.ctx)
    out_dtype = store.arg.dtype
    if self.emulate_bf16 and out_dtype == dtypes.bfloat16:
      val = _float_to_bf16_bits(val).cast(dtypes.uint16)
    return UOp(UOps.SINK, None, (UOp(UOps.STORE, None, (self.buffer(store.arg), idx, val)),))

  def _lower(self, op: LazyOp, where: str) -> UOp:
    idxs = self.idxs[where]
    if op.op is BufferOps.LOAD or op.op is BufferOps.CONST:
      st: ShapeTracker = op.arg.st
      if where == "out" and st.shape != tuple(1 if i in self.reduce_idxs else s for i, s in enumerate(self.full_shape)):
        raise AssertionError(f"load shape {st.shape} does not match the kernel output shape")
      nidx, nvalid = st.expr_idxs(idxs)
      idx, valid = node_to_uop(nidx, self.ctx), node_to_uop(nvalid, self.ctx).cast(dtypes.bool)
      dt = self.vdt(op.arg.dtype)
      if op.op is BufferOps.CONST:
        c = UOp.const(dt, op.arg.val)
        return c if valid.op is UOps.CONST and valid.arg else valid.alu(TernaryOps.WHERE, c, UOp.const(dt, 0))
      buf = self.buffer(op.arg)
      ldt = dtypes.uint16 if self.emulate_bf16 and op.arg.dtype == dtypes.bfloat16 else op.arg.dtype
      if valid.op is UOps.CONST:
        ld = UOp(UOps.LOAD, ldt, (buf, idx)) if valid.arg else UOp.const(ldt, 0)
      else:
        ld = UOp(UOps.LOAD, ldt, (buf, idx, valid, UOp.const(ldt, 0)))
      return _bf16_to_float(ld) if ldt != op.arg.dtype else ld
    if isinstance(op.op, ReduceOps):
      src = self._lower(op.src[0], "full")
      alu = {ReduceOps.SUM: BinaryOps.ADD, ReduceOps.PROD: BinaryOps.MUL, ReduceOps.MAX: BinaryOps.MAX}[op.op]
      return UOp(UOps.REDUCE, src.dtype, (src, *self.reduce_ranges), alu)
    srcs = [self._lower(s, where) for s in op.src]
    if op.op is UnaryOps.CAST:
      out = srcs[0].cast(self.vdt(op.arg))
      if self.emulate_bf16 and op.arg == dtypes.bfloat16:  # round to bfloat16's precision, kept in a float32
        out = _bf16_to_float(_float_to_bf16_bits(out))
      return out
    if op.op is UnaryOps.BITCAST:
      if self.emulate_bf16 and dtypes.bfloat16 in (op.arg, op.src[0].dtype):
        raise NotImplementedError("bitcast to or from bfloat16 on a device that emulates bfloat16")
      return UOp(UOps.BITCAST, op.arg, (srcs[0],))
    out = srcs[0].alu(op.op, *srcs[1:])  # type: ignore[arg-type]
    if self.emulate_bf16 and op.dtype == dtypes.bfloat16:  # each bfloat16 result is rounded, as on hardware
      out = _bf16_to_float(_float_to_bf16_bits(out))
    return out


def lower_ast(ast: LazyOp, renderer: Renderer) -> UOp:
  return Lowerer(ast, renderer).lower()
