"""torch checkpoints of BatchNorm layers load into tg's (torch's num_batches_tracked is 0-d, tinygrad's and tg's (1,)),
and numpy scalars make 0-d tensors of their own dtype, as torch.tensor(np.float32(1.5)) does."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest
import torch

from tg import Tensor, dtypes, nn
from tg.device import is_dtype_supported
from tg.dtype import DType
from tg.helpers import GlobalCounters
from tg.nn.state import load_state_dict, torch_load


def _torch_bn(tmp_path: pathlib.Path) -> tuple[torch.nn.BatchNorm2d, pathlib.Path]:
  torch.manual_seed(0)
  bn = torch.nn.BatchNorm2d(3)
  with torch.no_grad():
    bn.weight.copy_(torch.tensor([1.5, -0.5, 2.0]))
    bn.bias.copy_(torch.tensor([0.1, 0.2, -0.3]))
  bn.train()
  for _ in range(3):  # running statistics that aren't the defaults, and num_batches_tracked = 3
    bn(torch.randn(4, 3, 5, 5) * 2 + 1)
  bn.eval()
  path = tmp_path / "bn.pt"
  torch.save(bn.state_dict(), path)
  assert bn.state_dict()["num_batches_tracked"].shape == ()
  return bn, path


def test_torch_batchnorm_checkpoint_loads(tmp_path: pathlib.Path) -> None:
  bn, path = _torch_bn(tmp_path)
  mine = nn.BatchNorm2d(3)
  load_state_dict(mine, torch_load(str(path)))
  assert mine.num_batches_tracked.shape == (1,) and mine.num_batches_tracked.numpy().tolist() == [3]
  x = np.random.default_rng(0).standard_normal((2, 3, 4, 4)).astype(np.float32)
  with torch.no_grad():
    want = bn(torch.tensor(x)).numpy()
  np.testing.assert_allclose(mine(Tensor(x)).numpy(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("have, want", [((2,), (1,)), ((1, 1), ()), ((), (2,)), ((1, 1), (1,))])
def test_other_shape_mismatches_still_raise(have: tuple[int, ...], want: tuple[int, ...]) -> None:
  class M:
    def __init__(self) -> None:
      self.t = Tensor.zeros(*want) if want else Tensor(0.0)
  with pytest.raises(ValueError, match="shape mismatch"):
    load_state_dict(M(), {"t": Tensor.ones(*have) if have else Tensor(1.0)})


def test_one_element_mismatch_both_ways() -> None:
  class M:
    def __init__(self, shape: tuple[int, ...]) -> None:
      self.t = Tensor.zeros(*shape) if shape else Tensor(0.0).contiguous()
  m = M(())
  load_state_dict(m, {"t": Tensor([4.0])})
  assert m.t.shape == () and m.t.item() == 4.0
  m = M((1,))
  load_state_dict(m, {"t": Tensor(5.0)})
  assert m.t.shape == (1,) and m.t.numpy().tolist() == [5.0]


@pytest.mark.parametrize("value, dtype", [(np.float32(1.5), dtypes.float32), (np.float64(1.5), dtypes.float64),
                                          (np.int64(-7), dtypes.int64), (np.bool_(True), dtypes.bool),
                                          (np.float16(0.5), dtypes.float16), (np.int32(3), dtypes.int32), (np.uint8(200), dtypes.uint8)])
def test_numpy_scalar_is_a_0d_tensor_of_its_dtype(value: np.generic, dtype: DType) -> None:
  if not is_dtype_supported(dtype):
    pytest.skip(f"the device has no {dtype} (Renderer.missing_dtypes)")
  t = Tensor(value)
  assert t.shape == () and t.dtype == dtype
  assert t.dtype.np == torch.tensor(value).numpy().dtype  # torch's dtype for it
  assert t.item() == value.item()
  assert (t + 1).numpy().dtype == np.asarray(value + 1).dtype or dtype == dtypes.bool


def test_numpy_scalar_with_dtype_and_in_ops() -> None:
  assert Tensor(np.float64(2.5), dtype=dtypes.float32).dtype == dtypes.float32
  assert Tensor(np.float32(2.5), dtype=dtypes.int32).item() == 2
  np.testing.assert_allclose((Tensor([1.0, 2.0]) * Tensor(np.float32(3.0))).numpy(), [3.0, 6.0])


def test_scalar_item_compiles_no_kernel_per_value() -> None:
  Tensor(np.float32(0.25)).item()
  Tensor(0.25).item()
  kc = GlobalCounters.kernel_count
  for v in (1.5, 2.5, 3.5):
    assert Tensor(np.float32(v)).item() == v
  assert GlobalCounters.kernel_count == kc  # copied in from the host: no kernel at all


@pytest.mark.parametrize("scalar", [np.float32(2.5), np.float64(2.5), np.int64(3), np.int32(3)], ids=lambda s: type(s).__name__)
def test_numpy_scalar_operands_act_as_python_numbers(scalar: np.generic) -> None:
  # torch: a numpy scalar operand is a Python number (it doesn't widen the tensor), on either side of the operator
  t, tt = Tensor([1.0, 2.0]), torch.tensor([1.0, 2.0])
  for got, want in [(t + scalar, tt + scalar.item()), (scalar * t, scalar.item() * tt), (scalar - t, scalar.item() - tt)]:
    assert isinstance(got, Tensor), type(got)
    assert got.dtype == dtypes.float32
    np.testing.assert_allclose(got.numpy(), want.numpy())
  ti = Tensor([1, 2], dtype=dtypes.int32)
  assert (ti * np.int64(3)).dtype == dtypes.int32  # as torch: int32 * a Python int stays int32
  np.testing.assert_allclose((t + np.bool_(True)).numpy(), (tt + True).numpy())
