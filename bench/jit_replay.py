"""Dispatch cost per kernel: a function of N tiny kernels (x = (x + 1).realize(), N times, on 64 floats),
run eagerly and replayed by TinyJit; time per call divided by the kernels it runs (GlobalCounters.kernel_count),
in microseconds per kernel. numpy and torch run the same N ops eagerly (one ufunc / one aten op each).

  python bench/jit_replay.py
  python bench/jit_replay.py --quick
  python bench/jit_replay.py --kernels 200 --size 1024

The kernels do no real work (64 adds), so the time is overhead: tg eager pays scheduling + lowering (kernel cache
hit) + the cffi call per kernel; a TinyJit replay pays only the recorded calls (on CLANG one batched C call, so its
fixed per-call cost is spread over the kernels: more kernels per function, less per kernel). No FLOP/s here.
If tg.engine.jit is missing, the JIT row prints "TinyJit not available" and is skipped.
"""
from __future__ import annotations

import argparse
import time
import traceback
from dataclasses import replace
from typing import Any

import benchlib as bl  # sorts first: sets thread counts before numpy/torch load
import numpy as np
import torch

from tg import GlobalCounters, Tensor


def per_unit(s: bl.Stat, n: int, calls: int) -> bl.Stat:
  """Times per kernel/op (`n` of them in `calls` calls); `first` and `compile` stay whole-call (one-time costs)."""
  kpc = s.kernels_per_call / calls if s.kernels_per_call is not None else None
  return replace(s, median=s.median / n, min=s.min / n, times=[t / n for t in s.times], kernels_per_call=kpc)


def run(mode: str = "small", kernels: int = 50, size: int = 64, reps: int | None = None) -> list[bl.Row]:
  reps = reps or (5 if mode == "quick" else 10)
  inner = 10  # calls per timed repetition, so a repetition is long enough to time well
  x_np = np.zeros(size, dtype=np.float32)
  x_tg = bl.realized(x_np)
  x_t = torch.from_numpy(x_np.copy())

  def chain(x: Tensor) -> Tensor:
    for _ in range(kernels):
      x = (x + 1.0).realize()  # realize: each op is its own kernel
    return x

  def chain_np(x: np.ndarray) -> np.ndarray:
    for _ in range(kernels):
      x = x + 1.0
    return x

  def chain_torch(x: torch.Tensor) -> torch.Tensor:
    for _ in range(kernels):
      x = x + 1.0
    return x

  s_eager = bl.measure_tg(lambda: [chain(x_tg) for _ in range(inner)], reps=reps, warmup=2)
  GlobalCounters.reset()
  chain(x_tg)
  eager_kernels = GlobalCounters.kernel_count
  s_np = bl.measure(lambda: [chain_np(x_np) for _ in range(inner)], reps=reps, warmup=2)
  with torch.inference_mode():
    s_torch = bl.measure(lambda: [chain_torch(x_t) for _ in range(inner)], reps=reps, warmup=2)
  s_np, s_torch = per_unit(s_np, inner * kernels, inner), per_unit(s_torch, inner * kernels, inner)
  note = f"{kernels} kernels of {size} floats; numpy/torch: {kernels} ops; 'first call' = whole function"
  rows = [bl.Row("dispatch per kernel, tg eager", per_unit(s_eager, inner * eager_kernels, inner), s_np, s_torch, per="kernel",
                 note=f"{note}; {eager_kernels} kernels/call counted")]

  TinyJit, why = bl.load_tinyjit()
  s_jit, jit_note = None, ""
  if TinyJit is None:
    print(f"TinyJit not available ({why}): skipping the JIT replay")
    jit_note = "TinyJit not available"
  else:
    try:
      jitted: Any = TinyJit(chain)
      st = time.perf_counter()
      jitted(x_tg)  # call 1: runs normally
      t1 = time.perf_counter() - st
      jitted(x_tg)  # call 2: captures
      t2 = time.perf_counter() - st - t1
      GlobalCounters.reset()
      jitted(x_tg)  # call 3: a replay
      counted = GlobalCounters.kernel_count
      captured = len(getattr(jitted, "jit_cache", []))
      replay_kernels = counted or captured or eager_kernels  # a graph runner may not count kernels one by one
      # a replay of 50 tiny kernels takes ~10 us: 10 of them (0.1 ms) after the garbage collection measure() runs before each
      # repetition timed the cold caches more than the replay (0.5-0.6 us per kernel against 0.2 in a loop), so 100 per repetition
      replays = 10 * inner
      s_jit = per_unit(bl.measure(lambda: [jitted(x_tg) for _ in range(replays)], reps=reps, warmup=1), replays * replay_kernels, replays)
      # sanity check (printed, not asserted): a replay on a new input buffer computes on that input
      out_jit = jitted(bl.realized(x_np + 1)).numpy()
      want = chain_np(x_np + 1)
      ok = "replay on a new input: correct"
      if not np.array_equal(out_jit, want):
        ok = f"replay on a new input: WRONG (max diff {bl.max_abs_diff(out_jit, want):.3g})"
      graph = getattr(jitted, "graph", None)
      how = f"batched by {type(graph).__name__}" if graph is not None else "one ExecItem.run per kernel"
      jit_note = (f"{note}; call 1 (plain) {bl.fmt_time(t1)}, call 2 (capture) {bl.fmt_time(t2)}; "
                  f"replay {how}: {counted} kernels counted, {captured} captured; {ok}")
    except Exception as e:  # a JIT being written may fail: report it, keep benchmarking
      traceback.print_exc()
      print(f"TinyJit replay failed ({type(e).__name__}: {e}): skipping it")
      jit_note = "TinyJit failed"
  rows.append(bl.Row("dispatch per kernel, tg TinyJit replay", s_jit, s_np, s_torch, per="kernel", note=jit_note))
  for r in rows:
    bl.print_row(r)
  return rows


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--quick", action="store_true", help="fewer repetitions")
  p.add_argument("--kernels", type=int, default=50, help="kernels per call (default 50)")
  p.add_argument("--size", type=int, default=64, help="floats per kernel (default 64)")
  p.add_argument("--reps", type=int, help="timed repetitions after warm-up")
  args = p.parse_args()
  bl.print_env()
  bl.print_table(run("quick" if args.quick else "full", args.kernels, args.size, args.reps), "jit_replay")


if __name__ == "__main__":
  main()
