"""The tg plugin contract, API version 2: the hooks a device package implements.

A device package declares an entry point in the group ``tg.devices``; the key is the device name in upper case
and the value is the module holding its hook implementation, e.g. in pyproject.toml::

    [project.entry-points."tg.devices"]
    CLANG = "tg_clang.plugin"

That module sets ``TG_PLUGIN_API_VERSION = 2`` and implements ``tg_device`` with ``@tg.plugins.hookimpl``. tg
imports the module on first use of the device, checks the version, then asks it for each instance's spec.

A package that replaces a part of another package's device (a faster compiler, an instrumented allocator) says so
in the group ``tg.overrides``, keyed by the device it changes, and implements ``tg_device_override``::

    [project.entry-points."tg.overrides"]
    CLANG = "tg_fastcc.override"

Whenever that device is asked for, tg loads its plugin and every override declared for it (whatever was imported
before), and passes the spec through each override in the order of their module names.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
  from tg.plugins.contract import DeviceSpec

hookspec = pluggy.HookspecMarker("tg")


@hookspec(firstresult=True)
def tg_device(device: str) -> DeviceSpec | None:  # type: ignore[empty-body]
  """The DeviceSpec of one device instance, or None when `device` is not this plugin's.

  `device` is the full canonical name: ``"CLANG"`` for the first instance, ``"CLANG:1"`` for the second
  (tg.plugins.split_device splits it). Called with a base name (instance 0) to ask whether the device is usable, and
  once per instance when it opens: the spec's part factories are then called, so state made by them (a context, a
  queue, an ordinal) belongs to that instance alone. Must be cheap and must not raise for a device that is not usable
  here: say why in ``DeviceSpec.available`` instead."""


@hookspec
def tg_device_override(device: str, spec: DeviceSpec) -> DeviceSpec | None:  # type: ignore[empty-body]
  """Change another plugin's device: return a new spec (``dataclasses.replace(spec, compiler=...)``) for `device`,
  or None to leave it. Called only for the devices the plugin names in its ``tg.overrides`` entry points."""
