"""The hooks of plugin API version 1, kept so that plugins written for it still run (see tg.plugins.v1).

Version 1 had one hook per part, each given the device name without an instance number. New plugins implement
version 2's single `tg_device` hook (tg.plugins.hookspecs) instead; docs/plugin-versioning.md says how to move.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
  from tg.device import Allocator, Compiler
  from tg.renderer import Renderer

hookspec = pluggy.HookspecMarker("tg")


# ---------- is the device usable, and how much to prefer it ----------

@hookspec(firstresult=True)
def tg_device_available(device: str) -> str | None:  # type: ignore[empty-body]
  """Whether `device` can be used on this machine.

  Return ``""`` (empty string) when it can; otherwise a sentence saying what is missing and what to do,
  e.g. ``"clang not found on PATH: install clang (apt-get install clang)"``. Used to choose
  ``Device.DEFAULT`` and to explain errors. First non-None result wins.
  """


@hookspec(firstresult=True)
def tg_device_priority(device: str) -> int | None:  # type: ignore[empty-body]
  """How strongly to prefer `device` as the default: GPUs ~100, CPU compilers ~50, interpreters 0.

  Return a negative number for devices that should only be used when asked for by name
  (e.g. a software-emulated GPU). First non-None result wins.
  """


@hookspec(firstresult=True)
def tg_device_note(device: str) -> str | None:  # type: ignore[empty-body]
  """Optional: a short note on how a usable `device` runs here, shown by ``python -m tg.devices``, e.g.
  ``"mock mode: kernels run on the CPU"`` or the GPU's name. First non-None result wins."""


# ---------- the parts of a device ----------

@hookspec(firstresult=True)
def tg_renderer(device: str) -> Renderer | None:  # type: ignore[empty-body]
  """The Renderer that turns linearized UOps into this device's source. Devices that can't run
  kernels (e.g. DISK) return None. First non-None result wins."""


@hookspec(firstresult=True)
def tg_compiler(device: str) -> Compiler | None:  # type: ignore[empty-body]
  """The Compiler that turns rendered source into bytes the runtime loads. First non-None result wins."""


@hookspec(firstresult=True)
def tg_allocator(device: str) -> Allocator | None:  # type: ignore[empty-body]
  """A new Allocator for one instance of `device` (called once per ``NAME:n``). First non-None result wins."""


@hookspec(firstresult=True)
def tg_runtime(device: str) -> Callable[[str, bytes], Any] | None:  # type: ignore[empty-body]
  """A callable ``(function_name, compiled_bytes) -> program``. The program is called as
  ``program(*buffers, global_size=..., local_size=..., vals=(...), wait=bool)`` with the allocator's
  opaque buffers; with ``wait=True`` it returns the run time in seconds. First non-None result wins."""


@hookspec(firstresult=True)
def tg_graph(device: str) -> type | None:  # type: ignore[empty-body]
  """Optional: a class that replays a batch of kernels at once for TinyJit, a subclass of ``tg.engine.jit.GraphRunner``
  made as ``cls(jit_cache, input_replace)`` (two or more of a capture's ExecItems, and (item, buffer position) -> input
  number) and called as a Runner, ``graph(bufs, var_vals)``: before each call TinyJit puts that call's input buffers
  into the ExecItems, so the graph reads them there. None: kernels run one by one."""
