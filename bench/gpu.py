"""tg on a GPU device against PyTorch on CUDA, measured in the same run: matmuls, memory-bound kernels, an MLP
training step and the cost of launching one kernel.

  DEVICE=CUDA python bench/gpu.py            # every benchmark (about a minute on an H100/H200, compiles included)
  DEVICE=CUDA python bench/gpu.py --quick    # smaller sizes

Each time is the median of wall-clock repetitions that end in a device synchronize (tg: Device[d].synchronize(),
torch: torch.cuda.synchronize()), after warm-up calls that compile. Rates: matmul 2*M*N*K FLOPs; the memory-bound
rows count the bytes read plus written once. torch runs fp32 matmuls without TF32 (allow_tf32=False), as tg does.
Printed ratios are tg's speed over torch's (>1: tg faster). Needs torch with CUDA; on a machine without one it says so
and exits 0, so it is safe to run anywhere.
"""
from __future__ import annotations

import argparse
import itertools
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def _median_time(fn: Callable[[], Any], sync: Callable[[], None], reps: int, warmup: int = 2) -> float:
  for _ in range(warmup):
    fn()
  sync()
  times = []
  for _ in range(reps):
    st = time.perf_counter()
    fn()
    sync()
    times.append(time.perf_counter() - st)
  return statistics.median(times)


class Bench:
  def __init__(self, device: str, quick: bool, torch_device: str = "cuda") -> None:
    import torch

    from tg import Device
    self.torch, self.dev, self.quick, self.tdev = torch, device, quick, torch_device
    self.torch_sync = torch.cuda.synchronize if torch_device == "cuda" else (lambda: None)
    self.tg_sync = lambda: Device[device].synchronize()
    self.rows: list[tuple[str, float, float, str]] = []

  def row(self, name: str, tg_fn: Callable[[], Any], torch_fn: Callable[[], Any], work: float, unit: str, reps: int = 20) -> None:
    t_tg = _median_time(tg_fn, self.tg_sync, reps)
    t_torch = _median_time(torch_fn, self.torch_sync, reps)
    scale = 1e12 if unit == "TFLOP/s" else 1e9
    rate = f"{work / t_tg / scale:8.1f} vs {work / t_torch / scale:8.1f} {unit}" if work else ""
    self.rows.append((name, t_tg, t_torch, rate))
    print(f"{name:34s} tg {t_tg * 1e3:9.3f} ms  torch {t_torch * 1e3:9.3f} ms  tg/torch {t_torch / t_tg:5.2f}x  {rate}", flush=True)

  def tensors(self, *shapes: tuple[int, ...], dtype: str = "float32") -> list[tuple[Any, Any, np.ndarray]]:
    from tg import Tensor, dtypes
    rng = np.random.default_rng(0)
    out = []
    for shape in shapes:
      a = rng.standard_normal(shape, dtype=np.float32).astype(dtype)
      out.append((Tensor(a, device=self.dev, dtype=getattr(dtypes, dtype)).realize(), self.torch.from_numpy(a).to(self.tdev), a))
    return out


def matmuls(b: Bench) -> None:
  for dtype, n in (("float32", 2048 if b.quick else 4096), ("float16", 4096 if b.quick else 8192)):
    (a_tg, a_t, _), (w_tg, w_t, _) = b.tensors((n, n), (n, n), dtype=dtype)
    out: dict[str, Any] = {}
    b.row(f"matmul {dtype} {n}", lambda: out.__setitem__("tg", (a_tg @ w_tg).realize()), lambda: out.__setitem__("t", a_t @ w_t),
          2 * n**3, "TFLOP/s", reps=10)
    got, ref = out["tg"].numpy().astype(np.float32), out["t"].float().cpu().numpy()
    print(f"  max|tg-torch| / max|torch| = {np.abs(got - ref).max() / np.abs(ref).max():.2e}")


def memory_bound(b: Bench) -> None:
  n = (16 if b.quick else 64) << 20
  ((x_tg, x_t, _),) = b.tensors((n,))
  b.row(f"sum {n >> 20}M float32", lambda: x_tg.sum().realize(), lambda: x_t.sum(), 4 * n, "GB/s")
  b.row(f"gelu {n >> 20}M float32", lambda: x_tg.gelu().realize(), lambda: b.torch.nn.functional.gelu(x_t, approximate="tanh"), 8 * n, "GB/s")
  rows = 8192
  ((s_tg, s_t, _),) = b.tensors((rows, 4096))
  b.row(f"softmax {rows}x4096 float32", lambda: s_tg.softmax(-1).realize(), lambda: s_t.softmax(-1), 8 * rows * 4096, "GB/s")
  got = s_tg.softmax(-1).numpy()
  print(f"  softmax max|tg-torch| = {np.abs(got - s_t.softmax(-1).cpu().numpy()).max():.2e}")


def mlp_step(b: Bench) -> None:
  from tg import Tensor, nn
  from tg.engine.jit import TinyJit
  torch = b.torch
  batch, sizes = 512, (784, 2048, 2048, 10)
  rng = np.random.default_rng(0)
  ws = [(rng.standard_normal((o, i), dtype=np.float32) * (2 / i) ** 0.5, np.zeros(o, np.float32)) for i, o in itertools.pairwise(sizes)]
  x_np, y_np = rng.standard_normal((batch, sizes[0]), dtype=np.float32), rng.integers(0, 10, batch)
  layers = []
  for w, bias in ws:
    lin = nn.Linear(w.shape[1], w.shape[0])
    lin.weight, lin.bias = Tensor(w, device=b.dev).realize(), Tensor(bias, device=b.dev).realize()
    layers.append(lin)
  opt = nn.optim.Adam(nn.state.get_parameters(layers), lr=1e-3)
  x, y = Tensor(x_np, device=b.dev).realize(), Tensor(y_np.astype(np.int32), device=b.dev).realize()

  @TinyJit
  def step(x: Tensor, y: Tensor) -> Tensor:
    Tensor.training = True
    h = x
    for i, lin in enumerate(layers):
      h = lin(h) if i == len(layers) - 1 else lin(h).relu()
    loss = h.sparse_categorical_crossentropy(y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.realize()

  tl = [torch.nn.Linear(w.shape[1], w.shape[0]).to(b.tdev) for w, _ in ws]
  for lin, (w, bias) in zip(tl, ws):
    lin.weight.data, lin.bias.data = torch.from_numpy(w).to(b.tdev), torch.from_numpy(bias).to(b.tdev)
  topt = torch.optim.Adam([p for lin in tl for p in lin.parameters()], lr=1e-3)
  tx, ty = torch.from_numpy(x_np).to(b.tdev), torch.from_numpy(y_np).to(b.tdev)

  def tstep() -> None:
    h = tx
    for i, lin in enumerate(tl):
      h = lin(h) if i == len(tl) - 1 else torch.relu(lin(h))
    loss = torch.nn.functional.cross_entropy(h, ty)
    topt.zero_grad()
    loss.backward()
    topt.step()

  flops = 6 * batch * sum(i * o for i, o in itertools.pairwise(sizes))
  b.row(f"MLP {'-'.join(map(str, sizes))} Adam, TinyJit", lambda: step(x, y), tstep, flops, "TFLOP/s")


def dispatch(b: Bench) -> None:
  from tg import Tensor
  from tg.engine.jit import TinyJit
  kernels = 50
  x = Tensor.zeros(64, device=b.dev).contiguous().realize()
  xt = b.torch.zeros(64, device=b.tdev)

  def eager() -> None:
    y = x
    for _ in range(kernels):
      y = (y + 1).realize()

  @TinyJit
  def jitted(x: Tensor) -> Tensor:
    y = x
    for _ in range(kernels):
      y = (y + 1).realize()
    return y

  def torch_eager() -> None:
    y = xt
    for _ in range(kernels):
      y = y + 1

  b.row(f"dispatch, eager ({kernels} kernels)", eager, torch_eager, 0, "")
  b.row(f"dispatch, TinyJit ({kernels} kernels)", lambda: jitted(x), torch_eager, 0, "")
  for name, t_tg, _, _ in b.rows[-2:]:
    print(f"  {name}: {t_tg / kernels * 1e6:.1f} us per kernel")


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--quick", action="store_true")
  p.add_argument("--only", nargs="+", choices=["matmul", "memory", "mlp", "dispatch"])
  p.add_argument("--torch-device", default="cuda", help="cpu: check this script where there is no GPU (the figures then mean nothing)")
  args = p.parse_args()
  try:
    import torch
    if args.torch_device == "cuda" and not torch.cuda.is_available():
      raise ImportError("torch has no CUDA device")
  except ImportError as e:
    print(f"bench/gpu.py needs torch with a CUDA GPU: {e}")
    return
  from tg import Device
  dev = os.environ.get("DEVICE", Device.DEFAULT)
  where = torch.cuda.get_device_name() if args.torch_device == "cuda" else args.torch_device
  print(f"tg device {dev}, torch {torch.__version__} on {where}; tg/torch > 1: tg faster")
  b = Bench(dev, args.quick, args.torch_device)
  parts = {"matmul": matmuls, "memory": memory_bound, "mlp": mlp_step, "dispatch": dispatch}
  for name in args.only or parts:
    st = time.perf_counter()
    try:
      parts[name](b)
    except Exception as e:  # one failing part must not hide the others' figures
      print(f"{name}: FAILED {type(e).__name__}: {str(e)[:2000]}")
    print(f"  ({name}: {time.perf_counter() - st:.1f} s with compiles)", flush=True)


if __name__ == "__main__":
  main()
