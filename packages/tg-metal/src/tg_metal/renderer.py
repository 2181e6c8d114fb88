"""MetalRenderer: Metal Shading Language (MSL) kernels.

A kernel is one `kernel void` function. Buffer n is `device T* dataN [[buffer(n)]]` (`const device` when the kernel
only reads it); symbolic sizes follow as `constant int& name [[buffer(k)]]` (set with setBytes by the runtime).
Output axes are threadgroups (SPECIAL gidx<d> = `gid`, [[threadgroup_position_in_grid]]) and threads inside one
(lidx<d> = `lid`, [[thread_position_in_threadgroup]]); both are the kernel's last two parameters, always present.
Workgroup memory is `threadgroup T name[N];`, the barrier `threadgroup_barrier(mem_flags::mem_threadgroup);`.

Types: half is MSL's half (computed in half); bfloat16 is MSL's bfloat, new in Metal 3.1 (macOS 14), computed in
float; int64 is MSL's long (64-bit: MSL has no `long long`, so literals carry `l`, never `ll`); MSL has no double, so
float64 is a missing dtype (core refuses kernels that need it). Math: the float functions of metal::precise (the
library is compiled with fast math off as well), the metal:: ones for half; bfloat16 math goes through float.
Bitcasts are `as_type<T>(x)`. Vectors: float4/half4 (and the float2/half2 fragments of tensor cores) for loads and
stores, built as `float4(a,b,c,d)`, lanes read as `.xyzw`; core does the math lane by lane.
Tensor cores: simdgroup_matrix 8x8 (Apple GPU family 7+, M1 on): a call to a helper emitted before the kernel that
loads each thread's two elements into simdgroup_half8x8/simdgroup_float8x8 through thread_elements() and runs
simdgroup_multiply_accumulate.
"""
from __future__ import annotations

import math
from collections.abc import Callable

from tg.codegen.tensor_core import SIMDGROUP_8X8X8_F16_F32, SIMDGROUP_8X8X8_F32_F32, TensorCore
from tg.codegen.uops import UOp, UOps
from tg.dtype import DType, PtrDType, dtypes
from tg.ops import BinaryOps, TernaryOps, UnaryOps
from tg.renderer.cstyle import CStyleLanguage, _safe_divmod

GRID_DIMS = "xyz"
MAX_BUFFER_ARGS = 31  # a kernel's [[buffer(n)]] arguments: buffers and symbolic sizes together
# the kernel's index parameters: its threadgroup in the grid, its thread in the threadgroup
INDEX_PARAMS = "uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]"
HEADER = "#include <metal_stdlib>\nusing namespace metal;\n"
TENSOR_CORES = {tc.name: tc for tc in (SIMDGROUP_8X8X8_F16_F32, SIMDGROUP_8X8X8_F32_F32)}


def _math(fn: str) -> Callable[[str, DType], str]:
  """A unary float function: precise:: for float (accuracy does not depend on the fast-math setting), metal:: for
  half, and through float for bfloat (MSL's math library has no bfloat overloads)."""
  def render(x: str, dt: DType) -> str:
    if dt == dtypes.bfloat16:
      return f"((bfloat)(precise::{fn}((float)({x}))))"
    return f"metal::{fn}({x})" if dt == dtypes.float16 else f"precise::{fn}({x})"
  return render


def _divmod(op: str) -> Callable[[str, str, DType], str]:
  # core's never-trapping / and %, with the 64-bit INT_MIN literal spelled for MSL (long, not long long)
  return lambda a, b, dt: _safe_divmod(op, a, b, dt).replace("ll-1)", "l-1)")


def helper_name(tc: TensorCore) -> str:
  return f"__tg_{tc.name}"


def render_helper(tc: TensorCore) -> str:
  """The function one WMMA uop of `tc` calls: this thread's fragments of A, B and C (two elements each, by the layout
  of tg.codegen.tensor_core, which is thread_elements()'s) in, its two elements of D = A @ B + C out."""
  tin = "half" if tc.dtype_in == dtypes.float16 else "float"
  return (f"inline float2 {helper_name(tc)}({tin}2 a, {tin}2 b, float2 c) {{\n"
          f"  simdgroup_{tin}8x8 ma, mb;\n  simdgroup_float8x8 mc;\n"
          "  ma.thread_elements()[0] = a.x; ma.thread_elements()[1] = a.y;\n"
          "  mb.thread_elements()[0] = b.x; mb.thread_elements()[1] = b.y;\n"
          "  mc.thread_elements()[0] = c.x; mc.thread_elements()[1] = c.y;\n"
          "  simdgroup_multiply_accumulate(mc, ma, mb, mc);\n"
          "  return float2(mc.thread_elements()[0], mc.thread_elements()[1]);\n}\n")


class MetalRenderer(CStyleLanguage):
  device = "METAL"
  global_ids = True
  # dispatchThreadgroups takes any NSUInteger count, but gid is a uint and core's indices are int: keep them below 2^31
  global_max = (2**31 - 1, 65535, 65535)
  has_local = True
  local_max = (1024, 1024, 1024)
  local_max_threads = 1024  # maxTotalThreadsPerThreadgroup on every Apple GPU (a pipeline may report less)
  shared_max = 32 * 1024    # maxThreadgroupMemoryLength
  vector_bytes = 16
  vector_dtypes = frozenset({dtypes.float32, dtypes.float16})
  vector_align = True  # float4 is 16-byte aligned in MSL, and Metal buffers are page aligned
  missing_dtypes = frozenset({dtypes.float64})
  fused_mulacc = True  # metal::fma
  buffer_prefix = "device "
  local_prefix = "threadgroup "
  smem_prefix = "threadgroup "
  barrier = "threadgroup_barrier(mem_flags::mem_threadgroup);"
  infinity = "INFINITY"
  nan = "NAN"
  tensor_cores: tuple[TensorCore, ...] = (SIMDGROUP_8X8X8_F16_F32, SIMDGROUP_8X8X8_F32_F32)
  type_map = {dtypes.bool: "bool", dtypes.int8: "char", dtypes.uint8: "uchar", dtypes.int16: "short", dtypes.uint16: "ushort",
              dtypes.int32: "int", dtypes.uint32: "uint", dtypes.int64: "long", dtypes.uint64: "ulong",
              dtypes.float16: "half", dtypes.bfloat16: "bfloat", dtypes.float32: "float"}
  code_for_op = {**CStyleLanguage.code_for_op, UnaryOps.EXP2: _math("exp2"), UnaryOps.LOG2: _math("log2"),
                 UnaryOps.SIN: _math("sin"), UnaryOps.SQRT: _math("sqrt"),
                 BinaryOps.IDIV: _divmod("/"), BinaryOps.MOD: _divmod("%"),
                 # no int / bfloat: MSL converts float to bfloat only when asked
                 UnaryOps.RECIP: lambda x, dt: f"((bfloat)(1.0f/(float)({x})))" if dt == dtypes.bfloat16 else f"(1/{x})",
                 TernaryOps.MULACC: lambda a, b, c, dt: f"metal::fma({a},{b},{c})"}

  def __init__(self, bfloat: bool = True, simdgroup_matrix: bool = True) -> None:
    """`bfloat`: MSL has the bfloat type (Metal 3.1, macOS 14+); without it core computes bfloat16 in float through its 16
    bits. `simdgroup_matrix`: the GPU has simdgroup matrices (Apple GPU family 7+: M1 on; not Intel Macs' GPUs)."""
    if not bfloat:
      self.unsupported_dtypes = frozenset({dtypes.bfloat16})
    if not simdgroup_matrix:
      self.tensor_cores = ()

  def vector_width(self, dt: DType) -> int:
    return min(4, super().vector_width(dt))  # MSL's vectors have 2, 3 or 4 lanes

  def keeps_vector(self, u: UOp) -> bool:
    return False

  def render(self, name: str, uops: list[UOp]) -> str:
    for u in uops:
      if u.op is UOps.SPECIAL and u.arg[0].startswith("gidx") and isinstance(u.arg[2], int) and u.arg[2] > self.global_max[u.arg[1]]:
        raise ValueError(f"kernel {name}: grid dim {GRID_DIMS[u.arg[1]]} of {u.arg[2]} threadgroups is more than {self.global_max[u.arg[1]]}")
    self._stored = {f"data{u.src[0].arg}" for u in uops if u.op is UOps.STORE and u.src[0].op is UOps.DEFINE_GLOBAL}
    self._helpers = "".join(render_helper(TENSOR_CORES[n]) for n in dict.fromkeys(u.arg for u in uops if u.op is UOps.WMMA))
    return super().render(name, uops)

  def render_const(self, x: object, dt: DType) -> str:
    if dtypes.is_int(dt) and dt.itemsize == 8:  # MSL's 64-bit ints are long/ulong: no `ll` literals
      assert isinstance(x, int)
      if dtypes.is_unsigned(dt):
        return f"{x}ul"
      return f"{x}l" if x != dtypes.min(dt) else f"({x + 1}l-1)"
    if dt in (dtypes.float16, dtypes.bfloat16) and isinstance(x, float) and math.isfinite(x):
      return f"({self.render_dtype(dt)})({x!r}f)"  # a float literal: MSL has no double
    return super().render_const(x, dt)

  def render_load(self, buf: str, idx: str, dt: DType, buf_dt: PtrDType, local: bool = False) -> str:
    if dt.count > 1 and not local and buf not in self._stored:  # keep the read-only buffer's const in the vector cast
      return f"*((const device {self.render_dtype(dt)}*)({buf}+{idx}))"
    return super().render_load(buf, idx, dt, buf_dt, local)

  def render_vectorize(self, lanes: list[str], dt: DType) -> str:
    return f"{self.render_dtype(dt)}({','.join(lanes)})"

  def render_gep(self, x: str, i: int, dt: DType) -> str:
    return f"{x}.{'xyzw'[i]}"

  def render_wmma(self, name: str, args: list[str]) -> str:
    if name not in TENSOR_CORES:
      raise NotImplementedError(f"METAL renders no tensor core {name}")
    return f"{helper_name(TENSOR_CORES[name])}({', '.join(args)})"

  def render_special(self, u: UOp) -> str:
    kind, dim, _ = u.arg
    assert isinstance(dim, int) and 0 <= dim < len(GRID_DIMS), f"SPECIAL {u.arg} has no Metal dim"
    return f"{'gid' if kind.startswith('gidx') else 'lid'}.{GRID_DIMS[dim]}"

  def render_buffer_param(self, name: str, dt: PtrDType) -> str:
    return f"{'' if name in self._stored else 'const '}device {self.render_dtype(dt.base)}* {name} [[buffer({int(name[4:])})]]"

  def render_kernel(self, name: str, kernel: list[str], bufs: list[tuple[str, PtrDType]], variables: list[str]) -> str:
    if len(bufs) + len(variables) > MAX_BUFFER_ARGS:
      raise ValueError(f"kernel {name} has {len(bufs)} buffers and {len(variables)} symbolic sizes, but a Metal kernel binds at most "
                       f"{MAX_BUFFER_ARGS} buffer arguments ([[buffer(0)]] to [[buffer(30)]])")
    params = [self.render_buffer_param(n, dt) for n, dt in bufs]
    params += [f"constant int& {v} [[buffer({len(bufs) + i})]]" for i, v in enumerate(variables)]
    body = "\n".join(kernel)
    return f"{HEADER}{self._helpers}kernel void {name}({', '.join([*params, INDEX_PARAMS])}) {{\n{body}\n}}"

  def render_bitcast(self, x: str, from_dt: DType, to_dt: DType) -> str:
    return f"as_type<{self.render_dtype(to_dt)}>(({self.render_dtype(from_dt)})({x}))"
