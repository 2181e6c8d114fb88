"""Finding and loading device plugins. The public surface is `hookimpl`, `PLUGIN_API_VERSION` and the
hookspecs module; the loading machinery below is private to tg.

Listing devices reads entry-point metadata only; a plugin module is imported (and registered with
the pluggy PluginManager) the first time its device is used. A plugin that fails to import, or was
written for another API version, breaks only its own device: the error is kept and shown when that
device is asked for.
"""
from __future__ import annotations

import difflib
import importlib
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from types import ModuleType
from typing import Any

import pluggy

from tg.plugins import hookspecs
from tg.settings import TG_PLUGINS

PLUGIN_API_VERSION = 1
hookimpl = pluggy.HookimplMarker("tg")
ENTRY_POINT_GROUP = "tg.devices"


@dataclass(frozen=True)
class InstalledDevice:
  name: str
  module: str
  package: str | None
  version: str | None


class PluginError(RuntimeError):
  pass


_pm = pluggy.PluginManager("tg")
_pm.add_hookspecs(hookspecs)
_loaded: dict[str, ModuleType] = {}
_errors: dict[str, str] = {}


def _entry_points() -> dict[str, EntryPoint]:
  eps = {ep.name.upper(): ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
  if (only := TG_PLUGINS.value):
    allowed = {x.strip().upper() for x in only.split(",") if x.strip()}
    if (unknown := sorted(allowed - set(eps))):
      raise PluginError(f"TG_PLUGINS={only} names {_unknown_names(unknown, list(eps))}, which no installed package provides. "
                        f"Installed devices: {', '.join(sorted(eps)) or 'none'}.")
    eps = {k: v for k, v in eps.items() if k in allowed}
  return eps


def _unknown_names(unknown: list[str], known: list[str]) -> str:
  out = []
  for name in unknown:
    close = difflib.get_close_matches(name, known, n=1)
    out.append(f"{name} (did you mean {close[0]}?)" if close else name)
  return ", ".join(out)


def installed_devices() -> list[InstalledDevice]:
  """Every device whose package is installed, without importing any of them."""
  out = []
  for name, ep in sorted(_entry_points().items()):
    dist = getattr(ep, "dist", None)
    out.append(InstalledDevice(name, ep.value, dist.name if dist else None, dist.version if dist else None))
  return out


def package_for(device: str) -> str:
  """The package that provides `device`, by convention: device NAME comes from package tg-name."""
  return f"tg-{device.lower()}"


def load_plugin(device: str) -> ModuleType:
  """Import and register the plugin that owns `device` (upper case, no instance number)."""
  if device in _loaded:
    return _loaded[device]
  if device in _errors:
    raise PluginError(_errors[device])
  eps = _entry_points()
  if device not in eps:
    names = ", ".join(sorted(eps)) or "none"
    hint = f" (it is excluded by TG_PLUGINS={TG_PLUGINS.value})" if TG_PLUGINS.value else ""
    raise PluginError(f"device {device} is not installed{hint}: install it with `pip install {package_for(device)}`. "
                      f"Installed devices: {names}.")
  ep = eps[device]
  dist = getattr(ep, "dist", None)
  package = dist.name if dist is not None else package_for(device)
  try:
    module = importlib.import_module(ep.value)
    version = getattr(module, "TG_PLUGIN_API_VERSION", None)
    if version != PLUGIN_API_VERSION:
      raise PluginError(f"plugin {ep.value} for device {device} was written for tg plugin API version {version}, "
                        f"but this tg-core speaks version {PLUGIN_API_VERSION}: install a version of {package} made for this tg-core")
    if not _pm.is_registered(module):
      _pm.register(module, name=ep.value)
  except Exception as e:  # one broken plugin must not take the others down
    msg = str(e) if isinstance(e, PluginError) else f"device {device} failed to load its plugin {ep.value}: {type(e).__name__}: {e}"
    _errors[device] = msg
    raise PluginError(msg) from e
  _loaded[device] = module
  return module


def load_all_plugins() -> dict[str, str]:
  """Load every installed device's plugin (declaring its settings, see tg.settings); the errors of those that failed, by device."""
  failed = {}
  for name in sorted(_entry_points()):
    try:
      load_plugin(name)
    except PluginError as e:  # a broken plugin breaks only its own device
      failed[name] = str(e)
  return failed


def hook(name: str, device: str) -> Any:
  """Call hook `name` for `device`, loading its plugin first."""
  load_plugin(device)
  return getattr(_pm.hook, name)(device=device)
