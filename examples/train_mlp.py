"""Train a small MLP on scikit-learn's bundled 8x8 digits (no download) and print the loss falling.

  python examples/train_mlp.py            # on the default device: the best usable one, printed first
  DEVICE=PYTHON python examples/train_mlp.py --steps 20

Every step goes through tg's whole pipeline: lazy graph -> scheduled kernels -> rendered source (LLVM IR on LLVM, C on CLANG)
-> compiled -> run.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from tg import Device, Tensor
from tg.nn import Linear
from tg.nn.optim import Adam
from tg.nn.state import get_parameters


class MLP:
  def __init__(self, n_in: int, n_hidden: int, n_out: int) -> None:
    self.l1, self.l2 = Linear(n_in, n_hidden), Linear(n_hidden, n_out)

  def __call__(self, x: Tensor) -> Tensor:
    return self.l2(self.l1(x).relu())


def load_digits_split(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  from sklearn.datasets import load_digits
  X, y = load_digits(return_X_y=True)
  X = (X / 16.0).astype(np.float32)  # pixel values are 0..16
  order = np.random.default_rng(seed).permutation(len(X))
  X, y = X[order], y[order].astype(np.int32)
  n_test = len(X) // 5
  return X[n_test:], y[n_test:], X[:n_test], y[:n_test]


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--steps", type=int, default=300)
  parser.add_argument("--batch", type=int, default=128)
  parser.add_argument("--lr", type=float, default=3e-3)
  args = parser.parse_args()

  Tensor.manual_seed(0)
  X_train, y_train, X_test, y_test = load_digits_split()
  model = MLP(64, 128, 10)
  opt = Adam(get_parameters(model), lr=args.lr)
  rng = np.random.default_rng(0)
  print(f"device: {Device.describe_default()}")  # which device runs, and why that one
  print(f"training a 64-128-10 MLP on {len(X_train)} digits")
  st = time.perf_counter()
  for step in range(1, args.steps + 1):
    idx = rng.integers(0, len(X_train), args.batch)
    Tensor.training = True
    loss = model(Tensor(X_train[idx])).sparse_categorical_crossentropy(Tensor(y_train[idx]))
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step == 1 or step % 25 == 0 or step == args.steps:
      print(f"step {step:4d}  loss {loss.item():.4f}  ({time.perf_counter() - st:.1f}s)")
  Tensor.training = False
  pred = model(Tensor(X_test)).argmax(axis=1).numpy()
  print(f"test accuracy {(pred == y_test).mean() * 100:.1f}% on {len(X_test)} held-out digits")


if __name__ == "__main__":
  main()
