"""WebGPUProgram: one WGSL kernel as a wgpu compute pipeline, dispatched once per call.

The pipeline (where wgpu and the driver compile the shader: tens of ms on lavapipe) is cached per source, so
equal kernels from different graphs compile once. Its bind group layout is read off the source's declarations
(renderer.py): storage buffers `@group(0) @binding(n)` for tg buffer n, and the symbolic sizes' uniform at group 1.
"""
from __future__ import annotations

import functools
import re
import struct
import time
from typing import Any

from tg_webgpu import gpu
from tg_webgpu.compiler import shader_module

_BINDING = re.compile(r"@group\((\d)\) @binding\((\d+)\) var<(storage|uniform)")


@functools.lru_cache(maxsize=4096)
def _pipeline(src: str, name: str) -> tuple[Any, Any, Any, tuple[int, ...]]:
  """(pipeline, buffers' bind group layout, vars' layout or None, storage binding numbers) for one kernel."""
  import wgpu
  dev = gpu.device()
  decls = [(int(g), int(b), kind) for g, b, kind in _BINDING.findall(src)]
  storage = tuple(sorted(b for g, b, kind in decls if g == 0))

  def entry(b: int, kind: str) -> dict[str, Any]:
    return {"binding": b, "visibility": wgpu.ShaderStage.COMPUTE, "buffer": {"type": kind}}
  buf_layout = dev.create_bind_group_layout(entries=[entry(b, "storage") for b in storage])
  var_layout = dev.create_bind_group_layout(entries=[entry(0, "uniform")]) if any(g == 1 for g, _, _ in decls) else None
  layout = dev.create_pipeline_layout(bind_group_layouts=[buf_layout] + ([var_layout] if var_layout is not None else []))
  try:
    pipeline = dev.create_compute_pipeline(label=name, layout=layout, compute={"module": shader_module(src), "entry_point": name})
  except Exception as e:
    raise RuntimeError(f"wgpu could not make a compute pipeline for kernel {name}:\n{e}\n--- source ---\n{src}") from None
  return pipeline, buf_layout, var_layout, storage


class WebGPUProgram:
  def __init__(self, name: str, lib: bytes) -> None:
    self.name, self.src = name, lib.decode()
    self.dev = gpu.device()
    self.pipeline, self.buf_layout, self.var_layout, self.storage = _pipeline(self.src, name)
    self.max_groups = int(self.dev.limits["max-compute-workgroups-per-dimension"])

  def __call__(self, *bufs: Any, global_size: tuple[int, ...] = (), local_size: tuple[int, ...] = (),
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    dims = tuple(global_size) + (1,) * (3 - len(global_size))
    if len(dims) > 3 or any(d > self.max_groups for d in dims):  # core fits launches to global_max; symbolic sizes may not fit
      raise RuntimeError(f"kernel {self.name} needs {global_size} workgroups but this WEBGPU device launches at most "
                         f"{self.max_groups} per dim, in at most 3 dims (maxComputeWorkgroupsPerDimension)")
    if any(d == 0 for d in dims):
      return 0.0 if wait else None
    groups = [self.dev.create_bind_group(layout=self.buf_layout, entries=[
      {"binding": b, "resource": {"buffer": bufs[b], "offset": 0, "size": bufs[b].size}} for b in self.storage])]
    if self.var_layout is not None:
      data = struct.pack(f"<{len(vals)}i", *vals)
      ubuf = self.dev.create_buffer_with_data(label="tgvars", data=data + bytes(-len(data) % 16), usage=_uniform_usage())
      groups.append(self.dev.create_bind_group(layout=self.var_layout, entries=[{"binding": 0, "resource": {"buffer": ubuf}}]))
    enc = self.dev.create_command_encoder()
    cpass = enc.begin_compute_pass()
    cpass.set_pipeline(self.pipeline)
    for i, g in enumerate(groups):
      cpass.set_bind_group(i, g)
    cpass.dispatch_workgroups(*dims)
    cpass.end()
    if not wait:
      self.dev.queue.submit([enc.finish()])
      return None
    cmd = enc.finish()
    gpu.wait_idle(self.dev)  # time this kernel alone, not the work queued before it
    st = time.perf_counter()
    self.dev.queue.submit([cmd])
    gpu.wait_idle(self.dev)
    return time.perf_counter() - st


@functools.cache
def _uniform_usage() -> Any:
  import wgpu
  return wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST
