"""`python -m tg_amd`: how AMD is set up here (GPU or mock, gfx target, clang and lld)."""
from __future__ import annotations

import sys

from tg.runtime.gpu_mock import host_cxx_version
from tg_amd.device import get_driver, is_mock, unavailable_reason
from tg_amd.toolchain import find_clang, find_lld, toolchain_version


def report() -> str:
  if (why := unavailable_reason()):
    return f"AMD is not usable here: {why}"
  driver = get_driver()
  lines = [f"device:  {driver.name}", f"arch:    {driver.arch}", f"clang:   {find_clang()[0]}", f"ld.lld:  {find_lld()}",
           f"tools:   {toolchain_version()}"]
  if is_mock():
    lines.append(f"mock:    kernels built by {host_cxx_version()}")
  return "\n".join(lines)


if __name__ == "__main__":
  print(report())
  sys.exit(0)
