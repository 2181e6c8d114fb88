"""Tensor cores: a warp-wide matrix multiply-accumulate D = A @ B + C on small tiles, as one instruction.

A renderer declares the shapes it can emit (`Renderer.tensor_cores`); the kernel optimizer's TC opt splits a
matmul-like kernel's axes into tiles of that shape, and the lowerer emits one WMMA uop per tile and step of the
reduction. Each of the warp's threads holds a fragment of A, B and C: which elements, is the layout below, taken
from the hardware's documentation, and the only thing core needs to know about the instruction. The PYTHON device
executes WMMA by gathering the fragments of a warp's threads into whole tiles through the same layout, so a
kernel written for the hardware is checked, layout included, without it.

Layout functions take the thread's lane in the warp and the element's index in the thread's fragment and return
(row, column) in the tile. They use only + * // %, so they work on ints (the interpreter) and on symbolic index
expressions (the lowerer).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tg.dtype import DType, dtypes
from tg.ops import LazyOp, UnaryOps, truncate

Layout = Callable[[Any, int], tuple[Any, Any]]


@dataclass(frozen=True)
class TensorCore:
  name: str                      # the WMMA uop's arg; renderers map it to their instruction
  dims: tuple[int, int, int]     # (M, N, K): A is M x K, B is K x N, C and D are M x N
  dtype_in: DType                # A and B
  dtype_out: DType               # C and D (the accumulator)
  threads: int                   # the warp: threads that execute one WMMA together
  elements: tuple[int, int, int]  # elements of A, B and C each thread holds
  layout_a: Layout = field(compare=False, repr=False)
  layout_b: Layout = field(compare=False, repr=False)
  layout_c: Layout = field(compare=False, repr=False)


# PTX mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 (sm_80+), "Matrix Fragments for mma.m16n8k16 with floating
# point type" in the PTX ISA: lane = 4 * groupID + threadID_in_group
def _a_16816(lane: Any, i: int) -> tuple[Any, Any]:
  group, tid = lane // 4, lane % 4
  return group + 8 * ((i // 2) % 2), tid * 2 + i % 2 + 8 * (i // 4)


def _b_16816(lane: Any, i: int) -> tuple[Any, Any]:
  group, tid = lane // 4, lane % 4
  return tid * 2 + i % 2 + 8 * (i // 2), group


def _c_16816(lane: Any, i: int) -> tuple[Any, Any]:
  group, tid = lane // 4, lane % 4
  return group + 8 * (i // 2), tid * 2 + i % 2


MMA_M16N8K16_F16_F32 = TensorCore("mma_m16n8k16_f16_f32", (16, 8, 16), dtypes.float16, dtypes.float32, 32, (8, 4, 4),
                                  _a_16816, _b_16816, _c_16816)


# RDNA3 v_wmma_f32_16x16x16_f16 in wave32 (clang's __builtin_amdgcn_wmma_f32_16x16x16_f16_w32), per the RDNA3
# ISA's "Wave Matrix Multiply Accumulate" layouts: lane l holds all 16 K values of row l%16 of A and of column l%16 of
# B (lanes 16-31 repeat lanes 0-15); of C and D it holds column l%16, rows 2*i + l//16 for its 8 elements i.
def _a_wmma_16x16x16(lane: Any, i: int) -> tuple[Any, Any]:
  return lane % 16, i


def _b_wmma_16x16x16(lane: Any, i: int) -> tuple[Any, Any]:
  return i, lane % 16


def _c_wmma_16x16x16(lane: Any, i: int) -> tuple[Any, Any]:
  return 2 * i + lane // 16, lane % 16


WMMA_16X16X16_F16_F32_W32 = TensorCore("wmma_16x16x16_f16_f32_w32", (16, 16, 16), dtypes.float16, dtypes.float32, 32, (16, 16, 8),
                                       _a_wmma_16x16x16, _b_wmma_16x16x16, _c_wmma_16x16x16)


# Apple simdgroup_matrix 8x8 (Metal 2.3+, Apple GPU family 7+): a simdgroup of 32 threads, each holding 2 elements of
# every matrix (thread_elements()), the same layout for A, B, C and D: lane l holds row (l//2)%4 + 4*(l//16), columns
# 2*(l%2) + 4*((l//8)%2) and the one after it.
def _simdgroup_8x8(lane: Any, i: int) -> tuple[Any, Any]:
  return (lane // 2) % 4 + 4 * (lane // 16), i + 2 * (lane % 2) + 4 * ((lane // 8) % 2)


SIMDGROUP_8X8X8_F16_F32 = TensorCore("simdgroup_8x8x8_f16_f32", (8, 8, 8), dtypes.float16, dtypes.float32, 32, (2, 2, 2),
                                     _simdgroup_8x8, _simdgroup_8x8, _simdgroup_8x8)
SIMDGROUP_8X8X8_F32_F32 = TensorCore("simdgroup_8x8x8_f32_f32", (8, 8, 8), dtypes.float32, dtypes.float32, 32, (2, 2, 2),
                                     _simdgroup_8x8, _simdgroup_8x8, _simdgroup_8x8)

# by name: the WMMA uop's arg
TENSOR_CORES = {tc.name: tc for tc in (MMA_M16N8K16_F16_F32, WMMA_16X16X16_F16_F32_W32, SIMDGROUP_8X8X8_F16_F32, SIMDGROUP_8X8X8_F32_F32)}


def emulate_wmma(tc: TensorCore, a: list[tuple[Any, ...]], b: list[tuple[Any, ...]], c: list[tuple[Any, ...]]) -> list[tuple[float, ...]]:
  """One warp's WMMA: each list has one fragment per lane. Returns each lane's fragment of D = A @ B + C, with exact
  products and sums rounded once to the accumulator's type (the hardware keeps at least float32 inside)."""
  m, n, k = tc.dims
  A = [[0.0] * k for _ in range(m)]
  B = [[0.0] * n for _ in range(k)]
  C = [[0.0] * n for _ in range(m)]
  for M, frags, layout in ((A, a, tc.layout_a), (B, b, tc.layout_b), (C, c, tc.layout_c)):
    held: dict[tuple[int, int], int] = {}  # element -> the first lane that holds it
    for lane in range(tc.threads):
      for i, x in enumerate(frags[lane]):
        r, col = layout(lane, i)
        # an element some layouts repeat across lanes (RDNA3 WMMA's A and B) must be the same in every lane that holds it
        assert (r, col) not in held or M[r][col] == float(x), \
          f"{tc.name}: lane {lane} holds {float(x)} at ({r}, {col}) of a tile, lane {held[r, col]} holds {M[r][col]}"
        held.setdefault((r, col), lane)
        M[r][col] = float(x)
  out = []
  for lane in range(tc.threads):
    frag = []
    for i in range(tc.elements[2]):
      r, col = tc.layout_c(lane, i)
      frag.append(truncate(tc.dtype_out, sum(A[r][j] * B[j][col] for j in range(k)) + C[r][col]))
    out.append(tuple(frag))
  return out


@dataclass(frozen=True)
class TensorCorePlan:
  """How a kernel uses a tensor core (Kernel.apply_opt(TC) makes it): the tile axes of its full shape, and which
  operand of the reduction's multiply is A (the one that doesn't depend on the N axis)."""
  tc: TensorCore
  m: int
  n: int
  k: int
  a_first: bool


def operand_as(op: LazyOp, dt: DType) -> LazyOp | None:
  """The value of `op` in dtype `dt` before the casts that widened it (a half operand cast to float for a float
  sum), or None when it never was a `dt`."""
  while op.dtype != dt and op.op is UnaryOps.CAST:
    op = op.src[0]
  return op if op.dtype == dt else None
