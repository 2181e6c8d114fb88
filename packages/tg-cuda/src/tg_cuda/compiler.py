"""CUDACompiler: CUDA C++ -> a packed CUDABinary (see bundle.py).

NVRTC compiles the source to PTX for `arch`'s virtual architecture; ptxas, when one recent enough is on PATH,
assembles it into a cubin. Without ptxas a real GPU gets the cubin NVRTC assembles itself. With CUDA_MOCK=1 the
PTX is still made and assembled (so every kernel is checked by NVIDIA's tools) and the same source is also built
for the CPU, in parallel, as the shared object the mock driver runs.
"""
from __future__ import annotations

import hashlib
import os

from tg.device import Compiler
from tg.helpers import DEBUG
from tg_cuda import __version__
from tg_cuda.bundle import CUDABinary
from tg_cuda.mock.build import INCLUDE_DIR, cuda_mock_build, mock_build_key
from tg_cuda.nvrtc import compile_cuda, first_compile, nvrtc_version
from tg_cuda.ptxas import assemble, usable_ptxas

# no fused multiply-add contraction: the renderer declares strict_float, and the CPU build of mock mode
# (-ffp-contract=off) then computes bit for bit what the GPU does, transcendental functions aside
NVRTC_OPTIONS = ("--fmad=false",)


def _headers() -> dict[str, str]:
  """The headers kernels may include, by name (see renderer.py)."""
  out = {}
  for name in sorted(os.listdir(INCLUDE_DIR)):
    with open(os.path.join(INCLUDE_DIR, name)) as f:
      out[name] = f.read()
  return out


class CUDACompiler(Compiler):
  def __init__(self, arch: str, mock: bool = False, driver_cuda: tuple[int, int] | None = None) -> None:
    """`driver_cuda`: the CUDA version of the driver that will load the cubins (None: any, e.g. the mock)."""
    if not arch.startswith("sm_"):
      raise ValueError(f"a CUDA arch is sm_XX (e.g. sm_80 for A100, sm_89 for RTX 4090), not {arch!r}")
    self.arch, self.mock = arch, mock
    self.headers = _headers()
    nvrtc = nvrtc_version()
    # NVRTC's one compile with its own exit(4) SIGINT handler happens now, not in a user's realize
    first_compile(arch.replace("sm_", "compute_"))
    self.ptxas = usable_ptxas(nvrtc)
    if self.ptxas is not None and driver_cuda is not None and self.ptxas[1][0] > driver_cuda[0]:
      # a cubin of a newer major CUDA release may not load on this driver; NVRTC's own (12.x) always does
      if DEBUG >= 1:
        print(f"tg-cuda: ptxas {self.ptxas[1][0]}.{self.ptxas[1][1]} is newer than the driver's CUDA {driver_cuda[0]}: not used")
      self.ptxas = None
    parts = [f"nvrtc{nvrtc[0]}.{nvrtc[1]}", arch, f"ptxas{self.ptxas[1][0]}.{self.ptxas[1][1]}" if self.ptxas else "noptxas", __version__]
    files = "".join(self.headers.values())
    if mock:
      parts += ["mock", mock_build_key()]
    # the key names every tool and header a binary depends on: a change to any of them never reuses a stale one
    super().__init__(f"compile_cuda_{'_'.join(parts)}_{hashlib.sha256(files.encode()).hexdigest()[:12]}")

  def compile(self, src: str) -> bytes:
    build = cuda_mock_build(src) if self.mock else None
    try:
      virtual = self.arch.replace("sm_", "compute_")
      ptx, cubin = compile_cuda(src, virtual if (self.ptxas or self.mock) else self.arch, self.headers, NVRTC_OPTIONS)
      if self.ptxas is not None:
        cubin = assemble(self.ptxas[0], ptx, self.arch)
    except BaseException:
      if build is not None:
        build.cancel()
      raise
    return CUDABinary(self.arch, ptx, cubin, build.result() if build is not None else b"").pack()
