"""OpenCLRenderer: OpenCL C 1.2 through tg's CStyleLanguage.

Output axes are the NDRange: SPECIAL gidx<d> is get_group_id(d), lidx<d> get_local_id(d); workgroup memory is
`__local`, the barrier `barrier(CLK_LOCAL_MEM_FENCE)`. Buffers are `__global` pointers; bool buffers are `uchar`
(OpenCL kernels can't take bool pointers). float16 and float64 exist only where the device has cl_khr_fp16 and
cl_khr_fp64; bfloat16 is emulated by core through its bits. Vectors: float4/int4 loads and stores (vload4/vstore4,
any alignment); core does the math lane by lane. The capabilities come from the device's own limits.
"""
from __future__ import annotations

from typing import Any

from tg.codegen.uops import UOp
from tg.dtype import DType, PtrDType, dtypes
from tg.ops import TernaryOps
from tg.renderer.cstyle import CStyleLanguage


class OpenCLRenderer(CStyleLanguage):
  device = "OPENCL"
  global_ids = True
  global_max = (2**31 - 1, 65535, 65535)
  has_local = True
  kernel_prefix = "__kernel "
  buffer_prefix = "__global "
  local_prefix = "__local "
  smem_prefix = "__local "
  barrier = "barrier(CLK_LOCAL_MEM_FENCE);"
  unsupported_dtypes = frozenset({dtypes.bfloat16})
  vector_bytes = 16  # vload4/vstore4 of float and int: one 16-byte access per work-item
  vector_dtypes = frozenset({dtypes.float32, dtypes.int32})
  type_map = {dtypes.uint8: "uchar", dtypes.uint16: "ushort", dtypes.uint32: "uint", dtypes.uint64: "ulong"}
  # OpenCL C contracts a*b+c by default (FP_CONTRACT is on): the kernel turns that off and fuses only MULACC
  fused_mulacc = True
  code_for_op = {**CStyleLanguage.code_for_op, TernaryOps.MULACC: lambda a, b, c, dt: f"fma({a},{b},{c})"}

  def __init__(self, device: Any) -> None:
    """`device`: the pyopencl Device the kernels run on; its limits and extensions become the capabilities."""
    self.local_max = tuple(device.max_work_item_sizes)
    self.local_max_threads = device.max_work_group_size
    self.shared_max = device.local_mem_size
    self.extensions = [ext for ext in ("cl_khr_fp16", "cl_khr_fp64") if ext in device.extensions.split()]
    self.missing_dtypes = frozenset(dt for dt, ext in ((dtypes.float16, "cl_khr_fp16"), (dtypes.float64, "cl_khr_fp64"))
                                    if ext not in self.extensions)

  def keeps_vector(self, u: UOp) -> bool:
    return False

  def render_special(self, u: UOp) -> str:
    kind, dim, _ = u.arg
    return f"(int)get_{'group' if kind.startswith('gidx') else 'local'}_id({dim})"

  def render_buffer_param(self, name: str, dt: PtrDType) -> str:
    return f"__global {'uchar' if dt.base == dtypes.bool else self.render_dtype(dt.base)}* restrict {name}"

  # a uchar read into a bool (or a bool stored into a uchar) converts to 0/1 as in C: scalar accesses need nothing more
  def render_load(self, buf: str, idx: str, dt: DType, buf_dt: PtrDType, local: bool = False) -> str:
    return f"{buf}[{idx}]" if dt.count == 1 else f"vload{dt.count}(0, {buf}+{idx})"

  def render_store(self, buf: str, idx: str, value: str, dt: DType, buf_dt: PtrDType, local: bool = False) -> str:
    return f"{buf}[{idx}] = {value};" if dt.count == 1 else f"vstore{dt.count}({value}, 0, {buf}+{idx});"

  def render_vectorize(self, lanes: list[str], dt: DType) -> str:
    return f"({self.render_dtype(dt)})({','.join(lanes)})"

  def render_gep(self, x: str, i: int, dt: DType) -> str:
    return f"{x}.s{i:x}"

  def render_vector_cast(self, x: str, from_dt: DType, to_dt: DType) -> str:
    return f"convert_{self.render_dtype(to_dt)}({x})"

  def render_bitcast(self, x: str, from_dt: DType, to_dt: DType) -> str:
    return f"as_{self.render_dtype(to_dt)}(({self.render_dtype(from_dt)})({x}))"

  def render_kernel(self, name: str, kernel: list[str], bufs: list[tuple[str, PtrDType]], variables: list[str]) -> str:
    pragmas = "".join(f"#pragma OPENCL EXTENSION {ext} : enable\n" for ext in self.extensions)
    return f"{pragmas}#pragma OPENCL FP_CONTRACT OFF\n{super().render_kernel(name, kernel, bufs, variables)}"
