"""Finding and loading device plugins. The public surface is `hookimpl`, `PLUGIN_API_VERSION`, the contract's
types (`DeviceSpec`, `Program`, `ProgramFactory`, `GraphFactory`, `split_device`) and the hookspecs module; the
loading machinery below is private to tg.

Listing devices reads entry-point metadata only; a plugin module is imported (and registered with
the pluggy PluginManager) the first time its device is used. A plugin that fails to import, or was
written for another API version, breaks only its own device: the error is kept and shown when that
device is asked for.
"""
from __future__ import annotations

import difflib
import importlib
import warnings
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from types import ModuleType

import pluggy

from tg.plugins import hookspecs, v1
from tg.plugins.contract import (
  MIGRATION_NOTES,
  OLDEST_SUPPORTED_API_VERSION,
  PLUGIN_API_VERSION,
  DeviceSpec,
  GraphFactory,
  Program,
  ProgramFactory,
  split_device,
)
from tg.settings import TG_PLUGINS

hookimpl = pluggy.HookimplMarker("tg")
ENTRY_POINT_GROUP = "tg.devices"
OVERRIDE_GROUP = "tg.overrides"
__all__ = ["PLUGIN_API_VERSION", "DeviceSpec", "GraphFactory", "PluginError", "Program", "ProgramFactory", "device_spec", "hookimpl",
           "installed_devices", "load_plugin", "split_device"]


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
_overrides: dict[str, list[ModuleType]] = {}  # by device: the modules that declared they change it, in order
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
    module = _import_plugin(ep.value, device, package)
    overrides = [_import_plugin(name, device, package, role="override") for name in _override_modules(device)]
  except Exception as e:  # one broken plugin must not take the others down
    msg = str(e) if isinstance(e, PluginError) else f"device {device} failed to load its plugin {ep.value}: {type(e).__name__}: {e}"
    _errors[device] = msg
    raise PluginError(msg) from e
  _loaded[device], _overrides[device] = module, overrides
  return module


def _import_plugin(name: str, device: str, package: str, role: str = "plugin") -> ModuleType:
  """Import plugin module `name` and register it with the hook manager of the API version it was written for."""
  try:
    module = importlib.import_module(name)
  except Exception as e:
    raise PluginError(f"device {device} failed to load its {role} {name}: {type(e).__name__}: {e}") from e
  version = getattr(module, "TG_PLUGIN_API_VERSION", None)
  if version == PLUGIN_API_VERSION:
    needs = "tg_device" if role == "plugin" else "tg_device_override"
    if not callable(getattr(module, needs, None)):
      raise PluginError(f"{role} {name} for device {device} defines no {needs} hook (see docs/device-contract.md)")
    if not _pm.is_registered(module):
      _pm.register(module, name=name)  # checks each hook's signature against tg.plugins.hookspecs
  elif version == 1 and role == "plugin":
    if not v1.pm.is_registered(module):
      v1.pm.register(module, name=name)
      warnings.warn(v1.deprecation(name, device), DeprecationWarning, stacklevel=2)
  else:
    supported = f"{OLDEST_SUPPORTED_API_VERSION} to {PLUGIN_API_VERSION}" if role == "plugin" else str(PLUGIN_API_VERSION)
    raise PluginError(f"{role} {name} for device {device} was written for tg plugin API version {version}, but this tg-core runs "
                      f"versions {supported}: install a version of {package} made for this tg-core (what changed between versions: "
                      f"{MIGRATION_NOTES})")
  return module


def _override_modules(device: str) -> list[str]:
  """The modules that declare (entry point group tg.overrides) that they change `device`, in a fixed order."""
  return sorted({ep.value for ep in entry_points(group=OVERRIDE_GROUP) if ep.name.upper() == device})


def device_spec(device: str) -> DeviceSpec:
  """The spec of device instance `device` (canonical: "CLANG", "CLANG:1"), from its plugin, after every override
  declared for it. Raises PluginError when the plugin can't be loaded or gives no spec."""
  base, _ = split_device(device)
  module = load_plugin(base)
  try:
    if getattr(module, "TG_PLUGIN_API_VERSION", None) == 1:
      spec = v1.spec_from_hooks(device)
    else:  # asked of the owning plugin only: a device's spec never depends on which other plugins happen to be loaded
      spec = module.tg_device(device=device)
  except Exception as e:  # a plugin that fails to describe its device breaks only that device
    raise PluginError(f"the plugin {module.__name__} failed to describe device {device}: {type(e).__name__}: {e}") from e
  if spec is None:
    raise PluginError(f"the plugin {module.__name__} for {base} gave no DeviceSpec for {device} (its tg_device hook returned None)")
  _check_spec(spec, module.__name__, device)
  for override in _overrides[base]:
    try:
      changed = override.tg_device_override(device=device, spec=spec)
    except Exception as e:
      raise PluginError(f"the override {override.__name__} of device {device} failed: {type(e).__name__}: {e}") from e
    if changed is not None:
      _check_spec(changed, override.__name__, device)
      spec = changed
  return spec  # type: ignore[no-any-return]


def _check_spec(spec: object, module: str, device: str) -> None:
  if not isinstance(spec, DeviceSpec):
    raise PluginError(f"{module} answered for {device} with a {type(spec).__name__}, not a tg.plugins.DeviceSpec")


def load_all_plugins() -> dict[str, str]:
  """Load every installed device's plugin (declaring its settings, see tg.settings); the errors of those that failed, by device."""
  failed = {}
  for name in sorted(_entry_points()):
    try:
      load_plugin(name)
    except PluginError as e:  # a broken plugin breaks only its own device
      failed[name] = str(e)
  return failed


