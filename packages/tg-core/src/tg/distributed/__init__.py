"""Data-parallel training across processes and hosts through MPI (mpi4py with Open MPI or MPICH; docs/distributed.md).

  import tg.distributed as dist
  dist.init()                                  # the MPI job this process runs in, or a world of one without mpirun
  dist.rank, dist.world_size                   # this process's rank, and how many there are
  dist.broadcast_parameters(model)             # rank 0's initial weights everywhere
  opt = dist.DistributedOptimizer(Adam(get_parameters(model)))   # step(): gradients averaged across the ranks
  dist.print0(...); dist.save_checkpoint(model, path)            # once, from rank 0

Collectives on tensors (in place, on the tensor's device): all_reduce(t, op), broadcast(t, root), all_gather(t) (a new
tensor); on Python objects: all_gather_object, all_reduce_metric; barrier(). mpi4py is imported by init() only: tg
doesn't need it otherwise (`pip install 'tg-core[mpi]'` brings it with Open MPI).
"""
from __future__ import annotations

from typing import Any

from tg.distributed.collectives import all_gather, all_gather_object, all_reduce, barrier, broadcast
from tg.distributed.optim import DistributedOptimizer, all_reduce_grads, broadcast_parameters, digest
from tg.distributed.rank0 import all_reduce_metric, is_main, print0, save_checkpoint
from tg.distributed.world import CollectiveTimeoutError, World, finalize, init, world

__all__ = ["CollectiveTimeoutError", "DistributedOptimizer", "World", "all_gather", "all_gather_object", "all_reduce", "all_reduce_grads",
           "all_reduce_metric", "barrier", "broadcast", "broadcast_parameters", "digest", "finalize", "init", "is_initialized", "is_main",
           "print0", "rank", "save_checkpoint", "world", "world_size"]


def is_initialized() -> bool:
  return world() is not None


def __getattr__(name: str) -> Any:
  """`rank` and `world_size` as attributes that follow init(): 0 and 1 before it (and without mpirun)."""
  if name in ("rank", "world_size"):
    w = world()
    return (w.rank if w is not None else 0) if name == "rank" else (w.size if w is not None else 1)
  raise AttributeError(f"module 'tg.distributed' has no attribute {name!r}")
