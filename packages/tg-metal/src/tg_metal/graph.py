"""MetalGraph: a TinyJit capture replayed as one command buffer.

Each replay encodes every captured kernel, in the order they ran, into one compute encoder of one command buffer (a
batched encoder: one commit and one wait for the whole function, instead of one per kernel), with that call's
buffers and symbolic sizes. Re-encoding costs a few microseconds per kernel on the CPU and keeps inputs, views and
symbolic launch dims trivially right; an indirect command buffer would save that, not implemented.
"""
from __future__ import annotations

from tg.device import Buffer
from tg.engine.jit import GraphRunner
from tg.engine.realize import CompiledRunner, ExecItem, check_args
from tg.shape.symbolic import Variable
from tg_metal.program import MetalProgram
from tg_metal.runtime import Launch


class MetalGraph(GraphRunner):
  def __init__(self, jit_cache: list[ExecItem], input_replace: dict[tuple[int, int], int]) -> None:
    super().__init__(jit_cache, input_replace)
    self.runners: list[CompiledRunner] = [ei.prg for ei in jit_cache if isinstance(ei.prg, CompiledRunner)]
    assert len(self.runners) == len(jit_cache), "MetalGraph replays compiled kernels only"
    for r, ei in zip(self.runners, jit_cache):
      check_args(r.p, ei.bufs)  # a kernel's arguments are its ExecItem's buffers, every one (tg.renderer.Program)
    self.programs: list[MetalProgram] = [r.clprg for r in self.runners if isinstance(r.clprg, MetalProgram)]
    assert len(self.programs) == len(self.runners), "MetalGraph replays this plugin's kernels only"
    self.driver = self.programs[0].driver

  def launches(self, var_vals: dict[Variable, int]) -> list[Launch]:
    out = []
    for r, prg, ei in zip(self.runners, self.programs, self.jit_cache):
      global_size, local_size = r.p.launch_dims(var_vals)
      out.append(prg.launch(tuple(b.ensure_allocated()._buf for b in ei.bufs), global_size, local_size, tuple(var_vals[v] for v in r.p.vars)))
    return out

  def __call__(self, bufs: list[Buffer], var_vals: dict[Variable, int], wait: bool = False) -> float | None:
    return self.driver.run(self.launches(var_vals), wait)
