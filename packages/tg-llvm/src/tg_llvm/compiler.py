"""LLVMCompiler: LLVM IR text -> an object file for the host CPU, in-process through llvmlite.

The IR is optimized with LLVM's standard O3 pipeline (mem2reg, loop rotation, the loop and SLP vectorizers, tuned
for the host's vector width), then lowered to machine code. No floating-point contraction: a*b+c stays two roundings,
as on the C device and the PYTHON reference; only MULACC (llvm.fmuladd) fuses.
"""
from __future__ import annotations

import llvmlite.binding as llvm

from tg.device import Compiler
from tg.interrupts import hold_sigint
from tg_llvm.plugin import LLVM_OPT
from tg_llvm.target import compile_target_machine, toolchain_id

OPT_LEVEL: int = LLVM_OPT.value


class LLVMCompileError(RuntimeError):
  pass


class LLVMCompiler(Compiler):
  def __init__(self) -> None:
    super().__init__(f"compile_llvm_O{OPT_LEVEL}_{toolchain_id()}")

  @property
  def tm(self) -> llvm.TargetMachine:
    return compile_target_machine()

  def optimize(self, mod: llvm.ModuleRef) -> None:
    pto = llvm.create_pipeline_tuning_options(speed_level=OPT_LEVEL)
    pto.loop_vectorization = pto.slp_vectorization = OPT_LEVEL >= 2
    pb = llvm.create_pass_builder(self.tm, pto)
    pb.getModulePassManager().run(mod, pb)

  def compile(self, src: str) -> bytes:
    # llvmlite hands ownership of C++ objects around in Python (a flag set after the C call that took it, a wrapper
    # whose pointer is set in its __init__): a KeyboardInterrupt between the two left an object that two owners free,
    # and the process died of a double free. Ctrl-C waits for the compile to end instead (hold_sigint).
    with hold_sigint():
      try:
        mod = llvm.parse_assembly(src)
        mod.verify()
      except RuntimeError as e:
        raise LLVMCompileError(f"LLVM rejected a kernel's IR: {e}\n--- source ---\n{src}") from e
      mod.triple, mod.data_layout = self.tm.triple, str(self.tm.target_data)
      self.optimize(mod)
      return bytes(self.tm.emit_object(mod))
