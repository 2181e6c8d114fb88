"""The op vocabulary shared by the lazy graph and kernel ASTs, LazyOp, and the Python meaning of each ALU op.

`python_alu` is the single definition of what every ALU op computes; the PYTHON device and constant
folding both use it, so every other backend is checked against it.
"""
from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum, auto
from typing import Any, Union

from tg.dtype import ConstType, DType, dtypes, round_float


class OpEnum(Enum):
  """An Enum hashed by identity, in C: ops are keys of the schedule and kernel caches and of the UOp graph's tables, hashed
  on every realize (Enum's own hash is a Python call, of the member's name). A member is one object per process, and no
  hash of one is ever kept across processes (disk keys are tg.diskcache.stable_key's text)."""
  __hash__ = object.__hash__


class UnaryOps(OpEnum):
  EXP2 = auto(); LOG2 = auto(); CAST = auto(); BITCAST = auto(); SIN = auto(); SQRT = auto()  # noqa: E702
  NEG = auto(); RECIP = auto()  # noqa: E702


class BinaryOps(OpEnum):
  ADD = auto(); MUL = auto(); IDIV = auto(); MAX = auto(); MOD = auto(); CMPLT = auto(); CMPNE = auto()  # noqa: E702
  XOR = auto(); AND = auto(); OR = auto(); SHL = auto(); SHR = auto()  # noqa: E702


class TernaryOps(OpEnum):
  WHERE = auto()
  MULACC = auto()  # a * b + c, rounded once: only the linearizer makes it, for renderers with Renderer.fused_mulacc


class ReduceOps(OpEnum):
  SUM = auto(); MAX = auto(); PROD = auto()  # noqa: E702


class BufferOps(OpEnum):
  """Leaves and root of a kernel AST. IOTA is the position its ShapeTracker reads (arg: a ConstBuffer, val unused)."""
  LOAD = auto(); CONST = auto(); STORE = auto(); IOTA = auto()  # noqa: E702


class MetaOps(OpEnum):
  """Lazy-graph ops that are not arithmetic: where data comes from and how it moves."""
  EMPTY = auto(); CONST = auto(); COPY = auto(); CONTIGUOUS = auto(); ASSIGN = auto()  # noqa: E702
  IOTA = auto()  # 0, 1, ..., n-1 (Tensor.arange): like CONST, no data, computed where it is read (see BufferOps.IOTA)
  SINK = auto()  # the root of a kernel with several outputs: src = its STOREs (output buffers 0..n-1)


Op = Union[UnaryOps, BinaryOps, TernaryOps, ReduceOps, BufferOps, MetaOps]
ALUOps = Union[UnaryOps, BinaryOps, TernaryOps]


@dataclass(frozen=True)
class MemBuffer:
  idx: int        # which kernel argument (0 is the output)
  dtype: DType
  st: Any         # ShapeTracker


@dataclass(frozen=True)
class ConstBuffer:
  val: ConstType
  dtype: DType
  st: Any         # ShapeTracker

  # compared by the constant's bits: -0.0 == 0.0 and nan != nan, but a kernel compiled for one constant must not
  # serve another, and a NaN constant should compile once
  def _key(self) -> tuple[Any, ...]:
    return (self.val.hex() if type(self.val) is float else self.val, self.dtype, self.st)

  def __eq__(self, other: object) -> bool:
    return isinstance(other, ConstBuffer) and self._key() == other._key()

  def __hash__(self) -> int:
    return hash(self._key())


@dataclass(frozen=True, eq=False)
class LazyOp:
  """One node of a kernel's AST. Compared by structure, so identical kernels share one compile."""
  op: Op
  src: tuple[LazyOp, ...] = ()
  arg: Any = None

  # An AST is a DAG: a value used twice by a value used twice... Hashing and comparing go through each node once (its
  # hash is made from its sources' cached hashes; equality remembers the pairs it compared), never once per path.
  def __post_init__(self) -> None:
    object.__setattr__(self, "_hash", hash((self.op, self.src, self.arg)))

  def __hash__(self) -> int:
    return self._hash  # type: ignore[attr-defined,no-any-return]

  def __eq__(self, other: object) -> bool:
    return isinstance(other, LazyOp) and _same_ast(self, other, set())

  @property
  def dtype(self) -> DType:
    if self.op in BufferOps:
      return self.arg.dtype  # type: ignore[no-any-return]
    if self.op in (UnaryOps.CAST, UnaryOps.BITCAST):
      return self.arg  # type: ignore[no-any-return]
    if self.op in (BinaryOps.CMPLT, BinaryOps.CMPNE):
      return dtypes.bool
    return self.src[-1].dtype

  def lazyops(self) -> list[LazyOp]:
    seen: dict[LazyOp, None] = {}

    def walk(x: LazyOp) -> None:
      if x in seen:
        return
      for s in x.src:
        walk(s)
      seen[x] = None
    walk(self)
    return list(seen)

  def __repr__(self) -> str:
    return pretty_lazyop(self)


def pretty_lazyop(x: LazyOp, indent: int = 0) -> str:
  """x as an indented tree, a node that several others read written out once, numbered (`#3 LazyOp(...)`), and then
  referred to by its number (`#3`): an AST is a DAG, and written out as a tree it is exponential in its depth (a float
  % is ten steps that each read the one before several times: DEBUG=3 printed it for minutes)."""
  readers: dict[LazyOp, int] = {}
  for op in x.lazyops():
    for s in op.src:
      readers[s] = readers.get(s, 0) + 1
  numbers: dict[LazyOp, int] = {}

  def write(y: LazyOp, indent: int) -> str:
    if y in numbers:
      return " " * indent + f"#{numbers[y]}"
    label = ""
    if readers.get(y, 0) > 1 and y.src:
      numbers[y] = len(numbers)
      label = f"#{numbers[y]} "
    arg = "" if y.arg is None else f", arg={y.arg}"
    if not y.src:
      return " " * indent + f"LazyOp({y.op}{arg})"
    inner = ",\n".join(write(s, indent + 2) for s in y.src)
    return " " * indent + f"{label}LazyOp({y.op}{arg}, src=(\n{inner}))"
  return write(x, indent)


# ---------- what each ALU op means, in Python ----------

def _safe(fn: Callable[..., Any], nan_on_error: bool = True) -> Callable[..., Any]:
  def f(*a: Any) -> Any:
    try:
      return fn(*a)
    except (ValueError, OverflowError, ZeroDivisionError):
      return math.nan if nan_on_error else 0
  return f


def _exp2(x: float) -> float:
  try:
    return 2.0 ** x
  except OverflowError:
    return math.inf


def _log2(x: float) -> float:
  if x < 0 or math.isnan(x):
    return math.nan
  return -math.inf if x == 0 else (math.inf if math.isinf(x) else math.log2(x))


def _sqrt(x: float) -> float:
  return math.nan if x < 0 or math.isnan(x) else (math.inf if math.isinf(x) else math.sqrt(x))


def _sin(x: float) -> float:
  return math.nan if math.isinf(x) or math.isnan(x) else math.sin(x)


def _recip(x: float) -> float:
  if x == 0:
    return math.copysign(math.inf, x)
  return 1.0 / x


def _idiv(a: int, b: int) -> int:
  # C semantics: truncate toward zero; division by zero gives 0 here (C leaves it undefined)
  return 0 if b == 0 else abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)


def _mod(a: int, b: int) -> int:
  return 0 if b == 0 else a - _idiv(a, b) * b


def _max(a: Any, b: Any) -> Any:
  if isinstance(a, float) and math.isnan(a):
    return a
  if isinstance(b, float) and math.isnan(b):
    return b
  return max(a, b)


python_alu: dict[Op, Callable[..., Any]] = {
  UnaryOps.EXP2: _exp2, UnaryOps.LOG2: _log2, UnaryOps.SIN: _sin, UnaryOps.SQRT: _sqrt,
  UnaryOps.NEG: lambda x: (not x) if isinstance(x, bool) else -x, UnaryOps.RECIP: _recip,
  BinaryOps.ADD: operator.add, BinaryOps.MUL: operator.mul, BinaryOps.IDIV: _idiv, BinaryOps.MOD: _mod,
  BinaryOps.MAX: _max, BinaryOps.CMPLT: operator.lt, BinaryOps.CMPNE: operator.ne,
  BinaryOps.XOR: operator.xor, BinaryOps.AND: operator.and_, BinaryOps.OR: operator.or_,
  BinaryOps.SHL: operator.lshift, BinaryOps.SHR: operator.rshift,
  TernaryOps.WHERE: lambda c, a, b: a if c else b,
  # exact for operands of float32 and narrower (their product fits a double), so one rounding to the dtype remains;
  # float64 is done exactly in exec_alu
  TernaryOps.MULACC: lambda a, b, c: a * b + c,
}


def exec_alu(op: Op, dtype: DType, operands: list[Any]) -> Any:
  """Apply `op` to Python values and wrap the result into `dtype`, as a device would compute it."""
  if op is TernaryOps.MULACC and dtype.scalar() == dtypes.float64 and all(math.isfinite(x) for x in operands):
    from fractions import Fraction
    a, b, c = (Fraction(x) for x in operands)
    return float(a * b + c)  # a fused multiply-add of doubles: the exact result, rounded once
  return truncate(dtype, python_alu[op](*operands))


def truncate(dtype: DType, x: Any) -> Any:
  """Round a Python value to what `dtype` can hold (int wrap-around, float32/16 rounding)."""
  if dtype == dtypes.bool:
    return bool(x)
  if dtypes.is_int(dtype):
    return dtypes.as_const(x, dtype)
  return round_float(float(x), dtype)


def _same_ast(a: LazyOp, b: LazyOp, seen: set[tuple[int, int]]) -> bool:
  if a is b:
    return True
  if a._hash != b._hash or a.op is not b.op or len(a.src) != len(b.src) or a.arg != b.arg:  # type: ignore[attr-defined]
    return False
  if (id(a), id(b)) in seen:
    return True
  seen.add((id(a), id(b)))
  return all(_same_ast(x, y, seen) for x, y in zip(a.src, b.src))
