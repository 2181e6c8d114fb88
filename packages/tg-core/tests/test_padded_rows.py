"""PADTO's padded outputs are computed from in-bounds reads, not masked ones (tg.codegen.lowerer: _stored_where,
_unmasked_index), and the AVX2 register tile's 6 rows pad the row axis that 6 doesn't divide
(tg.codegen.heuristics.cpu: register_tile, tile_rows). A load that is invalid only where nothing is stored may read
any element there: it reads the same element of a valid output instead, through a loop-invariant select, and a value
that is really zero there (a padded input) keeps its mask. Checked on the test device's numbers and on the loads the
lowerer emits."""
from __future__ import annotations

import os
import platform
import subprocess
import sys

import numpy as np
import pytest

from tg import Device, Tensor, Variable, dtypes
from tg.codegen.kernel import Kernel, Opt, OptOps
from tg.codegen.lowerer import GLOBAL
from tg.codegen.uops import UOp, UOps
from tg.engine.realize import CompiledRunner
from tg.engine.schedule import create_schedule
from tg.renderer import cpu_target as ct
from tg.shape.symbolic import NumNode


def _last_kernel(out: Tensor):  # type: ignore[no-untyped-def]
  sched = [si for si in create_schedule([out.lazydata]) if si.ast.op.name in ("STORE", "SINK")]
  for si in sched[:-1]:  # what the last kernel reads (a packing copy) is computed first
    CompiledRunner(Kernel(si.ast, Device[Device.DEFAULT].renderer).hand_coded_optimizations().to_program())(
      [b.ensure_allocated() for b in si.bufs], {})
  return sched[-1]


def _run(si, opts: list[Opt]) -> tuple[np.ndarray, Kernel]:  # type: ignore[no-untyped-def]
  k = Kernel(si.ast, Device[Device.DEFAULT].renderer).apply_opts(opts)
  CompiledRunner(k.to_program())([b.ensure_allocated() for b in si.bufs], {})
  out = si.outputs[0]
  return np.frombuffer(out.as_buffer(), dtype=out.dtype.np).copy(), k


def _masked_loads(k: Kernel) -> int:
  """LOADs of a global buffer that carry a validity (a select per load)."""
  return sum(1 for u in k.uops if u.op is UOps.LOAD and u.src[0].op is UOps.DEFINE_GLOBAL and len(u.src) > 2)


def _row_axis(k: Kernel, size: int) -> int:
  return next(i for i, (s, kind) in enumerate(zip(k.full_shape, k.kinds)) if kind == GLOBAL and s == size)


@pytest.mark.parametrize("m", [7, 37, 100])
def test_padded_rows_of_a_matmul_read_unmasked(m: int) -> None:
  """A matmul's rows padded to a multiple of 6, then 6 rows per tile: right numbers, and neither operand nor the
  bias added after is loaded through a mask (the unpadded kernel has none either)."""
  rng = np.random.default_rng(m)
  a_np, b_np, c_np = (rng.standard_normal(s).astype(np.float32) for s in ((m, 24), (24, 16), (16,)))
  a, b, c = (Tensor(x).realize() for x in (a_np, b_np, c_np))
  si = _last_kernel(a @ b + c)
  k0 = Kernel(si.ast, Device[Device.DEFAULT].renderer)
  row = _row_axis(k0, m)
  out, k = _run(si, [Opt(OptOps.PADTO, row, 6), Opt(OptOps.UPCAST, row, 6)])
  np.testing.assert_allclose(out.reshape(m, 16), a_np @ b_np + c_np, rtol=1e-4, atol=1e-4)
  if m % 6:
    assert _masked_loads(k) == 0, k.applied_opts


def test_a_padded_input_keeps_its_zeros() -> None:
  """x.pad(...) @ w: the padded input's zeros are values, not padding of the kernel: where the input's own mask and
  the stores' validity differ, the load stays masked and reads 0 there."""
  rng = np.random.default_rng(1)
  x_np, w_np = rng.standard_normal((10, 8)).astype(np.float32), rng.standard_normal((8, 16)).astype(np.float32)
  x, w = Tensor(x_np).realize(), Tensor(w_np).realize()
  si = _last_kernel(x.pad(((2, 1), (0, 0))) @ w)
  row = _row_axis(Kernel(si.ast, Device[Device.DEFAULT].renderer), 13)
  out, k = _run(si, [Opt(OptOps.PADTO, row, 6), Opt(OptOps.UPCAST, row, 6)])
  np.testing.assert_allclose(out.reshape(13, 16), np.pad(x_np, ((2, 1), (0, 0))) @ w_np, rtol=1e-4, atol=1e-4)
  assert _masked_loads(k) > 0


def test_an_accumulating_assign_over_padded_rows() -> None:
  """c += a @ b in place: the padded rows read the output's valid rows again (in bounds) and store nothing; every
  real row gets its sum once."""
  rng = np.random.default_rng(2)
  a_np, b_np, c_np = (rng.standard_normal(s).astype(np.float32) for s in ((11, 12), (12, 8), (11, 8)))
  a, b, c = (Tensor(x).realize() for x in (a_np, b_np, c_np))
  c.assign(c + a @ b)
  si = _last_kernel(c)
  row = _row_axis(Kernel(si.ast, Device[Device.DEFAULT].renderer), 11)
  out, _ = _run(si, [Opt(OptOps.PADTO, row, 6), Opt(OptOps.UPCAST, row, 6)])
  np.testing.assert_allclose(out.reshape(11, 8), c_np + a_np @ b_np, rtol=1e-4, atol=1e-4)


def test_padded_rows_whose_index_passes_int32_only_as_a_whole_go_to_64_bits() -> None:
  """The unmasked index of a padded row is a select on its fixed part plus the reduce loop's step: each part fits
  int32 here and only their sum passes 2^31 (the last padded row, 1361 x 1577000 reads of a 1361-row matrix padded
  to 1362 rows). Lowered, not run: the kernel indexes in 64 bits, or a device without int64 refuses it clearly."""
  m, k = 1361, 1577000
  assert (m - 1) * k < 2**31 - 1 < 1362 * k - 1 and 1361 * k < 2**31 + 2**21  # the fixed part fits, the whole doesn't
  renderer = Device[Device.DEFAULT].renderer
  si = [si for si in create_schedule([(Tensor.empty(m, k) @ Tensor.empty(k, 8)).lazydata]) if si.ast.op.name in ("STORE", "SINK")][-1]
  kern = Kernel(si.ast, renderer)
  row = _row_axis(kern, m)
  kern.apply_opts([Opt(OptOps.PADTO, row, 6), Opt(OptOps.UPCAST, row, 6)])
  if dtypes.int64 in getattr(renderer, "missing_dtypes", ()):
    with pytest.raises(ValueError, match="2\\^31"):
      kern.to_program()
    return
  kern.to_program()
  assert kern.lowerer.idt == dtypes.int64
  assert _masked_loads(kern) == 0  # still read unmasked, in 64 bits
  assert all(u.dtype == dtypes.int64 for u in kern.uops if u.op is UOps.RANGE)


def test_a_validity_on_a_symbolic_size_keeps_its_mask() -> None:
  """A validity that depends on a kernel argument (a symbolic size) keeps its mask: substituting 0 for the argument
  proves nothing about the values the kernel is given. The lowerer's own rule, asked directly of a kernel that has
  the argument."""
  n = Variable("n", 1, 64)
  x = Tensor.empty(64, 8).shrink(((0, n), (0, 8)))
  si = [si for si in create_schedule([(x + 1).lazydata]) if si.ast.op.name in ("STORE", "SINK")][-1]
  kern = Kernel(si.ast, Device[Device.DEFAULT].renderer)
  kern.to_program()
  low = kern.lowerer
  assert n in low.arguments
  i = Variable("__i", 0, 63)
  low.ctx[i] = UOp.const(low.idt, 0)
  assert ((i + n) < 70).substitute({i: NumNode(0), n: NumNode(0)}) == NumNode(1)  # valid at 0, for n = 0 only
  assert low._unmasked_index(i * 8, (i + n) < 70) is None  # depends on the argument: keep the mask
  assert low._unmasked_index(i * 8, i < 5) is not None  # a concrete bound: read row 0 instead


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64") or "avx2" not in ct._cpu_flags(), reason="needs an AVX2 x86-64 host")
@pytest.mark.parametrize("device", ["CLANG", "LLVM"])
def test_avx2_tile_takes_six_rows_padding_the_row_axis(device: str) -> None:
  """CPU_TARGET=x86-64-v3: the register tile is 6 rows x 2 vectors; a 1000-row matmul is padded to 1002 rows for it
  (a 16th of padding at most), its main kernel loads nothing through a mask, every size comes out as numpy's,
  packed or not, the rows a multiple of 6 or not, including in-place accumulation; and the cache blocks of the
  padded rows split evenly across the cores."""
  pytest.importorskip(f"tg_{device.lower()}")
  code = f"""
import numpy as np
import tg.lazy
from tg import Device, Tensor
from tg.codegen.heuristics.cpu import MAX_IDLE_SHARE, idle_share
from tg.codegen.kernel import Kernel, OptOps
from tg.codegen.uops import UOps
from tg.engine.schedule import create_schedule
tg.lazy.PACK_MIN_MACS = 0
r = Device["{device}"].renderer
assert (r.matmul_panel, r.matmul_panel_rows) == (8, 6)
rng = np.random.default_rng(0)
for m, n, k in ((1000, 64, 32), (1002, 64, 32), (37, 48, 16), (5, 32, 8), (96, 80, 72)):
  a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
  ta, tb = Tensor(a, device="{device}").realize(), Tensor(b, device="{device}").realize()
  np.testing.assert_allclose((ta @ tb).numpy(), a @ b, rtol=1e-4, atol=1e-4)
  c = Tensor(a[:, :1] * 0 + 1, device="{device}").expand(m, n).contiguous().realize()
  c.assign(c + ta @ tb)
  np.testing.assert_allclose(c.numpy(), 1 + a @ b, rtol=1e-4, atol=1e-4)
a = Tensor(rng.standard_normal((1000, 32)).astype(np.float32), device="{device}").realize()
b = Tensor(rng.standard_normal((32, 64)).astype(np.float32), device="{device}").realize()
si = [si for si in create_schedule([(a @ b).lazydata]) if si.ast.op.name in ("STORE", "SINK")][-1]
k = Kernel(si.ast, r).hand_coded_optimizations()
ops = [(o.op, o.amt) for o in k.applied_opts]
assert any(op is OptOps.PADTO and amt % 6 == 0 for op, amt in ops) and (OptOps.UPCAST, 6) in ops, ops  # (12: 6 leaves a prime count)
k.to_program()
assert not any(u.op is UOps.LOAD and u.src[0].op is UOps.DEFINE_GLOBAL and len(u.src) > 2 for u in k.uops), ops
# blocked for the caches into a count of blocks that 2 cores split evenly: 1026 rows are 171 tiles of 6 (odd), so
# blocks of 3 (57 blocks: one core idle 1/58 of the time), not of 19 (9 blocks: idle a tenth)
a, b = Tensor.empty(1024, 1024, device="{device}"), Tensor.empty(1024, 1024, device="{device}")
si = [si for si in create_schedule([(a @ b).lazydata]) if si.ast.op.name in ("STORE", "SINK")][-1]
k = Kernel(si.ast, r).hand_coded_optimizations()
blocks = k.full_shape[0]
assert k.applied_opts[-1].op is OptOps.BLOCK and 171 % blocks == 0 and idle_share(blocks, 2) <= MAX_IDLE_SHARE, k.applied_opts
print("ok")
"""
  env = {**os.environ, "CPU_TARGET": "x86-64-v3", "CPU_THREADS": "2"}
  out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
  assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]
