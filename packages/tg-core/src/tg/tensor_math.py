"""Elementwise math beyond the primitives (erf, log1p, expm1, inverse trig, atan2, remainder) and the linear-algebra
and comparison helpers built on them (norm, cross, outer, bmm, tensordot, isclose, cosine_similarity, interpolate).
Each is a composition of Tensor ops, so it runs on every device and its gradient comes for free."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
  from tg.tensor import Tensor  # noqa: F401


class MathMixin:
  pass
