"""Running a schedule: each ScheduleItem becomes an ExecItem (a runner plus its buffers) and runs.

Kernels are compiled once per (device, AST): `method_cache` keeps the loaded program, and the device's Compiler
keeps compiled bytes on disk across processes. Before a schedule runs, the memory planner (memory.py) lets its
intermediate buffers share memory. A buffer holds its value only once the kernel that writes it ran (pending.py): a
failure part way leaves the rest of the schedule to do, not garbage that looks computed.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import operator
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import tg.codegen.heuristics  # noqa: F401  (Kernel.hand_coded_optimizations uses it: loaded now, not mid-run)
from tg.codegen.kernel import Kernel
from tg.device import Buffer, Device
from tg.engine import memory, pending, profile, streams
from tg.engine.schedule import ScheduleItem, lookup_plan, schedule_found
from tg.helpers import DEBUG, GlobalCounters, colored
from tg.interrupts import hold_sigint
from tg.ops import LazyOp, MetaOps
from tg.renderer import Program
from tg.settings import BEAM, CAPTURING, STREAMS
from tg.shape.symbolic import Variable, sint, sym_infer

_opaque = operator.attrgetter("_buf")  # a Buffer's device memory (a map of it makes no Python frame per call)


class Runner:
  n_kernels = 1  # kernels one call runs: a TinyJit graph (engine/jit.GraphRunner) runs a batch of them

  def __init__(self, display_name: str, device: str, op_estimate: sint = 0, mem_estimate: sint = 0) -> None:
    self.display_name, self.device, self.op_estimate, self.mem_estimate = display_name, device, op_estimate, mem_estimate

  def __call__(self, bufs: list[Buffer], var_vals: dict[Variable, int], wait: bool = False) -> float | None:
    raise NotImplementedError(type(self))


def check_args(p: Program, bufs: list[Buffer]) -> None:
  """A program gets exactly its buffer parameters (Program.buf_count): a device whose calls are checked (OpenCL) would
  refuse extra ones, and a C kernel would silently read the wrong buffer in place of a missing one."""
  if len(bufs) != p.buf_count:
    raise ValueError(f"kernel {p.name} has {p.buf_count} buffer parameters, called with {len(bufs)} buffers")


class CompiledRunner(Runner):
  """A rendered, compiled and loaded kernel."""

  def __init__(self, p: Program) -> None:
    # the UOps are not needed once the source is rendered: a cached runner keeping them would keep its whole kernel
    # graph alive (the UOp intern table is weak)
    self.p = dataclasses.replace(p, uops=[]) if p.uops else p
    dev = Device[p.device]
    if dev.compiler is None or dev.runtime is None:
      raise RuntimeError(f"device {p.device} can't run kernels (its plugin gave no compiler or runtime)")
    self.lib = dev.compiler.compile_cached(p.src)
    self.clprg = dev.runtime(p.function_name, self.lib)
    # a kernel whose launch dimensions are numbers launches the same way every time: they are worked out once (a
    # device may size a launch by a Variable its kernel doesn't take as an argument: then p.vars is empty, the dims not)
    static = not p.vars and all(isinstance(s, int) for s in (*p.global_size, *p.local_size))
    self._dims = p.launch_dims({}) if static else None
    super().__init__(p.name, p.device, p.op_estimate, p.mem_estimate)

  def __call__(self, bufs: list[Buffer], var_vals: dict[Variable, int], wait: bool = False) -> float | None:
    p = self.p
    if len(bufs) != p.buf_count:
      check_args(p, bufs)
    if (dims := self._dims) is None:
      dims = p.launch_dims(var_vals)
      vals = tuple(var_vals[v] for v in p.vars)
    else:
      vals = ()
    return self.clprg(*map(_opaque, bufs), global_size=dims[0], local_size=dims[1], vals=vals, wait=wait)  # type: ignore[no-any-return]


class BufferCopy(Runner):
  """Copy between two devices: by the destination allocator's direct path from the source's (Allocator.transfer), else
  through host memory."""

  def __init__(self, nbytes: int, dest_device: str, src_device: str) -> None:
    super().__init__(colored(f"copy {nbytes:8d}, {dest_device[:7]:>7s} <- {src_device[:7]:7s}", "yellow"), dest_device, 0, nbytes)

  def __call__(self, bufs: list[Buffer], var_vals: dict[Variable, int], wait: bool = False) -> float | None:
    dest, src = bufs[0:2]
    st = time.perf_counter()
    if dest.nbytes != src.nbytes:
      dest.copyin(src.as_buffer())  # (raises: a copy between buffers of two sizes is a bug upstream)
    elif dest.nbytes:
      dest.ensure_allocated()
      src.ensure_allocated()
      Device[src.device].synchronize()  # an asynchronous device may still be writing it
      if not dest.allocator.transfer(dest._buf, src.allocator, src._buf, dest.nbytes):
        dest.copyin(src.as_buffer())
    return time.perf_counter() - st if wait else None


class EmptyOp(Runner):
  def __init__(self, buf: Buffer) -> None:
    super().__init__(colored(f"empty {buf.size:10d} {buf.dtype}", "yellow"), buf.device)

  def __call__(self, bufs: list[Buffer], var_vals: dict[Variable, int], wait: bool = False) -> float | None:
    return None


# compiled kernels, the most recently used last. Bounded: a program that keeps making new kernels (a TinyJit per
# learning rate, say) must not keep every one it ever compiled; a TinyJit holds its own runners, so evicting one it
# uses costs nothing, and an eager kernel evicted is found again in the device's compile cache on disk.
method_cache: dict[tuple[str, LazyOp], CompiledRunner] = {}
METHOD_CACHE_SIZE = 1024


def get_runner(device: str, ast: LazyOp, bufs: list[Buffer] | None = None, var_vals: dict[Variable, int] | None = None) -> CompiledRunner:
  """The compiled kernel for `ast`: optimized by BEAM search (BEAM=n, timed on `bufs`) or by the heuristics."""
  key = (device, ast)
  if (ret := method_cache.pop(key, None)) is not None:
    method_cache[key] = ret  # now the most recently used
    return ret
  renderer = Device[device].renderer
  if renderer is None:
    raise RuntimeError(f"device {device} can't run kernels: its plugin has no renderer. Compute on another device and copy.")
  if DEBUG >= 3:
    print(ast)
  k = Kernel(ast, renderer)
  if (beam := BEAM.value) >= 1 and bufs is not None:
    from tg.engine.search import beam_search
    k = beam_search(k, bufs, beam, var_vals)
  else:
    k.hand_coded_optimizations()
  ret = method_cache[key] = CompiledRunner(k.to_program())
  while len(method_cache) > METHOD_CACHE_SIZE:
    del method_cache[next(iter(method_cache))]
  return ret


@dataclass(slots=True)  # not frozen: a frozen dataclass sets each field through object.__setattr__, and an eager op makes one
class ExecItem:
  prg: Runner
  bufs: list[Buffer]
  outs: int = 1  # bufs[:outs] are what it writes

  def run(self, var_vals: dict[Variable, int] | None = None) -> float | None:
    return run_kernel(self.prg, self.bufs, var_vals or {})


def run_kernel(prg: Runner, bufs: list[Buffer], var_vals: dict[Variable, int]) -> float | None:
  """Run `prg` on `bufs` (allocated first where they aren't), counted in GlobalCounters; timed and reported under
  PROFILE or DEBUG>=2, when it returns the seconds it took."""
  for b in bufs:
    if b._buf is None:
      b.allocate()
  if not (profiling := profile.enabled()) and DEBUG.value < 2:  # the eager path: no timing, no report
    prg(bufs, var_vals)
    count(prg, var_vals)
    return None
  st = time.perf_counter()
  et = prg(bufs, var_vals, wait=True)
  if profiling:
    profile.record(prg.display_name, prg.device, st, et if et is not None else time.perf_counter() - st,
                   {"bufs": len(bufs), "ops": str(prg.op_estimate), "mem": str(prg.mem_estimate)})
  count(prg, var_vals)
  if et is not None:
    GlobalCounters.time_sum_s += et
  if DEBUG >= 2:
    op_estimate, mem_estimate = sym_infer(prg.op_estimate, var_vals), sym_infer(prg.mem_estimate, var_vals)
    ptm = colored(f"{et * 1e3:9.3f}ms", "yellow") if et is not None and et > 0.01 else f"{(et or 0) * 1e6:9.2f}us"
    gflops = op_estimate / (et or 1e-9) * 1e-9
    gbs = mem_estimate / (et or 1e-9) * 1e-9
    print(f"*** {prg.device[:7]:7s} {GlobalCounters.kernel_count:4d} {prg.display_name:30s} arg {len(bufs):3d} "
          f"mem {GlobalCounters.mem_used / 1e9:5.2f} GB tm {ptm}/{GlobalCounters.time_sum_s * 1e3:9.2f}ms "
          f"({gflops:8.2f} GFLOPS, {gbs:7.2f} GB/s)")
  return et


def count(prg: Runner, var_vals: dict[Variable, int]) -> None:
  """Count a run of `prg` in GlobalCounters (kernels, ops, bytes)."""
  GlobalCounters.kernel_count += prg.n_kernels
  op, mem = prg.op_estimate, prg.mem_estimate
  GlobalCounters.global_ops += op if type(op) is int else sym_infer(op, var_vals)
  GlobalCounters.global_mem += mem if type(mem) is int else sym_infer(mem, var_vals)


def lower_schedule_item(si: ScheduleItem) -> ExecItem:
  if si.ast.op is MetaOps.COPY:
    return ExecItem(BufferCopy(si.ast.arg, si.bufs[0].device, si.bufs[1].device), list(si.bufs))
  if si.ast.op is MetaOps.EMPTY:
    return ExecItem(EmptyOp(si.bufs[0]), list(si.bufs))
  return ExecItem(get_runner(si.outputs[0].device, si.ast, list(si.bufs), si.var_vals), list(si.bufs), len(si.outputs))


class _Captures(threading.local):
  """The captures open in this thread: kernels another thread runs meanwhile (an eager update in a data-loading thread)
  are not the capture's, or every replay would run them again."""
  def __init__(self) -> None:
    self.stack: list[list[tuple[ExecItem, dict[Variable, int]]]] = []


_captures = _Captures()


def capture_open() -> bool:
  """Whether this thread is inside a TinyJit capture."""
  return bool(_captures.stack)


@contextlib.contextmanager
def capturing() -> Iterator[list[tuple[ExecItem, dict[Variable, int]]]]:
  """Record every ExecItem this thread runs inside (with the symbolic values it ran with): how TinyJit captures."""
  stack = _captures.stack
  stack.append([])
  try:
    yield stack[-1]
  finally:
    stack.pop()


def lower_to_run(si: ScheduleItem, capture: bool = True) -> Callable[[], object]:
  """Compile `si` now; what runs it (recorded for a TinyJit capturing, with `capture`) is returned."""
  ei = lower_schedule_item(si)

  def go() -> None:
    if capture and (stack := _captures.stack) and CAPTURING.value and not isinstance(ei.prg, EmptyOp):
      stack[-1].append((ei, si.var_vals))
    ei.run(si.var_vals)
  return go


def run_schedule(schedule: list[ScheduleItem]) -> None:
  """Run a schedule from create_schedule. Transactional per item: if one fails, it and the items after it stay to do
  (engine/pending.py), and the exception goes on up."""
  planned = memory.plan_schedule(schedule)
  work = pending.adopt(schedule, planned)
  items: list[ScheduleItem] = list(work.items)  # type: ignore[arg-type]
  if (lowered := _side_by_side(items)) is None:
    work.run(list(items), lower=lower_to_run)
    return

  def prepare(k: int) -> tuple[Sequence[Buffer], Sequence[Buffer], Callable[[], object]]:
    si, ei = items[k], lowered[k]
    for b in ei.bufs:
      b.ensure_allocated()
    return si.outputs, si.bufs[len(si.outputs):], functools.partial(ei.prg, ei.bufs, si.var_vals)

  def finish(k: int) -> None:
    count(lowered[k].prg, items[k].var_vals)
    work.finished(items[k])
  streams.run_jobs(range(len(items)), lambda k: items[k].bufs[0].device, prepare, finish)


def _side_by_side(items: list[ScheduleItem]) -> list[ExecItem] | None:
  """The items compiled, when they are to run side by side on several CPU device instances (engine/streams.py)."""
  if not STREAMS.value or (_captures.stack and CAPTURING.value) or profile.enabled() or DEBUG.value >= 2:
    return None
  if not streams.several_cpu_instances({b.device for si in items for b in si.bufs}):
    return None
  lowered = [lower_schedule_item(si) for si in items]
  estimates = [(sym_infer(ei.prg.op_estimate, si.var_vals), sym_infer(ei.prg.mem_estimate, si.var_vals)) for si, ei in zip(items, lowered)]
  return lowered if streams.worth(estimates) else None


def realize_lazybuffers(lbs: list[Any]) -> None:
  """Compute `lbs` (Tensor.realize). A graph scheduled before as one kernel with nothing else to do (an eager op: no
  in-place write, no temporary, no capture) takes a shortcut: its kernel runs on its buffers, then the graph is dropped.
  That is transactional without PendingWork: until the kernel returned, the graph is still there, so a failure
  (MemoryError, a raising kernel) leaves the tensors lazy, and Ctrl-C waits until the bases are marked."""
  found, plan = lookup_plan(lbs)
  if found is None or plan is None or (eager := plan.eager) is None or (_captures.stack and CAPTURING.value):
    run_schedule(schedule_found(lbs, found, plan))
    return
  (ast, numbers), nodes = eager, found[1]
  bufs = [nodes[n].buffer for n in numbers]
  bases = list(map(nodes.__getitem__, plan.bases))
  try:
    prg = get_runner(bufs[0].device, ast, bufs)
    with hold_sigint():
      run_kernel(prg, bufs, {})
      for b in bases:  # as schedule._finish does, once the kernel ran
        memory.track(b)
        b.op, b.srcs = None, ()
  except BaseException:
    if bases[0].op is not None:
      # not run: left as the full path leaves a failed run, scheduled and pending (engine/pending.py), so the values it
      # reads are kept for it (a TinyJit replay that overwrites one in place runs it first)
      schedule_found(lbs, found, plan)
    raise
  finally:
    nodes.clear()  # (the caller's list must not keep the graph alive)
