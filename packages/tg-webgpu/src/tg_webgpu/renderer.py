"""WGSLRenderer: a linearized kernel as one WGSL compute shader.

Output axes are workgroups (SPECIAL gidx<d> = workgroup_id along d) and threads inside one (lidx<d> =
local_invocation_id); @workgroup_size is the lidx sizes. Buffer n is `@group(0) @binding(n)`, always
read_write (one GPU buffer may be bound twice, e.g. an in-place op, and WebGPU refuses a buffer bound both
read-only and writable in one dispatch). Symbolic sizes come in one uniform struct at `@group(1) @binding(0)`:
uniform, so loops bounded by them keep barriers in uniform control flow.

WGSL storage has no 8- or 16-bit integers and no bool, while tg stores bool/int8/uint8 in one byte and
int16/uint16 (and bfloat16's bits) in two. Such buffers are arrays of u32 words: a load extracts its bits; a
store, when neighbouring threads write other bytes of the same word, clears then sets its bits with
atomicAnd/atomicOr on an array<atomic<u32>> (each thread touches only its own bits, so the two atomics commute
with everyone else's). float16 is WGSL's f16 where the adapter has shader-f16; float64/int64/uint64 don't exist.
"""
from __future__ import annotations

from tg.codegen.uops import UOp, UOps, store_valid
from tg.dtype import DType, PtrDType, dtypes
from tg.ops import exec_alu
from tg.renderer import Renderer
from tg_webgpu import wgsl
from tg_webgpu.gpu import DEFAULT_LIMITS

XYZ = "xyz"


class WGSLRenderError(RuntimeError):
  pass


class WGSLRenderer(Renderer):
  device = "WEBGPU"
  global_ids = True
  has_local = True
  strict_float = False  # WGSL lets the compiler fuse float math, divide to 2.5 ulp and assume no NaN/inf
  unsupported_dtypes = frozenset({dtypes.bfloat16})  # core computes bfloat16 in float32 through its 16 bits

  def __init__(self, limits: dict[str, int] | None = None, f16: bool = False) -> None:
    """`limits`: the device's (gpu.limits()), WebGPU's guaranteed minimums by default; `f16`: the device has shader-f16."""
    lim = {**DEFAULT_LIMITS, **(limits or {})}
    self.f16 = f16
    self.max_buffers = lim["max-storage-buffers-per-shader-stage"]
    self.global_max = (lim["max-compute-workgroups-per-dimension"],) * 3
    self.local_max = (lim["max-compute-workgroup-size-x"], lim["max-compute-workgroup-size-y"], lim["max-compute-workgroup-size-z"])
    self.local_max_threads = lim["max-compute-invocations-per-workgroup"]
    self.shared_max = lim["max-compute-workgroup-storage-size"]
    self.missing_dtypes = frozenset({dtypes.float64, dtypes.int64, dtypes.uint64} | (set() if f16 else {dtypes.float16}))

  def packed(self, dt: DType) -> bool:
    """Whether a global buffer of `dt` is accessed through u32 words (WGSL has no storage type of its size)."""
    return dt.itemsize < 4 and not (dt == dtypes.float16 and self.f16)

  def render(self, name: str, uops: list[UOp]) -> str:
    return _KernelText(self, name, uops).render()


class _KernelText:
  """The state of rendering one kernel: names of values, body lines, module-scope declarations."""

  def __init__(self, renderer: WGSLRenderer, name: str, uops: list[UOp]) -> None:
    self.rd, self.name, self.uops = renderer, name, uops
    self.r: dict[UOp, str] = {}
    self.lines: list[str] = []
    self.decls: list[str] = []
    self.vars: list[UOp] = []
    self.counter: dict[str, int] = {}
    self.depth = 1
    stored = {u.src[0] for u in uops if u.op is UOps.STORE}
    # packed buffers that are written need atomic words: other threads write the other bytes of a word
    self.atomic = {u for u in stored if u.op is UOps.DEFINE_GLOBAL and renderer.packed(_base(u))}

  def fresh(self, prefix: str) -> str:
    n = self.counter[prefix] = self.counter.get(prefix, -1) + 1
    return f"{prefix}{n}"

  def ssa(self, prefix: str, u: UOp) -> str:
    self.r[u] = self.fresh(prefix)
    return self.r[u]

  def line(self, s: str) -> None:
    self.lines.append("  " * self.depth + s)

  # ---------- global memory ----------
  def declare_buffer(self, u: UOp) -> None:
    dt = _base(u)
    elem = "atomic<u32>" if u in self.atomic else "u32" if self.rd.packed(dt) else wgsl.reg_type(dt)
    self.decls.append(f"@group(0) @binding({u.arg}) var<storage, read_write> data{u.arg}: array<{elem}>;")

  def load(self, buf: UOp, idx: str) -> str:
    dt, name = _base(buf), self.r[buf]
    if buf.op is UOps.DEFINE_LOCAL or not self.rd.packed(dt):
      return f"{name}[{idx}]"
    per_word = 4 // dt.itemsize
    word = f"{name}[({idx}) / {per_word}]"
    word = f"atomicLoad(&{word})" if buf in self.atomic else word
    bits, offset = dt.itemsize * 8, f"u32(({idx}) % {per_word}) * {dt.itemsize * 8}u"
    if dt == dtypes.bool:
      return f"(extractBits({word}, {offset}, 1u) != 0u)"
    if dtypes.is_unsigned(dt):
      return f"extractBits({word}, {offset}, {bits}u)"
    return f"extractBits(bitcast<i32>({word}), {offset}, {bits}u)"  # sign-extends

  def store(self, buf: UOp, idx: str, val: str, val_dt: DType) -> str:
    dt, name = _base(buf), self.r[buf]
    if buf.op is UOps.DEFINE_LOCAL or not self.rd.packed(dt):
      return f"{name}[{idx}] = {val};"
    per_word, bits = 4 // dt.itemsize, dt.itemsize * 8
    mask = f"{(1 << bits) - 1:#x}u"
    v = f"select(0u, 1u, {val})" if val_dt == dtypes.bool else f"(u32({val}) & {mask})"
    w, s = self.fresh("word"), self.fresh("shift")
    return (f"{{ let {w} = ({idx}) / {per_word}; let {s} = u32(({idx}) % {per_word}) * {bits}u; "
            f"atomicAnd(&{name}[{w}], ~({mask} << {s})); atomicOr(&{name}[{w}], {v} << {s}); }}")

  # ---------- the walk ----------
  def render(self) -> str:
    n_bufs = len({u.arg for u in self.uops if u.op is UOps.DEFINE_GLOBAL})
    if n_bufs > self.rd.max_buffers:
      raise WGSLRenderError(f"kernel {self.name} needs {n_bufs} buffers but this WEBGPU device binds at most {self.rd.max_buffers} "
                            "storage buffers per kernel (maxStorageBuffersPerShaderStage): split the computation, e.g. realize() "
                            "some inputs first")
    workgroup = [1, 1, 1]
    n_global = 0
    for u in self.uops:
      if u.op is UOps.SPECIAL and u.arg[0].startswith("lidx"):
        if not isinstance(u.arg[2], int):
          raise WGSLRenderError(f"kernel {self.name}: a workgroup size must be a number, not {u.arg[2]}")
        workgroup[u.arg[1]] = u.arg[2]
      elif u.op is UOps.SPECIAL:
        n_global = max(n_global, u.arg[1] + 1)
    if n_global > len(XYZ):  # core folds output axes into len(global_max) dims; a kernel lowered without that can't launch
      raise WGSLRenderError(f"kernel {self.name} has {n_global} workgroup dims but WEBGPU launches at most {len(XYZ)}: "
                            "lower it with this renderer's global_max")
    for u in self.uops:
      self.visit(u)
    return self.assemble(workgroup)

  def visit(self, u: UOp) -> None:
    op, dt, r = u.op, u.dtype, self.r
    if op is UOps.DEFINE_GLOBAL:
      r[u] = f"data{u.arg}"
      self.declare_buffer(u)
    elif op is UOps.DEFINE_VAR:
      r[u] = f"tgvars.v{len(self.vars)}"
      self.vars.append(u)
    elif op is UOps.DEFINE_LOCAL:
      r[u] = u.arg[0]
      self.decls.append(f"var<workgroup> {u.arg[0]}: array<{wgsl.reg_type(_base(u))}, {u.arg[1]}>;")
    elif op is UOps.CONST:
      assert dt is not None
      r[u] = wgsl.const(u.arg, dt)
    elif op is UOps.SPECIAL:
      r[u] = u.arg[0]
      self.line(f"let {u.arg[0]} = i32({'gid' if u.arg[0].startswith('gidx') else 'lid'}.{XYZ[u.arg[1]]}); /* {u.arg[2]} */")
    elif op is UOps.RANGE:
      i = self.ssa("ridx", u)
      self.line(f"for (var {i}: i32 = {r[u.src[0]]}; {i} < {r[u.src[1]]}; {i}++) {{")
      self.depth += 1
    elif op is UOps.ENDRANGE:
      self.depth -= 1
      self.line("}")
    elif op is UOps.BARRIER:
      self.line("workgroupBarrier();")
    elif op is UOps.LOAD:  # src (buf, idx), (buf, idx, barrier): a plain load; (buf, idx, valid, alt): gated
      assert dt is not None
      val = self.load(u.src[0], r[u.src[1]])
      if len(u.src) == 4:  # reads only where valid: a masked index may be out of bounds
        v = self.ssa("val", u)
        self.line(f"var {v}: {wgsl.reg_type(dt)} = {r[u.src[3]]};")
        self.line(f"if ({r[u.src[2]]}) {{ {v} = {val}; }}")
      else:
        self.line(f"let {self.ssa('val', u)} = {val};")
    elif op is UOps.IF:  # threads branch apart here: the block holds no barrier, so barriers stay in uniform control flow
      self.line(f"if ({r[u.src[0]]}) {{")
      self.depth += 1
    elif op is UOps.ENDIF:
      self.depth -= 1
      self.line("}")
    elif op is UOps.STORE:
      val_dt = u.src[2].dtype
      assert val_dt is not None
      st = self.store(u.src[0], r[u.src[1]], r[u.src[2]], val_dt)
      self.line(st if (valid := store_valid(u)) is None else f"if ({r[valid]}) {{ {st} }}")
    elif op is UOps.DEFINE_ACC:
      assert dt is not None
      self.line(f"var {self.ssa('acc', u)}: {wgsl.reg_type(dt)} = {r[u.src[0]]};")
      r[u.arg] = r[u]  # after its loops, the REDUCE's value is this accumulator
    elif op is UOps.ASSIGN:
      self.line(f"{r[u.src[0]]} = {r[u.src[1]]};")
    elif op is UOps.ALU:
      assert dt is not None
      if all(s.op is UOps.CONST for s in u.src):  # WGSL would fold it as a constant expression and may reject it (1/0)
        r[u] = wgsl.const(exec_alu(u.arg, dt, [s.arg for s in u.src]), dt)
        return
      src_dt = u.src[0].dtype
      assert src_dt is not None
      self.line(f"let {self.ssa('alu', u)} = {wgsl.code_for_op[u.arg](*[r[s] for s in u.src], src_dt)};")
    elif op in (UOps.CAST, UOps.BITCAST):
      src_dt = u.src[0].dtype
      assert dt is not None and src_dt is not None
      fn = wgsl.cast if op is UOps.CAST else wgsl.bitcast
      self.line(f"let {self.ssa('cast', u)} = {fn(r[u.src[0]], src_dt, dt)};")
    else:
      raise WGSLRenderError(f"WGSLRenderer can't render {op}")

  def assemble(self, workgroup: list[int]) -> str:
    body = "\n".join(self.lines)
    head = []
    if any(u.dtype is not None and (u.dtype.base if isinstance(u.dtype, PtrDType) else u.dtype) == dtypes.float16 for u in self.uops):
      head.append("enable f16;")
    head += [fn for call, fn in wgsl.HELPERS.items() if call in body]
    if self.vars:
      fields = " ".join(f"v{i}: i32," for i in range(len(self.vars)))
      head += [f"struct TgVars {{ {fields} }}  // {', '.join(v.arg.expr for v in self.vars)}",
               "@group(1) @binding(0) var<uniform> tgvars: TgVars;"]
    args = "@builtin(workgroup_id) gid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>"
    return "\n".join(head + self.decls + [f"@compute @workgroup_size({', '.join(map(str, workgroup))})",
                                          f"fn {self.name}({args}) {{", body, "}"]) + "\n"


def _base(u: UOp) -> DType:
  assert isinstance(u.dtype, PtrDType)
  return u.dtype.base
