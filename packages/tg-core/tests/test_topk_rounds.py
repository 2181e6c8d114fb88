"""topk of a few from a long axis (a vocabulary's logits) picks k times, each pick one max over the axis, where a full
sort of the axis is a bitonic network: 136 stages for 50257 elements, 136 kernels to compile before the first answer
(half a minute on a CPU). The picks are the sort's: values as torch's, NaN the largest, ties in index order."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import tg.tensor_select as tensor_select
from tg import Device, Tensor, dtypes
from tg.device import is_dtype_supported
from tg.engine.schedule import create_schedule
from tg.ops import BufferOps, MetaOps

N = 1500  # longer than NETWORK_ABOVE: a sort of it is a network (66 stages: picks for k <= 6)


def _check(x: np.ndarray, k: int, dim: int = -1, largest: bool = True) -> tuple[Tensor, Tensor]:
  v, i = Tensor(x).topk(k, dim=dim, largest=largest)
  rv, _ = torch.topk(torch.tensor(x), k, dim=dim, largest=largest)
  np.testing.assert_array_equal(v.numpy(), rv.numpy())
  # torch leaves the order of ties open; tg's is the index order: the same values, and each index points at its value
  got_i = i.numpy()
  np.testing.assert_array_equal(np.take_along_axis(x, got_i.astype(np.int64), dim), rv.numpy())
  return v, i


@pytest.fixture
def no_network(monkeypatch):
  def refuse(*a):
    raise AssertionError("a few of a long axis were picked by a sort")
  monkeypatch.setattr(tensor_select.SelectMixin, "_sort_network", refuse)


@pytest.mark.usefixtures("no_network")
@pytest.mark.parametrize("largest", [True, False])
def test_topk_of_a_long_axis_as_torch(largest) -> None:
  x = np.random.default_rng(0).standard_normal((3, N)).astype(np.float32)
  x[1, 100:110] = x[1, 7]  # ties
  x[2, 5] = np.nan         # NaN: the largest, first when largest, never among the k smallest
  x[2, 9] = np.inf
  x[0, 11] = -np.inf
  _check(x, 5, largest=largest)
  _check(x.T.copy(), 6, dim=0, largest=largest)


@pytest.mark.usefixtures("no_network")
def test_topk_ties_in_index_order_and_nans() -> None:
  x = np.zeros(N, np.float32)
  x[[3, 50, 1400]] = 1.0
  x[[4, 900]] = np.nan
  v, i = Tensor(x).topk(6)
  assert np.isnan(v.numpy()[:2]).all() and v.numpy()[2:5].tolist() == [1.0, 1.0, 1.0] and v.numpy()[5] == 0.0
  assert i.numpy().tolist() == [4, 900, 3, 50, 1400, 0]
  v, i = Tensor(x).topk(3, largest=False)  # the smallest: zeros in index order
  assert v.numpy().tolist() == [0.0, 0.0, 0.0] and i.numpy().tolist() == [0, 1, 2]


@pytest.mark.usefixtures("no_network")
@pytest.mark.parametrize("dt", [dtypes.int32, dtypes.bool, dtypes.float16])
def test_topk_dtypes(dt) -> None:
  if not is_dtype_supported(dt):
    pytest.skip(f"no {dt} on this device")
  rng = np.random.default_rng(1)
  x = (rng.integers(-50, 50, N) if dt != dtypes.bool else rng.integers(0, 2, N)).astype(dt.np if dt.np else np.int32)  # type: ignore[union-attr]
  v, i = Tensor(x).topk(4)
  rv, _ = torch.topk(torch.tensor(x.astype(np.float32)), 4)
  assert v.dtype == dt
  np.testing.assert_array_equal(v.numpy().astype(np.float32), rv.numpy())
  np.testing.assert_array_equal(x[i.numpy()].astype(np.float32), rv.numpy())


@pytest.mark.usefixtures("no_network")
def test_topk_gradient_goes_to_the_picked() -> None:
  x = np.random.default_rng(2).standard_normal((2, N)).astype(np.float32)
  g = np.random.default_rng(3).standard_normal((2, 3)).astype(np.float32)
  tx = Tensor(x, requires_grad=True)
  tx.topk(3)[0].backward(Tensor(g))
  rx = torch.tensor(x, requires_grad=True)
  torch.topk(rx, 3)[0].backward(torch.tensor(g))
  assert tx.grad is not None and rx.grad is not None
  np.testing.assert_array_equal(tx.grad.numpy(), rx.grad.numpy())


def test_topk_of_a_vocabulary_builds_few_kernels() -> None:
  # the network's stages are a kernel each, every one different; the picks repeat the same few
  v, i = Tensor.randn(1, 50257).topk(10)
  asts = {si.ast for si in create_schedule([v.lazydata, i.lazydata]) if si.ast.op in (MetaOps.SINK, BufferOps.STORE)}
  assert len(asts) <= 30, len(asts)  # (the network: 136)
  assert v.shape == (1, 10) and i.shape == (1, 10)


def test_large_k_still_sorts(monkeypatch) -> None:
  if Device.DEFAULT == "PYTHON":
    pytest.skip("the network's 66 stages take minutes on the interpreter (test_select_ops sorts there)")
  calls: list[int] = []
  real = tensor_select.SelectMixin._sort_network
  monkeypatch.setattr(tensor_select.SelectMixin, "_sort_network", lambda self, *a: calls.append(1) or real(self, *a))
  x = np.random.default_rng(4).standard_normal(N).astype(np.float32)
  x[[4, 900]] = np.nan
  _check(x, N // 2)
  _, i = Tensor(x).topk(N, largest=False)  # all of it: NaNs last
  assert i.numpy().tolist()[-2:] == [4, 900]
  assert calls, "a k near n is a sort"
