"""LLVMRenderer: LLVM IR text for the host CPU, from the same linear program the C renderers walk.

Output axes are loops. Loop counters and accumulators live in allocas of the entry block; the optimizer's
mem2reg turns them into registers and phis, so the walk stays a plain top-to-bottom emission, like C's.
float16 is LLVM's half (each op rounds to half, as the PYTHON reference does); bfloat16 is emulated by core.
EXP2, LOG2 and SIN are expanded by core (tg.codegen.transcendental) into ops that vectorize and need no libm.

A kernel with enough work is split across CPU threads (tg.renderer.cpu): its outermost output loop runs over
[tg_start, tg_end), two extra i32 arguments, and the module exports `@<name>_tg_outer`, the loop's length.
"""
from __future__ import annotations

import re

from tg.codegen.uops import UOp, UOps, store_valid
from tg.dtype import DType, PtrDType, dtypes
from tg.ops import BinaryOps, UnaryOps
from tg.renderer import Renderer
from tg.renderer.cpu import END, START, cpu_matmul_panels, cpu_reduce_leaf, loop_to_split, native_vector_bytes, outer_symbol
from tg.renderer.cpu_target import ARCH_NAMES, cpu_target
from tg_llvm.alu import alu, bitcast, cast, vector_cast_ok
from tg_llvm.builder import IRBuilder
from tg_llvm.irtypes import intrinsic_suffix, ll_const, ll_type, mem_type


def attributes(vector_bytes: int, arch: str) -> str:
  """The kernels' function attributes. clang's defaults for C: no FP exceptions to preserve, so the optimizer may
  speculate and vectorize float math. On x86, "prefer-vector-width" of the target's own width: LLVM tunes many Intel
  AVX-512 CPUs (skylake-avx512 to sapphirerapids, and rocketlake) to prefer 256-bit vectors, and its loop vectorizer
  then builds 8-float loops where the heuristics counted on 16 (tg_clang.compiler.vector_width_flags says the same to
  clang)."""
  width = f' "prefer-vector-width"="{vector_bytes * 8}"' if vector_bytes > 0 and ARCH_NAMES.get(arch, arch) == "x86_64" else ""
  return f'attributes #0 = {{ nounwind "no-trapping-math"="true"{width} }}'


def _global_name(name: str) -> str:
  return name if re.fullmatch(r"[A-Za-z_][\w.]*", name) else f'"{name}"'


class LLVMRenderer(Renderer):
  device = "LLVM"
  global_ids = False
  unsupported_dtypes = frozenset({dtypes.bfloat16})
  transcendental_fallback = frozenset({UnaryOps.EXP2, UnaryOps.LOG2, UnaryOps.SIN})
  vector_bytes = native_vector_bytes()  # <n x T> as wide as the CPU's registers
  masked_vector_loads = True  # a whole vector read and masked (see overread_bytes), else llvm.masked.load
  cpu_target = cpu_target()  # CPU_TARGET: the host, or the x86-64 level the compiler builds for
  # one vector of the register tile and its rows (tg.codegen.heuristics.cpu.register_tile): A is read as one stream,
  # B as one per vector of the tile
  matmul_panel, matmul_panel_rows = cpu_matmul_panels(cpu_target)
  # without F16C (CPU_TARGET=x86-64-v2, an SSE-only host) LLVM lowers half <-> float to __extendhfsf2/__truncsfhf2
  # calls that nothing in the process provides: float16 is refused with a clear error instead (CLANG writes its own)
  missing_dtypes = frozenset() if cpu_target.half_hardware else frozenset({dtypes.float16})
  reduce_leaf = cpu_reduce_leaf(native_vector_bytes())  # runs short enough for its accumulators (tg.renderer.cpu.SUM_CHAIN)
  overread_bytes = native_vector_bytes()  # the LLVM allocator's slack around every buffer
  fused_mulacc = True  # llvm.fmuladd

  def keeps_vector(self, u: UOp) -> bool:
    # lane-wise instructions keep their vectors; division (its zero guards) and float -> int (saturating intrinsics)
    # go lane by lane, as do bools (core never makes bool vectors here: their memory and register types differ)
    if u.op is UOps.ALU:
      return u.arg not in (BinaryOps.IDIV, BinaryOps.MOD)
    if u.op is UOps.CAST:
      assert u.dtype is not None and u.src[0].dtype is not None
      return vector_cast_ok(u.src[0].dtype, u.dtype)
    return True

  def render(self, name: str, uops: list[UOp]) -> str:
    return _KernelWriter(name, uops, self.overread_bytes).render()


class _KernelWriter:
  """One kernel's walk: the values of uops (`r`), the allocas of accumulators and loops."""

  def __init__(self, name: str, uops: list[UOp], overread_bytes: int = 0) -> None:
    self.name, self.uops, self.overread_bytes = name, uops, overread_bytes
    self.b = IRBuilder()
    self.r: dict[UOp, str] = {}
    self.acc: dict[UOp, str] = {}  # DEFINE_ACC (and the REDUCE it stands for) -> its alloca
    self.loops: dict[UOp, tuple[str, str, str]] = {}  # RANGE -> (counter alloca, header label, exit label)
    self.ifs: dict[UOp, str] = {}  # an open IF -> the label after its block
    self.args: list[str] = []
    self.split = loop_to_split(uops)

  # ---------- values ----------
  def val(self, u: UOp) -> str:
    """The value of `u` here: an accumulator is read from its alloca at each use."""
    if u in self.acc:
      assert u.dtype is not None
      return self.b.value(f"load {ll_type(u.dtype)}, ptr {self.acc[u]}")
    return self.r[u]

  def arg(self, u: UOp) -> tuple[str, DType]:
    assert u.dtype is not None
    return self.val(u), u.dtype

  def ptr(self, buf: UOp, idx: UOp) -> str:
    assert isinstance(buf.dtype, PtrDType) and idx.dtype is not None
    return self.b.value(f"getelementptr inbounds {mem_type(buf.dtype.base)}, ptr {self.r[buf]}, {ll_type(idx.dtype)} {self.val(idx)}")

  # ---------- memory ----------
  def load(self, buf: UOp, idx: UOp, dt: DType) -> str:
    """Load a `dt` at element idx (a vector: consecutive elements; aligned to the element only)."""
    assert isinstance(buf.dtype, PtrDType)
    x = self.b.value(f"load {mem_type(dt)}, ptr {self.ptr(buf, idx)}, align {dt.scalar().itemsize}")
    return self.b.value(f"icmp ne i8 {x}, 0") if dt == dtypes.bool else x

  def store(self, buf: UOp, idx: UOp, x: UOp) -> None:
    assert isinstance(buf.dtype, PtrDType) and x.dtype is not None
    dt, v = x.dtype, self.val(x)
    if dt == dtypes.bool:
      v = self.b.value(f"zext i1 {v} to i8")
    self.b.emit(f"store {mem_type(dt)} {v}, ptr {self.ptr(buf, idx)}, align {dt.scalar().itemsize}")

  def gated_load(self, u: UOp) -> str:
    """Read only where valid (a masked index may point outside the buffer); elsewhere the alternative value."""
    assert u.dtype is not None
    valid, alt = self.val(u.src[2]), self.val(u.src[3])
    before, then, end = self.b.block, self.b.label("load"), self.b.label("loaded")
    self.b.emit(f"br i1 {valid}, label %{then}, label %{end}")
    self.b.start_block(then)
    x = self.load(u.src[0], u.src[1], u.dtype)
    self.b.emit(f"br label %{end}")
    self.b.start_block(end)
    return self.b.value(f"phi {ll_type(u.dtype)} [ {x}, %{then} ], [ {alt}, %{before} ]")

  def masked_load(self, u: UOp) -> str:
    """A vector load with one bool per lane. Where the allocator's slack covers a vector (overread_bytes), branch-free:
    the whole vector is read, from lane 0's index when any lane is valid (every lane then lies within the slack of
    the buffer), else from element 0, and an and with the mask's bits keeps the valid lanes. Otherwise llvm.masked.load, where
    masked-off lanes touch no memory; lane 0's address may then lie outside the buffer, so that GEP is not inbounds."""
    buf, idx, mask, alt = u.src
    assert u.dtype is not None and isinstance(buf.dtype, PtrDType) and idx.dtype is not None and mask.dtype is not None
    t, mt, it = ll_type(u.dtype), ll_type(mask.dtype), ll_type(idx.dtype)
    if self.overread_bytes >= u.dtype.itemsize:
      lanes = list(dict.fromkeys(self.val(x) for x in mask.src))
      some = lanes[0]
      for x in lanes[1:]:
        some = self.b.value(f"or i1 {some}, {x}")
      i = self.b.value(f"select i1 {some}, {it} {self.val(idx)}, {it} 0")
      p = self.b.value(f"getelementptr {mem_type(buf.dtype.base)}, ptr {self.r[buf]}, {it} {i}")
      whole = self.b.value(f"load {t}, ptr {p}, align {u.dtype.scalar().itemsize}")
      # the mask as lanes of all-one or all-zero bits, as wide as the data's: an and, where a select on a vector of
      # i1s built lane by lane costs x86 a mask-register shuffle per lane
      n, w = u.dtype.count, u.dtype.scalar().itemsize * 8
      bits = "undef"
      for k, lane in enumerate(mask.src):
        x = self.b.value(f"sext i1 {self.val(lane)} to i{w}")
        bits = self.b.value(f"insertelement <{n} x i{w}> {bits}, i{w} {x}, i32 {k}")
      ints = self.b.value(f"bitcast {t} {whole} to <{n} x i{w}>")
      kept = self.b.value(f"and <{n} x i{w}> {ints}, {bits}")
      if not alt.is_zero():
        inv = self.b.value(f"xor <{n} x i{w}> {bits}, <{', '.join([f'i{w} -1'] * n)}>")
        other = self.b.value(f"and <{n} x i{w}> {inv}, " + self.b.value(f"bitcast {t} {self.val(alt)} to <{n} x i{w}>"))
        kept = self.b.value(f"or <{n} x i{w}> {kept}, {other}")
      return self.b.value(f"bitcast <{n} x i{w}> {kept} to {t}")
    p = self.b.value(f"getelementptr {mem_type(buf.dtype.base)}, ptr {self.r[buf]}, {it} {self.val(idx)}")
    return self.b.call(t, f"llvm.masked.load.{intrinsic_suffix(u.dtype)}.p0",
                       [("ptr", p), ("i32", str(u.dtype.scalar().itemsize)), (mt, self.val(mask)), (t, self.val(alt))])

  def gated_store(self, u: UOp, valid: UOp) -> None:
    then, end = self.b.label("store"), self.b.label("stored")
    self.b.emit(f"br i1 {self.val(valid)}, label %{then}, label %{end}")
    self.b.start_block(then)
    self.store(*u.src[:3])
    self.b.emit(f"br label %{end}")
    self.b.start_block(end)

  # ---------- IF blocks ----------
  def open_if(self, u: UOp) -> None:
    """Branch to the block or past it. Nothing defined in the block is used after it (the linearizer sees to that),
    so the merge block needs no phis."""
    then, end = self.b.label("then"), self.b.label("endif")
    self.b.emit(f"br i1 {self.val(u.src[0])}, label %{then}, label %{end}")
    self.b.start_block(then)
    self.ifs[u] = end

  def close_if(self, u: UOp) -> None:
    end = self.ifs.pop(u)
    self.b.emit(f"br label %{end}")
    self.b.start_block(end)

  # ---------- loops ----------
  def open_loop(self, u: UOp) -> None:
    assert u.dtype is not None
    t = ll_type(u.dtype)
    start, end = (f"%{START}", f"%{END}") if u is self.split else (self.val(u.src[0]), self.val(u.src[1]))
    if u is self.split and t != "i32":  # the slice's bounds are i32 arguments; a 64-bit loop widens them
      start, end = (self.b.value(f"sext i32 {x} to {t}") for x in (start, end))
    slot, head, body, done = self.b.alloca(t), self.b.label("loop"), self.b.label("body"), self.b.label("done")
    self.b.emit(f"store {t} {start}, ptr {slot}")
    self.b.emit(f"br label %{head}")
    self.b.start_block(head)
    self.r[u] = self.b.value(f"load {t}, ptr {slot}")
    self.b.emit(f"br i1 {self.b.value(f'icmp slt {t} {self.r[u]}, {end}')}, label %{body}, label %{done}")
    self.b.start_block(body)
    self.loops[u] = (slot, head, done)

  def close_loop(self, u: UOp) -> None:
    assert u.dtype is not None
    slot, head, done = self.loops[u]
    t = ll_type(u.dtype)
    self.b.emit(f"store {t} {self.b.value(f'add nsw {t} {self.r[u]}, 1')}, ptr {slot}")  # i < end, so i + 1 can't wrap
    self.b.emit(f"br label %{head}")
    self.b.start_block(done)

  # ---------- the walk ----------
  def step(self, u: UOp) -> None:
    b, dt = self.b, u.dtype
    if u.op is UOps.DEFINE_GLOBAL:
      self.r[u] = f"%data{u.arg}"
      self.args.append(f"ptr noalias {self.r[u]}")  # buffers never overlap, as C's restrict promises
    elif u.op is UOps.DEFINE_VAR:
      assert dt is not None
      self.r[u] = f"%var{len(self.args)}"
      self.args.append(f"{ll_type(dt)} {self.r[u]}")
    elif u.op is UOps.CONST:
      assert dt is not None
      self.r[u] = ll_const(u.arg, dt)
    elif u.op is UOps.RANGE:
      self.open_loop(u)
    elif u.op is UOps.ENDRANGE:
      self.close_loop(u.src[0])
    elif u.op is UOps.LOAD:
      if len(u.src) == 4 and u.src[2].count > 1:
        self.r[u] = self.masked_load(u)
      elif len(u.src) == 4:
        self.r[u] = self.gated_load(u)
      elif len(u.src) == 2:
        assert dt is not None
        self.r[u] = self.load(u.src[0], u.src[1], dt)
      else:
        raise NotImplementedError("LLVM has no local memory: a LOAD after a BARRIER can't be rendered")
    elif u.op is UOps.IF:
      self.open_if(u)
    elif u.op is UOps.ENDIF:
      self.close_if(u.src[0])
    elif u.op is UOps.STORE:
      if (valid := store_valid(u)) is not None:
        self.gated_store(u, valid)
      else:
        self.store(*u.src[:3])
    elif u.op is UOps.DEFINE_ACC:
      assert dt is not None
      self.acc[u] = self.acc[u.arg] = b.alloca(ll_type(dt))  # after its loops, the REDUCE's value is this accumulator
      b.emit(f"store {ll_type(dt)} {self.val(u.src[0])}, ptr {self.acc[u]}")
    elif u.op is UOps.ASSIGN:
      assert dt is not None
      b.emit(f"store {ll_type(dt)} {self.val(u.src[1])}, ptr {self.acc[u.src[0]]}")
    elif u.op is UOps.ALU:
      assert dt is not None
      self.r[u] = alu(b, u.arg, dt, [self.arg(s) for s in u.src], *self.range_facts(u))
    elif u.op in (UOps.CAST, UOps.BITCAST):
      assert dt is not None
      x, src_dt = self.arg(u.src[0])
      self.r[u] = (cast if u.op is UOps.CAST else bitcast)(b, x, src_dt, dt)
    elif u.op is UOps.VECTORIZE:
      assert dt is not None
      vec, st = "poison", ll_type(dt.scalar())
      for i, s in enumerate(u.src):
        vec = b.value(f"insertelement {ll_type(dt)} {vec}, {st} {self.val(s)}, i32 {i}")
      self.r[u] = vec
    elif u.op is UOps.GEP:
      assert u.src[0].dtype is not None
      self.r[u] = b.value(f"extractelement {ll_type(u.src[0].dtype)} {self.val(u.src[0])}, i32 {u.arg}")
    else:
      raise NotImplementedError(f"LLVM can't render {u.op} (it has no thread ids or local memory: global_ids and has_local are off)")

  def range_facts(self, u: UOp) -> tuple[bool, bool]:
    """(the exact result fits its dtype, every operand is >= 0), from index bounds: true only for index math."""
    assert u.dtype is not None
    if u.dtype.count > 1 or not dtypes.is_int(u.dtype) or u.arg not in (BinaryOps.ADD, BinaryOps.MUL, BinaryOps.IDIV, BinaryOps.MOD):
      return False, False
    fits = dtypes.min(u.dtype) <= u.vmin and u.vmax <= dtypes.max(u.dtype)
    return fits, all(s.vmin >= 0 for s in u.src)  # type: ignore[operator]

  def render(self) -> str:
    for u in self.uops:
      if u.op is UOps.ALU and u.dtype is not None and dtypes.is_int(u.dtype):
        u.vmin  # noqa: B018  # bounds asked in program order (they are memoized), so the recursion stays shallow
      self.step(u)
    if self.split is not None:
      self.args += [f"i32 %{START}", f"i32 %{END}"]
    name = _global_name(self.name)
    head = f"@{_global_name(outer_symbol(self.name))} = constant i32 {self.split.src[1].arg}\n\n" if self.split is not None else ""
    body = "\n".join(["entry:", *self.b.allocas, *self.b.lines, "  ret void"])
    declares = "".join(f"{d}\n" for d in sorted(self.b.declares))
    attrs = attributes(native_vector_bytes(), cpu_target().arch)
    return f"{head}define void @{name}({', '.join(self.args)}) #0 {{\n{body}\n}}\n\n{declares}{attrs}\n"
