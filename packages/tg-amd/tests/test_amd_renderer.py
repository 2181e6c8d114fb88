"""AMDRenderer's HIP source: the kernel signature clang's AMDGPU target wants, AMDGPU builtins for the indices and
the barrier, LDS for workgroup memory, float4 accesses, WMMA on gfx11 only, and no call the backend can't lower."""
from __future__ import annotations

from amd_helpers import DEV, program

from tg import Tensor, Variable
from tg.codegen.kernel import Opt, OptOps
from tg.dtype import dtypes
from tg_amd.renderer import AMDRenderer


def test_kernel_signature_and_workgroup_size() -> None:
  p = program(Tensor.empty(6, 256, device=DEV).sum(axis=1), (Opt(OptOps.GROUP, 1, 16),))
  assert p.local_size == (16,)
  assert 'extern "C" __attribute__((global)) void __attribute__((amdgpu_flat_work_group_size(1, 16))) ' in p.src
  assert p.src.startswith('#include "tg_amd.h"\n')
  assert "static __attribute__((shared)) float" in p.src and "__builtin_amdgcn_s_barrier();" in p.src
  assert "__builtin_amdgcn_workgroup_id_x()" in p.src and "__builtin_amdgcn_workitem_id_x()" in p.src
  assert "amdgpu_flat_work_group_size(1, 1))) E_4(" in program(Tensor.empty(4, device=DEV) + 1).src


def test_only_stored_buffers_are_writable_and_sizes_are_ints() -> None:
  n = Variable("n", 1, 64).bind(5)
  src = program(Tensor.empty(3, 5, device=DEV).reshape(3, n) * 2).src
  assert "float* __restrict__ data0" in src and "const float* __restrict__ data1" in src and "const int n)" in src


def test_float4_loads_and_stores() -> None:
  src = program(Tensor.empty(16, 32, device=DEV) @ Tensor.empty(32, 16, device=DEV), (Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 4))).src
  assert "*((float4*)(data2+" in src and "*((float4*)(data0+" in src and "(float4){" in src


def test_transcendentals_are_tg_polynomials_and_sqrt_a_builtin() -> None:
  for dt in (dtypes.float32, dtypes.float64, dtypes.float16):
    src = program(Tensor.empty(8, device=DEV, dtype=dt).exp2().sin().log2().sqrt()).src
    assert "exp2" not in src and "log2" not in src and "sin(" not in src
    assert "__builtin_sqrt" in src


def test_wmma_only_on_rdna3() -> None:
  assert [tc.name for tc in AMDRenderer("gfx1100").tensor_cores] == ["wmma_16x16x16_f16_f32_w32"]
  assert AMDRenderer("gfx1151").tensor_cores
  assert not AMDRenderer("gfx1030").tensor_cores and not AMDRenderer("gfx90a").tensor_cores and not AMDRenderer("gfx942").tensor_cores


def test_wmma_renders_the_builtin_on_vectors() -> None:
  t = Tensor.empty(32, 32, device=DEV, dtype=dtypes.float16) @ Tensor.empty(32, 16, device=DEV, dtype=dtypes.float16)
  p = program(t, (Opt(OptOps.TC, None, 0),))
  assert p.local_size == (32,) and "amdgpu_flat_work_group_size(1, 32)" in p.src
  assert "__builtin_amdgcn_wmma_f32_16x16x16_f16_w32(" in p.src and "half16 vec" in p.src and "float8 " in p.src


def test_16_bit_types() -> None:
  src = program(Tensor.empty(8, device=DEV, dtype=dtypes.bfloat16).maximum(Tensor.empty(8, device=DEV, dtype=dtypes.bfloat16))).src
  assert "tg_bf16* __restrict__ data0" in src
  assert "half* __restrict__ data0" in program(Tensor.empty(8, device=DEV, dtype=dtypes.float16) * 2).src
