"""Kernels over 2^31 elements: loop bounds, indices and offsets that pass int32's range must be computed in 64 bits,
and kernels that stay small must keep 32-bit index math. A device without 64-bit ints in kernels (WGSL) must refuse
such a kernel with a clear error rather than compute garbage."""
import os

import numpy as np
import pytest

from tg import Device, Tensor, dtypes
from tg.codegen.kernel import Kernel
from tg.engine.schedule import create_schedule

BIG = 2**31 + 5  # just past int32's maximum
MOCK_FLAGS = {"CUDA": "CUDA_MOCK", "AMD": "AMD_MOCK", "METAL": "METAL_MOCK"}  # the GPU devices' mock modes (kernels built for the CPU)


def _has_int64() -> bool:
  return dtypes.int64 not in getattr(Device[Device.DEFAULT].renderer, "missing_dtypes", ())


def _skip_slow() -> None:
  _skip_interpreted()
  if not _has_int64():
    pytest.skip(f"{Device.DEFAULT} has no int64 in kernels: see test_no_int64_device_refuses_big_kernels")


def _skip_interpreted() -> None:
  if Device.DEFAULT == "PYTHON":
    pytest.skip("the PYTHON interpreter runs 2^31 iterations for hours")
  if (flag := MOCK_FLAGS.get(Device.DEFAULT.split(":")[0])) and os.environ.get(flag) == "1":
    pytest.skip(f"{flag} runs each of 2^31 threads as an unoptimized CPU call: minutes (each renderer's 64-bit index math is "
                "run by test_int64_index_math_is_right_on_small_kernels)")


def _sources(t: Tensor) -> list[str]:
  renderer = Device[Device.DEFAULT].renderer
  return [Kernel(si.ast, renderer).to_program().src for si in create_schedule([t.lazydata]) if si.ast.op.name in ("STORE", "SINK")]


def test_arange_int64_max_past_int32() -> None:
  _skip_slow()
  assert Tensor.arange(BIG, dtype=dtypes.int64).max().item() == BIG - 1


def test_argmax_past_int32() -> None:
  # argmax's index count passes int32 (it was int32 and wrapped to a negative index)
  _skip_slow()
  x = (Tensor.arange(BIG, dtype=dtypes.int64) == BIG - 2).cast(dtypes.int8)
  assert x.argmax().item() == BIG - 2


def test_fused_index_sum_past_int32() -> None:
  # 0..254 repeated, cut to BIG elements: the flat index of each element (past 2^31) is computed in the kernel
  _skip_slow()
  x = Tensor(np.arange(255, dtype=np.int64)).reshape(1, 255).expand(BIG // 255 + 1, 255).flatten()[:BIG]
  full, rest = divmod(BIG, 255)
  assert x.sum().item() == full * (254 * 255 // 2) + rest * (rest - 1) // 2
  assert x[BIG - 3:].sum().item() == sum((BIG - k) % 255 for k in (1, 2, 3))


def test_sum_of_expand_past_int32() -> None:
  # a (3, 2^30+7) expand of one value: the iteration space (3 * 2^30 + 21 elements) passes int32, each axis doesn't
  _skip_slow()
  n = 2**31 // 2 + 7
  got = Tensor([[1.0]]).expand(3, n).sum().item()
  assert got == pytest.approx(3 * n, rel=1e-6)  # one long float32 running sum stops at 2^24
  got_int = Tensor([[2]], dtype=dtypes.int64).expand(3, n).sum().item()
  assert got_int == 2 * 3 * n


def test_real_buffer_past_int32() -> None:
  # a 2^31+256 byte buffer (element i holds i % 256): its elements past 2^31 are written and read back by offsets
  # beyond int32
  _skip_slow()
  n = 2**31 + 256
  x = Tensor.arange(256, dtype=dtypes.int32).cast(dtypes.uint8).reshape(1, 256).expand(n // 256, 256).contiguous().flatten().realize()
  for lo, hi in ((8, 24), (2**31 - 8, 2**31 + 8), (n - 16, n)):  # not a prefix: data() copies a prefix's whole base
    np.testing.assert_equal(x[lo:hi].numpy(), (np.arange(lo, hi) % 256).astype(np.uint8))
  assert x.sum().item() == (n // 256) * (255 * 256 // 2)
  del x


# how each C-like renderer spells int64 (the source checks below)
INT64_NAMES = {"CLANG": "long long", "CUDA": "long long", "AMD": "long long", "METAL": "long "}


def _int64_name() -> str:
  if (name := INT64_NAMES.get(Device.DEFAULT.split(":")[0])) is None:
    pytest.skip("checks C-like source")
  return name


def test_small_kernels_keep_int32_indices() -> None:
  int64 = _int64_name()
  for t in (Tensor.empty(64, 48) @ Tensor.empty(48, 32), Tensor.empty(1000).sum(), Tensor.empty(16, 16).permute(1, 0).contiguous() + 1):
    for src in _sources(t):
      assert int64 not in src and "int " in src, src


def test_big_kernels_use_int64_indices() -> None:
  int64 = _int64_name()
  srcs = _sources(Tensor.empty(2**31 + 16, dtype=dtypes.uint8) + 1)
  assert any(int64 in s for s in srcs), srcs
  assert not any("int ridx" in s or "< -" in s for s in srcs), srcs


def test_no_int64_device_refuses_big_kernels() -> None:
  if _has_int64():
    pytest.skip(f"{Device.DEFAULT} has int64 in kernels")
  # a big reduction is a tree of kernels that each stay under 2^31 (so arange(BIG).max() is right there too), but the
  # first kernel of a reduction over a buffer past 2^31 elements still indexes all of it: lowering it must refuse
  # (nothing is allocated)
  with pytest.raises(ValueError, match="2\\^31"):
    _sources(Tensor.empty(2**16, 2, 2**15 + 8, dtype=dtypes.uint8).sum(axis=(0, 2), acc_dtype=dtypes.int32))


def test_int64_index_math_is_right_on_small_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
  # every renderer's 64-bit index path (loops, thread ids widened, gated loads, reductions), on kernels small enough for
  # any device: the lowerer is made to pick int64 where it would pick int32
  if not _has_int64():
    pytest.skip(f"{Device.DEFAULT} has no int64 in kernels")
  from tg.codegen import lowerer
  monkeypatch.setattr(lowerer.Lowerer, "lower", lambda self: self._lower_in(dtypes.int64))
  rng = np.random.default_rng(0)
  a, b = rng.random((33, 17), dtype=np.float32), rng.random((17, 9), dtype=np.float32)
  ta, tb = Tensor(a), Tensor(b)
  np.testing.assert_allclose((ta @ tb).numpy(), a @ b, rtol=1e-5)
  np.testing.assert_allclose(ta.pad(((1, 2), (3, 0))).sum(0).numpy(), np.pad(a, ((1, 2), (3, 0))).sum(0), rtol=1e-5)
  np.testing.assert_equal(ta.permute(1, 0)[2:9, ::3].contiguous().numpy(), a.T[2:9, ::3])
  np.testing.assert_equal(Tensor.arange(1000).reshape(10, 100).max(1).numpy(), np.arange(1000).reshape(10, 100).max(1))
  np.testing.assert_allclose(ta.softmax(1).numpy(), np.exp(a) / np.exp(a).sum(1, keepdims=True), rtol=1e-5)


def test_index_tensors_and_gather_on_an_axis_past_int32() -> None:
  """Index tensors into an axis of more than 2^31 elements: an int64 index was narrowed to int32 (t[[2**31 + 1]] read
  element 6), and an int32 index was compared with the axis size in int32, where it wrapped negative (every index
  "out of bounds")."""
  _skip_slow()
  t = (Tensor.arange(BIG, dtype=dtypes.int64) % 251).cast(dtypes.uint8).contiguous().realize()  # 2 GB
  far = 2**31 + 1
  assert t[Tensor([far], dtype=dtypes.int64)].tolist() == [far % 251]
  assert t[[far]].tolist() == [far % 251]
  assert t[Tensor([5])].tolist() == [5] and t[Tensor([-1])].tolist() == [(BIG - 1) % 251]
  assert t.gather(0, Tensor([5], dtype=dtypes.int32)).tolist() == [5]
  assert t.gather(0, Tensor([far], dtype=dtypes.int64)).tolist() == [far % 251]


@pytest.mark.parametrize("how", ["one index", "two indices", "gather", "setitem"])
def test_index_tensors_allocate_nothing_the_size_of_the_axis(how: str) -> None:
  """A tensor index selects with a one-hot mask, O(axis) work per index; the positions along the axis (an arange) and the
  mask (indices x axis bools) were each stored whole: 7 bytes per element of the axis and index, 15 GB to read one
  element of an axis of 2^31. They are integer arithmetic cheaper to compute again than to store, so the kernel that
  sums over the mask computes them."""
  from tg.helpers import GlobalCounters
  _skip_interpreted()  # (tens of millions of compares)
  n = 1 << 22
  x = Tensor([[1.5]]).expand(4, n)  # no buffer of n elements
  i0, i1 = Tensor([1, 2, 3]).realize(), Tensor([5, n - 1, 7]).realize()
  if how == "setitem":  # 32 positions written: a mask of them all would be 32 bytes per element
    x, i1 = Tensor.zeros(n).contiguous().realize(), Tensor([5, n - 1] + list(range(100, 130))).realize()
  base = GlobalCounters.mem_used
  GlobalCounters.mem_used_peak = base
  if how == "one index":
    got = x[:, i1].numpy()
    np.testing.assert_equal(got, np.full((4, 3), 1.5, np.float32))
  elif how == "two indices":
    np.testing.assert_equal(x[i0, i1].numpy(), [1.5, 1.5, 1.5])
  elif how == "gather":
    np.testing.assert_equal(x.gather(1, Tensor([[n - 1], [0], [3], [9]])).numpy().ravel(), [1.5] * 4)
  else:
    x[i1] = 2.0
    assert x[n - 2:].tolist() == [0.0, 2.0]
  # (setitem makes a new value of x, n floats, from sums over the positions written: a few bytes per element)
  limit = 16 * n if how == "setitem" else n // 8
  assert GlobalCounters.mem_used_peak - base < limit, (GlobalCounters.mem_used_peak - base) / n
