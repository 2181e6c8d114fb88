"""tg-llvm's own checks: the device registers, its IR is what it should be, compiled kernels are cached,
big kernels split across threads without changing a number, float16 works, TinyJit replays through one call."""
from __future__ import annotations

import re

import llvmlite.binding as llvm
import numpy as np
import pytest

import tg.renderer.cpu
from tg import Device, Tensor, TinyJit
from tg.codegen.kernel import Kernel
from tg.dtype import dtypes
from tg.engine.schedule import create_schedule
from tg.plugins import installed_devices
from tg.shape.symbolic import Variable
from tg_llvm.compiler import LLVMCompileError, LLVMCompiler
from tg_llvm.graph import LLVMGraph
from tg_llvm.objfile import undefined_symbols
from tg_llvm.renderer import LLVMRenderer


def _source(t: Tensor) -> str:
  si = create_schedule([t.lazydata])[-1]
  return Kernel(si.ast, LLVMRenderer()).to_program().src


def _optimized(src: str) -> str:
  c = LLVMCompiler()
  mod = llvm.parse_assembly(src)
  mod.triple, mod.data_layout = c.tm.triple, str(c.tm.target_data)
  c.optimize(mod)
  return str(mod)


def test_llvm_registers_through_its_entry_point() -> None:
  devs = {d.name: d for d in installed_devices()}
  assert devs["LLVM"].package == "tg-llvm" and devs["LLVM"].module == "tg_llvm.plugin"
  assert isinstance(Device["LLVM"].renderer, LLVMRenderer)
  assert Device.availability("LLVM") == ""


def test_elementwise_ir_is_one_loop_over_noalias_buffers() -> None:
  a, b = Tensor.empty(4, 8, device="LLVM"), Tensor.empty(4, 8, device="LLVM")
  src = _source((a * b + 1).relu())
  assert src.count("define void @") == 1 and "ptr noalias %data0" in src and "ptr noalias %data2" in src
  assert src.count("icmp slt i32") == 2, "a loop per output axis"
  assert "fmul float" in src and "fadd float" in src
  llvm.parse_assembly(src).verify()  # it is valid IR


def test_reduce_ir_accumulates_in_an_alloca() -> None:
  src = _source(Tensor.empty(4, 8, device="LLVM").sum(axis=1))
  assert src.count("alloca float") == 1 and src.count("icmp slt i32") == 2
  assert "alloca" not in _optimized(src), "mem2reg turns accumulators and counters into registers"


def test_index_math_is_marked_as_not_wrapping() -> None:
  src = _source(Tensor.empty(6, 10, device="LLVM").permute(1, 0).contiguous() + 1)
  assert "mul nuw nsw i32" in src, "bounded index math carries nsw/nuw, so LLVM can widen it and vectorize"
  src = _source(Tensor.empty(35, dtype=dtypes.int32, device="LLVM") + Tensor.empty(35, dtype=dtypes.int32, device="LLVM"))
  assert re.search(r"= add i32 %t\d+, %t\d+", src), "never on loaded values: they may wrap, as the PYTHON reference lets them"


def test_padded_loads_are_gated() -> None:
  src = _source(Tensor.empty(4, 4, device="LLVM").pad(((1, 1), (1, 1))) + 1)
  assert "phi float" in src, "a masked index may be out of bounds: the load sits behind a branch"
  x = np.arange(16, dtype=np.float32).reshape(4, 4)
  np.testing.assert_array_equal((Tensor(x, device="LLVM").pad(((1, 1), (1, 1))) + 1).numpy(), np.pad(x, 1) + 1)


def test_big_loops_are_vectorized_for_the_host() -> None:
  src = _source(Tensor.empty(4096, device="LLVM") * 3.0)
  features = llvm.get_host_cpu_features()
  width = 16 if features.get("avx512f") else 8 if features.get("avx2") else 4
  assert f"<{width} x float>" in _optimized(src), f"expected {width}-wide float vectors on {llvm.get_host_cpu_name()}"


def test_transcendentals_need_no_libm() -> None:
  x = Tensor.empty(64, device="LLVM")
  src = _source(x.exp() + x.log() + x.sin() + x.sqrt())
  calls = re.findall(r"call [^@]*@([\w.]+)", _optimized(src))
  assert calls and all(c.startswith("llvm.") for c in calls), f"only LLVM intrinsics (sqrt, saturating casts), not {calls}"
  assert undefined_symbols(LLVMCompiler().compile(src)) in ([], ["_GLOBAL_OFFSET_TABLE_"])


def test_compile_error_shows_source() -> None:
  with pytest.raises(LLVMCompileError, match="source"):
    LLVMCompiler().compile("define void @broken( {")


def test_compiled_objects_are_cached_on_disk(monkeypatch: pytest.MonkeyPatch) -> None:
  src = _source(Tensor.empty(5, 7, device="LLVM") * 11.0)
  compiler = LLVMCompiler()
  assert compiler.cachekey is not None and llvm.get_host_cpu_name() in compiler.cachekey, "the key names the CPU it compiled for"
  first = compiler.compile_cached(src)

  def no_compile(src: str) -> bytes:
    raise AssertionError("compiled again instead of reading the cache")
  monkeypatch.setattr(compiler, "compile", no_compile)
  assert compiler.compile_cached(src) == first


def test_split_across_threads_gives_the_same_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((128, 256)).astype(np.float32), rng.standard_normal((256, 96)).astype(np.float32)
  ta, tb = Tensor(a, device="LLVM"), Tensor(b, device="LLVM")
  src = _source(ta @ tb)
  assert "%tg_start" in src and re.search(r"_tg_outer\"? = constant i32 \d+", src), "a kernel this big runs its outer loop in slices"
  split = (ta @ tb).numpy()
  monkeypatch.setattr(tg.renderer.cpu.CPU_THREAD_MIN_WORK, "value", 1 << 62)
  assert "tg_start" not in _source(ta @ tb)
  whole = (Tensor(a, device="LLVM") @ Tensor(b, device="LLVM")).numpy()
  np.testing.assert_array_equal(split, whole)  # each output is computed the same way, whichever thread computes it
  np.testing.assert_allclose(split, a @ b, rtol=1e-4, atol=1e-4)
  assert "tg_start" not in _source(Tensor(np.ones(8, np.float32), device="LLVM") * 2), "a small kernel stays on one thread"


def test_float16() -> None:
  x = np.array([1.5, -2.25, 3.0, 100.0, 0.1, 6e-8], dtype=np.float32)
  xh = x.astype(np.float16)
  h = Tensor(x, device="LLVM").cast(dtypes.float16)
  np.testing.assert_array_equal((h * 2).numpy(), xh * 2)
  np.testing.assert_array_equal((h + h * h).numpy(), xh + xh * xh)  # each op rounds to half
  np.testing.assert_allclose(h.sum().numpy(), xh.sum(dtype=np.float32), rtol=1e-3)
  big = Tensor(np.array([65504.0], np.float32), device="LLVM").cast(dtypes.float16)
  assert np.isinf((big * 2).numpy()).all(), "overflows to inf in half, not computed in float"
  d = Tensor(np.array([1 + 2 ** -11 + 2 ** -40, 2 ** -25 + 2 ** -60], np.float64), device="LLVM")
  np.testing.assert_array_equal(d.cast(dtypes.float16).numpy(), np.array([1 + 2 ** -10, 2 ** -24], np.float16))  # rounded once


def test_bfloat16_is_emulated() -> None:
  b = Tensor(np.array([1.5, -2.25, 3.0], np.float32), device="LLVM").cast(dtypes.bfloat16)
  np.testing.assert_array_equal((b + 1).cast(dtypes.float32).numpy(), [2.5, -1.25, 4.0])


def test_jit_replays_split_kernels_threaded_and_small_ones_in_one_llvm_call() -> None:
  rng = np.random.default_rng(1)
  w = Tensor(rng.standard_normal((256, 96)).astype(np.float32), device="LLVM").realize()

  @TinyJit
  def f(x: Tensor) -> Tensor:  # a matmul split across threads, then a small kernel
    return ((x @ w).relu().sum(0) * 2).realize()
  @TinyJit
  def g(x: Tensor) -> Tensor:  # split kernels only, one after another
    return ((x @ w).relu() @ w.T + 1).realize()
  for _ in range(4):
    x = rng.standard_normal((128, 256)).astype(np.float32)
    np.testing.assert_allclose(f(Tensor(x, device="LLVM")).numpy(), np.maximum(x @ w.numpy(), 0).sum(0) * 2, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(g(Tensor(x, device="LLVM")).numpy(), np.maximum(x @ w.numpy(), 0) @ w.numpy().T + 1, rtol=1e-4, atol=1e-3)
  assert isinstance(f.graph, LLVMGraph) and {kind for kind, _ in f.graph.steps} == {"batch", "kernel"}
  assert isinstance(g.graph, LLVMGraph) and [kind for kind, _ in g.graph.steps] == ["kernel", "kernel"]


def test_jit_graph_with_symbolic_sizes() -> None:
  v = Variable("n", 1, 16)

  @TinyJit
  def f(x: Tensor) -> Tensor:
    return (x * 2 + 1).realize().sum(1).realize()  # two kernels: a lone one is not graphed, as in tinygrad
  for n in (3, 5, 2, 9, 16):
    x = np.arange(4 * n, dtype=np.float32).reshape(4, n)
    np.testing.assert_allclose(f(Tensor(x, device="LLVM").reshape(4, v.bind(n))).numpy(), (x * 2 + 1).sum(1), rtol=1e-6)
  assert isinstance(f.graph, LLVMGraph)


def test_kernels_prefer_the_targets_vector_width_on_x86() -> None:
  """LLVM tunes Intel AVX-512 CPUs (rocketlake, icelake, sapphirerapids) to prefer 256-bit vectors: the kernels say
  which width they were made for, and LLVM's own loop vectorizer takes it (test_big_loops_are_vectorized_for_the_host)."""
  from tg_llvm.renderer import attributes
  assert '"prefer-vector-width"="512"' in attributes(64, "x86_64")
  assert '"prefer-vector-width"="256"' in attributes(32, "AMD64")
  assert "prefer-vector-width" not in attributes(16, "aarch64") and "prefer-vector-width" not in attributes(0, "x86_64")
