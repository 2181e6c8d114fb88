"""`python -m tg_cuda`: how CUDA is set up here (driver or mock, arch, NVRTC, ptxas)."""
from __future__ import annotations

import sys

from tg_cuda.device import get_driver, is_mock, unavailable_reason
from tg_cuda.mock.build import host_cxx_version
from tg_cuda.nvrtc import find_nvrtc, nvrtc_version
from tg_cuda.ptxas import ptxas_release


def report() -> str:
  if (why := unavailable_reason()):
    return f"CUDA is not usable here: {why}"
  driver = get_driver()
  ptxas = ptxas_release()
  lines = [f"device:  {driver.name}", f"arch:    {driver.arch}", f"nvrtc:   {'.'.join(map(str, nvrtc_version()))} ({find_nvrtc()})",
           f"ptxas:   {f'{ptxas[1][0]}.{ptxas[1][1]} ({ptxas[0]})' if ptxas else 'not found (kernels are not assembled here)'}"]
  if is_mock():
    lines.append(f"mock:    kernels built by {host_cxx_version()}")
  return "\n".join(lines)


if __name__ == "__main__":
  print(report())
  sys.exit(0)
