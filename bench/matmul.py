"""fp32 square matmul C = A @ B: tg vs numpy vs torch (CPU).

  python bench/matmul.py                 # N = 1024 and 2048 (tg's 2048 takes minutes: its CPU codegen is naive)
  python bench/matmul.py --quick         # N = 512
  python bench/matmul.py --size 256 768  # any sizes

FLOPs: each of the N*N outputs is a dot product of length N (N multiplies + N adds) -> 2*N^3 per call.
N=1024: 2.15 GFLOP; N=2048: 17.2 GFLOP. GFLOP/s = 2*N^3 / median time / 1e9.
"""
from __future__ import annotations

import argparse
from typing import Any

import benchlib as bl  # sorts first: sets thread counts before numpy/torch load
import numpy as np
import torch

SIZES = {"full": (1024, 2048), "small": (1024,), "quick": (512,)}


def bench_one(n: int, reps: int) -> bl.Row:
  rng = np.random.default_rng(0)
  a_np = rng.standard_normal((n, n), dtype=np.float32)
  b_np = rng.standard_normal((n, n), dtype=np.float32)
  a_tg, b_tg = bl.realized(a_np), bl.realized(b_np)
  a_t, b_t = torch.from_numpy(a_np.copy()), torch.from_numpy(b_np.copy())

  out: dict[str, Any] = {}

  def f_tg() -> None: out["tg"] = (a_tg @ b_tg).realize()
  def f_np() -> None: out["np"] = a_np @ b_np
  def f_torch() -> None: out["torch"] = a_t @ b_t

  # tg's big sizes take seconds per call: one warm-up (the compile call) and a 60 s budget, at least 3 reps
  s_tg = bl.measure_tg(f_tg, reps=reps, warmup=1, budget_s=60.0, before=lambda: out.pop("tg", None))
  with torch.inference_mode():
    s_torch = bl.measure(f_torch, reps=max(reps, 10), warmup=2, before=lambda: out.pop("torch", None))
  s_np = bl.measure(f_np, reps=max(reps, 10), warmup=2, before=lambda: out.pop("np", None))
  diff = bl.max_abs_diff(out["tg"].numpy(), out["np"])
  return bl.Row(f"matmul fp32 {n}x{n}", s_tg, s_np, s_torch, work=2 * n**3, unit="GFLOP/s", note=f"2*N^3 FLOPs; max|tg-numpy| = {diff:.2g}")


def run(mode: str = "small", sizes: list[int] | None = None, reps: int | None = None) -> list[bl.Row]:
  rows = []
  for n in sizes or SIZES[mode]:
    row = bench_one(n, reps or (3 if mode == "quick" else 5))
    bl.print_row(row)
    rows.append(row)
  return rows


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--size", type=int, nargs="+", help="matrix sizes N (default 1024 2048; --quick: 512)")
  p.add_argument("--quick", action="store_true", help="small sizes, fewer repetitions")
  p.add_argument("--reps", type=int, help="timed repetitions after warm-up")
  args = p.parse_args()
  bl.print_env()
  bl.print_table(run("quick" if args.quick else "full", args.size, args.reps), "matmul")


if __name__ == "__main__":
  main()
