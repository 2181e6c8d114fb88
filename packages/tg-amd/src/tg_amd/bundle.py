"""AMDBinary: what compiling one kernel produces, as the bytes the compile cache stores: the code object (the ELF
hipModuleLoadData loads) and, with AMD_MOCK=1, the same source built for the CPU as a shared object (see mock/)."""
from __future__ import annotations

import struct
from dataclasses import dataclass

MAGIC = b"TGAMD01\0"
_HEADER = struct.Struct("<8s3Q")


@dataclass(frozen=True)
class AMDBinary:
  arch: str          # e.g. "gfx1100"
  code_object: bytes
  mock: bytes = b""  # the CPU shared object of AMD_MOCK=1

  def pack(self) -> bytes:
    parts = (self.arch.encode(), self.code_object, self.mock)
    return _HEADER.pack(MAGIC, *(len(p) for p in parts)) + b"".join(parts)

  @staticmethod
  def unpack(data: bytes) -> AMDBinary:
    if len(data) < _HEADER.size or (header := _HEADER.unpack_from(data))[0] != MAGIC:
      raise ValueError("not a tg-amd kernel binary (it was made by another compiler or version)")
    sizes = header[1:]
    if _HEADER.size + sum(sizes) != len(data):
      raise ValueError(f"a damaged tg-amd kernel binary: its header says {_HEADER.size + sum(sizes)} bytes, it has {len(data)}")
    parts, pos = [], _HEADER.size
    for n in sizes:
      parts.append(data[pos:pos + n])
      pos += n
    return AMDBinary(parts[0].decode(), parts[1], parts[2])
