"""3x3 conv2d, stride 1, padding 1, fp32, NCHW: input 8x64x56x56, weight 64x64x3x3 (a ResNet stage-1 layer).

  python bench/conv2d.py             # batch 8
  python bench/conv2d.py --quick     # batch 8, fewer repetitions
  python bench/conv2d.py --batch 2

tg: x.conv2d(w, padding=1). torch: F.conv2d (oneDNN). numpy has no conv: im2col with
sliding_window_view + tensordot (one BLAS GEMM of (B*H*W, Cin*9) x (Cin*9, Cout)), then back to NCHW.

FLOPs: every output element (B*Cout*H*W) is a dot product of length Cin*3*3 -> 2*B*Cout*H*W*Cin*9.
B=8: 2*8*64*56*56*64*9 = 1.85 GFLOP per call. GFLOP/s = that / median time / 1e9.
"""
from __future__ import annotations

import argparse
from typing import Any

import benchlib as bl  # sorts first: sets thread counts before numpy/torch load
import numpy as np
import torch
from numpy.lib.stride_tricks import sliding_window_view

C_IN, C_OUT, HW, K = 64, 64, 56, 3


def conv2d_numpy(x: np.ndarray, w: np.ndarray) -> np.ndarray:
  xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
  win = sliding_window_view(xp, (K, K), axis=(2, 3))              # (B, Cin, H, W, 3, 3), a view
  out = np.tensordot(win, w, axes=([1, 4, 5], [1, 2, 3]))          # (B, H, W, Cout): copies win to im2col, one GEMM
  return np.ascontiguousarray(out.transpose(0, 3, 1, 2))           # NCHW, contiguous like tg's and torch's output


def run(mode: str = "small", batch: int | None = None, reps: int | None = None) -> list[bl.Row]:
  b = batch or 8
  reps = reps or (3 if mode == "quick" else 5)
  rng = np.random.default_rng(0)
  x_np = rng.standard_normal((b, C_IN, HW, HW), dtype=np.float32)
  w_np = (rng.standard_normal((C_OUT, C_IN, K, K), dtype=np.float32) / np.sqrt(C_IN * K * K)).astype(np.float32)
  x_tg, w_tg = bl.realized(x_np), bl.realized(w_np)
  x_t, w_t = torch.from_numpy(x_np.copy()), torch.from_numpy(w_np.copy())

  out: dict[str, Any] = {}

  def f_tg() -> None: out["tg"] = x_tg.conv2d(w_tg, padding=1).realize()
  def f_np() -> None: out["np"] = conv2d_numpy(x_np, w_np)
  def f_torch() -> None: out["torch"] = torch.nn.functional.conv2d(x_t, w_t, padding=1)

  s_tg = bl.measure_tg(f_tg, reps=reps, warmup=2, before=lambda: out.pop("tg", None))
  s_np = bl.measure(f_np, reps=reps, warmup=1, before=lambda: out.pop("np", None))
  with torch.inference_mode():
    s_torch = bl.measure(f_torch, reps=max(reps, 10), warmup=2, before=lambda: out.pop("torch", None))
  diff = bl.max_abs_diff(out["tg"].numpy(), out["torch"].numpy())
  flops = 2 * b * C_OUT * HW * HW * C_IN * K * K
  row = bl.Row(f"conv2d 3x3 {b}x{C_IN}x{HW}x{HW}->{C_OUT}", s_tg, s_np, s_torch, work=flops, unit="GFLOP/s",
               note=f"2*B*Cout*H*W*Cin*9 = {flops / 1e9:.2f} GFLOP; numpy = im2col + GEMM; max|tg-torch| = {diff:.2g}")
  bl.print_row(row)
  return [row]


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--quick", action="store_true", help="fewer repetitions")
  p.add_argument("--batch", type=int, help="batch size (default 8)")
  p.add_argument("--reps", type=int, help="timed repetitions after warm-up")
  args = p.parse_args()
  bl.print_env()
  bl.print_table(run("quick" if args.quick else "full", args.batch, args.reps), "conv2d")


if __name__ == "__main__":
  main()
