"""Train a small CNN on scikit-learn's bundled 8x8 digits (no download), then save and reload it.

  python examples/train_digits.py                 # on the default device: the best usable one, printed first
  python examples/train_digits.py --steps 100     # quicker
  DEVICE=PYTHON python examples/train_digits.py --steps 5

Every step goes through tg's whole pipeline: lazy graph -> scheduled kernels -> rendered source (LLVM IR on LLVM, C on CLANG)
-> compiled -> run.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
from tqdm import trange

from tg import Device, Tensor
from tg.nn import BatchNorm2d, Conv2d, Linear
from tg.nn.optim import Adam
from tg.nn.state import get_parameters, get_state_dict, load_state_dict, safe_load, safe_save


class DigitsCNN:
  def __init__(self) -> None:
    self.c1, self.bn1 = Conv2d(1, 8, 3, padding=1), BatchNorm2d(8)
    self.c2, self.bn2 = Conv2d(8, 16, 3, padding=1), BatchNorm2d(16)
    self.fc = Linear(16 * 4 * 4, 10)

  def __call__(self, x: Tensor) -> Tensor:
    x = self.bn1(self.c1(x)).relu()
    x = self.bn2(self.c2(x)).relu().max_pool2d(2)
    return self.fc(x.flatten(1))


def load_digits_split(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  from sklearn.datasets import load_digits
  X, y = load_digits(return_X_y=True)
  X = (X / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)  # pixel values are 0..16
  order = np.random.default_rng(seed).permutation(len(X))
  X, y = X[order], y[order].astype(np.int32)
  n_test = len(X) // 5
  return X[n_test:], y[n_test:], X[:n_test], y[:n_test]


def accuracy(model: DigitsCNN, X: np.ndarray, y: np.ndarray, batch: int = 512) -> float:
  with Tensor.test():
    preds = [model(Tensor(X[i:i + batch])).argmax(axis=1).numpy() for i in range(0, len(X), batch)]
  return float((np.concatenate(preds) == y).mean())


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--steps", type=int, default=300)
  parser.add_argument("--batch", type=int, default=64)
  parser.add_argument("--lr", type=float, default=3e-3)
  args = parser.parse_args()

  Tensor.manual_seed(0)
  X_train, y_train, X_test, y_test = load_digits_split()
  model = DigitsCNN()
  opt = Adam(get_parameters(model), lr=args.lr)
  rng = np.random.default_rng(0)
  print(f"device: {Device.describe_default()}")  # which device runs, and why that one
  print(f"training a small CNN on {len(X_train)} digits")
  st = time.perf_counter()
  with Tensor.train():
    for step in (bar := trange(1, args.steps + 1)):
      idx = rng.integers(0, len(X_train), args.batch)
      loss = model(Tensor(X_train[idx])).sparse_categorical_crossentropy(Tensor(y_train[idx]))
      opt.zero_grad()
      loss.backward()
      opt.step()
      if step % 10 == 0 or step == args.steps:
        bar.set_description(f"loss {loss.item():.4f}")
  acc = accuracy(model, X_test, y_test)
  print(f"trained in {time.perf_counter() - st:.1f}s: test accuracy {acc * 100:.1f}% on {len(X_test)} held-out digits")

  # save the weights as safetensors, load them into a fresh model, and check it predicts the same
  path = os.path.join(tempfile.mkdtemp(), "digits_cnn.safetensors")
  safe_save(get_state_dict(model), path)
  fresh = DigitsCNN()
  load_state_dict(fresh, safe_load(path))
  reloaded = accuracy(fresh, X_test, y_test)
  print(f"saved to {path} ({os.path.getsize(path)} bytes) and reloaded: test accuracy {reloaded * 100:.1f}%")
  if reloaded != acc:
    raise SystemExit("the reloaded model disagrees with the trained one")


if __name__ == "__main__":
  main()
