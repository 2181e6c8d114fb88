"""CStyleLanguage's hooks: a C dialect overrides small methods (render_load, render_store, render_buffer_param,
render_local, the casts) and never patches rendered text. An OpenCL-C-like renderer written only with the hooks
renders real kernels (vector accesses, bool buffers, workgroup memory, vector casts) in its own spelling; on a
C-family device, a renderer changed through the same hooks still computes the same numbers."""
from __future__ import annotations

import copy
import re

import numpy as np
import pytest

from tg import Device, Tensor, dtypes
from tg.codegen.kernel import Kernel, Opt, OptOps
from tg.codegen.uops import UOp, UOps
from tg.dtype import DType, PtrDType
from tg.engine.realize import CompiledRunner
from tg.engine.schedule import ScheduleItem, create_schedule
from tg.renderer.cstyle import CStyleLanguage

rng = np.random.default_rng(0)


class OpenCLLike(CStyleLanguage):
  """OpenCL C's spelling, through the hooks only: vload4/vstore4, bool buffers as uchar, address spaces."""
  kernel_prefix = "__kernel "
  buffer_prefix = "__global "
  local_prefix = smem_prefix = "__local "
  barrier = "barrier(CLK_LOCAL_MEM_FENCE);"
  global_ids, has_local = True, True
  global_max = (2**31 - 1, 65535, 65535)
  vector_bytes = 16
  vector_dtypes = frozenset({dtypes.float32, dtypes.int32})
  type_map = {dtypes.uint8: "uchar", dtypes.int64: "long"}

  def render_special(self, u: UOp) -> str:
    return f"get_{'group' if u.arg[0].startswith('gidx') else 'local'}_id({u.arg[1]})"

  def render_vectorize(self, lanes: list[str], dt: DType) -> str:
    return f"({self.render_dtype(dt)})({','.join(lanes)})"

  def render_gep(self, x: str, i: int, dt: DType) -> str:
    return f"{x}.s{i}"

  def render_buffer_param(self, name: str, dt: PtrDType) -> str:
    return super().render_buffer_param(name, dtypes.uint8.ptr() if dt.base == dtypes.bool else dt)

  def render_load(self, buf: str, idx: str, dt: DType, buf_dt: PtrDType, local: bool = False) -> str:
    if dt.count > 1:
      return f"vload{dt.count}(0, {buf}+{idx})"
    return f"({buf}[{idx}]!=0)" if buf_dt.base == dtypes.bool else super().render_load(buf, idx, dt, buf_dt, local)

  def render_store(self, buf: str, idx: str, value: str, dt: DType, buf_dt: PtrDType, local: bool = False) -> str:
    if dt.count > 1:
      return f"vstore{dt.count}({value}, 0, {buf}+{idx});"
    if buf_dt.base == dtypes.bool:
      return f"{buf}[{idx}] = (uchar)({value});"
    return super().render_store(buf, idx, value, dt, buf_dt, local)


def _f32(*shape: int) -> Tensor:
  return Tensor(rng.standard_normal(shape).astype(np.float32))


def _item(t: Tensor) -> ScheduleItem:
  sched = create_schedule([t.lazydata])
  assert len(sched) == 1, f"expected one kernel (the inputs are realized), got {len(sched)}"
  return sched[0]


def _render(t: Tensor, opts: list[Opt], renderer: CStyleLanguage) -> tuple[str, list[UOp]]:
  k = Kernel(_item(t).ast, renderer).apply_opts(opts)
  p = k.to_program()
  return p.src, p.uops


# a cast to a pointer type written as `*((T*)(`: in OpenCL C one without an address space is a private pointer
_PTR_CAST = re.compile(r"\*\(\(([^()]*\*)\)")


def test_vector_access_goes_through_the_hooks() -> None:
  src, uops = _render(_f32(8, 16) * 2 + 1, [Opt(OptOps.UPCAST, 1, 4)], OpenCLLike())
  assert any(u.op is UOps.LOAD and u.dtype == dtypes.float32.vec(4) for u in uops), "the kernel has vector loads"
  assert "vload4(0, data1+" in src and "vstore4(" in src, src
  assert not _PTR_CAST.findall(src), f"a pointer cast the dialect did not write:\n{src}"
  assert "__kernel void" in src and "__global float* restrict data0" in src, src


def test_default_vector_access_keeps_the_address_space() -> None:
  class Qualified(OpenCLLike):  # the base class's render_load/render_store, with OpenCLLike's qualifiers
    render_load = CStyleLanguage.render_load  # type: ignore[assignment]
    render_store = CStyleLanguage.render_store  # type: ignore[assignment]
  src, _ = _render(_f32(8, 16) * 2 + 1, [Opt(OptOps.UPCAST, 1, 4)], Qualified())
  casts = _PTR_CAST.findall(src)
  assert casts and all(c.startswith(("__global ", "__local ")) for c in casts), f"{casts}\n{src}"


def test_bool_buffers_are_passed_in_the_dialects_type() -> None:
  a, b = _f32(4, 8), _f32(4, 8)
  cond = (a < b).realize()
  src, _ = _render(cond.where(a, b), [], OpenCLLike())
  assert "__global uchar* restrict data1" in src and "bool*" not in src, src
  assert "(data1[" in src and "!=0)" in src, src
  src, _ = _render(a < b, [], OpenCLLike())  # a bool output
  assert "__global uchar* restrict data0" in src and "= (uchar)(" in src, src


def test_workgroup_memory_uses_render_local() -> None:
  src, uops = _render(_f32(4, 256).sum(1), [Opt(OptOps.GROUP, 1, 16)], OpenCLLike())
  assert any(u.op is UOps.DEFINE_LOCAL for u in uops)
  assert re.search(r"__local float temp\w*\[\d+\];", src) and "barrier(CLK_LOCAL_MEM_FENCE);" in src, src


def test_vector_cast_default_is_per_lane() -> None:
  src, uops = _render(_f32(8, 16).cast(dtypes.int32), [Opt(OptOps.UPCAST, 1, 4)], OpenCLLike())
  assert any(u.op is UOps.CAST and u.dtype == dtypes.int32.vec(4) for u in uops), "a vector cast reaches the renderer"
  assert "__builtin_convertvector" not in src and re.search(r"\(int4\)\(\(int\)\(val\d+\.s0\),", src), src


def test_base_has_no_clang_only_spelling() -> None:
  class Bare(CStyleLanguage):
    pass
  with pytest.raises(NotImplementedError, match="render_vectorize"):
    Bare().render_vectorize(["a", "b"], dtypes.float32.vec(2))
  with pytest.raises(NotImplementedError, match="render_bitcast"):
    Bare().render_bitcast("a", dtypes.float32, dtypes.int32)


# ---- on a C-family device: hooks changed, numbers unchanged ----

class _BoolAsBytes(CStyleLanguage):
  """Bool buffers passed as unsigned char, converted in the load and store hooks; vector casts lane by lane. Vector
  accesses of bools stay the device renderer's own (CLANG reads bytes into lane masks itself)."""
  render_vector_cast = CStyleLanguage.render_vector_cast

  def render_buffer_param(self, name: str, dt: PtrDType) -> str:
    return super().render_buffer_param(name, dtypes.uint8.ptr() if dt.base == dtypes.bool else dt)

  def render_load(self, buf: str, idx: str, dt: DType, buf_dt: PtrDType, local: bool = False) -> str:
    if buf_dt.base == dtypes.bool and dt.count == 1:
      return self.render_cast(super().render_load(buf, idx, dtypes.uint8, dtypes.uint8.ptr(), local), dtypes.bool)
    return super().render_load(buf, idx, dt, buf_dt, local)

  def render_store(self, buf: str, idx: str, value: str, dt: DType, buf_dt: PtrDType, local: bool = False) -> str:
    if buf_dt.base == dtypes.bool and dt.count == 1:
      return super().render_store(buf, idx, self.render_cast(value, dtypes.uint8), dtypes.uint8, dtypes.uint8.ptr(), local)
    return super().render_store(buf, idx, value, dt, buf_dt, local)


def _device_renderer() -> CStyleLanguage:
  r = Device[Device.DEFAULT].renderer
  if not isinstance(r, CStyleLanguage):
    pytest.skip(f"{Device.DEFAULT}'s renderer is not a CStyleLanguage")
  hooked = copy.copy(r)
  hooked.__class__ = type(f"BoolAsBytes{type(r).__name__}", (_BoolAsBytes, type(r)), {})
  return hooked


def _run(t: Tensor, opts: list[Opt], renderer: CStyleLanguage) -> tuple[np.ndarray, str]:
  si = _item(t)
  k = Kernel(si.ast, renderer)
  k.apply_opts([o for o in opts if o.amt <= renderer.vector_width(dtypes.float32)])
  runner = CompiledRunner(k.to_program())
  for b in si.bufs:
    b.ensure_allocated()
  runner(list(si.bufs), si.var_vals, wait=True)
  out = si.bufs[0]
  return np.frombuffer(out.as_buffer(), dtype=np.dtype(out.dtype.fmt or "B")).copy(), runner.p.src


def test_bool_as_bytes_on_the_device_computes_the_same() -> None:
  r = _device_renderer()
  a, b = _f32(8, 16), _f32(8, 16)
  na, nb = a.numpy(), b.numpy()
  out, src = _run(a < b, [], r)
  assert r.render_dtype(dtypes.uint8) + "*" in src.replace(" restrict", "").replace(" __restrict__", ""), src
  np.testing.assert_array_equal(out.astype(bool).reshape(8, 16), na < nb)
  cond = Tensor(na < nb)
  out, _ = _run(cond.where(a, b), [Opt(OptOps.UPCAST, 1, 4)], r)
  np.testing.assert_array_equal(out.reshape(8, 16), np.where(na < nb, na, nb))


def test_lane_by_lane_vector_cast_on_the_device_computes_the_same() -> None:
  r = _device_renderer()
  a = _f32(8, 16) * 100
  out, _ = _run(a.cast(dtypes.int32), [Opt(OptOps.UPCAST, 1, 4)], r)
  np.testing.assert_array_equal(out.reshape(8, 16), a.numpy().astype(np.int32))
