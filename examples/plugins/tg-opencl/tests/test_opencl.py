"""OpenCL-specific tests of tg-opencl. The device-generic ones are tg's conformance kit:
`pytest -p tg.testing --pyargs tg.conformance --tg-device OPENCL`."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from tg import Device, Tensor, dtypes

if (why := Device.availability("OPENCL")):
  pytest.skip(f"OPENCL is not usable here: {why}", allow_module_level=True)


def test_unavailable_says_what_to_install() -> None:
  code = "import sys; sys.modules['pyopencl'] = None\nfrom tg import Device; print(Device.availability('OPENCL'))"
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
  assert out.returncode == 0, out.stderr
  assert "pyopencl is not installed" in out.stdout and "pip install pyopencl pocl-binary-distribution" in out.stdout


def test_kernel_args_and_ndrange() -> None:
  """A Program gets the buffers, then the int32 sizes; global_size counts workgroups, so OpenCL runs count*local items."""
  dev = Device["OPENCL"]
  src = ("__kernel void k(__global int* out, const int n) {\n"
         "  int i = get_group_id(0)*get_local_size(0) + get_local_id(0);\n  if (i < n) out[i] = i*10 + (int)get_local_size(0);\n}")
  prg = dev.runtime("k", dev.compiler.compile(src))
  buf, out = dev.allocator.alloc(4 * 12), np.full(12, -1, np.int32)
  dev.allocator.copyin(buf, memoryview(out).cast("B"))
  secs = prg(buf, global_size=(3,), local_size=(4,), vals=(11,), wait=True)
  assert isinstance(secs, float) and secs >= 0
  dev.allocator.copyout(memoryview(out).cast("B"), buf)
  assert out.tolist() == [i * 10 + 4 for i in range(11)] + [-1]


def test_capabilities_follow_the_device() -> None:
  import pyopencl as cl
  r, cl_dev = Device["OPENCL"].renderer, cl.get_platforms()[0].get_devices()[0]
  assert r is not None and r.local_max_threads == cl_dev.max_work_group_size and r.shared_max == cl_dev.local_mem_size
  assert (dtypes.float16 in r.missing_dtypes) == ("cl_khr_fp16" not in cl_dev.extensions)
  assert (dtypes.float64 in r.missing_dtypes) == ("cl_khr_fp64" not in cl_dev.extensions)
  key = Device["OPENCL"].compiler.cachekey
  assert key is None or (cl_dev.name in key and cl_dev.driver_version in key)


def test_vectors_bools_and_workgroups() -> None:
  """float4 loads and stores (vload4/vstore4), bool buffers as uchar, and a reduction through __local memory."""
  rng = np.random.default_rng(0)
  x, y = rng.standard_normal((64, 64)).astype(np.float32), rng.standard_normal((64, 64)).astype(np.float32)
  tx, ty = Tensor(x, device="OPENCL"), Tensor(y, device="OPENCL")
  np.testing.assert_allclose((tx @ ty).numpy(), x @ y, rtol=1e-4, atol=1e-4)
  np.testing.assert_array_equal((tx > 0).numpy(), x > 0)
  np.testing.assert_array_equal(Tensor(x > 0, device="OPENCL").where(1.0, 2.0).numpy(), np.where(x > 0, 1.0, 2.0))
  big = rng.standard_normal(1 << 16).astype(np.float32)
  np.testing.assert_allclose(Tensor(big, device="OPENCL").sum().numpy(), big.sum(dtype=np.float64), rtol=1e-4)


def test_instances_have_their_own_context() -> None:
  a, b = Device["OPENCL"], Device["OPENCL:1"]
  assert a.allocator is not b.allocator and a.allocator.cl.ctx != b.allocator.cl.ctx
  t = Tensor([1.0, 2.0, 3.0], device="OPENCL:1") * 2
  assert t.device == "OPENCL:1" and t.to("OPENCL").tolist() == [2.0, 4.0, 6.0]


def test_sub_buffer_views() -> None:
  """A view at a multiple of the device's base address alignment is a sub-buffer sharing the memory."""
  import pyopencl as cl

  from tg.device import Buffer
  step = cl.get_platforms()[0].get_devices()[0].mem_base_addr_align // 8 // 4  # in int32 elements
  base = Buffer("OPENCL", 2 * step, dtypes.int32).copyin(memoryview(np.arange(2 * step, dtype=np.int32)))
  view = base.view(step, dtypes.int32, step * 4)
  assert np.frombuffer(view.as_buffer(), np.int32).tolist() == list(range(step, 2 * step))


def test_compiler_survives_pickling() -> None:
  """BEAM search pickles the compiler into worker processes: a copy makes its own context and compiles the same way."""
  import pickle
  compiler = pickle.loads(pickle.dumps(Device["OPENCL"].compiler))
  assert compiler.ctx is None and compiler.cachekey == Device["OPENCL"].compiler.cachekey
  assert len(compiler.compile("__kernel void k(__global float* a) { a[0] = 1.0f; }")) > 0
