"""float16 on a CPU without F16C (CPU_TARGET=x86-64-v2): clang turns half <-> float casts into calls that no library
the kernel links provides, so the CLANG renderer writes them into the kernel (tg_clang.renderer.SOFT_HALF). Every half
converts to the float numpy gives, and floats round to numpy's half (nearest even, subnormals, inf, NaN), bit for bit."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tg.renderer.cpu_target import supported_levels

pytestmark = pytest.mark.skipif("x86-64-v2" not in supported_levels(), reason="needs an x86-64 host (CPU_TARGET=x86-64-v2)")

CHECK = """
import numpy as np
from tg import Device, Tensor, dtypes
assert not Device["CLANG"].renderer.cpu_target.half_hardware
every = np.arange(1 << 16, dtype=np.uint16)
got = Tensor(every, device="CLANG").bitcast(dtypes.float16).cast(dtypes.float32).numpy()
want = every.view(np.float16).astype(np.float32)
same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
assert same.all(), every[~same][:10]
rng = np.random.default_rng(0)
edges = np.array([0.0, -0.0, 65504, 65519.99, 65520, -65520, 1e-8, 2.0**-25, 2.0**-25 * 1.0001, 2.0**-24, 2.0**-14, 2.0**-14 * 0.9999,
                  np.inf, -np.inf, np.nan, 1 + 2.0**-11, 1 + 3 * 2.0**-11, 0.1, -3.0, 1e5], dtype=np.float32)
floats = np.concatenate([edges, rng.standard_normal(20000).astype(np.float32) * np.float32(10.0) ** rng.integers(-9, 6, 20000)]).astype(np.float32)
got16 = Tensor(floats, device="CLANG").cast(dtypes.float16).bitcast(dtypes.uint16).numpy()
want16 = floats.astype(np.float16).view(np.uint16)
nan = np.isnan(floats)
assert (got16[~nan] == want16[~nan]).all(), [(f, g, w) for f, g, w in zip(floats[~nan], got16[~nan], want16[~nan]) if g != w][:10]
assert ((got16[nan] & 0x7c00) == 0x7c00).all() and ((got16[nan] & 0x3ff) != 0).all()
print("ok")
"""


def test_half_conversions_without_f16c_match_numpy() -> None:
  env = {**os.environ, "CPU_TARGET": "x86-64-v2", "DISABLE_COMPILER_CACHE": "1"}
  out = subprocess.run([sys.executable, "-c", CHECK], env=env, capture_output=True, text=True, timeout=600)
  assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]
