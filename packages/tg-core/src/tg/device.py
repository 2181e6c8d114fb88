"""Devices: the registry (`Device`), device memory (`Buffer`, `Allocator`, `LRUAllocator`), compilers
with a disk cache (`Compiler`), and `Compiled`, one device assembled from its plugin's hooks."""
from __future__ import annotations

import ctypes
import errno
import mmap
import os
import sys
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from tg.diskcache import diskcache_get, diskcache_put
from tg.dtype import DType
from tg.helpers import DEBUG, GlobalCounters, getenv
from tg.plugins import DeviceSpec, PluginError, device_spec, installed_devices
from tg.renderer import Renderer
from tg.settings import DEVICE, DISABLE_COMPILER_CACHE, HUGE_PAGES, LRU

if TYPE_CHECKING:
  from tg.engine.pending import PendingWork

# ---------- the base classes a plugin implements ----------

class Allocator:
  """Device memory. `alloc` returns an opaque handle that the device's programs accept as an argument."""

  def alloc(self, size: int, options: Any = None) -> Any:
    """A new buffer of `size` bytes."""
    raise NotImplementedError(type(self))

  def free(self, opaque: Any, size: int, options: Any = None) -> None:
    """Release a buffer from `alloc` (the default leaves it to the garbage collector)."""

  def copyin(self, dest: Any, src: memoryview) -> None:
    """Copy host bytes `src` into device buffer `dest`."""
    raise NotImplementedError(type(self))

  def copyout(self, dest: memoryview, src: Any) -> None:
    """Copy device buffer `src` into host memory `dest`."""
    raise NotImplementedError(type(self))

  def view(self, opaque: Any, byte_offset: int, size: int) -> Any:
    """Optional: a handle to `size` bytes of buffer `opaque` starting at `byte_offset`, sharing its memory.
    Devices that can't run kernels need it to copy out part of a buffer (a tensor slice)."""
    raise NotImplementedError(f"{type(self).__name__} has no buffer views")

  def transfer(self, dest: Any, src_allocator: Allocator, src: Any, nbytes: int) -> bool:
    """Optional: copy `nbytes` from `src`, a buffer of another device's `src_allocator`, into `dest` by a direct path
    (host memory to host memory, a GPU's peer copy), and say True; False (the default) when there is none from that
    allocator, and tg copies through host memory instead (`copyout` into a host buffer, then `copyin`). tg has called
    the source device's `synchronize` first."""
    return False


class LRUAllocator(Allocator):
  """Keeps freed buffers by (size, options) and hands them out again: device allocations are slow."""

  def __init__(self) -> None:
    self.cache: dict[tuple[int, Any], list[Any]] = defaultdict(list)

  def alloc(self, size: int, options: Any = None) -> Any:
    if (cached := self.cache.get((size, options))):
      return cached.pop()
    try:
      return self._alloc(size, options)
    except MemoryError:
      self.free_cache()
      return self._alloc(size, options)

  def free(self, opaque: Any, size: int, options: Any = None) -> None:
    if LRU.value:
      self.cache[(size, options)].append(opaque)
    else:
      self._free(opaque, options)

  def free_cache(self) -> None:
    for (_, options), opaques in self.cache.items():
      for opaque in opaques:
        self._free(opaque, options)
    self.cache.clear()

  def _alloc(self, size: int, options: Any) -> Any:
    raise NotImplementedError(type(self))

  def _free(self, opaque: Any, options: Any) -> None:
    pass


class DriverAllocator(LRUAllocator):
  """Device memory through a GPU package's driver object (alloc(size), free(handle), copyin(handle, src),
  copyout(dest, handle)): a buffer's handle is the driver's, and a view is the handle plus a byte offset (a device
  address; a driver whose handles aren't addresses overrides `view`)."""

  def __init__(self, driver: Any) -> None:
    super().__init__()
    self.driver = driver

  def _alloc(self, size: int, options: Any) -> Any:
    return self.driver.alloc(size)

  def _free(self, opaque: Any, options: Any) -> None:
    self.driver.free(opaque)

  def copyin(self, dest: Any, src: memoryview) -> None:
    self.driver.copyin(dest, src)

  def copyout(self, dest: memoryview, src: Any) -> None:
    self.driver.copyout(dest, src)

  def view(self, opaque: Any, byte_offset: int, size: int) -> Any:
    return opaque + byte_offset


HOST_ALIGN = 64  # bytes: a cache line, and the widest vector (AVX-512)
# A buffer of HUGE_PAGE_MIN bytes or more is mapped on its own, starts on a HUGE_PAGE boundary and is asked for huge
# pages (where the OS has them: Linux's MADV_HUGEPAGE). With 4 KiB pages a kernel streaming 64 MiB walks the page
# tables 16384 times; with 2 MiB pages 32 times. Summing 16M floats (2 cores, Zen 4): 3.5 ms against 4.7 ms on 4 KiB
# pages, and numpy and torch get such pages for their arrays (numpy asks for them from 4 MiB on).
HUGE_PAGE, HUGE_PAGE_MIN = 2 << 20, 4 << 20
_MADV_HUGEPAGE: int | None = getattr(mmap, "MADV_HUGEPAGE", None)


class HostAllocator(LRUAllocator):
  """Buffers in host memory: any object with the buffer protocol (a bytearray by default).

  `slack`: bytes before and after every buffer that stay readable (zeros, never handed out), for a device whose
  kernels may read a little past either end of a buffer (Renderer.overread_bytes)."""

  def __init__(self, slack: int = 0) -> None:
    super().__init__()
    self.slack = slack

  def _alloc(self, size: int, options: Any) -> Any:
    if size >= HUGE_PAGE_MIN and _MADV_HUGEPAGE is not None and HUGE_PAGES.value:
      return self._alloc_huge(size, _MADV_HUGEPAGE)
    # aligned to HOST_ALIGN: a large bytearray's bytes start 16 past a page (malloc's header), and with the slack
    # every buffer began at 80 mod 4096, so each 64-byte vector load of an AVX-512 kernel straddled two cache lines
    raw = bytearray(size + 2 * self.slack + HOST_ALIGN)
    start = -(ctypes.addressof(ctypes.c_char.from_buffer(raw)) + self.slack) % HOST_ALIGN + self.slack
    return memoryview(raw)[start:start + size]

  def _alloc_huge(self, size: int, advice: int) -> memoryview:
    """`size` bytes of an anonymous mapping (zeros, like a bytearray) starting on a HUGE_PAGE boundary, asked for
    huge pages. The mapping is a HUGE_PAGE longer than the buffer and its slack: the pages before the boundary are
    never touched, so they cost address space only. The mapping is unmapped when the last view of it goes."""
    try:
      raw = mmap.mmap(-1, size + 2 * self.slack + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    except OSError as e:
      if e.errno == errno.ENOMEM:
        raise MemoryError(f"can't map {size} bytes of host memory") from e
      raise
    try:
      raw.madvise(advice)
    except OSError:  # a kernel built without transparent huge pages: 4 KiB pages, as a bytearray has
      pass
    start = -(ctypes.addressof(ctypes.c_char.from_buffer(raw)) + self.slack) % HUGE_PAGE + self.slack
    return memoryview(raw)[start:start + size]

  def copyin(self, dest: Any, src: memoryview) -> None:
    memoryview(dest).cast("B")[:] = src

  def copyout(self, dest: memoryview, src: Any) -> None:
    dest[:] = memoryview(src).cast("B")

  def view(self, opaque: Any, byte_offset: int, size: int) -> Any:
    return memoryview(opaque).cast("B")[byte_offset:byte_offset + size]

  def transfer(self, dest: Any, src_allocator: Allocator, src: Any, nbytes: int) -> bool:
    """Host memory to host memory (another CPU device instance, a file DISK maps): one copy, not two through a
    temporary buffer."""
    if not isinstance(src_allocator, HostAllocator):
      return False
    memoryview(dest).cast("B")[:nbytes] = memoryview(src).cast("B")[:nbytes]
    return True


class Compiler:
  """Turns source into bytes the runtime can load. `cachekey` names the compiler and its version;
  compiled output is cached on disk under it (None: never cached)."""

  def __init__(self, cachekey: str | None = None) -> None:
    self.cachekey = cachekey if DISABLE_COMPILER_CACHE.value == 0 else None

  def compile(self, src: str) -> bytes:
    raise NotImplementedError(type(self))

  def compile_cached(self, src: str) -> bytes:
    """compile(src), from the disk cache when it holds it: the cache checks each entry's length and checksum,
    so the bytes returned are the ones compile made (a damaged entry is a miss, compiled again)."""
    lib = diskcache_get(self.cachekey, src) if self.cachekey is not None else None
    if not isinstance(lib, bytes):
      lib = self.compile(src)
      if self.cachekey is not None:
        diskcache_put(self.cachekey, src, lib)
    return lib


class Compiled:
  """One device instance (`"NAME"`, `"NAME:1"`), its parts made from its plugin's DeviceSpec when it opens.

  `runtime` is the spec's ProgramFactory: `runtime(name, lib)` loads a compiled kernel."""

  def __init__(self, device: str, spec: DeviceSpec) -> None:
    self.dname, self.spec = device, spec
    if spec.allocator is None:
      raise PluginError(f"the DeviceSpec of {device} has no allocator")
    self.allocator: Allocator = spec.allocator()
    if self.allocator is None:
      raise PluginError(f"the DeviceSpec of {device} made no allocator (its allocator factory returned None)")
    self.renderer: Renderer | None = spec.renderer() if spec.renderer is not None else None
    if self.renderer is not None:
      self.renderer.device = device  # kernels rendered by it are this instance's (Program.device): "TOY:1", not "TOY"
    self.compiler: Compiler | None = spec.compiler() if spec.compiler is not None else None
    self.runtime = spec.program
    self.graph = spec.graph
    self._synchronize = spec.synchronize

  def synchronize(self) -> None:
    """Wait until every launch and copy made on this instance has finished (a no-op for synchronous devices)."""
    if self._synchronize is not None:
      self._synchronize()

  def __repr__(self) -> str:
    return f"<Compiled {self.dname}>"


# ---------- the registry ----------

class _Device:
  """`Device["NAME"]` opens a device (loading its plugin on first use); `Device.DEFAULT` is the default."""

  def __init__(self) -> None:
    self._opened: dict[str, Compiled] = {}
    self._default: str | None = None
    self._default_reason = ""

  @staticmethod
  def canonicalize(device: str | None) -> str:
    if device is None:
      return Device.DEFAULT
    if not isinstance(device, str):
      raise TypeError(f"a device is a string such as 'NAME' or 'NAME:1', not {type(device).__name__}")
    base, sep, rest = device.partition(":")
    base = base.upper()
    return base if rest in ("", "0") else f"{base}{sep}{rest}"

  def __getitem__(self, device: str) -> Compiled:
    if type(device) is str and (dev := self._opened.get(device)) is not None:  # canonical already (as every Buffer's is)
      return dev
    device = self.canonicalize(device)
    if (dev := self._opened.get(device)) is None:
      dev = self._opened[device] = self._open(device)
    return dev

  def _open(self, device: str) -> Compiled:
    spec = device_spec(device)
    if spec.available:
      raise RuntimeError(f"device {device} is installed but not usable here: {spec.available}")
    dev = Compiled(device, spec)
    if DEBUG >= 1:
      print(f"opened device {device} from pid:{os.getpid()}")
    return dev

  def availability(self, device: str) -> str:
    """"" if `device` can be used, otherwise why not."""
    try:
      return device_spec(self.canonicalize(device)).available
    except PluginError as e:
      return str(e)

  def synchronize(self, device: str | None = None) -> None:
    """Wait for every queued launch and copy on `device` (default: every opened device) to finish."""
    for dev in [self[device]] if device is not None else list(self._opened.values()):
      dev.synchronize()

  def installed(self) -> list[str]:
    return [d.name for d in installed_devices()]

  @property
  def DEFAULT(self) -> str:
    if self._default is None:
      self._default = self._choose_default()
    return self._default

  @DEFAULT.setter
  def DEFAULT(self, device: str) -> None:
    self._default, self._default_reason = self.canonicalize(device), ""

  def describe_default(self) -> str:
    """The default device and why it was chosen, e.g. "B (the best usable of B, PYTHON; A is installed but not usable: ...)"."""
    name = self.DEFAULT
    return f"{name} ({self._default_reason or 'set by the program'})"

  def _choose_default(self) -> str:
    name, self._default_reason = self._pick_default()
    return name

  def _pick_default(self) -> tuple[str, str]:
    if (asked := DEVICE.value):
      return self.canonicalize(asked), f"asked for by DEVICE={asked}"
    names = self.installed()
    for name in names:  # tinygrad's style: NAME=1 (read as text: a toolkit path such as NAME=/usr/local/... in the environment is no error)
      if getenv(name, "") == "1":
        return name, f"asked for by {name}=1"
    usable: list[tuple[float, str]] = []
    unusable: list[tuple[float, str, str]] = []
    for name in names:
      try:
        spec = device_spec(name)
        why, prio = spec.available, float(spec.priority)
      except PluginError as e:  # a plugin that fails to load ranks just above the interpreter: worth a word when that is all we'd get
        why, prio = str(e), 1.0
      if why == "" and prio >= 0:
        usable.append((prio, name))
      elif why != "":
        unusable.append((prio, name, why))
    broken = "; ".join(f"{name} is installed but not usable: {why}" for _, name, why in sorted(unusable, reverse=True))
    if not usable:
      raise RuntimeError(f"no usable tg device ({broken or 'none is installed'}): install a device package, e.g. `pip install tg-llvm` "
                         "(needs no system compiler), then see `python -m tg.devices`")
    prio, best = max(usable)
    reason = f"the best usable of {', '.join(n for _, n in sorted(usable, reverse=True))}"
    # a device that would rank higher but can't be used here: say so once, or a run may crawl on a slow device unexplained
    if (better := [(name, why) for p, name, why in sorted(unusable, reverse=True) if p > prio]):
      lines = "; ".join(f"{name} is installed but not usable: {why}" for name, why in better)
      reason += f"; {lines}"
      print(f"tg: using device {best}, because {lines}. (Set DEVICE={best} to choose it and silence this; `python -m tg.devices` "
            "lists the devices.)", file=sys.stderr)
    elif prio <= 0:  # priority 0 is an interpreter (see hookspecs): far slower than any compiled device
      print(f"tg: using device {best}, an interpreter (slow), as no compiled device is installed: `pip install tg-llvm` adds one "
            f"that needs no system compiler. (Set DEVICE={best} to choose it and silence this.)", file=sys.stderr)
    return best, reason


Device = _Device()


def is_dtype_supported(dtype: DType, device: str | tuple[str, ...] | None = None) -> bool:
  """Whether kernels on `device` (default: Device.DEFAULT; a sharded tensor's tuple: on each) can compute with `dtype`
  (natively or emulated by core)."""
  if isinstance(device, tuple):
    return all(is_dtype_supported(dtype, d) for d in device)
  renderer = Device[device or Device.DEFAULT].renderer
  return renderer is None or dtype.scalar() not in renderer.missing_dtypes


# ---------- buffers ----------

class Buffer:
  """`size` elements of `dtype` on `device`; memory is allocated on first need.

  Its lifetime is explicit, kept by the lazy graph and the scheduler rather than read off the interpreter:
  `lb_refcount` counts the live LazyBuffer bases that own it (a Tensor, a view, an autograd context or an unrealized
  graph reaches it only through one); `plannable` says whether the memory planner may give its memory to another
  buffer once that count is 0 (engine/memory.py); `pending` is the scheduled work that has yet to write it (while
  set, no LazyBuffer counts it as realized: engine/pending.py)."""

  def __init__(self, device: str, size: int, dtype: DType, opaque: Any = None, options: Any = None) -> None:
    self.device, self.size, self.dtype, self.options = device, size, dtype, options
    self._buf: Any = None
    self._base: Buffer | None = None  # set for a view into another buffer's memory
    self.lb_refcount = 0
    self.plannable: bool | None = None  # None: no schedule computed it; False: an in-place assign wrote it (state)
    self.pending: PendingWork | None = None
    if opaque is not None:
      self.allocate(opaque)

  def view(self, size: int, dtype: DType, byte_offset: int) -> Buffer:
    """`size` elements of `dtype` at `byte_offset` of this buffer, sharing its memory."""
    if byte_offset < 0 or byte_offset + size * dtype.itemsize > self.nbytes:
      raise ValueError(f"a view of {size * dtype.itemsize} bytes at {byte_offset} doesn't fit in a buffer of {self.nbytes}")
    self.ensure_allocated()
    ret = Buffer(self.device, size, dtype, options=self.options)
    ret.allocator, ret._base = self.allocator, self
    ret._buf = self.allocator.view(self._buf, byte_offset, size * dtype.itemsize)
    return ret

  @property
  def nbytes(self) -> int:
    return self.size * self.dtype.itemsize

  def is_allocated(self) -> bool:
    return self._buf is not None

  def ensure_allocated(self) -> Buffer:
    return self if self.is_allocated() else self.allocate()

  def allocate(self, opaque: Any = None) -> Buffer:
    assert self._buf is None, "buffer is already allocated"
    self.allocator = allocator = Device[self.device].allocator
    nbytes = self.size * self.dtype.itemsize
    self._buf = opaque if opaque is not None else allocator.alloc(nbytes, self.options)
    counters = GlobalCounters
    if (used := counters.mem_used + nbytes) > counters.mem_used_peak:
      counters.mem_used_peak = used
    counters.mem_used = used
    return self

  def __del__(self) -> None:
    if getattr(self, "_buf", None) is None or getattr(self, "_base", None) is not None:  # views free nothing
      return
    nbytes = self.size * self.dtype.itemsize
    try:
      GlobalCounters.mem_used -= nbytes
      self.allocator.free(self._buf, nbytes, self.options)
    except Exception:  # interpreter shutdown: this module's globals (GlobalCounters) and the allocator may be gone
      pass

  def copyin(self, mv: memoryview) -> Buffer:
    mv = mv.cast("B") if mv.nbytes else mv
    if mv.nbytes != self.nbytes:
      raise ValueError(f"copyin of {mv.nbytes} bytes into a buffer of {self.nbytes} bytes")
    self.ensure_allocated()
    if self.nbytes:
      self.allocator.copyin(self._buf, mv)
    return self

  def as_buffer(self) -> memoryview:
    out = memoryview(bytearray(self.nbytes))
    if self.nbytes:
      self.ensure_allocated()
      Device[self.device].synchronize()  # an asynchronous device may still be writing it
      self.allocator.copyout(out, self._buf)
    return out

  def __repr__(self) -> str:
    return f"<buf device:{self.device} size:{self.size} dtype:{self.dtype}>"
