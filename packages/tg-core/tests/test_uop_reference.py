"""docs/uops.md, the reference of what Renderer.render receives, can't drift from the code: every UOps member is on
the page, and the layouts it documents (dtype, src, arg of each UOp; the order of the list) hold for every UOp of
real linearized kernels, on the device under test's renderer and on the PYTHON renderer (which has workgroups,
vectors, masked loads and a tensor core, so every UOp a renderer can receive shows up)."""
from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tg import Device, Tensor, dtypes
from tg.codegen.kernel import Kernel, KernelOptError, Opt, OptOps
from tg.codegen.uops import UOp, UOps
from tg.dtype import PtrDType
from tg.engine.schedule import create_schedule
from tg.ops import BinaryOps, TernaryOps, UnaryOps
from tg.plugins.python import PythonRenderer
from tg.renderer import Renderer
from tg.shape.symbolic import Node, Variable

DOC = Path(__file__).resolve().parents[3] / "docs" / "uops.md"
INDEX = (dtypes.int32, dtypes.int64)
NEVER_RENDERED = {UOps.SINK, UOps.REDUCE}
rng = np.random.default_rng(0)


def _rows() -> dict[str, list[str]]:
  """The doc's table rows by UOp name: the cells after the name."""
  out = {}
  for line in DOC.read_text().splitlines():
    if m := re.match(r"^\| `([A-Z_]+)` \|(.*)\|$", line):
      out[m.group(1)] = [c.strip() for c in m.group(2).split(" | ")]
  return out


def test_every_uop_is_documented() -> None:
  rows = _rows()
  missing = [u.name for u in UOps if u.name not in rows]
  assert not missing, f"UOps missing from docs/uops.md's tables: {missing}"
  unknown = [n for n in rows if n not in UOps.__members__]
  assert not unknown, f"docs/uops.md lists UOps that don't exist: {unknown}"


# the arg and src cells of the renderer's table, as documented: a change of layout changes the doc and this test
ARG_DOC = {"DEFINE_GLOBAL": "buffer number: `int`", "DEFINE_VAR": "`Variable`", "SPECIAL": "`(name, dim, size)`: `str`, `int`, `sint`",
           "DEFINE_LOCAL": "`(name, size)`: `str`, `int`", "RANGE": "`(axis, is_reduce)`: `int`, `bool`", "DEFINE_ACC": "the `REDUCE` UOp",
           "GEP": "lane: `int`", "WMMA": "tensor core name: `str`", "ALU": "`UnaryOps`, `BinaryOps` or `TernaryOps` member"}
SRC_DOC = {"RANGE": "`(start, end)`", "ENDRANGE": "`(RANGE,)`", "ASSIGN": "`(DEFINE_ACC, value)`", "IF": "`(condition, *BARRIERs)`",
           "LOAD": "`(buf, idx)`, `(buf, idx, valid, alt)` or `(buf, idx, BARRIER)`", "ENDIF": "`(IF,)`", "CAST": "`(x,)`", "BITCAST": "`(x,)`",
           "STORE": "`(buf, idx, val)` or `(buf, idx, val, valid)`, then optionally the `IF` it is in", "GEP": "`(vector,)`",
           "WMMA": "`(A, B, C)` fragments (vectors)"}


def test_documented_layouts_are_the_checked_ones() -> None:
  rows = _rows()
  for name, text in ARG_DOC.items():
    assert rows[name][2].startswith(text), f"{name}'s arg in docs/uops.md: {rows[name][2]!r}, this test checks {text!r}"
  for name, text in SRC_DOC.items():
    assert rows[name][1] == text, f"{name}'s src in docs/uops.md: {rows[name][1]!r}, this test checks {text!r}"


# ---- the layouts, checked on real kernels ----

def _buf(u: UOp) -> bool:
  return u.op in (UOps.DEFINE_GLOBAL, UOps.DEFINE_LOCAL) and isinstance(u.dtype, PtrDType)


def _load(u: UOp, r: Renderer) -> bool:
  buf, idx = u.src[0], u.src[1]
  assert _buf(buf) and idx.dtype in INDEX and u.dtype is not None and isinstance(buf.dtype, PtrDType)
  assert u.dtype.scalar() == buf.dtype.base, "a LOAD reads the buffer's element type"
  if len(u.src) == 3:
    return u.src[2].op is UOps.BARRIER and buf.op is UOps.DEFINE_LOCAL
  if len(u.src) == 4:
    valid, alt = u.src[2], u.src[3]
    if valid.op is UOps.VECTORIZE:  # a per-lane mask
      assert r.masked_vector_loads and valid.dtype == dtypes.bool.vec(u.dtype.count)
    else:
      assert valid.dtype == dtypes.bool
    return alt.dtype == u.dtype
  return len(u.src) == 2


def _store(u: UOp, r: Renderer) -> bool:
  buf, idx, val, *rest = u.src
  if rest and rest[-1].op is UOps.IF:
    rest = rest[:-1]
  assert _buf(buf) and idx.dtype in INDEX and isinstance(buf.dtype, PtrDType) and val.dtype is not None
  return u.dtype is None and val.dtype.scalar() == buf.dtype.base and all(v.dtype == dtypes.bool for v in rest) and len(rest) <= 1


def _special(u: UOp, r: Renderer) -> bool:
  name, dim, size = u.arg
  return r.global_ids and u.dtype == dtypes.int32 and re.fullmatch(r"[gl]idx\d", name) is not None and int(name[4:]) == dim \
    and isinstance(size, (int, Node))


def _alu(u: UOp, r: Renderer) -> bool:
  op, n = u.arg, len(u.src)
  assert isinstance(op, (UnaryOps, BinaryOps, TernaryOps)) and op not in (UnaryOps.CAST, UnaryOps.BITCAST)
  assert op not in r.transcendental_fallback and (op is not TernaryOps.MULACC or r.fused_mulacc)
  assert n == (1 if isinstance(op, UnaryOps) else 2 if isinstance(op, BinaryOps) else 3)
  assert u.dtype is not None and not (u.dtype.count > r.vector_width(dtypes.bool) and u.dtype.scalar() == dtypes.bool), \
    "no ALU on a bool vector wider than the renderer's bool vectors"
  assert all(s.count == u.dtype.count for s in u.src), "vector ALUs take vectors of the same count"
  return u.dtype.scalar() == dtypes.bool if op in (BinaryOps.CMPLT, BinaryOps.CMPNE) else True


CHECKS: dict[UOps, Callable[[UOp, Renderer], bool]] = {
  UOps.DEFINE_GLOBAL: lambda u, r: isinstance(u.dtype, PtrDType) and u.src == () and type(u.arg) is int,
  UOps.DEFINE_VAR: lambda u, r: u.dtype == dtypes.int32 and u.src == () and isinstance(u.arg, Variable),
  UOps.CONST: lambda u, r: u.dtype is not None and u.dtype.count == 1 and u.src == () and type(u.arg) in (bool, int, float),
  UOps.SPECIAL: _special,
  UOps.DEFINE_LOCAL: lambda u, r: r.has_local and isinstance(u.dtype, PtrDType) and type(u.arg[0]) is str and type(u.arg[1]) is int,
  UOps.RANGE: lambda u, r: u.dtype in INDEX and len(u.src) == 2 and type(u.arg[0]) is int and type(u.arg[1]) is bool
    and (u.arg[1] or not r.global_ids),
  UOps.ENDRANGE: lambda u, r: u.dtype is None and len(u.src) == 1 and u.src[0].op is UOps.RANGE and u.arg is None,
  UOps.DEFINE_ACC: lambda u, r: len(u.src) == 1 and u.src[0].op in (UOps.CONST, UOps.VECTORIZE) and u.arg.op is UOps.REDUCE
    and u.dtype == u.arg.dtype,
  UOps.ASSIGN: lambda u, r: len(u.src) == 2 and u.src[0].op is UOps.DEFINE_ACC and u.dtype == u.src[0].dtype == u.src[1].dtype,
  UOps.LOAD: _load,
  UOps.STORE: _store,
  UOps.BARRIER: lambda u, r: u.dtype is None and all(s.op is UOps.STORE and s.src[0].op is UOps.DEFINE_LOCAL for s in u.src),
  UOps.IF: lambda u, r: u.dtype is None and u.src[0].dtype == dtypes.bool and all(s.op is UOps.BARRIER for s in u.src[1:]),
  UOps.ENDIF: lambda u, r: u.dtype is None and len(u.src) == 1 and u.src[0].op is UOps.IF,
  UOps.ALU: _alu,
  UOps.CAST: lambda u, r: len(u.src) == 1 and u.arg is None and u.dtype is not None and u.dtype.count == u.src[0].count,
  UOps.BITCAST: lambda u, r: len(u.src) == 1 and u.arg is None and u.dtype is not None and u.src[0].dtype is not None
    and u.dtype.itemsize == u.src[0].dtype.itemsize,
  UOps.VECTORIZE: lambda u, r: u.dtype is not None and u.dtype.count == len(u.src) > 1 and all(s.dtype == u.dtype.scalar() for s in u.src),
  UOps.GEP: lambda u, r: u.src[0].dtype is not None and type(u.arg) is int and 0 <= u.arg < u.src[0].dtype.count
    and u.dtype == u.src[0].dtype.scalar(),
  UOps.WMMA: lambda u, r: len(u.src) == 3 and u.arg in {tc.name for tc in r.tensor_cores} and all(s.count > 1 for s in u.src),
}


def _check_program(uops: list[UOp], r: Renderer) -> set[UOps]:
  """Check every UOp's layout and the list's order; the UOps seen."""
  params = [u for u in uops if u.op in (UOps.DEFINE_GLOBAL, UOps.DEFINE_VAR)]
  assert uops[:len(params)] == params, "the parameters come first"
  globals_ = [u.arg for u in params if u.op is UOps.DEFINE_GLOBAL]
  assert globals_ == list(range(len(globals_))), "buffers by number, every one"
  names = [u.arg.expr for u in params if u.op is UOps.DEFINE_VAR]
  assert [u.op for u in params] == [UOps.DEFINE_GLOBAL] * len(globals_) + [UOps.DEFINE_VAR] * len(names) and names == sorted(names)
  seen: set[UOp] = set()
  accs = {u.arg for u in uops if u.op is UOps.DEFINE_ACC}
  depth = 0
  for u in uops:
    assert u.op not in NEVER_RENDERED, f"{u.op} reached the renderer"
    assert CHECKS[u.op](u, r), f"{u} breaks docs/uops.md's layout"
    for s in u.src:
      assert s in seen or (s.op is UOps.REDUCE and s in accs), f"{u}'s source {s} is not earlier in the list"
    depth += 1 if u.op in (UOps.RANGE, UOps.IF) else -1 if u.op in (UOps.ENDRANGE, UOps.ENDIF) else 0
    assert depth >= 0
    seen.add(u)
  assert depth == 0, "every RANGE and IF is closed"
  return {u.op for u in uops}


def _f32(*shape: int) -> Tensor:
  return Tensor(rng.standard_normal(shape).astype(np.float32))


def _kernels() -> list[tuple[str, Tensor, list[Opt] | None]]:
  """(what, tensor, opts: None for the heuristics) for kernels that together make every UOp."""
  n = Variable("n", 1, 16).bind(5)
  a, b = _f32(8, 16), _f32(8, 16)
  return [("elementwise vector", a * 2 + b, [Opt(OptOps.UPCAST, 1, 4)]),
          ("padded, masked lanes", _f32(8, 14).pad(((0, 0), (1, 1))) * 2, [Opt(OptOps.UPCAST, 1, 4)]),
          ("where on bools", (a < b).where(a, b.exp2()), None),
          ("sum with unroll", a.sum(1), [Opt(OptOps.UNROLL, 1, 4)]),
          ("matmul heuristics", _f32(32, 32) @ _f32(32, 32), None),
          ("symbolic size", Tensor(np.ones((3, 16), np.float32)).shrink((None, (0, n))).sum(1), None),
          ("cast and bitcast", a.cast(dtypes.int32) + a.bitcast(dtypes.int32), None),
          ("group reduce", _f32(4, 64).sum(1), [Opt(OptOps.GROUP, 1, 16)]),
          ("tensor core", _f32(16, 16).cast(dtypes.float16) @ _f32(16, 16).cast(dtypes.float16), [Opt(OptOps.TC, 0, 0)])]


def _linearize(t: Tensor, opts: list[Opt] | None, r: Renderer) -> list[UOp] | None:
  sched = create_schedule([t.lazydata])
  k = Kernel(sched[-1].ast, r)
  try:
    if opts is None:
      k.hand_coded_optimizations()
    else:
      k.apply_opts(opts)
    return k.linearize()
  except (KernelOptError, NotImplementedError):  # an opt or a dtype this renderer doesn't have
    return None


def test_python_renderer_kernels_match_the_doc() -> None:
  r = PythonRenderer()
  seen: set[UOps] = set()
  for what, t, opts in _kernels():
    uops = _linearize(t, opts, r)
    assert uops is not None, f"PYTHON can lower {what}"
    seen |= _check_program(uops, r)
  assert seen == set(UOps) - NEVER_RENDERED, f"not covered: {set(UOps) - NEVER_RENDERED - seen}"


def test_device_renderer_kernels_match_the_doc() -> None:
  r = Device[Device.DEFAULT].renderer
  if r is None:
    pytest.skip(f"{Device.DEFAULT} has no renderer")
  checked = 0
  for _, t, opts in _kernels():
    if (uops := _linearize(t, opts, r)) is not None:
      _check_program(uops, r)
      checked += 1
  assert checked >= 5
