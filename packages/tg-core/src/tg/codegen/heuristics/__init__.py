"""The hand-coded kernel optimizations: the opts a kernel gets when BEAM doesn't search.

Devices whose output axes are hardware indices with workgroups (GPUs: `Renderer.global_ids` and `has_local`) get
`gpu.workgroup_opts`; devices whose output axes are loops (CPUs, the PYTHON interpreter) get `cpu.cpu_opts`, tuned to
the renderer's `CPUTarget` (tg.renderer.cpu_target: vector width, registers, caches). Both only call
`Kernel.apply_opt`, so whatever they choose is a valid kernel: a choice that doesn't apply is skipped.
"""
from __future__ import annotations

from tg.codegen.kernel import Kernel, KernelOptError, Opt
from tg.ops import BufferOps
from tg.settings import NOOPT


def try_opt(k: Kernel, opt: Opt) -> bool:
  """Apply `opt` to `k` if it applies; False, with `k` unchanged, if not."""
  try:
    k.apply_opt(opt)
    return True
  except KernelOptError:
    return False


def hand_coded_optimizations(k: Kernel) -> Kernel:
  if NOOPT.value:
    return k
  if (red := k.reduceop) is not None and not any(op.op is BufferOps.LOAD for op in red.lazyops()):
    return k  # a reduce of masked constants (arange-like) loads nothing: loop collapse removes its loop
  if k.renderer.has_local and k.renderer.global_ids:
    return workgroup_opts(k)
  return cpu_opts(k)


# imported here, after try_opt, which they import: loaded with the package, never while kernels run (an import that a
# Ctrl-C interrupts leaves a module half made: tests/reliability/test_interrupts.py)
from tg.codegen.heuristics.cpu import cpu_opts  # noqa: E402
from tg.codegen.heuristics.gpu import workgroup_opts  # noqa: E402
