"""`python -m tg.devices`: every installed device, the package it comes from, and whether it is usable."""
from __future__ import annotations

import sys

from tg.device import Device
from tg.plugins import installed_devices


def report() -> str:
  rows = []
  for d in installed_devices():
    why = Device.availability(d.name)
    status = "usable" if why == "" else f"not usable: {why}"
    rows.append(f"{d.name:10s} {d.package or '?':12s} {d.version or '?':8s} {status}")
  if not rows:
    return "no tg devices installed: install one, e.g. `pip install tg-clang`"
  try:
    default = f"default device: {Device.DEFAULT}"
  except RuntimeError as e:
    default = str(e)
  return "\n".join(rows + [default])


def main() -> int:
  print(report())
  return 0


if __name__ == "__main__":
  sys.exit(main())
