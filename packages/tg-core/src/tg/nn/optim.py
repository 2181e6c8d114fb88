"""Optimizers: SGD and Adam. Hyperparameters that change over time (the learning rate, Adam's step
count) are Tensors, so each step runs the same kernels and nothing recompiles."""
from __future__ import annotations

from tg.dtype import dtypes
from tg.tensor import Tensor


class Optimizer:
  def __init__(self, params: list[Tensor], lr: float) -> None:
    for p in params:  # parameters handed to an optimizer learn, unless told otherwise
      if p.requires_grad is None:
        p.requires_grad = True
    self.params = [p for p in params if p.requires_grad]
    if not self.params:
      raise ValueError("the optimizer got no parameters that require grad")
    self.buffers = [p for p in params if not p.requires_grad]
    self.lr = Tensor([lr], dtype=dtypes.float32, requires_grad=False).realize()

  def zero_grad(self) -> None:
    for p in self.params:
      p.grad = None

  def step(self) -> None:
    missing = [i for i, p in enumerate(self.params) if p.grad is None]
    if missing:
      raise RuntimeError(f"parameters {missing} have no gradient: call loss.backward() before step()")
    Tensor.realize_all(*self._step(), *self.params, *self.buffers)

  def _step(self) -> list[Tensor]:
    raise NotImplementedError(type(self))


class SGD(Optimizer):
  def __init__(self, params: list[Tensor], lr: float = 0.001, momentum: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False) -> None:
    super().__init__(params, lr)
    self.momentum, self.wd, self.nesterov = momentum, weight_decay, nesterov
    self.b = [Tensor.zeros(p.shape, dtype=p.dtype, device=p.device).contiguous().realize() for p in self.params] if momentum else []

  def _step(self) -> list[Tensor]:
    for i, p in enumerate(self.params):
      assert p.grad is not None
      g = p.grad + self.wd * p.detach()
      if self.momentum:
        self.b[i].assign(self.momentum * self.b[i] + g)
        g = (g + self.momentum * self.b[i]) if self.nesterov else self.b[i]
      p.assign(p.detach() - g * self.lr)
    return self.b


class Adam(Optimizer):
  def __init__(self, params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8) -> None:
    super().__init__(params, lr)
    self.b1, self.b2, self.eps = b1, b2, eps
    self.b1_t = Tensor([1.0], dtype=dtypes.float32, requires_grad=False).realize()
    self.b2_t = Tensor([1.0], dtype=dtypes.float32, requires_grad=False).realize()
    self.m = [Tensor.zeros(p.shape, dtype=dtypes.float32, device=p.device).contiguous().realize() for p in self.params]
    self.v = [Tensor.zeros(p.shape, dtype=dtypes.float32, device=p.device).contiguous().realize() for p in self.params]

  def _step(self) -> list[Tensor]:
    self.b1_t.assign(self.b1_t * self.b1)
    self.b2_t.assign(self.b2_t * self.b2)
    for i, p in enumerate(self.params):
      assert p.grad is not None
      g = p.grad.cast(dtypes.float32)
      self.m[i].assign(self.b1 * self.m[i] + (1 - self.b1) * g)
      self.v[i].assign(self.b2 * self.v[i] + (1 - self.b2) * (g * g))
      m_hat = self.m[i] / (1 - self.b1_t)
      v_hat = self.v[i] / (1 - self.b2_t)
      p.assign((p.detach() - self.lr * m_hat / (v_hat.sqrt() + self.eps)).cast(p.dtype))
    return [self.b1_t, self.b2_t, *self.m, *self.v]
