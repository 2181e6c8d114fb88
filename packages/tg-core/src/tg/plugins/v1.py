"""Plugins written for API version 1 keep running: their per-part hooks are read into a version 2 DeviceSpec.

Version 1 hooks got the device name without its instance number and gave one set of parts for every instance;
so here every instance of a version 1 device gets fresh parts from the same hooks, as version 1 did. Loading
such a plugin warns once (DeprecationWarning) with the migration note: docs/plugin-versioning.md.
"""
from __future__ import annotations

from typing import Any

import pluggy

from tg.plugins import hookspecs_v1
from tg.plugins.contract import MIGRATION_NOTES, PLUGIN_API_VERSION, DeviceSpec, split_device

pm = pluggy.PluginManager("tg")
pm.add_hookspecs(hookspecs_v1)


def deprecation(module: str, device: str) -> str:
  return (f"plugin {module} for device {device} was written for tg plugin API version 1; this tg-core speaks version "
          f"{PLUGIN_API_VERSION} and runs it through a compatibility layer that the next API version removes. "
          f"Move it to the tg_device hook: see {MIGRATION_NOTES}")


def spec_from_hooks(device: str) -> DeviceSpec | None:
  """A DeviceSpec for `device` from the version 1 hooks registered here, or None when no version 1 plugin owns it."""
  base, _ = split_device(device)
  h = pm.hook

  def call(name: str) -> Any:
    return getattr(h, name)(device=base)

  available = call("tg_device_available")
  if available is None:
    return None
  runtime = call("tg_runtime")
  return DeviceSpec(allocator=lambda: call("tg_allocator"), renderer=lambda: call("tg_renderer"),
                    compiler=lambda: call("tg_compiler"), program=runtime, graph=call("tg_graph"),
                    available=available, priority=int(call("tg_device_priority") or 0), note=call("tg_device_note") or "")

