"""A version 2 plugin whose tg_device raises, as one probing a driver that crashes would: only its device breaks."""
from __future__ import annotations

from tg.plugins import DeviceSpec, hookimpl, split_device

TG_PLUGIN_API_VERSION = 2


@hookimpl
def tg_device(device: str) -> DeviceSpec | None:
  if split_device(device)[0] != "TOYBADSPEC":
    return None
  raise OSError("mydriver_probe() crashed")
