"""Layers, with tinygrad's (and torch's) default initialisations. A layer is a plain object holding
Tensors; `tg.nn.state.get_parameters(model)` finds them."""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any, SupportsIndex, overload

from tg.dtype import dtypes
from tg.helpers import make_pair, prod
from tg.nn import optim, state  # reachable as tg.nn.optim / tg.nn.state, as in tinygrad
from tg.tensor import Tensor


class Linear:
  """y = x @ W.T + b."""

  def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
    self.weight = Tensor.kaiming_uniform(out_features, in_features, a=math.sqrt(5))
    bound = 1 / math.sqrt(in_features) if in_features > 0 else 0  # as torch: no fan_in, a zero bias
    self.bias = Tensor.uniform(out_features, low=-bound, high=bound) if bias else None

  def __call__(self, x: Tensor) -> Tensor:
    return x.linear(self.weight.transpose(), self.bias)


CONV_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


class Conv2d:
  """N-d convolution (the kernel size's length says how many spatial axes). padding_mode (torch's) fills the padding
  with zeros, or pads the input first by F.pad's 'reflect', 'replicate' or 'circular'."""

  def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, ...], stride: int | tuple[int, ...] = 1,
               padding: int | Sequence[int] | str = 0, dilation: int | tuple[int, ...] = 1, groups: int = 1, bias: bool = True,
               padding_mode: str = "zeros") -> None:
    if in_channels % groups or out_channels % groups:
      raise ValueError(f"in_channels {in_channels} and out_channels {out_channels} must both be divisible by groups {groups}")
    if padding_mode not in CONV_PADDING_MODES:  # (torch's words)
      raise ValueError(f"padding_mode must be one of {list(CONV_PADDING_MODES)}, but got padding_mode='{padding_mode}'")
    self.kernel_size = make_pair(kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
    if isinstance(padding, str):  # 'valid' or 'same' (stride 1): refused here, as torch.nn.Conv2d, not at the first call
      Tensor._padding_string(padding, self.kernel_size, stride, dilation)
    self.stride, self.padding, self.dilation, self.groups, self.padding_mode = stride, padding, dilation, groups, padding_mode
    self.weight = Tensor.kaiming_uniform(out_channels, in_channels // groups, *self.kernel_size, a=math.sqrt(5))
    bound = 1 / math.sqrt(fan_in) if (fan_in := prod(self.weight.shape[1:])) else 0  # as torch: no fan_in, a zero bias
    self.bias = Tensor.uniform(out_channels, low=-bound, high=bound) if bias else None

  def __call__(self, x: Tensor) -> Tensor:
    if self.padding_mode == "zeros":
      return x.conv2d(self.weight, self.bias, groups=self.groups, stride=self.stride, dilation=self.dilation, padding=self.padding)
    # as torch: the input padded by the mode, then convolved without padding
    pads = (Tensor._padding_string(self.padding, self.kernel_size, self.stride, self.dilation) if isinstance(self.padding, str)
            else Tensor._conv_padding(self.padding, len(self.kernel_size)))
    return x.pad2d(pads, mode=self.padding_mode).conv2d(self.weight, self.bias, groups=self.groups, stride=self.stride, dilation=self.dilation)


def Conv1d(in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, padding: int | str = 0, dilation: int = 1,
           groups: int = 1, bias: bool = True, padding_mode: str = "zeros") -> Conv2d:
  return Conv2d(in_channels, out_channels, (kernel_size,), stride, padding, dilation, groups, bias, padding_mode)


class ConvTranspose2d:
  def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, ...], stride: int | tuple[int, ...] = 1,
               padding: int | tuple[int, ...] = 0, output_padding: int | tuple[int, ...] = 0, dilation: int | tuple[int, ...] = 1,
               groups: int = 1, bias: bool = True, padding_mode: str = "zeros") -> None:
    if in_channels % groups or out_channels % groups:
      raise ValueError(f"in_channels {in_channels} and out_channels {out_channels} must both be divisible by groups {groups}")
    if padding_mode != "zeros":  # (torch's words)
      raise ValueError(f'Only "zeros" padding mode is supported for {type(self).__name__}, not {padding_mode!r}')
    self.kernel_size = make_pair(kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
    self.stride, self.padding, self.output_padding, self.dilation, self.groups = stride, padding, output_padding, dilation, groups
    self.weight = Tensor.kaiming_uniform(in_channels, out_channels // groups, *self.kernel_size, a=math.sqrt(5))
    bound = 1 / math.sqrt(fan_in) if (fan_in := prod(self.weight.shape[1:])) else 0
    self.bias = Tensor.uniform(out_channels, low=-bound, high=bound) if bias else None

  def __call__(self, x: Tensor) -> Tensor:
    return x.conv_transpose2d(self.weight, self.bias, groups=self.groups, stride=self.stride, dilation=self.dilation,
                              padding=self.padding, output_padding=self.output_padding)


def ConvTranspose1d(in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, padding: int = 0, output_padding: int = 0,
                    dilation: int = 1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros") -> ConvTranspose2d:
  return ConvTranspose2d(in_channels, out_channels, (kernel_size,), stride, padding, output_padding, dilation, groups, bias, padding_mode)


class _Pad:
  """A padding layer, as torch's ReflectionPad2d and kin: `padding` one int for every side, or two per padded axis
  from the last axis back ((left, right, top, bottom) for 2-d); `dims` axes are padded, by F.pad's `mode`."""
  dims, mode = 2, "constant"

  def __init__(self, padding: int | Sequence[int]) -> None:
    n = 2 * self.dims
    self.padding = (padding,) * n if isinstance(padding, int) else tuple(padding)
    if len(self.padding) != n:
      raise ValueError(f"{type(self).__name__} takes one int or {n} ints as padding, got {padding}")
    self.value = 0.0

  def __call__(self, x: Tensor) -> Tensor:
    return x.pad2d(self.padding, value=self.value, mode=self.mode)


class ReflectionPad1d(_Pad):
  dims, mode = 1, "reflect"


class ReflectionPad2d(_Pad):
  dims, mode = 2, "reflect"


class ReflectionPad3d(_Pad):
  dims, mode = 3, "reflect"


class ReplicationPad1d(_Pad):
  dims, mode = 1, "replicate"


class ReplicationPad2d(_Pad):
  dims, mode = 2, "replicate"


class ReplicationPad3d(_Pad):
  dims, mode = 3, "replicate"


class CircularPad1d(_Pad):
  dims, mode = 1, "circular"


class CircularPad2d(_Pad):
  dims, mode = 2, "circular"


class CircularPad3d(_Pad):
  dims, mode = 3, "circular"


class ZeroPad1d(_Pad):
  dims = 1


class ZeroPad2d(_Pad):
  dims = 2


class ZeroPad3d(_Pad):
  dims = 3


class ConstantPad1d(_Pad):
  """Pads with `value` (torch's ConstantPad1d(padding, value))."""
  dims = 1

  def __init__(self, padding: int | Sequence[int], value: float) -> None:
    super().__init__(padding)
    self.value = value


class ConstantPad2d(ConstantPad1d):
  dims = 2


class ConstantPad3d(ConstantPad1d):
  dims = 3


class MaxPool2d:
  """torch.nn.MaxPool2d (its argument order): Tensor.max_pool2d with these settings."""

  def __init__(self, kernel_size: int | tuple[int, ...], stride: int | tuple[int, ...] | None = None, padding: int | Sequence[int] = 0,
               dilation: int = 1, return_indices: bool = False, ceil_mode: bool = False) -> None:
    if return_indices:
      raise NotImplementedError("MaxPool2d(return_indices=True) is not supported: tg's max_pool2d returns the values only")
    self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode = kernel_size, stride, padding, dilation, ceil_mode

  def __call__(self, x: Tensor) -> Tensor:
    return x.max_pool2d(self.kernel_size, self.stride, self.dilation, self.padding, self.ceil_mode)


class AvgPool2d:
  """torch.nn.AvgPool2d (its argument order): Tensor.avg_pool2d with these settings."""

  def __init__(self, kernel_size: int | tuple[int, ...], stride: int | tuple[int, ...] | None = None, padding: int | Sequence[int] = 0,
               ceil_mode: bool = False, count_include_pad: bool = True, divisor_override: int | None = None) -> None:
    self.kernel_size, self.stride, self.padding, self.ceil_mode = kernel_size, stride, padding, ceil_mode
    self.count_include_pad, self.divisor_override = count_include_pad, divisor_override

  def __call__(self, x: Tensor) -> Tensor:
    return x.avg_pool2d(self.kernel_size, self.stride, padding=self.padding, ceil_mode=self.ceil_mode,
                        count_include_pad=self.count_include_pad, divisor_override=self.divisor_override)


class AdaptiveAvgPool2d:
  """torch.nn.AdaptiveAvgPool2d: output_size an int or a pair, None keeping an axis's size."""

  def __init__(self, output_size: int | Sequence[int | None] | None) -> None:
    self.output_size = output_size

  def __call__(self, x: Tensor) -> Tensor:
    return x.adaptive_avg_pool2d(self.output_size)


class AdaptiveMaxPool2d:
  """torch.nn.AdaptiveMaxPool2d (no return_indices): output_size as AdaptiveAvgPool2d's."""

  def __init__(self, output_size: int | Sequence[int | None] | None, return_indices: bool = False) -> None:
    if return_indices:
      raise NotImplementedError("AdaptiveMaxPool2d(return_indices=True) is not supported: tg's adaptive_max_pool2d returns the values only")
    self.output_size = output_size

  def __call__(self, x: Tensor) -> Tensor:
    return x.adaptive_max_pool2d(self.output_size)


class BatchNorm:
  """Batch normalization over axis 1 (any number of axes after it: BatchNorm1d/2d/3d are this class).

  Training normalizes with the batch's mean and biased variance and, with track_running_stats, moves the running
  statistics toward the batch's mean and unbiased variance by `momentum` (as torch; None: their plain average over
  the batches seen; an empty batch leaves them). Eval normalizes with the running statistics. As in tinygrad, the
  running statistics always exist: track_running_stats=False only stops training from updating them (torch would
  normalize with the batch's statistics in eval too)."""

  def __init__(self, sz: int, eps: float = 1e-5, affine: bool = True, track_running_stats: bool = True, momentum: float | None = 0.1) -> None:
    self.eps, self.track_running_stats, self.momentum = eps, track_running_stats, momentum
    self.weight: Tensor | None = Tensor.ones(sz) if affine else None
    self.bias: Tensor | None = Tensor.zeros(sz) if affine else None
    self.running_mean = Tensor.zeros(sz, requires_grad=False)
    self.running_var = Tensor.ones(sz, requires_grad=False)
    self.num_batches_tracked = Tensor.zeros(1, dtype=dtypes.int32, requires_grad=False)

  def __call__(self, x: Tensor) -> Tensor:
    axes = tuple(a for a in range(x.ndim) if a != 1)
    if Tensor.training:
      n = prod(x.shape[a] for a in axes)
      if isinstance(n, int) and n == 1:  # as torch: one value's variance is 0, normalizing it leaves only the bias
        raise ValueError(f"Expected more than 1 value per channel when training, got input size {x.shape}")
      mean = x.mean(axes)
      centered = x - mean.reshape((1, -1) + (1,) * (x.ndim - 2))
      var = (centered * centered).mean(axes)
      if self.track_running_stats:
        unbiased = var.detach() * (n / max(n - 1, 1))
        # momentum None: torch's cumulative average, the n-th batch weighted 1/n
        f: Tensor | float = self.momentum if self.momentum is not None else 1 / (self.num_batches_tracked + 1).cast(dtypes.float32)
        if not (isinstance(n, int) and n == 0):  # an empty batch has no statistics (its mean is NaN): keep them, as torch
          self.running_mean.assign((1 - f) * self.running_mean + f * mean.detach())
          self.running_var.assign((1 - f) * self.running_var + f * unbiased)
        self.num_batches_tracked.assign(self.num_batches_tracked + 1)
    else:
      mean, var = self.running_mean, self.running_var
    return x.batchnorm(self.weight, self.bias, mean, (var + self.eps).rsqrt())


BatchNorm1d = BatchNorm2d = BatchNorm3d = BatchNorm


class LayerNorm:
  def __init__(self, normalized_shape: int | tuple[int, ...], eps: float = 1e-5, elementwise_affine: bool = True) -> None:
    self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    self.axis, self.eps = tuple(-1 - i for i in range(len(self.normalized_shape))), eps
    self.weight = Tensor.ones(*self.normalized_shape) if elementwise_affine else None
    self.bias = Tensor.zeros(*self.normalized_shape) if elementwise_affine else None

  def __call__(self, x: Tensor) -> Tensor:
    if tuple(x.shape[-len(self.normalized_shape):]) != self.normalized_shape:
      raise ValueError(f"LayerNorm{self.normalized_shape} got an input of shape {x.shape}")
    x = x.layernorm(self.axis, self.eps)
    return x if self.weight is None or self.bias is None else x * self.weight + self.bias


class LayerNorm2d(LayerNorm):
  """LayerNorm over the channels of an NCHW tensor."""

  def __call__(self, x: Tensor) -> Tensor:
    return super().__call__(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class GroupNorm:
  def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True) -> None:
    if num_channels % num_groups:
      raise ValueError(f"num_channels {num_channels} must be divisible by num_groups {num_groups}")
    self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
    self.weight = Tensor.ones(num_channels) if affine else None
    self.bias = Tensor.zeros(num_channels) if affine else None

  def __call__(self, x: Tensor) -> Tensor:
    x = x.reshape(x.shape[0], self.num_groups, -1).layernorm(eps=self.eps).reshape(x.shape)
    if self.weight is None or self.bias is None:
      return x
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return x * self.weight.reshape(shape) + self.bias.reshape(shape)


class InstanceNorm(GroupNorm):
  """Normalizes each channel of each sample on its own: a GroupNorm with one channel per group."""

  def __init__(self, num_features: int, eps: float = 1e-5, affine: bool = True) -> None:
    super().__init__(num_features, num_features, eps, affine)
    self.num_features = num_features


class RMSNorm:
  def __init__(self, dim: int, eps: float = 1e-6) -> None:
    self.eps, self.weight = eps, Tensor.ones(dim)

  def __call__(self, x: Tensor) -> Tensor:
    return x * (x * x).mean(-1, keepdim=True).add(self.eps).rsqrt() * self.weight


class Embedding:
  def __init__(self, vocab_size: int, embed_size: int) -> None:
    self.vocab_sz, self.embed_sz = vocab_size, embed_size
    self.weight = Tensor.glorot_uniform(vocab_size, embed_size)

  def __call__(self, idx: Tensor) -> Tensor:
    if dtypes.is_float(idx.dtype) or idx.dtype == dtypes.bool:
      raise TypeError(f"Embedding needs integer indices, not {idx.dtype}")
    # weight[idx], but an index must be in [0, vocab_size) as torch's: a negative one raises (weight[-1] is the last row)
    return self.weight._index_with_tensors([(0, idx)], [0], "Embedding")


class Dropout:
  """Zeroes each element with probability p and scales the rest by 1/(1-p), only inside `Tensor.train()`."""

  def __init__(self, p: float = 0.5) -> None:
    if not 0 <= p <= 1:
      raise ValueError(f"dropout probability must be in [0, 1], got {p}")
    self.p = p

  def __call__(self, x: Tensor) -> Tensor:
    return x.dropout(self.p)


class Sequential(list[Any]):
  """Layers called in order, as torch.nn.Sequential: `Sequential(a, b)(x) == b(a(x))`. It is a list, so indexing,
  len, iteration and append work, and get_state_dict names its tensors "0.weight", "2.bias" as torch does. Any
  callable is a layer (`Tensor.relu` in place of torch's `nn.ReLU()`)."""

  def __init__(self, *layers: Callable[[Tensor], Tensor]) -> None:
    if len(layers) == 1 and isinstance(layers[0], dict):  # torch's Sequential(OrderedDict(...)) names its layers by key
      raise TypeError("tg's Sequential takes layers, not a dict of named layers: give them as positional arguments, or keep "
                      "them as attributes of a plain object to name them")
    super().__init__(layers)

  def __call__(self, x: Tensor) -> Tensor:
    for layer in self:
      x = layer(x)
    return x

  @overload
  def __getitem__(self, i: SupportsIndex) -> Any: ...
  @overload
  def __getitem__(self, i: slice) -> Sequential: ...

  def __getitem__(self, i: SupportsIndex | slice) -> Any:
    return Sequential(*super().__getitem__(i)) if isinstance(i, slice) else super().__getitem__(i)


class ModuleList(list[Any]):
  """torch.nn.ModuleList's name for a plain list of layers. tg needs no wrapper: get_parameters and get_state_dict
  walk plain lists (and tuples, dicts), naming a list attribute's tensors "layers.0.weight" as torch does; this class
  exists so torch code that spells it keeps working."""

  def __init__(self, modules: Iterable[Any] = ()) -> None:
    super().__init__(modules)


# layers in modules of their own; imported last, since they build on the layers above
from tg.nn.attention import MultiheadAttention  # noqa: E402
from tg.nn.recurrent import LSTM, LSTMCell  # noqa: E402

__all__ = ["LSTM", "AdaptiveAvgPool2d", "AdaptiveMaxPool2d", "AvgPool2d", "BatchNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d",
           "CircularPad1d", "CircularPad2d", "CircularPad3d", "ConstantPad1d", "ConstantPad2d", "ConstantPad3d", "Conv1d", "Conv2d",
           "ConvTranspose1d", "ConvTranspose2d", "Dropout", "Embedding", "GroupNorm", "InstanceNorm", "LSTMCell", "LayerNorm", "LayerNorm2d",
           "Linear", "MaxPool2d", "ModuleList", "MultiheadAttention", "RMSNorm", "ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d",
           "ReplicationPad1d", "ReplicationPad2d", "ReplicationPad3d", "Sequential", "ZeroPad1d", "ZeroPad2d", "ZeroPad3d", "optim", "state"]
