"""`python -m tg.devices`: every installed device, the package it comes from, whether it is usable, and the default.
`python -m tg.devices --settings`: every setting (environment variable) as the markdown table docs/devices.md holds."""
from __future__ import annotations

import sys

from tg.device import Device
from tg.plugins import PluginError, device_spec, installed_devices


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
    default = f"default device: {Device.describe_default()}"
  except RuntimeError as e:
    default = str(e)
  return "\n".join(rows + [default])


def _note(name: str) -> str | None:
  try:
    return device_spec(name).note or None
  except PluginError:
    return None


def main(argv: list[str] | None = None) -> int:
  if "--settings" in (sys.argv[1:] if argv is None else argv):
    import tg.runtime.gpu_mock  # noqa: F401  (declares tg-core settings only the GPU packages' mock modes import)
    from tg.settings import markdown_table
    print(markdown_table())
  else:
    print(report())
  return 0


if __name__ == "__main__":
  sys.exit(main())
