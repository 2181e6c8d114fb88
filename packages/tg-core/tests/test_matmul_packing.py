"""Large matmul-like sums on devices that pack (Renderer.matmul_panel) read copies of their operands in panels (a
matmul's A in row panels, its B in column panels, a conv's weight in output-channel panels): the numbers and the
gradients stay torch's, only the kernels change. Here the size threshold is lowered and the
device is told to pack, so every backend runs the packed path on small matrices."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import tg.lazy
from tg import Device, Tensor, dtypes
from tg.device import is_dtype_supported
from tg.engine.schedule import create_schedule
from tg.helpers import Context, prod

torch = pytest.importorskip("torch")
rng = np.random.default_rng(0)
PANEL = 8


@pytest.fixture
def packing(monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.setattr(tg.lazy, "PACK_MIN_MACS", 0)
  monkeypatch.setattr(Device[Device.DEFAULT].renderer, "matmul_panel", PANEL)
  monkeypatch.setattr(Device[Device.DEFAULT].renderer, "matmul_panel_rows", PANEL)


def _panel_widths(a_np: np.ndarray, b_np: np.ndarray) -> dict[str, int]:
  """The panel each operand of A @ B was packed in (the innermost size of its packing copy), by operand name."""
  a, b = Tensor(a_np).realize(), Tensor(b_np).realize()
  names = {id(a.lazydata.base.buffer): "A", id(b.lazydata.base.buffer): "B"}
  copies = [si for si in create_schedule([(a @ b).lazydata]) if si.ast.op.name == "STORE" and si.ast.src[0].op.name == "LOAD"]
  return {names[id(si.inputs[0])]: next(s for s in reversed(si.ast.arg.st.shape) if s != 1) for si in copies}


def _kernels(a_np: np.ndarray, b_np: np.ndarray) -> int:
  """The kernels of A @ B on realized inputs. The schedule made here is never run, so these tensors are used for
  nothing else (a scheduled but unrun graph would read as computed)."""
  out = Tensor(a_np).realize() @ Tensor(b_np).realize()
  return sum(1 for si in create_schedule([out.lazydata]) if si.ast.op.name in ("STORE", "SINK"))


@pytest.mark.parametrize("a_shape,b_shape", [((48, 40), (40, 64)), ((2, 3, 16, 24), (24, 32)), ((16, 7), (7, 16)),
                                             ((2, 48, 40), (2, 40, 64))])
def test_packed_matmul_matches_torch_with_gradients(packing: None, a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> None:
  a_np, b_np = rng.standard_normal(a_shape).astype(np.float32), rng.standard_normal(b_shape).astype(np.float32)
  assert _kernels(a_np, b_np) == 3, "A's and B's packing copies, then the matmul"
  _check_matmul_and_grads(a_np, b_np)


def _check_matmul_and_grads(a_np: np.ndarray, b_np: np.ndarray) -> None:
  """A @ B and the gradients of sum((A @ B)^2) are torch's."""
  _same_as_torch(lambda a, b: a @ b, a_np, b_np)


def _same_as_torch(f: Any, a_np: np.ndarray, b_np: np.ndarray) -> None:
  """f(a, b) and the gradients of sum(f(a, b)^2) are torch's (f uses only what tg and torch share: @, transpose, reshape)."""
  a, b = Tensor(a_np, requires_grad=True), Tensor(b_np, requires_grad=True)
  a_t, b_t = torch.tensor(a_np, requires_grad=True), torch.tensor(b_np, requires_grad=True)
  out, out_t = f(a, b), f(a_t, b_t)
  np.testing.assert_allclose(out.numpy(), out_t.detach().numpy(), rtol=1e-4, atol=1e-4)
  (out * out).sum().backward()
  (out_t * out_t).sum().backward()
  assert a.grad is not None and b.grad is not None and a_t.grad is not None and b_t.grad is not None
  np.testing.assert_allclose(a.grad.numpy(), a_t.grad.numpy(), rtol=1e-3, atol=1e-3)
  np.testing.assert_allclose(b.grad.numpy(), b_t.grad.numpy(), rtol=1e-3, atol=1e-3)


def test_transposed_operands_are_packed(packing: None) -> None:
  """A and B read through transposes: the panels are copied from the views, whatever their strides."""
  a_np, b_np = rng.standard_normal((40, 48)).astype(np.float32), rng.standard_normal((64, 40)).astype(np.float32)
  out = Tensor(a_np).realize().T @ Tensor(b_np).realize().T
  assert sum(1 for si in create_schedule([out.lazydata]) if si.ast.op.name in ("STORE", "SINK")) == 3
  np.testing.assert_allclose((Tensor(a_np).T @ Tensor(b_np).T).numpy(), a_np.T @ b_np.T, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("a_shape,b_shape,packed", [
  ((12, 40), (40, 64), 1),    # M not a multiple of the panel: only B is packed
  ((48, 40), (40, 20), 1),    # N not a multiple of the panel: only A
  ((8, 40), (40, 64), 1),     # M only one panel: nothing to gain for A
  ((12, 40), (40, 20), 0),    # neither side
  ((40,), (40, 64), 1),       # a vector times a matrix: B only
])
def test_sides_that_are_not_packed(packing: None, a_shape: tuple[int, ...], b_shape: tuple[int, ...], packed: int) -> None:
  a_np, b_np = rng.standard_normal(a_shape).astype(np.float32), rng.standard_normal(b_shape).astype(np.float32)
  assert _kernels(a_np, b_np) == 1 + packed
  np.testing.assert_allclose((Tensor(a_np) @ Tensor(b_np)).numpy(), a_np @ b_np, rtol=1e-4, atol=1e-4)


def _conv_kernels(x_shape: tuple[int, ...], w_shape: tuple[int, ...], **kw: Any) -> tuple[list[Any], np.ndarray, np.ndarray]:
  """The kernels (ScheduleItems) of a conv of realized inputs, and the inputs. The schedule is never run (see _kernels)."""
  x_np, w_np = rng.standard_normal(x_shape).astype(np.float32), rng.standard_normal(w_shape).astype(np.float32)
  out = Tensor(x_np).realize().conv2d(Tensor(w_np).realize(), **kw)
  return [si for si in create_schedule([out.lazydata]) if si.ast.op.name in ("STORE", "SINK")], x_np, w_np


def _check_conv_and_grads(x_np: np.ndarray, w_np: np.ndarray, **kw: Any) -> None:
  """The conv and the gradients of its sum are torch's."""
  x_t, w_t = torch.tensor(x_np, requires_grad=True), torch.tensor(w_np, requires_grad=True)
  x, w = Tensor(x_np, requires_grad=True), Tensor(w_np, requires_grad=True)
  y, y_t = x.conv2d(w, **kw), torch.nn.functional.conv2d(x_t, w_t, **kw)
  np.testing.assert_allclose(y.numpy(), y_t.detach().numpy(), rtol=1e-4, atol=1e-4)
  y.sum().backward()
  y_t.sum().backward()
  assert x.grad is not None and w.grad is not None and x_t.grad is not None and w_t.grad is not None
  np.testing.assert_allclose(w.grad.numpy(), w_t.grad.numpy(), rtol=1e-3, atol=1e-3)
  np.testing.assert_allclose(x.grad.numpy(), x_t.grad.numpy(), rtol=1e-3, atol=1e-3)


def _masked_loads(si: Any) -> int:
  return sum(1 for op in si.ast.lazyops() if op.op.name == "LOAD" and any(v.mask is not None for v in op.arg.st.views))


def test_conv_weight_is_packed_and_its_padded_image_copied_once(packing: None) -> None:
  """A conv's weight moves along the output channels, which its input is broadcast on: it is packed in panels of
  output channels. Its image is a sliding window (each element read by 9 outputs' windows), which a panel copy would
  store 9 times; it is copied once instead, padding and all (1 x 4 x 8 x 8 for a 6 x 6 image padded by 1), so that the
  conv's kernel reads it with no masks. The numbers and the gradients stay torch's."""
  kernels, x_np, w_np = _conv_kernels((1, 4, 6, 6), (16, 4, 3, 3), padding=1)
  assert len(kernels) == 3, "the image's padded copy, the weight's panels, the conv"
  copies = sorted(prod(si.ast.arg.st.shape) for si in kernels[:-1])
  assert copies == [4 * 8 * 8, 16 * 4 * 3 * 3], copies
  assert _masked_loads(kernels[-1]) == 0
  _check_conv_and_grads(x_np, w_np, padding=1)


def test_unpadded_conv_reads_its_image_in_place(packing: None) -> None:
  """Without padding the image is read as it is: only the weight is copied (an im2col copy of the image would be 9
  times its size)."""
  kernels, x_np, w_np = _conv_kernels((2, 4, 9, 10), (16, 4, 3, 3))
  assert len(kernels) == 2 and prod(kernels[0].ast.arg.st.shape) == 16 * 4 * 3 * 3
  _check_conv_and_grads(x_np, w_np)


def test_a_padding_larger_than_the_image_keeps_its_masks(packing: None) -> None:
  """A copy of a padded region more than MAX_PADDED_COPY times the image (3 x 3 padded by 4: 11 x 11) isn't made: the
  conv reads the image through its masks, with the same numbers."""
  from tg.engine.packing import MAX_PADDED_COPY
  kernels, x_np, w_np = _conv_kernels((1, 4, 3, 3), (16, 4, 3, 3), padding=4)
  assert 11 * 11 > MAX_PADDED_COPY * 3 * 3
  assert len(kernels) == 2 and _masked_loads(kernels[-1]) > 0
  _check_conv_and_grads(x_np, w_np, padding=4)


def test_a_padded_matmul_operand_is_packed_from_its_view(packing: None) -> None:
  """A padded operand that is packed in panels anyway (A of A @ B, padded along K) is copied once, into its panels,
  straight from the padded view: no padded copy first."""
  a_np, b_np = rng.standard_normal((16, 20)).astype(np.float32), rng.standard_normal((24, 32)).astype(np.float32)
  a, b = Tensor(a_np).realize(), Tensor(b_np).realize()
  out = a.pad(((0, 0), (2, 2))) @ b
  kernels = [si for si in create_schedule([out.lazydata]) if si.ast.op.name in ("STORE", "SINK")]
  assert len(kernels) == 3 and _masked_loads(kernels[-1]) == 0
  ref = np.pad(a_np, ((0, 0), (2, 2))) @ b_np
  np.testing.assert_allclose((Tensor(a_np).pad(((0, 0), (2, 2))) @ Tensor(b_np)).numpy(), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rows", [4, 2])
def test_rows_panel_is_the_tiles_rows(packing: None, monkeypatch: pytest.MonkeyPatch, rows: int) -> None:
  """With matmul_panel_rows set, A (whose own axis, the rows, is not the output's innermost) is packed in panels of
  that many rows and B in panels of matmul_panel; the product is still torch's, its gradients too."""
  monkeypatch.setattr(Device[Device.DEFAULT].renderer, "matmul_panel_rows", rows)
  a_np, b_np = rng.standard_normal((12, 40)).astype(np.float32), rng.standard_normal((40, 64)).astype(np.float32)
  assert _panel_widths(a_np, b_np) == {"A": rows, "B": PANEL}
  _check_matmul_and_grads(a_np, b_np)


def test_rows_panel_follows_the_output_not_the_argument_order(packing: None, monkeypatch: pytest.MonkeyPatch) -> None:
  """The rows panel goes to the operand whose own axis is the output's outer one, whichever side of the multiply it
  is on: (B-side * A-side).sum(), with B first, packs A in rows panels all the same."""
  monkeypatch.setattr(Device[Device.DEFAULT].renderer, "matmul_panel_rows", 4)
  a_np, b_np = rng.standard_normal((16, 40)).astype(np.float32), rng.standard_normal((40, 32)).astype(np.float32)
  a, b = Tensor(a_np).realize(), Tensor(b_np).realize()
  out = (b.T.reshape(1, 32, 40) * a.reshape(16, 1, 40)).sum(2)
  names = {id(a.lazydata.base.buffer): "A", id(b.lazydata.base.buffer): "B"}
  copies = [si for si in create_schedule([out.lazydata]) if si.ast.op.name == "STORE" and si.ast.src[0].op.name == "LOAD"]
  assert {names[id(si.inputs[0])]: next(s for s in reversed(si.ast.arg.st.shape) if s != 1) for si in copies} == {"A": 4, "B": PANEL}
  np.testing.assert_allclose((b.T.reshape(1, 32, 40) * a.reshape(16, 1, 40)).sum(2).numpy(), a_np @ b_np, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("m,long,packed", [(64, False, True), (20, False, False), (64, True, False)])
def test_rows_the_tile_pads_are_packed_in_padded_panels(packing: None, monkeypatch: pytest.MonkeyPatch, m: int, long: bool,
                                                        packed: bool) -> None:
  """A register tile of 6 rows pads a row axis that 6 doesn't divide (AVX2's 512 rows: 516) and never stores the
  padded rows. A's row panels are padded alike: 64 rows are copied as 66 (11 panels of 6, the last two rows zeros) and
  the sum reads the real 64 through a view. 20 rows would need 4 more, past MAX_ROW_PADDING: A is read in place. So is
  A where B's panel over the whole reduction is larger than the L1 (`long`). The product and both gradients (the
  weight gradient dy.T @ x is such a sum) are torch's."""
  from tg.codegen.heuristics.cpu import row_padding
  renderer = Device[Device.DEFAULT].renderer
  if renderer.cpu_target is None:
    pytest.skip(f"{Device.DEFAULT} has no CPU target: no L1 to fit, no tile rows to pad")
  monkeypatch.setattr(renderer, "matmul_panel_rows", 6)
  assert (row_padding(m, 6) == (6,)) is (packed or long)
  k = renderer.cpu_target.l1d_bytes // (4 * PANEL) + PANEL if long else 40
  # B scaled by 1/sqrt(k): the product and the gradients stay near 1 whatever k (2056 for aarch64's 64 KiB L1d), so
  # float32 sums in another order stay within the comparison's tolerance
  a_np, b_np = rng.standard_normal((m, k)).astype(np.float32), (rng.standard_normal((k, 64)) / np.sqrt(k)).astype(np.float32)
  assert _panel_widths(a_np, b_np) == ({"A": 6, "B": PANEL} if packed else {"B": PANEL})
  a, b = Tensor(a_np).realize(), Tensor(b_np).realize()
  copies = [si for si in create_schedule([(a @ b).lazydata]) if len(si.inputs) == 1 and si.inputs[0] is a.lazydata.base.buffer]
  assert [si.outputs[0].size for si in copies] == ([-(-m // 6) * 6 * k] if packed else [])
  _check_matmul_and_grads(a_np, b_np)
  _same_as_torch(lambda dy, x: dy.T @ x, rng.standard_normal((k, m)).astype(np.float32),
                 (rng.standard_normal((k, 64)) / np.sqrt(k)).astype(np.float32))


@pytest.mark.parametrize("dtype", ["int32", "float16"])
def test_padded_row_panels_keep_integer_and_half_results(packing: None, monkeypatch: pytest.MonkeyPatch, dtype: str) -> None:
  """The zero rows a padded panel adds are never part of a result. float16 operands are widened to float32, and the
  widened A is what gets the padded panels (66 x 40); the result is numpy's float32 sum rounded once. int32 sums are
  not packed at all: exact, as numpy's. Both forms: A @ B and the weight-gradient form dy.T @ x."""
  if dtype == "float16" and not is_dtype_supported(dtypes.float16):
    pytest.skip("the device has no float16 (Renderer.missing_dtypes)")
  if Device[Device.DEFAULT].renderer.cpu_target is None:
    pytest.skip(f"{Device.DEFAULT} has no CPU target: no tile rows to pad")
  monkeypatch.setattr(Device[Device.DEFAULT].renderer, "matmul_panel_rows", 6)
  ints = dtype == "int32"
  def make(*shape: int) -> np.ndarray:
    return rng.integers(-5, 5, shape).astype(np.int32) if ints else (rng.standard_normal(shape) / 4).astype(np.float16)
  a_np, b_np, dy_np = make(64, 40), make(40, 64), make(40, 64)
  sizes = [si.outputs[0].size for si in create_schedule([(Tensor(a_np).realize() @ Tensor(b_np).realize()).lazydata])]
  assert (66 * 40 in sizes) is not ints, sizes
  for got, want in (((Tensor(a_np) @ Tensor(b_np)).numpy(), a_np.astype(np.float32) @ b_np.astype(np.float32)),
                    ((Tensor(dy_np).T @ Tensor(b_np)).numpy(), dy_np.T.astype(np.float32) @ b_np.astype(np.float32))):
    if ints:
      np.testing.assert_array_equal(got, want.astype(np.int32))
    else:
      np.testing.assert_allclose(got.astype(np.float32), want, rtol=1e-2, atol=2e-2)


def test_pack_0_turns_packing_off(packing: None) -> None:
  a, b = rng.standard_normal((32, 16)).astype(np.float32), rng.standard_normal((16, 32)).astype(np.float32)
  with Context(PACK=0):
    assert _kernels(a, b) == 1
  assert _kernels(a, b) == 3


def test_small_matmuls_are_not_packed(monkeypatch: pytest.MonkeyPatch) -> None:
  """Below PACK_MIN_MACS the operands fit in cache: packing would only add copies."""
  monkeypatch.setattr(Device[Device.DEFAULT].renderer, "matmul_panel", PANEL)
  monkeypatch.setattr(Device[Device.DEFAULT].renderer, "matmul_panel_rows", PANEL)
  a, b = rng.standard_normal((64, 64)).astype(np.float32), rng.standard_normal((64, 64)).astype(np.float32)
  assert 64 ** 3 < tg.lazy.PACK_MIN_MACS and _kernels(a, b) == 1


def test_cpu_heuristics_vectorize_a_packed_conv_along_output_channels(monkeypatch: pytest.MonkeyPatch) -> None:
  """A packed weight's output channels fill whole vectors: the tile is the target's register tile, its vectors along
  the channels and its rows along the output columns, though the image (read from its padded copy, with no masks) is
  contiguous along them too."""
  from tg.codegen.heuristics.cpu import register_tile, renderer_target
  from tg.codegen.kernel import Kernel, OptOps
  from tg.dtype import dtypes
  renderer = Device[Device.DEFAULT].renderer
  width = renderer.vector_width(dtypes.float32)
  if renderer.global_ids or width < 8:  # 24 columns: a whole number of the tile's rows (6 with AVX2, 8 with AVX-512)
    pytest.skip(f"{Device.DEFAULT} gets the workgroup heuristics or has no 8-float vectors")
  tile = register_tile(renderer_target(renderer))
  monkeypatch.setattr(tg.lazy, "PACK_MIN_MACS", 0)
  monkeypatch.setattr(renderer, "matmul_panel", width)
  x_np, w_np = rng.standard_normal((1, 4, 8, 24)).astype(np.float32), rng.standard_normal((4 * width, 4, 3, 3)).astype(np.float32)
  x, w = Tensor(x_np).realize(), Tensor(w_np).realize()
  conv = [si for si in create_schedule([x.conv2d(w, padding=1).lazydata]) if si.ast.op.name == "STORE"][-1]
  k = Kernel(conv.ast, renderer).hand_coded_optimizations()
  upcasts = [(o.axis, o.amt) for o in k.applied_opts if o.op is OptOps.UPCAST]
  assert sorted(a for _, a in upcasts) == sorted([tile.rows, width, tile.vectors]), k.applied_opts
  vec = k.vector_axis()
  assert vec is not None and k.full_shape[vec] == width
  torch_out = torch.nn.functional.conv2d(torch.tensor(x_np), torch.tensor(w_np), padding=1).numpy()
  np.testing.assert_allclose(x.conv2d(w, padding=1).numpy(), torch_out, rtol=1e-4, atol=1e-4)


def test_cpu_heuristics_copy_b_into_panels_in_runs_of_its_rows(monkeypatch: pytest.MonkeyPatch) -> None:
  """B's packing copy reads READ_RUN_BYTES of each row per iteration (several neighbouring panels), not one panel's
  vector per row: the panel axis is upcast on top of the vector. A plain transpose, whose vectors gather down a
  column, gets no such upcast. The numbers are the same either way."""
  from tg.codegen.heuristics.cpu import READ_RUN_BYTES
  from tg.codegen.kernel import Kernel, OptOps
  from tg.dtype import dtypes
  renderer = Device[Device.DEFAULT].renderer
  width = renderer.vector_width(dtypes.float32)
  if renderer.global_ids or width < 4:
    pytest.skip(f"{Device.DEFAULT} gets the workgroup heuristics or has no float vectors")
  monkeypatch.setattr(tg.lazy, "PACK_MIN_MACS", 0)
  monkeypatch.setattr(renderer, "matmul_panel", width)
  monkeypatch.setattr(renderer, "matmul_panel_rows", width)
  a_np = rng.standard_normal((2 * width, 24)).astype(np.float32)
  b_np = rng.standard_normal((24, 16 * width)).astype(np.float32)
  a, b = Tensor(a_np).realize(), Tensor(b_np).realize()
  copies = [si for si in create_schedule([(a @ b).lazydata]) if si.ast.op.name == "STORE" and si.ast.src[0].op.name == "LOAD"]
  b_copy = next(si for si in copies if si.inputs[0] is b.lazydata.base.buffer)
  upcasts = [o.amt for o in Kernel(b_copy.ast, renderer).hand_coded_optimizations().applied_opts if o.op is OptOps.UPCAST]
  assert upcasts == [width, READ_RUN_BYTES // (4 * width)], upcasts
  t = Tensor(rng.standard_normal((16 * width, 24)).astype(np.float32)).realize()
  transpose = create_schedule([t.T.contiguous().lazydata])[-1]
  assert [o.amt for o in Kernel(transpose.ast, renderer).hand_coded_optimizations().applied_opts] == [width]
  np.testing.assert_allclose((a @ b).numpy(), a_np @ b_np, rtol=1e-4, atol=1e-4)


def test_a_reduction_spanning_the_l2_is_packed_below_the_size_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
  """A sum of PACK_MIN_MACS_LONG or more products whose operand's reads along the reduction span the device's L2 (a
  weight gradient over batch x time, rows far apart: the strip the register tile sweeps can't stay in L2) is packed
  though it is below PACK_MIN_MACS; a sum of the same size whose reads span less isn't. The L2 is the CPU target's,
  pinned here to 64 KiB: B of (1024, 16) float32 spans 64 KiB, and so does B of (256, 64)."""
  import dataclasses
  renderer = Device[Device.DEFAULT].renderer
  if renderer.cpu_target is None:
    pytest.skip(f"{Device.DEFAULT} has no CPU target: its sums are packed by size alone")
  monkeypatch.setattr(renderer, "matmul_panel", PANEL)
  monkeypatch.setattr(renderer, "matmul_panel_rows", PANEL)
  monkeypatch.setattr(renderer, "cpu_target", dataclasses.replace(renderer.cpu_target, l2_bytes=64 << 10))
  monkeypatch.setattr(tg.lazy, "PACK_MIN_MACS_LONG", 1 << 14)
  n = 1024
  long_a, long_b = rng.standard_normal((16, n)).astype(np.float32), rng.standard_normal((n, 16)).astype(np.float32)
  assert 16 * 16 * n < tg.lazy.PACK_MIN_MACS and _kernels(long_a, long_b) == 3
  np.testing.assert_allclose((Tensor(long_a) @ Tensor(long_b)).numpy(), long_a @ long_b, rtol=1e-4, atol=1e-3)
  # a reduction of 256 over rows of 64 floats spans 64 KiB too: it is the span, not the reduction's length, that counts
  wide_a, wide_b = rng.standard_normal((16, 256)).astype(np.float32), rng.standard_normal((256, 64)).astype(np.float32)
  assert _kernels(wide_a, wide_b) == 3
  short_a, short_b = rng.standard_normal((128, 64)).astype(np.float32), rng.standard_normal((64, 32)).astype(np.float32)
  assert _kernels(short_a, short_b) == 1


@pytest.fixture
def short_dots(monkeypatch: pytest.MonkeyPatch) -> None:
  """A CPU target's device, told to pack in panels of PANEL from 2^10 products on (PACK_MIN_MACS_LAYOUT)."""
  renderer = Device[Device.DEFAULT].renderer
  if renderer.cpu_target is None:
    pytest.skip(f"{Device.DEFAULT} has no CPU target: it computes no dot tiles")
  monkeypatch.setattr(renderer, "matmul_panel", PANEL)
  monkeypatch.setattr(renderer, "matmul_panel_rows", PANEL)
  monkeypatch.setattr(tg.lazy, "PACK_MIN_MACS_LAYOUT", 1 << 10)


def test_a_short_contraction_of_contiguous_operands_is_packed(short_dots: None) -> None:
  """Attention scores q @ k.T: both operands contiguous along a short reduction (16 floats here, 64 in GPT-2), which a
  CPU would compute as dot products, each output's vector lanes added up after a few steps. From PACK_MIN_MACS_LAYOUT
  products k is read from panels instead (its copy is one more kernel) and the register tile broadcasts q. A
  contraction longer than SHORT_DOT_BYTES keeps the dot products. Numbers and gradients are torch's."""
  from tg.engine.packing import SHORT_DOT_BYTES
  q_np, k_np = rng.standard_normal((2, 32, 16)).astype(np.float32), rng.standard_normal((2, 32, 16)).astype(np.float32)
  q, k = Tensor(q_np).realize(), Tensor(k_np).realize()
  items = [si for si in create_schedule([(q @ k.transpose(1, 2)).lazydata]) if si.ast.op.name in ("STORE", "SINK")]
  copied = [si.inputs[0] for si in items[:-1] if si.ast.op.name == "STORE" and si.ast.src[0].op.name == "LOAD"]
  assert any(b is k.lazydata.base.buffer for b in copied), [si.ast.op for si in items]
  _same_as_torch(lambda q, k: q @ k.transpose(1, 2), q_np, k_np)
  n = SHORT_DOT_BYTES // 4 * 2
  long_q, long_k = rng.standard_normal((2, 32, n)).astype(np.float32), rng.standard_normal((2, 32, n)).astype(np.float32)
  assert prod((2, 32, 32, n)) < min(tg.lazy.PACK_MIN_MACS, tg.lazy.PACK_MIN_MACS_LONG)
  out = Tensor(long_q).realize() @ Tensor(long_k).realize().transpose(1, 2)
  assert sum(1 for si in create_schedule([out.lazydata]) if si.ast.op.name in ("STORE", "SINK")) == 1


@pytest.mark.skipif(not is_dtype_supported(dtypes.float16), reason="the device has no float16 (Renderer.missing_dtypes)")
def test_a_short_float16_contraction_is_packed(short_dots: None) -> None:
  """float16 operands of a short contraction (a 32-byte run here) are summed in float32, as every float16 matmul is:
  the widened copies are what the main kernel reads, packed like float32 operands. The result is float16."""
  q_np, k_np = (rng.standard_normal((2, 32, 16)).astype(np.float16) for _ in range(2))
  q16, k16 = Tensor(q_np).realize(), Tensor(k_np).realize()
  items = [si for si in create_schedule([(q16 @ k16.transpose(1, 2)).lazydata]) if si.ast.op.name in ("STORE", "SINK")]
  assert len(items) >= 3 and items[-1].outputs[0].dtype == dtypes.float16, [si.ast.op for si in items]
  ref = q_np.astype(np.float32) @ k_np.astype(np.float32).transpose(0, 2, 1)
  np.testing.assert_allclose((q16 @ k16.transpose(1, 2)).numpy().astype(np.float32), ref, rtol=1e-2, atol=5e-2)

def test_an_operand_with_no_plain_strides_is_read_from_a_plain_copy(monkeypatch: pytest.MonkeyPatch) -> None:
  """A transposed attention output, (heads, positions, features) read as positions x (heads x features), has no stride
  along the merged reduce axis: its rows are runs of 16 floats far apart. Below the panel threshold it is read from a
  plain copy (one more kernel, the matmul then reads plain rows); the numbers and gradients are torch's."""
  from tg.ops import BufferOps
  renderer = Device[Device.DEFAULT].renderer
  monkeypatch.setattr(renderer, "matmul_panel", PANEL)
  monkeypatch.setattr(renderer, "matmul_panel_rows", PANEL)
  monkeypatch.setattr(tg.lazy, "PACK_MIN_MACS_LAYOUT", 1 << 10)
  att_np, w_np = rng.standard_normal((1, 4, 32, 16)).astype(np.float32), rng.standard_normal((64, 48)).astype(np.float32)
  att, w = Tensor(att_np).realize(), Tensor(w_np).realize()
  out = att.transpose(1, 2).reshape(1, 32, 64) @ w
  assert prod(out.shape) * 64 < tg.lazy.PACK_MIN_MACS
  items = [si for si in create_schedule([out.lazydata]) if si.ast.op.name in ("STORE", "SINK")]
  loads = [op.arg.st.real_strides() for op in items[-1].ast.lazyops() if op.op is BufferOps.LOAD]
  assert len(items) == 2 and all(None not in st for st in loads), loads
  _same_as_torch(lambda att, w: att.transpose(1, 2).reshape(1, 32, 64) @ w, att_np, w_np)


def test_a_sum_over_leading_axes_is_packed_in_runs_of_the_whole_reduction(packing: None) -> None:
  """x.T @ dy summed over leading (batch, time) axes, as a weight gradient is: each packed panel holds every (b, t) of
  its p columns in one run, so the sum's innermost reduce axis reads the panel with stride p and the outer one with
  stride (time x p); the panel's block index comes before the reduce axes (not after them, which would copy the
  operand into its own layout)."""
  from tg.ops import BufferOps
  x_np, dy_np = rng.standard_normal((4, 6, 16)).astype(np.float32), rng.standard_normal((4, 6, 24)).astype(np.float32)
  x, dy = Tensor(x_np).realize(), Tensor(dy_np).realize()
  out = (x.reshape(4, 6, 16, 1) * dy.reshape(4, 6, 1, 24)).sum((0, 1))
  items = [si for si in create_schedule([out.lazydata]) if si.ast.op.name in ("STORE", "SINK")]
  main = items[-1]
  loads = [op.arg.st.real_strides() for op in main.ast.lazyops() if op.op is BufferOps.LOAD]
  assert len(items) == 3 and sorted(st[:2] for st in loads) == [(6 * PANEL, PANEL), (6 * PANEL, PANEL)], loads
  ref = torch.einsum("btm,btn->mn", torch.tensor(x_np), torch.tensor(dy_np)).numpy()
  np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-4)


def test_a_computed_operand_is_computed_before_its_panel_copy(packing: None) -> None:
  """An operand that is itself computed (gelu(h) @ W, a gradient's long expression) is computed in its own layout by
  its own kernel and then copied into panels; fused into the panel copy, its math ran in panel order with its inputs
  gathered a few lanes at a time."""
  h_np, w_np = rng.standard_normal((32, 24)).astype(np.float32), rng.standard_normal((24, 16)).astype(np.float32)
  h, w = Tensor(h_np).realize(), Tensor(w_np).realize()
  out = h.gelu() @ w
  items = [si for si in create_schedule([out.lazydata]) if si.ast.op.name in ("STORE", "SINK")]
  copies = [si for si in items if si.ast.op.name == "STORE" and si.ast.src[0].op.name == "LOAD"]
  assert len(items) == 4 and len(copies) == 2, [si.ast.op for si in items]  # gelu, two panel copies, the matmul
  ref = torch.nn.functional.gelu(torch.tensor(h_np), approximate="tanh") @ torch.tensor(w_np)
  np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-4, atol=1e-4)
