"""AMDRenderer: HIP C++ for clang's AMDGPU target, with no ROCm header: the kernel is
`extern "C" __attribute__((global)) void __attribute__((amdgpu_flat_work_group_size(1, N))) name(...)`, output axes
are the grid (SPECIAL gidx<d> = __builtin_amdgcn_workgroup_id_<d>(), lidx<d> = __builtin_amdgcn_workitem_id_<d>(),
dim 0 = x), workgroup memory is `static __attribute__((shared))` (LDS), the barrier s_barrier between workgroup fences.

Types come from include/tg_amd.h, included by every kernel: half is _Float16 (native f16 math), bfloat16 is tg_bf16
(computed in float), vectors are clang ext_vector_types. Math: EXP2, LOG2 and SIN are tg's own polynomials
(transcendental_fallback), because the AMDGPU backend alone lowers none of them for float64 (that needs ROCm's device
libraries) and its float32 instructions are approximations (v_sin_f32 loses all accuracy for large arguments);
this way a kernel computes the same bits on a GPU and in mock mode. sqrt and fma are clang builtins the backend
lowers to instructions. Tensor cores: RDNA3's v_wmma_f32_16x16x16_f16 (wave32) on gfx11 targets.
"""
from __future__ import annotations

from collections.abc import Callable

from tg.codegen.tensor_core import WMMA_16X16X16_F16_F32_W32
from tg.codegen.uops import UOp, UOps
from tg.dtype import DType, PtrDType, dtypes
from tg.helpers import prod
from tg.ops import Op, TernaryOps, UnaryOps
from tg.renderer.cstyle import CStyleLanguage

GRID_DIMS = "xyz"
WMMA_BUILTIN = "__builtin_amdgcn_wmma_f32_16x16x16_f16_w32"
# a workgroup barrier: s_barrier waits for the workgroup's waves, the fences make LDS writes before it visible after it
BARRIER = ('__builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup"); __builtin_amdgcn_s_barrier(); '
           '__builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");')


def _sqrt(x: str, dt: DType) -> str:
  if dt == dtypes.float64:
    return f"__builtin_sqrt({x})"
  if dt == dtypes.float32:
    return f"__builtin_sqrtf({x})"
  # half and bfloat16: the float root rounded to the 16-bit type is the correctly rounded 16-bit root
  return f"({'half' if dt == dtypes.float16 else 'tg_bf16'})(__builtin_sqrtf((float)({x})))"


def _fma(a: str, b: str, c: str, dt: DType) -> str:
  return f"__builtin_fma({a},{b},{c})" if dt == dtypes.float64 else f"__builtin_fmaf({a},{b},{c})"


def has_wmma(arch: str) -> bool:
  """RDNA3 (gfx11xx) has v_wmma_f32_16x16x16_f16; RDNA2 and CDNA (whose MFMA is another instruction family) don't."""
  return arch.startswith("gfx11")


class AMDRenderer(CStyleLanguage):
  device = "AMD"
  global_ids = True
  # a HIP launch: up to 2^31-1 workgroups along x, 65535 along y and z; workgroups of up to 1024 work-items
  global_max = (2**31 - 1, 65535, 65535)
  has_local = True
  local_max = (1024, 1024, 1024)
  local_max_threads = 1024
  shared_max = 64 * 1024  # LDS per workgroup
  # float2/float4 loads and stores (one 8- or 16-byte access); the math stays scalar, as on CUDA. hipMalloc aligns
  # every buffer to at least 256 bytes, so element indices that are multiples of the width are aligned
  vector_bytes = 16
  vector_dtypes = frozenset({dtypes.float32})
  vector_align = True
  smem_prefix = "static __attribute__((shared)) "
  barrier = BARRIER
  infinity = "__builtin_inff()"
  nan = "__builtin_nanf(\"\")"
  type_map = {dtypes.bool: "bool", dtypes.int8: "signed char", dtypes.uint8: "unsigned char", dtypes.int16: "short",
              dtypes.uint16: "unsigned short", dtypes.uint32: "unsigned int", dtypes.int64: "long long",
              dtypes.uint64: "unsigned long long", dtypes.float16: "half", dtypes.bfloat16: "tg_bf16"}
  code_for_op: dict[Op, Callable[..., str]] = {**CStyleLanguage.code_for_op, UnaryOps.SQRT: _sqrt, TernaryOps.MULACC: _fma}
  fused_mulacc = True  # __builtin_fma(f): the only fused multiply-adds (clang runs with -ffp-contract=off)
  transcendental_fallback = frozenset({UnaryOps.EXP2, UnaryOps.LOG2, UnaryOps.SIN})

  def __init__(self, arch: str = "gfx1100") -> None:
    self.arch = arch
    self.tensor_cores = (WMMA_16X16X16_F16_F32_W32,) if has_wmma(arch) else ()

  def render(self, name: str, uops: list[UOp]) -> str:
    specials = [u for u in uops if u.op is UOps.SPECIAL]
    grid = [u for u in specials if u.arg[0].startswith("gidx")]
    if len(grid) > len(GRID_DIMS):
      raise NotImplementedError(f"kernel {name} has {len(grid)} grid (gidx) dims, a HIP launch has {len(GRID_DIMS)} (x, y, z): "
                                "core should have folded its output axes onto the renderer's global_max")
    for u in grid:
      size, dim = u.arg[2], u.arg[1]
      if isinstance(size, int) and size > self.global_max[dim]:
        raise ValueError(f"kernel {name}: grid dim {GRID_DIMS[dim]} of {size} workgroups is more than HIP's {self.global_max[dim]}")
    # amdgpu_flat_work_group_size promises the workgroup size, so the compiler can spend registers accordingly
    self._threads = prod(s if isinstance(s, int) else s.max for s in (u.arg[2] for u in specials if u.arg[0].startswith("lidx")))
    self._stored = {f"data{u.src[0].arg}" for u in uops if u.op is UOps.STORE and u.src[0].op is UOps.DEFINE_GLOBAL}
    return super().render(name, uops)

  def keeps_vector(self, u: UOp) -> bool:
    return False

  def render_vectorize(self, lanes: list[str], dt: DType) -> str:
    return f"({self.render_dtype(dt)}){{{','.join(lanes)}}}"

  def render_wmma(self, name: str, args: list[str]) -> str:
    assert name == WMMA_16X16X16_F16_F32_W32.name, f"AMD renders no tensor core {name}"
    return f"{WMMA_BUILTIN}({', '.join(args)})"

  def render_special(self, u: UOp) -> str:
    kind, dim, _ = u.arg
    assert isinstance(dim, int) and 0 <= dim < len(GRID_DIMS), f"SPECIAL {u.arg} has no HIP dim"
    return f"__builtin_amdgcn_{'workgroup' if kind.startswith('gidx') else 'workitem'}_id_{GRID_DIMS[dim]}()"

  def render_buffer_param(self, name: str, dt: PtrDType) -> str:
    return f"{'' if name in self._stored else 'const '}{self.render_dtype(dt.base)}* __restrict__ {name}"

  def render_kernel(self, name: str, kernel: list[str], bufs: list[tuple[str, PtrDType]], variables: list[str]) -> str:
    args = [self.render_buffer_param(n, dt) for n, dt in bufs] + [self.render_var_param(v) for v in variables]
    body = "\n".join(kernel)
    return (f'#include "tg_amd.h"\nextern "C" __attribute__((global)) void __attribute__((amdgpu_flat_work_group_size(1, {self._threads}))) '
            f"{name}({', '.join(args)}) {{\n{body}\n}}")

  def render_bitcast(self, x: str, from_dt: DType, to_dt: DType) -> str:
    return f"__builtin_bit_cast({self.render_dtype(to_dt)}, ({self.render_dtype(from_dt)})({x}))"

