"""How tg's dtypes are spelled in LLVM IR: register types, memory types and constants."""
from __future__ import annotations

import struct

from tg.dtype import DType, dtypes
from tg.ops import truncate

_FLOATS = {dtypes.float16: "half", dtypes.float32: "float", dtypes.float64: "double"}


def ll_type(dt: DType) -> str:
  """The type a value of `dt` has in registers (a bool is an i1, a vector <n x T>)."""
  if dt.count > 1:
    return f"<{dt.count} x {ll_type(dt.scalar())}>"
  if dt == dtypes.bool:
    return "i1"
  if dtypes.is_int(dt):
    return f"i{dt.itemsize * 8}"
  if dt in _FLOATS:
    return _FLOATS[dt]
  raise NotImplementedError(f"LLVM has no type for {dt}")  # bfloat16 is emulated by core, never rendered


def mem_type(dt: DType) -> str:
  """The type a value of `dt` has in a buffer: a bool takes a whole byte there, as in C and numpy."""
  return "i8" if dt == dtypes.bool else ll_type(dt)


def ll_const(x: object, dt: DType) -> str:
  """`x` as an LLVM constant of `dt`. Floats are written as hex bits, the only exact spelling for every value
  (nan, inf, denormals); half takes its own 16-bit form, float is given as the double of the same value.
  Of a vector dtype: the constant in every lane."""
  if dt.count > 1:
    return "<" + ", ".join([f"{ll_type(dt.scalar())} {ll_const(x, dt.scalar())}"] * dt.count) + ">"
  if dt == dtypes.bool:
    return "true" if x else "false"
  if dtypes.is_int(dt):
    assert isinstance(x, int)
    bits = dt.itemsize * 8
    v = x & ((1 << bits) - 1)
    return str(v - (1 << bits) if v >= 1 << (bits - 1) else v)  # LLVM reads integer constants as signed
  assert isinstance(x, (int, float))
  v = truncate(dt, float(x))  # round to the dtype first: a float constant must be exact in its type
  if dt == dtypes.float16:
    return f"0xH{struct.unpack('<H', struct.pack('<e', v))[0]:04X}"
  return f"0x{struct.unpack('<Q', struct.pack('<d', v))[0]:016X}"


def intrinsic_suffix(dt: DType) -> str:
  """How an overloaded intrinsic's name spells a type: f32 or i16, v16f32 for a vector."""
  scalar = f"{'f' if dtypes.is_float(dt) else 'i'}{dt.scalar().itemsize * 8}"
  return scalar if dt.count == 1 else f"v{dt.count}{scalar}"
