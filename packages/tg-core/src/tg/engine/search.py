"""BEAM search over kernel optimizations (`BEAM=n`): try actions, time each candidate on the device,
keep the n fastest, repeat until nothing gets faster. Candidates compile in parallel processes; the
choice is cached on disk, keyed by a digest of the kernel's AST, the device, its renderer's settings and its
compiler (`beam_key`), the same in every process, so a second run searches nothing.
"""
from __future__ import annotations

import concurrent.futures
import multiprocessing
import sys
import time
from collections.abc import Callable

from tg.codegen.kernel import Kernel, KernelOptError, Opt, OptOps
from tg.codegen.lowerer import GLOBAL, REDUCE
from tg.device import Buffer, Compiler, Device
from tg.diskcache import diskcache_get, diskcache_put, stable_key
from tg.engine.realize import check_args
from tg.helpers import DEBUG
from tg.renderer import Renderer
from tg.settings import BEAM_PROGRESS, BEAM_WORKERS
from tg.shape.symbolic import Variable

ACTIONS = [Opt(op, axis, amt) for axis in range(8) for amt in (2, 3, 4, 8) for op in (OptOps.UPCAST, OptOps.UNROLL)] + \
          [Opt(OptOps.PADTO, axis, 4) for axis in range(8)] + [Opt(OptOps.BLOCK, axis, amt) for axis in range(8) for amt in (4, 8, 16)] + \
          [Opt(OptOps.LOCAL, axis, amt) for axis in range(8) for amt in (2, 4, 8, 16, 32)] + \
          [Opt(op, axis, amt) for axis in range(8) for amt in (16, 32, 64, 128, 256) for op in (OptOps.GROUP, OptOps.GROUPTOP)] + \
          [Opt(OptOps.TC, None, i) for i in range(2)]  # the renderer's first tensor cores (valid only as the first opt)


# part of every choice's cache key: choices stored by a search that measured otherwise are searched again (2: candidates
# timed after an untimed first call, see _runner; 3: BLOCK of an inner output axis puts its blocks outermost)
SEARCH_VERSION = 3
RETIME_ROUNDS = 7  # the final timing of the finalists: the median of this many interleaved runs


class Progress:
  """BEAM's progress line on stderr (BEAM_PROGRESS): the kernel, the round, candidates compiled and timed out of all, and
  the best time so far, rewritten in place on a terminal, one line per round otherwise. A search takes seconds to
  minutes per kernel; without it a program under BEAM looks hung."""

  def __init__(self, name: str) -> None:
    mode = BEAM_PROGRESS.value
    self.tty = sys.stderr.isatty()
    self.on = mode >= 2 or (mode == 1 and self.tty)
    self.name, self.round, self.done, self.total, self.best = name, 0, 0, 0, float("inf")
    self.start = time.perf_counter()

  def begin(self, what: str, total: int) -> None:
    self.what, self.done, self.total = what, 0, total
    self.show()

  def step(self, n: int = 1, best: float | None = None) -> None:
    self.done += n
    if best is not None:
      self.best = min(self.best, best)
    if self.tty or self.done == self.total:  # a log gets a line per stage, not one per candidate
      self.show()

  def show(self, final: bool = False) -> None:
    if not self.on:
      return
    best = f"{self.best * 1e6:.1f} us" if self.best != float("inf") else "-"
    where = "done" if final else f"{self.what} {self.done}/{self.total}"
    line = f"BEAM {self.name}: {where}, best {best}, {time.perf_counter() - self.start:.1f} s"
    if self.tty:
      sys.stderr.write(f"\r\x1b[K{line}" + ("\n" if final else ""))
    elif self.done == self.total or final:
      sys.stderr.write(line + "\n")
    sys.stderr.flush()

  def end(self) -> None:
    """The last line (also after an error or Ctrl-C: a terminal's line is finished, not left for the next output)."""
    if self.tty:
      self.show(final=True)


def _candidates(k: Kernel) -> list[Kernel]:
  out = []
  for opt in ACTIONS:
    if opt.axis is not None and opt.axis >= len(k.kinds):
      continue
    if opt.axis is not None and k.kinds[opt.axis] not in (GLOBAL, REDUCE):
      continue
    c = k.copy()
    try:
      c.apply_opt(opt)
    except KernelOptError:
      continue
    out.append(c)
  return out


def _compile(args: tuple[Compiler, str]) -> bytes | None:
  compiler, src = args
  try:
    return compiler.compile_cached(src)
  except Exception:  # a candidate that doesn't compile is just not chosen
    return None


def _runner(k: Kernel, lib: bytes, bufs: list[Buffer], var_vals: dict[Variable, int]) -> Callable[[], float]:
  """A call of k's program (compiled: lib) on bufs that returns how long the kernel ran, called once untimed first.
  A program's first call loads it: the CPU devices parse its signature then, about a millisecond, more than many of the
  kernels BEAM compares run; timed on first calls (as it once was), BEAM measured mostly that (a 2048 x 128 by 128 x 128
  matmul: 1.3 ms first, 0.5 ms after). The device's own time of the call is used where it gives one (wait=True)."""
  dev = Device[bufs[0].device]
  assert dev.runtime is not None
  p = k.to_program() if not hasattr(k, "_program") else k._program  # type: ignore[attr-defined]
  check_args(p, bufs)
  prg = dev.runtime(p.function_name, lib)
  global_size, local_size = p.launch_dims(var_vals)
  vals = tuple(var_vals[v] for v in p.vars)
  args = [b._buf for b in bufs]

  def run() -> float:
    st = time.perf_counter()
    et = prg(*args, global_size=global_size, local_size=local_size, vals=vals, wait=True)
    return et if et is not None else time.perf_counter() - st
  run()
  return run


def _time(run: Callable[[], float], runs: int = 3) -> float:
  """The best of `runs` calls of a _runner."""
  return min(run() for _ in range(runs))


def _renderer_options(r: Renderer) -> tuple[tuple[str, str], ...]:
  """The renderer's settings (its public data attributes), each as a stable digest: what opts turn into depends on them."""
  out = []
  for name in sorted(dir(r)):
    if name.startswith("_") or callable(value := getattr(r, name, None)):
      continue
    try:
      out.append((name, stable_key(value)))
    except TypeError:  # e.g. a table of functions: the renderer's class names that behaviour
      continue
  return tuple(out)


def beam_key(k: Kernel, device: str, amt: int) -> str:
  """The disk cache key of BEAM's choice for `k`: a digest of a canonical text of everything the choice depends on.
  Not a pickle of the AST, whose cached hashes (and enum hashes under PYTHONHASHSEED) differ in every process."""
  compiler = Device[device].compiler
  renderer = f"{type(k.renderer).__module__}.{type(k.renderer).__qualname__}"
  cachekey = compiler.cachekey if compiler is not None else None
  return stable_key((SEARCH_VERSION, k.ast, device, renderer, _renderer_options(k.renderer), cachekey, amt))


def beam_search(k: Kernel, bufs: list[Buffer], amt: int, var_vals: dict[Variable, int] | None = None) -> Kernel:
  var_vals = var_vals or {}
  key = beam_key(k, bufs[0].device, amt)
  if (cached := diskcache_get("beam_search", key)) is not None:
    try:
      return k.copy().apply_opts(cached)
    except Exception:  # a choice stored by another version of the optimizer that no longer applies: search again
      pass
  dev = Device[bufs[0].device]
  assert dev.compiler is not None
  # time on a scratch output: the real output (maybe also an input, for in-place writes) keeps its data
  scratch = [Buffer(bufs[0].device, bufs[0].size, bufs[0].dtype).ensure_allocated()] + [b.ensure_allocated() for b in bufs[1:]]
  workers = BEAM_WORKERS.value
  ctx = multiprocessing.get_context("fork")
  beam: list[tuple[Kernel, float]] = []
  progress = Progress(k.name)
  with concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
    def timed(ks: list[Kernel], what: str) -> list[tuple[Kernel, float]]:
      progs = []
      for c in ks:
        try:
          c._program = c.to_program()  # type: ignore[attr-defined]
          progs.append(c)
        except Exception:  # a candidate that can't be rendered isn't a candidate
          continue
      progress.begin(f"{what}: compiling", len(progs))
      libs = []
      for lib in pool.map(_compile, [(dev.compiler, c._program.src) for c in progs]):  # type: ignore[attr-defined]
        libs.append(lib)
        progress.step()
      progress.begin(f"{what}: timing", sum(lib is not None for lib in libs))
      out = []
      for c, lib in zip(progs, libs):
        if lib is not None:
          out.append((c, t := _time(_runner(c, lib, scratch, var_vals))))
          progress.step(best=t)
      return out
    try:
      # start from the unoptimized kernel and from the heuristics' choice: the search then only has to improve on them
      start = timed([k.copy(), k.copy().hand_coded_optimizations()], "start")
      beam = sorted(start, key=lambda x: x[1])[:max(amt, 1)]
      while True:
        progress.round += 1
        candidates = timed([c for base, _ in beam for c in _candidates(base)], f"round {progress.round}")
        best = sorted(beam + candidates, key=lambda x: x[1])[:amt]
        if DEBUG >= 2:
          print(f"BEAM {k.name}: {len(candidates)} candidates, best {best[0][1] * 1e6:.1f} us with {best[0][0].applied_opts}")
        if best[0][1] >= beam[0][1] * 0.98:  # nothing got faster: done
          break
        beam = best
      # one timing of 3 runs is noisy on a busy machine: the finalists and the heuristics' kernel are timed again,
      # interleaved so that a slow moment hits them all, and the best median wins
      finalists = [c for c, _ in beam] + [c for c, _ in start[1:] if all(c.applied_opts != f.applied_opts for f, _ in beam)]
      runs = [_runner(c, dev.compiler.compile_cached(c._program.src), scratch, var_vals) for c in finalists]  # type: ignore[attr-defined]
      progress.begin("final timing", RETIME_ROUNDS)
      rounds = []
      for _ in range(RETIME_ROUNDS):
        rounds.append([_time(run, runs=1) for run in runs])
        progress.step()
      medians = [sorted(r[i] for r in rounds)[RETIME_ROUNDS // 2] for i in range(len(finalists))]
    finally:
      progress.end()
  winner = finalists[medians.index(min(medians))]
  diskcache_put("beam_search", key, winner.applied_opts)
  return k.copy().apply_opts(winner.applied_opts)
