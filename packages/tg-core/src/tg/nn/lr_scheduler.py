"""Learning-rate schedulers with torch.optim.lr_scheduler's names, arguments and numbers (also reachable as tg.nn.optim.X).

An optimizer's lr is a realized (1,) Tensor that its kernels read (see optim.py), so a scheduler writes the new value
into that same buffer: the next step, eager or replayed by a TinyJit, uses it without compiling anything new.

Where torch has one "param group" per learning rate, tg has one optimizer: an OptimizerGroup's members each count as
a group, so `get_last_lr()` has one entry per member, as torch's has one per param group.

Differences from torch, and why:
- Schedules are computed in closed form from the step count and the base lrs (torch chains each lr from the previous
  one). The numbers are the same to float rounding, but an lr set by hand between steps is overwritten at the next
  scheduler step rather than scaled: reading the lr back from the device every step would cost a sync per step.
- OneCycleLR doesn't cycle momentum: tg's optimizers compile momentum and beta1 into their kernels, so changing them
  every step would recompile every step (and a TinyJit would replay the old value). `cycle_momentum=True`, torch's
  default, warns once and schedules the lr alone.
"""
from __future__ import annotations

import bisect
import math
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tg.tensor import Tensor

if TYPE_CHECKING:
  from tg.nn.optim import Optimizer

__all__ = ["CosineAnnealingLR", "LRScheduler", "LambdaLR", "MultiStepLR", "OneCycleLR", "ReduceLROnPlateau", "StepLR"]


def _lr_holders(optimizer: Any) -> list[Any]:
  """The optimizers that own an lr: the optimizer itself, or each member of an OptimizerGroup (torch's param groups)."""
  members = getattr(optimizer, "optimizers", None)
  if members is None:
    return [optimizer]
  return [h for o in members for h in _lr_holders(o)]


def _read_lr(holder: Any) -> float:
  return float(holder.lr.numpy().reshape(-1)[0])


def _write_lr(holder: Any, value: float) -> None:
  # a host-to-device copy into the lr's own buffer: no kernel is compiled for a new value
  lr: Tensor = holder.lr
  lr.assign(Tensor(np.full(lr.shape, value, dtype=lr.dtype.np), device=lr.device)).realize()


class LRScheduler:
  """Base class: `step()` advances the step count and writes `lr_at(step)` into each optimizer's lr.

  Built as torch's: the constructor takes the first step, so the lr is already the schedule's value for step 0."""

  def __init__(self, optimizer: Optimizer, last_epoch: int = -1) -> None:
    self.optimizer = optimizer
    holders = _lr_holders(optimizer)
    if last_epoch == -1:
      for h in holders:  # as torch's group["initial_lr"]: the lr the schedule started from, kept for resuming
        if getattr(h, "initial_lr", None) is None:
          h.initial_lr = _read_lr(h)
    elif any(getattr(h, "initial_lr", None) is None for h in holders):
      raise KeyError(f"resuming a scheduler at last_epoch={last_epoch} needs the optimizer's initial_lr, which a scheduler "
                     "started at last_epoch=-1 sets")
    self.base_lrs: list[float] = [float(h.initial_lr) for h in holders]
    self.last_epoch = last_epoch
    self._step_count = 0
    self._last_lr: list[float] = []
    self.step()

  def lr_at(self, epoch: int) -> list[float]:
    """The learning rate of each group at step `epoch`."""
    raise NotImplementedError(type(self))

  def get_lr(self) -> list[float]:
    return self.lr_at(self.last_epoch)

  def get_last_lr(self) -> list[float]:
    """The learning rates the last step set, one per group (a new list: changing it changes nothing)."""
    return list(self._last_lr)

  def step(self, epoch: int | None = None) -> None:
    """Advance one step (or jump to `epoch`, torch's deprecated form) and set the optimizers' learning rates."""
    self._step_count += 1
    self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
    self._last_lr = self.lr_at(self.last_epoch)
    for h, lr in zip(_lr_holders(self.optimizer), self._last_lr, strict=True):
      _write_lr(h, lr)

  def state_dict(self) -> dict[str, Any]:
    """Everything but the optimizer (and functions, which torch's LambdaLR doesn't save either)."""
    return {k: v for k, v in vars(self).items() if k != "optimizer" and not callable(v) and k != "lr_lambdas"}

  def load_state_dict(self, state_dict: dict[str, Any]) -> None:
    self.__dict__.update(state_dict)


class LambdaLR(LRScheduler):
  """lr = base_lr * lr_lambda(step); one function, or one per group."""

  def __init__(self, optimizer: Optimizer, lr_lambda: Callable[[int], float] | Sequence[Callable[[int], float]],
               last_epoch: int = -1) -> None:
    n = len(_lr_holders(optimizer))
    self.lr_lambdas = list(lr_lambda) if isinstance(lr_lambda, Sequence) else [lr_lambda] * n
    if len(self.lr_lambdas) != n:
      raise ValueError(f"expected {n} lr_lambdas (one per optimizer), got {len(self.lr_lambdas)}")
    super().__init__(optimizer, last_epoch)

  def lr_at(self, epoch: int) -> list[float]:
    return [base * f(epoch) for base, f in zip(self.base_lrs, self.lr_lambdas, strict=True)]


class StepLR(LRScheduler):
  """lr = base_lr * gamma ** (step // step_size)."""

  def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1) -> None:
    self.step_size, self.gamma = step_size, gamma
    super().__init__(optimizer, last_epoch)

  def lr_at(self, epoch: int) -> list[float]:
    return [base * self.gamma ** (epoch // self.step_size) for base in self.base_lrs]


class MultiStepLR(LRScheduler):
  """lr = base_lr * gamma ** (number of milestones <= step); a milestone listed twice counts twice, as in torch."""

  def __init__(self, optimizer: Optimizer, milestones: Sequence[int], gamma: float = 0.1, last_epoch: int = -1) -> None:
    self.milestones, self.gamma = sorted(milestones), gamma
    super().__init__(optimizer, last_epoch)

  def lr_at(self, epoch: int) -> list[float]:
    return [base * self.gamma ** bisect.bisect_right(self.milestones, epoch) for base in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
  """lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * step / T_max)) / 2; past T_max the cosine goes on (back up),
  as torch's does."""

  def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1) -> None:
    self.T_max, self.eta_min = T_max, eta_min
    super().__init__(optimizer, last_epoch)

  def lr_at(self, epoch: int) -> list[float]:
    return [self.eta_min + (base - self.eta_min) * (1 + math.cos(math.pi * epoch / self.T_max)) / 2 for base in self.base_lrs]


class OneCycleLR(LRScheduler):
  """The 1cycle policy: from max_lr/div_factor up to max_lr over the first pct_start of total_steps, then down to
  max_lr/div_factor/final_div_factor (three_phase: back to the start first, then down), annealing by cosine or linearly.
  Stepping past total_steps raises, as torch's does. Momentum isn't cycled (see the module docstring)."""

  def __init__(self, optimizer: Optimizer, max_lr: float | Sequence[float], total_steps: int | None = None, epochs: int | None = None,
               steps_per_epoch: int | None = None, pct_start: float = 0.3, anneal_strategy: str = "cos", cycle_momentum: bool = True,
               base_momentum: float = 0.85, max_momentum: float = 0.95, div_factor: float = 25.0, final_div_factor: float = 1e4,
               three_phase: bool = False, last_epoch: int = -1) -> None:
    if total_steps is not None:
      if not isinstance(total_steps, int) or total_steps <= 0:
        raise ValueError(f"expected a positive integer total_steps, got {total_steps}")
      self.total_steps = total_steps
    elif epochs is not None and steps_per_epoch is not None:
      if not isinstance(epochs, int) or epochs <= 0 or not isinstance(steps_per_epoch, int) or steps_per_epoch <= 0:
        raise ValueError(f"expected positive integers epochs and steps_per_epoch, got {epochs} and {steps_per_epoch}")
      self.total_steps = epochs * steps_per_epoch
    else:
      raise ValueError("OneCycleLR needs total_steps, or epochs and steps_per_epoch")
    if not 0 <= pct_start <= 1:
      raise ValueError(f"pct_start must be between 0 and 1, got {pct_start}")
    if anneal_strategy not in ("cos", "linear"):
      raise ValueError(f"anneal_strategy must be 'cos' or 'linear', got {anneal_strategy!r}")
    if cycle_momentum:
      warnings.warn("tg's OneCycleLR schedules the learning rate only; momentum stays as the optimizer set it "
                    "(pass cycle_momentum=False to silence this)", UserWarning, stacklevel=2)
    self.cycle_momentum, self._anneal_func_type, self.three_phase = cycle_momentum, anneal_strategy, three_phase
    holders = _lr_holders(optimizer)
    max_lrs = list(max_lr) if isinstance(max_lr, Sequence) else [max_lr] * len(holders)
    if len(max_lrs) != len(holders):
      raise ValueError(f"expected {len(holders)} max_lr values (one per optimizer), got {len(max_lrs)}")
    self.max_lrs = [float(m) for m in max_lrs]
    self.min_lrs = [m / div_factor / final_div_factor for m in self.max_lrs]
    if last_epoch == -1:
      for h, m in zip(holders, self.max_lrs, strict=True):
        h.initial_lr = m / div_factor
    # (end step, start lr, end lr) of each phase; lrs as "initial", "max" or "min"
    n = self.total_steps
    self._phases: list[tuple[float, str, str]] = [(pct_start * n - 1, "initial", "max"), (2 * pct_start * n - 2, "max", "initial"),
                                                  (n - 1, "initial", "min")] if three_phase else \
                                                 [(pct_start * n - 1, "initial", "max"), (n - 1, "max", "min")]
    super().__init__(optimizer, last_epoch)

  def _anneal(self, start: float, end: float, pct: float) -> float:
    if self._anneal_func_type == "cos":
      return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
    return (end - start) * pct + start

  def lr_at(self, epoch: int) -> list[float]:
    if epoch > self.total_steps:
      raise ValueError(f"OneCycleLR stepped {epoch} times, past its {self.total_steps} total steps")
    out = []
    for initial, mx, mn in zip(self.base_lrs, self.max_lrs, self.min_lrs, strict=True):
      named = {"initial": initial, "max": mx, "min": mn}
      start_step = 0.0
      for i, (end_step, start, end) in enumerate(self._phases):
        if epoch <= end_step or i == len(self._phases) - 1:
          out.append(self._anneal(named[start], named[end], (epoch - start_step) / (end_step - start_step)))
          break
        start_step = end_step
    return out


class ReduceLROnPlateau:
  """Multiply the lr by `factor` once the metric passed to `step(metric)` hasn't improved for more than `patience`
  steps, then wait `cooldown` steps before counting again; never below min_lr. Same arguments and rules as torch's."""

  def __init__(self, optimizer: Optimizer, mode: str = "min", factor: float = 0.1, patience: int = 10, threshold: float = 1e-4,
               threshold_mode: str = "rel", cooldown: int = 0, min_lr: float | Sequence[float] = 0.0, eps: float = 1e-8) -> None:
    if factor >= 1.0:
      raise ValueError(f"factor must be < 1.0, got {factor}")
    if mode not in ("min", "max"):
      raise ValueError(f"mode must be 'min' or 'max', got {mode!r}")
    if threshold_mode not in ("rel", "abs"):
      raise ValueError(f"threshold_mode must be 'rel' or 'abs', got {threshold_mode!r}")
    self.optimizer = optimizer
    holders = _lr_holders(optimizer)
    self.min_lrs = [float(m) for m in min_lr] if isinstance(min_lr, Sequence) else [float(min_lr)] * len(holders)
    if len(self.min_lrs) != len(holders):
      raise ValueError(f"expected {len(holders)} min_lr values (one per optimizer), got {len(self.min_lrs)}")
    self.factor, self.patience, self.cooldown, self.eps = factor, patience, cooldown, eps
    self.mode, self.threshold, self.threshold_mode = mode, threshold, threshold_mode
    self.mode_worse = math.inf if mode == "min" else -math.inf
    self.best, self.num_bad_epochs, self.cooldown_counter = self.mode_worse, 0, 0
    self.last_epoch = 0
    self._last_lr = [_read_lr(h) for h in holders]

  def _is_better(self, a: float) -> bool:
    if self.mode == "min":
      return a < (self.best * (1.0 - self.threshold) if self.threshold_mode == "rel" else self.best - self.threshold)
    return a > (self.best * (1.0 + self.threshold) if self.threshold_mode == "rel" else self.best + self.threshold)

  def step(self, metrics: float | Tensor, epoch: int | None = None) -> None:
    current = metrics.item() if isinstance(metrics, Tensor) else float(metrics)
    self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
    if self._is_better(current):
      self.best, self.num_bad_epochs = current, 0
    else:
      self.num_bad_epochs += 1
    if self.cooldown_counter > 0:
      self.cooldown_counter -= 1
      self.num_bad_epochs = 0  # bad steps during a cooldown don't count
    if self.num_bad_epochs > self.patience:
      self._reduce_lr()
      self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0

  def _reduce_lr(self) -> None:
    for i, h in enumerate(_lr_holders(self.optimizer)):
      old = _read_lr(h)  # the lr as it is now, whoever set it (as torch reads the group's lr)
      new = max(old * self.factor, self.min_lrs[i])
      if old - new > self.eps:
        _write_lr(h, new)
        self._last_lr[i] = new

  @property
  def in_cooldown(self) -> bool:
    return self.cooldown_counter > 0

  def get_last_lr(self) -> list[float]:
    return list(self._last_lr)

  def state_dict(self) -> dict[str, Any]:
    return {k: v for k, v in vars(self).items() if k != "optimizer"}

  def load_state_dict(self, state_dict: dict[str, Any]) -> None:
    self.__dict__.update(state_dict)
