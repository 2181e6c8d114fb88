"""METAL_MOCK=1's MSL check (clang++ -fsyntax-only against tg_metal/mock/check/metal_stdlib): valid MSL passes, and
the mistakes Metal's compiler would refuse are caught: writes through `const device` pointers, pointers of one
address space where another is wanted, names MSL lacks (double, long long, C's float functions)."""
from __future__ import annotations

import pytest

from tg_metal.mock.check import MetalCheck, MetalCheckError, check_cxx, check_msl, mock_source

pytestmark = pytest.mark.skipif(check_cxx() is None, reason="the MSL check needs clang++")

HEAD = "#include <metal_stdlib>\nusing namespace metal;\n"
IDX = "uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]"


def _kernel(params: str, body: str) -> str:
  return f"{HEAD}kernel void k({params}, {IDX}) {{\n{body}\n}}"


VALID = _kernel("device float* data0 [[buffer(0)]], const device half* data1 [[buffer(1)]], constant int& n [[buffer(2)]]", """
  threadgroup float part[64];
  int i = gid.x * 64 + lid.x;
  part[lid.x] = i < n ? (float)(data1[i]) : 0.0f;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float4 v = *((threadgroup float4*)(part+0));
  half2 h = half2((half)(v.x), (half)(1.5f));
  uint bits = as_type<uint>(precise::exp2(v.y));
  long big = (-9223372036854775807l-1);
  data0[gid.x] = metal::fma(v.z, (float)(h.y), (float)(bits & 1u)) + (float)(big != 0) + metal::sqrt(INFINITY) * NAN;""")


def test_valid_msl_passes() -> None:
  check_msl(VALID)


@pytest.mark.parametrize("wait", [False, True])
def test_cancel_stops_the_check_without_raising(wait: bool) -> None:
  """A check is cancelled while another exception propagates (a Ctrl-C during the CPU build): it must reap clang++
  and raise nothing, or that exception is replaced (it was: a ValueError from flushing the closed stdin)."""
  check = MetalCheck(VALID)
  if wait:
    check.proc.wait()
  check.cancel()
  assert check.proc.returncode is not None


def test_threadgroup_arrays_become_statics_for_the_mock() -> None:
  assert "  static threadgroup float part[64];" in mock_source(VALID)
  assert "*((threadgroup float4*)(part+0))" in mock_source(VALID)  # casts are left alone


@pytest.mark.parametrize("params, body, why", [
  ("const device float* data0 [[buffer(0)]]", "data0[gid.x] = 1.0f;", "read-only"),
  ("device float* data0 [[buffer(0)]]", "threadgroup float t[4];\n  threadgroup float* p = data0;\n  p[0] = t[0];",
   r"cannot initialize .*'threadgroup float \*' .*'device float \*'"),
  ("device float* data0 [[buffer(0)]]", "threadgroup float t[4];\n  device float* p = t;\n  data0[0] = p[0];",
   r"cannot initialize .*'device float \*' .*'threadgroup float\[4\]'"),
  ("constant int& n [[buffer(0)]], device int* data0 [[buffer(1)]]", "n = 3; data0[0] = n;", "cannot assign to .* const-qualified"),
  ("device float* data0 [[buffer(0)]]", "double d = data0[0];\n  data0[1] = d;", "msl_has_no_double"),
  ("device long* data0 [[buffer(0)]]", "data0[0] = 5ll;", "long long"),
  ("device float* data0 [[buffer(0)]]", "data0[0] = expf(data0[1]);", "undeclared|expf"),
  ("device float* data0 [[buffer(0)]]", "data0[0] = as_type<half>(data0[1]);", "same size"),
  ("device float* data0 [[buffer(0)]]", "data0[0] = data0[1]", "expected ';'"),
  ("device float* data0 [[buffer(0)]], device float* data1 [[buffer(0)]]", "data0[0] = data1[0];", r"indices \[0, 0\] repeat"),
])
def test_mistakes_are_caught(params: str, body: str, why: str) -> None:
  with pytest.raises(MetalCheckError, match=why):
    check_msl(_kernel(params, body))
