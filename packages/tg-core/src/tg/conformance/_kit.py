"""What the kit's tests share: the device under test, the capabilities it declares, test sizes, and the data and
tolerances each dtype is checked with. The reference for every result is numpy."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tg import Device, dtypes
from tg.device import is_dtype_supported
from tg.dtype import DType
from tg.renderer import Renderer

ALL_DTYPES = [dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32, dtypes.int64,
              dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64]
INTS = [d for d in ALL_DTYPES if dtypes.is_int(d)]
SIGNED_INTS = [d for d in INTS if not dtypes.is_unsigned(d)]
FLOATS = [d for d in ALL_DTYPES if dtypes.is_float(d)]
NUMERIC = INTS + FLOATS
# interpreters and emulators (priority <= 0, DeviceSpec.priority) run every test on sizes this many times smaller
SLOW_DEVICE_SHRINK = 16


# the name tg's users write, dtypes.<name> ("int64", not the C type "long")
_NAMES = {v: k for k, v in reversed(list(vars(dtypes).items())) if isinstance(v, DType)}


def dtype_name(dt: DType) -> str:
  return _NAMES.get(dt, dt.name)


def device() -> str:
  return Device.DEFAULT


def renderer() -> Renderer | None:
  return Device[Device.DEFAULT].renderer


def _renderer_flag(attr: str) -> Callable[[], bool]:
  return lambda: bool(getattr(renderer(), attr, False))


# capability -> (does the device have it, what it declares when it lacks it); the names @pytest.mark.needs takes
CAPABILITIES: dict[str, tuple[Callable[[], bool], str]] = {
  "kernels": (lambda: Device[Device.DEFAULT].spec.runs_kernels, "runs no kernels (its DeviceSpec has no renderer, compiler or program)"),
  "local": (_renderer_flag("has_local"), "has no workgroups with shared memory (Renderer.has_local is False)"),
  "vectors": (lambda: bool(getattr(renderer(), "vector_bytes", 0)), "has no vector types (Renderer.vector_bytes is 0)"),
  "graph": (lambda: Device[Device.DEFAULT].graph is not None, "has no graph for TinyJit (DeviceSpec.graph is None)"),
  "strict_float": (_renderer_flag("strict_float"),
                   "may assume no NaN or infinity in float math (Renderer.strict_float is False)"),
}


def missing_capability(name: str) -> str:
  """"" when the device has capability `name`, else the skip reason."""
  if name not in CAPABILITIES:
    raise ValueError(f"unknown capability {name!r} in @pytest.mark.needs: one of {', '.join(CAPABILITIES)}")
  has, lacks = CAPABILITIES[name]
  return "" if has() else f"{device()} {lacks}: needs {name}"


def missing_dtype(dt: DType) -> str:
  """"" when the device holds and computes with `dt`, else the skip reason."""
  return "" if is_dtype_supported(dt) else f"{device()} lacks dtype {dtype_name(dt)} (Renderer.missing_dtypes): needs dtype {dtype_name(dt)}"


def is_slow_device() -> bool:
  """Interpreters and emulators (DeviceSpec.priority 0 or below) run the kit on smaller sizes."""
  return Device[Device.DEFAULT].spec.priority <= 0


def host_dtype(dt: DType) -> np.dtype:
  """The numpy dtype a tg dtype's values are made and read back in (bfloat16 travels as float32)."""
  return np.dtype(np.float32) if dt == dtypes.bfloat16 else np.dtype(dt.np)


def random_values(dt: DType, shape: tuple[int, ...] | int, rng: np.random.Generator, low: float | None = None,
                  high: float | None = None) -> np.ndarray:
  """Values exactly representable in `dt`: ints over the whole range (or [low, high)), floats normal (or uniform in
  [low, high)) rounded to `dt` (bfloat16: float32 with the low 16 bits cleared)."""
  shape = (shape,) if isinstance(shape, int) else shape
  if dt == dtypes.bool:
    return rng.random(shape) < 0.5
  if dtypes.is_int(dt):
    lo = int(dtypes.min(dt)) if low is None else int(low)
    hi = int(dtypes.max(dt)) if high is None else int(high) - 1
    return rng.integers(lo, hi, size=shape, dtype=dt.np, endpoint=True)
  x = rng.standard_normal(shape) if low is None or high is None else rng.uniform(low, high, shape)
  if dt == dtypes.bfloat16:
    return (x.astype(np.float32).view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
  return x.astype(dt.np)


def tolerance(dt: DType) -> tuple[float, float]:
  """(rtol, atol) for a float result of a few operations in `dt`."""
  return {dtypes.float16: (2e-3, 2e-3), dtypes.bfloat16: (2e-2, 2e-2), dtypes.float64: (1e-12, 1e-12)}.get(dt, (1e-5, 1e-6))


def dtype_params(dts: list[DType]) -> list:  # type: ignore[type-arg]
  """pytest params, one per dtype, each marked with its dtype so the device's missing dtypes skip."""
  import pytest
  return [pytest.param(dt, marks=pytest.mark.dtype(dt), id=dtype_name(dt)) for dt in dts]
