"""What only one rank should do: print, and write checkpoints (every rank holds the same weights, one file is enough
and two writers of one path would corrupt it). Plus a number combined across ranks, to print once."""
from __future__ import annotations

import os
from typing import Any

from tg.distributed.collectives import all_gather_object, barrier
from tg.distributed.world import world
from tg.nn.state import get_state_dict, safe_save


def rank() -> int:
  w = world()
  return w.rank if w is not None else 0


def is_main() -> bool:
  """Whether this is rank 0 (also true without init() and in a world of one)."""
  return rank() == 0


def print0(*args: Any, **kwargs: Any) -> None:
  """print() on rank 0 only (flushed: MPI launchers forward each rank's output through pipes)."""
  if is_main():
    print(*args, **{"flush": True, **kwargs})


def all_reduce_metric(value: float, op: str = "mean") -> float:
  """A Python number combined across the ranks: "mean", "sum", "max" or "min" (a loss or an accuracy to print once)."""
  values = [float(v) for v in all_gather_object(float(value))]
  if op not in ("mean", "sum", "max", "min"):
    raise ValueError(f"all_reduce_metric op must be mean, sum, max or min, not {op!r}")
  return sum(values) / len(values) if op == "mean" else sum(values) if op == "sum" else max(values) if op == "max" else min(values)


def save_checkpoint(model: Any, path: str) -> str:
  """Rank 0 writes `model`'s tensors (get_state_dict) as safetensors to `path`, through a temporary file renamed into
  place (a reader never sees half a file); every rank waits until it is written, so any may read it next. Returns path."""
  if is_main():
    tmp = f"{path}.tmp{os.getpid()}"
    safe_save(get_state_dict(model), tmp)
    os.replace(tmp, path)
  barrier()
  return path
