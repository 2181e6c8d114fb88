"""The CLANG device's hook implementations (see tg.plugins.hookspecs)."""
from __future__ import annotations

from tg.device import HostAllocator
from tg.plugins import DeviceSpec, hookimpl, split_device
from tg.renderer.cpu import native_vector_bytes
from tg.renderer.cpu_target import cpu_target
from tg_clang import cross
from tg_clang.compiler import CLANG, ClangCompiler, clang_version
from tg_clang.graph import ClangGraph
from tg_clang.renderer import ClangRenderer
from tg_clang.runtime import ClangProgram, CrossPrograms

TG_PLUGIN_API_VERSION = 2
DEVICE = "CLANG"


@hookimpl
def tg_device(device: str) -> DeviceSpec | None:
  if split_device(device)[0] != DEVICE:
    return None
  # kernels run on the host: plain host memory, with the slack that lets them read whole vectors at a buffer's ends
  if cpu_target().cross:  # CPU_TARGET=aarch64 on another host: one harness under qemu runs the kernels, no graph
    return DeviceSpec(allocator=lambda: HostAllocator(slack=native_vector_bytes()), renderer=ClangRenderer, compiler=ClangCompiler,
                      program=CrossPrograms(), available=_unavailable_reason() or cross.unavailable_reason(), priority=50,
                      note="aarch64 under qemu-user: for numbers, not speed")
  return DeviceSpec(allocator=lambda: HostAllocator(slack=native_vector_bytes()), renderer=ClangRenderer, compiler=ClangCompiler,
                    program=ClangProgram, graph=ClangGraph, available=_unavailable_reason(), priority=50, host_cores=True)


def _unavailable_reason() -> str:
  if clang_version() is not None:
    return ""
  if CLANG != "clang":
    return f"TG_CLANG={CLANG} was not found or does not run: point TG_CLANG at a clang (e.g. from `apt-get install clang`), or unset it"
  return "`clang` was not found on PATH: install clang (e.g. `apt-get install clang`) or set TG_CLANG"
