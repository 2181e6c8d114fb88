"""Heuristics for devices whose output axes are loops (CPUs, the PYTHON interpreter), derived from the target CPU.

What a CPU kernel keeps in registers decides its speed, and that is a property of the CPU, not a constant: the
target (`Renderer.cpu_target`, tg.renderer.cpu_target) gives the vector width, the number of vector registers and
the cache sizes, and `register_tile` turns them into the matmul/conv tile. Reductions without reuse and elementwise
kernels take a vector of outputs or inputs per iteration.
"""
from __future__ import annotations

from dataclasses import dataclass

from tg.codegen.heuristics import try_opt
from tg.codegen.kernel import Kernel, Opt, OptOps
from tg.codegen.lowerer import ACC_CHAINS, GLOBAL, REDUCE, UPCAST, kernel_stores
from tg.codegen.one_hot_select import one_hot_sum
from tg.dtype import dtypes
from tg.helpers import prod
from tg.ops import BufferOps, MemBuffer, MetaOps
from tg.renderer import Renderer
from tg.renderer.cpu_target import CPUTarget, generic_target
from tg.shape.shapetracker import ShapeTracker
from tg.shape.symbolic import Variable, sint

SMALL_REDUCE = 7  # a reduce axis up to this size (a conv's window) is unrolled whole
MAX_CHAIN = 256  # adds one partial sum of a plain reduction may chain (see plain_reduce)
# independent multiply-adds a core must have in flight to keep its FMA units busy: 2 units x 4 cycles of latency on
# every x86 core since Haswell and on Zen (Apple's M cores have 4 units: the tile's other constraints decide there)
FMA_IN_FLIGHT = 8


@dataclass(frozen=True)
class RegisterTile:
  """A register tile of a matmul-like kernel: `rows` outputs along one output axis times `vectors` vectors of `lanes`
  outputs along another, each (row, vector) one vector accumulator. Per step of the reduction it loads `vectors`
  vectors of the operand that moves along the vector axis and broadcasts `rows` scalars of the other."""
  rows: int
  vectors: int
  lanes: int

  @property
  def accumulators(self) -> int:
    return self.rows * self.vectors

  @property
  def columns(self) -> int:
    return self.vectors * self.lanes


# what a core does per cycle, for register_tile's step model: FMA units and vector load ports (2 each on every x86 core
# since Haswell, on Zen, and at least that on Apple's and Neoverse cores), and the bytes per cycle the L2 cache
# sustains to one core (Skylake-SP to Sapphire Rapids and Zen 4: about 32 of a peak 64)
FMA_UNITS = 2
LOAD_PORTS = 2
L2_BYTES_PER_CYCLE = 32


def step_cycles(rows: int, vectors: int, vector_bytes: int, costly_rows: bool = False) -> tuple[float, float]:
  """Cycles of one step of a rows x vectors tile's reduction: (its FMAs on the FMA units, the most any other resource
  needs). The other resources: the load ports, for `vectors` vector loads and `rows` broadcasts (a masked broadcast
  is a load and a select: two); the L2 cache, for the vector operand, whose strip the inner output loop reuses from
  L2 (a 1024 x 64 strip of B is 256 KB: more than an L1, less than an L2), while the broadcast rows come from L1."""
  fmas = rows * vectors / FMA_UNITS
  loads = (rows * (2 if costly_rows else 1) + vectors) / LOAD_PORTS
  return fmas, max(loads, vectors * vector_bytes / L2_BYTES_PER_CYCLE)


def register_tile(target: CPUTarget, costly_rows: bool = False) -> RegisterTile:
  """The register tile for `target`, from its vector registers and width.

  A step of the reduction holds rows x vectors accumulators, the `vectors` loaded vectors and one broadcast scalar in
  registers; nothing may spill (a spilled accumulator is a load and a store per multiply-add):

      rows * vectors + vectors + 1 <= vector_registers

  The FMAs must hide their latency: at least FMA_IN_FLIGHT independent accumulators, and at most twice that (more
  hides nothing more and crowds the registers: 6 x 4 on AVX-512 measured 97-102 GFLOP/s on a Zen 4, 4 x 4 113).
  `vectors` is a power of two (the columns divide the output and B's panels); the rows need not be: a row count that
  doesn't divide the output's is padded (PADTO: the padded rows are computed from in-bounds reads and never stored,
  see apply_tile). With `costly_rows` (the broadcast operand is read through a mask: a padded conv image, whose padded
  rows would keep their masks) rows are powers of two and each costs two load-port slots.

  Of those, the tile that keeps the FMA units busiest by `step_cycles`' model wins (FMAs per step over the step's
  cycles), then the one whose other resources have the most slack per FMA (the caches and packing copies share them),
  then the fewer vector streams:

      AVX-512, 32 registers of 16 floats: 8 rows x 2 vectors, 16 accumulators + 2 + 1 = 19 registers; per step 8
        cycles of FMAs, 5 of loads, 4 of L2 (4 x 4: 21 registers, 4 cycles of loads but 8 of L2, no slack)
      AVX2, 16 registers of 8 floats:     6 rows x 2 vectors, 15 registers; 6 cycles of FMAs, 4 of loads, 2 of L2
        (4 x 2: 11 registers, 4 FMA, 3 load cycles: less slack per FMA; 8 x 2 needs 19 registers and spills; with
        costly rows 2 x 4: 13 registers)
      NEON, 32 registers of 4 floats:     4 rows x 4 vectors, 21 registers; 8 FMA cycles, 4 of loads, 2 of L2
      SSE, 16 registers of 4 floats:      6 rows x 2 vectors, 15 registers

  Measured with the C backend, each kernel alone (bench-style, median of best-of-5): a 2-core Xeon with AVX-512 that
  clang calls rocketlake (two 512-bit FMA units), the 1024 matmul's main kernel on 2 threads, 4 x 4 329-344 GFLOP/s,
  8 x 2 349-358, 16 x 1 239-253; the 2048 one 4 x 4 316-341, 8 x 2 341-357. One thread of a Zen 4 EPYC (512-bit
  instructions in two 256-bit halves, so the L2 is no limit): natively 16 x 1 104, 8 x 2 and 4 x 4 106-113;
  `CPU_TARGET=x86-64-v3` (AVX2 code) on the 1152 x 1024 x 1024 matmul 8 x 2 (spilling) 54-59, 8 x 1 80, 4 x 2 97-105,
  4 x 3 102-103, 6 x 2 109-113; the 1024 matmul padded to 1026 rows for 6 x 2 107-110, 4 x 2 103-104. bench/'s 3x3
  conv (x86-64-v3, one thread, masked image): 2 columns x 4 vectors 81-83, 4 x 4 76-80, 4 x 2 69-75."""
  lanes = max(1, target.vector_bytes // 4)
  best: tuple[tuple[float, float, int], RegisterTile] | None = None
  for rows in range(1, 33):
    if costly_rows and rows & (rows - 1):
      continue
    for vectors in (1, 2, 4, 8):
      acc = rows * vectors
      if acc + vectors + 1 > target.vector_registers or not FMA_IN_FLIGHT <= acc <= 2 * FMA_IN_FLIGHT:
        continue
      fmas, other = step_cycles(rows, vectors, target.vector_bytes, costly_rows)
      score = (acc / max(fmas, other), -other / acc, -vectors)
      if best is None or score > best[0]:
        best = (score, RegisterTile(rows, vectors, lanes))
  return best[1] if best is not None else RegisterTile(max(1, target.vector_registers - 2), 1, lanes)


def renderer_target(renderer: Renderer) -> CPUTarget:
  """The CPU a loop renderer's kernels run on: its own `cpu_target`, else a generic one of its vector width."""
  return renderer.cpu_target if renderer.cpu_target is not None else generic_target(renderer.vector_bytes)


def cpu_opts(k: Kernel) -> Kernel:
  """Unroll what a CPU keeps in registers. A matmul-like reduction (output axes that an input broadcasts) gets the
  target's register tile (`register_tile`) and cache blocking; other reductions vectors along the rows or down the
  columns (see `plain_reduce`); elementwise kernels a vector of outputs per iteration."""
  target = renderer_target(k.renderer)
  shape = k.full_shape
  reduce_axes = [i for i, kind in enumerate(k.kinds) if kind == REDUCE]
  globals_ = [i for i, kind in enumerate(k.kinds) if kind == GLOBAL and isinstance(shape[i], int)]
  if one_hot_sum(k.reduceop, reduce_axes):  # one load per output once its loop is gone: laid out as an elementwise kernel
    reduce_axes = []
  if reduce_axes:
    broadcast = reuse_axes(k, globals_)
    whole = register_tile(target)
    # the reuse axis that full vectors divide and an input is contiguous along (a packed operand's panel axis); of two
    # such (a conv's packed weight along its output channels, its padded image along the output columns) the one that
    # holds the tile's vectors: the image's 56 columns take one vector of 8, and the tile then 8 rows of 1 vector (8
    # accumulators, 54 GFLOP/s on bench/'s conv, one thread of a Zen 3 EPYC), the weight's 64 channels 2 vectors of 4
    # rows (74; both read each weight element once per step)
    full = [i for i in broadcast if whole.lanes > 1 and full_vectors(k, i, whole.lanes)]
    vec = next((i for i in full if isinstance(n := shape[i], int) and n % whole.columns == 0), full[0] if full else None)
    other = next((i for i in broadcast if i != vec), None)
    tile = register_tile(target, costly_rows=other is not None and masked_along(k, other))
    dot = False
    if (vec is None or not apply_tile(k, vec, other, tile, target)) and \
       not (dot := bool(broadcast) and not short_dot(k, broadcast, tile) and apply_dot_tile(k, broadcast, target)):
      upcast, budget = 1, tile.accumulators * tile.lanes  # as many copies as the tile's accumulators hold
      for i in broadcast:  # the innermost first
        upcast *= next((amt for amt in (16, 8, 4, 2) if upcast * amt <= budget and try_opt(k, Opt(OptOps.UPCAST, i, amt))), 1)
    if not broadcast:
      plain_reduce(k, max(reduce_axes), globals_)
    else:
      # a small window (a conv's 3 x 3) is unrolled whole, the innermost axis first: its loops' overhead goes, and a
      # padded image's masks then no longer change inside the remaining reduce loop, so the compiler hoists them
      # (measured on bench/'s 3x3 conv, on the two CPU backends: 13.6 -> 10.5 ms and 11.0 -> 10.3 ms)
      for r in reversed([i for i, kind in enumerate(k.kinds) if kind == REDUCE]):
        size = k.full_shape[r]
        if isinstance(size, int) and 1 < size <= SMALL_REDUCE and not try_opt(k, Opt(OptOps.UNROLL, r, 0)):
          break
      if dot:
        block_dot_for_cache(k, target)
      else:
        block_for_cache(k, target)
  elif globals_:
    # as many outputs per iteration as a vector of the output holds, at least 4 (measured on bench/'s tanh-gelu, whose
    # exp2 is expanded into vector arithmetic: 36 -> 21.5 ms with 16 lanes instead of 4; the relu chain 4.7 -> 3.0 ms)
    # (and no more than the widest dtype computed with holds: a float32 kernel that computes in float64, as an exact
    # float %, takes 4 lanes on AVX2, where 8 would split every float64 op into 8 scalar ones: 1M % 36 -> ... ms)
    width = min((k.renderer.vector_width(s.arg.dtype) for s in kernel_stores(k.ast)), default=1)
    width = min([width] + [k.renderer.vector_width(op.dtype) for op in k.ast.lazyops() if op.op not in BufferOps
                           and op.op is not MetaOps.SINK and op.dtype != dtypes.bool and op.dtype.itemsize > 4])
    # (the widest that divides the axis: a panel copy's innermost axis of 8 rows takes 8 on AVX-512, not 4: the 1024
    # matmul's A copy 267 -> 232 us; a conv image's padded rows of 58 take 2: 1.13 -> 0.68 ms)
    any(try_opt(k, Opt(OptOps.UPCAST, globals_[-1], amt)) for amt in _halvings(max(width, 4)))
    read_rows_in_runs(k)
  return k


def dot_tile(target: CPUTarget) -> tuple[int, int]:
  """(rows, columns) of outputs for a kernel vectorized along its reduction (`apply_dot_tile`): each output a vector
  accumulator whose lanes are added up after the loop, each step loading a vector of every row and of every column's
  operand. rows * columns accumulators + rows + columns loaded vectors <= vector_registers, the most FMAs per load,
  then the more rows: AVX-512 4 x 4 (24 registers, 16 FMAs per 8 loads), AVX2 4 x 2 (14 registers).
  Measured, x @ W.T + b of 256 x 512 by 512 x 512, one thread: AVX-512 4 x 4 1.76 ms (4 x 2 2.3, 2 x 4 2.4, and the
  16 x 16 outputs with W gathered lane by lane 5.5); x86-64-v3 4 x 2 2.0 ms (2 x 4 2.2, 8 x 8 gathered 2.9)."""
  best: tuple[tuple[float, int], tuple[int, int]] | None = None
  for rows in (1, 2, 4, 8, 16):
    for cols in (1, 2, 4, 8, 16):
      if rows * cols + rows + cols > target.vector_registers:
        continue
      score = (rows * cols / (rows + cols), rows)
      if best is None or score > best[0]:
        best = (score, (rows, cols))
  return best[1] if best is not None else (1, 1)


def short_dot(k: Kernel, broadcast: list[int], tile: RegisterTile) -> bool:
  """A contraction too short for the dot tile (`apply_dot_tile`) on a CPU of 16-float vectors (AVX-512): the dot
  tile adds up each output's 16 lanes after its loop, about as many adds per output as its loop has FMAs up to
  K = 256, and still a good part of them at 512 (K: the whole reduction, all its axes). Such a kernel keeps cpu_opts'
  plain upcast tile instead: 16 x 16 outputs, per step of the reduction one gathered vector of the second operand
  (16 loads) and 16 broadcasts of the first for 16 FMAs, all in registers.

  Measured on one thread of a Zen 4 EPYC (CPU time, median), dot tile -> upcast tile: x @ W.T with K = 128,
  2048 x 128 by (512 x 128).T 6.0 -> 2.5 ms (the char-level GPT's MLP), by (384 x 128).T 2.8 -> 1.9 ms; K = 64 5.2 ->
  1.3 ms; K = 512: 2048 x 512 by (128 x 512).T 3.4 -> 2.8 ms, 256 x 512 by (512 x 512).T 1.8 -> 1.3 ms; its
  attention scores q @ k.T, head_dim 32 (32 x 4 heads x 64 x 64), 2.2 -> 0.62 ms. Not beyond K = 512: the 16 rows
  the gathers read are then 4 KB apart or more, and at multiples of 4 KB they share L1 sets (64 x 1024 by
  (768 x 1024).T: 1.3 ms dot, 3.9 gathered; K = 2048, 3072 the same). With 8-float vectors (AVX2) the gathered tile
  has half the reuse and the dot tile is as good or better (2048 x 128 by (512 x 128).T: 4.0 ms, gathered 5.0).
  The kernels of the llvmlite backend gain alike (2048 x 128 by (512 x 128).T 4.5 -> 2.7 ms, the attention scores 1.6 -> 0.36 ms)."""
  if tile.lanes < 16 or len(broadcast) != 2:
    return False
  reduce_axes = [i for i, kind in enumerate(k.kinds) if kind == REDUCE]
  r, sizes = reduce_axes[-1], [k.full_shape[i] for i in reduce_axes]
  if not all(isinstance(n, int) for n in sizes) or prod(sizes) > 32 * tile.lanes:  # K: the whole reduction, every reduce axis
    return False
  if not all(isinstance(n := k.full_shape[i], int) and n % tile.lanes == 0 for i in broadcast):
    return False  # the upcast tile wouldn't be whole (a matrix-vector product keeps the dot tile)
  # a contraction: one operand broadcast along each reuse axis and moving along the other. A LayerNorm's row sums of
  # (x + a position embedding) * a gain have inputs broadcast on both axes too, but x moves along both: they keep the
  # dot tile's contiguous rows (the upcast tile would gather x lane by lane: 5x slower)
  a, b = broadcast
  moving = [st for op in k.ast.lazyops() if op.op is BufferOps.LOAD and (st := op.arg.st.real_strides())[r] != 0]
  return any(st[a] == 0 and st[b] != 0 for st in moving) and any(st[b] == 0 and st[a] != 0 for st in moving)


def apply_dot_tile(k: Kernel, broadcast: list[int], target: CPUTarget) -> bool:
  """A matmul-like kernel whose operands are both contiguous along the innermost reduce axis and neither along an
  output axis (x @ W.T: a Linear layer, q @ k.T) is vectorized along the reduction: UNROLL it by a vector's lanes
  (vector accumulators, added up after the loop) and UPCAST the reuse axes by `dot_tile`'s columns and rows, so that
  no operand is gathered lane by lane. False, with nothing applied, when the kernel isn't of that kind."""
  lanes = max(1, target.vector_bytes // 4)
  reduce_axes = [i for i, kind in enumerate(k.kinds) if kind == REDUCE]
  if lanes < 2 or not reduce_axes:
    return False
  r = reduce_axes[-1]
  moving = [op.arg.st.real_strides() for op in k.ast.lazyops() if op.op is BufferOps.LOAD and op.arg.st.real_strides()[r] != 0]
  if len(moving) < 2 or any(st[r] != 1 for st in moving):
    return False
  c = k.copy()
  if not try_opt(c, Opt(OptOps.UNROLL, r, lanes)):
    return False
  rows, cols = dot_tile(target)
  for axis, amt in zip(broadcast, (cols, rows)):  # innermost first: a split moves the axes after it
    next((a for a in _halvings(amt) if try_opt(c, Opt(OptOps.UPCAST, axis, a))), None)
  k.ast, k.kinds, k.applied_opts, k.tc = c.ast, c.kinds, c.applied_opts, c.tc
  return True


def max_rows(target: CPUTarget, vectors: int) -> int:
  """The most rows (a power of two) a tile of `vectors` vectors may have without spilling: rows * vectors accumulators
  + `vectors` loaded vectors + 1 broadcast <= vector_registers (the tile's own rows when `vectors` is its own)."""
  rows = 1
  while (2 * rows) * vectors + vectors + 1 <= target.vector_registers:
    rows *= 2
  return rows


def apply_tile(k: Kernel, vec: int, other: int | None, tile: RegisterTile, target: CPUTarget) -> bool:
  """The register tile on `k`: `tile.lanes` x up to `tile.vectors` along `vec` (the vector axis), and along `other`
  as many rows as the registers then hold (more when fewer vectors divide `vec`: a 784-wide axis takes one vector of
  16, and 16 rows keep 16 accumulators busy, where the tile's 4 rows would leave the FMA units waiting). False, with
  nothing applied, when `vec` takes no vector. Splits go from the highest axis down, as a split moves the axes after it."""
  c = k.copy()
  if not try_opt(c, Opt(OptOps.UPCAST, vec, tile.lanes)):
    return False
  vectors = next((v for v in _halvings(tile.vectors) if _applies(c, Opt(OptOps.UPCAST, vec, v))), 1)
  # tried on the kernel as it was: the vector split moves an `other` after `vec`
  rows, pad = tile_rows(k, other, tile, target, vectors)
  c = k.copy()
  if pad and not try_opt(c, Opt(OptOps.PADTO, other, pad)):  # (a PADTO moves no axis)
    return False
  splits = [(vec, tile.lanes)] + ([(vec, vectors)] if vectors > 1 else [])
  if rows > 1:
    splits = [(other, rows), *splits] if other is not None and other > vec else [*splits, (other, rows)]  # type: ignore[list-item]
  if not all(try_opt(c, Opt(OptOps.UPCAST, axis, amt)) for axis, amt in splits):
    return False
  k.ast, k.kinds, k.applied_opts, k.tc = c.ast, c.kinds, c.applied_opts, c.tc
  return True


# the most padding the tile's rows may add to an output axis (PADTO), as a fraction of it: the padded rows are computed
# for nothing, and 6 rows instead of 4 gained 7-8% on AVX2 (see register_tile)
MAX_ROW_PADDING = 1 / 16


def tile_rows(k: Kernel, other: int | None, tile: RegisterTile, target: CPUTarget, vectors: int) -> tuple[int, int]:
  """The rows of the register tile along `other`, and the multiple `other` is first padded to (0: none): the tile's
  own rows when it has its own vectors and they divide `other`, or pad it by at most MAX_ROW_PADDING (a 1024 row axis
  padded to 1026 for 6 rows); else the most rows, a power of two, that divide it and fit the registers with `vectors`
  vectors (max_rows). A padding that would leave a prime count of tiles pads to twice the rows where that stays
  within MAX_ROW_PADDING: a prime loop can't be blocked for the caches (block_for_cache) nor split evenly, and 256
  rows of AVX2's 6 are 43 tiles (258 rows), 264 rows 44."""
  if other is None:
    return 1, 0
  size = k.full_shape[other]
  if vectors == tile.vectors and isinstance(size, int) and size > tile.rows:
    padded = -(-size // tile.rows) * tile.rows
    if padded == size and _applies(k, Opt(OptOps.UPCAST, other, tile.rows)):
      return tile.rows, 0
    for multiple in row_padding(size, tile.rows):
      if try_opt(p := k.copy(), Opt(OptOps.PADTO, other, multiple)) and _applies(p, Opt(OptOps.UPCAST, other, tile.rows)):
        return tile.rows, multiple
  return next((r for r in _halvings(max_rows(target, vectors)) if _applies(k, Opt(OptOps.UPCAST, other, r))), 1), 0


def row_padding(size: int, rows: int) -> tuple[int, ...]:
  """The multiples, in the order tile_rows tries them, that a row axis of `size` may be padded to for a tile of `rows`
  rows: `rows`, or twice that first where `rows` would leave a prime count of tiles, each only while it pads by at most
  MAX_ROW_PADDING. A packed operand's row panels are padded by the first (engine/packing.py), so that the tile's padded
  rows stay inside the copy."""
  multiples = (2 * rows, rows) if _prime(-(-size // rows)) else (rows,)
  return tuple(m for m in multiples if -(-size // m) * m - size <= size * MAX_ROW_PADDING)


def _prime(n: int) -> bool:
  return n > 2 and all(n % d for d in range(2, int(n ** 0.5) + 1))


def _applies(k: Kernel, opt: Opt) -> bool:
  """`opt` would apply to `k` (tried on a copy)."""
  return try_opt(k.copy(), opt)


def masked_along(k: Kernel, axis: int) -> bool:
  """Some input that moves along `axis` is read through a mask (a padded conv image): each of its loads is a select."""
  return any(op.arg.st.real_strides()[axis] != 0 and any(v.mask is not None for v in op.arg.st.views)
             for op in k.ast.lazyops() if op.op is BufferOps.LOAD)


def _halvings(n: int) -> list[int]:
  """n, n/2, ... down to 2."""
  out = []
  while n >= 2:
    out.append(n)
    n //= 2
  return out


def plain_reduce(k: Kernel, r: int, globals_: list[int]) -> None:
  """A reduction that no input is broadcast in (a sum, a softmax's max and sum of exps, a variance).

  Along the rows (the loads are contiguous along the reduce axis `r`): a vector of elements per iteration (a vector
  accumulator) and 4 vectors of the row per iteration, each its own chain of adds (Lowerer: ACC_CHAINS). A row too
  short to unroll (under 5 vectors) takes its independent chains from neighbouring rows instead: up to 4 rows side by
  side. Rows long enough keep one row at a time: one stream per thread. Measured, one process alternating (2 cores,
  Zen 4, the AVX-512 build and the x86-64-v3 one): with 4 rows side by side as well, the 16M-float sum's partials
  (4096 rows of 4096) 1.95 -> 1.66 ms (v3) and 1.80 -> 1.68 ms, the max-and-sum-of-exps kernel of an 8192 x 1024
  softmax 3.38 -> 2.84 ms (v3) and 2.80 -> 2.06 ms, an 8192 x 768 max 0.61 -> 0.27 ms; 65536 rows of 32 were 0.060 ms
  with 4 rows side by side and 0.063 without (so rows that short keep them).

  Down the columns (contiguous along an output axis only, e.g. a row-major matrix summed over its rows): up to 16
  vectors of neighbouring outputs, each accumulating down its column while a loop iteration reads 16 vectors of one
  row (the sum of a 4096 x 4096 matrix over its rows: 60 ms with the reduce loop striding down one column, 1.7 ms)."""
  loads = [op.arg for op in k.ast.lazyops() if op.op is BufferOps.LOAD]
  width = min((k.renderer.vector_width(mb.dtype) for mb in loads), default=1)
  def along(axis: int) -> bool: return any(mb.st.real_strides()[axis] == 1 for mb in loads)
  if width > 1 and not along(r) and (cols := [i for i in globals_ if along(i)]):
    if try_opt(k, Opt(OptOps.UPCAST, cols[-1], width)):
      any(try_opt(k, Opt(OptOps.UPCAST, cols[-1], amt)) for amt in (16, 8, 4, 2))
    return
  size = k.full_shape[r]
  if not isinstance(size, int):
    return
  vector = next((amt for amt in (16, 8, 4, 2) if amt <= max(width, 4) and size > amt and try_opt(k, Opt(OptOps.UNROLL, r, amt))), 1)
  # each output's partial sums are the vector's lanes times its accumulators (the unrolled copies, at most ACC_CHAINS
  # shared by the upcast outputs); a float sum's error grows with each partial's chain of adds, so the outputs are
  # upcast only while every chain stays within MAX_CHAIN (a long row with narrow vectors keeps all ACC_CHAINS per
  # output: with 4 lanes an 8192 row in 8 chains of 1024 was 8e-6 off, in 32 of 256 within the 2 log2(n) ulps bound)
  def chain(copies: int, outputs: int) -> float:
    return size / (vector * max(1, min(copies, ACC_CHAINS // outputs)))
  rest = size // vector
  copies_ok = [c for c in (4, 2, 8) if vector > 1 and rest > 4 and rest % c == 0] or [1]
  # neighbouring outputs side by side only for a row that can't be unrolled: beside an unrolled row they only add
  # streams (see above)
  plans = [(c, u) for u in ((4, 2, 1) if globals_ and copies_ok == [1] else (1,)) for c in copies_ok]
  copies, outputs = next(((c, u) for c, u in plans if chain(c, u) <= MAX_CHAIN), min(plans, key=lambda p: chain(*p)))
  if copies > 1:
    try_opt(k, Opt(OptOps.UNROLL, r, copies))
  if outputs > 1:  # last: an UPCAST adds an axis before the reduce axes, which moves `r`
    any(try_opt(k, Opt(OptOps.UPCAST, globals_[-1], amt)) for amt in _halvings(outputs))


# bytes of one input row that an iteration of a copy across rows reads (see read_rows_in_runs): four cache lines.
# Measured on the 1024 matmul's B packed into panels of 16 floats (AVX-512, two threads, right after the matmul it
# feeds, so B comes from memory): 64 bytes per row (one panel) 0.47-0.62 ms, 256 bytes 0.30-0.37 ms, 512 bytes 0.30-0.33
READ_RUN_BYTES = 256


def read_rows_in_runs(k: Kernel) -> None:
  """An elementwise kernel that reads an input across its rows: each iteration of the innermost loop reads one vector
  of a row and the next iteration a vector of another row, far away (a matmul's B copied into panels of columns: 64
  bytes of a row, then of the row 4 KB further). Every read is then a new cache line and often a new page, with
  nothing for the prefetcher to follow. When an outer output axis steps along the same row by exactly the vector's
  extent (the next panel), upcast it: an iteration reads READ_RUN_BYTES of each row in one sequential run and writes
  as many vectors to as many panels."""
  shape = k.full_shape
  vector = [i for i, kind in enumerate(k.kinds) if kind == UPCAST]
  loops = [i for i, kind in enumerate(k.kinds) if kind == GLOBAL and isinstance(shape[i], int) and shape[i] > 1]
  if len(vector) != 1 or len(loops) < 2 or not isinstance(run := shape[vector[0]], int):
    return
  for op in k.ast.lazyops():
    if op.op is not BufferOps.LOAD:
      continue
    strides = op.arg.st.real_strides()
    # a vector of a row: contiguous along the vector, and the inner loop moves elsewhere (not along the row, not nowhere)
    if strides[vector[0]] != 1 or strides[loops[-1]] in (None, 0, run):
      continue
    amt = READ_RUN_BYTES // (run * op.arg.dtype.itemsize)
    for axis in loops[:-1]:
      if strides[axis] == run and any(try_opt(k, Opt(OptOps.UPCAST, axis, a)) for a in _halvings(amt)):
        return


def full_vectors(k: Kernel, axis: int, width: int) -> bool:
  """Some input of the reduction reads `width` consecutive elements along `axis` once it is split by `width` (a
  packed operand's panel axis is only contiguous within a panel). Only inputs that move along a reduce axis count:
  a bias added after a matmul is contiguous along the output columns too, but a tile that vectorizes them would
  gather the matmul's own operand lane by lane (the MLP step's 256 x 512 x 512 layer: 31 ms instead of 2)."""
  c = k.copy()
  if not try_opt(c, Opt(OptOps.UPCAST, axis, width)):
    return False
  reduce_axes = [i for i, kind in enumerate(c.kinds) if kind == REDUCE]
  for op in c.ast.lazyops():
    if op.op is BufferOps.LOAD and (strides := op.arg.st.real_strides())[axis + 1] == 1 and any(strides[r] != 0 for r in reduce_axes):
      return True
  return False


def block_for_cache(k: Kernel, target: CPUTarget) -> None:
  """The inner output loops sweep every input the outermost loop doesn't index (a matmul's B) once per outer
  iteration: from memory, when it is bigger than the L2 cache. BLOCK the outer loop so that a block of its
  iterations shares each sweep, with the block's own inputs (rows of A) filling the L2 meanwhile: the 2048 matmul's
  main kernel (one process, rounds) with blocks of A rows that fill half the L2, then all of it: AVX-512 (4-row
  tiles) 82.8 -> 80.0 ms, x86-64-v3 (6-row tiles) 94.3 -> 86.3 ms; the 1024 matmul's the same either way.

  The threads split the loop of blocks: the largest block whose count of blocks keeps every core busy but for at most
  MAX_IDLE_SHARE of the time. A 1024 matmul padded to 171 tiles of 6 rows (AVX2) blocked by 19 left 9 blocks to 2
  cores, one idle a ninth of the time: 10.95 ms, by 9 (19 blocks) 10.23, by 3 (57) 10.05 (one process, rounds)."""
  # (an axis of size 1 is no loop: x @ W of a (1, 256, 768) x blocks its 256 rows, not its batch of 1)
  loops = [i for i, kind in enumerate(k.kinds) if kind == GLOBAL and isinstance(n := k.full_shape[i], int) and n > 1]
  if len(loops) < 2:
    return
  outer, n = loops[0], k.full_shape[loops[0]]
  assert isinstance(n, int)
  loads = [op.arg for op in k.ast.lazyops() if op.op is BufferOps.LOAD]
  swept = sum(mb.dtype.itemsize * mb.st.real_size() for mb in loads if not moves_along(mb.st, outer))
  per_iteration = sum(mb.dtype.itemsize * mb.st.real_size() for mb in loads if moves_along(mb.st, outer)) / n
  if swept > target.l2_bytes and per_iteration > 0:
    top = min(n - 1, int(target.l2_bytes // per_iteration))
    fits = [amt for amt in range(top, 1, -1) if n % amt == 0]
    balanced = [amt for amt in fits if idle_share(n // amt, target.cores) <= MAX_IDLE_SHARE]
    any(try_opt(k, Opt(OptOps.BLOCK, outer, amt)) for amt in balanced or fits)


def block_dot_for_cache(k: Kernel, target: CPUTarget) -> None:
  """A dot tile (`apply_dot_tile`: x @ W.T) reads, per step of its reduction, a vector of each of its rows of x (4 on
  AVX2 and AVX-512) and of each of its columns' rows of W (2 on AVX2, 4 on AVX-512). Its inner output loop steps
  through W, so W is swept once per tile of x rows: from L3 when W is bigger than the L2 (x @ W.T of 256 x 784 by
  (512 x 784).T sweeps W's 1.6 MB 64 times). Blocking the outer loop instead (a block of x tiles in L2, each W pair
  in L1) would read the x side, the side with more loads per step, from L2: measured 2x slower.

  So the inner loop is blocked: its blocks become the outermost loop (BLOCK on the last output axis), a block of W
  rows filling at most half the L2 while every x tile sweeps it, each x tile's rows staying in L1 (4 rows of K floats:
  12 KB at K = 784). W is then read from L3 once, x once per block. The threads split the blocks: the largest block
  whose count gives every core a share and keeps them busy but for MAX_IDLE_SHARE, as in block_for_cache, and no
  blocking where no count does (48 cores split 256 pairs of W rows in 128 blocks at best: 3 for some cores, 2 for
  others). Measured on a 2-core Zen 3 EPYC
  (AVX2, L2 512 KiB, the kernel alone, 2 threads, rounds): 256 x 784 by (512 x 784).T 104 -> 115-117 GFLOP/s,
  256 x 512 by (512 x 512).T 78 -> 86-90, 256 x 768 by (768 x 768).T 101 -> 102-109."""
  loops = [i for i, kind in enumerate(k.kinds) if kind == GLOBAL and isinstance(n := k.full_shape[i], int) and n > 1]
  if len(loops) < 2:
    return
  inner, n = loops[-1], k.full_shape[loops[-1]]
  assert isinstance(n, int)
  # what one sweep of the inner loop reads of W: not what W has along the outer loops (q @ k.T sweeps one head's k, not
  # every head's: 64 KB of GPT-2's 768 KB)
  def sweep_bytes(mb: MemBuffer) -> sint:
    return mb.dtype.itemsize * prod(s for i, (s, st) in enumerate(zip(k.full_shape, mb.st.real_strides())) if st != 0 and i not in loops[:-1])
  swept = sum(sweep_bytes(op.arg) for op in k.ast.lazyops() if op.op is BufferOps.LOAD and moves_along(op.arg.st, inner))
  if not isinstance(swept, int) or swept <= target.l2_bytes:
    return
  top = min(n - 1, int(target.l2_bytes // 2 // (swept / n)))
  # only a count of blocks that every core gets a share of, evenly: the blocks are now what the threads split, and
  # fewer of them than cores would leave cores idle where the unblocked kernel's outer loop kept them all busy
  balanced = [amt for amt in range(top, 1, -1) if n % amt == 0 and n // amt >= target.cores and
              idle_share(n // amt, target.cores) <= MAX_IDLE_SHARE]
  any(try_opt(k, Opt(OptOps.BLOCK, inner, amt)) for amt in balanced)


MAX_IDLE_SHARE = 1 / 32  # of the cores' time, that a split of a loop may leave idle (see block_for_cache)


def idle_share(iterations: int, cores: int) -> float:
  """The share of `cores`' time left idle when `iterations` equal iterations are split across them."""
  per_core = -(-iterations // cores)
  return 1 - iterations / (per_core * min(cores, iterations))


def moves_along(st: ShapeTracker, axis: int) -> bool:
  """Some element `st` reads changes along `axis`. Its stride says so, where it has one; a row axis padded for the
  register tile and then split (PADTO, UPCAST) has none (the padding's mask spans the split), so its index is read."""
  if (stride := st.real_strides()[axis]) is not None:
    return stride != 0
  idxs = [Variable(f"_i{i}", 0, s - 1) if isinstance(s, int) else Variable(f"_i{i}", 0, s.max - 1) for i, s in enumerate(st.shape)]
  return idxs[axis] in st.expr_idxs(idxs)[0].vars()


def reuse_axes(k: Kernel, globals_: list[int]) -> list[int]:
  """Up to two output axes to upcast, innermost first: along an axis that an input broadcasts (stride 0), the
  upcast copies share that input's load. Each input picks its innermost such axis, so that different inputs are
  reused (matmul: the rows reuse B's loads, the columns A's; conv: output channels reuse the image's loads,
  output columns the weights').

  Only inputs that move along the reduction count (a bias added after a sum is loaded once per output, a softmax's
  row max once per row), and only axes longer than 1 (a batch of one is no loop: each GPT-2 LayerNorm's row sums were
  taken for a matmul's, because the batch axis of their input broadcasts, and ran 10x slower)."""
  picked: list[int] = []
  reduce_axes = [i for i, kind in enumerate(k.kinds) if kind == REDUCE]
  for op in k.ast.lazyops():
    if op.op is not BufferOps.LOAD:
      continue
    strides = op.arg.st.real_strides()
    if all(strides[r] == 0 for r in reduce_axes):
      continue
    if (cands := [i for i in globals_ if strides[i] == 0 and k.full_shape[i] != 1 and i not in picked]):
      picked.append(max(cands))
  return sorted(picked, reverse=True)[:2]

