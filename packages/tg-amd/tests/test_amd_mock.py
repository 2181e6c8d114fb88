"""The CPU mock of AMD (tg_amd_mock.h + MockDriver) on hand-written HIP kernels and on tensor-core kernels: workgroup
and work-item indices, LDS with barriers, HIP's launch limits, the packed argument buffer of a launch and of graph
nodes, and WMMA's numbers against numpy. These drive the mock directly: no GPU and no AMD_MOCK needed."""
from __future__ import annotations

import numpy as np
import pytest
from amd_helpers import DEV, download, load, program, upload

from tg import Tensor
from tg.codegen.kernel import Opt, OptOps
from tg.dtype import dtypes
from tg.renderer import Program
from tg_amd.driver import HIPError, ffi
from tg_amd.mock.driver import MockDriver
from tg_amd.program import launch_dims, pack_args

KERNEL = 'extern "C" __attribute__((global)) void __attribute__((amdgpu_flat_work_group_size(1, {}))) {}'
BARRIER = ('__builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup"); __builtin_amdgcn_s_barrier(); '
           '__builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");')
# a workgroup tree reduction in LDS: every step halves the live work-items, with a barrier between steps
BLOCK_SUM = '#include "tg_amd.h"\n' + KERNEL.format(256, "block_sum") + """(float* __restrict__ out, const float* __restrict__ x, const int n) {
  static __attribute__((shared)) float part[256];
  int t = __builtin_amdgcn_workitem_id_x(), i = __builtin_amdgcn_workgroup_id_x() * 256 + t;
  part[t] = i < n ? x[i] : 0.0f;
  BARRIER
  for (int step = 128; step > 0; step /= 2) {
    if (t < step) part[t] += part[t + step];
    BARRIER
  }
  if (t == 0) out[__builtin_amdgcn_workgroup_id_x()] = part[0];
}
""".replace("BARRIER", BARRIER)
# every work-item writes where it is: (workgroup, work-item) of a 3d grid of 3d workgroups of 4 x 3 x 2
WHERE = '#include "tg_amd.h"\n' + KERNEL.format(24, "where") + """(int* __restrict__ out, const int gx, const int gy) {
  int g = (__builtin_amdgcn_workgroup_id_z() * gy + __builtin_amdgcn_workgroup_id_y()) * gx + __builtin_amdgcn_workgroup_id_x();
  int t = (__builtin_amdgcn_workitem_id_z() * 3 + __builtin_amdgcn_workitem_id_y()) * 4 + __builtin_amdgcn_workitem_id_x();
  out[g * 24 + t] = g * 1000 + t;
}
"""


@pytest.fixture(scope="module")
def driver() -> MockDriver:
  return MockDriver()


def test_lds_and_barriers(driver: MockDriver) -> None:
  x = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
  groups = -(-x.size // 256)
  out, xs = upload(driver, np.zeros(groups, np.float32)), upload(driver, x)
  load(driver, BLOCK_SUM, "block_sum")(out, xs, global_size=(groups,), local_size=(256,), vals=(x.size,))
  want = np.pad(x, (0, groups * 256 - x.size)).reshape(groups, 256).sum(1)
  np.testing.assert_allclose(download(driver, out, np.zeros(groups, np.float32)), want, rtol=1e-5)


def test_workgroup_and_work_item_indices(driver: MockDriver) -> None:
  grid = (3, 2, 2)
  n = int(np.prod(grid)) * 24
  out = upload(driver, np.full(n, -1, np.int32))
  load(driver, WHERE, "where")(out, global_size=grid, local_size=(4, 3, 2), vals=grid[:2])
  want = np.array([g * 1000 + t for g in range(int(np.prod(grid))) for t in range(24)], np.int32)
  np.testing.assert_array_equal(download(driver, out, np.zeros(n, np.int32)), want)


@pytest.mark.parametrize("grid,block,why", [
  ((1, 70000, 1), (1, 1, 1), r"hipErrorInvalidValue .*grid \(1, 70000, 1\) is more than the device's \(2147483647, 65535, 65535\)"),
  ((0, 1, 1), (1, 1, 1), "hipErrorInvalidValue .*is 0"),
  ((1, 1, 1), (1, 1, 1025), r"hipErrorInvalidValue .*block \(1, 1, 1025\) is more than the device's \(1024, 1024, 1024\)"),
  ((1, 1, 1), (32, 32, 2), "hipErrorInvalidValue .*2048 threads, more than the device's 1024"),
  ((1, 1, 1), (25, 1, 1), "hipErrorLaunchOutOfResources .*25 threads, more than the 24 the kernel was compiled for"),
])
def test_launch_limits_are_hips(driver: MockDriver, grid: tuple[int, ...], block: tuple[int, ...], why: str) -> None:
  prg = load(driver, WHERE, "where")
  with pytest.raises(HIPError, match=why):
    prg(driver.alloc(4), global_size=grid, local_size=block, vals=(1, 1))


def test_argument_buffer_is_the_kernel_argument_segment() -> None:
  extra, _alive = pack_args([0x1000, 0xDEADBEEF00], [7, -3])
  assert [int(ffi.cast("uintptr_t", extra[i])) for i in (0, 2, 4)] == [1, 2, 3], "BUFFER_POINTER, BUFFER_SIZE, END"
  assert ffi.cast("size_t*", extra[3])[0] == 24
  assert bytes(ffi.buffer(extra[1], 24)) == (0x1000).to_bytes(8, "little") + (0xDEADBEEF00).to_bytes(8, "little") + b"\x07\0\0\0\xfd\xff\xff\xff"


def test_argument_count_mismatch_is_refused(driver: MockDriver) -> None:
  prg = load(driver, WHERE, "where")
  with pytest.raises(HIPError, match="argument buffer has 12 bytes"):
    prg(driver.alloc(4), global_size=(1,), local_size=(4, 3, 2), vals=(1,))


def test_kernel_node_params_layout() -> None:
  # hip_runtime_api.h's hipKernelNodeParams on 64-bit: dim3 blockDim, void** extra, void* func, dim3 gridDim, void** kernelParams, uint
  assert ffi.sizeof("hipKernelNodeParams") == 64
  fields = ("blockDim", "extra", "func", "gridDim", "kernelParams", "sharedMemBytes")
  assert [ffi.offsetof("hipKernelNodeParams", f) for f in fields] == [0, 16, 24, 32, 48, 56]


def test_launch_dims() -> None:
  assert launch_dims((5,), ()) == ((5, 1, 1), (1, 1, 1))
  with pytest.raises(ValueError, match="2\\^32"):
    launch_dims((2**31 - 1,), (4,))


def test_a_graph_node_copies_its_arguments() -> None:
  driver = MockDriver()
  src = '#include "tg_amd.h"\n' + KERNEL.format(1, "k{}") + "(float* a) {{ a[0] += {}.0f; }}"
  k1, k2 = (load(driver, src.format(i, i), f"k{i}") for i in (1, 2))
  buf = upload(driver, np.zeros(1, np.float32))

  def node(fn: object) -> object:
    extra, _ = pack_args([buf], [])  # freed right after: the node holds a copy
    return ffi.new("hipKernelNodeParams*", {"blockDim": (1, 1, 1), "gridDim": (1, 1, 1), "func": ffi.cast("void*", fn), "extra": extra})
  graph = driver.graph_create()
  n1 = driver.graph_add_kernel(graph, [], node(k1.fn))
  driver.graph_add_kernel(graph, [n1], node(k2.fn))
  ex = driver.graph_instantiate(graph)
  driver.graph_launch(ex)
  driver.graph_launch(ex)
  assert download(driver, buf, np.zeros(1, np.float32))[0] == 6.0
  with pytest.raises(HIPError, match="function"):
    driver.graph_set_kernel(ex, n1, node(k2.fn))


def _run_program(driver: MockDriver, p: Program, inputs: list[np.ndarray], out: np.ndarray) -> np.ndarray:
  prg = load(driver, p.src, p.name)
  bufs = [upload(driver, out)] + [upload(driver, x) for x in inputs]
  prg(*bufs, global_size=tuple(int(s) for s in p.global_size), local_size=tuple(int(s) for s in p.local_size))
  return download(driver, bufs[0], out)


@pytest.mark.parametrize("mkn,upcast", [((16, 16, 16), False), ((32, 48, 32), False), ((64, 32, 16), True)])
def test_wmma_matmul_matches_numpy(driver: MockDriver, mkn: tuple[int, int, int], upcast: bool) -> None:
  """A half matmul summed in float by v_wmma_f32_16x16x16_f16 tiles (each wave exchanging its fragments by the
  RDNA3 layout), rounded to half at the end: it matches numpy's exact product rounded to half."""
  m, k, n = mkn
  rng = np.random.default_rng(1)
  a, b = rng.standard_normal((m, k)).astype(np.float16), rng.standard_normal((k, n)).astype(np.float16)
  t = Tensor.empty(m, k, device=DEV, dtype=dtypes.float16) @ Tensor.empty(k, n, device=DEV, dtype=dtypes.float16)
  opts = (Opt(OptOps.TC, None, 0),) + ((Opt(OptOps.UPCAST, 0, 2),) if upcast else ())
  p = program(t, opts)
  assert "__builtin_amdgcn_wmma_f32_16x16x16_f16_w32" in p.src
  got = _run_program(driver, p, [a, b], np.zeros((m, n), np.float16)).astype(np.float64)
  want = a.astype(np.float64) @ b.astype(np.float64)
  np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3)
  assert np.mean(got == want.astype(np.float16)) > 0.95, "rounded once to half (a double rounding differs rarely)"


def test_wmma_lanes_that_disagree_give_nan(driver: MockDriver) -> None:
  """The hardware reads A and B from both halves of the wave; the mock turns a disagreement into nan."""
  src = '#include "tg_amd.h"\n' + KERNEL.format(32, "wmma") + """(float* __restrict__ out) {
  int l = __builtin_amdgcn_workitem_id_x();
  half16 a, b;
  for (int i = 0; i < 16; i++) { a[i] = (half)(l % 16 == 3 && l >= 16 ? 2.0f : 1.0f); b[i] = (half)1.0f; }
  float8 d = __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(a, b, (float8){0, 0, 0, 0, 0, 0, 0, 0});
  for (int i = 0; i < 8; i++) out[(2 * i + l / 16) * 16 + l % 16] = d[i];
}
"""
  out = upload(driver, np.zeros((16, 16), np.float32))
  load(driver, src, "wmma")(out, global_size=(1,), local_size=(32,))
  got = download(driver, out, np.zeros((16, 16), np.float32))
  assert np.isnan(got[3]).all() and (np.delete(got, 3, axis=0) == 16).all()


def test_half_and_bfloat16_round_to_nearest_even(driver: MockDriver) -> None:
  x = np.concatenate([np.array([0.0, -0.0, 65504.0, 65520.0, 1e9, 6e-8, 2.9e-8, np.inf, -np.inf], np.float32),
                      np.random.default_rng(0).standard_normal(500).astype(np.float32) * 100]).astype(np.float32)
  with np.errstate(over="ignore"):
    want_h = x.astype(np.float16)
  h = _run_program(driver, program(Tensor.empty(x.size, device=DEV).cast(dtypes.float16)), [x], np.zeros(x.size, np.float16))
  np.testing.assert_array_equal(h.view(np.uint16), want_h.view(np.uint16))
  bits = x.view(np.uint32).astype(np.uint64)
  want_bf = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
  bf = _run_program(driver, program(Tensor.empty(x.size, device=DEV).cast(dtypes.bfloat16)), [x], np.zeros(x.size, np.uint16))
  np.testing.assert_array_equal(bf, want_bf)
