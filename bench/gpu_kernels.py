"""One kernel, several opt lists: the main kernel of a few ops compiled with the heuristics' choice and with each listed
alternative, each timed alone on the device (the device's own timer where it has one, best of 5). This is how the GPU
heuristics' choices in tg/codegen/heuristics/gpu.py were made, on an H200; rerun it on another GPU before changing one.

  DEVICE=CUDA python bench/gpu_kernels.py
  DEVICE=CUDA python bench/gpu_kernels.py --only sum gelu
  DEVICE=CUDA CUDA_MOCK=1 python bench/gpu_kernels.py --scale 64   # checks the script itself, sizes / 64 (times mean nothing)

Axis numbers are the kernel's full shape at the time each opt is applied (tg/codegen/kernel.py): a split inserts
its new axis right after the one split, so opts are listed from the highest axis down. An opt that doesn't apply to
a size prints as "not applicable".
"""
from __future__ import annotations

import argparse
import os
from collections.abc import Callable

from tg import Device, Tensor, dtypes
from tg.codegen.kernel import Kernel, KernelOptError, Opt, OptOps
from tg.codegen.lowerer import GLOBAL, REDUCE
from tg.engine.schedule import ScheduleItem, create_schedule
from tg.engine.search import _runner, _time

U, L, G, GT, R, TC = OptOps.UPCAST, OptOps.LOCAL, OptOps.GROUP, OptOps.GROUPTOP, OptOps.UNROLL, OptOps.TC
Cands = Callable[[list[int], list[int]], list[list[Opt]]]  # (global axes, reduce axes) -> opt lists


def o(op: OptOps, axis: int | None, amt: int) -> Opt:
  return Opt(op, axis, amt)


def main_item(t: Tensor, want_reduce: bool) -> ScheduleItem:
  """The schedule's kernel that moves the most bytes (among those that reduce, with want_reduce), its buffers allocated."""
  renderer = Device[t.device].renderer  # type: ignore[index]
  items = [si for si in create_schedule([t.lazydata]) if si.ast.op.name in ("SINK", "STORE")]  # type: ignore[list-item]
  if want_reduce:
    items = [si for si in items if REDUCE in Kernel(si.ast, renderer).kinds]
  si = max(items, key=lambda si: sum(b.nbytes for b in si.bufs))
  for b in si.bufs:
    b.ensure_allocated()
  return si


def run(label: str, t: Tensor, cands: Cands, work: float, unit: str, want_reduce: bool = False) -> None:
  dev = str(t.device)
  si = main_item(t, want_reduce)
  renderer = Device[dev].renderer
  k0 = Kernel(si.ast, renderer)
  g = [i for i, kind in enumerate(k0.kinds) if kind == GLOBAL]
  r = [i for i, kind in enumerate(k0.kinds) if kind == REDUCE]
  print(f"== {label}: shape {k0.full_shape}, global axes {g}, reduce axes {r}", flush=True)
  hk = Kernel(si.ast, renderer)
  hk.hand_coded_optimizations()

  def name(opts: list[Opt]) -> str:
    return str([(x.op.name, x.axis, x.amt) for x in opts])
  for label2, opts in [("heuristics " + name(hk.applied_opts), None), *[(name(c), c) for c in cands(g, r)]]:
    try:
      k = hk if opts is None else Kernel(si.ast, renderer).apply_opts(opts)
      p = k.to_program()
      tm = _time(_runner(k, Device[dev].compiler.compile_cached(p.src), si.bufs, {}), 5)
      print(f"  {tm * 1e6:9.1f} us  {work / tm / 1e9:8.1f} {unit}  {p.name:20s} global {p.global_size} local {p.local_size}  {label2}", flush=True)
    except KernelOptError as e:
      print(f"  (not applicable: {str(e)[:100]})  {label2}")
    except Exception as e:  # a candidate that fails to build or run is reported, the others still timed
      print(f"  FAILED {type(e).__name__}: {str(e)[:300]}  {label2}")


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--only", nargs="+", choices=["sum", "gelu", "softmax", "matmul32", "matmul16"])
  p.add_argument("--scale", type=int, default=1, help="divide the sizes by this (a mock device's check run)")
  args = p.parse_args()
  dev, s = os.environ.get("DEVICE", Device.DEFAULT), args.scale
  print(f"device {dev}")
  n, rows, m, h = (64 << 20) // s, 8192 // s, 4096 // s, 8192 // s
  cases: dict[str, Callable[[], None]] = {
    "sum": lambda: run("sum of 64M float32, first level", Tensor.rand(n, device=dev).realize().sum(), lambda g, r: [
      [o(GT, r[0], 32), o(L, g[0], 32)], [o(G, r[0], 32), o(L, g[0], 32)], [o(R, r[0], 4), o(G, r[0], 32), o(L, g[0], 32)],
      [o(G, r[0], 64), o(L, g[0], 4)], [o(G, r[0], 128)], [o(G, r[0], 256)]], 4 * n, "GB/s"),
    "gelu": lambda: run("gelu of 64M float32", Tensor.rand(n, device=dev).realize().gelu(), lambda g, r: [
      [o(L, g[0], 32)], [o(U, g[0], 4), o(L, g[0], 128)], [o(U, g[0], 4), o(L, g[0], 256)], [o(L, g[0], 256)],
      [o(U, g[0], 2), o(L, g[0], 128)], [o(U, g[0], 8), o(L, g[0], 128)]], 8 * n, "GB/s"),
    "softmax": lambda: run("softmax 8192 x 4096, its row reduce", Tensor.rand(rows, 4096, device=dev).realize().softmax(-1), lambda g, r: [
      [o(GT, r[0], 32), o(L, g[0], 32)], [o(G, r[0], 32), o(L, g[0], 32)], [o(G, r[0], 64), o(L, g[0], 4)], [o(G, r[0], 128)],
      [o(G, r[0], 256)]], 4 * rows * 4096, "GB/s", want_reduce=True),
    "matmul32": lambda: run("matmul fp32 4096", Tensor.rand(m, m, device=dev).realize() @ Tensor.rand(m, m, device=dev).realize(), lambda g, r: [
      [o(U, 1, 4), o(U, 0, 4), o(L, 2, 16), o(L, 0, 16)], [o(U, 1, 4), o(U, 0, 8), o(L, 2, 16), o(L, 0, 8)],
      [o(U, 1, 4), o(U, 0, 8), o(L, 2, 32), o(L, 0, 4)], [o(U, 1, 8), o(U, 0, 8), o(L, 2, 16), o(L, 0, 8)]], 2 * m**3, "GFLOP/s"),
    "matmul16": lambda: run("matmul fp16 8192, tensor cores", Tensor.rand(h, h, device=dev, dtype=dtypes.float16).realize()
                            @ Tensor.rand(h, h, device=dev, dtype=dtypes.float16).realize(), lambda g, r: [
      [o(TC, None, 0)], [o(TC, None, 0), o(U, 2, 2), o(U, 0, 2)], [o(TC, None, 0), o(U, 2, 4), o(U, 0, 4)],
      [o(TC, None, 0), o(U, 2, 8), o(U, 0, 2)], [o(TC, None, 0), o(U, 2, 8), o(U, 0, 4)], [o(TC, None, 0), o(U, 2, 16), o(U, 0, 2)]],
      2 * h**3, "GFLOP/s"),
  }
  for key in args.only or cases:
    cases[key]()


if __name__ == "__main__":
  main()
