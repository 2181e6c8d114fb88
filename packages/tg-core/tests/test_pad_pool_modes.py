"""Padding modes (reflect, replicate, circular): each against torch, forward and backward, and torch's errors.

The gradients are of sum(out * w) for a fixed random w, so each output's gradient lands where torch sends it (a plain
sum would hide a gradient sent to the wrong one of two equal elements). Few, small cases: each compiles its own
kernels, and the PYTHON device interprets them."""
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
