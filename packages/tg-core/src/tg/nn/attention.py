"""nn.MultiheadAttention with torch's parameter names, arguments, masks and returned weights, so a torch checkpoint
loads into it by name and a torch program calling it gets the same numbers."""
from __future__ import annotations

import math

from tg.dtype import dtypes
from tg.errors import ShapeError
from tg.nn import Linear
from tg.shape.symbolic import sint
from tg.tensor import Tensor


class MultiheadAttention:
  """softmax(q k^T / sqrt(head_dim) + masks) v over num_heads heads, with torch's layout and names:
  in_proj_weight (3E, E) and in_proj_bias (3E,) hold the q, k, v projections stacked, out_proj is a Linear(E, E).

  Inputs are (L, N, E) (or (N, L, E) with batch_first, or (L, E) unbatched). Masks follow torch: a bool
  key_padding_mask (N, S) or attn_mask (L, S) / (N * num_heads, L, S) is True where attention is NOT allowed; a float
  mask is added to the scores. Returns (output, weights): the attention weights (after dropout, as torch) averaged over
  heads, or per head with average_attn_weights=False, or None with need_weights=False. Dropout acts only in training.
  is_causal without an attn_mask applies the causal mask (torch raises and asks for the mask).

  Not supported (they raise): kdim/vdim different from embed_dim, add_bias_kv, add_zero_attn."""

  def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True, add_bias_kv: bool = False,
               add_zero_attn: bool = False, kdim: int | None = None, vdim: int | None = None, batch_first: bool = False) -> None:
    if embed_dim % num_heads:
      raise ValueError(f"embed_dim {embed_dim} must be divisible by num_heads {num_heads}")
    if add_bias_kv or add_zero_attn or kdim not in (None, embed_dim) or vdim not in (None, embed_dim):
      raise NotImplementedError("tg's MultiheadAttention has no add_bias_kv, add_zero_attn, or kdim/vdim other than embed_dim")
    self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
    self.dropout, self.batch_first = dropout, batch_first
    # torch's initialisation: xavier-uniform projections, zero biases
    self.in_proj_weight = Tensor.glorot_uniform(3 * embed_dim, embed_dim)
    self.in_proj_bias = Tensor.zeros(3 * embed_dim) if bias else None
    self.out_proj = Linear(embed_dim, embed_dim, bias=bias)
    if bias:
      self.out_proj.bias = Tensor.zeros(embed_dim)

  def _heads(self, x: Tensor, which: int, n: sint) -> Tensor:
    """Project (T, N, E) with the q (0), k (1) or v (2) slice of in_proj and split heads: (N, H, T, head_dim)."""
    e = self.embed_dim
    w = self.in_proj_weight[which * e:(which + 1) * e]
    b = None if self.in_proj_bias is None else self.in_proj_bias[which * e:(which + 1) * e]
    return x.linear(w.transpose(), b).reshape(x.shape[0], n, self.num_heads, self.head_dim).permute(1, 2, 0, 3)

  @staticmethod
  def _additive(mask: Tensor) -> Tensor:
    """The mask as a float to add to the scores: a bool mask becomes -inf where True (not allowed), 0 elsewhere."""
    if mask.dtype == dtypes.bool:
      return mask.where(-math.inf, 0.0)
    return mask.cast(dtypes.float32) if not dtypes.is_float(mask.dtype) else mask

  def __call__(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor | None = None, need_weights: bool = True,
               attn_mask: Tensor | None = None, average_attn_weights: bool = True, is_causal: bool = False) -> tuple[Tensor, Tensor | None]:
    unbatched = query.ndim == 2
    if unbatched:  # as a batch of one, in the sequence-first layout
      query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
      key_padding_mask = None if key_padding_mask is None else key_padding_mask.unsqueeze(0)
    elif self.batch_first:
      query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
    if query.ndim != 3 or query.shape[-1] != self.embed_dim or key.shape != value.shape or key.shape[1:] != query.shape[1:]:
      raise ShapeError(f"MultiheadAttention({self.embed_dim}, batch_first={self.batch_first}) got query {query.shape}, key {key.shape}, "
                       f"value {value.shape} (as sequence-first)")
    n_l, n, _ = query.shape
    n_s, h = key.shape[0], self.num_heads
    q, k, v = self._heads(query, 0, n), self._heads(key, 1, n), self._heads(value, 2, n)
    scores = (q * (1 / math.sqrt(self.head_dim))) @ k.transpose(-2, -1)  # (N, H, L, S)
    if attn_mask is None and is_causal:
      attn_mask = Tensor.ones(n_l, n_s, dtype=dtypes.bool, device=query.device).triu(1)
    if attn_mask is not None:
      if attn_mask.ndim == 3:
        attn_mask = attn_mask.reshape(n, h, n_l, n_s)
      elif attn_mask.shape != (n_l, n_s):
        raise ShapeError(f"attn_mask must be ({n_l}, {n_s}) or ({n * h}, {n_l}, {n_s}), got {attn_mask.shape}")
      scores = scores + self._additive(attn_mask)
    if key_padding_mask is not None:
      if key_padding_mask.shape != (n, n_s):
        raise ShapeError(f"key_padding_mask must be ({n}, {n_s}), got {key_padding_mask.shape}")
      scores = scores + self._additive(key_padding_mask).reshape(n, 1, 1, n_s)
    weights = scores.softmax(-1).dropout(self.dropout)
    out = (weights @ v).permute(2, 0, 1, 3).reshape(n_l, n, self.embed_dim)
    out = self.out_proj(out)
    if unbatched:
      out = out.squeeze(1)
    elif self.batch_first:
      out = out.transpose(0, 1)
    if not need_weights:
      return out, None
    w = weights.mean(1) if average_attn_weights else weights
    return out, (w.squeeze(0) if unbatched else w)
