"""tg-webgpu's own checks: the device registers, its WGSL is what the renderer promises, byte-sized stores from
neighbouring threads don't clobber each other, tg's integer semantics hold where WGSL's differ, and its errors
say what to do. They run on the real device (lavapipe on a machine without a GPU)."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from tg import Device, Tensor
from tg.codegen.kernel import Kernel, Opt, OptOps
from tg.dtype import dtypes
from tg.engine.schedule import create_schedule
from tg.plugins import installed_devices
from tg_webgpu import gpu
from tg_webgpu.allocator import WebGPUAllocator
from tg_webgpu.compiler import WGSLCompileError, WGSLCompiler
from tg_webgpu.renderer import WGSLRenderer, WGSLRenderError
from tg_webgpu.runtime import WebGPUProgram

pytestmark = pytest.mark.skipif(gpu.unavailable_reason() != "", reason=f"no WebGPU adapter here: {gpu.unavailable_reason()}")
D = "WEBGPU"


def _kernel(t: Tensor, renderer: WGSLRenderer | None = None, opts: list[Opt] | None = None) -> Kernel:
  si = create_schedule([t.lazydata])[-1]
  k = Kernel(si.ast, renderer or Device[D].renderer)
  return k.apply_opts(opts) if opts is not None else k.hand_coded_optimizations()


def _source(t: Tensor, renderer: WGSLRenderer | None = None, opts: list[Opt] | None = None) -> str:
  return _kernel(t, renderer, opts).to_program().src


def test_webgpu_registers_through_its_entry_point() -> None:
  devs = {d.name: d for d in installed_devices()}
  assert devs[D].package == "tg-webgpu" and devs[D].module == "tg_webgpu.plugin"
  r = Device[D].renderer
  assert isinstance(r, WGSLRenderer) and r.global_ids and r.has_local
  lim = gpu.limits()
  assert r.global_max == (lim["max-compute-workgroups-per-dimension"],) * 3
  assert r.local_max_threads == lim["max-compute-invocations-per-workgroup"] and r.shared_max == lim["max-compute-workgroup-storage-size"]
  assert {dtypes.float64, dtypes.int64, dtypes.uint64} <= r.missing_dtypes


def test_elementwise_source_is_one_compute_shader() -> None:
  a, b = Tensor.empty(4, 8, device=D), Tensor.empty(4, 8, device=D)
  src = _source((a * b + 1).relu())
  assert src.count("@compute @workgroup_size(") == 1 and src.count("fn ") == 1
  assert all(f"@group(0) @binding({i}) var<storage, read_write> data{i}: array<f32>;" in src for i in range(3))
  assert "workgroup_id" in src and "for (" not in src, "output axes are workgroups and threads, not loops"
  WGSLCompiler().compile(src)  # wgpu accepts it


def test_workgroup_size_is_the_lidx_sizes() -> None:
  a = Tensor.empty(4, 64, device=D)
  src = _source(a.sum(axis=1), opts=[Opt(OptOps.GROUPTOP, 1, 16), Opt(OptOps.LOCAL, 0, 4)])
  assert "@workgroup_size(16, 4, 1)" in src
  assert "var<workgroup> " in src and "workgroupBarrier();" in src


def test_grouped_reduce_with_shared_memory_runs() -> None:
  x = np.random.default_rng(0).standard_normal((6, 512)).astype(np.float32)
  t = Tensor(x, device=D)
  k = _kernel(t.sum(axis=1), opts=[Opt(OptOps.GROUPTOP, 1, 64), Opt(OptOps.LOCAL, 0, 2)])
  from tg.engine.realize import CompiledRunner
  si = create_schedule([t.sum(axis=1).lazydata])[-1]
  for b in si.bufs:
    b.ensure_allocated()
  CompiledRunner(k.to_program())(list(si.bufs), {})
  np.testing.assert_allclose(np.frombuffer(si.bufs[0].as_buffer(), np.float32), x.sum(axis=1), rtol=1e-5, atol=1e-4)


GOLDEN = os.path.join(os.path.dirname(__file__), "golden")


@pytest.mark.parametrize("case", ["compare_to_bool", "grouped_sum"])
def test_golden_kernels(case: str) -> None:
  """Fixed kernels rendered with fixed opts: a change to the generated WGSL shows up as a diff of these files.
  After a deliberate change, regenerate them with TG_UPDATE_GOLDEN=1."""
  a = Tensor.empty(4, 8, device=D)
  t, opts = {"compare_to_bool": (a < 0.5, [Opt(OptOps.LOCAL, 1, 8)]),
             "grouped_sum": (a.sum(axis=1), [Opt(OptOps.GROUPTOP, 1, 4)])}[case]
  src = _source(t, opts=opts)
  path = os.path.join(GOLDEN, f"{case}.wgsl")
  if os.getenv("TG_UPDATE_GOLDEN"):
    with open(path, "w") as f:
      f.write(src)
  with open(path) as f:
    assert src == f.read(), f"the WGSL for {case} changed: review it, then TG_UPDATE_GOLDEN=1 rewrites {path}"
  WGSLCompiler().compile(src)


def test_compile_error_shows_source() -> None:
  with pytest.raises(WGSLCompileError, match="source"):
    WGSLCompiler().compile("fn broken( {")


@pytest.mark.parametrize("dt", [dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16], ids=lambda d: d.name)
def test_sub_word_stores_from_neighbouring_threads(dt: dtypes) -> None:
  # 32 threads of one workgroup write the 4 (or 2) bytes of each u32 word at the same time
  n = 32 * 129
  x = np.arange(n, dtype=np.int32) * 7 - 9000
  t = Tensor(x, device=D).realize()
  f = lambda: (t * 3).cast(dtypes.int8) < 0 if dt == dtypes.bool else (t * 3).cast(dt)
  src = _source(f(), opts=[Opt(OptOps.LOCAL, 0, 32)])  # (scheduling a tensor for its source uses it up)
  assert "@workgroup_size(32, 1, 1)" in src and "var<storage, read_write> data0: array<atomic<u32>>" in src
  assert "atomicAnd(" in src and "atomicOr(" in src
  want = (x * 3).astype(np.int8) < 0 if dt == dtypes.bool else (x * 3).astype(dt.np)
  np.testing.assert_array_equal(f().numpy(), want)  # the heuristics put many threads in a workgroup here too


def test_sub_word_buffer_with_a_partial_last_word() -> None:
  x = np.arange(4099, dtype=np.int32) - 2000
  np.testing.assert_array_equal((Tensor(x, device=D) > 0).numpy(), x > 0)
  np.testing.assert_array_equal(Tensor(x.astype(np.int8), device=D).numpy(), x.astype(np.int8))


def test_sub_word_in_place_update() -> None:
  # the same buffer is bound twice (read and write): WebGPU allows it only because both bindings are read_write
  x = np.arange(37, dtype=np.uint8)
  t = Tensor(x, device=D).realize()
  t.assign(t + 200).realize()
  np.testing.assert_array_equal(t.numpy(), (x + 200).astype(np.uint8))
  f = Tensor(np.ones(5, np.float32), device=D).realize()
  f.assign(f * 3).realize()
  np.testing.assert_array_equal(f.numpy(), np.full(5, 3, np.float32))


def test_small_ints_wrap_as_in_c() -> None:
  a = np.array([100, -100, 127, -128, 5], dtype=np.int8)
  np.testing.assert_array_equal((Tensor(a, device=D) * 3).numpy(), a * np.int8(3))
  np.testing.assert_array_equal((-Tensor(a, device=D)).numpy(), -a)
  u = np.array([0, 1, 65535, 40000], dtype=np.uint16)
  np.testing.assert_array_equal((Tensor(u, device=D) + 30000).numpy(), u + np.uint16(30000))


def test_integer_division_by_zero_is_zero() -> None:
  # WGSL gives the dividend for x / 0; tg (like its PYTHON reference) gives 0
  from tg.ops import BinaryOps
  a, b = Tensor([7, -7, 8], device=D), Tensor([0, 2, 0], device=D)
  idiv = Tensor(a.lazydata.e(BinaryOps.IDIV, b.lazydata), device=D)
  mod = Tensor(a.lazydata.e(BinaryOps.MOD, b.lazydata), device=D)
  assert idiv.tolist() == [0, -3, 0] and mod.tolist() == [0, -1, 0]


def test_float_to_int_casts_follow_tg() -> None:
  # tg's rule (codegen/lowerer.py _float_to_int): through int32, NaN, inf and what is out of its range its lowest value
  x = Tensor([float("nan"), float("inf"), -1.0, -2.5, 300.7, 3e9], device=D)
  low = -2 ** 31
  assert x.cast(dtypes.int32).tolist() == [low, low, -1, -2, 300, low]
  assert x.cast(dtypes.uint8).tolist() == [0, 0, 255, 254, 44, 0]  # negatives wrap like a C cast on common CPUs
  assert x.cast(dtypes.uint32).tolist() == [0, 0, 4294967295, 4294967294, 300, 3000000000]  # (no int64: WGSL's own, the same)


def test_nan_compares_and_max_ignore_the_drivers_no_nan_assumption() -> None:
  x = Tensor([float("nan"), 1.0, float("-inf")], device=D)
  assert x.isnan().tolist() == [True, False, False]
  assert (x == x).tolist() == [False, True, True]
  r = x.relu().numpy()
  assert np.isnan(r[0]) and r[1] == 1.0 and r[2] == 0.0


def test_float16_when_the_adapter_has_it() -> None:
  if not gpu.has_f16():
    assert dtypes.float16 in Device[D].renderer.missing_dtypes
    return
  h = np.array([1.5, -2.25, 30000.0, 1e-4], dtype=np.float16)
  assert "enable f16;" in _source(Tensor(h, device=D) * 2)
  np.testing.assert_array_equal((Tensor(h, device=D) * 2).numpy(), h * np.float16(2))


def test_bfloat16_is_computed_through_its_bits() -> None:
  x = np.array([1.5, -2.25, 3.0, 1000.0], dtype=np.float32)
  b = Tensor(x, device=D).cast(dtypes.bfloat16)
  np.testing.assert_array_equal((b + 1).cast(dtypes.float32).numpy(), [2.5, -1.25, 4.0, 1000.0])


def test_missing_dtype_is_refused_clearly() -> None:
  with pytest.raises(NotImplementedError, match="WEBGPU"):
    (Tensor(np.arange(3, dtype=np.float64), device=D) * 2).realize()


def test_too_many_buffers_is_refused_clearly() -> None:
  few = WGSLRenderer({"max-storage-buffers-per-shader-stage": 3})
  a, b, c = (Tensor.empty(8, device=D) for _ in range(3))
  _source(a + b, few)  # 3 buffers: fine
  with pytest.raises(WGSLRenderError, match="maxStorageBuffersPerShaderStage"):
    _source(a + b + c, few)


def test_too_big_buffer_and_launch_are_refused_clearly() -> None:
  alloc = WebGPUAllocator()
  with pytest.raises(RuntimeError, match="maxStorageBufferBindingSize"):
    alloc.alloc(alloc.max_size + 4)
  assert alloc.alloc(5).size == 8, "sizes are padded to whole words"
  src = _source(Tensor.empty(4, device=D) + 1)
  name = src.split("fn ")[1].split("(")[0]
  prg = WebGPUProgram(name, WGSLCompiler().compile(src))
  too_many = int(gpu.device().limits["max-compute-workgroups-per-dimension"]) + 1
  with pytest.raises(RuntimeError, match="workgroups"):
    prg(alloc.alloc(16), alloc.alloc(16), global_size=(too_many,))


def test_symbolic_sizes_come_in_a_uniform() -> None:
  from tg import Variable
  v = Variable("n", 1, 8)
  x = np.arange(24, dtype=np.float32).reshape(8, 3)
  t = Tensor(x, device=D).realize()
  assert "var<uniform> tgvars" in _source(t.shrink(((0, v.bind(4)), None)).sum(0), opts=[])  # a symbolic loop bound
  for n in (8, 2, 5):
    np.testing.assert_array_equal(t.shrink(((0, v.bind(n)), None)).sum(0).numpy(), x[:n].sum(0))


def _availability_in_subprocess(prelude: str, env: dict[str, str]) -> str:
  code = f"{prelude}\nfrom tg import Device\nprint(Device.availability('WEBGPU'))"
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env}, check=False)
  return out.stdout


def test_missing_vulkan_driver_is_explained() -> None:
  out = _availability_in_subprocess("", {"VK_ICD_FILENAMES": "/nonexistent/icd.json", "VK_DRIVER_FILES": "/nonexistent/icd.json"})
  assert "apt-get install mesa-vulkan-drivers libvulkan1" in out


def test_missing_wgpu_is_explained() -> None:
  out = _availability_in_subprocess("import sys; sys.modules['wgpu'] = None", {})
  assert "wgpu is not importable" in out and "pip install wgpu" in out


def test_software_adapter_is_used_only_when_asked_for() -> None:
  from tg_webgpu.plugin import tg_device
  spec = tg_device(D)
  assert spec is not None and (spec.priority < 0) == gpu.is_software()
