"""The CUDA driver API (libcuda.so.1, from the NVIDIA driver) through cffi, and `Driver`: the few operations tg
needs from it. `CUDADriver` does them on a GPU; `tg_cuda.mock.driver.MockDriver` does them on the CPU.

Everything above a Driver (allocator, program, graph) is shared by both, so mock mode runs the same parameter
packing and graph bookkeeping a GPU would get. Versioned entry points (_v2) are the ones cuda.h maps the plain
names to; all exist in CUDA 12.0+ drivers.
"""
from __future__ import annotations

import functools
from typing import Any

import cffi

from tg_cuda.bundle import CUDABinary

ffi = cffi.FFI()
ffi.cdef("""
typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUkern_st *CUkernel;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphNode_st *CUgraphNode;
typedef struct CUgraphExec_st *CUgraphExec;
typedef struct {
  CUfunction func;
  unsigned int gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
  void **kernelParams;
  void **extra;
  CUkernel kern;
  CUcontext ctx;
} CUDA_KERNEL_NODE_PARAMS;  /* the _v2 layout, taken by the _v2 graph functions */

CUresult cuGetErrorString(CUresult error, const char **pStr);
CUresult cuGetErrorName(CUresult error, const char **pStr);
CUresult cuInit(unsigned int Flags);
CUresult cuDriverGetVersion(int *driverVersion);
CUresult cuDeviceGetCount(int *count);
CUresult cuDeviceGet(CUdevice *device, int ordinal);
CUresult cuDeviceGetName(char *name, int len, CUdevice dev);
CUresult cuDeviceGetAttribute(int *pi, int attrib, CUdevice dev);
CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuCtxSynchronize(void);
CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
CUresult cuMemFree_v2(CUdeviceptr dptr);
CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount);
CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount);
CUresult cuModuleLoadData(CUmodule *module, const void *image);
CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name);
CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                        unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                        unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra);
CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags);
CUresult cuEventRecord(CUevent hEvent, CUstream hStream);
CUresult cuEventSynchronize(CUevent hEvent);
CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd);
CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags);
CUresult cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                 size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS *nodeParams);
CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags);
CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec hGraphExec, CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS *nodeParams);
CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream);
CUresult cuGraphExecDestroy(CUgraphExec hGraphExec);
CUresult cuGraphDestroy(CUgraph hGraph);

""")
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 75, 76
LIBCUDA = "libcuda.so.1"


class CUDAError(RuntimeError):
  pass


class Driver:
  """What tg does with a CUDA device. Pointers are device addresses (ints); `params` are cuLaunchKernel's
  kernelParams (void**); functions and graph objects are opaque handles."""
  name: str = ""   # what `python -m tg_cuda` shows
  arch: str = ""   # the target NVRTC compiles for, e.g. "sm_80"
  cuda_version: tuple[int, int] | None = None  # the newest CUDA the driver runs (None: no driver, the mock)

  def alloc(self, size: int) -> int:
    raise NotImplementedError(type(self))

  def free(self, ptr: int) -> None:
    raise NotImplementedError(type(self))

  def copyin(self, ptr: int, src: memoryview) -> None:
    raise NotImplementedError(type(self))

  def copyout(self, dest: memoryview, ptr: int) -> None:
    raise NotImplementedError(type(self))

  def function(self, binary: CUDABinary, name: str) -> Any:
    """Load a compiled kernel; returns its CUfunction."""
    raise NotImplementedError(type(self))

  def launch(self, fn: Any, grid: tuple[int, int, int], block: tuple[int, int, int], params: Any, wait: bool) -> float | None:
    """Run `fn`; with wait, block until it finished and return its run time in seconds."""
    raise NotImplementedError(type(self))

  def graph_create(self) -> Any:
    raise NotImplementedError(type(self))

  def graph_add_kernel(self, graph: Any, deps: list[Any], node_params: Any) -> Any:
    """Append a kernel node (`node_params` a CUDA_KERNEL_NODE_PARAMS*) that runs after `deps`; returns the node."""
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
def load_libcuda() -> Any:
  """libcuda, initialized. Raises OSError when there is no NVIDIA driver, CUDAError when it has no usable GPU."""
  lib = ffi.dlopen(LIBCUDA)
  check(lib, lib.cuInit(0), "cuInit")
  return lib


def device_count() -> int:
  """How many GPUs the driver sees (raises as load_libcuda)."""
  lib, out = load_libcuda(), ffi.new("int*")
  check(lib, lib.cuDeviceGetCount(out), "cuDeviceGetCount")
  return int(out[0])


def check(lib: Any, status: int, what: str) -> None:
  if status != 0:
    name, text = ffi.new("const char**"), ffi.new("const char**")
    lib.cuGetErrorName(status, name)
    lib.cuGetErrorString(status, text)
    raise CUDAError(f"{what} failed: {_string(name[0])} ({status}): {_string(text[0])}")


def _string(p: Any) -> str:
  return ffi.string(p).decode() if p != ffi.NULL else "unknown"


class CUDADriver(Driver):
  """A GPU through libcuda: device `ordinal` (CUDA:1 is ordinal 1), its primary context, the legacy default stream
  (launches are in order and cuMemcpyDtoH waits for them)."""

  def __init__(self, arch: str | None = None, ordinal: int = 0) -> None:
    self.lib = lib = load_libcuda()
    dev, ctx, out = ffi.new("CUdevice*"), ffi.new("CUcontext*"), ffi.new("int*")
    self._check(lib.cuDeviceGet(dev, ordinal), f"cuDeviceGet({ordinal})")
    self._check(lib.cuDevicePrimaryCtxRetain(ctx, dev[0]), "cuDevicePrimaryCtxRetain")
    self.dev, self.ctx = dev[0], ctx[0]
    cc = []
    for attr in (CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR):
      self._check(lib.cuDeviceGetAttribute(out, attr, self.dev), "cuDeviceGetAttribute")
      cc.append(out[0])
    self.arch = arch or f"sm_{cc[0]}{cc[1]}"
    self._check(lib.cuDriverGetVersion(out), "cuDriverGetVersion")
    self.cuda_version = (out[0] // 1000, out[0] % 1000 // 10)
    name = ffi.new("char[]", 256)
    self._check(lib.cuDeviceGetName(name, 256, self.dev), "cuDeviceGetName")
    self.name = f"{ffi.string(name).decode()} ({self.arch})"
    self.modules: list[Any] = []  # loaded modules stay loaded: their functions may be in use by a graph
    self.events: tuple[Any, Any] | None = None
    self._activate()

  def _check(self, status: int, what: str) -> None:
    check(self.lib, status, what)

  def synchronize(self) -> None:
    self._activate()
    self._check(self.lib.cuCtxSynchronize(), "cuCtxSynchronize")

  def _activate(self) -> None:
    # a context is current per host thread: make ours current on whichever thread calls
    self._check(self.lib.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")

  def alloc(self, size: int) -> int:
    self._activate()
    ptr = ffi.new("CUdeviceptr*")
    status = self.lib.cuMemAlloc_v2(ptr, max(size, 1))
    if status == 2:  # CUDA_ERROR_OUT_OF_MEMORY: LRUAllocator frees its cache and tries again
      raise MemoryError(f"CUDA is out of memory allocating {size} bytes")
    self._check(status, f"cuMemAlloc of {size} bytes")
    return int(ptr[0])

  def free(self, ptr: int) -> None:
    self._activate()
    self._check(self.lib.cuMemFree_v2(ptr), "cuMemFree")

  def copyin(self, ptr: int, src: memoryview) -> None:
    self._activate()
    self._check(self.lib.cuMemcpyHtoD_v2(ptr, ffi.from_buffer(src), src.nbytes), "cuMemcpyHtoD")

  def copyout(self, dest: memoryview, ptr: int) -> None:
    self._activate()
    self._check(self.lib.cuMemcpyDtoH_v2(ffi.from_buffer(dest, require_writable=True), ptr, dest.nbytes), "cuMemcpyDtoH")

  def function(self, binary: CUDABinary, name: str) -> Any:
    self._activate()
    module, fn = ffi.new("CUmodule*"), ffi.new("CUfunction*")
    self._check(self.lib.cuModuleLoadData(module, ffi.from_buffer(binary.image())), f"cuModuleLoadData of kernel {name}")
    self.modules.append(module[0])
    self._check(self.lib.cuModuleGetFunction(fn, module[0], name.encode()), f"cuModuleGetFunction {name}")
    return fn[0]

  def launch(self, fn: Any, grid: tuple[int, int, int], block: tuple[int, int, int], params: Any, wait: bool) -> float | None:
    self._activate()
    if wait:
      if self.events is None:
        evs = [ffi.new("CUevent*") for _ in range(2)]
        for e in evs:
          self._check(self.lib.cuEventCreate(e, 0), "cuEventCreate")
        self.events = (evs[0][0], evs[1][0])
      self._check(self.lib.cuEventRecord(self.events[0], ffi.NULL), "cuEventRecord")
    self._check(self.lib.cuLaunchKernel(fn, *grid, *block, 0, ffi.NULL, params, ffi.NULL), "cuLaunchKernel")
    if not wait:
      return None
    assert self.events is not None
    ms = ffi.new("float*")
    self._check(self.lib.cuEventRecord(self.events[1], ffi.NULL), "cuEventRecord")
    self._check(self.lib.cuEventSynchronize(self.events[1]), "cuEventSynchronize (the kernel failed)")
    self._check(self.lib.cuEventElapsedTime(ms, self.events[0], self.events[1]), "cuEventElapsedTime")
    return float(ms[0]) * 1e-3

  def graph_create(self) -> Any:
    self._activate()
    graph = ffi.new("CUgraph*")
    self._check(self.lib.cuGraphCreate(graph, 0), "cuGraphCreate")
    return ffi.gc(graph[0], self.lib.cuGraphDestroy)

  def graph_add_kernel(self, graph: Any, deps: list[Any], node_params: Any) -> Any:
    node = ffi.new("CUgraphNode*")
    self._check(self.lib.cuGraphAddKernelNode_v2(node, graph, ffi.new("CUgraphNode[]", deps) if deps else ffi.NULL, len(deps), node_params),
                "cuGraphAddKernelNode")
    return node[0]

  def graph_instantiate(self, graph: Any) -> Any:
    graph_exec = ffi.new("CUgraphExec*")
    self._check(self.lib.cuGraphInstantiateWithFlags(graph_exec, graph, 0), "cuGraphInstantiate")
    return ffi.gc(graph_exec[0], self.lib.cuGraphExecDestroy)

  def graph_set_kernel(self, graph_exec: Any, node: Any, node_params: Any) -> None:
    self._check(self.lib.cuGraphExecKernelNodeSetParams_v2(graph_exec, node, node_params), "cuGraphExecKernelNodeSetParams")

  def graph_launch(self, graph_exec: Any) -> None:
    self._activate()
    self._check(self.lib.cuGraphLaunch(graph_exec, ffi.NULL), "cuGraphLaunch")
