"""ClangRenderer: C99 for the host CPU. Output axes are loops; float16 is clang's __fp16 (stored as half,
computed in float); bfloat16 is emulated by core through its 16 bits, as clang has no arithmetic for it here.
EXP2, LOG2 and SIN are expanded by core (tg.codegen.transcendental) into arithmetic that stays in vectors: libm's
scalar calls, one per lane, made bench/'s tanh-gelu 2.5x slower (33 ms against 13 with 16-lane vectors).

Kernels with enough work are split across CPU threads (tg.renderer.cpu decides which and says how): the outermost
output loop runs over [tg_start, tg_end), two extra arguments, and the kernel exports `<name>_tg_outer`, the loop's
full length, for the runtime to divide.

A split kernel also exports `<name>_tg_slice(void** bufs, const int* vals, int start, int end)`, one signature for
every kernel, which the runtime's C thread pool calls (tg_clang.pool).

Built for another architecture (CPU_TARGET=aarch64 on an x86-64 host), a kernel also exports `tg_entry(void** bufs,
const int* vals)`, which calls it with its arguments from two arrays (a split kernel over its whole outer loop): the
harness under qemu (tg_clang.harness) calls every kernel through that one signature."""
from __future__ import annotations

from tg.codegen.uops import UOp, UOps
from tg.dtype import DType, PtrDType, dtypes
from tg.ops import BinaryOps, TernaryOps, UnaryOps
from tg.renderer.cpu import END, START, cpu_matmul_panels, cpu_reduce_leaf, loop_to_split, native_vector_bytes, outer_symbol
from tg.renderer.cpu_target import cpu_target
from tg.renderer.cstyle import CStyleLanguage

ENTRY = "tg_entry"  # the cross-mode entry point (see the module's docstring; harness.c calls it)


def slice_symbol(name: str) -> str:
  """The function of split kernel `name` that the C thread pool calls: (void** bufs, const int* vals, int start, int end)."""
  return f"{name}_tg_slice"


LANE_MASK = {1: dtypes.int8, 2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}  # a mask lane as wide as the data lane

# double -> __fp16 in one correct rounding. clang compiles that cast to a call of __truncdfhf2, and the one it links
# (libgcc's, which returns _Float16 in a vector register) does not match the calling convention clang 14 expects of
# it (a 16-bit integer), so the cast returned garbage (-3.0 came back as 3e-05). Instead: double -> float rounded to
# odd (toward zero, then the last bit set when inexact), then float -> half (an F16C instruction). Rounding to odd
# first with 13 spare bits makes the second rounding give exactly the double's correctly rounded half.
D2H = """static inline float tg_round_to_odd_float(double d) {
  float f = (float)d;
  if (d != d || (double)f == d) return f;
  union { float f; unsigned int u; } v; v.f = f;
  if (__builtin_fabs((double)f) > __builtin_fabs(d)) v.u -= 1;
  v.u |= 1;
  return v.f;
}
"""

# half <-> float on a CPU without F16C (CPU_TARGET=x86-64-v2, an SSE-only host): clang calls these two, and no library
# the kernel links provides them. Hidden, so each kernel's own copy is the one it calls. Round to nearest even, with
# subnormals, infinities and NaN (quieted, payload kept), as F16C's vcvtps2ph does
SOFT_HALF = """__attribute__((visibility("hidden"))) float __gnu_h2f_ieee(unsigned short h) {
  unsigned int s = (unsigned int)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
  if (e == 0x1fu) u = s | 0x7f800000u | (m << 13);
  else if (e) u = s | ((e + 112u) << 23) | (m << 13);
  else if (!m) u = s;
  else { e = 113u; while (!(m & 0x400u)) { m <<= 1; e--; } u = s | (e << 23) | ((m & 0x3ffu) << 13); }
  union { unsigned int u; float f; } v; v.u = u; return v.f;
}
__attribute__((visibility("hidden"))) unsigned short __gnu_f2h_ieee(float f) {
  union { float f; unsigned int u; } v; v.f = f;
  unsigned int s = (v.u >> 16) & 0x8000u, a = v.u & 0x7fffffffu;
  if (a > 0x7f800000u) return (unsigned short)(s | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return (unsigned short)(s | 0x7c00u);
  if (a >= 0x38800000u) { unsigned int r = a - 0x38000000u; r += 0xfffu + ((r >> 13) & 1u); return (unsigned short)(s | (r >> 13)); }
  if (a < 0x33000000u) return (unsigned short)s;
  unsigned int e = a >> 23, m = (a & 0x7fffffu) | 0x800000u, sh = 126u - e, q = m >> sh, rem = m & ((1u << sh) - 1u), half = 1u << (sh - 1u);
  if (rem > half || (rem == half && (q & 1u))) q++;
  return (unsigned short)(s | q);
}
"""


class ClangRenderer(CStyleLanguage):
  device = "CLANG"
  global_ids = False
  unsupported_dtypes = frozenset({dtypes.bfloat16})
  type_map = {dtypes.bool: "_Bool", dtypes.float16: "__fp16", dtypes.int8: "signed char", dtypes.uint8: "unsigned char",
              dtypes.int64: "long long", dtypes.uint64: "unsigned long long"}
  transcendental_fallback = frozenset({UnaryOps.EXP2, UnaryOps.LOG2, UnaryOps.SIN})  # see the module's docstring
  infinity = "__builtin_inff()"
  nan = "__builtin_nanf(\"\")"
  # clang's ext_vector_type vectors, as wide as the CPU's registers; __fp16 is a storage type with no vector math
  vector_bytes = native_vector_bytes()
  masked_vector_loads = True  # a whole vector read (see overread_bytes), its masked-off lanes then replaced
  cpu_target = cpu_target()  # CPU_TARGET: the host, or the x86-64 level the compiler builds for
  # one vector of the register tile and its rows (tg.codegen.heuristics.cpu.register_tile): A is read as one stream,
  # B as one per vector of the tile
  matmul_panel, matmul_panel_rows = cpu_matmul_panels(cpu_target)
  reduce_leaf = cpu_reduce_leaf(native_vector_bytes())  # runs short enough for its accumulators (tg.renderer.cpu.SUM_CHAIN)
  overread_bytes = native_vector_bytes()  # the CLANG allocator's slack around every buffer
  fused_mulacc = True  # ((a*b)+c) in one expression, contracted to an FMA by -ffp-contract=on (and only that)
  vector_dtypes = frozenset({dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32, dtypes.int64,
                             dtypes.uint64, dtypes.float32, dtypes.float64})

  def vector_width(self, dt: DType) -> int:
    # bool vectors are lane masks (see _mask_bytes), as many lanes as a vector of 32-bit ints
    return max(1, self.vector_bytes // 4) if dt == dtypes.bool else super().vector_width(dt)

  def keeps_vector(self, u: UOp) -> bool:
    assert u.dtype is not None
    if u.op is UOps.ALU and u.arg is UnaryOps.SQRT:
      return False  # clang's sqrt builtin takes scalars
    if u.dtype.scalar() == dtypes.bool:  # makes a mask
      return _mask_bytes(u) is not None
    cond = next((s for s in u.src if s.dtype is not None and s.dtype.count > 1 and s.dtype.scalar() == dtypes.bool), None)
    if cond is None:
      return True
    if u.op is UOps.ALU and u.arg is TernaryOps.WHERE:  # a select by a mask of its lanes' width
      return _mask_bytes(cond) == u.dtype.scalar().itemsize
    return u.op is UOps.CAST and _mask_bytes(cond) is not None  # bool -> number: 1 and 0

  def render(self, name: str, uops: list[UOp]) -> str:
    self._split: UOp | None = loop_to_split(uops)
    # every vector type the kernel uses, declared unaligned (aligned(elem)): vector loads may start at any element
    used = {u.dtype for u in uops if u.dtype is not None and u.dtype.count > 1 and u.dtype.scalar() != dtypes.bool
            and not isinstance(u.dtype, PtrDType)} | {self._lane_mask(u.dtype) for u in uops if self._is_masked_load(u)}
    # a bool vector loaded, stored or built from lanes: bytes in memory, an int mask in registers
    used |= {dt for u in uops if u.dtype is not None and u.dtype.count > 1 and u.dtype.scalar() == dtypes.bool
             for dt in (dtypes.uint8.vec(u.dtype.count), dtypes.int32.vec(u.dtype.count))}
    vecs = sorted(used, key=lambda dt: (dt.priority, dt.count))
    self._typedefs = "".join(f"typedef {self.render_dtype(dt.scalar())} {self.render_dtype(dt)} "
                             f"__attribute__((ext_vector_type({dt.count}), aligned({dt.scalar().itemsize})));\n" for dt in vecs)
    if any(u.op is UOps.CAST and u.dtype == dtypes.float16 and u.src[0].dtype == dtypes.float64 for u in uops):
      self._typedefs += D2H
    if not self.cpu_target.half_hardware and any(u.dtype is not None and u.dtype.scalar() == dtypes.float16 for u in uops):
      self._typedefs = SOFT_HALF + self._typedefs
    return super().render(name, uops)

  @staticmethod
  def _is_masked_load(u: UOp) -> bool:
    return u.op is UOps.LOAD and len(u.src) == 4 and u.dtype is not None and u.dtype.count > 1

  @staticmethod
  def _lane_mask(dt: DType | None) -> DType:
    assert dt is not None
    return LANE_MASK[dt.scalar().itemsize].vec(dt.count)

  def render_load(self, buf: str, idx: str, dt: DType, buf_dt: PtrDType, local: bool = False) -> str:
    if dt.count > 1 and dt.scalar() == dtypes.bool:  # bytes of 0 and 1 -> a mask of 32-bit lanes
      raw = super().render_load(buf, idx, dtypes.uint8.vec(dt.count), buf_dt, local)
      return f"(-__builtin_convertvector({raw}, {self.render_dtype(dtypes.int32.vec(dt.count))}))"
    return super().render_load(buf, idx, dt, buf_dt, local)

  def render_load_dtype(self, dt: DType) -> str:
    # a loaded mask has 32-bit lanes (render_load): declared with them, as __auto_type needs an initializer
    return self.render_dtype(dtypes.int32.vec(dt.count)) if dt.count > 1 and dt.scalar() == dtypes.bool else self.render_dtype(dt)

  def render_store(self, buf: str, idx: str, value: str, dt: DType, buf_dt: PtrDType, local: bool = False) -> str:
    if dt.count > 1 and dt.scalar() == dtypes.bool:  # a mask (-1 true, whatever its lanes' width) -> bytes of 0 and 1
      u8 = dtypes.uint8.vec(dt.count)
      return super().render_store(buf, idx, f"__builtin_convertvector(-({value}), {self.render_dtype(u8)})", u8, buf_dt, local)
    return super().render_store(buf, idx, value, dt, buf_dt, local)

  def render_masked_load(self, out: str, u: UOp, r: dict[UOp, str]) -> list[str]:
    """Branch-free: read the whole vector, from lane 0's index when any lane is valid (then every lane lies within the
    allocator's slack of the buffer), else from element 0; keep the valid lanes' bits and the alternative's elsewhere."""
    assert u.dtype is not None
    if self.overread_bytes < u.dtype.itemsize or u.dtype.scalar() == dtypes.bool:
      return super().render_masked_load(out, u, r)
    bdt = u.src[0].dtype
    assert isinstance(bdt, PtrDType)
    buf, idx = r[u.src[0]], r[u.src[1]]
    oks = list(dict.fromkeys(r[m] for m in u.src[2].src))
    mt, vt = self.render_dtype(self._lane_mask(u.dtype)), self.render_dtype(u.dtype)
    mask = self.render_vectorize([f"-({r[m]})" for m in u.src[2].src], self._lane_mask(u.dtype))
    start = f"(({'|'.join(oks)})?{idx}:0)"
    whole = f"({mt}){self.render_load(buf, start, u.dtype, bdt, u.src[0].op is UOps.DEFINE_LOCAL)}"
    alt = u.src[3]
    bits = f"({whole}&{mask})" + ("" if alt.is_zero() else f"|(({mt}){r[alt]}&~{mask})")
    return [f"{out} = ({vt})({bits});"]

  def render_loop(self, u: UOp, i: str, start: str, end: str) -> str:
    if u is self._split:
      return f"for ({self.render_dtype(u.dtype or dtypes.int32)} {i} = {START}; {i} < {END}; {i}++) {{"
    return super().render_loop(u, i, start, end)

  def render_kernel(self, name: str, kernel: list[str], bufs: list[tuple[str, PtrDType]], variables: list[str]) -> str:
    args = [f"b[{i}]" for i in range(len(bufs))] + [f"v[{i}]" for i in range(len(variables))]
    if self._split is None:
      src = self._typedefs + super().render_kernel(name, kernel, bufs, variables)
    else:
      src = self._typedefs + f"const int {outer_symbol(name)} = {self._split.src[1].arg};\n" + \
        super().render_kernel(name, kernel, bufs, variables + [START, END])
      # one signature for every split kernel, which the C thread pool calls (pool.py)
      src += f"\nvoid {slice_symbol(name)}(void** b, const int* v, int s, int e) {{ {name}({', '.join(args + ['s', 'e'])}); }}\n"
    if not self.cpu_target.cross:
      return src
    args += [] if self._split is None else ["0", outer_symbol(name)]
    return src + f"\nvoid {ENTRY}(void** b, const int* v) {{ {name}({', '.join(args)}); }}\n"

  def render_cast(self, x: str, dt: DType, from_dt: DType | None = None) -> str:
    if dt == dtypes.float16 and from_dt == dtypes.float64:
      return f"(__fp16)tg_round_to_odd_float({x})"  # see D2H (__fp16 can't be a C function's return type)
    return super().render_cast(x, dt, from_dt)

  def render_dtype(self, dt: DType) -> str:
    # a mask's type follows from what makes it (a comparison of doubles: long lanes): declared by inference
    return "__auto_type" if dt.count > 1 and dt.scalar() == dtypes.bool else super().render_dtype(dt)

  def render_gep(self, x: str, i: int, dt: DType) -> str:
    # a mask's lane is -1 or 0; as a bool it is 1 or 0 (a lane cast to float must give 1.0)
    return f"(_Bool)({x}[{i}])" if dt.scalar() == dtypes.bool else f"{x}[{i}]"

  def render_vectorize(self, lanes: list[str], dt: DType) -> str:
    if dt.scalar() == dtypes.bool:  # a mask of 32-bit lanes
      return f"({self.render_dtype(dtypes.int32.vec(dt.count))}){{{','.join(f'-({x})' for x in lanes)}}}"
    return f"({self.render_dtype(dt)}){{{','.join(lanes)}}}"  # a compound literal of the ext_vector_type

  def render_vector_cast(self, x: str, from_dt: DType, to_dt: DType) -> str:
    if to_dt.scalar() == dtypes.bool:
      return f"({x}!=0)"  # a mask, as wide as x's lanes
    if from_dt.scalar() == dtypes.bool:
      return f"__builtin_convertvector(-({x}), {self.render_dtype(to_dt)})"  # a mask's -1 is true: 1
    return f"__builtin_convertvector({x}, {self.render_dtype(to_dt)})"

  def render_bitcast(self, x: str, from_dt: DType, to_dt: DType) -> str:
    return f"__builtin_bit_cast({self.render_dtype(to_dt)}, ({self.render_dtype(from_dt)})({x}))"

  # sqrt through clang's builtin (no header needed: one instruction), in float for every float narrower than double
  code_for_op = {**CStyleLanguage.code_for_op,
                 # not of a mask: its bits flipped (-1 <-> 0)
                 UnaryOps.NEG: lambda x, dt: f"(~{x})" if dt.count > 1 and dt.scalar() == dtypes.bool
                 else CStyleLanguage.code_for_op[UnaryOps.NEG](x, dt),
                 UnaryOps.SQRT: lambda x, dt: f"__builtin_sqrt{'' if dt == dtypes.float64 else 'f'}({x})"}


def _mask_bytes(u: UOp) -> int | None:
  """The lane width, in bytes, of the int mask that the bool vector u is in registers: a comparison's is its operands'
  (clang's rule), a loaded or lane-built one's 4; None when u can't be one (a mix of widths, a select of bools): then
  u goes lane by lane, and so does whatever selects by a mask of another width than its lanes'."""
  if u.op is UOps.ALU and u.arg in (BinaryOps.CMPLT, BinaryOps.CMPNE):
    dt = u.src[0].dtype
    return None if dt is None or dt.scalar() == dtypes.bool else dt.scalar().itemsize
  if u.op is UOps.ALU and u.arg in (BinaryOps.AND, BinaryOps.OR, BinaryOps.XOR, UnaryOps.NEG):
    widths = {_mask_bytes(s) for s in u.src}
    return widths.pop() if len(widths) == 1 else None
  if u.op is UOps.CAST and (dt := u.src[0].dtype) is not None and dt.scalar() != dtypes.bool:
    return dt.scalar().itemsize
  return 4 if u.op in (UOps.LOAD, UOps.VECTORIZE) else None
