"""Neural-network functions on Tensor: activations, softmax, normalization, pooling and convolution,
attention, dropout and losses. Each is a composition of Tensor ops, so its gradient comes for free."""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tg.dtype import dtypes
from tg.errors import DTypeError, ShapeError, TgArgumentError
from tg.helpers import make_pair, prod
from tg.tensor_index import _check_targets, _one_hot_error, _range_guard

if TYPE_CHECKING:
  from tg.tensor import Tensor


class NNMixin:
  # ---------- activations ----------
  # where a function has a kink, the gradient there is torch's choice (written as where(...), not as relu sums)
  def relu6(self: Tensor) -> Tensor: return self.hardtanh(0, 6)  # type: ignore[misc]
  def leakyrelu(self: Tensor, neg_slope: float = 0.01) -> Tensor: return (self > 0).where(self, self * neg_slope)  # type: ignore[misc]
  # (the activations below that compose several float ops compute half floats in float32, as torch: see _float_math)
  def elu(self: Tensor, alpha: float = 1.0) -> Tensor:  # type: ignore[misc]
    # the exp branch sees 0 where x > 0: exp(100) is inf, and the where's zero gradient times it was NaN
    return self._float_math(lambda x: (x > 0).where(x, (x > 0).where(0.0, x).expm1() * alpha))
  def quick_gelu(self: Tensor) -> Tensor: return self._float_math(lambda x: x * (x * 1.702).sigmoid())  # type: ignore[misc]
  def silu(self: Tensor) -> Tensor: return self._float_math(lambda x: x * x.sigmoid())  # type: ignore[misc]
  def swish(self: Tensor) -> Tensor: return self.silu()  # type: ignore[misc]
  def mish(self: Tensor) -> Tensor: return self._float_math(lambda x: x * x.softplus().tanh())  # type: ignore[misc]
  def hardswish(self: Tensor) -> Tensor: return (self <= -3).where(0.0, (self >= 3).where(self, self * (self + 3) * (1 / 6)))  # type: ignore[misc]

  def hardtanh(self: Tensor, min_val: float = -1, max_val: float = 1) -> Tensor:  # type: ignore[misc]
    """Like clip, but the gradient at the bounds is 0 (torch's hardtanh; clip/clamp pass it)."""
    return (self <= min_val).where(min_val, (self >= max_val).where(max_val, self))
  def softsign(self: Tensor) -> Tensor: return self / (1 + self.abs())  # type: ignore[misc]

  def selu(self: Tensor) -> Tensor:  # type: ignore[misc]
    """scale * elu(x, alpha) with the constants of Klambauer et al. (torch's selu)."""
    return 1.0507009873554804934193349852946 * self.elu(1.6732632423543772848170429916717)

  def celu(self: Tensor, alpha: float = 1.0) -> Tensor:  # type: ignore[misc]
    # elu with x / alpha in the exp, which sees 0 where x > 0 (as elu: an inf there made the gradient NaN)
    return self._float_math(lambda x: (x > 0).where(x, alpha * ((x > 0).where(0.0, x) / alpha).expm1()))

  def gelu(self: Tensor) -> Tensor:  # type: ignore[misc]
    """The tanh approximation (torch's gelu(approximate="tanh")), as tinygrad: 0.5 x (1 + tanh(z)), computed as the
    equal x sigmoid(2z), whose small values far left keep their relative precision (1 + tanh(z) cancels there)."""
    return self._float_math(lambda x: x * ((2 * math.sqrt(2 / math.pi)) * (x + 0.044715 * x * x * x)).sigmoid())

  def hardsigmoid(self: Tensor, alpha: float = 1 / 6, beta: float = 0.5) -> Tensor:  # type: ignore[misc]
    return (self <= -beta / alpha).where(0.0, (self >= (1 - beta) / alpha).where(1.0, alpha * self + beta))

  def softplus(self: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:  # type: ignore[misc]
    """log(1 + exp(beta*x)) / beta; linear above `threshold` (as torch), where exp would overflow."""
    def value(x: Tensor) -> Tensor:  # log1p: exp(bx) far left is below 1's ulp (float16 softplus(-10) was 0)
      bx = x * beta
      return (bx > threshold).where(x, bx.minimum(threshold).exp().log1p() * (1 / beta))
    return self._float_math(value)

  # ---------- softmax family ----------
  # half floats are computed in float32 and cast back (as torch): a sum of exps or squares passes 65504 easily
  def _shift_max(self: Tensor, axis: int | Sequence[int] | None) -> Tensor:  # type: ignore[misc]
    """The max over `axis` (kept), detached, that the softmax family subtracts for stability; 0 over an empty axis,
    which has no max: softmax of it is empty and logsumexp log(0) = -inf, as torch."""
    from tg.tensor import Tensor
    axes = self._reduce_axes(axis)
    if self.numel() == 0 and any(self.shape[a] == 0 for a in axes):
      return Tensor.zeros(tuple(1 if i in axes else s for i, s in enumerate(self.shape)), dtype=self.dtype, device=self.device)
    return self.max(axis, keepdim=True).detach()

  def softmax(self: Tensor, axis: int = -1) -> Tensor:  # type: ignore[misc]
    x = self._upcast_half()
    m = x - x._shift_max(axis)
    e = m.exp()
    return (e / e.sum(axis, keepdim=True)).cast(self._out_float())

  def log_softmax(self: Tensor, axis: int = -1) -> Tensor:  # type: ignore[misc]
    x = self._upcast_half()
    m = x - x._shift_max(axis)
    return (m - m.exp().sum(axis, keepdim=True).log()).cast(self._out_float())

  def logsumexp(self: Tensor, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:  # type: ignore[misc]
    x = self._upcast_half()
    m = x._shift_max(axis)
    m = (m.abs() == math.inf).where(0.0, m)  # all -inf (or inf) rows: don't subtract inf from inf
    out = ((x - m).exp().sum(axis, keepdim=True).log() + m).cast(self._out_float())
    return out if keepdim else out.squeeze_axes(self._reduce_axes(axis))

  # ---------- normalization ----------
  def layernorm(self: Tensor, axis: int | Sequence[int] = -1, eps: float = 1e-5) -> Tensor:  # type: ignore[misc]
    x = self._upcast_half()
    y = x - x.mean(axis, keepdim=True)
    return (y * (y * y).mean(axis, keepdim=True).add(eps).rsqrt()).cast(self._out_float())

  def batchnorm(self: Tensor, weight: Tensor | None, bias: Tensor | None, mean: Tensor, invstd: Tensor,  # type: ignore[misc]
                axis: int | Sequence[int] = 1) -> Tensor:
    """(x - mean) * invstd * weight + bias, the statistics living along `axis`."""
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    axes = tuple(self._resolve_axis(a) for a in axes)
    shape = tuple(s if i in axes else 1 for i, s in enumerate(self.shape))
    x = self - mean.reshape(shape)
    if weight is not None:
      x = x * weight.reshape(shape)
    ret = x * (invstd.reshape(shape) if invstd.ndim == len(axes) else invstd)
    return (ret + bias.reshape(shape)) if bias is not None else ret

  def dropout(self: Tensor, p: float = 0.5) -> Tensor:  # type: ignore[misc]
    """Zero each element with probability p while training, scaling the rest by 1/(1-p)."""
    from tg.tensor import Tensor
    if not 0 <= p <= 1:
      raise ValueError(f"dropout probability must be in [0, 1], got {p}")
    if not Tensor.training or p == 0:
      return self
    if p == 1:
      return self * 0
    keep = Tensor.rand(*self.shape, device=self.device) >= p
    return keep.where(self, 0.0) * (1 / (1 - p))

  # ---------- windows: pooling and convolution ----------
  def _pool(self: Tensor, k_: tuple[int, ...], stride: int | tuple[int, ...] = 1,  # type: ignore[misc]
            dilation: int | tuple[int, ...] = 1) -> Tensor:
    """Sliding windows over the last len(k_) axes: (*rest, *in) -> (*rest, *out, *k_), with movement ops only.

    Along one axis of length i, the tensor repeated end to end and read in rows of i+d puts element
    j*d + t at (row j, column t): row j is the window offset by j*d. Taking every s-th column
    gives the strided window starts."""
    n = len(k_)
    s_, d_ = make_pair(stride, n), make_pair(dilation, n)
    pre = self.shape[:-n]
    i_ = [i for i in self.shape[-n:] if isinstance(i, int)]
    if len(i_) != n:
      raise NotImplementedError("pooling over symbolic axes")
    o_ = [(i - d * (k - 1) - 1) // s + 1 for i, k, s, d in zip(i_, k_, s_, d_)]
    if any(o <= 0 for o in o_):
      raise ValueError(f"kernel {k_} with dilation {d_} is larger than the input {tuple(i_)}")
    x = self.repeat([1] * len(pre) + [-(-k * (i + d) // i) for i, k, d in zip(i_, k_, d_)])
    for j, (i, k, d) in enumerate(zip(i_, k_, d_)):
      x = x._resize_axis(len(pre) + j, k * (i + d))
    x = x.reshape(pre + tuple(v for i, k, d in zip(i_, k_, d_) for v in (k, i + d)))
    for j, (o, s) in enumerate(zip(o_, s_)):
      x = x._resize_axis(len(pre) + 2 * j + 1, o * s)
    x = x.reshape(pre + tuple(v for k, o, s in zip(k_, o_, s_) for v in (k, o, s)))
    x = x.shrink(tuple([None] * len(pre) + [r for _ in k_ for r in (None, None, (0, 1))]))
    x = x.reshape(pre + tuple(v for k, o in zip(k_, o_) for v in (k, o)))
    return x.permute(tuple(range(len(pre))) + tuple(len(pre) + 2 * j + 1 for j in range(n)) + tuple(len(pre) + 2 * j for j in range(n)))

  @staticmethod
  def _conv_padding(padding: int | Sequence[int], n: int) -> list[int]:
    """torch's padding (one int, or one per axis) as pad2d's (left, right, top, bottom, ...)."""
    if isinstance(padding, str):  # (4 characters read as 4 ints)
      raise TypeError(f"padding {padding!r}: a padding string is for convolutions only; give ints (torch: a TypeError too)")
    if isinstance(padding, int):
      return [padding] * (2 * n)
    if len(padding) == n:
      return [p for p in reversed(padding) for _ in range(2)]
    if len(padding) == 2 * n:
      return list(padding)
    raise ValueError(f"padding {padding} must be an int, {n} ints, or {2 * n} ints")

  @staticmethod
  def _padding_string(padding: str, kernel: Sequence[int], stride: int | tuple[int, ...], dilation: int | tuple[int, ...]) -> list[int]:
    """torch's padding strings as pad2d's padding: 'valid' is none, 'same' keeps each spatial size (stride 1 only, as
    torch) with d*(k-1) per axis, half before, and the odd one after."""
    n = len(kernel)
    if padding == "valid":
      return [0] * (2 * n)
    if padding != "same":
      raise TgArgumentError(f"invalid padding string {padding!r}: 'valid' or 'same'")
    if any(s != 1 for s in make_pair(stride, n)):
      raise TgArgumentError(f"padding='same' is not supported for strided convolutions (stride {stride}), as torch")
    totals = [d * (k - 1) for k, d in zip(kernel, make_pair(dilation, n))]
    return [v for t in reversed(totals) for v in (t // 2, t - t // 2)]

  @staticmethod
  def _pool_padding(name: str, padding: int | Sequence[int], k: tuple[int, ...]) -> list[int]:
    """A pool's padding as pad2d's, each side at most half its axis's kernel size, as torch demands (more would put a
    window wholly in the padding: -inf from max_pool2d)."""
    pads = NNMixin._conv_padding(padding, len(k))
    for j, kk in enumerate(reversed(k)):
      if max(pads[2 * j], pads[2 * j + 1]) > kk // 2:
        raise TgArgumentError(f"{name}: padding {padding} must be at most half of the kernel size {k} on each side, as torch "
                              "('pad should be at most half of effective kernel size')")
    return pads

  @staticmethod
  def _ceil_extra(sizes: Sequence[int], k: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...],
                  pads: list[int]) -> list[int]:
    """ceil_mode's padding past the right (bottom) padding, pad2d-ordered: enough for one more window where the input
    (with its padding) leaves a part of one, as torch, whose last window must start inside the input or its left padding."""
    extra = []
    for j, (n, kk, s, d) in enumerate(zip(sizes, k, stride, dilation)):
      before, after = pads[2 * (len(k) - 1 - j)], pads[2 * (len(k) - 1 - j) + 1]
      span = before + n + after - d * (kk - 1) - 1
      if span < 0:  # the kernel is larger than the input: _pool says so
        extra.append(0)
        continue
      out = -(-span // s) + 1
      if (out - 1) * s >= n + before:
        out -= 1
      extra.append(max(0, (out - 1) * s + d * (kk - 1) + 1 - (before + n + after)))
    return [v for e in reversed(extra) for v in (0, e)]

  def _pool_windows(self: Tensor, name: str, kernel_size: int | tuple[int, ...], stride: int | tuple[int, ...] | None,  # type: ignore[misc]
                    dilation: int | tuple[int, ...], padding: int | Sequence[int], ceil_mode: bool,
                    fill: float) -> tuple[Tensor, tuple[int, ...], list[int], list[int]]:
    """The pooling windows (*rest, *out, *k) of self padded by `fill`, with the kernel, the padding (pad2d's order)
    and ceil_mode's extra padding past it."""
    from tg.tensor import _concrete
    k = make_pair(kernel_size)
    s_, d_ = make_pair(stride if stride is not None else k, len(k)), make_pair(dilation, len(k))
    pads = NNMixin._pool_padding(name, padding, k)
    extra = NNMixin._ceil_extra([_concrete(n) for n in self.shape[-len(k):]], k, s_, d_, pads) if ceil_mode else [0] * len(pads)
    x = self.pad2d([p + e for p, e in zip(pads, extra)], value=fill)
    return x._pool(k, s_, d_), k, pads, extra

  def avg_pool2d(self: Tensor, kernel_size: int | tuple[int, ...] = (2, 2), stride: int | tuple[int, ...] | None = None,  # type: ignore[misc]
                 dilation: int = 1, padding: int | Sequence[int] = 0, ceil_mode: bool = False, count_include_pad: bool = True,
                 divisor_override: int | None = None) -> Tensor:
    """The mean of each window, as torch's avg_pool2d: ceil_mode adds a last window where the input leaves a part of one;
    a window's divisor counts what it covers of the input and padding (count_include_pad, the default) or of the input
    alone, and never ceil_mode's part past the padding. divisor_override divides every window's sum by it instead."""
    if divisor_override is not None and divisor_override == 0:
      raise TgArgumentError("avg_pool2d: divisor must be not zero (divisor_override, as torch)")
    windows, k, pads, extra = self._upcast_half()._pool_windows("avg_pool2d", kernel_size, stride, dilation, padding, ceil_mode, 0.0)
    axes = tuple(range(-len(k), 0))
    if divisor_override is not None:
      return (windows.sum(axes) / divisor_override).cast(self._out_float())
    if count_include_pad and not any(extra):
      return windows.mean(axes).cast(self._out_float())  # every window covers the kernel's size of input and padding
    # what each window covers, counted by pooling a mask of ones the same way: the input's (and its padding's)
    from tg.tensor import Tensor
    ones = Tensor.ones(*self.shape[-len(k):], device=self.device)
    covered = ones.pad2d(pads, value=1.0).pad2d(extra) if count_include_pad else ones.pad2d([p + e for p, e in zip(pads, extra)])
    count = covered._pool(k, stride if stride is not None else k, dilation).sum(axes)
    return (windows.sum(axes) / count).cast(self._out_float())

  def max_pool2d(self: Tensor, kernel_size: int | tuple[int, ...] = (2, 2), stride: int | tuple[int, ...] | None = None,  # type: ignore[misc]
                 dilation: int = 1, padding: int | Sequence[int] = 0, ceil_mode: bool = False) -> Tensor:
    """The max of each window, as torch's max_pool2d (ceil_mode as avg_pool2d's). The gradient of a window goes to one
    element, as torch's: its first maximum in row-major order (its last NaN, where it has NaNs)."""
    # padded with the dtype's least value, which no window picks over its own: -inf for floats, and an integer tensor
    # stays integer, as torch's (a -inf padding promoted it to float)
    windows, k, pads, extra = self._pool_windows("max_pool2d", kernel_size, stride, dilation, padding, ceil_mode, dtypes.min(self.dtype))
    valid = None
    if any(pads) or any(extra):  # the padding is never a window's maximum, even where the input equals it
      from tg.tensor import Tensor
      inside = Tensor.ones(*self.shape[-len(k):], dtype=dtypes.bool, device=self.device)
      valid = inside.pad2d([p + e for p, e in zip(pads, extra)])._pool(k, stride if stride is not None else k, dilation)
    return windows._window_max(len(k), valid)

  def _window_max(self: Tensor, n: int, valid: Tensor | None = None) -> Tensor:  # type: ignore[misc]
    """The max over the last n axes (a pooling's windows), its gradient sent to one element of each window: the first
    maximum in row-major order, or the last NaN where there are NaNs (torch's max_pool2d takes each NaN it meets).
    `valid` (broadcast to self) marks the elements that may take it: not the padding."""
    from tg.tensor_math import _with_vjp
    value = self.detach().max(tuple(range(-n, 0)))
    return _with_vjp(value, [self], lambda grad: [self._first_max(value, valid).where(grad.reshape(grad.shape + (1,) * n), 0.0)])

  def _first_max(self: Tensor, value: Tensor, valid: Tensor | None) -> Tensor:  # type: ignore[misc]
    """A bool mask of self's shape: the one element of each window (the axes after value's) that takes the gradient of
    its max, `value`."""
    from tg.tensor import Tensor, _concrete
    lead, n = value.shape, self.ndim - value.ndim
    size = prod(_concrete(s) for s in self.shape[-n:])
    flat, top = self.detach().reshape(*lead, size), value.reshape(*lead, 1)
    pos = Tensor.arange(size, device=self.device, dtype=dtypes.int32)
    pick, rank = flat == top, size - pos  # the first maximum ranks highest
    if dtypes.is_float(self.dtype):
      has_nan = top != top  # (a NaN is the max)
      pick, rank = has_nan.where(flat.isnan(), pick), has_nan.where(pos + 1, rank)  # the last NaN ranks highest
    if valid is not None:
      pick = pick & valid.reshape(*valid.shape[:-n], size)
    score = pick.where(rank, 0)  # each window has a candidate with a rank of at least 1, and no two ranks are equal
    return (score == score.max(-1, keepdim=True)).reshape(self.shape)

  # ---------- adaptive pooling ----------
  def _adaptive_size(self: Tensor, name: str, output_size: int | Sequence[int | None] | None) -> tuple[int, int]:  # type: ignore[misc]
    """torch's checks of an adaptive pool's arguments, and its output size: an int, or two of which None keeps an axis."""
    from tg.tensor import _concrete
    if self.ndim not in (3, 4):
      raise TgArgumentError(f"{name}(): Expected 3D or 4D tensor, but got {list(self.shape)} (as torch)")
    for a in range(self.ndim - 3, self.ndim):
      if _concrete(self.shape[a]) == 0:
        raise TgArgumentError(f"{name}(): Expected input to have non-zero size for non-batch dimensions, but input has sizes "
                              f"{list(self.shape)} with dimension {a} being empty (as torch)")
    sizes = [output_size] * 2 if output_size is None or isinstance(output_size, int) else list(output_size)
    if len(sizes) != 2:
      raise TgArgumentError(f"{name}: output_size must be 2 (an int or a pair), got {output_size!r} (as torch)")
    out = tuple(_concrete(self.shape[-2 + i]) if o is None else o for i, o in enumerate(sizes))
    if any(not isinstance(o, int) or o < 0 for o in out):
      raise TgArgumentError(f"{name}: elements of output_size must be greater than or equal to 0 but received {output_size!r} (as torch)")
    return out[0], out[1]

  def _adaptive_empty(self: Tensor, out: tuple[int, int]) -> Tensor:  # type: ignore[misc]
    """The (empty) result of an adaptive pool to a size with a 0: no element of self, still on its graph."""
    nothing = self.shrink(tuple([None] * (self.ndim - 2) + [(0, 0), (0, 0)]))
    return nothing.pad(tuple([None] * (self.ndim - 2) + [(0, out[0]), (0, out[1])]))

  def adaptive_avg_pool2d(self: Tensor, output_size: int | Sequence[int | None] | None) -> Tensor:  # type: ignore[misc]
    """torch's adaptive_avg_pool2d: output element i of an axis of n averages the inputs [floor(i*n/o), ceil((i+1)*n/o))
    (bins of uneven size where o doesn't divide n, overlapping where it's larger)."""
    out = self._adaptive_size("adaptive_avg_pool2d", output_size)
    x = self._upcast_half()
    if 0 in out:
      return x._adaptive_empty(out).cast(self._out_float())
    for axis, o in zip((-2, -1), out):  # a bin's mean is separable: the mean over one axis of the means over the other
      x = x.transpose(axis, -1)._adaptive_mean_last(o).transpose(axis, -1)
    return x.cast(self._out_float())

  def _adaptive_mean_last(self: Tensor, o: int) -> Tensor:  # type: ignore[misc]
    from tg.tensor import _concrete
    n = _concrete(self.shape[-1])
    if n % o == 0:  # equal bins side by side
      return self.reshape(*self.shape[:-1], o, n // o).mean(-1)
    start, stop = _bins(n, o, self.device)
    pos = _positions(n, self.device)
    inside = (pos >= start) & (pos < stop)  # (o, n)
    # picked with where, not multiplied by a 0/1 mask: an inf in another bin times 0 would be NaN
    return inside.where(self.unsqueeze(-2), 0.0).sum(-1) / (stop - start).reshape(o).cast(self.dtype)

  def adaptive_max_pool2d(self: Tensor, output_size: int | Sequence[int | None] | None) -> Tensor:  # type: ignore[misc]
    """torch's adaptive_max_pool2d, with its bins (adaptive_avg_pool2d's) and its gradient (max_pool2d's: one element of
    each bin, the first maximum in row-major order)."""
    out = self._adaptive_size("adaptive_max_pool2d", output_size)
    if 0 in out:
      return self._adaptive_empty(out)
    from tg.tensor import _concrete
    (h, w), fill = (_concrete(s) for s in self.shape[-2:]), dtypes.min(self.dtype)
    if h % out[0] == 0 and w % out[1] == 0:  # equal bins side by side: a pool
      return self.max_pool2d((h // out[0], w // out[1]))
    lead = tuple(range(self.ndim - 2))
    rows, row_ok = self.transpose(-2, -1)._bin_windows(out[0], fill)  # (..., w, oh, kh)
    windows, col_ok = rows.permute(*lead, len(lead) + 1, len(lead) + 2, len(lead))._bin_windows(out[1], fill)  # (..., oh, kh, ow, kw)
    windows = windows.permute(*lead, len(lead), len(lead) + 2, len(lead) + 1, len(lead) + 3)  # (..., oh, ow, kh, kw)
    valid = row_ok.reshape(out[0], 1, row_ok.shape[1], 1) & col_ok.reshape(1, out[1], 1, col_ok.shape[1])
    return windows._window_max(2, valid)

  def _bin_windows(self: Tensor, o: int, fill: float) -> tuple[Tensor, Tensor]:  # type: ignore[misc]
    """The o adaptive bins of the last axis as windows (..., o, k), k the longest bin's length, each bin's elements
    first and `fill` after them; and a mask (o, k) of the bins' own elements."""
    from tg.tensor import Tensor, _concrete
    n = _concrete(self.shape[-1])
    if n % o == 0:  # equal bins side by side
      return self.reshape(*self.shape[:-1], o, n // o), Tensor.ones(o, n // o, dtype=dtypes.bool, device=self.device)
    k = max(-(-(i + 1) * n // o) - i * n // o for i in range(o))
    start, stop = _bins(n, o, self.device)
    at = start + Tensor.arange(k, device=self.device, dtype=dtypes.int32).reshape(1, k)  # (o, k): the element at window place t
    own = at < stop
    picks = own.unsqueeze(-1) & (at.unsqueeze(-1) == _positions(n, self.device).reshape(1, 1, n))  # (o, k, n)
    # the windows by a max over a one-hot row (exact, -0.0 included); their gradient by hand: each window place's
    # gradient back to the element it holds, summed over the places that hold it
    value = picks.where(self.detach().reshape(*self.shape[:-1], 1, 1, n), fill).max(-1)
    def scatter(grad: Tensor) -> list[Tensor | None]:
      return [picks.where(grad.unsqueeze(-1), 0.0).sum((-3, -2))]
    from tg.tensor_math import _with_vjp
    return _with_vjp(value, [self], scatter), own

  def conv2d(self: Tensor, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride: int | tuple[int, ...] = 1,  # type: ignore[misc]
             dilation: int | tuple[int, ...] = 1, padding: int | Sequence[int] | str = 0) -> Tensor:
    """N-d convolution (torch's conv2d, which is a cross-correlation), as windows times weights, summed. `padding` as
    torch's: an int, one per spatial axis, pad2d's 2 per axis, or 'valid' or 'same'."""
    from tg.tensor import _concrete
    (bs, cin_), (cout, cin), hw = self.shape[:2], weight.shape[:2], weight.shape[2:]
    if groups * cin != cin_ or len(self.shape) != len(weight.shape):
      raise ValueError(f"conv2d: input {self.shape} doesn't match weight {weight.shape} with groups={groups}")
    hw_ = tuple(_concrete(s) for s in hw)
    if _concrete(cout) % groups:
      raise ValueError(f"conv2d: {cout} output channels can't be split into {groups} groups")
    pads = NNMixin._padding_string(padding, hw_, stride, dilation) if isinstance(padding, str) else NNMixin._conv_padding(padding, len(hw_))
    x = self.pad2d(pads)._pool(hw_, stride, dilation)  # (bs, cin_, *out, *hw)
    rcout, oyx = _concrete(cout) // groups, x.shape[2:-len(hw_)]
    x = x.reshape((bs, groups, cin, 1, *oyx, *hw_)).expand((bs, groups, cin, rcout, *oyx, *hw_))
    x = x.permute((0, 1, 3, *[4 + i for i in range(len(oyx))], 2, *[4 + len(oyx) + i for i in range(len(hw_))]))  # (bs, g, rcout, *out, cin, *hw)
    w = weight.reshape((1, groups, rcout, *[1] * len(oyx), cin, *hw_))
    ret = (x * w).sum(tuple(-1 - i for i in range(1 + len(hw_))), keepdim=True).reshape((bs, cout, *oyx))
    return ret if bias is None else ret.add(bias.reshape((1, -1, *[1] * len(hw_))))

  def conv_transpose2d(self: Tensor, weight: Tensor, bias: Tensor | None = None, groups: int = 1,  # type: ignore[misc]
                       stride: int | tuple[int, ...] = 1, dilation: int | tuple[int, ...] = 1, padding: int | tuple[int, ...] = 0,
                       output_padding: int | tuple[int, ...] = 0) -> Tensor:
    """The gradient of conv2d w.r.t. its input (torch's conv_transpose2d): spread the input apart by
    the stride, then convolve with the spatially flipped, in/out-swapped weight."""
    from tg.tensor import _concrete
    hw = tuple(_concrete(s) for s in weight.shape[2:])
    n = len(hw)
    s_, d_, p_, op_ = make_pair(stride, n), make_pair(dilation, n), make_pair(padding, n), make_pair(output_padding, n)
    if any(op >= s and op >= d for s, d, op in zip(s_, d_, op_)):
      raise TgArgumentError(f"conv_transpose2d: output padding must be smaller than either stride or dilation, but got output_padding "
                            f"{op_}, stride {s_} and dilation {d_} (as torch)")
    cin, rcout = _concrete(weight.shape[0]), _concrete(weight.shape[1])
    if cin % groups or _concrete(self.shape[1]) != cin:
      raise ValueError(f"conv_transpose2d: input {self.shape} doesn't match weight {weight.shape} with groups={groups}")
    w = weight.reshape((groups, cin // groups, rcout, *hw)).transpose(1, 2).reshape((groups * rcout, cin // groups, *hw))
    w = w.flip(tuple(range(2, 2 + n)))
    x = self
    for j, s in enumerate(s_):  # insert s-1 zeros between neighbours along each spatial axis
      if s > 1:
        ax = 2 + j
        size = _concrete(x.shape[ax])
        x = x.unsqueeze(ax + 1).pad(tuple((0, s - 1) if i == ax + 1 else None for i in range(x.ndim + 1)))
        x = x.reshape(x.shape[:ax] + (size * s,) + x.shape[ax + 2:])._resize_axis(ax, (size - 1) * s + 1)
    pads = [v for k, d, p, op in reversed(list(zip(hw, d_, p_, op_))) for v in (d * (k - 1) - p, d * (k - 1) - p + op)]
    return x.conv2d(w, bias, groups=groups, dilation=d_, padding=pads)

  # ---------- attention ----------
  def scaled_dot_product_attention(self: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,  # type: ignore[misc]
                                   dropout_p: float = 0.0, is_causal: bool = False) -> Tensor:
    """softmax(q @ k^T / sqrt(d) + mask) @ v, as torch.nn.functional.scaled_dot_product_attention."""
    from tg.tensor import Tensor, _concrete
    scores = self @ key.transpose(-2, -1) * (1 / math.sqrt(_concrete(self.shape[-1])))
    if is_causal:
      n, m = _concrete(self.shape[-2]), _concrete(key.shape[-2])
      keep = Tensor.ones(n, m, dtype=dtypes.bool, device=self.device).tril(0)  # aligned top-left, as torch
      scores = keep.where(scores, -math.inf)
    if attn_mask is None:
      weights = scores.softmax(-1)  # every query sees a key (is_causal keeps the first)
    else:
      scores = attn_mask.where(scores, -math.inf) if attn_mask.dtype == dtypes.bool else scores + attn_mask
      # a query that sees no key (its row all -inf) attends to nothing: zeros, as torch, not softmax's NaN (-inf - -inf).
      # Its scores are replaced before the softmax too, or the NaN would come back in the gradient (0 * NaN)
      blind = scores.detach().max(-1, keepdim=True) == -math.inf
      weights = blind.where(0.0, blind.where(0.0, scores).softmax(-1))
    return weights.dropout(dropout_p) @ value

  # ---------- losses ----------
  def one_hot(self: Tensor, num_classes: int) -> Tensor:  # type: ignore[misc]
    """(..., num_classes) int32 (as tinygrad 0.9.1) with a 1 at each value's class. A value outside [0, num_classes)
    raises IndexOutOfRangeError when the result is realized (torch raises too; it was a row of zeros)."""
    if dtypes.is_float(self.dtype) or self.dtype == dtypes.bool:
      raise TypeError(f"one_hot takes an integer tensor of class indices, not {self.dtype.name}")
    out = self._one_hot_unchecked(num_classes)
    _range_guard([out], self, 0, num_classes, _one_hot_error(num_classes))
    return out

  def _one_hot_unchecked(self: Tensor, num_classes: int) -> Tensor:  # type: ignore[misc]
    """one_hot where a value outside the classes gives a row of zeros: the losses' ignore_index rows (checked there)."""
    from tg.tensor import Tensor
    return (self.unsqueeze(-1) == Tensor.arange(num_classes, device=self.device)).cast(dtypes.default_int)

  def sparse_categorical_crossentropy(self: Tensor, Y: Tensor, ignore_index: int = -1,  # type: ignore[misc]
                                      label_smoothing: float = 0.0) -> Tensor:
    """Mean cross-entropy of logits (..., C) against integer labels (...), as torch's cross_entropy:
    labels equal to `ignore_index` count for nothing; label smoothing mixes in the uniform target."""
    from tg.tensor import _concrete
    n_classes = _concrete(self.shape[-1])
    log_probs = self.log_softmax(-1)
    keep = (Y != ignore_index)
    target = Y._one_hot_unchecked(n_classes).cast(dtypes.bool) & keep.unsqueeze(-1)
    # picked with where, not multiplied by a 0/1 mask: a -inf log-probability of another class times 0 would be nan
    nll = -target.where(log_probs, 0.0).sum()
    # the mean over the counted labels: none counted is 0 / 0 = NaN, as torch's cross_entropy and tinygrad's
    if label_smoothing == 0:
      out = nll / keep.sum()
    else:
      smooth = -keep.where(log_probs.mean(-1), 0.0).sum()
      out = ((1 - label_smoothing) * nll + label_smoothing * smooth) / keep.sum()
    _check_targets([out, target], Y, n_classes, ignore_index, keep)
    return out

  def nll_loss(self: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100,  # type: ignore[misc]
               reduction: str = "mean") -> Tensor:
    """torch.nn.functional.nll_loss: `self` holds log-probabilities with the classes on axis 1 ((N, C), (N, C, d1, ...),
    or (C,) for one sample), `target` the class of each sample. A target equal to `ignore_index` counts for nothing;
    `weight` (C,) weighs each class, and "mean" divides by the summed weights of the counted targets (nan if none)."""
    return _nll(self, target, weight, ignore_index, reduction, 0.0)

  def cross_entropy(self: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100,  # type: ignore[misc]
                    reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    """torch.nn.functional.cross_entropy of logits `self` (classes on axis 1, as nll_loss) against class indices, or
    against class probabilities of self's shape (a float `target`). label_smoothing mixes in the uniform target."""
    if reduction not in ("mean", "sum", "none"):
      raise TgArgumentError(f"reduction must be 'mean', 'sum' or 'none', not {reduction!r}")
    if not 0.0 <= label_smoothing <= 1.0:
      raise TgArgumentError(f"label_smoothing must be in [0, 1], not {label_smoothing}")
    class_axis = 0 if self.ndim == 1 else 1
    logp = self.log_softmax(class_axis)
    if dtypes.is_float(target.dtype):  # probabilities
      if target.shape != self.shape:
        raise ShapeError(f"cross_entropy with class probabilities needs a target of the input's shape {self.shape}, not {target.shape}")
      from tg.tensor import _concrete
      n_classes = _concrete(self.shape[class_axis])
      probs = target * (1 - label_smoothing) + label_smoothing / n_classes if label_smoothing else target
      w = 1.0 if weight is None else weight.reshape(n_classes, *([1] * (self.ndim - class_axis - 1)))
      loss = -(probs * logp * w).sum(class_axis)
      return loss if reduction == "none" else loss.sum() if reduction == "sum" else loss.mean()
    return _nll(logp, target, weight, ignore_index, reduction, label_smoothing)

  def binary_crossentropy(self: Tensor, y: Tensor) -> Tensor:  # type: ignore[misc]
    """Mean of -(y log p + (1-y) log(1-p)) for probabilities p = self (logs clamped at -100, as torch)."""
    return -(y * self.log().maximum(-100) + (1 - y) * (1 - self).log().maximum(-100)).mean()

  def binary_crossentropy_logits(self: Tensor, y: Tensor) -> Tensor:  # type: ignore[misc]
    """binary_crossentropy of sigmoid(self), computed without overflow."""
    return (self * (1 - y) + (-self).softplus()).mean()


def _bins(n: int, o: int, device: str) -> tuple[Tensor, Tensor]:
  """The adaptive pools' bins of an axis of n into o, as int32 columns (o, 1): [floor(i*n/o), ceil((i+1)*n/o)), torch's."""
  from tg.tensor import Tensor
  i = Tensor.arange(o, device=device, dtype=dtypes.int32).reshape(o, 1)
  return (i * n) // o, ((i + 1) * n + o - 1) // o


def _positions(n: int, device: str) -> Tensor:
  from tg.tensor import Tensor
  return Tensor.arange(n, device=device, dtype=dtypes.int32).reshape(1, n)


def _nll(logp: Tensor, target: Tensor, weight: Tensor | None, ignore_index: int, reduction: str, smoothing: float) -> Tensor:
  """nll_loss, with torch's label smoothing for cross_entropy: each counted sample adds smoothing/C times minus its
  weighted log-probabilities summed over the classes, reduced with nll's own denominator."""
  if reduction not in ("mean", "sum", "none"):
    raise TgArgumentError(f"reduction must be 'mean', 'sum' or 'none', not {reduction!r}")
  if dtypes.is_float(target.dtype):
    raise DTypeError(f"nll_loss needs integer class indices as target, not {target.dtype}")
  one = logp.ndim == 1
  lp, tgt = (logp.unsqueeze(0), target.unsqueeze(0)) if one else (logp, target)
  if lp.ndim < 2 or tgt.shape != (lp.shape[0], *lp.shape[2:]):
    raise ShapeError(f"nll_loss: input {logp.shape} (classes on axis 1) needs a target of shape {(lp.shape[0], *lp.shape[2:])}, not {target.shape}")
  from tg.tensor import _concrete
  n_classes = _concrete(lp.shape[1])
  lp = lp.permute(0, *range(2, lp.ndim), 1)  # classes last
  keep = tgt != ignore_index
  pick = tgt._one_hot_unchecked(n_classes).cast(dtypes.bool) & keep.unsqueeze(-1)
  w = keep.cast(lp.dtype) if weight is None else pick.where(weight, 0.0).sum(-1)
  # picked with where, not multiplied by a 0/1 mask: another class's -inf log-probability times 0 would be nan
  loss = -pick.where(lp, 0.0).sum(-1) * (1.0 if weight is None else w)
  if smoothing:
    smooth = -keep.where((lp if weight is None else lp * weight).sum(-1), 0.0)
    loss = (1 - smoothing) * loss + smoothing / n_classes * smooth
  out = (loss[0] if one else loss) if reduction == "none" else loss.sum() if reduction == "sum" else loss.sum() / w.sum()
  _check_targets([out, pick], tgt, n_classes, ignore_index, keep)
  return out
