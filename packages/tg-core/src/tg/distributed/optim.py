"""Data-parallel training: the same model on every rank (`broadcast_parameters` at the start), each rank's gradients
from its own shard of the batch, averaged across the ranks (`all_reduce_grads`) before every optimizer step, which
then makes the same update everywhere. `DistributedOptimizer` wraps an optimizer to do the averaging in `step()`.

Gradients travel in buckets, as PyTorch's DDP sends them: all of one dtype are concatenated into one contiguous tensor
(realizing the backward pass into it), which is all-reduced with one MPI call on its own memory, and each parameter's
gradient becomes a view of its slice. One call of N bytes instead of one per parameter: a call's latency is paid once.
"""
from __future__ import annotations

import hashlib
from typing import Any

from tg.distributed.collectives import _agree, _world_for, broadcast_owned, reduce_owned
from tg.distributed.collectives import all_reduce as _all_reduce
from tg.dtype import DType
from tg.helpers import prod
from tg.lazy import LazyBuffer
from tg.nn.optim import Optimizer
from tg.nn.state import get_state_dict
from tg.tensor import Tensor


def _tensors(obj: Any) -> dict[str, Tensor]:
  """A model (anything get_state_dict reads), a dict of tensors, or a list of them, as named tensors."""
  if isinstance(obj, (list, tuple)) and all(isinstance(t, Tensor) for t in obj):
    return {str(i): t for i, t in enumerate(obj)}
  return get_state_dict(obj)


def broadcast_parameters(model: Any, root: int = 0) -> None:
  """Give every rank rank `root`'s values of `model`'s tensors (parameters and buffers such as BatchNorm's running
  statistics): the same starting point everywhere, whatever each rank's seed. The names, shapes and dtypes are compared
  across ranks first (a model built differently on one rank is a ValueError on every rank)."""
  named = _tensors(model)
  if (w := _world_for("broadcast_parameters")) is None:
    return
  _agree(w, "broadcast_parameters", tuple((k, tuple(t.shape), str(t.dtype)) for k, t in named.items()), force=True)
  broadcast_tensors(list(named.values()), root)


def _buckets(ts: list[Tensor]) -> list[tuple[Tensor, list[Tensor]]]:
  """The tensors concatenated per dtype into contiguous realized buckets: (bucket, the tensors in it, in order)."""
  by_dtype: dict[DType, list[Tensor]] = {}
  for t in ts:
    by_dtype.setdefault(t.dtype, []).append(t)
  out = []
  for group in by_dtype.values():
    flat = [t.detach().reshape(-1) for t in group]
    out.append(((flat[0].cat(*flat[1:]) if len(flat) > 1 else flat[0]).contiguous().realize(), group))
  return out


def _slices(bucket: Tensor, group: list[Tensor]) -> list[Tensor]:
  """Each tensor's part of its bucket, in its shape: views, no copies."""
  out, start = [], 0
  for t in group:
    n = prod(t.shape)
    out.append(bucket[start:start + n].reshape(t.shape))
    start += n
  return out


def broadcast_tensors(ts: list[Tensor], root: int = 0) -> None:
  """broadcast of several tensors in one MPI call per dtype, then one schedule that copies every slice into its tensor
  (assigned and realized at once: a pending assign left for the next step's graph to realize can make a cycle there,
  BatchNorm's running statistics being assigned again in the forward pass)."""
  if _world_for("broadcast_tensors") is None or not ts:
    return
  for bucket, group in _buckets(ts):
    broadcast_owned(bucket, root)
    for t, part in zip(group, _slices(bucket, group)):
      # a tensor with no buffer of its own yet (BatchNorm's weight is a broadcast constant until trained) takes its value
      # by becoming it: a view of the bucket would make the tensors of one bucket share memory, so later in-place
      # updates of one would overwrite the others'
      lb = t.lazydata
      t.assign(part if isinstance(lb, LazyBuffer) and lb.base is lb and lb.realized is not None else part.contiguous())
  Tensor.realize_all(*ts)


def all_reduce_grads(params: list[Tensor], op: str = "mean", bucket: bool = True) -> None:
  """Reduce the gradients of `params` across the ranks (op "mean": the data-parallel average), in one MPI call per
  dtype (bucket=True) or one per parameter. Every parameter must have a gradient (on every rank)."""
  missing = [i for i, p in enumerate(params) if p.grad is None]
  if missing:
    raise RuntimeError(f"all_reduce_grads: parameters {missing} (of {len(params)}) have no gradient: call loss.backward() first "
                       "(every rank must send the same gradients)")
  if _world_for("all_reduce_grads") is None:
    return
  grads = [p.grad for p in params if p.grad is not None]
  if not bucket:
    for g in grads:
      _all_reduce(g, op)
    return
  for flat, group in _buckets(grads):
    reduce_owned(flat, op)
    for g, part in zip(group, _slices(flat, group)):
      g.replace(part)  # the gradient becomes a view of its slice of the bucket: no copy back


def digest(model: Any) -> str:
  """A sha256 of `model`'s tensors (names and bytes), to compare across ranks: `all_gather_object(digest(model))`."""
  h = hashlib.sha256()
  for k, t in sorted(_tensors(model).items()):
    h.update(k.encode())
    h.update(bytes(t.data()))
  return h.hexdigest()


class DistributedOptimizer:
  """Wraps an optimizer for data-parallel training: `step()` averages the gradients across the ranks (bucketed), steps,
  then gives every rank rank 0's non-trainable tensors (the optimizer's `buffers`: BatchNorm's running statistics,
  which each rank computes from its own shard), as DDP's broadcast_buffers does. Everything else (lr, zero_grad,
  the state) is the wrapped optimizer's.

    opt = DistributedOptimizer(Adam(get_parameters(model), lr=1e-3))   # after broadcast_parameters(model)"""

  def __init__(self, optimizer: Optimizer, bucket: bool = True, broadcast_buffers: bool = True) -> None:
    self.optimizer, self.bucket, self.broadcast_buffers = optimizer, bucket, broadcast_buffers

  def __getattr__(self, name: str) -> Any:
    return getattr(self.optimizer, name)

  def zero_grad(self) -> None:
    self.optimizer.zero_grad()

  def step(self) -> None:
    all_reduce_grads(self.optimizer.params, "mean", self.bucket)
    self.optimizer.step()
    if self.broadcast_buffers:
      broadcast_tensors(self.optimizer.buffers, 0)

