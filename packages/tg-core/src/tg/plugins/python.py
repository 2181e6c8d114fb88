"""The PYTHON device: a UOp interpreter, the reference every other backend is checked against.

It runs like a GPU: one "lane" per thread (every workgroup's every thread, from the SPECIAL gidx/lidx ids),
every instruction applied to all lanes at once, loops (RANGE) shared by all lanes. As all lanes move in
lockstep, a BARRIER has nothing to wait for; local memory (DEFINE_LOCAL) is one array per workgroup. Inside an
IF block only the lanes whose condition holds are active (a stack of lane masks): the others still compute, as
a GPU's masked-off lanes do, but load and store nothing and keep their accumulators. Loop bounds are uniform.
The "source" is the linear program itself, serialized; the meaning of each ALU op is `tg.ops.exec_alu`,
the same function constant folding uses.
"""
from __future__ import annotations

import itertools
import pickle
import struct
import time
from collections.abc import Callable
from typing import Any

from tg.codegen.tensor_core import TENSOR_CORES, emulate_wmma
from tg.codegen.uops import UOp, UOps
from tg.device import Compiler, HostAllocator
from tg.dtype import DType, PtrDType, dtypes
from tg.ops import exec_alu, truncate
from tg.plugins import DeviceSpec, hookimpl, split_device
from tg.renderer import Renderer

TG_PLUGIN_API_VERSION = 2
DEVICE = "PYTHON"


class PythonRenderer(Renderer):
  device = DEVICE
  global_ids = True
  has_local = True  # emulated: lets every LOCAL/GROUP kernel be checked against the plain one
  vector_bytes = 32  # vectors of up to 8 floats (each lane's value is a tuple): the reference for vector lowering
  masked_vector_loads = True
  fused_mulacc = True  # exec_alu's MULACC rounds once, as hardware FMA does
  # every tensor core a backend uses (CUDA's mma, AMD's WMMA, Apple's simdgroup matrices), emulated through its
  # fragment layout: a tensor-core kernel for any of them is checked here, layout included. CUDA's comes first: it
  # is the one the heuristics pick (Opt(TC, None, 0))
  tensor_cores = tuple(TENSOR_CORES.values())
  local_max_threads = 256

  def render(self, name: str, uops: list[UOp]) -> str:
    index = {u: i for i, u in enumerate(uops)}
    # REDUCEs are referenced by their users but live in the program as their DEFINE_ACC
    for u in uops:
      if u.op is UOps.DEFINE_ACC:
        index[u.arg] = index[u]
    prog = [(u.op.name, u.dtype, [index[s] for s in u.src], u.arg if u.op is not UOps.DEFINE_ACC else None) for u in uops]
    # a readable listing for people (DEBUG=4), then the program itself on the last line for the compiler
    listing = [f"# {name}"] + [f"# {i:4d} {op:12s} {dt!s:22s} {srcs!s:16s} {arg!r}" for i, (op, dt, srcs, arg) in enumerate(prog)]
    return "\n".join(listing + [pickle.dumps(prog).hex()])


class PythonCompiler(Compiler):
  def compile(self, src: str) -> bytes:
    return bytes.fromhex(src.rsplit("\n", 1)[-1])


def _fmt(dt: DType) -> str:
  """The memoryview format a buffer of `dt` is viewed with (16-bit floats as their bits: memoryview lacks them)."""
  return "H" if dt in (dtypes.bfloat16, dtypes.float16) else str(dt.fmt)


def _load(buf: memoryview, dt: DType, idx: int) -> Any:
  if dt == dtypes.bfloat16:
    return struct.unpack("<f", struct.pack("<I", buf[idx] << 16))[0]
  if dt == dtypes.float16:
    return struct.unpack("<e", struct.pack("<H", buf[idx]))[0]
  return buf[idx]


def _read(buf: memoryview, dt: DType, count: int, i: int, ok: Any, other: Any) -> Any:
  """A LOAD's value in one lane: one element, or a vector's `count` consecutive elements, each read only where valid
  (a vector's mask has one bool per element) and `other` elsewhere."""
  if count == 1:
    return _load(buf, dt, i) if ok else other
  oks = ok if isinstance(ok, tuple) else (ok,) * count
  return tuple(_load(buf, dt, i + k) if ok_k else o_k for k, (ok_k, o_k) in enumerate(zip(oks, other)))


def _store(buf: memoryview, dt: DType, idx: int, val: Any) -> None:
  if dt == dtypes.bfloat16:
    (bits,) = struct.unpack("<I", struct.pack("<f", truncate(dtypes.bfloat16, val)))
    buf[idx] = bits >> 16
  elif dt == dtypes.float16:
    buf[idx] = struct.unpack("<H", struct.pack("<e", truncate(dtypes.float16, val)))[0]
  else:
    buf[idx] = val


def _bitcast(x: Any, src: DType, dst: DType) -> Any:
  # bfloat16 has no struct format: it is a float32's top half, packed and unpacked through that
  if src == dtypes.bfloat16:
    (bits,) = struct.unpack("<I", struct.pack("<f", truncate(dtypes.bfloat16, x)))
    return struct.unpack(str(dst.fmt), struct.pack("<H", bits >> 16))[0]
  if dst == dtypes.bfloat16:
    (bits,) = struct.unpack("<H", struct.pack(str(src.fmt), x))
    return struct.unpack("<f", struct.pack("<I", bits << 16))[0]
  return struct.unpack(str(dst.fmt), struct.pack(str(src.fmt), x))[0]


class PythonProgram:
  def __init__(self, name: str, lib: bytes) -> None:
    self.name = name
    self.uops: list[tuple[str, DType | None, list[int], Any]] = pickle.loads(lib)
    self.end_of = {u[2][0]: pc for pc, u in enumerate(self.uops) if u[0] == "ENDRANGE"}

  def __call__(self, *bufs: Any, global_size: tuple[int, ...] = (), local_size: tuple[int, ...] = (),
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    st = time.perf_counter()
    # a lane is (workgroup coordinates, thread coordinates), each outermost dim first
    groups = list(itertools.product(*[range(s) for s in reversed(global_size)]))
    threads = list(itertools.product(*[range(s) for s in reversed(local_size)]))
    lanes = [(g, t) for g in groups for t in threads]
    n, n_threads = len(lanes), len(threads)
    local_base = [lane // n_threads for lane in range(n)]  # which workgroup's local memory a lane sees
    mvs = [memoryview(b).cast("B") for b in bufs]
    v: dict[int, list[Any]] = {}
    buf_of: dict[int, tuple[memoryview, DType]] = {}
    masks = [[True] * n]  # the active lanes: one mask per open IF block, the innermost last
    pc, n_vars = 0, 0
    prog = self.uops
    while pc < len(prog):
      op, dt, src, arg = prog[pc]
      on = masks[-1]
      if op == "DEFINE_GLOBAL":
        assert isinstance(dt, PtrDType)
        buf_of[pc] = (mvs[arg].cast(_fmt(dt.base)), dt.base)
      elif op == "CONST":
        v[pc] = [arg] * n
      elif op == "SPECIAL":
        dim, is_local = arg[1], arg[0].startswith("lidx")
        v[pc] = [t[len(local_size) - 1 - dim] for _, t in lanes] if is_local else [g[len(global_size) - 1 - dim] for g, _ in lanes]
      elif op == "DEFINE_LOCAL":
        assert isinstance(dt, PtrDType)
        size = arg[1]
        buf_of[pc] = ([0] * (size * len(groups)), dt.base, size)  # type: ignore[assignment]
      elif op == "BARRIER":
        pass
      elif op == "RANGE":
        start, end = v[src[0]][0], v[src[1]][0]
        if start >= end:  # an empty loop: continue after its ENDRANGE
          pc = self.end_of[pc] + 1
          continue
        v[pc] = [start] * n
      elif op == "ENDRANGE":
        rpc = src[0]
        if (nxt := v[rpc][0] + 1) < v[prog[rpc][2][1]][0]:
          v[rpc] = [nxt] * n
          pc = rpc + 1
          continue
      elif op == "IF":
        masks.append([a and bool(c) for a, c in zip(on, v[src[0]])])
      elif op == "ENDIF":
        masks.pop()
      elif op == "LOAD" and len(buf_of[src[0]]) == 3:  # local memory: offset by the lane's workgroup
        lmem, _, size = buf_of[src[0]]  # type: ignore[misc]
        v[pc] = [lmem[g * size + i] if a else 0 for g, i, a in zip(local_base, v[src[1]], on)]
      elif op == "LOAD":
        assert dt is not None
        buf, bdt = buf_of[src[0]]
        count, idxs = dt.count, v[src[1]]
        zero = (0,) * count if count > 1 else 0
        valid, alt = (v[src[2]], v[src[3]]) if len(src) == 4 else ([True] * n, [zero] * n)

        # masked-off lanes (an IF's inactive threads) read nothing
        v[pc] = [_read(buf, bdt, count, i, ok, other) if act else other for i, ok, other, act in zip(idxs, valid, alt, on)]
      elif op == "STORE":
        gate = next((v[s] for s in src[3:] if prog[s][0] != "IF"), on)  # its predicate, if any (an IF is the block)
        idxs, data = v[src[1]], v[src[2]]
        writers = [lane for lane in range(n) if on[lane] and gate[lane]]
        if len(buf_of[src[0]]) == 3:  # local memory: offset by the lane's workgroup
          lmem, _, size = buf_of[src[0]]  # type: ignore[misc]
          for lane in writers:
            lmem[local_base[lane] * size + idxs[lane]] = data[lane]
        else:
          buf, bdt = buf_of[src[0]]
          for lane in writers:
            x = data[lane]
            for k, xk in enumerate(x if isinstance(x, tuple) else (x,)):  # a vector stores consecutive elements
              _store(buf, bdt, idxs[lane] + k, xk)
      elif op == "ALU":
        assert dt is not None
        sdt = dt.scalar()
        if dt.count == 1:
          v[pc] = [exec_alu(arg, dt, list(xs)) for xs in zip(*[v[s] for s in src])]
        else:  # lane by lane
          v[pc] = [tuple(exec_alu(arg, sdt, list(ys)) for ys in zip(*xs)) for xs in zip(*[v[s] for s in src])]
      elif op in ("CAST", "BITCAST"):
        assert dt is not None
        src_dt = prog[src[0]][1]
        assert src_dt is not None
        conv: Callable[[Any], Any] = (lambda x: _cast(x, dt.scalar())) if op == "CAST" else \
          (lambda x: _bitcast(x, src_dt.scalar(), dt.scalar()))
        v[pc] = [conv(x) for x in v[src[0]]] if dt.count == 1 else [tuple(conv(y) for y in x) for x in v[src[0]]]
      elif op == "WMMA":  # each warp (32 consecutive threads of a workgroup) multiplies its tile at once
        tc = TENSOR_CORES[arg]
        assert n_threads % tc.threads == 0, f"{tc.name} needs whole warps of {tc.threads} threads"
        frags = [v[s] for s in src]
        v[pc] = [x for w in range(0, n, tc.threads) for x in emulate_wmma(tc, *(f[w:w + tc.threads] for f in frags))]
      elif op == "VECTORIZE":
        v[pc] = [tuple(xs) for xs in zip(*[v[s] for s in src])]
      elif op == "GEP":
        v[pc] = [x[arg] for x in v[src[0]]]
      elif op == "DEFINE_VAR":
        v[pc] = [vals[n_vars]] * n
        n_vars += 1
      elif op == "DEFINE_ACC":
        v[pc] = list(v[src[0]])
      elif op == "ASSIGN":
        v[src[0]] = v[src[1]] if len(masks) == 1 else [x if a else old for x, old, a in zip(v[src[1]], v[src[0]], on)]
      else:
        raise NotImplementedError(f"PYTHON can't interpret {op}")
      pc += 1
    return time.perf_counter() - st if wait else None


def _cast(x: Any, dt: DType) -> Any:
  if dtypes.is_int(dt) and isinstance(x, float):
    if x != x or x in (float("inf"), float("-inf")):
      return 0  # C leaves this undefined; pick 0 so results are deterministic
    x = int(x)  # C truncates toward zero
  return truncate(dt, x)


@hookimpl
def tg_device(device: str) -> DeviceSpec | None:
  if split_device(device)[0] != DEVICE:
    return None
  # priority 0: the slowest device, chosen only when nothing else is usable
  return DeviceSpec(allocator=HostAllocator, renderer=PythonRenderer, compiler=PythonCompiler, program=PythonProgram, priority=0)
