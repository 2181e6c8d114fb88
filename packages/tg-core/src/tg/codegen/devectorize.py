"""Devectorize: split the vector operations a renderer can't express into one scalar operation per lane.

The lowerer builds vector values for a kernel's vector axis (see Lowerer). A renderer says which vector
operations it writes as such (`Renderer.keeps_vector`): a renderer may keep only its vector loads and
stores, or have no vectors of bool, and transcendental fallbacks are written for scalars. Each
other vector ALU, CAST, BITCAST or REDUCE becomes a VECTORIZE of its lanes, each lane computed from the GEPs
of the sources; a GEP of a VECTORIZE is the lane itself, so chains of split operations stay scalar end to end
and only the vector loads and stores remain vectors.
"""
from __future__ import annotations

from collections.abc import Callable

from tg.codegen.uops import PatternMatcher, UOp, UOps, UPat, fold, graph_rewrite


def split_lanes(u: UOp) -> UOp:
  """u, a vector operation, as a VECTORIZE of the same operation on each lane."""
  assert u.dtype is not None
  lanes = tuple(fold(UOp(u.op, u.dtype.scalar(), tuple(s.gep(i) for s in u.src), u.arg)) for i in range(u.dtype.count))
  return UOp(UOps.VECTORIZE, u.dtype, lanes)


def devectorize(sink: UOp, keep: Callable[[UOp], bool]) -> UOp:
  """Split every vector ALU/CAST/BITCAST/REDUCE of the graph for which `keep` is False. A REDUCE of WMMAs is never
  split: a tensor core's fragment of the output is one value, accumulated by the WMMA instruction itself."""
  def split(u: UOp) -> UOp | None:
    if u.op is UOps.REDUCE and u.src[0].op is UOps.WMMA:
      return None
    return split_lanes(u) if u.dtype is not None and u.dtype.count > 1 and not keep(u) else None

  pm = PatternMatcher([
    (UPat((UOps.ALU, UOps.CAST, UOps.BITCAST, UOps.REDUCE), name="u"), split),
    (UPat(UOps.GEP, src=(UPat(UOps.VECTORIZE),), name="u"), lambda u: u.src[0].src[u.arg]),
  ])
  return graph_rewrite(sink, pm)
