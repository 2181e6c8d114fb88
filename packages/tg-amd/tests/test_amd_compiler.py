"""clang + ld.lld without ROCm: kernels become AMDGPU code objects (ELF, EM_AMDGPU, the gfx target in e_flags) with
no undefined symbol, errors carry the tool's message and the source, and the cache key names target and tools."""
from __future__ import annotations

import struct

import pytest
from amd_helpers import DEV, program

from tg import Tensor
from tg.codegen.kernel import Opt, OptOps
from tg.dtype import DType, dtypes
from tg_amd import toolchain
from tg_amd.bundle import AMDBinary
from tg_amd.compiler import AMDCompiler
from tg_amd.toolchain import AMDCompileError, ToolMissing, assembly

EM_AMDGPU = 224
# EF_AMDGPU_MACH_AMDGCN_* (the low byte of e_flags), from LLVM's ELF.h
MACH = {"gfx1100": 0x41, "gfx90a": 0x3F, "gfx1030": 0x36}
ADD = ('#include "tg_amd.h"\nextern "C" __attribute__((global)) void __attribute__((amdgpu_flat_work_group_size(1, 1))) '
       "add(float* __restrict__ a, const float* __restrict__ b) { a[__builtin_amdgcn_workgroup_id_x()] += b[__builtin_amdgcn_workgroup_id_x()]; }")


def _elf_header(co: bytes) -> tuple[int, int, int, int]:
  """(class, type, machine, flags) of an ELF64 little-endian file."""
  assert co[:4] == b"\x7fELF" and co[5] == 1, "a little-endian ELF"
  e_type, e_machine = struct.unpack_from("<HH", co, 16)
  (e_flags,) = struct.unpack_from("<I", co, 48)
  return co[4], e_type, e_machine, e_flags


@pytest.mark.parametrize("arch", ["gfx1100", "gfx90a", "gfx1030"])
def test_code_object_is_an_amdgpu_elf_for_the_target(arch: str) -> None:
  b = AMDBinary.unpack(AMDCompiler(arch).compile(ADD))
  elf_class, e_type, machine, flags = _elf_header(b.code_object)
  assert (elf_class, e_type, machine) == (2, 3, EM_AMDGPU), "a 64-bit shared object for AMD GPUs"
  assert flags & 0xFF == MACH[arch], f"e_flags {flags:#x}: not {arch}"
  assert b"add.kd" in b.code_object, "the kernel descriptor hipModuleGetFunction finds"
  assert b.arch == arch and b.mock == b""


def test_wmma_kernel_is_v_wmma() -> None:
  t = Tensor.empty(32, 32, device=DEV, dtype=dtypes.float16) @ Tensor.empty(32, 16, device=DEV, dtype=dtypes.float16)
  src = program(t, (Opt(OptOps.TC, None, 0),)).src
  assert "v_wmma_f32_16x16x16_f16" in assembly(src, "gfx1100")
  assert _elf_header(AMDBinary.unpack(AMDCompiler("gfx1100").compile(src)).code_object)[2] == EM_AMDGPU


def test_barrier_kernel_is_s_barrier_and_lds() -> None:
  # 64 work-items: two waves, so the barrier is needed (a one-wave workgroup's barrier compiles to nothing)
  src = program(Tensor.empty(6, 256, device=DEV).sum(axis=1), (Opt(OptOps.GROUP, 1, 64),)).src
  asm = assembly(src, "gfx1100")
  assert "s_barrier" in asm and "ds_store" in asm and "ds_load" in asm


@pytest.mark.parametrize("dt", [dtypes.float64, dtypes.float32, dtypes.float16, dtypes.bfloat16])
def test_math_needs_no_device_library(dt: DType) -> None:
  """exp2, log2, sin, sqrt and division in every float type link with --no-undefined: nothing is left to ROCm's ocml."""
  x = Tensor.empty(8, device=DEV, dtype=dt)
  src = program(((x.exp2() + x.log2() + x.sin()) / x.sqrt()).maximum(x)).src
  AMDCompiler("gfx1100").compile(src)


def test_mock_code_object_is_the_amdgpu_object_unlinked() -> None:
  # mock mode runs the CPU build; its code object is clang's relocatable AMDGPU object, not linked by ld.lld
  b = AMDBinary.unpack(AMDCompiler("gfx1100", mock=True).compile(ADD))
  elf_class, e_type, machine, flags = _elf_header(b.code_object)
  assert (elf_class, e_type, machine) == (2, 1, EM_AMDGPU) and flags & 0xFF == MACH["gfx1100"], "a relocatable object for gfx1100"
  assert b"add.kd" in b.code_object and b.mock[:4] == b"\x7fELF"
  assert toolchain.undefined_symbols(b.code_object) == []


@pytest.mark.parametrize("mock", [False, True], ids=["linked", "mock"])
def test_undefined_symbol_is_a_compile_error(mock: bool) -> None:
  src = 'extern "C" __attribute__((device)) float ocml(float);\n' + ADD.replace("+= b[", "+= ocml(b[").replace("_x()]; }", "_x()]); }")
  with pytest.raises(AMDCompileError, match="undefined") as e:
    AMDCompiler("gfx1100", mock=mock).compile(src)
  assert "ocml" in str(e.value)


def test_compile_error_shows_clang_message_and_source() -> None:
  with pytest.raises(AMDCompileError, match="undeclared identifier") as e:
    AMDCompiler("gfx1100").compile(ADD.replace("b[__builtin", "nope[__builtin"))
  assert "--- source ---" in str(e.value) and "clang" in str(e.value)


def test_missing_clang_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.setattr(toolchain.TG_AMD_CLANG, "value", "/nonexistent/clang-16")
  toolchain.find_clang.cache_clear()
  try:
    with pytest.raises(ToolMissing, match="apt-get install clang-16 lld-16"):
      toolchain.find_clang()
  finally:
    monkeypatch.undo()
    toolchain.find_clang.cache_clear()


def test_bad_arch_is_refused() -> None:
  with pytest.raises(ValueError, match="gfx target"):
    AMDCompiler("sm_80")


def test_cache_key_names_target_and_llvm() -> None:
  key = AMDCompiler("gfx1100").cachekey
  assert key is not None and "gfx1100" in key and f"llvm{toolchain.find_clang()[1]}" in key
  assert AMDCompiler("gfx90a").cachekey != key
  assert AMDCompiler("gfx1100", mock=True).cachekey != key, "a mock binary carries a CPU build: never shared with GPU ones"


def test_binary_round_trip_and_damage() -> None:
  b = AMDBinary("gfx1100", b"\x7fELFco", b"so")
  assert AMDBinary.unpack(b.pack()) == b
  with pytest.raises(ValueError, match="damaged"):
    AMDBinary.unpack(b.pack()[:-1])
  with pytest.raises(ValueError, match="not a tg-amd"):
    AMDBinary.unpack(b"TGCUDA1\0" + bytes(40))
