"""Worker for test_mpi.py's fault tests: rank 1 fails in the way named by argv[1] while rank 0 waits in a collective.
The job must end, non-zero, within seconds, saying why.

  raise   rank 1 raises (the excepthook tg.distributed.init installs aborts the job)
  kill    rank 1 is killed by SIGKILL (the launcher sees it die and tears the job down)
  exit    rank 1 calls sys.exit(0) early (its exit barrier times out after exit_timeout and aborts the job)
  hang    rank 1 sleeps (rank 0's collective times out after init(timeout=...), raises, and aborts the job)
"""
from __future__ import annotations

import os
import signal
import sys
import time

import tg.distributed as dist
from tg import Tensor

mode = sys.argv[1]
dist.init(timeout=3.0 if mode == "hang" else None, exit_timeout=3.0)
x = dist.all_reduce(Tensor([1.0, 2.0]))  # everyone is up and talking
print(f"rank {dist.rank}: first all_reduce {x.tolist()}", flush=True)
if dist.rank == 1:
  if mode == "raise":
    raise RuntimeError("rank 1 fails on purpose")
  if mode == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
  if mode == "exit":
    sys.exit(0)
  if mode == "hang":
    time.sleep(120)
dist.all_reduce(Tensor([3.0]))  # rank 0 waits here for rank 1, which never comes
print(f"rank {dist.rank}: the second all_reduce returned, which it must not", flush=True)
