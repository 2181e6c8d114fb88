"""IRBuilder: the text of one LLVM function body, built in order.

Values get fresh names (%t0, %t1, ...), blocks fresh labels; allocas are collected apart so the renderer can
put them all in the entry block, where LLVM's mem2reg pass turns them into registers.
"""
from __future__ import annotations


class IRBuilder:
  def __init__(self) -> None:
    self.lines: list[str] = []
    self.allocas: list[str] = []
    self.declares: set[str] = set()  # intrinsic declarations the function needs
    self.block = "entry"  # the block instructions currently go into (phi nodes name their predecessors)
    self._n = 0

  def _fresh(self, prefix: str) -> str:
    self._n += 1
    return f"{prefix}{self._n - 1}"

  def value(self, instr: str) -> str:
    """Emit `instr` and return the name of its result."""
    name = f"%{self._fresh('t')}"
    self.lines.append(f"  {name} = {instr}")
    return name

  def emit(self, instr: str) -> None:
    """Emit an instruction without a result (store, br)."""
    self.lines.append(f"  {instr}")

  def label(self, prefix: str) -> str:
    return self._fresh(prefix)

  def start_block(self, label: str) -> None:
    self.lines.append(f"\n{label}:")
    self.block = label

  def alloca(self, ty: str) -> str:
    name = f"%{self._fresh('slot')}"
    self.allocas.append(f"  {name} = alloca {ty}")
    return name

  def call(self, ret: str, fn: str, args: list[tuple[str, str]]) -> str:
    """Call intrinsic `fn` (declared once per module) on (type, value) arguments."""
    self.declares.add(f"declare {ret} @{fn}({', '.join(t for t, _ in args)})")
    return self.value(f"call {ret} @{fn}({', '.join(f'{t} {v}' for t, v in args)})")
