"""Data types, their promotion lattice (tinygrad's, which follows JAX's), and the default float."""
from __future__ import annotations

import builtins
import functools
import math
import struct
from dataclasses import dataclass
from typing import Any, Final, Union

from tg.settings import DEFAULT_FLOAT

ConstType = Union[float, int, bool]


@dataclass(frozen=True, order=True)
class DType:
  priority: int      # larger wins in promotion ties
  itemsize: int      # bytes per element
  name: str
  fmt: str | None    # struct/numpy format char, None when numpy has no such type (bfloat16)
  count: int = 1     # vector width; >1 only inside the code generator

  def __repr__(self) -> str:
    return f"dtypes.{self.name}" if self.count == 1 else f"dtypes.{self.scalar().name}.vec({self.count})"

  # hashed once: dtypes are in the keys of the schedule and kernel caches, looked up on every realize
  @functools.cached_property
  def _hash(self) -> int:
    return hash((type(self), self.priority, self.itemsize, self.name, self.fmt, self.count))

  def __hash__(self) -> int:
    return self._hash

  def __reduce__(self) -> tuple[Any, ...]:  # the fields only: a pickle must not carry this process's cached hash
    return type(self), (self.priority, self.itemsize, self.name, self.fmt, self.count)

  def vec(self, sz: int) -> DType:
    assert self.count == 1, f"can't vectorize {self} again"
    return self if sz == 1 else DType(self.priority, self.itemsize * sz, f"{self.name}{sz}", None, sz)

  def scalar(self) -> DType:
    return self if self.count == 1 else _by_name[self.name[:-len(str(self.count))]]  # the name is the scalar's + count

  def ptr(self) -> PtrDType:
    return PtrDType(self.priority, self.itemsize, self.name, self.fmt, self.count)

  @property
  def np(self) -> Any:
    """The numpy dtype used to move this dtype's data in and out (bfloat16 travels as float32)."""
    import numpy as np
    return np.dtype(self.fmt) if self.fmt is not None else None


@dataclass(frozen=True, order=True, repr=False)
class PtrDType(DType):
  """A pointer to a buffer of a dtype: the type of a kernel's buffer arguments."""

  def __repr__(self) -> str:
    return f"ptr({super().__repr__()})"

  def __hash__(self) -> int:
    return self._hash

  @property
  def base(self) -> DType:
    """The element type this pointer points to."""
    return DType(self.priority, self.itemsize, self.name, self.fmt, self.count)


class dtypes:
  bool: Final[DType] = DType(0, 1, "bool", "?")
  int8: Final[DType] = DType(1, 1, "char", "b")
  uint8: Final[DType] = DType(2, 1, "unsigned char", "B")
  int16: Final[DType] = DType(3, 2, "short", "h")
  uint16: Final[DType] = DType(4, 2, "unsigned short", "H")
  int32: Final[DType] = DType(5, 4, "int", "i")
  uint32: Final[DType] = DType(6, 4, "unsigned int", "I")
  int64: Final[DType] = DType(7, 8, "long", "q")
  uint64: Final[DType] = DType(8, 8, "unsigned long", "Q")
  float16: Final[DType] = DType(9, 2, "half", "e")
  bfloat16: Final[DType] = DType(10, 2, "__bf16", None)
  float32: Final[DType] = DType(11, 4, "float", "f")
  float64: Final[DType] = DType(12, 8, "double", "d")

  # aliases
  half = float16
  float = float32
  double = float64
  uchar, ushort, uint, ulong = uint8, uint16, uint32, uint64
  char, short, int, long = int8, int16, int32, int64

  default_float: DType = float32
  default_int: DType = int32

  @staticmethod
  def is_float(x: DType) -> builtins.bool:
    return x.scalar() in _floats

  @staticmethod
  def is_int(x: DType) -> builtins.bool:
    return x.scalar() in _ints

  @staticmethod
  def is_unsigned(x: DType) -> builtins.bool:
    return x.scalar() in _uints

  @staticmethod
  def from_py(x: Any) -> DType:
    """The dtype a Python value becomes: float -> default float, int -> default int, bool -> bool. An int past the
    default int's range is an int64 (a uint64 from 2^63), as numpy and torch keep it: wrapped, Tensor(2**40) was 0."""
    if isinstance(x, float):
      return dtypes.default_float
    if isinstance(x, bool):
      return dtypes.bool
    if isinstance(x, int):
      if dtypes.min(dtypes.default_int) <= x <= dtypes.max(dtypes.default_int):
        return dtypes.default_int
      if -(1 << 63) <= x < (1 << 63):
        return dtypes.int64
      if 0 <= x < (1 << 64):
        return dtypes.uint64
      raise OverflowError(f"{x} is beyond every int dtype (int64 and uint64)")
    if isinstance(x, (list, tuple)):
      return max((dtypes.from_py(y) for y in x), default=dtypes.default_float)
    raise TypeError(f"can't infer a dtype from {type(x).__name__} {x!r}")

  @staticmethod
  def from_np(npdtype: Any) -> DType:
    import numpy as np
    for d in _by_fmt.values():  # compare numpy dtypes, not chars: int64 is 'l' or 'q' depending on the platform
      if np.dtype(d.fmt) == np.dtype(npdtype):
        return d
    raise TypeError(f"numpy dtype {np.dtype(npdtype)} has no tg dtype")

  @staticmethod
  def as_const(val: Any, dtype: DType) -> ConstType:
    """`val` as a Python value of `dtype` (wrapping ints as C would, rounding floats to the dtype's precision)."""
    if (rnd := _ROUND.get(dtype)) is not None:  # a scalar float dtype, the common case, first
      return rnd(float(val))  # type: ignore[no-any-return]
    if dtypes.is_int(dtype):
      bits = dtype.itemsize * 8
      if isinstance(val, float) and dtype != dtypes.uint64:
        # as a kernel converts (codegen/lowerer.py _float_to_int): through int32, or int64 for uint32 and int64, where
        # NaN, the infinities and values out of that range are its lowest value; then wrapped
        via = 64 if bits >= 32 and dtype != dtypes.int32 else 32
        v = int(val) if math.isfinite(val) and -2.0 ** (via - 1) <= val < 2.0 ** (via - 1) else -(1 << (via - 1))
      else:
        v = int(val) if not (isinstance(val, float) and not math.isfinite(val)) else 0
      v &= (1 << bits) - 1
      return v - (1 << bits) if not dtypes.is_unsigned(dtype) and v >= 1 << (bits - 1) else v
    if dtype == dtypes.bool:
      return bool(val)
    return round_float(float(val), dtype)

  @staticmethod
  def significand_bits(dtype: DType) -> builtins.int:
    """The bits of a float dtype's significand, the implicit leading one included (float32: 24): integers up to
    2^bits are exact in it, and a float of magnitude 2^(bits-1) or more is an integer."""
    return _SIGNIFICAND[dtype.scalar()]

  @staticmethod
  def min(dtype: DType) -> ConstType:
    if dtypes.is_int(dtype):
      return 0 if dtypes.is_unsigned(dtype) else -(2 ** (dtype.itemsize * 8 - 1))
    return False if dtype == dtypes.bool else -math.inf

  @staticmethod
  def max(dtype: DType) -> ConstType:
    if dtypes.is_int(dtype):
      return 2 ** (dtype.itemsize * 8 - (0 if dtypes.is_unsigned(dtype) else 1)) - 1
    return True if dtype == dtypes.bool else math.inf


_F32, _F16, _U32 = struct.Struct("<f"), struct.Struct("<e"), struct.Struct("<I")


def _packed(st: struct.Struct, x: float) -> float:
  """x rounded to the float format `st` packs (to nearest even): past its largest, an infinity."""
  try:
    return st.unpack(st.pack(x))[0]  # type: ignore[no-any-return]
  except OverflowError:  # (struct refuses a finite x that rounds to inf)
    return math.copysign(math.inf, x)


def round_f32(x: float) -> float:
  """x rounded to float32, as a C cast from double rounds it."""
  return _packed(_F32, x)


def _round_f16(x: float) -> float:
  """Straight from the double, as a kernel's cast from float64 and numpy round (torch goes through float32 first)."""
  return _packed(_F16, x)


def _round_bf16(x: float) -> float:
  """To float32 first, then to nearest even on its top 16 bits, as the emulation's cast (and torch) does."""
  if x != x:  # nan stays nan (the rounding below could carry a nan's low payload bits into inf)
    return x
  (bits,) = _U32.unpack(_F32.pack(round_f32(x)))
  return _F32.unpack(_U32.pack((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000))[0]  # type: ignore[no-any-return]


def round_float(x: float, dtype: DType) -> float:
  """x as the float `dtype` holds it: a constant must be the number a kernel computes with, or a comparison with a
  scalar and a cast folded at build time disagree with the tensor's own values (bfloat16 0.1 == 0.1 was False)."""
  return _ROUND.get(dtype.scalar(), float)(x)


_floats = {dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64}
# the scalar float dtypes as a tuple, float32 first: the hot paths that ask `dt in PLAIN_FLOATS` for every op built
# (a Python scalar operand, a constant) find it at once, a tuple's `in` trying identity before equality
PLAIN_FLOATS = (dtypes.float32, dtypes.float16, dtypes.bfloat16, dtypes.float64)
_uints = {dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64}
_ints = _uints | {dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64}
_by_name: dict[str, DType] = {v.name: v for v in vars(dtypes).values() if isinstance(v, DType)}
# each float dtype's rounding, found by one dict lookup (it tries identity first): as_const is on the hot path
_ROUND: dict[DType, Any] = {dtypes.float32: round_f32, dtypes.float16: _round_f16, dtypes.bfloat16: _round_bf16,
                            dtypes.float64: float}
_SIGNIFICAND: dict[DType, int] = {dtypes.float64: 53, dtypes.float32: 24, dtypes.float16: 11, dtypes.bfloat16: 8}
_by_fmt: dict[str, DType] = {v.fmt: v for v in _by_name.values() if v.fmt is not None}
# the user-facing names ("float32", "int8", ...) for lookups such as Tensor(x, dtype="float32")
DTYPES_DICT: dict[str, DType] = {k: v for k, v in vars(dtypes).items() if isinstance(v, DType) and not k.startswith("default")}

if (_default := DEFAULT_FLOAT.value):
  if _default.lower() not in DTYPES_DICT or not dtypes.is_float(DTYPES_DICT[_default.lower()]):
    raise ValueError(f"DEFAULT_FLOAT={_default} is not a float dtype (use one of float16, bfloat16, float32, float64)")
  dtypes.default_float = DTYPES_DICT[_default.lower()]


def to_dtype(x: DType | str) -> DType:
  if isinstance(x, DType):
    return x
  if isinstance(x, str) and x in DTYPES_DICT:
    return DTYPES_DICT[x]
  raise TypeError(f"unknown dtype {x!r}; use a tg.dtypes member such as dtypes.float32")


# The promotion lattice: each dtype lists the dtypes it promotes to directly. Unsigned and signed ints
# meet at the next wider signed int; ints meet floats at float16/bfloat16 (as JAX, not numpy).
_promo_lattice: dict[DType, list[DType]] = {
  dtypes.bool: [dtypes.int8, dtypes.uint8], dtypes.int8: [dtypes.int16], dtypes.int16: [dtypes.int32],
  dtypes.int32: [dtypes.int64], dtypes.int64: [dtypes.float16, dtypes.bfloat16],
  dtypes.uint8: [dtypes.int16, dtypes.uint16], dtypes.uint16: [dtypes.int32, dtypes.uint32],
  dtypes.uint32: [dtypes.int64, dtypes.uint64], dtypes.uint64: [dtypes.float16, dtypes.bfloat16],
  dtypes.float16: [dtypes.float32], dtypes.bfloat16: [dtypes.float32], dtypes.float32: [dtypes.float64],
}


@functools.cache  # promotion runs on every binary op: the lattice is fixed, so remember it
def _ancestors(d: DType) -> frozenset[DType]:
  return frozenset({d}.union(*[_ancestors(p) for p in _promo_lattice.get(d, [])]))


def least_upper_dtype(*ds: DType) -> DType:
  """The smallest dtype every one of `ds` promotes to."""
  common = frozenset.intersection(*[_ancestors(d) for d in ds])
  return min(common) if common else dtypes.float64


def least_upper_float(dt: DType) -> DType:
  return dt if dtypes.is_float(dt) else least_upper_dtype(dt, dtypes.default_float)
