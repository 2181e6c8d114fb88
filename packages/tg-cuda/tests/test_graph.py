"""Kernel arguments and CUDA graphs: the kernelParams array and the graph node struct are what the driver API
expects, and a TinyJit replay through a (mock) CUDA graph updates the nodes whose arguments change."""
from __future__ import annotations

import numpy as np
import pytest

from tg_cuda.driver import CUDAError, ffi
from tg_cuda.mock.driver import MockDriver
from tg_cuda.program import launch_dims, pack_params


def test_kernel_params_point_at_each_argument() -> None:
  params, _alive = pack_params([0x1000, 0xDEADBEEF00], [7, -3])
  assert ffi.cast("unsigned long long*", params[0])[0] == 0x1000
  assert ffi.cast("unsigned long long*", params[1])[0] == 0xDEADBEEF00
  assert ffi.cast("int*", params[2])[0] == 7 and ffi.cast("int*", params[3])[0] == -3


def test_kernel_node_params_has_the_v2_layout() -> None:
  # cuda.h's CUDA_KERNEL_NODE_PARAMS_v2 on 64-bit: func, 7 uints, then pointers from offset 40
  assert ffi.sizeof("CUDA_KERNEL_NODE_PARAMS") == 72
  assert [ffi.offsetof("CUDA_KERNEL_NODE_PARAMS", f) for f in ("func", "gridDimX", "sharedMemBytes", "kernelParams", "extra", "kern", "ctx")] == \
         [0, 8, 32, 40, 48, 56, 64]


def test_launch_dims_fill_missing_dims_with_one() -> None:
  assert launch_dims((5,), ()) == ((5, 1, 1), (1, 1, 1))
  assert launch_dims((2, 3, 4), (8, 2)) == ((2, 3, 4), (8, 2, 1))
  with pytest.raises(ValueError, match="3 dims"):
    launch_dims((1, 2, 3, 4), ())


@pytest.fixture
def mock_cuda(monkeypatch: pytest.MonkeyPatch) -> str:
  """The CUDA device in mock mode, whatever this process's environment says."""
  from tg import Device
  from tg_cuda import device
  monkeypatch.setattr(device.CUDA_MOCK, "value", 1)
  if not isinstance(device.get_driver(), MockDriver):
    pytest.skip("CUDA is already open on a GPU in this process")
  Device["CUDA"]
  return "CUDA"


def test_jit_replays_through_a_cuda_graph(mock_cuda: str) -> None:
  from tg import Tensor, TinyJit
  from tg_cuda.graph import CUDAGraph
  rng = np.random.default_rng(0)
  w = Tensor(rng.standard_normal((8, 4)).astype(np.float32), device=mock_cuda).realize()

  @TinyJit
  def f(x: Tensor) -> Tensor:
    return ((x @ w).realize().relu() + 1).realize()  # two kernels: a lone one is not graphed, as in tinygrad
  for _ in range(4):
    x = rng.standard_normal((3, 8)).astype(np.float32)
    np.testing.assert_allclose(f(Tensor(x, device=mock_cuda)).numpy(), np.maximum(x @ w.numpy(), 0) + 1, rtol=1e-5, atol=1e-5)
  assert isinstance(f.graph, CUDAGraph)


def test_jit_graph_with_a_symbolic_size(mock_cuda: str) -> None:
  from tg import Tensor, TinyJit, Variable
  v = Variable("n", 1, 16)

  @TinyJit
  def f(x: Tensor) -> Tensor:  # kernels whose arguments (and maybe launch dims) depend on n
    return ((x * 2 + 1).realize() * 3).sum(1).realize()
  for n in (3, 5, 9, 16, 2):
    x = np.arange(2 * n, dtype=np.float32).reshape(2, n)
    out = f(Tensor(x, device=mock_cuda).reshape(2, v.bind(n)))
    np.testing.assert_allclose(out.numpy(), ((x * 2 + 1) * 3).sum(1))
  assert f.graph is not None and f.graph.updated == list(range(len(f.kernels)))


def test_a_graph_node_keeps_its_function() -> None:
  from tg_cuda.compiler import CUDACompiler
  from tg_cuda.program import CUDAProgram
  driver = MockDriver()
  src = 'extern "C" __global__ void __launch_bounds__(1) k{}(float* a) {{ a[0] += {}.0f; }}'
  k1, k2 = (CUDAProgram(driver, f"k{i}", CUDACompiler("sm_80", mock=True).compile_cached(src.format(i, i))) for i in (1, 2))
  buf = driver.alloc(4)
  driver.copyin(buf, memoryview(np.zeros(1, np.float32)).cast("B"))

  def node(fn: object) -> tuple[object, object]:  # the struct, and the arrays it points to (alive while it is used)
    params, alive = pack_params([buf], [])
    return ffi.new("CUDA_KERNEL_NODE_PARAMS*", {"func": fn, "gridDimX": 1, "gridDimY": 1, "gridDimZ": 1, "blockDimX": 1, "blockDimY": 1,
                                                "blockDimZ": 1, "kernelParams": params}), (params, alive)
  graph = driver.graph_create()
  p1, p2 = node(k1.fn), node(k2.fn)
  n1 = driver.graph_add_kernel(graph, [], p1[0])
  driver.graph_add_kernel(graph, [n1], p2[0])
  del p1, p2  # freed once added: the nodes hold copies of the parameters
  ex = driver.graph_instantiate(graph)
  driver.graph_launch(ex)
  driver.graph_launch(ex)
  out = np.zeros(1, np.float32)
  driver.copyout(memoryview(out).cast("B"), buf)
  assert out[0] == 6.0
  with pytest.raises(CUDAError, match="function"):
    driver.graph_set_kernel(ex, n1, node(k2.fn)[0])
