"""Heuristics for devices with workgroups (GPUs): tensor cores for matmuls of their dtypes, a workgroup per long
reduction, a 4 x 4 tile per thread for other matmul-like kernels, and the output axes spread over workgroups."""
from __future__ import annotations

from tg.codegen.heuristics import try_opt
from tg.codegen.heuristics.cpu import reuse_axes
from tg.codegen.kernel import Kernel, Opt, OptOps
from tg.codegen.lowerer import GLOBAL, REDUCE
from tg.helpers import prod
from tg.settings import TC as USE_TC

GROUP_CHAIN = 1024  # a workgroup device shares a reduce axis this long among a group's threads, whatever the outputs
MAX_THREADS = 128  # threads of one workgroup the heuristics make


def workgroup_opts(k: Kernel) -> Kernel:
  """For devices with workgroups: a matmul of a tensor core's dtypes goes to the first such tensor core, a reduction
  to few outputs is shared by a workgroup (GROUPTOP), a matmul-like kernel computes a 4 x 4 tile per thread, and the
  output axes are spread over workgroups of up to MAX_THREADS threads."""
  if USE_TC.value and any(try_opt(k, Opt(OptOps.TC, None, i)) for i in range(len(k.renderer.tensor_cores))):
    return k  # a matmul of the tensor core's dtypes: one warp per tile
  shape = k.full_shape
  globals_ = [i for i, kind in enumerate(k.kinds) if kind == GLOBAL and isinstance(shape[i], int)]
  reduce_axes = [i for i, kind in enumerate(k.kinds) if kind == REDUCE and isinstance(shape[i], int)]
  outputs = prod(s for s, kind in zip(shape, k.kinds) if kind == GLOBAL)
  reuse = reuse_axes(k, globals_) if reduce_axes else []
  r = max(reduce_axes, key=lambda i: shape[i]) if reduce_axes else -1  # type: ignore[arg-type,return-value]
  # a thread sums its share of the reduce axis in one chain of adds, and a float sum's error grows with the chain:
  # a reduction over a long axis is shared by a workgroup however many outputs it has (a tree's first level past 16M
  # elements, a row sum of a wide matrix: chains of 8192 were 3.9e-5 off), unless it is a matmul (tiled below)
  long_chain = r >= 0 and not reuse and isinstance(shape[r], int) and shape[r] >= GROUP_CHAIN
  if reduce_axes and isinstance(outputs, int) and (outputs <= 2048 or long_chain):
    if shape[r] >= 256:  # type: ignore[operator]
      # after the barrier the group's first thread combines its partials alone (an IF block): a serial loop of
      # `group` steps, so a bigger group shortens each thread's share but lengthens that loop. 32 and 16 date from
      # when every thread ran the loop; they stay until a GPU measures better (none here: PYTHON only checks them)
      any(try_opt(k, Opt(OptOps.GROUPTOP, r, amt)) for amt in (32, 16))
  elif reduce_axes:
    for i in reuse:
      try_opt(k, Opt(OptOps.UPCAST, i, 4))
  threads = 1
  for i in sorted((i for i, kind in enumerate(k.kinds) if kind == GLOBAL and isinstance(k.full_shape[i], int)), reverse=True):
    for amt in (32, 16, 8, 4, 2):
      if threads * amt <= MAX_THREADS and try_opt(k, Opt(OptOps.LOCAL, i, amt)):
        threads *= amt
        break
  return k

