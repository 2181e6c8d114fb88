"""Ops that select, sort, scatter and rearrange elements: sort/topk, scatter and index updates, roll, diag,
cumulative products and maxima, searchsorted. Each is a composition of Tensor ops, so it runs on every device
and its gradient (where it has one) comes for free."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
  from tg.tensor import Tensor  # noqa: F401


class SelectMixin:
  pass
