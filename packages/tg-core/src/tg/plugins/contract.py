"""The device contract, plugin API version 2: what a device package gives tg for each device instance.

A plugin answers one hook, `tg_device(device)`, with a `DeviceSpec` (see tg.plugins.hookspecs). Everything a
device is and does is in that spec: whether it is usable here, how strongly to prefer it, and factories for
its parts. The parts are made when an instance opens, once per instance (`"CLANG"` and `"CLANG:1"` are two
instances, each with its own allocator, renderer, compiler and programs), so building a spec is cheap and tg
builds one just to ask whether the device is usable. docs/device-contract.md documents every field.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
  from tg.device import Allocator, Compiler
  from tg.engine.jit import GraphRunner
  from tg.engine.realize import ExecItem
  from tg.renderer import Renderer

# The contract's version. A plugin module sets `TG_PLUGIN_API_VERSION` to the version it was written for; tg-core runs
# plugins of this version and of the one before (through tg.plugins.v1) and refuses others with the migration note.
PLUGIN_API_VERSION = 2
OLDEST_SUPPORTED_API_VERSION = 1
MIGRATION_NOTES = "docs/plugin-versioning.md"


class Program(Protocol):
  """One compiled kernel, loaded on one device instance.

  Called with the kernel's buffers, exactly its buffer parameters in order (the allocator's opaque handles), then
  keywords: `global_size` and `local_size` (launch dims, see Renderer.global_ids), `vals` (the values of the
  kernel's symbolic sizes, ints, in Program.vars order) and `wait`. With `wait=True` the call returns only once the
  kernel has finished and returns the seconds it took; otherwise it may return at once (None) and run later:
  launches on one instance must then run in the order they were made, as must copies (see DeviceSpec.synchronize)."""

  def __call__(self, *bufs: Any, global_size: tuple[int, ...] = ..., local_size: tuple[int, ...] = ...,
               vals: tuple[int, ...] = ..., wait: bool = ...) -> float | None: ...


class ProgramFactory(Protocol):
  """Loads a compiled kernel: `(function_name, compiled_bytes) -> Program`. The bytes are what the Compiler made
  (possibly read back from tg's disk cache); the name is the kernel's function in them."""

  def __call__(self, name: str, lib: bytes, /) -> Program: ...


class GraphFactory(Protocol):
  """Makes a graph that replays two or more of a TinyJit capture's kernels in one go, a subclass of
  tg.engine.jit.GraphRunner: `factory(jit_cache, input_replace)`. `jit_cache` are the capture's ExecItems (all on this
  instance, all compiled kernels); `input_replace` maps (item number, buffer position) to the number of the jit input
  that goes there. The graph is then called as a Runner, `graph(bufs, var_vals, wait=False)`; before each call TinyJit
  puts that call's input buffers into the ExecItems, so the graph reads them there (tg.runtime.graph.BatchGraph is a
  base for CPU devices, tg_cuda.graph for a GPU's)."""

  def __call__(self, jit_cache: list[ExecItem], input_replace: dict[tuple[int, int], int], /) -> GraphRunner: ...


@dataclass(frozen=True)
class DeviceSpec:
  """One device instance, as its plugin describes it.

  Availability and preference (read without opening the device):
    available: "" when the device can be used here; otherwise one sentence saying what is missing and what to do,
      e.g. "clang not found on PATH: install clang (apt-get install clang)". Shown by `python -m tg.devices` and in
      the error when the device is asked for.
    priority: how strongly to prefer it as Device.DEFAULT: GPUs ~100, CPU compilers ~50, interpreters 0; negative:
      only when asked for by name (an emulated GPU, storage).
    note: optional, how a usable device runs here (the GPU's name, "mock mode"), shown by `python -m tg.devices`.
  Parts (factories called once, when the instance opens; each instance gets its own):
    allocator: () -> tg.device.Allocator, the instance's memory. Required when the device is available.
    renderer: () -> tg.renderer.Renderer, UOps to source, and the device's capabilities. None: runs no kernels.
    compiler: () -> tg.device.Compiler, source to bytes. None: runs no kernels.
    program: a ProgramFactory, bytes to a runnable Program. None: runs no kernels.
    graph: optional GraphFactory for TinyJit. None: a jitted function's kernels run one by one.
    synchronize: optional () -> None, waits until every launch and copy made on the instance has finished. tg calls
      it before it copies a buffer out (Allocator.copyout), when a program asks for wait, and from
      `Device[name].synchronize()`. None: the device runs everything synchronously.
  How it runs:
    host_cores: its programs run on this machine's cores in the calling thread and release the GIL while they run
      (a CPU device: its split kernels go through tg.runtime.cpu.run_split). Instances of such devices in one schedule
      run side by side on threads of their own, each on its share of the cores (tg/engine/streams.py).
  """
  allocator: Callable[[], Allocator] | None = None
  renderer: Callable[[], Renderer] | None = None
  compiler: Callable[[], Compiler] | None = None
  program: ProgramFactory | None = None
  graph: GraphFactory | None = None
  synchronize: Callable[[], None] | None = None
  available: str = ""
  priority: int = 0
  note: str = ""
  host_cores: bool = False

  def __post_init__(self) -> None:
    if self.allocator is None and self.available == "":
      raise TypeError("a usable device's DeviceSpec needs an allocator factory (only an unusable one, available != '', may leave it out)")
    if self.allocator is not None and not callable(self.allocator):
      raise TypeError(f"DeviceSpec.allocator must be a factory, a callable that makes the Allocator (got {type(self.allocator).__name__}): "
                      "pass the class or a lambda, so the allocator is made when the device opens")
    for part in ("renderer", "compiler", "program", "graph", "synchronize"):
      if (value := getattr(self, part)) is not None and not callable(value):
        raise TypeError(f"DeviceSpec.{part} must be callable or None, got {type(value).__name__}")
    if not isinstance(self.available, str) or not isinstance(self.note, str):
      raise TypeError("DeviceSpec.available and DeviceSpec.note are strings (available: '' when usable)")
    if not isinstance(self.priority, int) or isinstance(self.priority, bool):
      raise TypeError(f"DeviceSpec.priority is an int, got {self.priority!r}")

  @property
  def runs_kernels(self) -> bool:
    return self.renderer is not None and self.compiler is not None and self.program is not None


def split_device(device: str) -> tuple[str, int]:
  """`"CLANG:1"` -> `("CLANG", 1)`, `"CLANG"` -> `("CLANG", 0)`: a device's base name and instance number.
  An instance part that is not a number (DISK's file paths) is instance 0."""
  base, _, rest = device.partition(":")
  return base.upper(), int(rest) if rest.isdigit() else 0
