"""The host CPU as an LLVM target: the triple, the CPU name and its features (AVX-512 where the machine has it)."""
from __future__ import annotations

import functools
import hashlib

import llvmlite
import llvmlite.binding as llvm

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
  return target.create_target_machine(cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=3,
                                      reloc="pic", codemodel=CODE_MODEL)


@functools.cache
def compile_target_machine() -> llvm.TargetMachine:
  """The TargetMachine that optimizes and emits objects, one per process (a Compiler holds none, so it pickles for BEAM)."""
  return host_target_machine()


@functools.cache
def toolchain_id() -> str:
  """Names the compiler and the machine it compiles for, for the compile cache: a new llvmlite or CPU never reuses objects."""
  _init()
  features = hashlib.sha256(llvm.get_host_cpu_features().flatten().encode()).hexdigest()[:12]
  version = ".".join(map(str, llvm.llvm_version_info))
  return f"llvmlite{llvmlite.__version__}_llvm{version}_{llvm.get_process_triple()}_{llvm.get_host_cpu_name()}_{features}_{CODE_MODEL}"
