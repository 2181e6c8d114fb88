"""AMDGraph: a TinyJit capture replayed as one HIP graph launch.

Each captured kernel is a kernel node, run after the one before it (the order they ran in). On replay only the
nodes whose arguments can change are updated: those reading a jitted function's inputs (new buffers every call)
and those with symbolic sizes (new values, and maybe new launch dims).
"""
from __future__ import annotations

from typing import Any

from tg.device import Buffer
from tg.engine.jit import GraphRunner
from tg.engine.realize import CompiledRunner, ExecItem, check_args
from tg.renderer import Program
from tg.shape.symbolic import Node, Variable
from tg_amd.driver import ffi
from tg_amd.program import AMDProgram, launch_dims, pack_args


def _variables(p: Program) -> set[Variable]:
  """The symbolic sizes a kernel's arguments or launch dims depend on."""
  return set(p.vars).union(*(s.vars() for s in (*p.global_size, *p.local_size) if isinstance(s, Node)))


class AMDGraph(GraphRunner):
  def __init__(self, jit_cache: list[ExecItem], input_replace: dict[tuple[int, int], int]) -> None:
    super().__init__(jit_cache, input_replace)
    self.runners: list[CompiledRunner] = [ei.prg for ei in jit_cache if isinstance(ei.prg, CompiledRunner)]
    assert len(self.runners) == len(jit_cache), "AMDGraph replays compiled kernels only"
    for r, ei in zip(self.runners, jit_cache):
      check_args(r.p, ei.bufs)  # a node's arguments are its ExecItem's buffers, every one (tg.renderer.Program)
    self.programs: list[AMDProgram] = [r.clprg for r in self.runners if isinstance(r.clprg, AMDProgram)]
    assert len(self.programs) == len(self.runners), "AMDGraph replays this plugin's kernels only"
    self.driver = self.programs[0].driver
    self.graph = self.driver.graph_create()
    self.nodes: list[Any] = []
    # until a replay gives them values, symbolic sizes take their smallest one (the node is updated before it runs)
    start = {v: v.min for r in self.runners for v in _variables(r.p)}
    for j in range(len(jit_cache)):
      node, _alive = self._params(j, start)
      self.nodes.append(self.driver.graph_add_kernel(self.graph, self.nodes[-1:], node))
    self.exec = self.driver.graph_instantiate(self.graph)
    self.updated = sorted({j for j, _ in input_replace} | {j for j, r in enumerate(self.runners) if _variables(r.p)})

  def _params(self, j: int, var_vals: dict[Variable, int]) -> tuple[Any, Any]:
    """Node j's hipKernelNodeParams* (and what must stay alive until HIP has copied it and its arguments)."""
    p = self.runners[j].p
    grid, block = launch_dims(*p.launch_dims(var_vals))
    extra, alive = pack_args([b._buf for b in self.jit_cache[j].bufs], [var_vals[v] for v in p.vars])
    # a launch dim of 0 is invalid even in a node that is updated before it runs
    grid = (max(grid[0], 1), max(grid[1], 1), max(grid[2], 1))
    node = ffi.new("hipKernelNodeParams*", {"blockDim": block, "extra": extra, "func": ffi.cast("void*", self.programs[j].fn),
                                            "gridDim": grid, "kernelParams": ffi.NULL, "sharedMemBytes": 0})
    return node, (extra, alive)

  def __call__(self, bufs: list[Buffer], var_vals: dict[Variable, int], wait: bool = False) -> float | None:
    for j in self.updated:
      for b in self.jit_cache[j].bufs:
        b.ensure_allocated()
      node, _alive = self._params(j, var_vals)
      self.driver.graph_set_kernel(self.exec, self.nodes[j], node)
    self.driver.graph_launch(self.exec)
    return None
