"""tg: a small deep-learning framework. Lazy tensors with autograd, fused kernels, pluggable devices."""
import importlib
from typing import TYPE_CHECKING, Any

from tg.device import Device
from tg.dtype import dtypes
from tg.engine.jit import TinyJit
from tg.helpers import Context, GlobalCounters, getenv
from tg.shape.symbolic import Variable
from tg.tensor import Tensor

if TYPE_CHECKING:
  from tg import nn


def __getattr__(name: str) -> Any:
  # `tg.nn` is imported on first use, as if `import tg.nn` had run: `import tg` alone doesn't pay for the layers,
  # optimizers and weight-file loaders
  if name == "nn":
    return importlib.import_module("tg.nn")
  raise AttributeError(f"module 'tg' has no attribute {name!r}")


__version__ = "0.1.0"
__all__ = ["Context", "Device", "GlobalCounters", "Tensor", "TinyJit", "Variable", "dtypes", "getenv", "nn"]
