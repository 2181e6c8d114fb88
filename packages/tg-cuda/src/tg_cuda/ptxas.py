"""ptxas, the CUDA toolkit's PTX assembler, when one is on PATH (TG_PTXAS=path overrides).

A ptxas older than NVRTC rejects NVRTC's newer PTX ISA, so one is used only if its release is at least NVRTC's.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile

from tg.helpers import DEBUG
from tg.settings import Setting

TG_PTXAS = Setting("TG_PTXAS", "ptxas", "the ptxas CUDA assembles PTX with (a name on PATH or a path; unusable: NVRTC makes the cubin)")


class PtxasError(RuntimeError):
  pass


@functools.cache
def ptxas_release() -> tuple[str, tuple[int, int]] | None:
  """(path, (major, minor)) of the ptxas on PATH, or None."""
  path = shutil.which(TG_PTXAS.value)
  if path is None:
    return None
  out = subprocess.run([path, "--version"], capture_output=True, text=True, check=False).stdout
  m = re.search(r"release (\d+)\.(\d+)", out)
  return (path, (int(m.group(1)), int(m.group(2)))) if m else None


@functools.cache
def usable_ptxas(nvrtc: tuple[int, int]) -> tuple[str, tuple[int, int]] | None:
  """The ptxas to assemble NVRTC `nvrtc`'s PTX with, or None (saying why at DEBUG>=1)."""
  found = ptxas_release()
  if found is None:
    if DEBUG >= 1:
      print("tg-cuda: no ptxas on PATH, kernels are not assembled here (the driver assembles their PTX when loading)")
    return None
  if found[1] < nvrtc:
    if DEBUG >= 1:
      print(f"tg-cuda: {found[0]} is CUDA {found[1][0]}.{found[1][1]}, older than NVRTC {nvrtc[0]}.{nvrtc[1]}: not used")
    return None
  return found


def assemble(ptxas: str, ptx: bytes, arch: str) -> bytes:
  """PTX -> cubin for `arch` (sm_XX)."""
  with tempfile.TemporaryDirectory(prefix="tg_cuda_") as d:
    src, out = os.path.join(d, "kernel.ptx"), os.path.join(d, "kernel.cubin")
    with open(src, "wb") as f:
      f.write(ptx)
    proc = subprocess.run([ptxas, f"-arch={arch}", "-o", out, src], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
      raise PtxasError(f"ptxas failed to assemble a kernel for {arch}:\n{proc.stderr}\n--- PTX ---\n{ptx.decode(errors='replace')}")
    with open(out, "rb") as f:
      return f.read()
