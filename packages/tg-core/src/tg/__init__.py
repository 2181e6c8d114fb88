"""tg: a small deep-learning framework. Lazy tensors with autograd, fused kernels, pluggable devices."""
from tg.device import Device
from tg.dtype import dtypes
from tg.engine.jit import TinyJit
from tg.helpers import Context, GlobalCounters, getenv
from tg.shape.symbolic import Variable
from tg.tensor import Tensor

__version__ = "0.1.0"
__all__ = ["Context", "Device", "GlobalCounters", "Tensor", "TinyJit", "Variable", "dtypes", "getenv"]
