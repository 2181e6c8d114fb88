"""Heuristics for devices with workgroups (GPUs): tensor cores for matmuls of their dtypes, a workgroup per long
reduction, a 4 x 4 tile per thread for other matmul-like kernels, 4 elements per thread in elementwise kernels, and
the output axes spread over workgroups.

The choices were timed on an NVIDIA H200 (bench/README.md, "GPU"; 4.8 TB/s by the datasheet, about 4.3 TB/s for a
device-to-device copy), one kernel at a time (bench/gpu_kernels.py), against the alternatives listed with each:
  sum of 64M floats (first level of its tree)  GROUP 32 x LOCAL 32: 66 us, 4.0 TB/s; GROUPTOP 32 x LOCAL 32: 275 us
  gelu of 64M floats                           UPCAST 4 x LOCAL 128: 132 us, 4.1 TB/s; LOCAL 32: 1272 us
  row max of 8192 x 4096 (softmax's reduce)    GROUP 128: 52 us; GROUP 32 x LOCAL 32: 70 us; GROUP 256: 131 us
  fp16 matmul 8192 (tensor cores, one warp)    TC + UPCAST N 8 x M 2: 58 TFLOP/s; TC alone: 12 TFLOP/s
"""
from __future__ import annotations

from tg.codegen.heuristics import try_opt
from tg.codegen.heuristics.cpu import reuse_axes
from tg.codegen.kernel import Kernel, Opt, OptOps
from tg.codegen.lowerer import GLOBAL, REDUCE
from tg.codegen.one_hot_select import one_hot_sum
from tg.helpers import prod
from tg.ops import BufferOps
from tg.settings import TC as USE_TC

GROUP_CHAIN = 1024  # a workgroup device shares a reduce axis this long among a group's threads, whatever the outputs
MAX_THREADS = 128  # threads of one workgroup the heuristics make
GROUP_SIZES = (128, 64, 32, 16)  # threads sharing one reduction, the most that leaves each thread MIN_SHARE elements
MIN_SHARE = 8


def workgroup_opts(k: Kernel) -> Kernel:
  """For devices with workgroups: a matmul of a tensor core's dtypes goes to the first such tensor core, a reduction
  to few outputs or along a long axis is shared by a workgroup (GROUP), a matmul-like kernel computes a 4 x 4 tile per
  thread, an elementwise one 4 neighbouring elements per thread, and the output axes are spread over workgroups of up
  to MAX_THREADS threads."""
  if USE_TC.value and any(try_opt(k, Opt(OptOps.TC, None, i)) for i in range(len(k.renderer.tensor_cores))):
    return tensor_core_tiles(k)
  shape = k.full_shape
  globals_ = [i for i, kind in enumerate(k.kinds) if kind == GLOBAL and isinstance(shape[i], int)]
  reduce_axes = [i for i, kind in enumerate(k.kinds) if kind == REDUCE and isinstance(shape[i], int)]
  if one_hot_sum(k.reduceop, reduce_axes):  # one load per output once its loop is gone: laid out as an elementwise kernel
    reduce_axes = []
  outputs = prod(s for s, kind in zip(shape, k.kinds) if kind == GLOBAL)
  reuse = reuse_axes(k, globals_) if reduce_axes else []
  r = max(reduce_axes, key=lambda i: shape[i]) if reduce_axes else -1  # type: ignore[arg-type,return-value]
  # a thread sums its share of the reduce axis in one chain of adds, and a float sum's error grows with the chain:
  # a reduction over a long axis is shared by a workgroup however many outputs it has (a tree's first level past 16M
  # elements, a row sum of a wide matrix: chains of 8192 were 3.9e-5 off), unless it is a matmul (tiled below)
  long_chain = r >= 0 and not reuse and isinstance(shape[r], int) and shape[r] >= GROUP_CHAIN
  threads = 1
  if reduce_axes and isinstance(outputs, int) and (outputs <= 2048 or long_chain):
    size = shape[r]
    if isinstance(size, int) and size >= 256:
      # GROUP, not GROUPTOP: neighbouring threads read neighbouring elements on every step (a warp's load is one
      # 128-byte line); GROUPTOP gives each thread a contiguous run, so a warp's 32 loads hit 32 lines (4x slower).
      # After the barrier the group's first thread combines the partials alone, a serial loop of `group` steps:
      # 128 was the fastest on a row of 4096, 256 2.5x slower
      for amt in (a for a in GROUP_SIZES if size // a >= MIN_SHARE):
        if try_opt(k, Opt(OptOps.GROUP, r, amt)):
          threads = amt
          break
  elif reduce_axes:
    for i in reuse:
      try_opt(k, Opt(OptOps.UPCAST, i, 4))
  elif (inner := _contiguous_output_axis(k)) is not None:
    # an elementwise kernel: 4 neighbouring elements per thread, loaded and stored as one 16-byte vector (2: 3.2 TB/s
    # for gelu, 8: 0.9 TB/s)
    try_opt(k, Opt(OptOps.UPCAST, inner, 4))
  # the innermost output axis takes as many of the workgroup's threads as it can (a workgroup of one warp leaves half
  # a multiprocessor's thread slots empty: 32 resident workgroups of 64 warps); a matmul-like kernel 32 of them, the
  # rest going to the next axis
  first = (32, 16, 8, 4, 2) if reduce_axes else (MAX_THREADS, 64, 32, 16, 8, 4, 2)
  for n, i in enumerate(sorted((i for i, kind in enumerate(k.kinds) if kind == GLOBAL and isinstance(k.full_shape[i], int)), reverse=True)):
    for amt in first if n == 0 else (32, 16, 8, 4, 2):
      if threads * amt <= MAX_THREADS and try_opt(k, Opt(OptOps.LOCAL, i, amt)):
        threads *= amt
        break
  return k


def _contiguous_output_axis(k: Kernel) -> int | None:
  """The last output axis, if every buffer the kernel stores moves along it with stride 1 (so an UPCAST of it is a
  vector store); None otherwise."""
  globals_ = [i for i, kind in enumerate(k.kinds) if kind == GLOBAL and isinstance(k.full_shape[i], int)]
  if not globals_:
    return None
  axis = globals_[-1]
  stores = [op for op in k.ast.lazyops() if op.op is BufferOps.STORE]
  return axis if stores and all(op.arg.st.real_strides()[axis] == 1 for op in stores) else None


def tensor_core_tiles(k: Kernel) -> Kernel:
  """After TC: each warp computes a grid of tensor-core tiles, up to 8 along N and 2 along M (UPCASTs), so each operand
  fragment it loads feeds up to 8 matrix multiply-accumulates instead of one (operands come straight from memory, not
  through local memory). 16 tiles is 64 float accumulators per thread; 4 x 4 was slower (47 TFLOP/s), 2 x 8 too (28)."""
  globals_ = [i for i, kind in enumerate(k.kinds) if kind == GLOBAL]
  if len(globals_) < 2:
    return k
  m, n = globals_[-2:]
  any(try_opt(k, Opt(OptOps.UPCAST, n, amt)) for amt in (8, 4, 2))  # n first: the split shifts the axes after it
  try_opt(k, Opt(OptOps.UPCAST, m, 2))
  return k
