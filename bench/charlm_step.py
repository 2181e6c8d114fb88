"""One training step of examples/train_charlm.py's character-level GPT (its default shape: 4 pre-LN blocks, width 128,
4 heads, context 64, vocabulary 103, batch 32, fp32): forward, cross-entropy, backward, AdamW. tg eager and under
TinyJit (the example's jitted step) against the same model written in torch (same shapes, same initial weights, the
tied head, AdamW with the same two parameter groups and hyperparameters), on one fixed batch.

  python bench/charlm_step.py
  python bench/charlm_step.py --quick          # a smaller model (2 layers, width 64, context 32, batch 16), fewer repetitions
  python bench/charlm_step.py --layers 2 --dim 64 --context 128 --batch 16

The first three steps' losses are printed for each as a sanity check (they agree to ~1e-5).
TinyJit and torch are timed in alternation, round by round (benchlib.measure_interleaved), so the noise of a shared
machine hits both; the eager step is timed on its own.

FLOPs per step (napkin, matmuls only): forward = tokens * (layers * (24 d^2 + 4 T d) + 2 d V), tokens = B * T
(qkv 6 d^2, proj 2 d^2 and the MLP 16 d^2 per token per layer; scores and their product with the values 2 T d each;
the tied head 2 d V); the step is 3x the forward (the backward computes gradients of inputs and of weights).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from typing import Any

import benchlib as bl  # sorts first: sets thread counts before numpy/torch load
import numpy as np
import torch

from tg import Tensor, TinyJit
from tg.nn.state import get_state_dict

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from examples.train_charlm import CharGPT, Config, make_optimizer

VOCAB, LR, WD = 103, 3e-3, 0.1
SHAPES = {"full": {"layers": 4, "dim": 128, "heads": 4, "context": 64, "batch": 32},
          "quick": {"layers": 2, "dim": 64, "heads": 4, "context": 32, "batch": 16}}


def step_flops(layers: int, dim: int, context: int, batch: int, vocab: int = VOCAB) -> int:
  return 3 * batch * context * (layers * (24 * dim * dim + 4 * context * dim) + 2 * dim * vocab)


class TorchBlock(torch.nn.Module):
  def __init__(self, dim: int, heads: int) -> None:
    super().__init__()
    self.heads = heads
    self.ln_1, self.ln_2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
    self.c_attn, self.c_proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
    self.c_fc, self.mlp_proj = torch.nn.Linear(dim, 4 * dim), torch.nn.Linear(4 * dim, dim)

  def forward(self, x: torch.Tensor) -> torch.Tensor:
    b, t, d = x.shape
    q, k, v = self.c_attn(self.ln_1(x)).reshape(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
    att = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
    x = x + self.c_proj(att)
    return x + self.mlp_proj(torch.nn.functional.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class TorchCharGPT(torch.nn.Module):
  """CharGPT in torch, with the same parameter names (so the tg model's state dict loads by name)."""

  def __init__(self, cfg: Config) -> None:
    super().__init__()
    self.wte, self.wpe = torch.nn.Embedding(cfg.vocab_size, cfg.dim), torch.nn.Embedding(cfg.context, cfg.dim)
    self.h = torch.nn.ModuleList([TorchBlock(cfg.dim, cfg.heads) for _ in range(cfg.layers)])
    self.ln_f = torch.nn.LayerNorm(cfg.dim)

  def forward(self, idx: torch.Tensor) -> torch.Tensor:
    x = self.wte(idx) + self.wpe.weight[:idx.shape[1]]
    for block in self.h:
      x = block(x)
    return self.ln_f(x) @ self.wte.weight.T


def make_torch_step(cfg: Config, weights: dict[str, np.ndarray]) -> Any:
  model = TorchCharGPT(cfg)
  model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in weights.items()})
  params = list(model.parameters())
  # the example's groups: weight decay on the matrices only
  opt = torch.optim.AdamW([{"params": [p for p in params if p.ndim == 2], "weight_decay": WD},
                           {"params": [p for p in params if p.ndim != 2], "weight_decay": 0.0}], lr=LR, betas=(0.9, 0.99), eps=1e-8)

  def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(x).reshape(-1, cfg.vocab_size), y.reshape(-1))
    loss.backward()
    opt.step()
    return loss
  return step


def make_tg_step(cfg: Config, seed: int = 0) -> tuple[Any, CharGPT]:
  Tensor.manual_seed(seed)
  model = CharGPT(cfg)
  opt = make_optimizer(model, LR, WD)

  def step(x: Tensor, y: Tensor) -> Tensor:
    opt.zero_grad()
    loss = model(x).sparse_categorical_crossentropy(y).backward()
    Tensor.realize_all(loss, *opt.schedule_step())
    return loss
  return step, model


def run(mode: str = "small", reps: int | None = None, shape: dict[str, int] | None = None) -> list[bl.Row]:
  s = shape or SHAPES["quick" if mode == "quick" else "full"]
  reps = reps or (5 if mode == "quick" else 10)
  cfg = Config(VOCAB, s["context"], s["layers"], s["dim"], s["heads"])
  rng = np.random.default_rng(1)
  x_np = rng.integers(0, VOCAB, (s["batch"], s["context"])).astype(np.int32)
  y_np = rng.integers(0, VOCAB, (s["batch"], s["context"])).astype(np.int32)
  x_tg, y_tg = bl.realized(x_np), bl.realized(y_np)
  x_t, y_t = torch.from_numpy(x_np.astype(np.int64)), torch.from_numpy(y_np.astype(np.int64))
  flops = step_flops(s["layers"], s["dim"], s["context"], s["batch"])
  desc = f"{s['layers']}x{s['dim']}, T={s['context']}, B={s['batch']}"
  note = f"{flops / 1e9:.2f} GFLOP/step"

  training = Tensor.training
  Tensor.training = True
  try:
    eager_step, model = make_tg_step(cfg)
    weights = {k: v.numpy() for k, v in get_state_dict(model).items()}  # the initial weights, before any step
    jit_step = TinyJit(make_tg_step(cfg)[0])
    torch_step = make_torch_step(cfg, weights)
    # sanity: the same three steps from the same weights give the same losses; the first, which builds the kernels, timed
    with bl.CompileMeter() as cm:
      st = time.perf_counter()
      first_loss = eager_step(x_tg, y_tg).item()
      first = time.perf_counter() - st
    losses = {"tg eager": [first_loss] + [eager_step(x_tg, y_tg).item() for _ in range(2)],
              "tg TinyJit": [jit_step(x_tg, y_tg).item() for _ in range(3)], "torch": [torch_step(x_t, y_t).item() for _ in range(3)]}
    print("   first three steps' losses: " + "; ".join(f"{k} " + ", ".join(f"{v:.6f}" for v in ls) for k, ls in losses.items()))
    s_eager = replace(bl.measure(lambda: eager_step(x_tg, y_tg), reps=max(reps // 2, 3), warmup=1), first=first, compile=cm.seconds,
                      kernels_built=cm.built)
    out = bl.measure_interleaved({"tg": lambda: jit_step(x_tg, y_tg), "torch": lambda: torch_step(x_t, y_t)}, reps=reps, warmup=2)
  finally:
    Tensor.training = training
  jit_note = f"{note}; replays {len(jit_step.kernels)} kernels in {len(jit_step.jit_cache)} call(s)"
  rows = [bl.Row(f"charlm step {desc}, tg eager", s_eager, None, out["torch"], work=flops, unit="GFLOP/s", note=note),
          bl.Row(f"charlm step {desc}, tg TinyJit", out["tg"], None, out["torch"], work=flops, unit="GFLOP/s", note=jit_note)]
  for r in rows:
    bl.print_row(r)
  return rows


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--quick", action="store_true", help="a smaller model, fewer repetitions")
  p.add_argument("--reps", type=int, help="timed repetitions after warm-up")
  for k in SHAPES["full"]:
    p.add_argument(f"--{k}", type=int, help=f"default {SHAPES['full'][k]} ({SHAPES['quick'][k]} with --quick)")
  args = p.parse_args()
  mode = "quick" if args.quick else "full"
  shape = {k: getattr(args, k) or v for k, v in SHAPES[mode].items()}
  bl.print_env()
  bl.print_table(run(mode, args.reps, shape), "charlm training step")


if __name__ == "__main__":
  main()
