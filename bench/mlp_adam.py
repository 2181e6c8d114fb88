"""One Adam training step of a 784-512-512-10 MLP (relu, cross-entropy) on a batch of 256, fp32:
forward, backward, optimizer step. tg eager, tg under TinyJit (when tg.engine.jit exists), numpy (hand-written
forward/backward/Adam), torch.

  python bench/mlp_adam.py
  python bench/mlp_adam.py --quick   # fewer repetitions

All four start from the same weights and train on the same fixed batch; the first step's loss is printed for
each as a sanity check (they should agree to ~1e-6).

FLOPs per step (napkin; matmuls only, the elementwise and Adam work is < 1%):
  forward          2*B*(784*512 + 512*512 + 512*10)            = 342 MFLOP
  weight grads     same again                                     = 342 MFLOP
  input grads      2*B*(512*512 + 512*10) (none for the input)  = 137 MFLOP
  total ~ 822 MFLOP per step. GFLOP/s = that / median step time / 1e9.
"""
from __future__ import annotations

import argparse
import itertools
import traceback
from typing import Any

import benchlib as bl  # sorts first: sets thread counts before numpy/torch load
import numpy as np
import torch

from tg import Tensor
from tg.nn import Linear
from tg.nn.optim import Adam
from tg.nn.state import get_parameters

SIZES = (784, 512, 512, 10)
BATCH, LR = 256, 1e-3


def step_flops(b: int = BATCH) -> int:
  mm = sum(i * o for i, o in itertools.pairwise(SIZES))
  return 2 * b * mm * 2 + 2 * b * sum(i * o for i, o in itertools.pairwise(SIZES[1:]))


def init_weights(seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
  """torch.nn.Linear's default init, (out, in) weights, fp32."""
  rng = np.random.default_rng(seed)
  out = []
  for i, o in itertools.pairwise(SIZES):
    bound = 1 / np.sqrt(i)
    out.append((rng.uniform(-bound, bound, (o, i)).astype(np.float32), rng.uniform(-bound, bound, o).astype(np.float32)))
  return out


class TgMLP:
  def __init__(self, weights: list[tuple[np.ndarray, np.ndarray]]) -> None:
    self.layers = [Linear(w.shape[1], w.shape[0]) for w, _ in weights]
    for layer, (w, b) in zip(self.layers, weights):
      layer.weight, layer.bias = Tensor(w.copy()).realize(), Tensor(b.copy()).realize()

  def __call__(self, x: Tensor) -> Tensor:
    for i, layer in enumerate(self.layers):
      x = layer(x)
      if i < len(self.layers) - 1:
        x = x.relu()
    return x


def make_tg_step(weights: list[tuple[np.ndarray, np.ndarray]]) -> Any:
  model = TgMLP(weights)
  opt = Adam(get_parameters(model), lr=LR)

  def step(x: Tensor, y: Tensor) -> Tensor:
    opt.zero_grad()
    loss = model(x).sparse_categorical_crossentropy(y).backward()
    Tensor.realize_all(loss, *opt.schedule_step())  # loss, new weights and Adam state in one schedule
    return loss
  return step


class NumpyMLP:
  """The same step by hand: forward, softmax cross-entropy, backward, Adam (torch.optim.Adam's formula)."""

  def __init__(self, weights: list[tuple[np.ndarray, np.ndarray]]) -> None:
    self.params = [a.copy() for wb in weights for a in wb]
    self.m = [np.zeros_like(p) for p in self.params]
    self.v = [np.zeros_like(p) for p in self.params]
    self.t = 0

  def step(self, x: np.ndarray, y: np.ndarray) -> float:
    w1, b1, w2, b2, w3, b3 = self.params
    h1 = x @ w1.T + b1
    a1 = np.maximum(h1, 0)
    h2 = a1 @ w2.T + b2
    a2 = np.maximum(h2, 0)
    logits = a2 @ w3.T + b3
    mx = logits.max(axis=1, keepdims=True)
    e = np.exp(logits - mx)
    s = e.sum(axis=1, keepdims=True)
    rows = np.arange(len(y))
    loss = float(np.mean(np.log(s[:, 0]) + mx[:, 0] - logits[rows, y]))
    d = e / s
    d[rows, y] -= 1
    d /= len(y)
    g3, gb3 = d.T @ a2, d.sum(0)
    d2 = (d @ w3) * (h2 > 0)
    g2, gb2 = d2.T @ a1, d2.sum(0)
    d1 = (d2 @ w2) * (h1 > 0)
    g1, gb1 = d1.T @ x, d1.sum(0)
    self.t += 1
    c1, c2 = 1 - 0.9**self.t, 1 - 0.999**self.t
    for p, g, m, v in zip(self.params, (g1, gb1, g2, gb2, g3, gb3), self.m, self.v):
      m *= 0.9
      m += 0.1 * g
      v *= 0.999
      v += 0.001 * (g * g)
      p -= LR * (m / c1) / (np.sqrt(v / c2) + 1e-8)
    return loss


def make_torch_step(weights: list[tuple[np.ndarray, np.ndarray]]) -> Any:
  layers: list[torch.nn.Module] = []
  for i, (w, b) in enumerate(weights):
    lin = torch.nn.Linear(w.shape[1], w.shape[0])
    with torch.no_grad():
      lin.weight.copy_(torch.from_numpy(w))
      lin.bias.copy_(torch.from_numpy(b))
    layers += [lin] if i == len(weights) - 1 else [lin, torch.nn.ReLU()]
  model = torch.nn.Sequential(*layers)
  opt = torch.optim.Adam(model.parameters(), lr=LR)

  def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss
  return step


def run(mode: str = "small", reps: int | None = None) -> list[bl.Row]:
  reps = reps or (5 if mode == "quick" else 10)
  rng = np.random.default_rng(1)
  x_np = rng.standard_normal((BATCH, SIZES[0]), dtype=np.float32)
  y_np = rng.integers(0, SIZES[-1], BATCH).astype(np.int32)
  weights = init_weights()
  x_tg, y_tg = bl.realized(x_np), bl.realized(y_np)
  x_t, y_t = torch.from_numpy(x_np.copy()), torch.from_numpy(y_np.astype(np.int64))
  flops = step_flops()
  note = f"~{flops / 1e6:.0f} MFLOP/step"
  first: dict[str, float] = {}

  def recorder(name: str, fn: Any, to_float: Any) -> Any:
    def call() -> None:
      loss = fn()
      if name not in first:
        first[name] = to_float(loss)
    return call

  training = Tensor.training
  Tensor.training = True
  try:
    tg_step = make_tg_step(weights)
    s_tg = bl.measure_tg(recorder("tg eager", lambda: tg_step(x_tg, y_tg), lambda t: t.item()), reps=reps, warmup=3)
    s_tg_jit, jit_note = None, ""
    TinyJit, why = bl.load_tinyjit()
    if TinyJit is None:
      print(f"TinyJit not available ({why}): skipping the TinyJit step")
      jit_note = "TinyJit not available"
    else:
      try:
        jit_step = TinyJit(make_tg_step(weights))
        # warm-up: call 1 runs normally (compiles), call 2 captures, then replays are timed
        s_tg_jit = bl.measure_tg(recorder("tg TinyJit", lambda: jit_step(x_tg, y_tg), lambda t: t.item()), reps=reps, warmup=3)
        jit_note = f"replays {len(getattr(jit_step, 'jit_cache', []))} captured kernels; compile ~0: kernels already built by eager"
      except Exception as e:  # a JIT being written may fail: report it, keep benchmarking
        traceback.print_exc()
        print(f"TinyJit step failed ({type(e).__name__}: {e}): skipping it")
        jit_note = "TinyJit failed"
  finally:
    Tensor.training = training

  np_model = NumpyMLP(weights)
  s_np = bl.measure(recorder("numpy", lambda: np_model.step(x_np, y_np), float), reps=reps, warmup=2)
  torch_step = make_torch_step(weights)
  s_torch = bl.measure(recorder("torch", lambda: torch_step(x_t, y_t), lambda t: t.item()), reps=reps, warmup=2)
  print("   first-step loss: " + ", ".join(f"{k} {v:.6f}" for k, v in first.items()))

  rows = [bl.Row("mlp_adam step, tg eager", s_tg, s_np, s_torch, work=flops, unit="GFLOP/s", note=note),
          bl.Row("mlp_adam step, tg TinyJit", s_tg_jit, s_np, s_torch, work=flops, unit="GFLOP/s", note=f"{note}; {jit_note}")]
  for r in rows:
    bl.print_row(r)
  return rows


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--quick", action="store_true", help="fewer repetitions")
  p.add_argument("--reps", type=int, help="timed repetitions after warm-up")
  args = p.parse_args()
  bl.print_env()
  bl.print_table(run("quick" if args.quick else "full", args.reps), "mlp_adam")


if __name__ == "__main__":
  main()
