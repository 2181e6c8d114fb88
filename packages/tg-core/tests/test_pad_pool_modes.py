"""Padding modes (reflect, replicate, circular), pooling's ceil_mode and count_include_pad, the adaptive pools, and
max_pool2d's gradient where a window's maximum is tied: each against torch, forward and backward, and torch's errors.

The gradients are of sum(out * w) for a fixed random w, so each output's gradient lands where torch sends it (a plain
sum would hide a gradient sent to the wrong one of two equal elements). Few, small cases: each compiles its own
kernels, and the PYTHON device interprets them."""
import math

import numpy as np
import pytest

from tg import Tensor, nn
from tg.errors import TgArgumentError

torch = pytest.importorskip("torch")
TF = torch.nn.functional


def _rand(shape, seed=0):
  return np.random.default_rng(seed).uniform(-2, 2, size=shape).astype(np.float32)


def _distinct(shape, seed=0):
  """Distinct values: each window has one maximum."""
  n = int(np.prod(shape))
  return (np.random.default_rng(seed).permutation(n).reshape(shape).astype(np.float32) / n * 4 - 2)


def check(tg_fn, torch_fn, x, atol=1e-6, rtol=1e-5, grad=True):
  """tg_fn(Tensor) against torch_fn(torch.Tensor): values (NaN where torch has NaN, zeros' signs as torch's), dtype,
  and the input's gradient of sum(out * w)."""
  floats = np.issubdtype(x.dtype, np.floating)
  t, g = torch.tensor(x, requires_grad=grad and floats), Tensor(x, requires_grad=grad and floats)
  tout, gout = torch_fn(t), tg_fn(g)
  ref, got = tout.detach().numpy(), gout.numpy()
  assert got.shape == ref.shape and got.dtype == ref.dtype, f"{got.shape} {got.dtype} vs torch {ref.shape} {ref.dtype}"
  np.testing.assert_allclose(got, ref, atol=atol, rtol=rtol)
  np.testing.assert_array_equal(np.signbit(got[got == 0]), np.signbit(ref[ref == 0]), err_msg="signs of zeros")
  if not (grad and floats):
    return
  w = np.random.default_rng(7).uniform(0.5, 1.5, size=ref.shape).astype(np.float32)
  (tout * torch.tensor(w)).sum().backward()
  (gout * Tensor(w)).sum().backward()
  assert g.grad is not None
  np.testing.assert_allclose(g.grad.numpy(), t.grad.numpy(), atol=1e-5, rtol=1e-5, err_msg="gradient")


# ---------- padding modes ----------

PAD_CASES = [
  # (shape, padding as torch's F.pad: last axis first)
  ((1, 2, 4, 5), (1, 2, 0, 3)),
  ((1, 1, 3, 4), (3, 0, 2, 2)),
  ((2, 5), (4, 1)),
  ((1, 1, 3, 3, 4), (1, 2, 0, 2, 1, 1)),
  ((1, 2, 4, 5), (-1, 2, 1, -2)),  # a negative side crops
]


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("shape,padding", PAD_CASES, ids=[str(p) for _, p in PAD_CASES])
def test_pad2d_modes(mode, shape, padding):
  check(lambda x: x.pad2d(padding, mode=mode), lambda x: TF.pad(x, padding, mode=mode), _rand(shape))


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
def test_pad_modes_per_axis(mode):
  # Tensor.pad's (before, after) per axis, None for none; torch's F.pad lists the last axis first
  arg = (None, (2, 1), (0, 3))
  check(lambda x: x.pad(arg, mode=mode), lambda x: TF.pad(x, (0, 3, 2, 1), mode=mode), _rand((2, 3, 4)))


def test_pad_constant_value_with_mode():
  check(lambda x: x.pad2d((1, 2, 2, 0), value=-1.5, mode="constant"), lambda x: TF.pad(x, (1, 2, 2, 0), value=-1.5), _rand((1, 2, 3)))


def test_pad_modes_keep_signed_zeros_and_ints():
  x = np.array([[[-0.0, 1.0, 0.0, -2.0]]], np.float32)
  for mode in ("reflect", "replicate", "circular"):
    check(lambda t: t.pad2d((2, 3), mode=mode), lambda t: TF.pad(t, (2, 3), mode=mode), x)
    check(lambda t: t.pad2d((3, 1), mode=mode), lambda t: TF.pad(t, (3, 1), mode=mode), np.arange(12, dtype=np.int32).reshape(1, 3, 4))


@pytest.mark.parametrize("mode,padding,match", [
  ("reflect", (4, 0), "Padding size should be less than the corresponding input dimension"),
  ("reflect", (0, 5), "Padding size should be less than the corresponding input dimension"),
  ("circular", (5, 0), "wrapping around more than once"),
  ("reflect", (-2, -2), "too small"),
  ("replicate", (0, -4), "too small"),
  ("circular", (-2, 3), None),  # torch wraps the cropped axis (2 long) 3 times: garbage or its aliasing error; tg refuses
])
def test_pad_mode_errors(mode, padding, match):
  x = np.ones((1, 2, 4), np.float32)
  if match is not None:
    with pytest.raises(RuntimeError, match=match):
      TF.pad(torch.tensor(x), padding, mode=mode)
  with pytest.raises(RuntimeError, match=match or "wrapping around more than once"):
    Tensor(x).pad2d(padding, mode=mode)


def test_pad_mode_argument_errors():
  x = Tensor.ones(1, 2, 4)
  for mode in ("reflect", "replicate", "circular"):
    with pytest.raises(RuntimeError, match="doesn't take in value argument"):
      TF.pad(torch.ones(1, 2, 4), (1, 1), mode=mode, value=1.0)
    with pytest.raises(RuntimeError, match="doesn't take in value argument"):
      x.pad2d((1, 1), value=1.0, mode=mode)
    assert x.pad2d((1, 1), value=0.0, mode=mode).shape == (1, 2, 6)  # value 0 is the default: torch takes it too
  with pytest.raises(TgArgumentError, match="padding mode"):
    x.pad2d((1, 1), mode="reflection")
  with pytest.raises(TgArgumentError, match="padding mode"):
    x.pad(((0, 0), (0, 0), (1, 1)), mode="zeros")  # Conv2d's name for it, not F.pad's
  with pytest.raises(RuntimeError, match="non-zero"):  # nothing to replicate or reflect (torch: an empty axis is refused)
    Tensor.ones(1, 2, 0).pad2d((1, 1), mode="replicate")


@pytest.mark.parametrize("tg_name,args", [
  ("ReflectionPad2d", (2,)), ("ReflectionPad1d", ((1, 3),)), ("ReplicationPad2d", ((1, 0, 2, 1),)), ("ReplicationPad3d", (1,)),
  ("ZeroPad2d", ((1, 2, 0, 1),)), ("ConstantPad2d", (1, 3.5)), ("ConstantPad1d", ((2, 0), -1.0)), ("CircularPad2d", ((1, 2, 2, 0),)),
  ("ZeroPad1d", (2,)), ("ReflectionPad3d", ((1, 0, 1, 1, 0, 2),)),
])
def test_pad_layers(tg_name, args):
  shape = {"1": (2, 3, 5), "2": (1, 2, 4, 5), "3": (1, 1, 3, 4, 4)}[tg_name[-2]]
  layer, ref = getattr(nn, tg_name)(*args), getattr(torch.nn, tg_name)(*args)
  assert tuple(layer.padding) == tuple(ref.padding)
  check(layer, ref, _rand(shape))


@pytest.mark.parametrize("padding_mode", ["zeros", "reflect", "replicate", "circular"])
def test_conv2d_padding_mode(padding_mode):
  torch.manual_seed(0)
  ref = torch.nn.Conv2d(2, 3, (3, 2), padding=(2, 1), stride=(1, 2), padding_mode=padding_mode)
  conv = nn.Conv2d(2, 3, (3, 2), padding=(2, 1), stride=(1, 2), padding_mode=padding_mode)
  conv.weight = Tensor(ref.weight.detach().numpy(), requires_grad=True)
  conv.bias = Tensor(ref.bias.detach().numpy(), requires_grad=True)
  check(conv, ref, _rand((1, 2, 5, 6)), atol=1e-5)
  assert conv.weight.grad is not None
  np.testing.assert_allclose(conv.weight.grad.numpy(), ref.weight.grad.numpy(), atol=1e-5, rtol=1e-5)


def test_conv_padding_mode_same_and_1d():
  torch.manual_seed(1)
  ref = torch.nn.Conv1d(2, 2, 4, padding="same", padding_mode="reflect")
  conv = nn.Conv1d(2, 2, 4, padding="same", padding_mode="reflect")
  conv.weight, conv.bias = Tensor(ref.weight.detach().numpy()), Tensor(ref.bias.detach().numpy())
  check(conv, ref, _rand((1, 2, 7)), atol=1e-5)


def test_conv_padding_mode_errors():
  with pytest.raises(ValueError, match="padding_mode"):
    torch.nn.Conv2d(1, 1, 3, padding_mode="reflection")
  with pytest.raises(ValueError, match="padding_mode"):
    nn.Conv2d(1, 1, 3, padding_mode="reflection")
  with pytest.raises(ValueError, match="zeros"):
    torch.nn.ConvTranspose2d(1, 1, 3, padding_mode="reflect")
  with pytest.raises(ValueError, match="zeros"):
    nn.ConvTranspose2d(1, 1, 3, padding_mode="reflect")
  # reflect padding of 3 on an axis of 3: torch's error at the call
  with pytest.raises(RuntimeError, match="Padding size should be less"):
    nn.Conv2d(1, 1, 3, padding=3, padding_mode="reflect")(Tensor.ones(1, 1, 3, 5))


# ---------- pooling: ceil_mode, count_include_pad, divisor_override ----------

POOL_CASES = [
  # (shape, kernel, stride, padding)
  ((1, 2, 5, 5), 2, 2, 0),
  ((1, 1, 7, 6), 3, 2, 1),
  ((1, 1, 6, 7), (2, 3), (3, 2), (1, 1)),
  ((2, 6, 5), 3, 3, 1),
]


@pytest.mark.parametrize("ceil_mode", [False, True])
@pytest.mark.parametrize("shape,k,stride,padding", POOL_CASES)
def test_max_pool2d_ceil_mode(shape, k, stride, padding, ceil_mode):
  check(lambda x: x.max_pool2d(k, stride, padding=padding, ceil_mode=ceil_mode),
        lambda x: TF.max_pool2d(x, k, stride, padding=padding, ceil_mode=ceil_mode), _distinct(shape))


def test_max_pool2d_ceil_mode_dilation():
  check(lambda x: x.max_pool2d(3, 2, dilation=2, padding=1, ceil_mode=True),
        lambda x: TF.max_pool2d(x, 3, 2, dilation=2, padding=1, ceil_mode=True), _distinct((1, 1, 8, 9)))


@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize("ceil_mode", [False, True])
@pytest.mark.parametrize("shape,k,stride,padding", POOL_CASES)
def test_avg_pool2d_ceil_mode_count_include_pad(shape, k, stride, padding, ceil_mode, count_include_pad):
  check(lambda x: x.avg_pool2d(k, stride, padding=padding, ceil_mode=ceil_mode, count_include_pad=count_include_pad),
        lambda x: TF.avg_pool2d(x, k, stride, padding=padding, ceil_mode=ceil_mode, count_include_pad=count_include_pad), _rand(shape))


def test_avg_pool2d_divisor_override():
  check(lambda x: x.avg_pool2d(3, 2, padding=1, ceil_mode=True, divisor_override=5),
        lambda x: TF.avg_pool2d(x, 3, 2, padding=1, ceil_mode=True, divisor_override=5), _rand((1, 2, 6, 6)))
  with pytest.raises(RuntimeError, match="divisor must be not zero"):
    TF.avg_pool2d(torch.ones(1, 1, 4, 4), 2, divisor_override=0)
  with pytest.raises(RuntimeError, match="divisor must be not zero"):
    Tensor.ones(1, 1, 4, 4).avg_pool2d(2, divisor_override=0)


def test_ceil_mode_last_window_starts_inside():
  # ceil would give a window starting in the right padding: torch drops it (6 + 2*1 - 2 over stride 2: 4 windows, not 5)
  for fn in ("max_pool2d", "avg_pool2d"):
    ref = getattr(TF, fn)(torch.ones(1, 1, 6, 6), 2, 2, padding=1, ceil_mode=True)
    assert getattr(Tensor.ones(1, 1, 6, 6), fn)(2, 2, padding=1, ceil_mode=True).shape == tuple(ref.shape) == (1, 1, 4, 4)


@pytest.mark.parametrize("layer,args,kwargs", [
  ("MaxPool2d", (3,), {"stride": 2, "padding": 1, "ceil_mode": True}),
  ("MaxPool2d", ((2, 3),), {"dilation": (1, 2)}),
  ("AvgPool2d", (3,), {"stride": 2, "padding": 1, "ceil_mode": True, "count_include_pad": False}),
  ("AvgPool2d", (2,), {}),
])
def test_pool_layers(layer, args, kwargs):
  check(getattr(nn, layer)(*args, **kwargs), getattr(torch.nn, layer)(*args, **kwargs), _distinct((1, 2, 7, 8)))


# ---------- adaptive pooling ----------

ADAPTIVE_CASES = [
  # (shape, output_size)
  ((1, 2, 7, 9), (3, 4)),   # uneven bins, overlapping
  ((2, 1, 8, 8), 4),        # even bins: a plain pool
  ((1, 2, 5, 6), (None, 4)),  # None keeps the axis
  ((2, 5, 4), 1),           # unbatched (C, H, W); global pooling
  ((1, 1, 3, 4), (5, 6)),   # more outputs than inputs
  ((1, 1, 10, 3), (3, 3)),
]


@pytest.mark.parametrize("op", ["adaptive_avg_pool2d", "adaptive_max_pool2d"])
@pytest.mark.parametrize("shape,size", ADAPTIVE_CASES, ids=[f"{s}->{o}" for s, o in ADAPTIVE_CASES])
def test_adaptive_pool2d(op, shape, size):
  check(lambda x: getattr(x, op)(size), lambda x: getattr(TF, op)(x, size), _distinct(shape))


def test_adaptive_pool2d_empty_output():
  for op in ("adaptive_avg_pool2d", "adaptive_max_pool2d"):
    assert getattr(Tensor.ones(1, 1, 4, 4), op)(0).shape == tuple(getattr(TF, op)(torch.ones(1, 1, 4, 4), 0).shape) == (1, 1, 0, 0)


@pytest.mark.parametrize("layer", ["AdaptiveAvgPool2d", "AdaptiveMaxPool2d"])
def test_adaptive_pool_layers(layer):
  check(getattr(nn, layer)((2, None)), getattr(torch.nn, layer)((2, None)), _distinct((1, 2, 5, 3)))
  check(getattr(nn, layer)(3), getattr(torch.nn, layer)(3), _distinct((1, 1, 7, 5)))


@pytest.mark.parametrize("op", ["adaptive_avg_pool2d", "adaptive_max_pool2d"])
@pytest.mark.parametrize("shape,size,match", [
  ((1, 1, 4, 4), (1, 2, 3), "output_size must be 2"),
  ((1, 1, 4, 4), (2,), "output_size must be 2"),
  ((1, 1, 4, 4), -1, "greater than or equal to 0"),
  ((4, 4), 2, "Expected 3D or 4D tensor"),
  ((1, 1, 1, 4, 4), 2, "Expected 3D or 4D tensor"),
  ((1, 1, 0, 4), 2, "non-zero size for non-batch dimensions"),
])
def test_adaptive_pool2d_errors(op, shape, size, match):
  # torch raises RuntimeError for each (its adaptive_max_pool2d words some differently: only tg's message is matched there)
  with pytest.raises(RuntimeError):
    getattr(TF, op)(torch.ones(shape), size)
  with pytest.raises(RuntimeError, match=match):
    getattr(Tensor.ones(*shape), op)(size)


# ---------- max_pool2d's gradient at tied maxima ----------

TIE_CASES = [
  # (input, kernel, stride, padding): torch sends a window's gradient to its first maximum in row-major order
  (np.ones((1, 1, 4, 4), np.float32), 2, 2, 0),
  (np.ones((1, 1, 4, 5), np.float32), 2, 1, 0),  # overlapping windows
  (np.random.default_rng(3).integers(-1, 2, (1, 2, 5, 5)).astype(np.float32), 3, 1, 1),
  (np.random.default_rng(4).integers(0, 2, (1, 1, 6, 6)).astype(np.float32), (2, 3), (1, 2), (1, 1)),
  (np.full((1, 1, 3, 3), -math.inf, np.float32), 2, 1, 1),  # every window's maximum is -inf, as is the padding
]


@pytest.mark.parametrize("ceil_mode", [False, True])
@pytest.mark.parametrize("x,k,stride,padding", TIE_CASES)
def test_max_pool2d_gradient_at_ties(x, k, stride, padding, ceil_mode):
  check(lambda t: t.max_pool2d(k, stride, padding=padding, ceil_mode=ceil_mode),
        lambda t: TF.max_pool2d(t, k, stride, padding=padding, ceil_mode=ceil_mode), x)


def test_max_pool2d_nan_windows():
  # a NaN is the window's max; torch's gradient goes to the window's last NaN (its loop takes every NaN it meets)
  x = np.array([[[[1.0, math.nan, 3.0, 3.0], [math.nan, 2.0, 0.0, 3.0], [1.0, 1.0, -0.0, 0.0], [0.0, 1.0, 0.0, -0.0]]]], np.float32)
  check(lambda t: t.max_pool2d(2), lambda t: TF.max_pool2d(t, 2), x)
  check(lambda t: t.max_pool2d(2, 1), lambda t: TF.max_pool2d(t, 2, 1), x)


def test_max_pool2d_ints_ceil_mode():
  # an integer tensor stays integer, and the dtype's least value in it is still its own (the padding holds it too)
  x = np.array([[[[-2 ** 31, 5, -2 ** 31], [7, -2 ** 31, 0], [-2 ** 31, 1, -2 ** 31]]]], np.int32)
  check(lambda t: t.max_pool2d(2, 2, padding=1, ceil_mode=True), lambda t: TF.max_pool2d(t, 2, 2, padding=1, ceil_mode=True), x)
  check(lambda t: t.max_pool2d(2, 2, ceil_mode=True), lambda t: TF.max_pool2d(t, 2, 2, ceil_mode=True), x)


@pytest.mark.parametrize("size", [(3, 3), 2, (2, 3)])
def test_adaptive_max_pool2d_gradient_at_ties(size):
  check(lambda t: t.adaptive_max_pool2d(size), lambda t: TF.adaptive_max_pool2d(t, size), np.ones((1, 1, 4, 5), np.float32))


def test_max_over_an_axis_splits_ties_as_amax():
  # Tensor.max(axis) returns values only, tinygrad's and torch.amax's meaning: the gradient is split evenly between tied
  # maxima, as torch.amax's and torch's max() over all axes (torch's max(dim) returns indices and picks one)
  x = np.array([[1.0, 3.0, 3.0], [3.0, 0.0, 1.0]], np.float32)
  check(lambda t: t.max(1), lambda t: torch.amax(t, 1), x)
  check(lambda t: t.max(), lambda t: t.max(), x)
