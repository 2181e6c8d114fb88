"""Layers. This version has Linear; the rest of tinygrad's layers (Conv, norms, Embedding) come with the full nn."""
from __future__ import annotations

import math

from tg.tensor import Tensor


class Linear:
  """y = x @ W.T + b, initialised as tinygrad and torch do (kaiming-uniform weight, uniform bias)."""

  def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
    bound = 1 / math.sqrt(in_features)  # kaiming_uniform with a=sqrt(5) reduces to this bound
    self.weight = Tensor.uniform(out_features, in_features, low=-bound, high=bound)
    self.bias = Tensor.uniform(out_features, low=-bound, high=bound) if bias else None

  def __call__(self, x: Tensor) -> Tensor:
    return x.linear(self.weight.transpose(), self.bias)
