"""Large matmuls on devices that pack (Renderer.matmul_panel) copy A into row panels and B into column panels first:
the numbers and the gradients stay torch's, only the kernels change. Here the size threshold is lowered and the
device is told to pack, so every backend runs the packed path on small matrices."""
from __future__ import annotations

import numpy as np
import pytest

import tg.tensor
from tg import Device, Tensor
from tg.engine.schedule import create_schedule
from tg.helpers import Context

torch = pytest.importorskip("torch")
rng = np.random.default_rng(0)
PANEL = 8


@pytest.fixture
def packing(monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.setattr(tg.tensor, "PACK_MIN_MACS", 0)
  monkeypatch.setattr(Device[Device.DEFAULT].renderer, "matmul_panel", PANEL)


def _kernels(a_np: np.ndarray, b_np: np.ndarray) -> int:
  """The kernels of realized A @ B (a schedule is made only to be run: these tensors are used for nothing else)."""
  out = Tensor(a_np).realize() @ Tensor(b_np).realize()
  return sum(1 for si in create_schedule([out.lazydata]) if si.ast.op.name in ("STORE", "SINK"))


@pytest.mark.parametrize("a_shape,b_shape", [((48, 40), (40, 64)), ((2, 3, 16, 24), (24, 32)), ((16, 7), (7, 16))])
def test_packed_matmul_matches_torch_with_gradients(packing: None, a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> None:
  a_np, b_np = rng.standard_normal(a_shape).astype(np.float32), rng.standard_normal(b_shape).astype(np.float32)
  a, b = Tensor(a_np, requires_grad=True), Tensor(b_np, requires_grad=True)
  out = a @ b
  assert _kernels(a_np, b_np) == 3, "A's and B's packing copies, then the matmul"
  a_t, b_t = torch.tensor(a_np, requires_grad=True), torch.tensor(b_np, requires_grad=True)
  out_t = a_t @ b_t
  np.testing.assert_allclose(out.numpy(), out_t.detach().numpy(), rtol=1e-4, atol=1e-4)
  (out * out).sum().backward()
  (out_t * out_t).sum().backward()
  assert a.grad is not None and b.grad is not None and a_t.grad is not None and b_t.grad is not None
  np.testing.assert_allclose(a.grad.numpy(), a_t.grad.numpy(), rtol=1e-3, atol=1e-3)
  np.testing.assert_allclose(b.grad.numpy(), b_t.grad.numpy(), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("a_shape,b_shape", [
  ((12, 40), (40, 64)),       # M not a multiple of the panel
  ((48, 40), (40, 20)),       # N not a multiple of the panel
  ((8, 40), (40, 64)),        # M only one panel: nothing to gain
  ((2, 48, 40), (2, 40, 64)),  # batched B: a per-batch packing is not done
  ((40,), (40, 64)),          # a vector times a matrix
])
def test_shapes_that_are_not_packed(packing: None, a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> None:
  a_np, b_np = rng.standard_normal(a_shape).astype(np.float32), rng.standard_normal(b_shape).astype(np.float32)
  assert _kernels(a_np, b_np) == 1
  np.testing.assert_allclose((Tensor(a_np) @ Tensor(b_np)).numpy(), a_np @ b_np, rtol=1e-4, atol=1e-4)


def test_pack_0_turns_packing_off(packing: None) -> None:
  a, b = rng.standard_normal((32, 16)).astype(np.float32), rng.standard_normal((16, 32)).astype(np.float32)
  with Context(PACK=0):
    assert _kernels(a, b) == 1
  assert _kernels(a, b) == 3


def test_small_matmuls_are_not_packed(monkeypatch: pytest.MonkeyPatch) -> None:
  """Below PACK_MIN_MACS the operands fit in cache: packing would only add copies."""
  monkeypatch.setattr(Device[Device.DEFAULT].renderer, "matmul_panel", PANEL)
  a, b = rng.standard_normal((64, 64)).astype(np.float32), rng.standard_normal((64, 64)).astype(np.float32)
  assert 64 ** 3 < tg.tensor.PACK_MIN_MACS and _kernels(a, b) == 1
