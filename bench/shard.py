"""Tensor.shard over two instances of one device against the same work on one device, in one run.

  python bench/shard.py
  python bench/shard.py --quick
  DEVICE=LLVM python bench/shard.py

- matmul N x N: A split by rows over the two instances, B whole on each: no communication, each instance computes half.
- MLP 784-512-512-10 Adam step, data-parallel: the batch split, the weights whole on each instance; the gradients are
  all-reduced (every instance adds up both halves) before each instance applies the same update (so the update's work
  is done twice).
- the same step tensor-parallel: the first layer's weight split by its outputs, the second's by its inputs (one
  all-reduce of its output per step), the last layer whole on each; each instance updates only its part.
- the matmul and the data-parallel step again under TinyJit, each side replayed (a replay runs its kernels one after
  another, each split over all the cores: handed to the instances' streams it was slower, see bench/README.md).

Printed: the median time on one device and sharded, their ratio (> 1: sharded is faster), and the time the sharded
step spends copying between instances (the COPY items, timed one by one from a PROFILE trace of one call).
On CPU devices the instances share the machine's cores: kernels run one after another, each split across all of them,
so the ideal is a ratio of 1.0 (no slower), not 2.
"""
from __future__ import annotations

import argparse
import atexit
from typing import Any

import benchlib as bl  # sorts first: sets thread counts before numpy/torch load
import numpy as np

from tg import Device, Tensor, TinyJit, nn
from tg.engine import profile
from tg.helpers import Context
from tg.nn.optim import Adam
from tg.nn.state import get_parameters


def _copy_time(fn: Any) -> float:
  """Seconds one call of fn spends in copies between devices (PROFILE's events of the COPY items)."""
  profile.events.clear()
  with Context(PROFILE=1):
    fn()
  total = sum(e["dur"] for e in profile.events if "copy" in e["name"]) / 1e6
  profile.events.clear()
  atexit.unregister(profile.write)  # (PROFILE would write its trace file at exit)
  return total


def _row(name: str, one: Any, sharded: Any, reps: int, note: str) -> None:
  stats = bl.measure_interleaved({"one": one, "sharded": sharded}, reps=reps, warmup=2)
  comm = _copy_time(sharded)
  s1, s2 = stats["one"].median, stats["sharded"].median
  print(f"{name:42s} one device {bl.fmt_time(s1):>10s}  sharded x2 {bl.fmt_time(s2):>10s}  ratio {s1 / s2:5.2f}x  "
        f"copies {bl.fmt_time(comm):>10s} ({100 * comm / s2:4.1f}% of the step)  {note}")


def bench_matmul(n: int, reps: int, devs: tuple[str, str]) -> None:
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
  a1, b1 = Tensor(a).realize(), Tensor(b).realize()
  a2, b2 = Tensor(a).shard(devs, axis=0).realize(), Tensor(b).shard(devs).realize()
  diff = bl.max_abs_diff((a2 @ b2).numpy(), (a1 @ b1).numpy())
  _row(f"matmul fp32 {n}x{n}", lambda: (a1 @ b1).realize(), lambda: (a2 @ b2).realize(), reps, f"max|sharded-one| = {diff:.2g}")
  _row(f"matmul fp32 {n}x{n}, TinyJit", TinyJit(lambda: (a1 @ b1).realize()), TinyJit(lambda: (a2 @ b2).realize()), reps,
       "replayed")


class _MLP:
  def __init__(self) -> None:
    self.layers = [nn.Linear(784, 512), nn.Linear(512, 512), nn.Linear(512, 10)]

  def __call__(self, x: Tensor) -> Tensor:
    for i, layer in enumerate(self.layers):
      x = layer(x)
      x = x.relu() if i < len(self.layers) - 1 else x
    return x


def bench_mlp(batch: int, reps: int, devs: tuple[str, str]) -> None:
  rng = np.random.default_rng(0)
  x_np, y_np = rng.standard_normal((batch, 784), dtype=np.float32), rng.integers(0, 10, batch).astype(np.int32)

  def setup(how: str) -> Any:
    Tensor.manual_seed(0)
    m = _MLP()
    x, y = Tensor(x_np), Tensor(y_np)
    if how == "data":  # the weights whole on each device, the batch split
      for p in get_parameters(m):
        p.shard_(devs)
      x, y = x.shard(devs, axis=0), y.shard(devs, axis=0)
    elif how == "tensor":  # the first layer split by its outputs, the second by its inputs (one all-reduce), the rest whole
      l1, l2, l3 = m.layers
      l1.weight.shard_(devs, axis=0)
      l1.bias.shard_(devs, axis=0)
      l2.weight.shard_(devs, axis=1)
      for p in (l2.bias, l3.weight, l3.bias):
        p.shard_(devs)
      x, y = x.shard(devs), y.shard(devs)
    opt = Adam(get_parameters(m), lr=1e-3)

    def step() -> Tensor:
      opt.zero_grad()
      loss = m(x).sparse_categorical_crossentropy(y)
      loss.backward()
      opt.step()
      return loss.realize()
    return step
  with Tensor.train():
    one = setup("one")
    _row(f"MLP 784-512-512-10 Adam step, batch {batch}", one, setup("data"), reps, "data-parallel: batch split, gradients all-reduced")
    _row(f"MLP 784-512-512-10 Adam step, batch {batch}, TinyJit", TinyJit(setup("one")), TinyJit(setup("data")), reps,
         "data-parallel, replayed")
    _row(f"MLP 784-512-512-10 Adam step, batch {batch}", one, setup("tensor"), reps,
         "tensor-parallel: layer 1 split by outputs, layer 2 by inputs")


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--quick", action="store_true", help="smaller sizes, fewer repetitions")
  p.add_argument("--reps", type=int, help="timed repetitions after warm-up")
  args = p.parse_args()
  bl.print_env()
  devs = (Device.DEFAULT, f"{Device.DEFAULT}:1")
  print(f"sharded over {devs}")
  reps = args.reps or (3 if args.quick else 7)
  bench_matmul(512 if args.quick else 1024, reps, devs)
  bench_mlp(128 if args.quick else 512, reps, devs)


if __name__ == "__main__":
  main()
