"""The HIP runtime (libamdhip64.so, from ROCm) through cffi, and `Driver`: the few operations tg needs from it.
`HIPDriver` does them on an AMD GPU; `tg_amd.mock.driver.MockDriver` does them on the CPU.

Everything above a Driver (allocator, program, graph) is shared by both, so mock mode runs the same argument
packing and graph bookkeeping a GPU would get. Kernel arguments travel as one buffer laid out as the kernel's
argument segment (hipModuleLaunchKernel's `extra`: HIP_LAUNCH_PARAM_BUFFER_POINTER / _SIZE / _END), which every
HIP version accepts, for launches and graph kernel nodes alike.
"""
from __future__ import annotations

import functools
import re
from typing import Any

import cffi

from tg_amd.bundle import AMDBinary

ffi = cffi.FFI()
ffi.cdef("""
typedef int hipError_t;
typedef struct ihipModule_t *hipModule_t;
typedef struct ihipModuleSymbol_t *hipFunction_t;
typedef struct ihipStream_t *hipStream_t;
typedef struct ihipEvent_t *hipEvent_t;
typedef struct ihipGraph *hipGraph_t;
typedef struct hipGraphNode *hipGraphNode_t;
typedef struct hipGraphExec *hipGraphExec_t;
typedef struct { unsigned int x, y, z; } dim3;
typedef struct {
  dim3 blockDim;
  void **extra;
  void *func;
  dim3 gridDim;
  void **kernelParams;
  unsigned int sharedMemBytes;
} hipKernelNodeParams;

const char *hipGetErrorName(hipError_t error);
const char *hipGetErrorString(hipError_t error);
hipError_t hipInit(unsigned int flags);
hipError_t hipRuntimeGetVersion(int *runtimeVersion);
hipError_t hipGetDeviceCount(int *count);
hipError_t hipSetDevice(int deviceId);
hipError_t hipDeviceGetName(char *name, int len, int device);
hipError_t hipGetDeviceProperties(void *prop, int deviceId);
hipError_t hipDeviceSynchronize(void);
hipError_t hipMalloc(void **ptr, size_t size);
hipError_t hipFree(void *ptr);
hipError_t hipMemcpy(void *dst, const void *src, size_t sizeBytes, int kind);
hipError_t hipModuleLoadData(hipModule_t *module, const void *image);
hipError_t hipModuleGetFunction(hipFunction_t *function, hipModule_t module, const char *kname);
hipError_t hipModuleLaunchKernel(hipFunction_t f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                 unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                 unsigned int sharedMemBytes, hipStream_t stream, void **kernelParams, void **extra);
hipError_t hipEventCreate(hipEvent_t *event);
hipError_t hipEventRecord(hipEvent_t event, hipStream_t stream);
hipError_t hipEventSynchronize(hipEvent_t event);
hipError_t hipEventElapsedTime(float *ms, hipEvent_t start, hipEvent_t stop);
hipError_t hipGraphCreate(hipGraph_t *pGraph, unsigned int flags);
hipError_t hipGraphAddKernelNode(hipGraphNode_t *pGraphNode, hipGraph_t graph, const hipGraphNode_t *pDependencies,
                                 size_t numDependencies, const hipKernelNodeParams *pNodeParams);
hipError_t hipGraphInstantiate(hipGraphExec_t *pGraphExec, hipGraph_t graph, hipGraphNode_t *pErrorNode, char *pLogBuffer, size_t bufferSize);
hipError_t hipGraphExecKernelNodeSetParams(hipGraphExec_t hGraphExec, hipGraphNode_t node, const hipKernelNodeParams *pNodeParams);
hipError_t hipGraphLaunch(hipGraphExec_t graphExec, hipStream_t stream);
hipError_t hipGraphExecDestroy(hipGraphExec_t graphExec);
hipError_t hipGraphDestroy(hipGraph_t graph);

""")
LIBHIP = "libamdhip64.so"
HIP_MEMCPY_HOST_TO_DEVICE, HIP_MEMCPY_DEVICE_TO_HOST = 1, 2
HIP_ERROR_OUT_OF_MEMORY = 2
# hipModuleLaunchKernel's `extra` markers (hip_runtime_api.h)
HIP_LAUNCH_PARAM_BUFFER_POINTER, HIP_LAUNCH_PARAM_BUFFER_SIZE, HIP_LAUNCH_PARAM_END = 1, 2, 3
PROPERTIES_BYTES = 8192  # more than any ROCm's hipDeviceProp_t (about 1.5 KiB in ROCm 6)


class HIPError(RuntimeError):
  pass


class Driver:
  """What tg does with an AMD GPU. Pointers are device addresses (ints); `extra` is hipModuleLaunchKernel's extra
  (the packed kernel arguments, see program.pack_args); functions and graph objects are opaque handles."""
  name: str = ""   # what `python -m tg_amd` shows
  arch: str = ""   # the gfx target kernels are compiled for, e.g. "gfx1100"

  def alloc(self, size: int) -> int:
    raise NotImplementedError(type(self))

  def free(self, ptr: int) -> None:
    raise NotImplementedError(type(self))

  def copyin(self, ptr: int, src: memoryview) -> None:
    raise NotImplementedError(type(self))

  def copyout(self, dest: memoryview, ptr: int) -> None:
    raise NotImplementedError(type(self))

  def function(self, binary: AMDBinary, name: str) -> Any:
    """Load a compiled kernel; returns its hipFunction_t."""
    raise NotImplementedError(type(self))

  def launch(self, fn: Any, grid: tuple[int, int, int], block: tuple[int, int, int], extra: Any, wait: bool) -> float | None:
    """Run `fn`; with wait, block until it finished and return its run time in seconds."""
    raise NotImplementedError(type(self))

  def graph_create(self) -> Any:
    raise NotImplementedError(type(self))

  def graph_add_kernel(self, graph: Any, deps: list[Any], node_params: Any) -> Any:
    """Append a kernel node (`node_params` a hipKernelNodeParams*) that runs after `deps`; returns the node."""
    raise NotImplementedError(type(self))

  def graph_instantiate(self, graph: Any) -> Any:
    raise NotImplementedError(type(self))

  def graph_set_kernel(self, graph_exec: Any, node: Any, node_params: Any) -> None:
    """Change a kernel node's arguments and launch dims in an instantiated graph."""
    raise NotImplementedError(type(self))

  def graph_launch(self, graph_exec: Any) -> None:
    raise NotImplementedError(type(self))

  def synchronize(self) -> None:
    """Wait for every launch and copy on this GPU (the mock runs each at once)."""


@functools.cache
def load_libhip() -> Any:
  """libamdhip64, initialized. Raises OSError when ROCm's HIP runtime isn't installed, HIPError when it finds no GPU."""
  lib = ffi.dlopen(LIBHIP)
  check(lib, lib.hipInit(0), "hipInit")
  return lib


def device_count() -> int:
  """How many GPUs HIP sees (raises as load_libhip)."""
  lib, out = load_libhip(), ffi.new("int*")
  check(lib, lib.hipGetDeviceCount(out), "hipGetDeviceCount")
  return int(out[0])


def check(lib: Any, status: int, what: str) -> None:
  if status != 0:
    raise HIPError(f"{what} failed: {_string(lib.hipGetErrorName(status))} ({status}): {_string(lib.hipGetErrorString(status))}")


def _string(p: Any) -> str:
  return ffi.string(p).decode(errors="replace") if p != ffi.NULL else "unknown"


def gcn_arch(properties: bytes) -> str | None:
  """The gfx target in a hipDeviceProp_t's bytes: its gcnArchName field ("gfx1100:sramecc-:xnack-"), found by value
  because the struct's layout differs between ROCm releases."""
  m = re.search(rb"gfx[0-9a-f]{3,4}", properties)
  return m.group(0).decode() if m else None


class HIPDriver(Driver):
  """A GPU through libamdhip64: device `ordinal` (AMD:1 is ordinal 1), selected on whichever host thread calls (HIP's
  current device is per thread), launches on the null stream (in order; hipMemcpy waits for them)."""

  def __init__(self, arch: str | None = None, ordinal: int = 0) -> None:
    self.lib, self.ordinal = load_libhip(), ordinal
    self._activate()
    props = ffi.new("char[]", PROPERTIES_BYTES)
    self._check(self.lib.hipGetDeviceProperties(props, ordinal), f"hipGetDeviceProperties({ordinal})")
    found = gcn_arch(bytes(ffi.buffer(props)))
    if arch is None and found is None:
      raise HIPError(f"AMD:{ordinal}: HIP gives no gcnArchName for this GPU; set AMD_ARCH (e.g. AMD_ARCH=gfx1100)")
    self.arch = arch or str(found)
    name = ffi.new("char[]", 256)
    self._check(self.lib.hipDeviceGetName(name, 256, ordinal), "hipDeviceGetName")
    self.name = f"{ffi.string(name).decode(errors='replace')} ({self.arch})"
    self.modules: list[Any] = []  # loaded modules stay loaded: their functions may be in use by a graph
    self.events: tuple[Any, Any] | None = None

  def _check(self, status: int, what: str) -> None:
    check(self.lib, status, what)

  def _activate(self) -> None:
    self._check(self.lib.hipSetDevice(self.ordinal), f"hipSetDevice({self.ordinal})")

  def synchronize(self) -> None:
    self._activate()
    self._check(self.lib.hipDeviceSynchronize(), "hipDeviceSynchronize")

  def alloc(self, size: int) -> int:
    self._activate()
    ptr = ffi.new("void**")
    status = self.lib.hipMalloc(ptr, max(size, 1))
    if status == HIP_ERROR_OUT_OF_MEMORY:  # LRUAllocator frees its cache and tries again
      raise MemoryError(f"AMD GPU {self.ordinal} is out of memory allocating {size} bytes")
    self._check(status, f"hipMalloc of {size} bytes")
    return int(ffi.cast("uintptr_t", ptr[0]))

  def free(self, ptr: int) -> None:
    self._activate()
    self._check(self.lib.hipFree(ffi.cast("void*", ptr)), "hipFree")

  def copyin(self, ptr: int, src: memoryview) -> None:
    self._activate()
    self._check(self.lib.hipMemcpy(ffi.cast("void*", ptr), ffi.from_buffer(src), src.nbytes, HIP_MEMCPY_HOST_TO_DEVICE), "hipMemcpy HtoD")

  def copyout(self, dest: memoryview, ptr: int) -> None:
    self._activate()
    self._check(self.lib.hipMemcpy(ffi.from_buffer(dest, require_writable=True), ffi.cast("void*", ptr), dest.nbytes, HIP_MEMCPY_DEVICE_TO_HOST),
                "hipMemcpy DtoH")

  def function(self, binary: AMDBinary, name: str) -> Any:
    if binary.arch != self.arch:
      raise HIPError(f"kernel {name} was compiled for {binary.arch}, this GPU is {self.arch}")
    self._activate()
    module, fn = ffi.new("hipModule_t*"), ffi.new("hipFunction_t*")
    self._check(self.lib.hipModuleLoadData(module, ffi.from_buffer(binary.code_object)), f"hipModuleLoadData of kernel {name}")
    self.modules.append(module[0])
    self._check(self.lib.hipModuleGetFunction(fn, module[0], name.encode()), f"hipModuleGetFunction {name}")
    return fn[0]

  def launch(self, fn: Any, grid: tuple[int, int, int], block: tuple[int, int, int], extra: Any, wait: bool) -> float | None:
    self._activate()
    if wait:
      if self.events is None:
        evs = [ffi.new("hipEvent_t*") for _ in range(2)]
        for e in evs:
          self._check(self.lib.hipEventCreate(e), "hipEventCreate")
        self.events = (evs[0][0], evs[1][0])
      self._check(self.lib.hipEventRecord(self.events[0], ffi.NULL), "hipEventRecord")
    self._check(self.lib.hipModuleLaunchKernel(fn, *grid, *block, 0, ffi.NULL, ffi.NULL, extra), "hipModuleLaunchKernel")
    if not wait:
      return None
    assert self.events is not None
    ms = ffi.new("float*")
    self._check(self.lib.hipEventRecord(self.events[1], ffi.NULL), "hipEventRecord")
    self._check(self.lib.hipEventSynchronize(self.events[1]), "hipEventSynchronize (the kernel failed)")
    self._check(self.lib.hipEventElapsedTime(ms, self.events[0], self.events[1]), "hipEventElapsedTime")
    return float(ms[0]) * 1e-3

  def graph_create(self) -> Any:
    self._activate()
    graph = ffi.new("hipGraph_t*")
    self._check(self.lib.hipGraphCreate(graph, 0), "hipGraphCreate")
    return ffi.gc(graph[0], self.lib.hipGraphDestroy)

  def graph_add_kernel(self, graph: Any, deps: list[Any], node_params: Any) -> Any:
    node = ffi.new("hipGraphNode_t*")
    self._check(self.lib.hipGraphAddKernelNode(node, graph, ffi.new("hipGraphNode_t[]", deps) if deps else ffi.NULL, len(deps), node_params),
                "hipGraphAddKernelNode")
    return node[0]

  def graph_instantiate(self, graph: Any) -> Any:
    graph_exec = ffi.new("hipGraphExec_t*")
    self._check(self.lib.hipGraphInstantiate(graph_exec, graph, ffi.NULL, ffi.NULL, 0), "hipGraphInstantiate")
    return ffi.gc(graph_exec[0], self.lib.hipGraphExecDestroy)

  def graph_set_kernel(self, graph_exec: Any, node: Any, node_params: Any) -> None:
    self._check(self.lib.hipGraphExecKernelNodeSetParams(graph_exec, node, node_params), "hipGraphExecKernelNodeSetParams")

  def graph_launch(self, graph_exec: Any) -> None:
    self._activate()
    self._check(self.lib.hipGraphLaunch(graph_exec, ffi.NULL), "hipGraphLaunch")
