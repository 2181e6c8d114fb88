"""`python -m tg.devices`: every installed device, the package it comes from, and whether it is usable."""
from __future__ import annotations

import sys

from tg.device import Device
from tg.plugins import PluginError, hook, installed_devices


def report() -> str:
  rows = []
  for d in installed_devices():
    why = Device.availability(d.name)
    status = "usable" if why == "" else f"not usable: {why}"
    if why == "" and (note := _note(d.name)):
      status += f" ({note})"
    rows.append(f"{d.name:10s} {d.package or '?':12s} {d.version or '?':8s} {status}")
  if not rows:
    return "no tg devices installed: install one, e.g. `pip install tg-clang`"
  try:
    default = f"default device: {Device.DEFAULT}"
  except RuntimeError as e:
    default = str(e)
  return "\n".join(rows + [default])


def _note(name: str) -> str | None:
  try:
    return hook("tg_device_note", name)  # type: ignore[no-any-return]
  except PluginError:
    return None


def main() -> int:
  print(report())
  return 0


if __name__ == "__main__":
  sys.exit(main())
