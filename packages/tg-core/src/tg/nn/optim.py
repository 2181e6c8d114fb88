"""Optimizers with tinygrad 0.9's names (SGD, LARS, Adam, AdamW, LAMB, OptimizerGroup) and torch's update rules.

Hyperparameters that change over time (the learning rate, Adam's bias-correction powers) live in realized Tensors,
not Python floats: a float would be baked into the kernels as a constant, so changing it would compile new kernels
(and a JIT would replay the old value). As Tensors they are kernel inputs, and every step runs the same kernels.

Each step updates parameters in place with `Tensor.assign`, so models and optimizers keep holding the same Tensor
objects, and realizes all parameters and optimizer state in one `Tensor.realize_all` call, so the scheduler sees the
whole update at once and can fuse it.
"""
from __future__ import annotations

from tg.dtype import DType, dtypes
from tg.multi import MultiLazyBuffer
from tg.tensor import Tensor


def _dedup(xs: list[Tensor]) -> list[Tensor]:
  """Tensors by identity, first occurrence kept: a parameter listed twice must be updated once, not twice."""
  seen: set[int] = set()
  out: list[Tensor] = []
  for x in xs:
    if id(x) not in seen:
      seen.add(id(x))
      out.append(x)
  return out


def _norm(x: Tensor) -> Tensor:
  """The L2 norm of a whole tensor as a 0-d float32 tensor (layer-wise trust ratios are per parameter tensor)."""
  return x.cast(dtypes.float32).square().sum().sqrt()


class NotTrainingError(AssertionError, RuntimeError):
  """An optimizer stepped outside `Tensor.train()`. An AssertionError as tinygrad raises (its tests expect one),
  and a RuntimeError for torch-style handlers."""


def _zeros_like(p: Tensor, dtype: DType) -> Tensor:
  """Optimizer state for parameter p, realized: zeros of its shape on its device, or split over its devices as p is
  (a sharded parameter's update then runs on each device's part, with nothing copied between them)."""
  if isinstance(mlb := p.lazydata, MultiLazyBuffer):
    return Tensor(Tensor.zeros(p.shape, dtype=dtype, device=mlb.device[0]).contiguous().shard(mlb.device, mlb.axis).lazydata,
                  requires_grad=False).realize()
  return Tensor.zeros(p.shape, dtype=dtype, device=p.device, requires_grad=False).contiguous().realize()


class Optimizer:
  """Holds the parameters to train and the learning rate; subclasses say how a step updates them."""

  def __init__(self, params: list[Tensor], lr: float) -> None:
    for p in params:  # parameters handed to an optimizer learn, unless told otherwise (or integers, which can't)
      if p.requires_grad is None and dtypes.is_float(p.dtype):
        p.requires_grad = True
    self.params: list[Tensor] = _dedup([p for p in params if p.requires_grad])
    if not self.params:
      raise ValueError("the optimizer got no parameters that require grad")
    self.device = self.params[0].device
    # non-trainable tensors (e.g. running statistics) are realized with each step so their pending updates land too
    self.buffers: list[Tensor] = _dedup([p for p in params if not p.requires_grad])
    # shape (1,) as in tinygrad, so `opt.lr.assign(Tensor([new_lr]))` works; contiguous so it owns its own buffer
    self.lr = Tensor([lr], dtype=dtypes.float32, device=self.device, requires_grad=False).contiguous().realize()

  def zero_grad(self) -> None:
    for p in self.params:
      p.grad = None

  def step(self) -> None:
    """Update every parameter from its gradient, realizing parameters and state together."""
    Tensor.realize_all(*self.schedule_step())

  def schedule_step(self) -> list[Tensor]:
    """Build the step lazily and return the tensors to realize, for callers that realize more alongside it."""
    # as tinygrad: a step outside training is almost always a forgotten `Tensor.train()`, under which dropout and
    # batchnorm statistics would have behaved differently in the forward pass the gradients came from
    if not Tensor.training:
      raise NotTrainingError("optimizer step with Tensor.training=False: wrap the training step in `with Tensor.train():` "
                             "(or set Tensor.training = True) before calling step()")
    missing = [i for i, p in enumerate(self.params) if p.grad is None]
    if missing:
      raise RuntimeError(f"parameters {missing} (of {len(self.params)}) have no gradient: call loss.backward() before step(), "
                         "and check that the loss depends on them")
    return [*self._step(), *self.params, *self.buffers]

  def _step(self) -> list[Tensor]:
    """Assign the new parameter values and return the optimizer state that must be realized with them."""
    raise NotImplementedError(type(self))

  def _lr(self) -> Tensor:
    # a 0-d view of lr: a (1,) tensor would broadcast a 0-d parameter's update to shape (1,)
    return self.lr.reshape(())


class OptimizerGroup(Optimizer):
  """Several optimizers (e.g. different learning rates for different parameters) stepped as one.

  The group has no `lr` of its own: each optimizer keeps its own, reached as `group[i].lr`.
  One step still realizes everything in a single call."""

  def __init__(self, *optimizers: Optimizer) -> None:  # no super().__init__: the members already own params and lr
    if not optimizers:
      raise ValueError("OptimizerGroup needs at least one optimizer")
    self.optimizers = list(optimizers)
    self.params = [p for o in self.optimizers for p in o.params]
    self.buffers = [b for o in self.optimizers for b in o.buffers]
    self.device = self.params[0].device

  def __getitem__(self, i: int) -> Optimizer:
    return self.optimizers[i]

  def zero_grad(self) -> None:
    for o in self.optimizers:
      o.zero_grad()

  def _step(self) -> list[Tensor]:
    return [t for o in self.optimizers for t in o._step()]


class LARS(Optimizer):
  """SGD with momentum and a layer-wise trust ratio (You et al. 2017): each parameter tensor's step is scaled by
  tcoef * ||w|| / (||g|| + weight_decay * ||w||), or 1 when either norm is 0, so layers with small weights relative
  to their gradients take proportionally small steps. With tcoef=0 it is plain SGD.

  `classic` picks where the learning rate goes, as in tinygrad:
    classic=True:  b = momentum * b + lr * g;  w -= b        ("classic" momentum, lr folded into the buffer)
    classic=False: b = momentum * b + g;       w -= lr * b   (torch.optim.SGD)
  With a constant lr the two are the same; they differ after lr changes, since a classic buffer remembers old lrs.
  Nesterov uses g + momentum * b in place of b in either form."""

  def __init__(self, params: list[Tensor], lr: float = 0.001, momentum: float = 0.9, weight_decay: float = 1e-4, nesterov: bool = False,
               classic: bool = True, tcoef: float = 0.001) -> None:
    super().__init__(params, lr)
    if nesterov and not momentum:
      raise ValueError("nesterov needs a nonzero momentum")
    self.momentum, self.wd, self.nesterov, self.classic, self.tcoef = momentum, weight_decay, nesterov, classic, tcoef
    self.b = [_zeros_like(p, p.dtype) for p in self.params] if momentum else []

  def _step(self) -> list[Tensor]:
    lr = self._lr()
    for i, p in enumerate(self.params):
      assert p.grad is not None
      w = p.detach()
      g = p.grad.detach()
      r: Tensor | float = 1.0
      if self.tcoef:
        wn, gn = _norm(w), _norm(g)
        r = (wn > 0).where((gn > 0).where(self.tcoef * wn / (gn + self.wd * wn), 1.0), 1.0)
      if self.wd:
        g = g + self.wd * w
      if self.classic:
        g = g * r * lr
      if self.momentum:
        self.b[i].assign((self.momentum * self.b[i] + g).cast(self.b[i].dtype))
        g = (g + self.momentum * self.b[i]) if self.nesterov else self.b[i]
      if not self.classic:
        g = g * r * lr
      p.assign((w - g).cast(p.dtype))
    return self.b


class SGD(LARS):
  """Stochastic gradient descent as torch.optim.SGD: weight decay is added to the gradient, the momentum buffer is
  b = momentum * b + g, and nesterov steps along g + momentum * b. `classic=True` applies lr before the momentum
  buffer instead (see LARS); the default matches torch."""

  def __init__(self, params: list[Tensor], lr: float = 0.001, momentum: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False,
               classic: bool = False) -> None:
    super().__init__(params, lr, momentum, weight_decay, nesterov, classic, tcoef=0.0)


class LAMB(Optimizer):
  """Adam's direction plus decoupled weight decay, scaled per parameter tensor by the trust ratio ||w|| / ||update||
  (You et al. 2019), or 1 when either norm is 0, so large-batch training keeps each layer's relative step size sane.
  `adam=True` drops the trust ratio, which gives AdamW.

  Moments and bias-correction powers are float32 whatever the parameter dtype, since (1 - b2^t) and v underflow in
  half precision."""

  def __init__(self, params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-6, weight_decay: float = 0.0,
               adam: bool = False) -> None:
    super().__init__(params, lr)
    self.b1, self.b2, self.eps, self.wd, self.adam = b1, b2, eps, weight_decay, adam
    self.l2 = 0.0  # L2 penalty added to the gradient (torch.optim.Adam's weight_decay); set by Adam
    # b1^t and b2^t, kept as tensors so the step count isn't a constant compiled into the kernels
    self.b1_t = Tensor([1.0], dtype=dtypes.float32, device=self.device, requires_grad=False).contiguous().realize()
    self.b2_t = Tensor([1.0], dtype=dtypes.float32, device=self.device, requires_grad=False).contiguous().realize()
    self.m = [_zeros_like(p, dtypes.float32) for p in self.params]
    self.v = [_zeros_like(p, dtypes.float32) for p in self.params]

  def _step(self) -> list[Tensor]:
    self.b1_t.assign(self.b1_t * self.b1)
    self.b2_t.assign(self.b2_t * self.b2)
    lr, c1, c2 = self._lr(), 1.0 - self.b1_t.reshape(()), 1.0 - self.b2_t.reshape(())
    # the per-step scalars combined once, so each parameter's update broadcasts two of them, not three, and divides
    # once (an eager step builds every op anew: 233 ops for a 3-layer MLP's step before this, 206 after). Plain Adam
    # folds the learning rate into the first moment's factor, as torch's step_size = lr / (1 - b1^t)
    plain = self.adam and not self.wd
    m_scale, v_scale = (lr / c1 if plain else c1.reciprocal()), c2.reciprocal()
    for i, p in enumerate(self.params):
      assert p.grad is not None
      w = p.detach().cast(dtypes.float32)
      g = p.grad.detach().cast(dtypes.float32)
      if self.l2:
        g = g + self.l2 * w
      self.m[i].assign(self.b1 * self.m[i] + (1.0 - self.b1) * g)
      self.v[i].assign(self.b2 * self.v[i] + (1.0 - self.b2) * (g * g))
      up = (self.m[i] * m_scale) / ((self.v[i] * v_scale).sqrt() + self.eps)
      if plain:
        p.assign((w - up).cast(p.dtype))
        continue
      if self.wd:
        up = up + self.wd * w
      if not self.adam:
        wn, un = _norm(w), _norm(up)
        up = up * (wn > 0).where((un > 0).where(wn / un, 1.0), 1.0)
      p.assign((w - lr * up).cast(p.dtype))
    return [self.b1_t, self.b2_t, *self.m, *self.v]


class AdamW(LAMB):
  """Adam with decoupled weight decay, as torch.optim.AdamW: w -= lr * (adam_step + weight_decay * w), so the decay
  isn't rescaled by the adaptive denominator the way an L2 gradient penalty would be."""

  def __init__(self, params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
               weight_decay: float = 0.01) -> None:
    super().__init__(params, lr, b1, b2, eps, weight_decay, adam=True)


class Adam(LAMB):
  """Adam as torch.optim.Adam. Its weight_decay is torch's: an L2 penalty added to the gradient before the moments
  (use AdamW for decoupled decay)."""

  def __init__(self, params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
               weight_decay: float = 0.0) -> None:
    super().__init__(params, lr, b1, b2, eps, 0.0, adam=True)
    self.l2 = weight_decay


# torch keeps schedulers in torch.optim.lr_scheduler; tinygrad programs and the users look in tg.nn.optim too
from tg.nn.lr_scheduler import (  # noqa: E402
  CosineAnnealingLR,
  LambdaLR,
  LRScheduler,
  MultiStepLR,
  OneCycleLR,
  ReduceLROnPlateau,
  StepLR,
)

__all__ = ["LAMB", "LARS", "SGD", "Adam", "AdamW", "CosineAnnealingLR", "LRScheduler", "LambdaLR", "MultiStepLR", "NotTrainingError",
           "OneCycleLR", "Optimizer", "OptimizerGroup", "ReduceLROnPlateau", "StepLR"]
