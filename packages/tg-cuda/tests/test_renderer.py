"""Golden kernels: the CUDA source of fixed ASTs (tests/golden/*.cu), so a codegen change shows up as a diff in
review. UPDATE_GOLDEN=1 rewrites the files. Each golden kernel must also compile with NVRTC (and ptxas)."""
from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from tg import Tensor, Variable
from tg.codegen.kernel import Kernel, Opt, OptOps
from tg.dtype import dtypes
from tg.engine.schedule import create_schedule
from tg.renderer import Program
from tg_cuda.compiler import CUDACompiler
from tg_cuda.renderer import CUDARenderer

GOLDEN = os.path.join(os.path.dirname(__file__), "golden")
# the ASTs are built on PYTHON: an AST doesn't depend on the device, and these tests need no CUDA driver or mock
DEV = "PYTHON"


def _program(t: Tensor, opts: tuple[Opt, ...] = ()) -> Program:
  si = create_schedule([t.lazydata])[-1]
  return Kernel(si.ast, CUDARenderer()).apply_opts(list(opts)).to_program()


def _add() -> Program:
  return _program(Tensor.empty(4, 8, device=DEV) + Tensor.empty(4, 8, device=DEV))


def _sum_rows() -> Program:
  return _program(Tensor.empty(6, 16, device=DEV).sum(axis=1))


def _sum_rows_grouped() -> Program:  # 16 threads per row, combined through shared memory and a barrier
  return _program(Tensor.empty(6, 256, device=DEV).sum(axis=1), (Opt(OptOps.GROUP, 1, 16),))


def _symbolic() -> Program:
  n = Variable("n", 1, 64).bind(5)
  return _program(Tensor.empty(3, 5, device=DEV).reshape(3, n) * 2)


def _half_exp() -> Program:
  return _program(Tensor.empty(8, device=DEV, dtype=dtypes.float16).exp2())


def _bfloat16_max() -> Program:
  return _program(Tensor.empty(8, device=DEV, dtype=dtypes.bfloat16).maximum(Tensor.empty(8, device=DEV, dtype=dtypes.bfloat16)))


def _matmul_float4() -> Program:  # 4 x 4 outputs per thread: B's rows and C's are float4 loads and stores
  return _program(Tensor.empty(16, 32, device=DEV) @ Tensor.empty(32, 16, device=DEV), (Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 4)))


def _matmul_tensor_core() -> Program:  # mma.sync m16n8k16: a warp per 16 x 8 tile, two K steps
  return _program(Tensor.empty(32, 32, device=DEV, dtype=dtypes.float16) @ Tensor.empty(32, 16, device=DEV, dtype=dtypes.float16),
                  (Opt(OptOps.TC, None, 0),))


KERNELS: dict[str, Callable[[], Program]] = {"add": _add, "sum_rows": _sum_rows, "sum_rows_grouped": _sum_rows_grouped,
                                             "symbolic": _symbolic, "half_exp": _half_exp, "bfloat16_max": _bfloat16_max,
                                             "matmul_float4": _matmul_float4, "matmul_tensor_core": _matmul_tensor_core}


@pytest.mark.parametrize("name", list(KERNELS))
def test_golden_source(name: str) -> None:
  src = KERNELS[name]().src + "\n"
  path = os.path.join(GOLDEN, f"{name}.cu")
  if os.getenv("UPDATE_GOLDEN"):
    with open(path, "w") as f:
      f.write(src)
  with open(path) as f:
    assert src == f.read(), f"the CUDA source of {name} changed: check the diff, then rerun with UPDATE_GOLDEN=1"


@pytest.mark.parametrize("name", list(KERNELS))
def test_golden_kernel_compiles(name: str) -> None:
  p = KERNELS[name]()
  CUDACompiler("sm_80").compile(p.src)


def test_launch_bounds_is_the_block_size() -> None:
  p = _sum_rows_grouped()
  assert p.local_size == (16,) and "__launch_bounds__(16)" in p.src
  assert "__launch_bounds__(1) " in _add().src


def test_symbolic_size_is_an_int_argument() -> None:
  p = _symbolic()
  assert [v.expr for v in p.vars] == ["n"] and "const int n)" in p.src


def test_only_read_buffers_are_const() -> None:
  src = _add().src
  assert "float* __restrict__ data0" in src and "const float* __restrict__ data0" not in src
  assert "const float* __restrict__ data1" in src and "const float* __restrict__ data2" in src


def test_float4_loads_and_stores() -> None:
  src = _matmul_float4().src
  assert "float4 val" in src and "*((float4*)(data2+" in src, "B's row is one float4 load"
  assert "*((float4*)(data0+" in src and "make_float4(" in src, "C's rows are float4 stores"


def test_tensor_core_kernel_is_mma_sync_in_ptx() -> None:
  from tg_cuda.bundle import CUDABinary
  p = _matmul_tensor_core()
  assert p.local_size == (32,) and '#include "tg_mma.h"' in p.src and "__tg_mma_m16n8k16_f16_f32(" in p.src
  ptx = CUDABinary.unpack(CUDACompiler("sm_80").compile(p.src)).ptx
  assert b"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx


def test_tensor_cores_need_sm80() -> None:
  assert CUDARenderer("sm_80").tensor_cores and CUDARenderer("sm_90a").tensor_cores
  assert not CUDARenderer("sm_75").tensor_cores
