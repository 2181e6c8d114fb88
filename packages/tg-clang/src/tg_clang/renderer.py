"""ClangRenderer: C99 for the host CPU. Output axes are loops; float16 is clang's __fp16 (stored as half,
computed in float); bfloat16 is emulated by core through its 16 bits, as clang has no arithmetic for it here."""
from __future__ import annotations

from tg.dtype import DType, dtypes
from tg.ops import UnaryOps
from tg.renderer.cstyle import CStyleLanguage


class ClangRenderer(CStyleLanguage):
  device = "CLANG"
  global_ids = False
  unsupported_dtypes = frozenset({dtypes.bfloat16})
  type_map = {dtypes.bool: "_Bool", dtypes.float16: "__fp16", dtypes.int8: "signed char", dtypes.uint8: "unsigned char",
              dtypes.int64: "long long", dtypes.uint64: "unsigned long long"}
  infinity = "__builtin_inff()"
  nan = "__builtin_nanf(\"\")"

  def render_bitcast(self, x: str, from_dt: DType, to_dt: DType) -> str:
    return f"__builtin_bit_cast({self.render_dtype(to_dt)}, ({self.render_dtype(from_dt)})({x}))"

  # math through clang's builtins (no header needed), in float for every float narrower than double
  code_for_op = {**CStyleLanguage.code_for_op,
                 **{op: (lambda fn: lambda x, dt: f"__builtin_{fn}{'' if dt == dtypes.float64 else 'f'}({x})")(fn)
                    for op, fn in ((UnaryOps.EXP2, "exp2"), (UnaryOps.LOG2, "log2"), (UnaryOps.SQRT, "sqrt"), (UnaryOps.SIN, "sin"))}}
