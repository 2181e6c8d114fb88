"""Every setting tg reads from the environment, declared once: name, type, default and a one-line doc.

A setting is read from the environment when it is declared (a bad value is an error that names the variable) and
can be changed for a block with `Context(NAME=value)`. Code reads `SETTING.value` where it uses it, so a Context
applies; the read is one attribute lookup, cheap enough for the eager path. Settings that are read only once
(`read_once`: when tg is imported or a device opens) refuse a Context instead of silently doing nothing.
Device packages declare theirs with `Setting(...)` in a module their plugin imports.

`python -m tg.devices --settings` prints the table that docs/devices.md holds (a test checks that they agree).
"""
from __future__ import annotations

import contextlib
import difflib
import functools
import os
import sys
from typing import Any, ClassVar


class SettingError(ValueError):
  """A bad value for a setting (in the environment or a Context), or a Context with an unknown name."""


_TYPE_NAMES = {int: "an integer", str: "a string", float: "a number"}


def _parse(name: str, typ: type, raw: str) -> Any:
  try:
    return typ(raw.strip()) if typ is not str else raw
  except ValueError:
    raise SettingError(f"{name} must be {_TYPE_NAMES.get(typ, typ.__name__)}, got {raw!r}") from None


def _package_of(module: str) -> str:
  top = module.split(".")[0]
  return "tg-core" if top == "tg" else top.replace("_", "-")


class Setting:
  """One named setting. `Setting(name, default, doc)` declares it (or returns the one already declared under `name`,
  as tinygrad's ContextVar does), typed by `default`, and reads its value from the environment."""
  __slots__ = ("choices", "default", "doc", "name", "package", "read_once", "shown_default", "type", "value")
  registry: ClassVar[dict[str, Setting]] = {}
  name: str
  type: type
  default: Any
  doc: str
  package: str
  shown_default: str
  read_once: str
  choices: tuple[Any, ...]
  value: Any

  def __new__(cls, name: str, default: Any, doc: str = "", *, shown_default: str = "", read_once: str = "",
              package: str = "", choices: tuple[Any, ...] = ()) -> Setting:
    if (known := Setting.registry.get(name)) is not None:
      return known
    self = super().__new__(cls)
    self.name, self.type, self.default, self.doc = name, type(default), default, doc
    self.package = package or _package_of(sys._getframe(1).f_globals.get("__name__", "?"))
    self.shown_default, self.read_once, self.choices = shown_default, read_once, choices
    raw = os.environ.get(name)
    self.value = default if raw is None else self.check(_parse(name, self.type, raw))
    Setting.registry[name] = self
    return self

  def check(self, value: Any) -> Any:
    """`value` if it is one of the setting's choices (when it has any), else a SettingError naming them."""
    if self.choices and value not in self.choices:
      raise SettingError(f"{self.name} must be one of {', '.join(map(str, self.choices))}, got {value!r}")
    return value

  def __bool__(self) -> bool: return bool(self.value)
  def __ge__(self, x: int) -> bool: return bool(self.value >= x)
  def __gt__(self, x: int) -> bool: return bool(self.value > x)
  def __lt__(self, x: int) -> bool: return bool(self.value < x)
  def __le__(self, x: int) -> bool: return bool(self.value <= x)
  def __repr__(self) -> str: return f"Setting({self.name}={self.value!r})"


ContextVar = Setting  # tinygrad's name


def lookup(name: str) -> Setting:
  """The setting `name`; an unknown name raises with the close matches. Settings of device packages are declared
  when their plugins load, so those are loaded before giving up."""
  if (s := Setting.registry.get(name)) is not None:
    return s
  from tg.plugins import load_all_plugins  # the cold path: a name that no module imported so far declares
  failed = load_all_plugins()
  if (s := Setting.registry.get(name)) is not None:
    return s
  close = difflib.get_close_matches(name, Setting.registry, n=3, cutoff=0.6)
  hint = f"did you mean {', '.join(close)}? " if close else ""
  broken = "".join(f" (a plugin that failed to load may declare it: {why})" for why in failed.values())
  raise SettingError(f"unknown setting {name!r}: {hint}`python -m tg.devices --settings` lists them all{broken}")


def getenv(key: str, default: Any = 0) -> Any:
  """tinygrad's getenv: a registered setting's current value, else environment variable `key` converted to the type of
  `default` (int by default), read once."""
  if (s := Setting.registry.get(key)) is not None:
    return s.value
  return _getenv_unregistered(key, default)


@functools.cache
def _getenv_unregistered(key: str, default: Any) -> Any:
  raw = os.environ.get(key)
  return default if raw is None else _parse(key, type(default), raw)


class Context(contextlib.ContextDecorator):
  """Change settings for a block: `with Context(DEBUG=2, FUSE_REDUCE=0): ...` (or as a decorator)."""

  def __init__(self, **kwargs: Any) -> None:
    self.kwargs: dict[Setting, Any] = {}
    for name, v in kwargs.items():
      s = lookup(name)
      if s.read_once:
        raise SettingError(f"{name} is read once, {s.read_once}, so a Context can't change it: set it in the environment")
      if s.type is int and isinstance(v, bool):
        v = int(v)
      if not isinstance(v, s.type):
        raise SettingError(f"{name} must be {_TYPE_NAMES.get(s.type, s.type.__name__)}, got {v!r}")
      self.kwargs[s] = s.check(v)
    self.old: list[dict[Setting, Any]] = []

  def __enter__(self) -> None:
    self.old.append({s: s.value for s in self.kwargs})
    for s, v in self.kwargs.items():
      s.value = v

  def __exit__(self, *args: Any) -> None:
    for s, v in self.old.pop().items():
      s.value = v


# ---------- tg-core's settings ----------

def _default_cachedb() -> str:
  # the user cache dir; the only place the default is computed (tg.diskcache reads CACHEDB.value)
  base = os.path.expanduser("~/Library/Caches") if sys.platform == "darwin" else os.getenv("XDG_CACHE_HOME", os.path.expanduser("~/.cache"))
  return os.path.join(base, "tg", "cache.db")


DEVICE = Setting("DEVICE", "", "the default device (also tinygrad's style: `NAME=1`); unset: the best usable one",
                 read_once="when Device.DEFAULT is first used")
TG_PLUGINS = Setting("TG_PLUGINS", "", "load only these device plugins (comma-separated device names)",
                     read_once="when plugins are first listed")
DEBUG = Setting("DEBUG", 0, "1: devices opened, TinyJit captures; 2: each kernel with time, GFLOPS and GB/s, BEAM progress; 3: kernel "
                "ASTs and applied optimizations; 4: generated source; 5: the linearized UOps; 6: the UOp graph before linearizing")
CACHELEVEL = Setting("CACHELEVEL", 2, "0: don't read or write the on-disk cache (compiled kernels, BEAM's choices)")
CACHEDB = Setting("CACHEDB", _default_cachedb(), "where the on-disk cache lives (one sqlite file)", shown_default="`~/.cache/tg/cache.db`",
                  read_once="when tg is imported")
DISABLE_COMPILER_CACHE = Setting("DISABLE_COMPILER_CACHE", 0, "1: compile every kernel afresh (the disk cache isn't used for programs)",
                                 read_once="when a device opens")
DEFAULT_FLOAT = Setting("DEFAULT_FLOAT", "", "the dtype of Python floats and of `Tensor.rand` & co (e.g. `float16`; unset: float32)",
                        read_once="when tg is imported")
NOOPT = Setting("NOOPT", 0, "1: no kernel optimizations (the hand-coded heuristics are off)")
BEAM = Setting("BEAM", 0, "n: search kernel optimizations with a beam of n, timing candidates on the device; the choice is cached")
BEAM_PROGRESS = Setting("BEAM_PROGRESS", 1, "1: BEAM shows a progress line on stderr when stderr is a terminal; 2: always (a log); 0: never")
BEAM_WORKERS = Setting("BEAM_WORKERS", os.cpu_count() or 1, "processes BEAM compiles candidates in", shown_default="the number of cores")
TC = Setting("TC", 1, "0: the GPU heuristics don't use tensor cores (an explicit `Opt(OptOps.TC)` and BEAM still may)")
VECTORIZE = Setting("VECTORIZE", 1, "0: lower upcast axes as scalars only: no vector loads, stores or math in the IR "
                    "(the C compiler may still vectorize)")
JIT = Setting("JIT", 1, "0: TinyJit runs the function every call (no capture); 2: it replays without the device's graph (as JIT_GRAPH=0)")
JIT_GRAPH = Setting("JIT_GRAPH", 1, "0: TinyJit replays kernels one by one instead of through the device's graph")
JIT_BATCH_SIZE = Setting("JIT_BATCH_SIZE", 32, "kernels in a TinyJit capture's first graph batch; each next batch may hold twice as many "
                         "(as tinygrad's JIT splits them)")
CAPTURING = Setting("CAPTURING", 1, "0 (in a `Context`): kernels run inside are not recorded by a TinyJit capture, so its replays skip them")
FUSE_REDUCE = Setting("FUSE_REDUCE", 1, "0: don't fuse a reduction into the kernel of its elementwise user")
NEST_REDUCE = Setting("NEST_REDUCE", 1, "0: don't compute a reduction inside the kernel of another that reads it (softmax's max, a variance's mean) "
                      "or of a sibling over the same input")
NEST_ASSIGN = Setting("NEST_ASSIGN", 1, "0: don't compute a whole elementwise assign inside the kernel of another assign that reads its new value "
                      "(an optimizer's moments in the kernel of the parameter update)")
SCHEDULE_CACHE = Setting("SCHEDULE_CACHE", 1, "0: schedule every graph afresh (by default a graph with the structure of one scheduled before reuses "
                         "its plan: same kernels, its own buffers; graphs with symbolic shapes are always scheduled afresh)")
NO_MEMORY_PLANNER = Setting("NO_MEMORY_PLANNER", 0, "1: every intermediate buffer of a schedule or TinyJit capture gets memory of its own (no reuse)")
SPLIT_REDUCEOP = Setting("SPLIT_REDUCEOP", 1, "0: don't split large reductions into a tree of kernels")
SPLIT_REDUCEOP_THRESHOLD = Setting("SPLIT_REDUCEOP_THRESHOLD", 32768,
                                   "reductions over at least this many elements are split into a tree of kernels "
                                   "(a float sum's error then grows with log(n))")
PACK = Setting("PACK", 1, "0: large matmuls are not copied into panels first on devices that declare `Renderer.matmul_panel`")
LRU = Setting("LRU", 1, "0: freed device buffers go back to the device at once instead of being kept for reuse")
HUGE_PAGES = Setting("HUGE_PAGES", 1, "0: host buffers of 4 MiB and more are not asked for 2 MiB pages (madvise MADV_HUGEPAGE)")
CPU_THREADS = Setting("CPU_THREADS", os.cpu_count() or 1, "threads a CPU device splits a big kernel across", shown_default="the number of cores")
STREAMS = Setting("STREAMS", 1, "0: a schedule over several CPU device instances (a sharded tensor) runs their kernels one after another, "
                  "each split across all cores, instead of side by side, each instance on its share of the cores")
CPU_THREAD_MIN_WORK = Setting("CPU_THREAD_MIN_WORK", 2_000_000, "loop-body instructions from which a CPU device's kernel is split across threads")
CPU_TARGET = Setting("CPU_TARGET", "native", "the CPU that CPU devices compile for and tune to: native, an x86-64 level the host runs "
                     "(x86-64-v2: SSE4.2, x86-64-v3: AVX2, x86-64-v4: AVX-512), or aarch64 (NEON, armv8-a; on another host a CPU "
                     "device may run its kernels under emulation, for correctness only)", read_once="when the first CPU device opens",
                     choices=("native", "x86-64-v2", "x86-64-v3", "x86-64-v4", "aarch64"))
CPU_CACHES = Setting("CPU_CACHES", "", "the CPU's L1d,L2,L3 sizes the heuristics assume (e.g. `48K,2M,32M`; unset: read from sysfs)",
                     read_once="when the first CPU device opens")
CPU_VECTOR_BYTES = Setting("CPU_VECTOR_BYTES", -1, "the vector width CPU devices declare (unset: 64 with AVX-512, 32 with AVX, else 16; 0: none)",
                           shown_default="the CPU's", read_once="when the first CPU device opens")
PROFILE = Setting("PROFILE", 0, "1: write a Chrome trace of kernel runs at exit (to `PROFILE_PATH`)")
PROFILE_PATH = Setting("PROFILE_PATH", "tg_profile.json", "where `PROFILE=1` writes its trace")
GRAPH = Setting("GRAPH", 0, "1: write the lazy graph of each schedule at exit (to `GRAPH_PATH`; SVG too with Graphviz)")
GRAPH_PATH = Setting("GRAPH_PATH", "tg_graph.dot", "where `GRAPH=1` writes its graph")


# ---------- the documentation table ----------

def _shown(s: Setting) -> str:
  if s.shown_default:
    return s.shown_default
  return "unset" if s.default == "" else f"`{s.default}`"


def table_rows(settings: list[Setting] | None = None) -> dict[str, str]:
  """name -> its markdown row, for `settings` (default: all declared)."""
  rows = {}
  for s in settings if settings is not None else Setting.registry.values():
    doc = s.doc + (f" (read once, {s.read_once})" if s.read_once else "")
    rows[s.name] = f"| `{s.name}` | {s.type.__name__} | {_shown(s)} | {s.package} | {doc} |"
  return rows


def markdown_table() -> str:
  """Every setting of tg-core and of the device packages installed here, sorted by package then name."""
  from tg.plugins import load_all_plugins
  load_all_plugins()
  ordered = sorted(Setting.registry.values(), key=lambda s: (s.package != "tg-core", s.package, s.name))
  head = "| variable | type | default | package | meaning |\n|---|---|---|---|---|"
  return "\n".join([head, *table_rows(ordered).values()])
