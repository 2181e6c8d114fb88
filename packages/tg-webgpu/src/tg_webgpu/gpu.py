"""The one wgpu adapter and device of this process, opened on first use, and the limits kernels are held to.

Only native compute backends are asked for (Vulkan, Metal, D3D12): wgpu's OpenGL backend has smaller
limits and no f16, and probing it (EGL) is slow. On a machine without a GPU, Mesa's lavapipe is a Vulkan
driver that runs on the CPU, so WEBGPU works everywhere a Vulkan loader and that driver are installed.
"""
from __future__ import annotations

import ctypes.util
import functools
from typing import Any

BACKENDS = ("Vulkan", "Metal", "DX12")
INSTALL_HINT = "install a Vulkan driver, e.g. Mesa's CPU driver lavapipe: `apt-get install mesa-vulkan-drivers libvulkan1`"

# the limits tg uses, raised from WebGPU's defaults to what the adapter offers (requested at device creation)
LIMITS = ("max-storage-buffers-per-shader-stage", "max-storage-buffer-binding-size", "max-buffer-size",
          "max-compute-workgroup-storage-size", "max-compute-invocations-per-workgroup", "max-compute-workgroup-size-x",
          "max-compute-workgroup-size-y", "max-compute-workgroup-size-z", "max-compute-workgroups-per-dimension",
          "max-bindings-per-bind-group")

# WebGPU's guaranteed minimums: what a renderer assumes when no adapter is at hand (rendering without running)
DEFAULT_LIMITS = {"max-storage-buffers-per-shader-stage": 8, "max-storage-buffer-binding-size": 1 << 27, "max-buffer-size": 1 << 28,
                  "max-compute-workgroup-storage-size": 16384, "max-compute-invocations-per-workgroup": 256,
                  "max-compute-workgroup-size-x": 256, "max-compute-workgroup-size-y": 256, "max-compute-workgroup-size-z": 64,
                  "max-compute-workgroups-per-dimension": 65535, "max-bindings-per-bind-group": 1000}


@functools.cache
def adapter() -> Any:
  """The wgpu adapter (high-performance preference); raises RuntimeError with what is missing."""
  try:
    import wgpu
  except ImportError as e:
    raise RuntimeError(f"wgpu is not importable ({e}): `pip install wgpu`") from None
  try:
    from wgpu.backends.wgpu_native.extras import set_instance_extras
    set_instance_extras(backends=list(BACKENDS))
  except Exception:  # the instance already exists (the user opened wgpu first): keep its backends
    pass
  try:
    return wgpu.gpu.request_adapter_sync(power_preference="high-performance")
  except Exception as e:
    why = str(e).strip().splitlines()[-1].strip() if str(e).strip() else type(e).__name__
    if ctypes.util.find_library("vulkan") is None:
      raise RuntimeError(f"no Vulkan loader (libvulkan.so.1) was found: {INSTALL_HINT}") from None
    raise RuntimeError(f"wgpu found no GPU adapter ({why}): {INSTALL_HINT}") from None


def unavailable_reason() -> str:
  """"" when an adapter exists, otherwise a sentence saying what is missing."""
  try:
    adapter()
  except RuntimeError as e:
    return str(e)
  return ""


def is_software() -> bool:
  """Whether the adapter is a CPU emulation (lavapipe, SwiftShader, WARP) rather than a GPU."""
  return str(adapter().info.get("adapter_type", "")).lower() == "cpu"


def has_f16() -> bool:
  return "shader-f16" in adapter().features


@functools.cache
def device() -> Any:
  """The wgpu device, with the adapter's full limits and shader-f16 when it has it."""
  ad = adapter()
  features = ["shader-f16"] if has_f16() else []
  return ad.request_device_sync(label="tg", required_features=features, required_limits={k: ad.limits[k] for k in LIMITS})


def limits() -> dict[str, int]:
  """The adapter's limits tg uses, or WebGPU's minimums when there is no adapter."""
  try:
    ad = adapter()
  except RuntimeError:
    return dict(DEFAULT_LIMITS)
  return {k: int(ad.limits[k]) for k in LIMITS}


def wait_idle(dev: Any) -> None:
  """Block until every submitted command has run.

  wgpu-py 0.32's queue.on_submitted_work_done_sync passes a callback of the wrong C type to wgpu-native (TypeError),
  so this polls the device with wait=True, which is what that promise does underneath."""
  if hasattr(dev, "_poll_wait"):
    dev._poll_wait()
  else:
    dev.queue.on_submitted_work_done_sync()
