"""Splitting a CPU kernel across threads, the renderer's half: which loop to split.

A renderer whose output axes are loops (`global_ids = False`) may run its outermost output loop over
[tg_start, tg_end), two int arguments after the symbolic sizes, and export the loop's full length as a
global int named `<name>_tg_outer`. The runtime (tg.runtime.cpu) divides [0, outer) into one slice per
thread. Iterations of an output loop write disjoint outputs, so the slices can run at the same time.
"""
from __future__ import annotations

from tg.codegen.lowerer import ACC_CHAINS
from tg.codegen.uops import UOp, UOps
from tg.dtype import dtypes
from tg.helpers import prod
from tg.renderer.cpu_target import CPUTarget, cpu_target
from tg.settings import CPU_THREAD_MIN_WORK

START, END = "tg_start", "tg_end"  # the names of the two extra arguments of a split kernel


def outer_symbol(name: str) -> str:
  """The name of the global that holds the split loop's full length in kernel `name`."""
  return f"{name}_tg_outer"


def loop_to_split(uops: list[UOp]) -> UOp | None:
  """The outermost output loop of the linear program `uops` when the kernel is worth splitting across threads, else None.

  Only kernels whose loops all have constant ends are split (their work is known when rendering), the split loop
  starts at 0 and its length fits an int (the runtime divides [0, outer)), and only from CPU_THREAD_MIN_WORK loop-body
  instructions (iterations times the ALU/LOAD/STORE count of the body, each vector op counted once per lane) on."""
  ranges = [u for u in uops if u.op is UOps.RANGE]
  outer = [u for u in ranges if not u.arg[1]]
  if not outer or not all(u.src[1].op is UOps.CONST for u in ranges):
    return None
  first = outer[0]
  # the runtime passes the slice's bounds as C ints (and reads the length as one): a longer loop is not split
  if not (first.src[0].op is UOps.CONST and first.src[0].arg == 0 and 2 <= first.src[1].arg <= dtypes.max(dtypes.int32)):
    return None
  # a vector op counts once per lane: the threshold is about the work, which vectors don't change
  body = sum((u.src[2] if u.op is UOps.STORE else u).count for u in uops if u.op in (UOps.ALU, UOps.LOAD, UOps.STORE))
  return first if prod(u.src[1].arg for u in ranges) * body >= CPU_THREAD_MIN_WORK.value else None


def native_vector_bytes() -> int:
  """The width of the target CPU's vector registers in bytes (AVX-512: 64, AVX: 32, else SSE/NEON's 16): see
  tg.renderer.cpu_target (CPU_TARGET; `CPU_VECTOR_BYTES` overrides it, 0 turns vectors off)."""
  return cpu_target().vector_bytes


# adds per accumulator that a CPU reduction's run may take: a float32 sum of 1M or 16M equal values then stays within
# 2 * log2(n) ulps (measured relative errors of 16M x 1e-3: 9.3e-7 with AVX-512, 1.4e-6 with AVX2 and SSE; with runs of
# 8192 on every CPU, as before, AVX2 gave 5.6e-6 and SSE 7.8e-6)
SUM_CHAIN = 32


def cpu_matmul_panels(target: CPUTarget) -> tuple[int, int]:
  """Renderer.matmul_panel and matmul_panel_rows for a CPU device: one vector of the target's register tile (its
  vectors then come from neighbouring panels, as fast as from one panel of all its columns: 104 GFLOP/s both on a
  1024 matmul, one thread, AVX-512) and its rows."""
  from tg.codegen.heuristics.cpu import register_tile  # the heuristics import the renderer package: not at import time
  tile = register_tile(target)
  return tile.lanes, tile.rows


def cpu_reduce_leaf(vector_bytes: int) -> int:
  """Renderer.reduce_leaf for a CPU device: a reduction keeps a float32 vector's lanes x ACC_CHAINS accumulators
  (tg.codegen.lowerer), so a run of that times SUM_CHAIN elements: 4096 with AVX-512, 2048 with AVX2, 1024 with SSE/NEON."""
  return max(1, vector_bytes // 4) * ACC_CHAINS * SUM_CHAIN
