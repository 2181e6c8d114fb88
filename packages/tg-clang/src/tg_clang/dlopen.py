"""Loading a shared object that exists only as bytes (a compiled kernel, the thread pool): dlopen needs a file."""
from __future__ import annotations

import os
import tempfile
from typing import Any

import cffi


def dlopen_bytes(ffi: cffi.FFI, lib: bytes, prefix: str) -> Any:
  """`lib` loaded through `ffi`. Its file is unlinked right after loading: the mapping stays valid, and nothing is left
  behind in the temporary directory, even when loading fails."""
  fd, path = tempfile.mkstemp(prefix=prefix, suffix=".so")
  try:
    with os.fdopen(fd, "wb") as f:
      f.write(lib)
    return ffi.dlopen(path)
  finally:
    os.unlink(path)
