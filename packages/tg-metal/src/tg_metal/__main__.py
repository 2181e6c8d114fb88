"""`python -m tg_metal`: how METAL is set up here (GPU or mock, compilers)."""
from __future__ import annotations

import sys

from tg_metal.device import get_driver, is_mock, unavailable_reason


def report() -> str:
  if (why := unavailable_reason()):
    return f"METAL is not usable here: {why}"
  lines = [f"device:  {get_driver().name}"]
  if is_mock():
    from tg.runtime.gpu_mock import host_cxx_version
    from tg_metal.mock.check import check_cxx
    lines += [f"check:   {check_cxx()} -fsyntax-only", f"build:   {host_cxx_version()}"]
  else:
    from tg_metal.compiler import xcrun_metal_version
    lines.append(f"compile: {xcrun_metal_version() or 'newLibraryWithSource (no xcrun metal)'}")
  return "\n".join(lines)


if __name__ == "__main__":
  print(report())
  sys.exit(0)
