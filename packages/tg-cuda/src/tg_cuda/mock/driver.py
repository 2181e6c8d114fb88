"""MockDriver: the Driver of CUDA_MOCK=1. Device memory is host memory (a device pointer is its address); a
kernel is the CPU build of its CUDA source (see tg_cuda_mock.h), launched with the very kernelParams array a GPU
launch would get; a graph is its list of kernel nodes, run in order.

Like the real driver, it checks launch dims against the hardware limits and copies a graph node's argument
values when the node is added or updated, so bugs there show up here too.
"""
from __future__ import annotations

import time
from typing import Any

from tg.runtime.gpu_mock import INVALID_VALUE, OUT_OF_RESOURCES, MockLaunchError
from tg.runtime.gpu_mock import MockKernel as GPUMockKernel
from tg_cuda.bundle import CUDABinary
from tg_cuda.driver import CUDAError, Driver, ffi

_ERRORS = {INVALID_VALUE: (1, "CUDA_ERROR_INVALID_VALUE"), OUT_OF_RESOURCES: (701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES")}


class MockKernel:
  """A kernel's CPU build (tg.runtime.gpu_mock), with the driver's errors."""

  def __init__(self, name: str, so: bytes) -> None:
    self.kernel = GPUMockKernel(name, so)
    self.name, self.param_sizes = name, self.kernel.param_sizes

  def launch(self, params: Any, grid: tuple[int, ...], block: tuple[int, ...]) -> None:
    try:
      self.kernel.launch(int(ffi.cast("uintptr_t", params)), grid, block)
    except MockLaunchError as e:
      code, what = _ERRORS.get(e.code, (e.code, "?"))
      raise CUDAError(f"cuLaunchKernel of {self.name} grid={grid} block={block} failed: {what} ({code}): {e}") from None


class MockGraph:
  def __init__(self) -> None:
    self.nodes: list[tuple[int, tuple[int, ...], tuple[int, ...], Any]] = []  # (kernel id, grid, block, copied params)


class MockDriver(Driver):
  name = "mock: CUDA kernels built for and run on this CPU (CUDA_MOCK=1)"

  def __init__(self, arch: str | None = None, ordinal: int = 0) -> None:
    self.arch, self.ordinal = arch or "sm_80", ordinal
    self.memory: dict[int, Any] = {}
    self.kernels: list[MockKernel] = []

  def alloc(self, size: int) -> int:
    mem = ffi.new("char[]", max(size, 1))
    ptr = int(ffi.cast("uintptr_t", mem))
    self.memory[ptr] = mem
    return ptr

  def free(self, ptr: int) -> None:
    if self.memory.pop(ptr, None) is None:
      raise CUDAError(f"cuMemFree of {ptr:#x}: not an allocation (CUDA_ERROR_INVALID_VALUE)")

  def copyin(self, ptr: int, src: memoryview) -> None:
    ffi.memmove(ffi.cast("char*", ptr), src, src.nbytes)

  def copyout(self, dest: memoryview, ptr: int) -> None:
    ffi.memmove(dest, ffi.cast("char*", ptr), dest.nbytes)

  def function(self, binary: CUDABinary, name: str) -> Any:
    if not binary.mock:
      raise CUDAError(f"kernel {name} has no CPU build: it was compiled without CUDA_MOCK=1")
    self.kernels.append(MockKernel(name, binary.mock))
    return ffi.cast("CUfunction", len(self.kernels))  # a handle as opaque as the driver's: kernel number + 1

  def _kernel(self, fn: Any) -> MockKernel:
    return self.kernels[int(ffi.cast("uintptr_t", fn)) - 1]

  def launch(self, fn: Any, grid: tuple[int, int, int], block: tuple[int, int, int], params: Any, wait: bool) -> float | None:
    st = time.perf_counter()
    self._kernel(fn).launch(params, grid, block)
    return time.perf_counter() - st if wait else None

  # ---- graphs ----
  def graph_create(self) -> Any:
    return MockGraph()

  def _node(self, p: Any) -> tuple[int, tuple[int, ...], tuple[int, ...], Any]:
    k = self._kernel(p.func)
    # the driver copies the argument values out of kernelParams: the caller may free them right after
    values = [bytes(ffi.buffer(p.kernelParams[i], n)) for i, n in enumerate(k.param_sizes)]
    copies = [ffi.new("char[]", v) for v in values]
    params = ffi.new("void*[]", [ffi.cast("void*", c) for c in copies] or [ffi.NULL])
    return (int(ffi.cast("uintptr_t", p.func)), (p.gridDimX, p.gridDimY, p.gridDimZ), (p.blockDimX, p.blockDimY, p.blockDimZ), (params, copies))

  def graph_add_kernel(self, graph: Any, deps: list[Any], node_params: Any) -> Any:
    assert all(isinstance(d, int) and d < len(graph.nodes) for d in deps), "a dependency is a node of this graph"
    graph.nodes.append(self._node(node_params))
    return len(graph.nodes) - 1

  def graph_instantiate(self, graph: Any) -> Any:
    ret = MockGraph()
    ret.nodes = list(graph.nodes)
    return ret

  def graph_set_kernel(self, graph_exec: Any, node: Any, node_params: Any) -> None:
    new = self._node(node_params)
    if new[0] != graph_exec.nodes[node][0]:
      raise CUDAError("cuGraphExecKernelNodeSetParams can't change a node's function (CUDA_ERROR_INVALID_VALUE)")
    graph_exec.nodes[node] = new

  def graph_launch(self, graph_exec: Any) -> None:
    for fn, grid, block, (params, _) in graph_exec.nodes:
      self.kernels[fn - 1].launch(params, grid, block)
