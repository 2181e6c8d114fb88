"""The host CPU as an LLVM target: the triple, the CPU name and its features (AVX-512 where the machine has it), or the
x86-64 level CPU_TARGET names (tg.renderer.cpu_target)."""
from __future__ import annotations

import functools
import hashlib

import llvmlite
import llvmlite.binding as llvm

from tg.renderer.cpu_target import CROSS, cpu_target

CODE_MODEL = "large"


@functools.cache
def _init() -> None:
  llvm.initialize_native_target()
  llvm.initialize_native_asmprinter()  # emits the object files compile() returns


def host_target_machine() -> llvm.TargetMachine:
  """A new TargetMachine for this CPU. A new one each time: an MCJIT engine takes ownership of the one it is given."""
  _init()
  target = llvm.Target.from_triple(llvm.get_process_triple())
  # pic and the large code model: the runtime maps an object's code and its constants separately, and once big buffers
  # fragment the address space the two can land more than 2 GiB apart, past a 32-bit relative reference (MCJIT then
  # aborts the process on an assertion): the large model reaches constants through 64-bit addresses
  cpu, features = cpu_and_features()
  return target.create_target_machine(cpu=cpu, features=features, opt=3, reloc="pic", codemodel=CODE_MODEL)


def cpu_and_features() -> tuple[str, str]:
  """The CPU LLVM compiles for and its feature string: the host's, or CPU_TARGET's x86-64 level (whose name implies
  its features)."""
  _init()
  if cpu_target().name in CROSS:  # CPU_TARGET=aarch64 on an aarch64 host (elsewhere the plugin refuses it): the baseline ISA
    return "generic", "+neon"
  if (level := cpu_target().compiler_cpu) is not None:
    return level, ""
  return llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()


@functools.cache
def compile_target_machine() -> llvm.TargetMachine:
  """The TargetMachine that optimizes and emits objects, one per process (a Compiler holds none, so it pickles for BEAM)."""
  return host_target_machine()


@functools.cache
def toolchain_id() -> str:
  """Names the compiler and the machine it compiles for, for the compile cache: a new llvmlite or CPU never reuses objects."""
  cpu, features = cpu_and_features()
  digest = hashlib.sha256(features.encode()).hexdigest()[:12]
  version = ".".join(map(str, llvm.llvm_version_info))
  return f"llvmlite{llvmlite.__version__}_llvm{version}_{llvm.get_process_triple()}_{cpu}_{digest}_{CODE_MODEL}"
