"""Run every benchmark in one process and print one summary table.

  python bench/run_all.py            # small defaults (matmul N=1024): about 1-2 minutes on 2 cores
  python bench/run_all.py --quick    # smaller sizes, fewer repetitions, without gpt2_decode and charlm_step: under a minute
  python bench/run_all.py --only matmul conv2d

For numpy at full speed on a machine that sets OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE (see bench/README.md):
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/run_all.py
"""
from __future__ import annotations

import argparse
import time
import traceback

import benchlib as bl  # sorts first: sets thread counts before numpy/torch load
import charlm_step
import conv2d
import elementwise
import embedding
import gpt2_block
import gpt2_decode
import jit_replay
import matmul
import mlp_adam

BENCHMARKS = {"matmul": matmul.run, "conv2d": conv2d.run, "elementwise": elementwise.run, "embedding": embedding.run,
              "mlp_adam": mlp_adam.run, "gpt2_block": gpt2_block.run, "jit_replay": jit_replay.run, "gpt2_decode": gpt2_decode.run,
              "charlm_step": charlm_step.run}
# left out of --quick unless named in --only: GPT-2 small's compile and transformers' import take a minute or more, the
# char-level GPT's training step (forward, backward, AdamW: 146 kernels) half a minute to compile
SLOW = {"gpt2_decode", "charlm_step"}


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--quick", action="store_true", help="smaller sizes and fewer repetitions (under a minute)")
  p.add_argument("--only", nargs="+", choices=list(BENCHMARKS), help="run only these benchmarks")
  args = p.parse_args()
  mode = "quick" if args.quick else "small"
  bl.print_env()
  print(f"mode: {mode}")
  rows: list[bl.Row] = []
  failed: list[str] = []
  st = time.perf_counter()
  for name, run in BENCHMARKS.items():
    if (args.only and name not in args.only) or (not args.only and args.quick and name in SLOW):
      continue
    print(f"\n######## {name} ########")
    t0 = time.perf_counter()
    try:
      rows += run(mode)
    except Exception as e:  # one broken benchmark (tg is edited concurrently) must not hide the others
      traceback.print_exc()
      failed.append(f"{name} ({type(e).__name__}: {e})")
    print(f"({name}: {time.perf_counter() - t0:.1f} s)")
  if rows:
    bl.print_table(rows, f"summary, tg on {bl.Device.DEFAULT}, mode {mode}")
  for f in failed:
    print(f"FAILED: {f}")
  print(f"total {time.perf_counter() - st:.1f} s; {bl.load_note()}")


if __name__ == "__main__":
  main()
