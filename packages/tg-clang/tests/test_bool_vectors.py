"""Bool vectors as C lane masks: comparisons, their logic, selects by them, bool loads and stores stay in vectors, and
every number is numpy's (masks of other widths than the values they select, NaN, -0.0, tails, padding)."""
from __future__ import annotations

import numpy as np
import pytest

from tg import Tensor, dtypes
from tg.codegen.kernel import Kernel
from tg.engine.schedule import create_schedule
from tg_clang.renderer import ClangRenderer

WIDE = ClangRenderer().vector_width(dtypes.bool) > 1


def _kernels(t: Tensor) -> list[str]:
  items = [si for si in create_schedule([t.lazydata]) if si.ast.op.name in ("STORE", "SINK")]
  return [Kernel(si.ast, ClangRenderer()).hand_coded_optimizations().to_program().src for si in items]


def _rng() -> np.random.Generator:
  return np.random.default_rng(7)


@pytest.mark.skipif(not WIDE, reason="CLANG without vectors (CPU_VECTOR_BYTES=0)")
def test_a_masked_softmax_selects_by_vector_masks() -> None:
  """The causal mask of attention, a bool buffer, is read 16 bytes at a time into a mask (it was read and selected
  lane by lane: 16 byte loads and 16 scalar selects per vector); the exp2 expansion's NaN and range tests stay vectors."""
  m = Tensor(np.tril(np.ones((64, 64), bool)), device="CLANG").realize()
  x = Tensor(_rng().standard_normal((64, 64)).astype(np.float32), device="CLANG").realize()
  srcs = _kernels(m.where(x, -float("inf")).softmax(-1))
  assert any("unsigned_char" in s and "__builtin_convertvector" in s for s in srcs), srcs
  assert not any("_Bool alu" in s for s in srcs), "no scalar bool lane left"


def test_masked_softmax_numbers() -> None:
  a = _rng().standard_normal((3, 64, 64)).astype(np.float32)
  m = np.tril(np.ones((64, 64), bool))
  got = Tensor(m, device="CLANG").where(Tensor(a, device="CLANG"), -float("inf")).softmax(-1).numpy()
  ref = np.where(m, a, -np.inf)
  ref = np.exp(ref - ref.max(-1, keepdims=True))
  np.testing.assert_allclose(got, ref / ref.sum(-1, keepdims=True), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("n", [1, 15, 16, 17, 33, 1000])
def test_comparisons_stored_as_bools(n: int) -> None:
  """A vector of comparisons written to a bool buffer as bytes of 0 and 1, the tail lane by lane."""
  a = _rng().standard_normal(n).astype(np.float32)
  a[::5] = np.nan
  t = Tensor(a, device="CLANG")
  for got, ref in (((t < 0.1), a < 0.1), ((t != t), a != a), ((t > 0) & (t < 1), (a > 0) & (a < 1)), (~(t > 0), ~(a > 0)),
                   ((t > 0) | (t != t), (a > 0) | (a != a)), ((t > 0) ^ (t < 1), (a > 0) ^ (a < 1))):
    out = got.numpy()
    assert out.dtype == np.bool_ and np.array_equal(out, ref)
    assert set(np.unique(out.view(np.uint8))) <= {0, 1}, "bools are stored as 0 and 1"


def test_bool_buffers_read_in_vectors_select_every_dtype() -> None:
  """A bool buffer read into a mask of 32-bit lanes selects float32 and int32 in vectors; float64, int64, int8 and
  float16 values (other lane widths) go lane by lane, with the same numbers."""
  rng = _rng()
  c = rng.random(100) < 0.5
  cond = Tensor(c, device="CLANG")
  for dt, npdt in ((dtypes.float32, np.float32), (dtypes.int32, np.int32), (dtypes.float64, np.float64), (dtypes.int64, np.int64),
                   (dtypes.int8, np.int8), (dtypes.float16, np.float16)):
    a, b = (rng.integers(-100, 100, 100).astype(npdt) for _ in range(2))
    got = cond.where(Tensor(a, device="CLANG"), Tensor(b, device="CLANG")).numpy()
    assert got.dtype == npdt and np.array_equal(got, np.where(c, a, b)), dt


def test_masks_of_other_widths_than_the_values() -> None:
  """A comparison of doubles (a mask of 64-bit lanes) selecting floats, of bytes selecting floats, of floats selecting
  doubles: each number as numpy's."""
  rng = _rng()
  d = rng.standard_normal(64)
  f = rng.standard_normal(64).astype(np.float32)
  i8 = rng.integers(-5, 5, 64).astype(np.int8)
  D, F, I8 = (Tensor(x, device="CLANG") for x in (d, f, i8))
  np.testing.assert_array_equal((D > 0).where(F, 0).numpy(), np.where(d > 0, f, 0).astype(np.float32))
  np.testing.assert_array_equal((I8 < 0).where(F, -F).numpy(), np.where(i8 < 0, f, -f))
  np.testing.assert_array_equal((F > 0).where(D, 1.5).numpy(), np.where(f > 0, d, 1.5))
  np.testing.assert_array_equal(((D > 0) & (F > 0)).numpy(), (d > 0) & (f > 0))


def test_casts_to_and_from_bool_vectors() -> None:
  """float -> bool is != 0 (NaN true, -0.0 false); bool -> number is 1 or 0, never a mask's -1."""
  a = np.array([0.0, -0.0, np.nan, np.inf, -1e-45, 2.5, -3.0, 1.0] * 5, np.float32)
  t = Tensor(a, device="CLANG")
  np.testing.assert_array_equal(t.cast(dtypes.bool).numpy(), a.astype(bool))
  np.testing.assert_array_equal((t > 0).cast(dtypes.float32).numpy(), (a > 0).astype(np.float32))
  np.testing.assert_array_equal((t > 0).cast(dtypes.int32).numpy(), (a > 0).astype(np.int32))
  np.testing.assert_array_equal(((t > 0) * 3.0).numpy(), (a > 0) * np.float32(3.0))
  assert (t > 0).sum().item() == int((a > 0).sum())


def test_bool_reads_through_padding_and_views() -> None:
  """Masked (padded) and strided reads of a bool buffer: lanes out of the buffer get the pad's False."""
  rng = _rng()
  c = rng.random((20, 30)) < 0.5
  x = rng.standard_normal((22, 34)).astype(np.float32)
  cond = Tensor(c, device="CLANG").pad(((1, 1), (2, 2)))
  np.testing.assert_array_equal(cond.where(Tensor(x, device="CLANG"), 7.0).numpy(), np.where(np.pad(c, ((1, 1), (2, 2))), x, 7.0))
  got = Tensor(c, device="CLANG")[:, 1::2].where(Tensor(x[:20, :15], device="CLANG"), -1.0).numpy()
  np.testing.assert_array_equal(got, np.where(c[:, 1::2], x[:20, :15], -1.0))
  np.testing.assert_array_equal(Tensor(c, device="CLANG").T.contiguous().numpy(), c.T)
