"""Memory soak: training steps of a small MLP with Adam and dropout (random numbers every step) keep RSS flat,
eager and under TinyJit. RSS is taken after a warm-up (allocator and compile caches filled) and at the end.

In CI, for a test file's time budget: 2000 TinyJit steps and 1000 eager steps on CLANG and LLVM (an eager step is
8-20 ms of Python scheduling on a 2-core runner), 200 of each elsewhere, skipped on the PYTHON interpreter (too slow).
The full 2000 eager steps, or a longer run, outside pytest:
  python packages/tg-core/tests/reliability/test_soak.py --steps 20000 [--device CLANG] [--mode jit|eager|both]
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from collections.abc import Callable

import numpy as np
import pytest

from tg import Device, Tensor, TinyJit
from tg.nn import Linear
from tg.nn.optim import Adam

GROWTH_LIMIT_MIB = 5.0


def rss_mib() -> float:
  with open("/proc/self/statm") as f:
    return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class MLP:
  def __init__(self) -> None:
    self.l1, self.l2 = Linear(16, 32), Linear(32, 4)

  def __call__(self, x: Tensor) -> Tensor:
    return self.l2(self.l1(x).relu().dropout(0.2))


def make_step(jit: bool) -> Callable[[], float]:
  """A training step of a fresh model; returns the loss."""
  Tensor.manual_seed(0)
  rng = np.random.default_rng(0)
  model = MLP()
  opt = Adam([model.l1.weight, model.l1.bias, model.l2.weight, model.l2.bias], lr=1e-3)
  x = Tensor(rng.standard_normal((8, 16)).astype(np.float32)).realize()
  y = Tensor(rng.integers(0, 4, 8).astype(np.int32)).realize()  # int32 labels: WEBGPU has no int64

  def step(x: Tensor, y: Tensor) -> Tensor:
    with Tensor.train():
      opt.zero_grad()
      loss = model(x).sparse_categorical_crossentropy(y)
      loss.backward()
      opt.step()
    return loss.realize()

  run = TinyJit(step) if jit else step
  return lambda: float(run(x, y).item())


def soak(jit: bool, steps: int, warmup: int) -> tuple[float, float, float]:
  """(RSS growth in MiB from the end of the warm-up to the end, ms per step, the last loss)."""
  step = make_step(jit)
  for _ in range(warmup):
    step()
  gc.collect()
  r0, st = rss_mib(), time.perf_counter()
  loss = 0.0
  for _ in range(steps):
    loss = step()
  elapsed = time.perf_counter() - st
  gc.collect()
  return rss_mib() - r0, elapsed / steps * 1e3, loss


def _steps(jit: bool) -> int:
  if Device.DEFAULT not in ("CLANG", "LLVM"):
    return 200
  return 2000 if jit else 1000


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads RSS from /proc/self/statm")
@pytest.mark.skipif(Device.DEFAULT == "PYTHON", reason="thousands of training steps take too long on the PYTHON interpreter")
@pytest.mark.parametrize("jit", [True, False], ids=["jit", "eager"])
def test_soak_rss_flat(jit):
  steps = _steps(jit)
  grown, ms, loss = soak(jit, steps, warmup=100)
  print(f"{'jit' if jit else 'eager'}: {steps} steps, {ms:.2f} ms/step, RSS +{grown:.2f} MiB, loss {loss:.3f}")
  assert np.isfinite(loss)
  assert grown < GROWTH_LIMIT_MIB, f"RSS grew {grown:.2f} MiB over {steps} steps"


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--steps", type=int, default=2000)
  ap.add_argument("--warmup", type=int, default=100)
  ap.add_argument("--device", default=None)
  ap.add_argument("--mode", choices=["jit", "eager", "both"], default="both")
  args = ap.parse_args()
  if args.device:
    Device.DEFAULT = args.device
  for jit in {"jit": [True], "eager": [False], "both": [True, False]}[args.mode]:
    grown, ms, loss = soak(jit, args.steps, args.warmup)
    print(f"{Device.DEFAULT} {'jit' if jit else 'eager'}: {args.steps} steps, {ms:.2f} ms/step, RSS +{grown:.2f} MiB, loss {loss:.3f}")


if __name__ == "__main__":
  main()
