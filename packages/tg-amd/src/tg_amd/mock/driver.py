"""MockDriver: the Driver of AMD_MOCK=1. Device memory is host memory (a device pointer is its address); a kernel is
the CPU build of its HIP source (see tg_amd_mock.h), launched with the very argument buffer (`extra`) a GPU launch
would get, unpacked by the parameter sizes the build reports; a graph is its list of kernel nodes, run in order.

Like HIP, it checks launch dims against the hardware limits and copies a node's arguments when the node is added
or updated, so bugs there show up here too.
"""
from __future__ import annotations

import time
from typing import Any

from tg.runtime.gpu_mock import INVALID_VALUE, OUT_OF_RESOURCES, MockKernel, MockLaunchError
from tg_amd.bundle import AMDBinary
from tg_amd.driver import HIP_LAUNCH_PARAM_BUFFER_POINTER, HIP_LAUNCH_PARAM_BUFFER_SIZE, HIP_LAUNCH_PARAM_END, Driver, HIPError, ffi

_ERRORS = {INVALID_VALUE: "hipErrorInvalidValue", OUT_OF_RESOURCES: "hipErrorLaunchOutOfResources"}


class AMDMockKernel:
  """A kernel's CPU build (tg.runtime.gpu_mock.MockKernel), launched as hipModuleLaunchKernel is: from `extra`."""

  def __init__(self, name: str, so: bytes) -> None:
    self.name, self.kernel = name, MockKernel(name, so)

  def params(self, extra: Any) -> tuple[Any, Any]:
    """The kernel's arguments from hipModuleLaunchKernel's `extra`, copied (HIP copies them at the launch): (one pointer
    to each argument, as tg_mock_launch takes them; what keeps them alive)."""
    markers = [int(ffi.cast("uintptr_t", extra[i])) for i in (0, 2, 4)]
    if markers != [HIP_LAUNCH_PARAM_BUFFER_POINTER, HIP_LAUNCH_PARAM_BUFFER_SIZE, HIP_LAUNCH_PARAM_END]:
      raise HIPError(f"{self.name}: extra is not (BUFFER_POINTER, args, BUFFER_SIZE, &size, END) (hipErrorInvalidValue)")
    size = int(ffi.cast("size_t*", extra[3])[0])
    offsets, end = [], 0
    for n in self.kernel.param_sizes:  # each argument naturally aligned, as the kernel's argument segment lays them out
      end = -(-end // n) * n
      offsets.append(end)
      end += n
    if size != end:
      raise HIPError(f"{self.name}: the argument buffer has {size} bytes, the kernel's arguments take {end} (hipErrorInvalidValue)")
    args = ffi.new("char[]", bytes(ffi.buffer(extra[1], size)) or b"\0")
    return ffi.new("void*[]", [ffi.cast("void*", args + o) for o in offsets] or [ffi.NULL]), args

  def launch(self, params: Any, grid: tuple[int, ...], block: tuple[int, ...]) -> None:
    try:
      self.kernel.launch(int(ffi.cast("uintptr_t", params)), grid, block)
    except MockLaunchError as e:
      raise HIPError(f"hipModuleLaunchKernel of {self.name} grid={grid} block={block} failed: {_ERRORS.get(e.code, '?')} ({e.code}): {e}") from None


class MockGraph:
  def __init__(self) -> None:
    self.nodes: list[tuple[int, tuple[int, ...], tuple[int, ...], Any]] = []  # (kernel id, grid, block, copied params)


class MockDriver(Driver):
  name = "mock: AMD kernels built for and run on this CPU (AMD_MOCK=1)"

  def __init__(self, arch: str | None = None, ordinal: int = 0) -> None:
    self.arch, self.ordinal = arch or "gfx1100", ordinal
    self.memory: dict[int, Any] = {}
    self.kernels: list[AMDMockKernel] = []

  def alloc(self, size: int) -> int:
    # 256-byte aligned, as hipMalloc's: float4 accesses at multiples of 4 elements are aligned
    mem = ffi.new("char[]", max(size, 1) + 255)
    ptr = -(-int(ffi.cast("uintptr_t", mem)) // 256) * 256
    self.memory[ptr] = mem
    return ptr

  def free(self, ptr: int) -> None:
    if self.memory.pop(ptr, None) is None:
      raise HIPError(f"hipFree of {ptr:#x}: not an allocation (hipErrorInvalidValue)")

  def copyin(self, ptr: int, src: memoryview) -> None:
    ffi.memmove(ffi.cast("char*", ptr), src, src.nbytes)

  def copyout(self, dest: memoryview, ptr: int) -> None:
    ffi.memmove(dest, ffi.cast("char*", ptr), dest.nbytes)

  def function(self, binary: AMDBinary, name: str) -> Any:
    if not binary.mock:
      raise HIPError(f"kernel {name} has no CPU build: it was compiled without AMD_MOCK=1")
    if binary.code_object[:4] != b"\x7fELF":
      raise HIPError(f"kernel {name} has no code object (hipErrorInvalidImage)")
    self.kernels.append(AMDMockKernel(name, binary.mock))
    return ffi.cast("hipFunction_t", len(self.kernels))  # a handle as opaque as HIP's: kernel number + 1

  def _kernel(self, fn: Any) -> AMDMockKernel:
    return self.kernels[int(ffi.cast("uintptr_t", fn)) - 1]

  def launch(self, fn: Any, grid: tuple[int, int, int], block: tuple[int, int, int], extra: Any, wait: bool) -> float | None:
    st = time.perf_counter()
    k = self._kernel(fn)
    params, _alive = k.params(extra)
    k.launch(params, grid, block)
    return time.perf_counter() - st if wait else None

  # ---- graphs ----
  def graph_create(self) -> Any:
    return MockGraph()

  def _node(self, p: Any) -> tuple[int, tuple[int, ...], tuple[int, ...], Any]:
    if p.kernelParams != ffi.NULL:
      raise HIPError("a kernel node's arguments are passed in extra here, not kernelParams")
    params = self._kernel(p.func).params(p.extra)  # HIP copies the arguments: the caller may free them right after
    return (int(ffi.cast("uintptr_t", p.func)), (p.gridDim.x, p.gridDim.y, p.gridDim.z), (p.blockDim.x, p.blockDim.y, p.blockDim.z), params)

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
      raise HIPError("hipGraphExecKernelNodeSetParams can't change a node's function (hipErrorInvalidValue)")
    graph_exec.nodes[node] = new

  def graph_launch(self, graph_exec: Any) -> None:
    for fn, grid, block, (params, _) in graph_exec.nodes:
      self.kernels[fn - 1].launch(params, grid, block)
