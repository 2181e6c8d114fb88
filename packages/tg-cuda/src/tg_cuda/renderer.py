"""CUDARenderer: CUDA C++ for NVRTC. Output axes are the grid (SPECIAL gidx<d> = blockIdx, lidx<d> = threadIdx,
dim 0 = x), workgroup memory is `__shared__`, the workgroup barrier `__syncthreads()`.

float16 and bfloat16 are the 16-bit types of include/tg_fp16.h and include/tg_bf16.h (computed in float), which
the compiler hands to NVRTC by name: NVRTC 12.9 has no cuda_fp16.h of its own. Math is CUDA's float functions
(exp2f, log2f, sinf, sqrtf; the double ones for float64); half and bfloat16 math is done in float.
Vectors: float2/float4 loads and stores only (core does the math lane by lane). Tensor cores: mma.sync m16n8k16 with
half inputs and float accumulators on sm_80+ (include/tg_mma.h), one warp per 16 x 8 output tile.
"""
from __future__ import annotations

from collections.abc import Callable

from tg.codegen.tensor_core import MMA_M16N8K16_F16_F32
from tg.codegen.uops import UOp, UOps
from tg.dtype import DType, PtrDType, dtypes
from tg.helpers import prod
from tg.ops import TernaryOps, UnaryOps
from tg.renderer.cstyle import CStyleLanguage

GRID_DIMS = "xyz"


def _math(fn: str) -> Callable[[str, DType], str]:
  return lambda x, dt: f"{fn}({x})" if dt == dtypes.float64 else f"{fn}f({x})"


class CUDARenderer(CStyleLanguage):
  device = "CUDA"
  global_ids = True
  global_max = (2**31 - 1, 65535, 65535)
  has_local = True
  local_max = (1024, 1024, 64)
  local_max_threads = 1024
  shared_max = 48 * 1024
  # float2/float4 loads and stores (one 8- or 16-byte memory transaction per thread); CUDA C has no vector arithmetic,
  # so core does the math lane by lane. The index must be a multiple of the width: every compute buffer starts at
  # its allocation (cuMemAlloc aligns to 256 bytes; only storage devices hand out views at an offset)
  vector_bytes = 16
  vector_dtypes = frozenset({dtypes.float32})
  vector_align = True
  smem_prefix = "__shared__ "
  barrier = "__syncthreads();"
  # bit tricks instead of math.h's INFINITY/NAN: NVRTC sees no system headers, and the CPU mock has the same intrinsics
  infinity = "__int_as_float(0x7f800000)"
  nan = "__int_as_float(0x7fffffff)"
  type_map = {dtypes.bool: "bool", dtypes.int8: "signed char", dtypes.uint8: "unsigned char", dtypes.int64: "long long",
              dtypes.uint64: "unsigned long long", dtypes.float16: "half", dtypes.bfloat16: "__nv_bfloat16"}
  code_for_op = {**CStyleLanguage.code_for_op, UnaryOps.EXP2: _math("exp2"), UnaryOps.LOG2: _math("log2"),
                 UnaryOps.SIN: _math("sin"), UnaryOps.SQRT: _math("sqrt"),
                 TernaryOps.MULACC: lambda a, b, c, dt: f"fma({a},{b},{c})" if dt == dtypes.float64 else f"fmaf({a},{b},{c})"}
  fused_mulacc = True  # fmaf: the only fused multiply-adds (NVRTC runs with --fmad=false)

  def __init__(self, arch: str = "sm_80") -> None:
    # mma.sync m16n8k16 with f16 inputs needs sm_80 (Ampere) or newer (include/tg_mma.h)
    self.arch = arch
    self.tensor_cores = (MMA_M16N8K16_F16_F32,) if int(arch.removeprefix("sm_").rstrip("af")) >= 80 else ()

  def render(self, name: str, uops: list[UOp]) -> str:
    specials = [u for u in uops if u.op is UOps.SPECIAL]
    grid = [u for u in specials if u.arg[0].startswith("gidx")]
    if len(grid) > len(GRID_DIMS):
      raise NotImplementedError(f"kernel {name} has {len(grid)} grid (gidx) dims, a CUDA launch has {len(GRID_DIMS)} (x, y, z): "
                                "core should have folded its output axes onto the renderer's global_max")
    for u in grid:
      size, dim = u.arg[2], u.arg[1]
      if isinstance(size, int) and size > self.global_max[dim]:
        raise ValueError(f"kernel {name}: grid dim {GRID_DIMS[dim]} of {size} blocks is more than CUDA's {self.global_max[dim]}")
    # __launch_bounds__ promises the block size, so the compiler can spend registers accordingly
    self._threads = prod(s if isinstance(s, int) else s.max for s in (u.arg[2] for u in specials if u.arg[0].startswith("lidx")))
    self._stored = {f"data{u.src[0].arg}" for u in uops if u.op is UOps.STORE and u.src[0].op is UOps.DEFINE_GLOBAL}
    dts = {u.dtype.base if isinstance(u.dtype, PtrDType) else u.dtype for u in uops}
    self._includes = [f'#include "{h}"\n' for dt, h in ((dtypes.float16, "tg_fp16.h"), (dtypes.bfloat16, "tg_bf16.h")) if dt in dts]
    if any(u.op is UOps.WMMA for u in uops):
      self._includes.append('#include "tg_mma.h"\n')
    return super().render(name, uops)

  def keeps_vector(self, u: UOp) -> bool:
    return False

  def render_vectorize(self, lanes: list[str], dt: DType) -> str:
    return f"make_{self.render_dtype(dt)}({','.join(lanes)})"

  def render_gep(self, x: str, i: int, dt: DType) -> str:
    return f"{x}.{'xyzw'[i]}"

  def render_wmma(self, name: str, args: list[str]) -> str:
    assert name == MMA_M16N8K16_F16_F32.name, f"CUDA renders no tensor core {name}"
    return f"__tg_{name}({', '.join(args)})"

  def render_special(self, u: UOp) -> str:
    kind, dim, _ = u.arg
    assert isinstance(dim, int) and 0 <= dim < len(GRID_DIMS), f"SPECIAL {u.arg} has no CUDA dim"
    return f"{'blockIdx' if kind.startswith('gidx') else 'threadIdx'}.{GRID_DIMS[dim]}"

  def render_buffer_param(self, name: str, dt: PtrDType) -> str:
    # buffers the kernel only reads are const: with __restrict__ that lets loads go through the read-only cache
    return f"{'' if name in self._stored else 'const '}{self.render_dtype(dt.base)}* __restrict__ {name}"

  def render_kernel(self, name: str, kernel: list[str], bufs: list[tuple[str, PtrDType]], variables: list[str]) -> str:
    args = [self.render_buffer_param(n, dt) for n, dt in bufs] + [self.render_var_param(v) for v in variables]
    body = "\n".join(kernel)
    prefix = "".join(self._includes)
    return f"{prefix}extern \"C\" __global__ void __launch_bounds__({self._threads}) {name}({', '.join(args)}) {{\n{body}\n}}"

  def render_cast(self, x: str, dt: DType, from_dt: DType | None = None) -> str:
    if dt == dtypes.float16 and from_dt == dtypes.float64:
      return f"tg_double_to_half({x})"  # one rounding (include/tg_fp16.h)
    return super().render_cast(x, dt, from_dt)

  def render_bitcast(self, x: str, from_dt: DType, to_dt: DType) -> str:
    return f"__builtin_bit_cast({self.render_dtype(to_dt)}, ({self.render_dtype(from_dt)})({x}))"

