"""One GPT-2-small transformer block forward, fp32, batch 1, sequence 256 (d_model 768, 12 heads, MLP 3072):
  x = x + attn(ln_1(x));  x = x + mlp(ln_2(x))   with causal scaled-dot-product attention and tanh-GELU.

  python bench/gpt2_block.py
  python bench/gpt2_block.py --quick   # fewer repetitions
  python bench/gpt2_block.py --seq 128

tg and torch run the same weights; numpy is the same block written with numpy ops (BLAS matmuls).
tg runs eagerly (each call schedules, finds its kernels in the cache and runs them) and under TinyJit.

FLOPs (matmuls only): qkv 2*T*768*2304, attention 2*2*T*T*768, proj 2*T*768*768, MLP 2*2*T*768*3072.
"""
from __future__ import annotations

import argparse
import math
from typing import Any

import benchlib as bl  # sorts first: sets thread counts before numpy/torch load
import numpy as np
import torch

from tg import Tensor, TinyJit

D, HEADS, FF = 768, 12, 3072


def init_weights(seed: int = 0) -> dict[str, np.ndarray]:
  rng = np.random.default_rng(seed)
  def w(*shape: int) -> np.ndarray: return (rng.standard_normal(shape) * 0.02).astype(np.float32)
  return {"ln1_w": 1 + w(D), "ln1_b": w(D), "attn_w": w(D, 3 * D), "attn_b": w(3 * D), "proj_w": w(D, D), "proj_b": w(D),
          "ln2_w": 1 + w(D), "ln2_b": w(D), "fc_w": w(D, FF), "fc_b": w(FF), "out_w": w(FF, D), "out_b": w(D)}


def block_flops(t: int) -> int:
  return 2 * t * D * 3 * D + 2 * 2 * t * t * D + 2 * t * D * D + 2 * 2 * t * D * FF


def tg_block(p: dict[str, Tensor], x: Tensor) -> Tensor:
  t = x.shape[1]
  h = x.layernorm() * p["ln1_w"] + p["ln1_b"]
  q, k, v = (h @ p["attn_w"] + p["attn_b"]).split(D, dim=-1)
  q, k, v = (z.reshape(1, t, HEADS, D // HEADS).transpose(1, 2) for z in (q, k, v))
  a = q.scaled_dot_product_attention(k, v, is_causal=True).transpose(1, 2).reshape(1, t, D)
  x = x + a @ p["proj_w"] + p["proj_b"]
  h = x.layernorm() * p["ln2_w"] + p["ln2_b"]
  return x + (h @ p["fc_w"] + p["fc_b"]).gelu() @ p["out_w"] + p["out_b"]


def torch_block(p: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
  f = torch.nn.functional
  t = x.shape[1]
  h = f.layer_norm(x, (D,), p["ln1_w"], p["ln1_b"])
  q, k, v = (h @ p["attn_w"] + p["attn_b"]).split(D, dim=-1)
  q, k, v = (z.reshape(1, t, HEADS, D // HEADS).transpose(1, 2) for z in (q, k, v))
  a = f.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(1, t, D)
  x = x + a @ p["proj_w"] + p["proj_b"]
  h = f.layer_norm(x, (D,), p["ln2_w"], p["ln2_b"])
  return x + f.gelu(h @ p["fc_w"] + p["fc_b"], approximate="tanh") @ p["out_w"] + p["out_b"]


def numpy_block(p: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
  def ln(z: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    mu = z.mean(-1, keepdims=True)
    return (z - mu) / np.sqrt(((z - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * w + b
  t = x.shape[1]
  h = ln(x, p["ln1_w"], p["ln1_b"])
  q, k, v = np.split(h @ p["attn_w"] + p["attn_b"], 3, axis=-1)
  q, k, v = (z.reshape(1, t, HEADS, D // HEADS).transpose(0, 2, 1, 3) for z in (q, k, v))
  s = q @ k.transpose(0, 1, 3, 2) / np.float32(math.sqrt(D // HEADS))
  s = np.where(np.tril(np.ones((t, t), dtype=bool)), s, np.float32(-np.inf))
  e = np.exp(s - s.max(-1, keepdims=True))
  a = ((e / e.sum(-1, keepdims=True)) @ v).transpose(0, 2, 1, 3).reshape(1, t, D)
  x = x + a @ p["proj_w"] + p["proj_b"]
  h = ln(x, p["ln2_w"], p["ln2_b"]) @ p["fc_w"] + p["fc_b"]
  g = 0.5 * h * (1 + np.tanh(np.float32(math.sqrt(2 / math.pi)) * (h + np.float32(0.044715) * h ** 3)))
  return x + g @ p["out_w"] + p["out_b"]


def run(mode: str = "small", seq: int | None = None, reps: int | None = None) -> list[bl.Row]:
  t = seq or 256
  reps = reps or (3 if mode == "quick" else 5)
  w = init_weights()
  x_np = np.random.default_rng(1).standard_normal((1, t, D)).astype(np.float32)
  p_tg = {k: bl.realized(v) for k, v in w.items()}
  p_t = {k: torch.from_numpy(v.copy()) for k, v in w.items()}
  x_tg, x_t = bl.realized(x_np), torch.from_numpy(x_np.copy())
  jitted = TinyJit(lambda x: tg_block(p_tg, x).realize())

  out: dict[str, Any] = {}
  def f_tg() -> None: out["tg"] = tg_block(p_tg, x_tg).realize()
  def f_jit() -> None: out["jit"] = jitted(x_tg)
  def f_np() -> None: out["np"] = numpy_block(w, x_np)
  def f_torch() -> None: out["torch"] = torch_block(p_t, x_t)

  s_tg = bl.measure_tg(f_tg, reps=reps, warmup=2, before=lambda: out.pop("tg", None))
  s_jit = bl.measure_tg(f_jit, reps=reps, warmup=2, before=lambda: out.pop("jit", None))
  s_np = bl.measure(f_np, reps=reps, warmup=1, before=lambda: out.pop("np", None))
  with torch.inference_mode():
    s_torch = bl.measure(f_torch, reps=max(reps, 10), warmup=2, before=lambda: out.pop("torch", None))
  ref = out["torch"].numpy()
  diffs = {k: bl.max_abs_diff(out[k].numpy() if k != "np" else out[k], ref) for k in ("tg", "jit", "np")}
  flops = block_flops(t)
  note = f"{flops / 1e9:.2f} GFLOP (matmuls); max|x-torch|: tg {diffs['tg']:.2g}, jit {diffs['jit']:.2g}, numpy {diffs['np']:.2g}"
  rows = [bl.Row(f"GPT-2 block fwd T={t}, eager", s_tg, s_np, s_torch, work=flops, unit="GFLOP/s", note=note),
          bl.Row(f"GPT-2 block fwd T={t}, TinyJit", s_jit, s_np, s_torch, work=flops, unit="GFLOP/s")]
  for r in rows:
    bl.print_row(r)
  return rows


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--quick", action="store_true", help="fewer repetitions")
  p.add_argument("--seq", type=int, help="sequence length (default 256)")
  p.add_argument("--reps", type=int, help="timed repetitions after warm-up")
  args = p.parse_args()
  bl.print_env()
  bl.print_table(run("quick" if args.quick else "full", args.seq, args.reps), "GPT-2 block")


if __name__ == "__main__":
  main()
