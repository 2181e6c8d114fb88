"""Decompress one zip member with its size bounded and its CRC checked.

zipfile trusts the archive: it hands back the declared size after decompressing however much the stream holds (a
few KB of deflate or bzip2 can expand to GiBs before it stops), and a stream that inflates to more than it declares
is cut silently, with the CRC checked on the cut. A weights loader knows how many bytes each storage must hold, so it
decompresses in bounded steps, stops the moment the output passes that count, and checks the count and the CRC."""
from __future__ import annotations

import bz2
import lzma
import zipfile
import zlib
from typing import Protocol

_READ = 1 << 16  # compressed bytes read from the file per step
_STEP = 1 << 20  # most bytes one decompress call may produce


class _Decompressor(Protocol):
  def decompress(self, data: bytes, max_length: int = -1) -> bytes: ...
  @property
  def eof(self) -> bool: ...
  @property
  def needs_input(self) -> bool: ...


class _Inflate:
  """Raw deflate (zip stores no zlib header) behind the same decompress(data, max_length) as bz2's and lzma's."""

  def __init__(self) -> None:
    self._z = zlib.decompressobj(-15)

  def decompress(self, data: bytes, max_length: int = -1) -> bytes:
    # zlib keeps input it didn't use in unconsumed_tail rather than inside: feed it back first
    return self._z.decompress(self._z.unconsumed_tail + data, max(max_length, 0))

  @property
  def eof(self) -> bool:
    return self._z.eof

  @property
  def needs_input(self) -> bool:
    return not self._z.unconsumed_tail


def _lzma_decompressor(props: bytes) -> lzma.LZMADecompressor:
  """zip's LZMA members start with a 4-byte header (version, properties size) and LZMA1's 5 property bytes: one byte
  packing lc, lp and pb, then the dictionary size."""
  d = props[0]
  if d >= 9 * 5 * 5:
    raise ValueError(f"bad LZMA properties byte {d}")
  lc, lp, pb = d % 9, d // 9 % 5, d // 45
  dict_size = int.from_bytes(props[1:5], "little")
  return lzma.LZMADecompressor(lzma.FORMAT_RAW, filters=[{"id": lzma.FILTER_LZMA1, "lc": lc, "lp": lp, "pb": pb, "dict_size": dict_size}])


def read_compressed_member(path: str, info: zipfile.ZipInfo, data_offset: int) -> bytes:
  """The `info.file_size` bytes of a compressed member whose compressed bytes start at `data_offset` of `path`.

  Raises ValueError, saying what is wrong, when the member is encrypted or in a method this doesn't read, when its
  stream is corrupt or ends early, when it decompresses to more or fewer bytes than declared, or when its CRC fails.
  Memory stays within the declared size plus one step, whatever the stream holds."""
  want, method = info.file_size, info.compress_type
  if info.flag_bits & 1:
    raise ValueError("it is encrypted")
  with open(path, "rb") as f:
    f.seek(data_offset)
    left = info.compress_size

    def read(n: int) -> bytes:
      nonlocal left
      chunk = f.read(min(n, left))
      left -= len(chunk)
      return chunk

    dec: _Decompressor
    if method == zipfile.ZIP_DEFLATED:
      dec = _Inflate()
    elif method == zipfile.ZIP_BZIP2:
      dec = bz2.BZ2Decompressor()
    elif method == zipfile.ZIP_LZMA:
      head = read(4)
      props = read(int.from_bytes(head[2:4], "little")) if len(head) == 4 else b""
      if len(props) < 5:
        raise ValueError("its LZMA header is cut short")
      dec = _lzma_decompressor(props)
    else:
      raise ValueError(f"it is compressed with zip method {method}, which torch_load doesn't read (stored, deflate, bzip2 and lzma are read)")
    out, got, crc = bytearray(), 0, 0
    while not dec.eof:
      data = read(_READ) if dec.needs_input else b""
      # ask for at most one byte past the declared size: a stream that holds more is caught without inflating it
      try:
        piece = dec.decompress(data, min(_STEP, want - got + 1))
      except (zlib.error, OSError, lzma.LZMAError, EOFError) as e:
        raise ValueError(f"its compressed stream is corrupt ({e})") from e
      got += len(piece)
      if got > want:
        raise ValueError(f"it decompresses to more than the {want} bytes the archive declares")
      out += piece
      crc = zlib.crc32(piece, crc)
      if not piece and not data:  # nothing in, nothing out, not at the end: the stream is cut short
        if method == zipfile.ZIP_LZMA and not info.flag_bits & 2 and got == want:
          break  # an LZMA stream written without an end marker ends at the declared size
        raise ValueError(f"its compressed stream ends early, after {got} bytes, not the {want} declared")
  if got != want:
    raise ValueError(f"it decompresses to {got} bytes, not the {want} bytes the archive declares")
  if crc != info.CRC:
    raise ValueError(f"its CRC is {crc:08x}, not the {info.CRC:08x} the archive declares")
  return bytes(out)

