"""The syntax and type check of METAL_MOCK=1: a kernel's MSL through `clang++ -fsyntax-only` against check/metal_stdlib.

clang parses the source as C++17 for an arm64 Apple target (so half is a real 16-bit float type and long is 64 bits,
as in MSL) with Metal's address spaces as clang address spaces, warnings as errors except for Metal's [[attributes]].
Two things clang can't see are checked on the text: MSL has no `long long` (so no `ll` literals), and a threadgroup
array, which clang allows only as a static, is declared `static threadgroup` for it (mock_source).
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess

from tg.settings import Setting

TG_METAL_CHECK_CXX = Setting("TG_METAL_CHECK_CXX", "", "the clang++ METAL_MOCK=1 checks MSL with (unset: clang++ on PATH)")
MOCK_DIR = os.path.dirname(os.path.abspath(__file__))
CHECK_INCLUDE = os.path.join(MOCK_DIR, "check")
CHECK_FLAGS = ["-fsyntax-only", "-std=c++17", "-target", "arm64-apple-macos13", "-nostdinc", "-nostdinc++", "-Werror",
               # Metal's [[attributes]]; x != x, core's NaN test
               "-Wno-unknown-attributes", "-Wno-tautological-compare", "-fno-caret-diagnostics", "-I", CHECK_INCLUDE, "-x", "c++", "-"]
# a threadgroup array declaration at the start of a line (the renderer's render_local); casts to threadgroup pointers
# are inside expressions and never start a line
_THREADGROUP_DECL = re.compile(r"^(\s*)threadgroup (?=[\w ]+ \w+\[\d+\];)", re.M)
# MSL's 64-bit ints are long/ulong; `long long` and its literals don't exist
_LONG_LONG = re.compile(r"\blong\s+long\b|\b\d+u?ll\b", re.I)
_BUFFER_INDEX = re.compile(r"\[\[buffer\((\d+)\)\]\]")


class MetalCheckError(RuntimeError):
  pass


@functools.cache
def check_cxx() -> str | None:
  """The clang++ the check runs, or None."""
  for cxx in ([TG_METAL_CHECK_CXX.value] if TG_METAL_CHECK_CXX.value else ["clang++"]):
    if (path := shutil.which(cxx)) is not None:
      return path
  return None


def mock_source(src: str) -> str:
  """The MSL as the mock's compilers read it: threadgroup arrays become function statics (one copy, which the
  threadgroup's threads share, as Metal's threadgroup memory)."""
  return _THREADGROUP_DECL.sub(r"\1static threadgroup ", src)


class MetalCheck:
  """One check of `src`, started at construction (a separate process, run beside the CPU build); `result()` waits
  and raises MetalCheckError with clang's diagnostics if the MSL is wrong."""

  def __init__(self, src: str) -> None:
    self.src = src
    if (m := _LONG_LONG.search(src)) is not None:
      raise MetalCheckError(f"MSL has no `long long` (64-bit ints are long and ulong, literals 5l/5ul): {m.group(0)!r}\n--- source ---\n{src}")
    # the argument table: each [[buffer(n)]] once, 0 to 30 (what the runtime binds with setBuffer/setBytes atIndex:)
    if (idx := [int(i) for i in _BUFFER_INDEX.findall(src)]) and (len(set(idx)) != len(idx) or max(idx) > 30):
      raise MetalCheckError(f"the kernel's [[buffer(n)]] indices {idx} repeat or pass 30\n--- source ---\n{src}")
    cxx = check_cxx()
    if cxx is None:
      raise MetalCheckError("METAL_MOCK=1 checks every kernel's MSL with clang++: install clang (apt-get install clang), "
                            "or name one with TG_METAL_CHECK_CXX")
    self.proc = subprocess.Popen([cxx, *CHECK_FLAGS], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert self.proc.stdin is not None
    try:
      self.proc.stdin.write(mock_source(src).encode())
      self.proc.stdin.close()
    except BrokenPipeError:
      pass

  def result(self) -> None:
    assert self.proc.stderr is not None
    err = self.proc.stderr.read()
    self.proc.wait()
    if self.proc.returncode != 0:
      raise MetalCheckError(f"the MSL check (clang++ -fsyntax-only, METAL_MOCK=1) failed:\n{err.decode(errors='replace')}--- source ---\n{self.src}")

  def cancel(self) -> None:
    """Stop the check and reap it. It runs while another exception (a failed CPU build, a Ctrl-C) is on its way, so it
    never raises: not `communicate()`, which flushes the stdin closed above and raised ValueError over the Ctrl-C."""
    if self.proc.poll() is None:
      self.proc.kill()
    for pipe in (self.proc.stdout, self.proc.stderr):
      if pipe is not None:
        pipe.close()
    self.proc.wait()


def check_msl(src: str) -> None:
  """Check `src` now (see MetalCheck)."""
  MetalCheck(src).result()
