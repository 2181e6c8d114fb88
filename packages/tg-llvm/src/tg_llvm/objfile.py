"""What a compiled object file needs from outside: the names of its undefined symbols.

The JIT resolves them in this process (memset, memcpy from libc); a name it can't find would be called as
address 0 and crash the interpreter, so the runtime checks them first and raises instead.
"""
from __future__ import annotations

import ctypes
import functools
import struct

_SHT_SYMTAB = 2
_SHDR = struct.Struct("<IIQQQQIIQQ")  # name, type, flags, addr, offset, size, link, info, addralign, entsize
_SYM = struct.Struct("<IBBHQQ")       # name, info, other, shndx, value, size


def undefined_symbols(obj: bytes) -> list[str]:
  """The undefined symbols of a little-endian ELF64 object ([] for any other format: there is nothing to check)."""
  if obj[:4] != b"\x7fELF" or obj[4] != 2 or obj[5] != 1:
    return []
  (shoff,) = struct.unpack_from("<Q", obj, 0x28)
  shentsize, shnum = struct.unpack_from("<HH", obj, 0x3A)
  sections = [_SHDR.unpack_from(obj, shoff + k * shentsize) for k in range(shnum)]
  names = []
  for sh in sections:
    if sh[1] != _SHT_SYMTAB:
      continue
    strtab = sections[sh[6]][4]
    for off in range(sh[4] + _SYM.size, sh[4] + sh[5], _SYM.size):  # entry 0 is the null symbol
      name, _, _, shndx, _, _ = _SYM.unpack_from(obj, off)
      if shndx == 0 and name:  # SHN_UNDEF
        start = strtab + name
        names.append(obj[start:obj.index(b"\0", start)].decode())
  return names


@functools.cache
def _process() -> ctypes.CDLL:
  return ctypes.CDLL(None)


def missing_symbols(obj: bytes) -> list[str]:
  """The undefined symbols of `obj` that this process can't provide (the GOT is made by the JIT's linker)."""
  return [s for s in undefined_symbols(obj) if s != "_GLOBAL_OFFSET_TABLE_" and not hasattr(_process(), s)]
