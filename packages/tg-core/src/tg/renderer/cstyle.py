"""CStyleLanguage: the shared renderer for C-family languages (C and its GPU dialects).

A subclass sets the spelling of its language (type names, the kernel signature, how thread ids and
math functions are written); the walk over the linear program is here, once. Every piece of text that differs
between C dialects (C99, OpenCL C, MSL, the GPU vendors' C++) comes from one small method below, so a dialect overrides
methods and never patches rendered source:

- memory: render_load, render_store (scalar and vector access, gated loads built around them), render_ptr (the
  pointer type in a vector access's cast, with its address-space qualifier), render_local (workgroup memory)
- the signature: render_kernel, render_buffer_param, render_var_param
- values: render_dtype, render_const, render_cast, render_vector_cast, render_bitcast, render_vectorize, render_gep,
  code_for_op (ALU ops), render_wmma
- control: render_loop, render_special (thread ids), `barrier`

docs/uops.md lists the UOps render() walks over and their arguments.
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable

from tg.codegen.uops import UOp, UOps, store_valid
from tg.dtype import DType, PtrDType, dtypes
from tg.ops import BinaryOps, Op, TernaryOps, UnaryOps
from tg.renderer import Renderer

# an integer literal as render_const writes it: 5, (5), 5u, 5ll, 5ull
_INT_LITERAL = re.compile(r"\(?(-?\d+)(?:u|ll|ull)?\)?")


def _safe_divmod(op: str, a: str, b: str, dt: DType) -> str:
  """Integer / or % that never traps (C leaves x/0 and INT_MIN/-1 undefined; x86 raises SIGFPE for both): a divisor
  of 0 gives 0 (as exec_alu), INT_MIN / -1 gives INT_MIN (wrapped, as torch) and x % -1 gives 0. Branch-free where it
  matters: a vector ?: evaluates both sides, so the divisor itself is replaced by 1 in the bad lanes. A literal divisor
  other than 0 and -1 (all index math) is rendered bare; the Tensor raises ZeroDivisionError itself (tg.divcheck)."""
  if dtypes.is_float(dt) or ((m := _INT_LITERAL.fullmatch(b)) is not None and int(m.group(1)) not in (0, -1)):
    return f"({a}{op}{b})"
  bad = f"(({b})==0)"
  if dtypes.is_int(dt) and not dtypes.is_unsigned(dt):
    lo = dtypes.min(dt.scalar())
    lo_lit = f"({lo + 1}{'ll' if dt.scalar().itemsize == 8 else ''}-1)"
    # % by -1 is 0 like % by 1; / by -1 is exact except for INT_MIN, which stays INT_MIN (its quotient by 1)
    bad = f"({bad}|(({b})==-1))" if op == "%" else f"({bad}|((({b})==-1)&(({a})=={lo_lit})))"
  q = f"(({a}){op}({bad}?1:({b})))"
  return q if op == "%" else f"((({b})==0)?0:{q})"  # x % 1 is already the 0 that % 0 gives


class CStyleLanguage(Renderer):
  kernel_prefix: str = ""   # before the kernel's `void`, e.g. "__kernel " (OpenCL C)
  # the address-space qualifier of global memory, in buffer parameters and in the casts of vector accesses to them,
  # e.g. "__global " (OpenCL C); C and NVIDIA's C++ have one address space for pointers and need none
  buffer_prefix: str = ""
  # the qualifier of a pointer into workgroup memory (DEFINE_LOCAL) in the cast of a vector access, e.g. "__local "
  # (OpenCL C); NVIDIA's C++ pointers are generic and need none
  local_prefix: str = ""
  arg_int_prefix: str = "const int"
  type_map: dict[DType, str] = {}
  infinity: str = "INFINITY"
  smem_prefix: str = ""   # declares workgroup-shared memory (render_local), e.g. "__shared__ " (renderers with has_local)
  barrier: str = ""       # a workgroup barrier statement, e.g. "__syncthreads();"
  nan: str = "NAN"
  code_for_op: dict[Op, Callable[..., str]] = {
    UnaryOps.NEG: lambda x, dt: f"(!{x})" if dt == dtypes.bool else f"(-{x})",
    UnaryOps.SQRT: lambda x, dt: f"sqrt({x})", UnaryOps.EXP2: lambda x, dt: f"exp2({x})",
    UnaryOps.LOG2: lambda x, dt: f"log2({x})", UnaryOps.SIN: lambda x, dt: f"sin({x})",
    UnaryOps.RECIP: lambda x, dt: f"(1/{x})",
    BinaryOps.ADD: lambda a, b, dt: f"({a}+{b})", BinaryOps.MUL: lambda a, b, dt: f"({a}*{b})",
    BinaryOps.IDIV: lambda a, b, dt: _safe_divmod("/", a, b, dt), BinaryOps.MOD: lambda a, b, dt: _safe_divmod("%", a, b, dt),
    BinaryOps.MAX: lambda a, b, dt: f"(({a}>{b}||{a}!={a})?{a}:{b})",
    BinaryOps.CMPLT: lambda a, b, dt: f"({a}<{b})", BinaryOps.CMPNE: lambda a, b, dt: f"({a}!={b})",
    BinaryOps.XOR: lambda a, b, dt: f"({a}^{b})", BinaryOps.AND: lambda a, b, dt: f"({a}&{b})",
    BinaryOps.OR: lambda a, b, dt: f"({a}|{b})", BinaryOps.SHL: lambda a, b, dt: f"({a}<<{b})",
    BinaryOps.SHR: lambda a, b, dt: f"({a}>>{b})",
    TernaryOps.WHERE: lambda c, a, b, dt: f"({c}?{a}:{b})",
    # one expression, so a C compiler that contracts (-ffp-contract=on) fuses it and nothing else
    TernaryOps.MULACC: lambda a, b, c, dt: f"(({a}*{b})+{c})",
  }

  def render_dtype(self, dt: DType) -> str:
    if dt.count > 1:  # a vector: the scalar's name (spaces as _) and its lane count, e.g. float4, unsigned_int8
      return self.render_dtype(dt.scalar()).replace(" ", "_") + str(dt.count)
    return self.type_map.get(dt, dt.name)

  def render_vectorize(self, lanes: list[str], dt: DType) -> str:
    """A vector of dtype `dt` from its lanes' expressions. C has no portable spelling: clang writes (float4){a,b,c,d},
    OpenCL C (float4)(a,b,c,d), NVIDIA's C++ make_float4(a,b,c,d)."""
    raise NotImplementedError(f"{type(self).__name__} has vectors (vector_bytes > 0) but no render_vectorize: implement it, "
                              "e.g. return f\"({self.render_dtype(dt)})({','.join(lanes)})\" for OpenCL C")

  def render_gep(self, x: str, i: int, dt: DType) -> str:
    """Lane i of the vector x, whose type is dt (C vector extensions and MSL index vectors; OpenCL C may write x.s0)."""
    return f"{x}[{i}]"

  def render_ptr(self, dt: DType, local: bool = False) -> str:
    """The type of a pointer to `dt` in global memory (or workgroup memory with `local`), as a vector access casts to
    it: the address-space qualifier (buffer_prefix, local_prefix) stays on the pointer."""
    return f"{self.local_prefix if local else self.buffer_prefix}{self.render_dtype(dt)}*"

  def render_load(self, buf: str, idx: str, dt: DType, buf_dt: PtrDType, local: bool = False) -> str:
    """The expression that reads a `dt` at element `idx` of buffer `buf` (a pointer of type buf_dt; `local`: workgroup
    memory, else a kernel parameter). A vector dt reads dt.count consecutive elements from idx on (idx need not be
    a multiple of the count unless Renderer.vector_align). Gated and masked loads are built around this one, so a
    dialect with its own vector loads (OpenCL C's vload4) or a buffer stored in another type (render_buffer_param:
    a bool buffer as uchar) overrides only this and render_store."""
    if dt.count == 1:
      return f"{buf}[{idx}]"
    return f"*(({self.render_ptr(dt, local)})({buf}+{idx}))"

  def render_store(self, buf: str, idx: str, value: str, dt: DType, buf_dt: PtrDType, local: bool = False) -> str:
    """The statement that writes `value`, of dtype `dt`, at element `idx` of buffer `buf` (see render_load). A gated
    store is wrapped in an if by the caller."""
    if dt.count == 1:
      return f"{buf}[{idx}] = {value};"
    return f"*(({self.render_ptr(dt, local)})({buf}+{idx})) = {value};"

  def render_local(self, name: str, dt: DType, size: int) -> str:
    """The declaration of workgroup-shared memory `name`: `size` elements of `dt` (a DEFINE_LOCAL)."""
    return f"{self.smem_prefix}{self.render_dtype(dt)} {name}[{size}];"

  def render_buffer_param(self, name: str, dt: PtrDType) -> str:
    """One kernel parameter: the buffer `name`, a pointer to dt.base elements. A dialect may pass a dtype in another
    type (a bool buffer as uchar, where bool has no defined size); its render_load/render_store then convert."""
    return f"{self.buffer_prefix}{self.render_dtype(dt.base)}* restrict {name}"

  def render_var_param(self, name: str) -> str:
    """One kernel parameter: the symbolic size `name` (a DEFINE_VAR: a 32-bit int, passed after the buffers)."""
    return f"{self.arg_int_prefix} {name}"

  def render_load_dtype(self, dt: DType) -> str:
    """The declared type of a loaded value of dtype `dt` (what render_load's expression has): a masked vector load is
    declared before the statements that set it, so the type can't be inferred from an initializer."""
    return self.render_dtype(dt)

  def render_masked_load(self, out: str, u: UOp, r: dict[UOp, str]) -> list[str]:
    """Statements that set `out` to the masked vector LOAD u: one vector load when every lane is valid (all but the
    edges of a padded image), else lane by lane, each reading only if its bool says so."""
    assert u.dtype is not None and isinstance(u.src[0].dtype, PtrDType)
    buf, idx, bdt, local = r[u.src[0]], r[u.src[1]], u.src[0].dtype, u.src[0].op is UOps.DEFINE_LOCAL
    oks = [r[m] for m in u.src[2].src]
    alts = [r[u.src[3].gep(k)] for k in range(u.dtype.count)]
    lanes = [f"({ok}?{self.render_load(buf, f'{idx}+{k}', u.dtype.scalar(), bdt, local)}:{a})" for k, (ok, a) in enumerate(zip(oks, alts))]
    return [f"if ({'&&'.join(dict.fromkeys(oks))}) {out} = {self.render_load(buf, idx, u.dtype, bdt, local)};",
            f"else {out} = {self.render_vectorize(lanes, u.dtype)};"]

  def render_wmma(self, name: str, args: list[str]) -> str:
    """The expression for a WMMA uop of tensor core `name` on the fragments (A, B, C)."""
    raise NotImplementedError(f"{type(self).__name__} renders no tensor cores")

  def render_vector_cast(self, x: str, from_dt: DType, to_dt: DType) -> str:
    """The vector x of from_dt converted lane by lane to to_dt (same count). Portable default: one render_cast per
    lane (render_gep), joined by render_vectorize; a dialect with a vector conversion (clang's
    __builtin_convertvector, OpenCL C's convert_float4) overrides it."""
    lanes = [self.render_cast(self.render_gep(x, i, from_dt), to_dt.scalar(), from_dt.scalar()) for i in range(to_dt.count)]
    return self.render_vectorize(lanes, to_dt)

  def render_const(self, x: object, dt: DType) -> str:
    if dtypes.is_float(dt):
      assert isinstance(x, float)
      if math.isnan(x):
        val = self.nan
      elif math.isinf(x):
        val = ("-" if x < 0 else "") + self.infinity
      else:
        val = f"{x!r}f" if dt == dtypes.float32 else repr(x)
      return val if dt in (dtypes.float32, dtypes.float64) else f"({self.render_dtype(dt)})({val})"
    if dt == dtypes.bool:
      return "1" if x else "0"
    if dtypes.is_unsigned(dt):
      return f"{x}u" if dt.itemsize < 8 else f"{x}ull"
    if dt.itemsize == 8:
      return f"{x}ll" if x != dtypes.min(dt) else f"({x + 1}ll-1)"
    return f"({x})" if dt != dtypes.int32 else (str(x) if x != dtypes.min(dt) else f"({x + 1}-1)")

  def render_cast(self, x: str, dt: DType, from_dt: DType | None = None) -> str:
    """The scalar x (of from_dt, when known) converted to dt (a value conversion, as C's cast)."""
    return f"({self.render_dtype(dt)})({x})"

  def render_bitcast(self, x: str, from_dt: DType, to_dt: DType) -> str:
    """The bits of x (from_dt) read as to_dt, of the same size (core emulates bfloat16 and some int math with it)."""
    raise NotImplementedError(f"{type(self).__name__} can't bitcast {from_dt} to {to_dt}: implement render_bitcast "
                              "(e.g. clang's __builtin_bit_cast, OpenCL C's as_<type>)")

  def render_loop(self, u: UOp, i: str, start: str, end: str) -> str:
    """The opening of loop `u` over i in [start, end)."""
    assert u.dtype is not None
    return f"for ({self.render_dtype(u.dtype)} {i} = {start}; {i} < {end}; {i}++) {{"

  def render_special(self, u: UOp) -> str:
    """The expression for a hardware index, SPECIAL u: u.arg = (name, dim, size), name "gidx<d>" (workgroup index
    along launch dim d) or "lidx<d>" (thread index in the workgroup)."""
    raise NotImplementedError(f"{type(self).__name__} has no thread ids: set global_ids = False")

  def render_kernel(self, name: str, kernel: list[str], bufs: list[tuple[str, PtrDType]], variables: list[str]) -> str:
    """The whole kernel: its signature (the buffers, then the symbolic sizes, in order) and the body lines."""
    args = ", ".join([self.render_buffer_param(n, dt) for n, dt in bufs] + [self.render_var_param(v) for v in variables])
    body = "\n".join(kernel)
    return f"{self.kernel_prefix}void {name}({args}) {{\n{body}\n}}"

  def render(self, name: str, uops: list[UOp]) -> str:
    r: dict[UOp, str] = {}
    lines: list[str] = []
    bufs: list[tuple[str, PtrDType]] = []
    variables: list[str] = []
    depth = 1
    counter: dict[str, int] = {}

    def ssa(prefix: str, u: UOp) -> str:
      counter[prefix] = counter.get(prefix, 0) + 1
      r[u] = f"{prefix}{counter[prefix] - 1}"
      return r[u]

    def line(s: str) -> None:
      lines.append("  " * depth + s)

    for u in uops:
      dt = u.dtype
      if u.op is UOps.DEFINE_GLOBAL:
        assert isinstance(dt, PtrDType)
        r[u] = f"data{u.arg}"
        bufs.append((r[u], dt))
      elif u.op is UOps.DEFINE_VAR:
        r[u] = u.arg.expr
        variables.append(r[u])
      elif u.op is UOps.CONST:
        assert dt is not None
        r[u] = self.render_const(u.arg, dt)
      elif u.op is UOps.RANGE:
        i = ssa("ridx" if u.arg[1] else "gidx", u)
        line(self.render_loop(u, i, r[u.src[0]], r[u.src[1]]))
        depth += 1
      elif u.op is UOps.ENDRANGE:
        depth -= 1
        line("}")
      elif u.op is UOps.SPECIAL:
        line(f"{self.render_dtype(dt or dtypes.int32)} {ssa('gidx', u)} = {self.render_special(u)}; /* {u.arg[2]} */")
      elif u.op is UOps.LOAD and len(u.src) == 4 and u.src[2].count > 1:
        assert dt is not None
        line(f"{self.render_load_dtype(dt)} {ssa('val', u)};")
        for s_ in self.render_masked_load(r[u], u, r):
          line(s_)
      elif u.op is UOps.LOAD:
        assert dt is not None and isinstance(u.src[0].dtype, PtrDType)
        val = self.render_load(r[u.src[0]], r[u.src[1]], dt, u.src[0].dtype, u.src[0].op is UOps.DEFINE_LOCAL)
        if len(u.src) == 4:  # a gated load reads only where valid, so masked indices may be out of bounds
          val = f"({r[u.src[2]]}?{val}:{r[u.src[3]]})"
        line(f"{self.render_dtype(dt)} {ssa('val', u)} = {val};")
      elif u.op is UOps.DEFINE_LOCAL:
        assert isinstance(dt, PtrDType)
        r[u] = u.arg[0]
        line(self.render_local(u.arg[0], dt.base, u.arg[1]))
      elif u.op is UOps.BARRIER:
        line(self.barrier)
      elif u.op is UOps.IF:
        line(f"if ({r[u.src[0]]}) {{")
        depth += 1
      elif u.op is UOps.ENDIF:
        depth -= 1
        line("}")
      elif u.op is UOps.STORE:
        vdt, bdt = u.src[2].dtype, u.src[0].dtype
        assert vdt is not None and isinstance(bdt, PtrDType)
        st = self.render_store(r[u.src[0]], r[u.src[1]], r[u.src[2]], vdt, bdt, u.src[0].op is UOps.DEFINE_LOCAL)
        line(st if (valid := store_valid(u)) is None else f"if ({r[valid]}) {{ {st} }}")
      elif u.op is UOps.DEFINE_ACC:
        assert dt is not None
        line(f"{self.render_dtype(dt)} {ssa('acc', u)} = {r[u.src[0]]};")
        r[u.arg] = r[u]  # the REDUCE's value is this accumulator
      elif u.op is UOps.ASSIGN:
        line(f"{r[u.src[0]]} = {r[u.src[1]]};")
      elif u.op is UOps.ALU:
        assert dt is not None
        code = self.code_for_op[u.arg](*[r[s] for s in u.src], dt)
        line(f"{self.render_dtype(dt)} {ssa('alu', u)} = {code};")
      elif u.op is UOps.CAST:
        assert dt is not None and u.src[0].dtype is not None
        val = self.render_cast(r[u.src[0]], dt, u.src[0].dtype) if dt.count == 1 else self.render_vector_cast(r[u.src[0]], u.src[0].dtype, dt)
        line(f"{self.render_dtype(dt)} {ssa('cast', u)} = {val};")
      elif u.op is UOps.VECTORIZE and dt is not None and dt.scalar() == dtypes.bool and self.vector_width(dtypes.bool) < dt.count:
        pass  # a load's mask, in a dialect without bool vectors: the load reads each lane's bool (render_masked_load)
      elif u.op is UOps.VECTORIZE:
        assert dt is not None
        line(f"{self.render_dtype(dt)} {ssa('vec', u)} = {self.render_vectorize([r[s] for s in u.src], dt)};")
      elif u.op is UOps.WMMA:
        assert dt is not None
        line(f"{self.render_dtype(dt)} {ssa('wmma', u)} = {self.render_wmma(u.arg, [r[s] for s in u.src])};")
      elif u.op is UOps.GEP:
        assert dt is not None and u.src[0].dtype is not None
        r[u] = self.render_gep(r[u.src[0]], u.arg, u.src[0].dtype)
      elif u.op is UOps.BITCAST:
        assert dt is not None and u.src[0].dtype is not None
        line(f"{self.render_dtype(dt)} {ssa('cast', u)} = {self.render_bitcast(r[u.src[0]], u.src[0].dtype, dt)};")
      else:
        raise NotImplementedError(f"{type(self).__name__} can't render {u.op}")
    return self.render_kernel(name, lines, bufs, variables)
