"""Reads at an index: GPT-2's token embedding, a tensor index and gather, eagerly.

  python bench/embedding.py           # GPT-2 small's embedding: 50257 x 768, 128 tokens
  python bench/embedding.py --quick   # fewer repetitions

  embedding fwd : nn.Embedding(50257, 768)(tokens), 128 tokens (torch: F.embedding; numpy: w[tokens])
  index rows    : x[idx] on (50257, 768) with 128 indices, a tensor index (what Embedding is)
  gather        : logits.gather(1, targets) on (128, 50257): one logit per row (a sparse cross-entropy's pick)
  embedding bwd : the table's gradient from the 128 output rows' (torch: a dense grad; numpy: np.add.at into zeros)
  setitem rows  : x[idx] = rows on (50257, 768), 128 indices, in place in numpy and torch

tg builds each as a sum over a one-hot mask; the kernel reads one element per output (codegen/one_hot_select.py), so
these are memory-bound copies of 128 x 768 floats (393 KB) plus tg's per-call Python (two kernels: the read and the
index's range check). The two writes have no store at a loaded position to use: each row of the table finds the last
token naming it (50257 x 128 compares) and reads that token's row, so tg writes the whole table where torch and numpy
write 128 rows (the backward first adds up repeated tokens' rows: 128 x 128 x 768). GB/s counts the bytes of the 128
rows read and written.
"""
from __future__ import annotations

import argparse
import contextlib
from typing import Any

import benchlib as bl  # sorts first: sets thread counts before numpy/torch load
import numpy as np
import torch

from tg import Tensor
from tg.nn import Embedding

VOCAB, DIM, TOKENS = 50257, 768, 128


def run(mode: str = "small", reps: int | None = None) -> list[bl.Row]:
  reps = reps or (10 if mode == "quick" else 30)
  rng = np.random.default_rng(0)
  w_np = rng.standard_normal((VOCAB, DIM), dtype=np.float32)
  tok_np = rng.integers(0, VOCAB, TOKENS).astype(np.int64)
  logits_np = rng.standard_normal((TOKENS, VOCAB), dtype=np.float32)
  emb = Embedding(VOCAB, DIM)
  emb.weight = bl.realized(w_np)
  w_tg, tok_tg, logits_tg = emb.weight, bl.realized(tok_np.astype(np.int32)), bl.realized(logits_np)
  tgt_tg = tok_tg.reshape(TOKENS, 1).realize()
  w_t, tok_t, logits_t = torch.from_numpy(w_np), torch.from_numpy(tok_np), torch.from_numpy(logits_np)
  rows_bytes = TOKENS * DIM * 4 * 2

  cases: list[tuple[str, Any, Any, Any, int]] = [
    ("embedding fwd 50257x768, 128 tokens", lambda: emb(tok_tg.reshape(1, TOKENS)).realize(), lambda: w_np[tok_np],
     lambda: torch.nn.functional.embedding(tok_t, w_t), rows_bytes),
    ("index rows x[idx] 50257x768, 128", lambda: w_tg[tok_tg].realize(), lambda: w_np[tok_np], lambda: w_t[tok_t], rows_bytes),
    ("gather(1) 128x50257", lambda: logits_tg.gather(1, tgt_tg).realize(),
     lambda: np.take_along_axis(logits_np, tok_np.reshape(-1, 1), 1), lambda: logits_t.gather(1, tok_t.reshape(-1, 1)), TOKENS * 8),
  ]

  # the writes: a gradient into the table, and rows written into a copy of it
  g_np = rng.standard_normal((TOKENS, DIM), dtype=np.float32)
  g_tg, g_t = bl.realized(g_np), torch.from_numpy(g_np)
  w_grad = Tensor(w_np, requires_grad=True).realize()
  w_tgrad = torch.from_numpy(w_np.copy()).requires_grad_()

  def bwd_tg() -> Tensor:
    w_grad.grad = None
    w_grad[tok_tg].backward(g_tg)
    assert w_grad.grad is not None
    return w_grad.grad.realize()

  def bwd_np() -> np.ndarray:
    out = np.zeros_like(w_np)
    np.add.at(out, tok_np, g_np)
    return out

  def bwd_torch() -> torch.Tensor:
    w_tgrad.grad = None
    torch.nn.functional.embedding(tok_t, w_tgrad).backward(g_t)
    assert w_tgrad.grad is not None
    return w_tgrad.grad

  x_tg, x_np, x_t = bl.realized(w_np.copy()), w_np.copy(), torch.from_numpy(w_np.copy())

  def set_tg() -> Tensor:
    x_tg[tok_tg] = g_tg
    return x_tg

  def set_np() -> np.ndarray:
    x_np[tok_np] = g_np
    return x_np

  def set_torch() -> torch.Tensor:
    x_t[tok_t] = g_t
    return x_t
  writes: list[tuple[str, Any, Any, Any, int]] = [
    ("embedding bwd 50257x768, 128 tokens", bwd_tg, bwd_np, bwd_torch, rows_bytes),
    ("setitem rows x[idx]=v 50257x768, 128", set_tg, set_np, set_torch, rows_bytes),
  ]
  rows = []
  for name, f_tg, f_np, f_torch, nbytes in cases + writes:
    out: dict[str, Any] = {}

    def run_tg(f: Any = f_tg) -> None: out["tg"] = f()
    def run_np(f: Any = f_np) -> None: out["np"] = f()
    def run_torch(f: Any = f_torch) -> None: out["torch"] = f()

    with torch.inference_mode() if (name, f_tg, f_np, f_torch, nbytes) in cases else contextlib.nullcontext():
      stats = bl.measure_interleaved({"tg": run_tg, "np": run_np, "torch": run_torch}, reps=reps, warmup=2,
                                     before=lambda key: out.pop(key, None))
    diff = bl.max_abs_diff(out["tg"].numpy().reshape(out["np"].shape), out["np"])
    row = bl.Row(name, stats["tg"], stats["np"], stats["torch"], work=nbytes, unit="GB/s", note=f"max|tg-numpy| = {diff:.2g}")
    bl.print_row(row)
    rows.append(row)
  return rows


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--quick", action="store_true", help="fewer repetitions")
  p.add_argument("--reps", type=int, help="timed repetitions after warm-up")
  args = p.parse_args()
  bl.print_env()
  bl.print_table(run("quick" if args.quick else "small", args.reps), "embedding")


if __name__ == "__main__":
  main()
