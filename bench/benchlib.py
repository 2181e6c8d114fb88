"""Shared helpers for the benchmarks in bench/: thread setup, timing, tg compile metering, printing.

Import this module before numpy and torch (the benchmarks do: `import benchlib` sorts first): it sets
OMP_NUM_THREADS (if unset) before the BLAS libraries start their thread pools.

Timing rules used by every benchmark:
  * inputs are created once and realized before any timing;
  * every timed call forces the work to finish (tg: `.realize()`, CPU devices run synchronously;
    numpy and torch CPU are eager);
  * the first tg call compiles its kernels: it is timed on its own and reported as "first call",
    with the time spent building kernels (codegen + clang + load) as "compile";
  * then warm-up calls, then several timed repetitions; the median is reported;
  * before each call, untimed, the previous result is dropped and garbage is collected, so each library
    recycles memory as in a steady loop (tg's LRU allocator reuses the freed output buffer).
"""
from __future__ import annotations

import gc
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

# ---------- environment: must run before numpy/torch are imported ----------

try:
  _AVAILABLE = len(os.sched_getaffinity(0))
except AttributeError:  # not Linux
  _AVAILABLE = os.cpu_count() or 1
THREADS = int(os.environ.get("OMP_NUM_THREADS") or _AVAILABLE)
os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))
# tg keeps compiled kernels in a disk cache; off by default here so "compile" times are real every run
os.environ.setdefault("DISABLE_COMPILER_CACHE", "1")
# CPU_TARGET=x86-64-v3 (or v2) builds tg's kernels for a lower ISA than the host's: numpy's and torch's libraries are
# held to the same ISA (unless these are set already), so that the ratios are those of a machine of that level
LIBRARY_ISA = {"x86-64-v3": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
                             "OPENBLAS_CORETYPE": "Haswell"},
               "x86-64-v2": {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
                             "OPENBLAS_CORETYPE": "Nehalem"}}
for _var, _val in LIBRARY_ISA.get(os.environ.get("CPU_TARGET", ""), {}).items():
  os.environ.setdefault(_var, _val)

import numpy as np  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(THREADS)

import tg  # noqa: E402
from tg import Device, GlobalCounters, Tensor  # noqa: E402

RATIO_LEGEND = "speed ratios are time(other) / time(tg): > 1 means tg is faster, < 1 means tg is slower"


# ---------- environment report ----------
def _cpuinfo(key: str) -> str:
  try:
    with open("/proc/cpuinfo") as f:
      return next((line.split(":", 1)[1].strip() for line in f if line.startswith(key)), "")
  except OSError:
    return ""


def cpu_model() -> str:
  """The CPU's model name (lscpu's), else what platform knows."""
  return _cpuinfo("model name") or platform.processor() or platform.machine()


def host_isa() -> str:
  """The host's vector ISA and FMA, from /proc/cpuinfo's flags (x86) or the machine (aarch64: NEON)."""
  flags = _cpuinfo("flags").split()
  if not flags:
    return "NEON" if platform.machine() in ("aarch64", "arm64") else "unknown"
  isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "AVX" if "avx" in flags else "SSE"
  return isa + (" + FMA" if "fma" in flags else "")



def _blas_info() -> list[dict[str, Any]]:
  try:
    from threadpoolctl import threadpool_info
  except ImportError:
    return []
  return threadpool_info()


def numpy_threads() -> int | None:
  """Threads numpy's BLAS uses (from threadpoolctl), or None when unknown."""
  for lib in _blas_info():
    if lib.get("user_api") == "blas" and "numpy" in str(lib.get("filepath", "")):
      return int(lib["num_threads"])
  return None


def tg_threads() -> str:
  if Device.DEFAULT == "PYTHON":
    return "1 (the PYTHON interpreter)"
  if Device.DEFAULT in ("CLANG", "LLVM"):
    from tg.runtime.cpu import CPU_THREADS
    return f"{CPU_THREADS.value} (big kernels split their outer loop across CPU_THREADS)"
  return "device-defined"


def load_note() -> str:
  """The load average, with a warning when other processes compete for the cores (timings then get noisy)."""
  try:
    one, five, _ = os.getloadavg()
  except OSError:
    return "unknown"
  busy = "" if one < 0.5 else "   <- the machine was busy (other processes or an earlier run): multi-threaded timings may be noisy"
  return f"load average {one:.2f} (1 min), {five:.2f} (5 min){busy}"


_env_printed = False


def print_env(force: bool = False) -> None:
  """Print once per process: device, versions, threads, BLAS details and OpenBLAS overrides."""
  global _env_printed
  if _env_printed and not force:
    return
  _env_printed = True
  print("=" * 100)
  dev = Device.DEFAULT
  extra = ""
  if dev == "CLANG":
    try:
      from tg_clang.compiler import clang_version
      extra = f" ({clang_version()})"
    except Exception:  # a device package mid-edit shouldn't stop the benchmark
      pass
  print(f"tg device        : {dev}{extra}   (tg.Device.DEFAULT; choose with DEVICE=NAME)")
  print(f"versions         : python {platform.python_version()}, tg {tg.__version__}, numpy {np.__version__}, torch {torch.__version__}")
  print(f"cpu              : {cpu_model()}, {_AVAILABLE} cores available; vector ISA: {host_isa()}")
  try:
    from tg.renderer.cpu_target import cpu_target
    if getattr(Device[dev].renderer, "cpu_target", None) is not None:
      print(f"tg cpu target    : {cpu_target().describe()}   (CPU_TARGET=native|x86-64-v2|x86-64-v3|x86-64-v4)")
  except ImportError:  # a tg older than the CPU target (comparing against an earlier commit)
    pass
  print(f"load             : {load_note()}")
  npt = numpy_threads()
  print(f"threads          : OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}, torch.set_num_threads({THREADS}) -> {torch.get_num_threads()}, "
        f"numpy BLAS {npt if npt is not None else '? (threadpoolctl not installed)'}, tg {tg_threads()}")
  if npt is not None and npt != THREADS:
    print(f"  note: numpy's BLAS uses {npt} threads, torch {THREADS}: set OMP_NUM_THREADS (or OPENBLAS_NUM_THREADS) to match")
  cache = "off (DISABLE_COMPILER_CACHE=1: compile times are cold)" if os.environ.get("DISABLE_COMPILER_CACHE") != "0" else "on"
  print(f"tg compiler disk cache: {cache}")
  for lib in _blas_info():
    keys = ("user_api", "internal_api", "version", "num_threads", "threading_layer", "architecture")
    desc = ", ".join(f"{k}={lib[k]}" for k in keys if lib.get(k) is not None)
    print(f"threadpoolctl    : {desc}, {os.path.basename(str(lib.get('filepath', '')))}")
  for var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA",
              "MKL_ENABLE_INSTRUCTIONS"):
    if var in os.environ:
      print(f"env              : {var}={os.environ[var]}")
  if "OPENBLAS_CORETYPE" in os.environ or "OPENBLAS_L2_SIZE" in os.environ:
    print("  note: OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE override OpenBLAS's CPU detection and can slow numpy; for numpy at full speed run\n"
          "        env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/run_all.py   (see bench/README.md)")
  print(RATIO_LEGEND)
  print("=" * 100)


# ---------- timing ----------

@dataclass
class Stat:
  """Timings of one implementation: the median and min of `reps` calls after warm-up (seconds)."""
  median: float
  min: float
  reps: int
  first: float | None = None    # tg: the first call, which compiles
  compile: float | None = None  # tg: time building kernels during the first call (codegen + compile + load)
  kernels_built: int | None = None
  times: list[float] = field(default_factory=list)
  kernels_per_call: float | None = None  # tg: kernels run per timed call (GlobalCounters.kernel_count), a sanity check


class CompileMeter:
  """Measures time spent building kernels (tg.engine.realize.get_runner on a cache miss: codegen, clang, dlopen)
  while active. Works by wrapping get_runner; if tg's internals moved, it reports None instead of failing."""

  def __init__(self) -> None:
    self.seconds: float | None = None
    self.built: int | None = None

  def __enter__(self) -> CompileMeter:
    try:
      import tg.engine.realize as realize
      self._mod, self._orig, self._n0 = realize, realize.get_runner, len(realize.method_cache)
    except (ImportError, AttributeError):
      self._mod = None
      return self
    self.seconds, orig = 0.0, self._orig

    def timed(*args: Any, **kwargs: Any) -> Any:
      st = time.perf_counter()
      try:
        return orig(*args, **kwargs)
      finally:
        self.seconds = (self.seconds or 0.0) + time.perf_counter() - st

    realize.get_runner = timed
    return self

  def __exit__(self, *exc: Any) -> None:
    if self._mod is not None:
      self._mod.get_runner = self._orig
      self.built = len(self._mod.method_cache) - self._n0


def _first_call(fn: Callable[[], Any]) -> tuple[float, float | None, int | None]:
  """Time tg's first call, which builds its kernels: (its time, the part spent building kernels, kernels built)."""
  with CompileMeter() as cm:
    st = time.perf_counter()
    fn()
    first = time.perf_counter() - st
  return first, cm.seconds, cm.built


def measure(fn: Callable[[], Any], reps: int = 5, warmup: int = 1, budget_s: float = 30.0, min_reps: int = 3, tg_first: bool = False,
            before: Callable[[], Any] | None = None) -> Stat:
  """Run `fn` (which must force its work to finish) `warmup` times, then up to `reps` timed times, stopping early
  once `budget_s` is spent and `min_reps` are done. With tg_first, the first warm-up call is timed as the compile call.
  Before every call, untimed: `before()` (e.g. drop the previous result so its memory can be reused) and a garbage
  collection, so memory is recycled as in a steady loop and no collection lands inside a timed call."""
  def prepare() -> None:
    if before is not None:
      before()
    gc.collect()
  first = compile_s = built = None
  for i in range(warmup):
    prepare()
    if i == 0 and tg_first:
      first, compile_s, built = _first_call(fn)
    else:
      fn()
  times: list[float] = []
  k0 = GlobalCounters.kernel_count
  for _ in range(reps):
    prepare()
    st = time.perf_counter()
    fn()
    times.append(time.perf_counter() - st)
    if len(times) >= min_reps and sum(times) > budget_s:
      break
  kpc = (GlobalCounters.kernel_count - k0) / len(times) if tg_first else None
  return Stat(statistics.median(times), min(times), len(times), first, compile_s, built, times, kpc)


def measure_tg(fn: Callable[[], Any], reps: int = 5, warmup: int = 2, budget_s: float = 30.0, min_reps: int = 3,
               before: Callable[[], Any] | None = None) -> Stat:
  """measure() for tg: the first warm-up call compiles and is reported separately."""
  return measure(fn, reps, max(warmup, 1), budget_s, min_reps, tg_first=True, before=before)


def measure_interleaved(fns: dict[str, Callable[[], Any]], reps: int = 10, warmup: int = 2,
                        before: Callable[[str], Any] | None = None) -> dict[str, Stat]:
  """measure() for several implementations of one operation at once, in rounds: each round times every one of them
  once, in order. On a VM whose memory bandwidth drifts from one second to the next, timing all of tg's repetitions,
  then numpy's, then torch's lets the drift decide a memory-bound ratio (the 16M sum's tg/torch moved between 0.74x
  and 0.95x across runs so); in rounds, every drift hits all of them. The key "tg" gets measure_tg()'s compile
  accounting. `before(key)` runs untimed before each call, then a garbage collection, as in measure()."""
  def prepare(key: str) -> None:
    if before is not None:
      before(key)
    gc.collect()
  first = compile_s = built = None
  for i in range(max(warmup, 1)):
    for key, fn in fns.items():
      prepare(key)
      if i == 0 and key == "tg":
        first, compile_s, built = _first_call(fn)
      else:
        fn()
  times: dict[str, list[float]] = {key: [] for key in fns}
  tg_kernels = 0
  for _ in range(reps):
    for key, fn in fns.items():
      prepare(key)
      k0 = GlobalCounters.kernel_count
      st = time.perf_counter()
      fn()
      times[key].append(time.perf_counter() - st)
      if key == "tg":
        tg_kernels += GlobalCounters.kernel_count - k0
  out = {key: Stat(statistics.median(ts), min(ts), len(ts), times=ts) for key, ts in times.items()}
  if "tg" in out:
    out["tg"] = replace(out["tg"], first=first, compile=compile_s, kernels_built=built, kernels_per_call=tg_kernels / reps)
  return out


def realized(a: np.ndarray) -> Tensor:
  """A tg Tensor holding `a`, realized (its buffer filled) on the default device."""
  return Tensor(a).realize()


def max_abs_diff(a: Any, b: Any) -> float:
  return float(np.max(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64))))


# ---------- TinyJit ----------

def load_tinyjit() -> tuple[Any, str]:
  """(TinyJit, "") or (None, why not): tg.engine.jit may not exist yet."""
  try:
    from tg.engine.jit import TinyJit
  except ImportError as e:
    return None, f"{type(e).__name__}: {e}"
  except Exception as e:  # a module being written can fail in other ways
    return None, f"{type(e).__name__}: {e}"
  return TinyJit, ""


# ---------- results and printing ----------

@dataclass
class Row:
  """One benchmark line: the same work done by tg, numpy and torch. `work` is FLOPs or bytes per call."""
  name: str
  tg: Stat | None
  numpy: Stat | None
  torch: Stat | None
  work: float = 0.0
  unit: str = ""          # "GFLOP/s" or "GB/s" (work is then FLOPs or bytes); "" for no rate
  per: str = "call"       # what one timed unit is: "call", "kernel"
  note: str = ""

  def rate(self, s: Stat | None) -> float | None:
    if s is None or not self.unit or not self.work:
      return None
    return self.work / s.median / 1e9

  def ratio(self, other: Stat | None) -> float | None:
    """Speed of tg relative to `other`: time(other) / time(tg), > 1 means tg is faster."""
    if other is None or self.tg is None:
      return None
    return other.median / self.tg.median


def fmt_time(s: float | None) -> str:
  if s is None:
    return "-"
  if s >= 1.0:
    return f"{s:.2f} s"
  if s >= 1e-3:
    return f"{s * 1e3:.2f} ms"
  return f"{s * 1e6:.1f} us" if s >= 1e-5 else f"{s * 1e6:.2f} us"


def fmt_ratio(r: float | None) -> str:
  if r is None:
    return "-"
  return f"{r:.3g}x"


def fmt_rate(r: float | None, unit: str) -> str:
  return "-" if r is None else f"{r:.3g} {unit}"


def print_row(row: Row) -> None:
  """The detailed, side-by-side block for one benchmark."""
  print(f"-- {row.name}" + (f"   ({row.note})" if row.note else ""))
  for label, s in (("tg", row.tg), ("numpy", row.numpy), ("torch", row.torch)):
    if s is None:
      print(f"   {label:6s} skipped")
      continue
    line = f"   {label:6s} median {fmt_time(s.median):>10s} per {row.per}   min {fmt_time(s.min):>10s}   reps {s.reps:2d}"
    if row.unit:
      line += f"   {fmt_rate(row.rate(s), row.unit):>16s}"
    if s.kernels_per_call is not None:
      line += f"   {s.kernels_per_call:g} kernels/call" + ("  <- NO KERNELS RAN: a cached result was timed?" if s.kernels_per_call == 0 else "")
    if s.first is not None:
      built = f", kernels built: {s.kernels_built}" if s.kernels_built is not None else ""
      line += f"   first call {fmt_time(s.first)} (compile {fmt_time(s.compile)}{built})"
    print(line)
  if row.tg is not None:
    print(f"   speed tg/numpy {fmt_ratio(row.ratio(row.numpy))}   tg/torch {fmt_ratio(row.ratio(row.torch))}   (>1: tg faster)")
  sys.stdout.flush()


def print_table(rows: list[Row], title: str = "summary") -> None:
  """One line per benchmark: times, tg's speed relative to numpy and torch, tg's rate and compile time."""
  w = max([len(r.name) for r in rows] + [10])
  head = (f"{'benchmark':{w}s}  {'tg':>10s} {'numpy':>10s} {'torch':>10s}  {'tg/numpy':>9s} {'tg/torch':>9s}  "
          f"{'tg rate':>15s} {'numpy rate':>15s} {'torch rate':>15s}  {'tg compile':>10s}")
  print(f"\n== {title} (median time per call/kernel; {RATIO_LEGEND}) ==")
  print(head)
  print("-" * len(head))
  for r in rows:
    t = lambda s: fmt_time(s.median) if s is not None else "skipped"
    rate = lambda s: fmt_rate(r.rate(s), r.unit) if r.unit else ""
    comp = fmt_time(r.tg.compile) if r.tg is not None and r.tg.compile is not None else "-"
    print(f"{r.name:{w}s}  {t(r.tg):>10s} {t(r.numpy):>10s} {t(r.torch):>10s}  {fmt_ratio(r.ratio(r.numpy)):>9s} {fmt_ratio(r.ratio(r.torch)):>9s}  "
          f"{rate(r.tg):>15s} {rate(r.numpy):>15s} {rate(r.torch):>15s}  {comp:>10s}")
  sys.stdout.flush()
