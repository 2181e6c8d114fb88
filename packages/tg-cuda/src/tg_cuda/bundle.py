"""CUDABinary: what compiling one kernel produces, as the bytes the compile cache stores.

The PTX always; the cubin when it was assembled (by ptxas, or by NVRTC for a real GPU); with CUDA_MOCK=1 also
the same source built for the CPU as a shared object (see mock/).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

MAGIC = b"TGCUDA1\0"
_HEADER = struct.Struct("<8s4Q")


@dataclass(frozen=True)
class CUDABinary:
  arch: str            # e.g. "sm_80"
  ptx: bytes
  cubin: bytes = b""
  mock: bytes = b""    # the CPU shared object of CUDA_MOCK=1

  def image(self) -> bytes:
    """What cuModuleLoadData gets: the cubin, else the PTX (NUL-terminated, for the driver to assemble)."""
    return self.cubin if self.cubin else self.ptx + b"\0"

  def pack(self) -> bytes:
    parts = (self.arch.encode(), self.ptx, self.cubin, self.mock)
    return _HEADER.pack(MAGIC, *(len(p) for p in parts)) + b"".join(parts)

  @staticmethod
  def unpack(data: bytes) -> CUDABinary:
    if len(data) < _HEADER.size or (header := _HEADER.unpack_from(data))[0] != MAGIC:
      raise ValueError("not a tg-cuda kernel binary (it was made by another compiler or version)")
    sizes = header[1:]
    if _HEADER.size + sum(sizes) != len(data):
      raise ValueError(f"a damaged tg-cuda kernel binary: its header says {_HEADER.size + sum(sizes)} bytes, it has {len(data)}")
    parts, pos = [], _HEADER.size
    for n in sizes:
      parts.append(data[pos:pos + n])
      pos += n
    return CUDABinary(parts[0].decode(), parts[1], parts[2], parts[3])
