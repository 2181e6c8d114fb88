"""The LLVM device's hook implementations (see tg.plugins.hookspecs).

llvmlite is imported only when a part of the device is asked for, so a missing llvmlite is explained by
DeviceSpec.available instead of breaking the plugin's import."""
from __future__ import annotations

import importlib.util

from tg.device import HostAllocator
from tg.plugins import DeviceSpec, hookimpl, split_device
from tg.renderer.cpu import native_vector_bytes
from tg.renderer.cpu_target import cpu_target
from tg.settings import Setting
from tg_llvm.renderer import LLVMRenderer

TG_PLUGIN_API_VERSION = 2
DEVICE = "LLVM"
LLVM_OPT = Setting("LLVM_OPT", 3, "the LLVM device's optimization level (2 compiles a little faster)", read_once="when the LLVM device opens")


@hookimpl
def tg_device(device: str) -> DeviceSpec | None:
  if split_device(device)[0] != DEVICE:
    return None
  if cpu_target().cross:
    return DeviceSpec(available=f"CPU_TARGET={cpu_target().name}: LLVM builds and runs kernels for this host's architecture only; "
                                "CLANG runs aarch64 kernels under qemu-user")
  if importlib.util.find_spec("llvmlite") is None:
    return DeviceSpec(available="llvmlite is not installed: `pip install llvmlite`")
  # llvmlite is imported only when the device opens, so a broken llvmlite is explained instead of breaking this import
  from tg_llvm.compiler import LLVMCompiler
  from tg_llvm.graph import LLVMGraph
  from tg_llvm.runtime import LLVMProgram
  # kernels run on the host: plain host memory, with the slack that lets them read whole vectors at a buffer's ends.
  # Priority 40: a CPU compiler, after CLANG when both are installed
  return DeviceSpec(allocator=lambda: HostAllocator(slack=native_vector_bytes()), renderer=LLVMRenderer, compiler=LLVMCompiler,
                    program=LLVMProgram, graph=LLVMGraph, priority=40, host_cores=True)
