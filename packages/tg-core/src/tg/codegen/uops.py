"""The UOp graph IR of one kernel, and the pattern matcher that rewrites it.

A UOp is a hash-consed node: building the same (op, dtype, src, arg) twice gives the same object, so
common subexpressions are shared for free and a graph can be compared with `is`.
"""
from __future__ import annotations

import weakref
from collections.abc import Callable
from enum import auto
from typing import Any

from tg.dtype import ConstType, DType, PtrDType, dtypes
from tg.interrupts import finalizer
from tg.ops import BinaryOps, Op, OpEnum, TernaryOps, UnaryOps, exec_alu


class UOps(OpEnum):
  SINK = auto()           # root: src are the STOREs
  DEFINE_GLOBAL = auto()  # arg = buffer index; dtype = PtrDType
  DEFINE_VAR = auto()     # arg = Variable (symbolic size passed at run time)
  CONST = auto()          # arg = Python value
  SPECIAL = auto()        # arg = (name, dim, size): a hardware index. name "gidx<d>": the workgroup's index along
                          # launch dim d (a GPU's block or workgroup id); "lidx<d>": the thread's index inside its
                          # workgroup (its thread or local invocation id). Dim 0 is x, 1 y, 2 z; size may be symbolic.
  DEFINE_LOCAL = auto()   # arg = (name, size); dtype = PtrDType of the element: workgroup-shared memory (__shared__)
  BARRIER = auto()        # src = the local STOREs it orders: every thread of the workgroup waits here (__syncthreads)
  RANGE = auto()          # src = (start, end); arg = (axis, is_reduce): a loop
  ENDRANGE = auto()       # linear program only
  LOAD = auto()           # src = (buf, idx) or (buf, idx, valid, alt), or (buf, idx, barrier) for a local buffer read
                          # after a BARRIER; buf is a DEFINE_GLOBAL or a DEFINE_LOCAL. A vector dtype loads dtype.count
                          # consecutive elements from idx on; valid is one bool for all of them, or a VECTORIZE of one
                          # bool per lane (Renderer.masked_vector_loads)
  STORE = auto()          # src = (buf, idx, val) or (buf, idx, val, valid), then optionally the IF whose block it is in;
                          # a vector val stores consecutive elements
  IF = auto()             # src = (condition, *barriers): a block of code that only threads whose condition holds run. Its
                          # stores reference it; it follows the barriers (which every thread must reach: none is inside)
  ENDIF = auto()          # linear program only: src = (the IF,)
  ALU = auto()            # arg = UnaryOps/BinaryOps/TernaryOps; on vectors (dtype.count > 1) lane by lane, every source
                          # a vector of the same count
  CAST = auto()
  BITCAST = auto()
  REDUCE = auto()         # src = (val, *ranges); arg = BinaryOps (ADD or MAX). Graph only.
  DEFINE_ACC = auto()     # linear program only: src = (initial CONST,)
  ASSIGN = auto()         # linear program only: src = (acc, new value)
  VECTORIZE = auto()      # src = the lanes (scalars of dtype.scalar()); dtype = a vector: builds one vector from lanes
  GEP = auto()            # src = (vector,); arg = lane index: one lane of a vector, as a scalar
  WMMA = auto()           # src = (A, B, C) fragments (vectors); arg = TensorCore name: D = A @ B + C over a warp's
                          # threads (tg.codegen.tensor_core); dtype = this thread's fragment of D


class _Interned(weakref.ref):  # type: ignore[type-arg]
  """The intern table's weak reference to a UOp, with the key to drop when the UOp goes."""
  __slots__ = ("key",)
  key: tuple[Any, ...]


@finalizer  # runs as a weak reference's callback: Ctrl-C must not be raised (and lost) in it
def _forget(ref: _Interned) -> None:
  if UOp._cache.get(ref.key) is ref:  # not a newer node of the same key
    # (pop: another thread's callback for the same entry may have removed it since the check; at worst this drops a
    # newer entry made in between, and the next node of that key is interned anew)
    UOp._cache.pop(ref.key, None)


class UOp:
  """One node of the kernel IR. Construct with UOp(op, dtype, src, arg); identical nodes are one object.

  The intern table holds nodes weakly (a plain dict of weak references, which keeps lookups at dict speed): a node
  lives as long as a graph, a Program or a caller holds it, so compiling kernel after kernel doesn't grow it."""
  __slots__ = ("__weakref__", "_known_bounds", "arg", "dtype", "op", "src")
  _cache: dict[tuple[Any, ...], _Interned] = {}
  op: UOps
  dtype: DType | None
  src: tuple[UOp, ...]
  arg: Any
  _known_bounds: tuple[Any, Any]  # set by _bounds() on first use

  def __new__(cls, op: UOps, dtype: DType | None = None, src: tuple[UOp, ...] = (), arg: Any = None) -> UOp:
    # a float by its bits: -0.0 == 0.0 would make them one node, and nan != nan a new node per use
    key = (op, dtype, src, arg.hex() if type(arg) is float else arg, type(arg))
    if (ref := UOp._cache.get(key)) is not None and (ret := ref()) is not None:
      return ret  # type: ignore[no-any-return]
    ret = super().__new__(cls)
    ret.op, ret.dtype, ret.src, ret.arg = op, dtype, src, arg
    ref = UOp._cache[key] = _Interned(ret, _forget)
    ref.key = key
    return ret

  def __reduce__(self) -> tuple[Any, ...]:
    return UOp, (self.op, self.dtype, self.src, self.arg)

  def __repr__(self) -> str:
    return f"UOp({self.op}, {self.dtype}, arg={self.arg!r}, src=({', '.join(str(s.op) for s in self.src)}))"

  # ---- construction helpers: these fold constants as they build, which keeps index math small ----
  @staticmethod
  def const(dtype: DType, val: ConstType) -> UOp:
    """A constant; of a vector dtype, the scalar constant in every lane."""
    if dtype.count > 1:
      return UOp.const(dtype.scalar(), val).broadcast(dtype.count)
    return UOp(UOps.CONST, dtype, (), dtypes.as_const(val, dtype))

  @property
  def count(self) -> int:
    """Lanes: 1 for a scalar."""
    return 1 if self.dtype is None else self.dtype.count

  def broadcast(self, n: int) -> UOp:
    """This scalar in each of n lanes (itself when n is 1 or it is a vector already)."""
    assert self.dtype is not None
    return self if n == 1 or self.dtype.count > 1 else UOp(UOps.VECTORIZE, self.dtype.vec(n), (self,) * n)

  def is_zero(self) -> bool:
    """A constant 0, or a vector of them (a broadcast 0)."""
    if self.op is UOps.CONST:
      return bool(self.arg == 0)
    return self.op is UOps.VECTORIZE and all(s.is_zero() for s in self.src)

  def gep(self, i: int) -> UOp:
    """Lane i of a vector (a scalar is the same in every lane)."""
    assert self.dtype is not None
    if self.dtype.count == 1:
      return self
    return self.src[i] if self.op is UOps.VECTORIZE else UOp(UOps.GEP, self.dtype.scalar(), (self,), i)

  def alu(self, op: Op, *src: UOp) -> UOp:
    """An ALU op; when any operand is a vector, the scalar ones are broadcast to its lanes."""
    n = max(s.count for s in (self, *src))
    me, src = self.broadcast(n), tuple(s.broadcast(n) for s in src)
    out_dtype = dtypes.bool.vec(n) if op in (BinaryOps.CMPLT, BinaryOps.CMPNE) else (src[-1].dtype if op is TernaryOps.WHERE else me.dtype)
    return fold(UOp(UOps.ALU, out_dtype, (me,) + src, op))

  def cast(self, dtype: DType) -> UOp:
    """A conversion to `dtype` (to its vector of as many lanes, for a vector)."""
    dtype = dtype.scalar().vec(self.count)
    return self if self.dtype == dtype else fold(UOp(UOps.CAST, dtype, (self,)))

  def _c(self, x: UOp | ConstType) -> UOp:
    assert self.dtype is not None
    return x if isinstance(x, UOp) else UOp.const(self.dtype, x)

  def __add__(self, x: UOp | ConstType) -> UOp: return self.alu(BinaryOps.ADD, self._c(x))
  def __radd__(self, x: ConstType) -> UOp: return self._c(x).alu(BinaryOps.ADD, self)
  def __mul__(self, x: UOp | ConstType) -> UOp: return self.alu(BinaryOps.MUL, self._c(x))
  def __rmul__(self, x: ConstType) -> UOp: return self._c(x).alu(BinaryOps.MUL, self)
  def __floordiv__(self, x: UOp | ConstType) -> UOp: return self.alu(BinaryOps.IDIV, self._c(x))
  def __mod__(self, x: UOp | ConstType) -> UOp: return self.alu(BinaryOps.MOD, self._c(x))
  def __neg__(self) -> UOp: return self.alu(UnaryOps.NEG)
  def lt(self, x: UOp | ConstType) -> UOp: return self.alu(BinaryOps.CMPLT, self._c(x))
  def ge(self, x: UOp | ConstType) -> UOp: return self.lt(x).alu(UnaryOps.NEG)  # NEG of a bool is NOT
  def logical_and(self, x: UOp) -> UOp: return self.alu(BinaryOps.AND, x)

  # ---- bounds: known for indices, which is what lets comparisons fold away ----
  @property
  def vmin(self) -> ConstType: return self._bounds()[0]
  @property
  def vmax(self) -> ConstType: return self._bounds()[1]

  def _bounds(self) -> tuple[Any, Any]:
    """[min, max] of the value, memoized on the node (a node never changes; without it, a DAG of shared index math is
    walked once per path: exponential in big kernels). Asking in program order keeps the recursion shallow."""
    try:
      return self._known_bounds
    except AttributeError:
      self._known_bounds = b = self._compute_bounds()
      return b

  def _compute_bounds(self) -> tuple[Any, Any]:
    assert self.dtype is not None
    lo, hi = dtypes.min(self.dtype.scalar()), dtypes.max(self.dtype.scalar())
    if self.dtype.count > 1:  # bounds are tracked for scalars (indices) only
      return lo, hi
    if self.op is UOps.CONST:
      return self.arg, self.arg
    if self.op is UOps.RANGE:
      return self.src[0].vmin, self.src[1].vmax - 1  # type: ignore[operator]
    if self.op is UOps.SPECIAL:
      return 0, (self.arg[2] if isinstance(self.arg[2], int) else self.arg[2].max) - 1
    if self.op is UOps.DEFINE_VAR:
      return self.arg.min, self.arg.max
    if self.op is UOps.CAST and dtypes.is_int(self.dtype) and self.src[0].dtype is not None and dtypes.is_int(self.src[0].dtype):
      s_lo, s_hi = self.src[0]._bounds()  # a widened index (int32 thread id -> int64) keeps its bounds
      if lo <= s_lo and s_hi <= hi:
        return s_lo, s_hi
    if self.op is UOps.ALU and dtypes.is_int(self.dtype) and all(s.dtype is not None and dtypes.is_int(s.dtype) for s in self.src):
      bounds = [s._bounds() for s in self.src]
      if self.arg is BinaryOps.ADD:
        return bounds[0][0] + bounds[1][0], bounds[0][1] + bounds[1][1]
      if self.arg is BinaryOps.MUL:
        prods = [a * b for a in bounds[0] for b in bounds[1]]
        return min(prods), max(prods)
      if self.arg is BinaryOps.IDIV and self.src[1].op is UOps.CONST and self.src[1].arg > 0 and bounds[0][0] >= 0:
        return bounds[0][0] // self.src[1].arg, bounds[0][1] // self.src[1].arg
      if self.arg is BinaryOps.MOD and self.src[1].op is UOps.CONST and self.src[1].arg > 0 and bounds[0][0] >= 0:
        return 0, min(bounds[0][1], self.src[1].arg - 1)
    if self.op is UOps.ALU and self.dtype == dtypes.bool and self.arg is BinaryOps.CMPLT:
      (a0, a1), (b0, b1) = self.src[0]._bounds(), self.src[1]._bounds()
      if a1 < b0:
        return True, True
      if a0 >= b1:
        return False, False
      return False, True
    return lo, hi

  def toposort(self) -> list[UOp]:
    out: dict[UOp, None] = {}
    stack: list[tuple[UOp, bool]] = [(self, False)]
    while stack:
      u, visited = stack.pop()
      if u in out:
        continue
      if visited:
        out[u] = None
      else:
        stack.append((u, True))
        stack.extend((s, False) for s in reversed(u.src) if s not in out)
    return list(out)


# ---------- patterns ----------

class UPat:
  """A pattern over UOps: match by op, arg, dtype and sources; `name` binds the matched node."""

  def __init__(self, op: UOps | tuple[UOps, ...] | None = None, arg: Any = None, src: tuple[UPat, ...] | None = None,
               name: str | None = None, dtype: DType | tuple[DType, ...] | None = None, commutative: bool = False) -> None:
    self.op = op if op is None or isinstance(op, tuple) else (op,)
    self.dtype = dtype if dtype is None or isinstance(dtype, tuple) else (dtype,)
    self.arg, self.src, self.name, self.commutative = arg, src, name, commutative

  @staticmethod
  def var(name: str) -> UPat:
    return UPat(name=name)

  @staticmethod
  def cvar(name: str) -> UPat:
    return UPat(UOps.CONST, name=name)

  def match(self, u: UOp, store: dict[str, UOp]) -> bool:
    if self.op is not None and u.op not in self.op:
      return False
    if self.arg is not None and u.arg != self.arg:
      return False
    if self.dtype is not None and u.dtype not in self.dtype:
      return False
    if self.name is not None:
      if self.name in store and store[self.name] is not u:
        return False
      store[self.name] = u
    if self.src is None:
      return True
    if len(self.src) != len(u.src):
      return False
    orders = [u.src, u.src[::-1]] if self.commutative and len(u.src) == 2 else [u.src]
    for srcs in orders:
      trial = dict(store)
      if all(p.match(s, trial) for p, s in zip(self.src, srcs)):
        store.update(trial)
        return True
    return False


class PatternMatcher:
  """An ordered list of (pattern, rewrite); `rewrite` returns the first non-None result."""

  def __init__(self, patterns: list[tuple[UPat, Callable[..., UOp | None]]]) -> None:
    self.patterns = patterns

  def __add__(self, other: PatternMatcher) -> PatternMatcher:
    return PatternMatcher(self.patterns + other.patterns)

  def rewrite(self, u: UOp) -> UOp | None:
    for pat, fn in self.patterns:
      store: dict[str, UOp] = {}
      if pat.match(u, store) and (ret := fn(**store)) is not None:
        return ret
    return None


def graph_rewrite(sink: UOp, pm: PatternMatcher) -> UOp:
  """Rewrite bottom-up until no pattern applies anywhere."""
  memo: dict[UOp, UOp] = {}

  def rw(u: UOp) -> UOp:
    if (ret := memo.get(u)) is not None:
      return ret
    new_src = tuple(rw(s) for s in u.src)
    n = u if new_src == u.src else UOp(u.op, u.dtype, new_src, u.arg)
    while (r := pm.rewrite(n)) is not None:
      n = rw(r)
    memo[u] = n
    return n
  return rw(sink)


def rewrite_reduces(sink: UOp, fn: Callable[[UOp], UOp | None]) -> UOp:
  """`sink` with each REDUCE for which fn returns a node replaced by it (the nodes above it rebuilt on the new one)."""
  replace = {u: c for u in sink.toposort() if u.op is UOps.REDUCE and (c := fn(u)) is not None}
  if not replace:
    return sink
  memo: dict[UOp, UOp] = {}

  def rw(u: UOp) -> UOp:
    if (ret := memo.get(u)) is None:
      ret = replace.get(u, u)
      new_src = tuple(rw(s) for s in ret.src)
      ret = memo[u] = ret if new_src == ret.src else UOp(ret.op, ret.dtype, new_src, ret.arg)
    return ret
  return rw(sink)


# ---------- constant folding, applied as nodes are built ----------

def _is_const(u: UOp, val: Any = None) -> bool:
  """u is a constant (in every lane, for a vector), equal to `val` if given."""
  if _is_broadcast(u):
    u = u.src[0]
  return u.op is UOps.CONST and (val is None or u.arg == val)


def _is_broadcast(u: UOp) -> bool:
  return u.op is UOps.VECTORIZE and all(s is u.src[0] for s in u.src)


def fold(u: UOp) -> UOp:
  """Fold a freshly built ALU/CAST: all-constant inputs, identities (x+0, x*1, x*0 for ints), decided compares."""
  if u.op is UOps.CAST and u.src[0].op is UOps.CONST:
    assert u.dtype is not None
    return UOp.const(u.dtype, u.src[0].arg)
  if u.op is UOps.GEP and u.src[0].op is UOps.VECTORIZE:
    return u.src[0].src[u.arg]
  if u.op is not UOps.ALU and u.op is not UOps.CAST:
    return u
  assert u.dtype is not None
  if u.dtype.count > 1 and all(_is_broadcast(s) for s in u.src):  # the same op in every lane: do it once, then broadcast
    return fold(UOp(u.op, u.dtype.scalar(), tuple(s.src[0] for s in u.src), u.arg)).broadcast(u.dtype.count)
  if u.op is UOps.CAST:
    return u
  if all(_is_const(s) for s in u.src) and (u.arg not in (BinaryOps.IDIV, BinaryOps.MOD) or u.src[1].arg != 0):
    return UOp.const(u.dtype, exec_alu(u.arg, u.dtype, [s.arg for s in u.src]))  # scalars: broadcasts were folded above
  a = u.src[0]
  if u.arg is BinaryOps.ADD:
    if _is_const(u.src[1], 0):
      return a
    if _is_const(a, 0):
      return u.src[1]
  if u.arg is BinaryOps.MUL:
    if _is_const(u.src[1], 1):
      return a
    if _is_const(a, 1):
      return u.src[1]
    if dtypes.is_int(u.dtype) and (_is_const(a, 0) or _is_const(u.src[1], 0)):
      return UOp.const(u.dtype, 0)
  if u.arg in (BinaryOps.IDIV, BinaryOps.MOD) and u.dtype.count == 1 and dtypes.is_int(u.dtype) and _is_const(u.src[1]) and \
      u.src[1].arg > 0 and a.vmin >= 0:
    c = u.src[1].arg
    if u.arg is BinaryOps.IDIV and c == 1:
      return a
    if a.vmax < c:  # the whole range of a lies below c
      return a if u.arg is BinaryOps.MOD else UOp.const(u.dtype, 0)
  if u.arg is BinaryOps.AND and u.dtype == dtypes.bool:
    if _is_const(u.src[1], True):
      return a
    if _is_const(a, True):
      return u.src[1]
  if u.dtype == dtypes.bool and u.arg is BinaryOps.CMPLT and all(s.dtype is not None and dtypes.is_int(s.dtype) for s in u.src):
    lo, hi = u._bounds()
    if lo == hi:
      return UOp.const(dtypes.bool, lo)
  if u.arg is UnaryOps.NEG and u.dtype == dtypes.bool and a.op is UOps.ALU and a.arg is UnaryOps.NEG:
    return a.src[0]
  if u.arg is TernaryOps.WHERE and _is_const(a):
    return u.src[1] if (a.src[0] if _is_broadcast(a) else a).arg else u.src[2]
  if u.arg is TernaryOps.WHERE and a.op is UOps.ALU and a.src[0].dtype is not None and a.src[0].dtype.scalar() == dtypes.bool and \
     (a.arg is UnaryOps.NEG or (a.arg is BinaryOps.CMPNE and _is_const(a.src[1], True))):
    # where(not c, x, y) is where(c, y, x): `==` is built as `(a != b) != True`, and the NOT of a vector compare is
    # written lane by lane in C (a one-hot mask's select cost 8 scalar ops per 8 lanes)
    return fold(UOp(UOps.ALU, u.dtype, (a.src[0], u.src[2], u.src[1]), TernaryOps.WHERE))
  return u


def store_valid(store: UOp) -> UOp | None:
  """The predicate of a STORE (None: it always stores). An IF among its sources is the block it is in, not a predicate."""
  return next((s for s in store.src[3:] if s.op is not UOps.IF), None)


def ptr(dtype: DType) -> PtrDType:
  return dtype.ptr()
