"""Writes to rows named by an index: out[pos[t]] (+)= rows[t] for t tokens into p_n rows of width r.

tg has no store at a loaded position, so a scatter is built from reads. Read as a one-hot sum, out[p] = sum_t
where(pos[t] == p, rows[t], 0) searches every token for each element of out: p_n x t x r select-adds (GPT-2's 50257 x
768 embedding gradient of 128 tokens: 5G, seconds). The forms here read instead:

  last_token(pos, p_n)[p]  the last t at p, or -1: p_n x t compares, no width
  rows_at(which, rows)[p]  rows[which[p]]: a one-hot sum that codegen/one_hot_select.py makes one load per element

so a last-write-wins copy (`x[idx] = v`, index_copy) is rows_at(last_token(pos), rows), and a sum (x[idx]'s gradient,
index_add) first adds up the rows of tokens that share a position (`row_sums`, one of three forms by napkin cost).
Every form keeps torch's numbers: a NaN or inf stays in the rows it was added to (a 0/1 matmul would spread it: 0 * inf
is NaN), and a position no token names gets 0.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from tg.device import is_dtype_supported
from tg.dtype import dtypes

if TYPE_CHECKING:
  from tg.tensor import Tensor

# a kernel launched eagerly costs about this many select-adds (~30 us): the forms with more kernels pay for them
_LAUNCH = 1 << 18
FORCE_FORM: str | None = None  # tests: "one-hot", "pairs" or "sorted" at any size
_KEY_LIMIT = 2 ** 31 - 1  # the sorted form's key (row * tokens + token) fits int32 up to this


def _zero(t: Tensor) -> float | int:
  return 0.0 if dtypes.is_float(t.dtype) else 0


def last_token(pos: Tensor, p_n: int, order: Tensor | None = None) -> Tensor:
  """For each of p_n positions, the last t with pos[t] equal to it (the largest order[t] among them, with `order`, a
  permutation of the tokens), or -1: (p_n,), from pos (tokens,) (p_n x tokens compares)."""
  from tg.tensor import Tensor
  t_n = pos.shape[0]
  if t_n == 0:
    return Tensor.full((p_n,), -1, device=pos.device, dtype=pos.dtype)
  at = pos.reshape(1, t_n) == Tensor.arange(p_n, device=pos.device, dtype=pos.dtype).reshape(p_n, 1)
  order = Tensor.arange(t_n, device=pos.device, dtype=pos.dtype) if order is None else order
  return at.where(order.reshape(1, t_n), -1).max(1)


def rows_at(which: Tensor, rows: Tensor) -> Tensor:
  """rows[which[p]] for each p, 0 where which[p] is -1: (p_n, width), one load each (codegen/one_hot_select.py)."""
  from tg.tensor import Tensor
  t_n, r = rows.shape
  if t_n == 0:
    return Tensor.zeros(which.shape[0], r, device=rows.device, dtype=rows.dtype)
  hot = which.reshape(-1, 1, 1) == Tensor.arange(t_n, device=rows.device, dtype=which.dtype).reshape(1, t_n, 1)
  return hot.where(rows.reshape(1, t_n, r), _zero(rows)).sum(1)


def form_costs(t: int, r: int, p: int) -> dict[str, int]:
  """Napkin work of each form of row_sums, in operations: a select-add along the rows' width is 1 (a vector lane, its
  compare shared by the lanes), a compare-select-max of a position 3, a copy 1, and a kernel launched eagerly costs
  _LAUNCH. (Measured on a 2-core AVX2 Zen 3: 1000 x 16 from 4096 tokens, one-hot 20 ms, sorted 25; 50257 x 768 from
  128, pairs 22, sorted 25; from 2048, pairs 313, sorted 87; 65 x 128 from 2048, one-hot 6, sorted 13.)"""
  steps = max(t - 1, 1).bit_length()  # the sorted form's scan: ceil(log2 t) passes
  return {"one-hot": p * t * r + _LAUNCH,
          "pairs": t * t * r + 3 * p * t + p * r + 3 * _LAUNCH,
          "sorted": 4 * t * t + steps * t * r + 3 * p * t + 2 * p * r + (steps + 5) * _LAUNCH}


def row_sums(rows: Tensor, pos: Tensor, p_n: int) -> Tensor:
  """out[p] = the sum of rows[t] over the t with pos[t] == p, 0 where there is none: (p_n, width) from rows (tokens,
  width) and pos (tokens,) in [0, p_n) (an integer dtype that holds p_n and tokens). The cheapest of:
    one-hot  the sum over every token for each element of out              p_n x t x r
    pairs    each token's row with its duplicates' added (t x t x r), then out[p] = that row of p's last token
    sorted   tokens ordered by (pos, t) by counting (t x t compares), a segmented scan over the ordered rows
             (log2 t passes of t x r), then out[p] = the scan at p's last token"""
  from tg.tensor import Tensor
  t_n, r = rows.shape
  assert isinstance(t_n, int) and isinstance(r, int)
  if t_n == 0 or r == 0 or p_n == 0:
    return Tensor.zeros(p_n, r, device=rows.device, dtype=rows.dtype)
  costs = form_costs(t_n, r, p_n)
  form = FORCE_FORM or min(costs, key=costs.__getitem__)
  if form == "one-hot":
    hot = pos.reshape(1, t_n, 1) == Tensor.arange(p_n, device=rows.device, dtype=pos.dtype).reshape(p_n, 1, 1)
    return hot.where(rows.reshape(1, t_n, r), _zero(rows)).sum(1)
  if form == "pairs":
    same = pos.reshape(t_n, 1, 1) == pos.reshape(1, t_n, 1)
    return rows_at(last_token(pos, p_n), same.where(rows.reshape(1, t_n, r), _zero(rows)).sum(1))
  return _sorted_row_sums(rows, pos, p_n)


def _sorted_row_sums(rows: Tensor, pos: Tensor, p_n: int) -> Tensor:
  from tg.tensor import Tensor
  t_n = rows.shape[0]
  assert isinstance(t_n, int)
  # rank[t]: t's place in the order by (pos, t), counted from a key unique to each token; at_place[k]: the token at
  # place k (rank is a permutation)
  tok = Tensor.arange(t_n, device=rows.device, dtype=pos.dtype)
  if p_n * t_n <= _KEY_LIMIT or is_dtype_supported(dtypes.int64, rows.device):
    kt = dtypes.int64 if p_n * t_n > _KEY_LIMIT else pos.dtype
    key = (pos.cast(kt) * t_n + tok.cast(kt)).contiguous()  # (stored: not computed t_n times per token)
    before = key.reshape(1, t_n) < key.reshape(t_n, 1)
  else:  # a key past int32 on a device without int64: the order compared in two parts
    pi, pj = pos.reshape(t_n, 1), pos.reshape(1, t_n)
    before = (pj < pi) | ((pj == pi) & (tok.reshape(1, t_n) < tok.reshape(t_n, 1)))
  rank = before.sum(1).cast(pos.dtype)
  at_place = last_token(rank, t_n)
  spos = rows_at(at_place, pos.reshape(t_n, 1)).reshape(t_n).contiguous()
  run = rows_at(at_place, rows).contiguous()
  # an inclusive scan within runs of one position (Hillis-Steele): after the pass of shift d, run[k] is the sum of the
  # rows from max(k - 2d + 1, start of k's run) to k; a run is contiguous, so "k - d is in k's run" is spos equal there
  shift = 1
  while shift < t_n:
    prev_pos = spos.pad(((shift, 0),), value=-1).shrink(((0, t_n),))
    prev = run.pad(((shift, 0), None)).shrink(((0, t_n), None))
    run = (run + (prev_pos == spos).reshape(t_n, 1).where(prev, _zero(rows))).contiguous()
    shift *= 2
  # each position's sum is the scan at its last token's place: the largest rank among its tokens
  return rows_at(last_token(pos, p_n, rank), run)
