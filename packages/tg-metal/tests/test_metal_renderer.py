"""MetalRenderer's MSL: the signature, address spaces, threadgroup memory and barriers, MSL's spellings of types and
literals, the simdgroup tensor core helper. Every rendered kernel must also pass the mock's clang++ check.
These need no Mac and no METAL_MOCK: the ASTs are built on PYTHON (an AST doesn't depend on the device)."""
from __future__ import annotations

import re

import pytest

from tg import Tensor, Variable
from tg.codegen.kernel import Kernel, Opt, OptOps
from tg.dtype import DType, dtypes
from tg.engine.schedule import create_schedule
from tg.renderer import Program
from tg_metal.mock.check import check_cxx, check_msl
from tg_metal.renderer import MetalRenderer

DEV = "PYTHON"
needs_clang = pytest.mark.skipif(check_cxx() is None, reason="the MSL check needs clang++")


def _program(t: Tensor, opts: tuple[Opt, ...] = ()) -> Program:
  si = create_schedule([t.lazydata])[-1]
  return Kernel(si.ast, MetalRenderer()).apply_opts(list(opts)).to_program()


def _src(t: Tensor, opts: tuple[Opt, ...] = ()) -> str:
  src = _program(t, opts).src
  if check_cxx() is not None:
    check_msl(src)  # every kernel these tests render is valid MSL as far as the mock's check can tell
  return src


def test_add_signature() -> None:
  src = _src(Tensor.empty(4, 8, device=DEV) + Tensor.empty(4, 8, device=DEV))
  assert src.startswith("#include <metal_stdlib>\nusing namespace metal;\n")
  sig = re.search(r"kernel void (\w+)\((.*)\) \{", src)
  assert sig is not None, src
  assert sig.group(2) == ("device float* data0 [[buffer(0)]], const device float* data1 [[buffer(1)]], const device float* data2 [[buffer(2)]], "
                          "uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]")


def test_symbolic_size_is_a_constant_reference_after_the_buffers() -> None:
  n = Variable("n", 1, 64).bind(5)
  src = _src(Tensor.empty(3, 5, device=DEV).reshape(3, n) * 2)
  assert "constant int& n [[buffer(2)]]" in src


def test_grouped_reduction_uses_threadgroup_memory_and_barriers() -> None:
  src = _src(Tensor.empty(6, 256, device=DEV).sum(axis=1), (Opt(OptOps.GROUP, 1, 16),))
  assert re.search(r"^\s*threadgroup float \w+\[\d+\];$", src, re.M), src
  assert "threadgroup_barrier(mem_flags::mem_threadgroup);" in src
  assert "lid.x" in src and "gid.x" in src


def test_float4_loads_and_stores() -> None:
  src = _src(Tensor.empty(16, 32, device=DEV) @ Tensor.empty(32, 16, device=DEV), (Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 4)))
  assert "*((const device float4*)(data2+" in src and "*((device float4*)(data0+" in src  # reads keep the buffer's const
  assert re.search(r"float4\(\w+,\w+,\w+,\w+\)", src) and ".x" in src


def test_half_math_and_bfloat() -> None:
  from tg.ops import UnaryOps
  # a half EXP2 in a kernel is rendered with metal's half function (Tensor math computes half in float32, as torch:
  # the op is built on the graph directly)
  src = _src(Tensor(Tensor.empty(8, device=DEV, dtype=dtypes.float16).lazydata.e(UnaryOps.EXP2)))
  assert "metal::exp2(" in src and "half" in src
  src = _src(Tensor.empty(8, device=DEV, dtype=dtypes.float16).exp2())
  assert "precise::exp2(" in src and "(half)(" in src  # Tensor.exp2 of half: float32 math, rounded once
  src = _src(Tensor.empty(8, device=DEV, dtype=dtypes.bfloat16).maximum(Tensor.empty(8, device=DEV, dtype=dtypes.bfloat16)))
  assert "device bfloat*" in src


def test_float_math_is_precise() -> None:
  src = _src(Tensor.empty(8, device=DEV).sin())
  assert "precise::sin(" in src or "precise::" in src


def test_int64_literals_are_long_not_long_long() -> None:
  src = _src(Tensor.empty(8, device=DEV, dtype=dtypes.int64) * -(2**40) // Tensor.empty(8, device=DEV, dtype=dtypes.int64))
  assert "device long*" in src and "l" in src
  assert not re.search(r"\d+u?ll\b|long long", src), src


def test_bitcast_is_as_type() -> None:
  src = _src(Tensor.empty(8, device=DEV).bitcast(dtypes.int32))
  assert "as_type<int>(" in src


def test_float64_is_missing_and_limits() -> None:
  r = MetalRenderer()
  assert dtypes.float64 in r.missing_dtypes and dtypes.int64 not in r.missing_dtypes
  assert (r.local_max_threads, r.shared_max) == (1024, 32 * 1024)
  assert [tc.name for tc in r.tensor_cores] == ["simdgroup_8x8x8_f16_f32", "simdgroup_8x8x8_f32_f32"]


@pytest.mark.parametrize("dt, tin", [(dtypes.float16, "half"), (dtypes.float32, "float")])
def test_tensor_core_helper_is_emitted_once_when_used(dt: DType, tin: str) -> None:
  a, b = Tensor.empty(16, 16, device=DEV, dtype=dt), Tensor.empty(16, 16, device=DEV, dtype=dt)
  src = _src(a @ b, (Opt(OptOps.TC, None, 0 if dt == dtypes.float16 else 1),))
  name = f"__tg_simdgroup_8x8x8_{'f16' if dt == dtypes.float16 else 'f32'}_f32"
  assert src.count(f"inline float2 {name}({tin}2 a, {tin}2 b, float2 c)") == 1
  assert f"simdgroup_{tin}8x8 ma, mb;" in src and "simdgroup_multiply_accumulate(mc, ma, mb, mc);" in src
  assert re.search(rf"float2 wmma\d+ = {name}\(", src)
  plain = _src(Tensor.empty(16, 16, device=DEV, dtype=dt) + 1)
  assert "simdgroup" not in plain


@needs_clang
def test_more_than_31_buffer_arguments_is_refused() -> None:
  ts = [Tensor.empty(4, device=DEV) for _ in range(32)]
  out = ts[0]
  for t in ts[1:]:
    out = out + t
  with pytest.raises(ValueError, match="31"):
    _program(out)


def test_older_macs_get_bfloat_in_float_and_no_tensor_cores() -> None:
  r = MetalRenderer(bfloat=False, simdgroup_matrix=False)  # macOS 13 or older; an Intel Mac's GPU
  assert r.tensor_cores == () and dtypes.bfloat16 in r.unsupported_dtypes
  si = create_schedule([(Tensor.empty(8, device=DEV, dtype=dtypes.bfloat16) + 1).lazydata])[-1]
  src = Kernel(si.ast, r).to_program().src
  assert "bfloat" not in src and "ushort" in src
  if check_cxx() is not None:
    check_msl(src)
  assert MetalRenderer().tensor_cores and dtypes.bfloat16 not in MetalRenderer().unsupported_dtypes
