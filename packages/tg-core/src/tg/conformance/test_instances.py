"""Two instances of the device, `NAME` and `NAME:1`: each has its own memory and state, and tensors copy between
them. A device that has one instance only must refuse `NAME:1` with an error that says so (the test then skips)."""
from __future__ import annotations

import numpy as np
import pytest

from tg import Device, Tensor
from tg.conformance._kit import device


def _second() -> str:
  base = device().split(":")[0]
  second = f"{base}:1" if device() == base else base
  try:
    Device[second]
  except Exception as e:  # any refusal will do, if it explains itself
    if not str(e).strip():
      raise AssertionError(f"{second} failed to open with an empty message: {type(e).__name__}") from e
    pytest.skip(f"{device()} refuses a second instance ({type(e).__name__}: {e}): needs two instances")
  return second


def test_instances_have_their_own_parts() -> None:
  second = _second()
  a, b = Device[device()], Device[second]
  assert a is not b and a.allocator is not b.allocator
  assert a.dname != b.dname


def test_instances_keep_separate_buffers(rng: np.random.Generator) -> None:
  second = _second()
  x, y = rng.standard_normal(33).astype(np.float32), rng.standard_normal(33).astype(np.float32)
  ta, tb = Tensor(x, device=device()).realize(), Tensor(y, device=second).realize()
  assert ta.device == device() and tb.device == second
  np.testing.assert_array_equal(ta.numpy(), x)
  np.testing.assert_array_equal(tb.numpy(), y)


@pytest.mark.needs("kernels")
def test_kernels_on_both_instances_and_copies_between(rng: np.random.Generator) -> None:
  second = _second()
  x = rng.standard_normal((4, 9)).astype(np.float32)
  ta = Tensor(x, device=device())
  tb = ta.to(second)
  ra, rb = (ta * 2).sum(1), (tb + 1).max(1)
  Tensor.realize(ra, rb)
  assert rb.device == second
  np.testing.assert_allclose(ra.numpy(), (x * 2).sum(1), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(rb.numpy(), (x + 1).max(1), rtol=1e-6)
  back = (tb * 3).to(device())
  np.testing.assert_allclose((back + ta).numpy(), 4 * x, rtol=1e-6)
