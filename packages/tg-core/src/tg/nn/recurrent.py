"""nn.LSTMCell and nn.LSTM with torch's parameter names (weight_ih, weight_hh_l1, bias_ih_l0_reverse, ...), gate order
(input, forget, cell, output), initialisation, shapes and arguments, so torch checkpoints load by name."""
from __future__ import annotations

import math

from tg.errors import ShapeError
from tg.tensor import Tensor


def _uniform(bound: float, *shape: int) -> Tensor:
  return Tensor.uniform(*shape, low=-bound, high=bound)


def _gates_to_state(gates: Tensor, c: Tensor) -> tuple[Tensor, Tensor]:
  """From the 4 stacked gate pre-activations (N, 4H) and the cell state, the next (h, c).

  All four activations come from one sigmoid (tanh(g) = 2 sigmoid(2g) - 1, which is how Tensor.tanh computes it).
  c and h are contiguous, and so are their gradients (contiguous_backward): without these boundaries the lazy graph
  fuses the elementwise chain of every earlier step into each step's kernel, forward and backward, so kernels grow
  with the step number (quadratic work, and a new kernel to compile per step). With them, the backward pass compiles
  the same ~20 kernels for any sequence length (the forward compiles one more per step: each reads its own offset)."""
  i, f, g, o = gates.chunk(4, dim=-1)
  i, f, g, o = i.cat(f, g * 2, o, dim=-1).sigmoid().contiguous().chunk(4, dim=-1)
  c = (f * c + i * (2 * g - 1)).contiguous().contiguous_backward()
  return (o * c.tanh()).contiguous().contiguous_backward(), c


class LSTMCell:
  """One LSTM step: (x (N, input_size), (h, c) (N, hidden_size)) -> (h', c'). hx=None starts from zeros; a 1-d x is a
  batch of one, and the result is 1-d too (as torch)."""

  def __init__(self, input_size: int, hidden_size: int, bias: bool = True) -> None:
    self.input_size, self.hidden_size = input_size, hidden_size
    bound = 1 / math.sqrt(hidden_size)
    self.weight_ih = _uniform(bound, 4 * hidden_size, input_size)
    self.weight_hh = _uniform(bound, 4 * hidden_size, hidden_size)
    self.bias_ih = _uniform(bound, 4 * hidden_size) if bias else None
    self.bias_hh = _uniform(bound, 4 * hidden_size) if bias else None

  def __call__(self, x: Tensor, hx: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
    unbatched = x.ndim == 1
    if unbatched:
      x = x.unsqueeze(0)
      hx = None if hx is None else (hx[0].unsqueeze(0), hx[1].unsqueeze(0))
    if x.ndim != 2 or x.shape[1] != self.input_size:
      raise ShapeError(f"LSTMCell({self.input_size}, {self.hidden_size}) got an input of shape {x.shape}")
    if hx is None:
      zeros = Tensor.zeros(x.shape[0], self.hidden_size, device=x.device, dtype=x.dtype)
      hx = (zeros, zeros)
    gates = x.linear(self.weight_ih.transpose(), self.bias_ih) + hx[0].linear(self.weight_hh.transpose(), self.bias_hh)
    h, c = _gates_to_state(gates, hx[1])
    return (h.squeeze(0), c.squeeze(0)) if unbatched else (h, c)


class LSTM:
  """A stack of num_layers LSTMs over a sequence, as torch.nn.LSTM: input (T, N, input_size), or (N, T, input_size) with
  batch_first, or (T, input_size) unbatched; hx = (h0, c0), each (num_layers * directions, N, hidden_size), or None for
  zeros. Returns (output (T, N, directions * hidden_size), (h_n, c_n)). Dropout (training only) acts between layers.

  Parameters are named as torch's: weight_ih_l{k}, weight_hh_l{k}, bias_ih_l{k}, bias_hh_l{k}, with a _reverse suffix
  for the backward direction of a bidirectional LSTM. proj_size is not supported."""

  def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True, batch_first: bool = False,
               dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0) -> None:
    if proj_size:
      raise NotImplementedError("tg's LSTM has no proj_size")
    if num_layers < 1:
      raise ValueError(f"num_layers must be at least 1, got {num_layers}")
    self.input_size, self.hidden_size, self.num_layers, self.bias = input_size, hidden_size, num_layers, bias
    self.batch_first, self.dropout, self.bidirectional = batch_first, dropout, bidirectional
    bound = 1 / math.sqrt(hidden_size)
    for layer in range(num_layers):
      n_in = input_size if layer == 0 else hidden_size * self._directions
      for suffix in self._suffixes(layer):
        setattr(self, f"weight_ih{suffix}", _uniform(bound, 4 * hidden_size, n_in))
        setattr(self, f"weight_hh{suffix}", _uniform(bound, 4 * hidden_size, hidden_size))
        if bias:
          setattr(self, f"bias_ih{suffix}", _uniform(bound, 4 * hidden_size))
          setattr(self, f"bias_hh{suffix}", _uniform(bound, 4 * hidden_size))

  @property
  def _directions(self) -> int:
    return 2 if self.bidirectional else 1

  def _suffixes(self, layer: int) -> list[str]:
    return [f"_l{layer}", f"_l{layer}_reverse"][:self._directions]

  def _run(self, xs: Tensor, suffix: str, h: Tensor, c: Tensor, reverse: bool) -> tuple[list[Tensor], Tensor, Tensor]:
    """One direction of one layer over the sequence xs (T, N, n_in): the h of every step (in time order) and the last (h, c)."""
    b_ih, b_hh = (getattr(self, f"bias_ih{suffix}"), getattr(self, f"bias_hh{suffix}")) if self.bias else (None, None)
    # the input projection of every step at once; only the recurrent part has to go step by step
    x_proj = xs.linear(getattr(self, f"weight_ih{suffix}").transpose(), b_ih)
    w_hh = getattr(self, f"weight_hh{suffix}").transpose()
    n_steps = xs.shape[0]
    if not isinstance(n_steps, int):
      raise ShapeError(f"LSTM needs a concrete sequence length, got {n_steps}")
    steps = range(n_steps - 1, -1, -1) if reverse else range(n_steps)
    outs: list[Tensor] = []
    for t in steps:
      h, c = _gates_to_state(x_proj[t] + h.linear(w_hh, b_hh), c)
      outs.append(h)
    return (outs[::-1] if reverse else outs), h, c

  def __call__(self, x: Tensor, hx: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, tuple[Tensor, Tensor]]:
    unbatched = x.ndim == 2
    if unbatched:
      x = x.unsqueeze(1)
      hx = None if hx is None else (hx[0].unsqueeze(1), hx[1].unsqueeze(1))
    elif self.batch_first:
      x = x.transpose(0, 1)
    if x.ndim != 3 or x.shape[2] != self.input_size:
      raise ShapeError(f"LSTM({self.input_size}, {self.hidden_size}, batch_first={self.batch_first}) got an input of shape {x.shape}")
    n_states = self.num_layers * self._directions
    if hx is None:
      zeros = Tensor.zeros(n_states, x.shape[1], self.hidden_size, device=x.device, dtype=x.dtype)
      hx = (zeros, zeros)
    if hx[0].shape != (n_states, x.shape[1], self.hidden_size) or hx[1].shape != hx[0].shape:
      raise ShapeError(f"LSTM states must be ({n_states}, {x.shape[1]}, {self.hidden_size}), got {hx[0].shape} and {hx[1].shape}")
    hs, cs = [], []
    for layer in range(self.num_layers):
      if layer and self.dropout:
        x = x.dropout(self.dropout)
      per_dir = []
      for d, suffix in enumerate(self._suffixes(layer)):
        i = layer * self._directions + d
        outs, h, c = self._run(x, suffix, hx[0][i], hx[1][i], reverse=d == 1)
        per_dir.append(outs)
        hs.append(h)
        cs.append(c)
      steps = [o[0].cat(*o[1:], dim=-1) for o in zip(*per_dir)]  # both directions' h side by side, step by step
      x = Tensor.stack(*steps, dim=0)
    h_n, c_n = Tensor.stack(*hs, dim=0), Tensor.stack(*cs, dim=0)
    if unbatched:
      return x.squeeze(1), (h_n.squeeze(1), c_n.squeeze(1))
    return (x.transpose(0, 1) if self.batch_first else x), (h_n, c_n)
