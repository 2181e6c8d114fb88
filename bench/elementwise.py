"""Memory-bound ops on 16M fp32 (64 MiB): two fused elementwise chains and a full sum.

  python bench/elementwise.py            # 16M floats
  python bench/elementwise.py --quick    # 16M floats, fewer repetitions
  python bench/elementwise.py --n 4194304

  relu chain : (x*2+1).relu()*x        4 FLOPs/element; tg fuses it into one kernel
  gelu (tanh): 0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*x^3)))   (torch: F.gelu(approximate="tanh"))
  sum        : x.sum() to a scalar, eagerly and under TinyJit (the same kernels without tg's per-call Python)

tg, numpy and torch are timed in rounds (one call of each per round), so a drift of the machine's memory bandwidth
during the run hits all three alike (see benchlib.measure_interleaved).
GB/s is the minimal traffic over the median time: an elementwise chain reads x once and writes y once,
8 bytes/element -> 16M * 8 B = 134 MB per call; the sum reads 4 bytes/element -> 67 MB. numpy runs the chains
as separate ufunc passes with temporaries (more real traffic than counted); all three allocate their output
each call (tg's LRU allocator reuses freed buffers, numpy/torch get fresh pages).
"""
from __future__ import annotations

import argparse
import math
from typing import Any

import benchlib as bl  # sorts first: sets thread counts before numpy/torch load
import numpy as np
import torch

from tg import Tensor

N_DEFAULT = 16 * 1024 * 1024
C = math.sqrt(2 / math.pi)


def gelu_np(x: np.ndarray) -> np.ndarray:
  return 0.5 * x * (1 + np.tanh(C * (x + 0.044715 * x * x * x)))


def run(mode: str = "small", n: int | None = None, reps: int | None = None) -> list[bl.Row]:
  n = n or N_DEFAULT
  reps = reps or (5 if mode == "quick" else 10)
  x_np = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
  x_tg = bl.realized(x_np)
  x_t = torch.from_numpy(x_np.copy())
  mb = n * 4 / 1e6

  cases: list[tuple[str, Any, Any, Any, int, str]] = [
    ("relu chain (x*2+1).relu()*x", lambda x: ((x * 2 + 1).relu() * x).realize(), lambda x: np.maximum(x * 2 + 1, 0) * x,
     lambda x: (x * 2 + 1).relu() * x, 8 * n, f"read {mb:.0f} MB + write {mb:.0f} MB"),
    ("gelu tanh", lambda x: x.gelu().realize(), gelu_np, lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
     8 * n, f"read {mb:.0f} MB + write {mb:.0f} MB"),
    ("sum", lambda x: x.sum().realize(), lambda x: x.sum(), lambda x: x.sum(), 4 * n, f"read {mb:.0f} MB"),
  ]
  # the sum's kernels take about as long as tg's Python per call (building the graph, scheduling: 0.15-0.4 ms); under
  # TinyJit only the kernels run, which shows what the generated code does on its own
  TinyJit, why = bl.load_tinyjit()
  if TinyJit is not None:
    cases.append(("sum, TinyJit", TinyJit(lambda x: x.sum().realize()), lambda x: x.sum(), lambda x: x.sum(), 4 * n,
                  f"read {mb:.0f} MB"))
  else:
    print(f"TinyJit not available ({why}): skipping the TinyJit sum")
  rows = []
  for name, f_tg, f_np, f_torch, nbytes, traffic in cases:
    out: dict[str, Any] = {}

    def run_tg(f: Any = f_tg) -> None: out["tg"] = f(x_tg)
    def run_np(f: Any = f_np) -> None: out["np"] = f(x_np)
    def run_torch(f: Any = f_torch) -> None: out["torch"] = f(x_t)

    # in rounds (tg, numpy, torch, tg, ...): these are memory-bound, and the VM's memory bandwidth drifts
    with torch.inference_mode():
      stats = bl.measure_interleaved({"tg": run_tg, "np": run_np, "torch": run_torch}, reps=reps, warmup=2,
                                     before=lambda key: out.pop(key, None))
    s_tg, s_np, s_torch = stats["tg"], stats["np"], stats["torch"]
    tg_out = out["tg"].numpy() if isinstance(out["tg"], Tensor) else out["tg"]
    # the sum's reference is float64 numpy, so the print shows tg's accumulation error, not numpy's
    is_sum = name.startswith("sum")
    ref = x_np.astype(np.float64).sum() if is_sum else out["torch"].numpy()
    diff = bl.max_abs_diff(tg_out, ref)
    row = bl.Row(f"{name} {n / 2**20:g}M", s_tg, s_np, s_torch, work=nbytes, unit="GB/s",
                 note=f"{traffic}; max|tg-{'fp64 sum' if is_sum else 'torch'}| = {diff:.2g}")
    bl.print_row(row)
    rows.append(row)
  return rows


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--quick", action="store_true", help="fewer repetitions")
  p.add_argument("--n", type=int, help=f"number of floats (default {N_DEFAULT})")
  p.add_argument("--reps", type=int, help="timed repetitions after warm-up")
  args = p.parse_args()
  bl.print_env()
  bl.print_table(run("quick" if args.quick else "full", args.n, args.reps), "elementwise")


if __name__ == "__main__":
  main()
