"""The AMDGPU toolchain, without ROCm: LLVM's clang (16 or newer: gfx11 and its WMMA builtins arrived in LLVM 16)
compiles a kernel's HIP source for one gfx target, and LLVM's ld.lld links the object into the code object (an ELF
shared object, EM_AMDGPU) that hipModuleLoadData loads. Debian/Ubuntu: `apt-get install clang-16 lld-16`.

`clang -cc1` is called directly: the driver's HIP device-only mode wants ROCm's device libraries, clang-offload-bundler
or its own lld next to it, none of which a kernel with no library calls needs; ld.lld runs with --no-undefined, so a
kernel that calls a function the backend could not lower (a device-library call) fails here, not at load time.
TG_AMD_CLANG and TG_AMD_LLD pick the tools; by default the newest versioned clang-NN from 16 on (then plain
`clang`, then ROCm's own LLVM in /opt/rocm/llvm/bin), and the ld.lld of the same LLVM (then any ld.lld).
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import struct
import subprocess
import tempfile

from tg.settings import Setting

TG_AMD_CLANG = Setting("TG_AMD_CLANG", "", "the clang (LLVM 16 or newer) that compiles AMD kernels (unset: clang-16, clang-17, ... on PATH)")
TG_AMD_LLD = Setting("TG_AMD_LLD", "", "the ld.lld that links AMD code objects (unset: ld.lld of clang's LLVM version on PATH)")
INSTALL_HINT = "install LLVM's clang and lld 16 or newer (apt-get install clang-16 lld-16)"
MIN_LLVM = 16
_VERSIONS = range(30, MIN_LLVM - 1, -1)  # newest first
ROCM_LLVM = "/opt/rocm/llvm/bin"  # ROCm installs its LLVM here, off PATH
INCLUDE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "include")
# -ffp-contract=off: no fused multiply-adds but the ones the renderer writes (MULACC), so mock mode's CPU build
# computes what the GPU computes; -O3 as HIP's default; C++17 for the headers
CLANG_FLAGS = ("-x", "hip", "-fcuda-is-device", "-std=c++17", "-O3", "-ffp-contract=off", "-fno-threadsafe-statics")


class AMDCompileError(RuntimeError):
  pass


class ToolMissing(AMDCompileError):
  pass


def _major(tool: str) -> int | None:
  out = subprocess.run([tool, "--version"], capture_output=True, text=True, check=False).stdout
  m = re.search(r"(?:clang|LLD) version (\d+)|LLD (\d+)\.", out)
  return int(m.group(1) or m.group(2)) if m else None


@functools.cache
def find_clang() -> tuple[str, int]:
  """(path, LLVM major version) of the clang that compiles kernels. Raises ToolMissing."""
  if TG_AMD_CLANG.value:
    path = shutil.which(TG_AMD_CLANG.value)
    if path is None:
      raise ToolMissing(f"TG_AMD_CLANG={TG_AMD_CLANG.value} is not an executable; {INSTALL_HINT}")
    names = [path]
  else:
    found = (*(shutil.which(f"clang-{v}") for v in _VERSIONS), shutil.which("clang"), shutil.which("clang", path=ROCM_LLVM))
    names = [p for p in found if p is not None]
  for path in names:
    if (major := _major(path)) is not None and major >= MIN_LLVM:
      return path, major
  raise ToolMissing(f"no clang {MIN_LLVM}+ found to compile AMD kernels (tried {', '.join(names) or 'clang-16, clang-17, ... on PATH'}); "
                    f"{INSTALL_HINT}")


@functools.cache
def find_lld() -> str:
  """The ld.lld that links code objects. Raises ToolMissing."""
  if TG_AMD_LLD.value:
    if (path := shutil.which(TG_AMD_LLD.value)) is None:
      raise ToolMissing(f"TG_AMD_LLD={TG_AMD_LLD.value} is not an executable; {INSTALL_HINT}")
    return path
  clang, major = find_clang()
  if os.path.dirname(clang) == ROCM_LLVM and (path := shutil.which("ld.lld", path=ROCM_LLVM)) is not None:
    return path  # ROCm's clang links with ROCm's lld
  for name in (f"ld.lld-{major}", *(f"ld.lld-{v}" for v in _VERSIONS), "ld.lld"):
    if (path := shutil.which(name)) is not None:
      return path
  if (path := shutil.which("ld.lld", path=ROCM_LLVM)) is not None:
    return path
  raise ToolMissing(f"no ld.lld found to link AMD code objects; {INSTALL_HINT}")


@functools.cache
def toolchain_version() -> str:
  """What the compile cache key says about the tools: their version lines."""
  clang, lld = find_clang()[0], find_lld()
  lines = [subprocess.run([t, "--version"], capture_output=True, text=True, check=False).stdout.splitlines()[:1] for t in (clang, lld)]
  return " / ".join(ln[0] if ln else "unknown" for ln in lines)


def _run(cmd: list[str], arch: str, src: str) -> None:
  out = subprocess.run(cmd, capture_output=True, text=True, check=False)
  if out.returncode != 0:
    raise AMDCompileError(f"{os.path.basename(cmd[0])} failed to compile an AMD kernel for {arch}:\n{out.stderr.strip()}\n--- source ---\n{src}")


def _clang(arch: str, src_path: str, emit: str, out: str) -> list[str]:
  return [find_clang()[0], "-cc1", "-triple", "amdgcn-amd-amdhsa", "-target-cpu", arch, *CLANG_FLAGS, "-I", INCLUDE_DIR, emit, src_path, "-o", out]


def compile_hip(src: str, arch: str, *, link: bool = True) -> bytes:
  """HIP source -> the code object (ELF) for gfx target `arch`. Raises AMDCompileError with the tools' messages and the source.

  link=False (mock mode, whose kernels run from their CPU build) stops at clang's relocatable object: the kernel has
  been through the AMDGPU backend, and the one thing ld.lld's --no-undefined would add, a call the backend could not
  lower, is looked for in the object's symbol table. That saves ld.lld's start (about a third of a kernel's compile)."""
  with tempfile.TemporaryDirectory(prefix="tg_amd_") as d:
    hip, obj, co = (os.path.join(d, f) for f in ("kernel.hip", "kernel.o", "kernel.co"))
    with open(hip, "w") as src_file:
      src_file.write(src)
    _run(_clang(arch, hip, "-emit-obj", obj), arch, src)
    if not link:
      with open(obj, "rb") as obj_file:
        code = obj_file.read()
      if missing := undefined_symbols(code):
        raise AMDCompileError(f"an AMD kernel for {arch} calls undefined symbol {', '.join(missing)} (no device library is linked)"
                              f"\n--- source ---\n{src}")
      return code
    _run([find_lld(), "-shared", "--no-undefined", obj, "-o", co], arch, src)
    with open(co, "rb") as co_file:
      return co_file.read()


def undefined_symbols(elf: bytes) -> list[str]:
  """The names of the global symbols an ELF64 little-endian object uses but doesn't define (weak ones may stay unbound,
  as ld.lld's --no-undefined allows)."""
  shoff, = struct.unpack_from("<Q", elf, 0x28)
  shentsize, shnum = struct.unpack_from("<HH", elf, 0x3A)
  sections = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize) for i in range(shnum)]
  out = []
  for _, sh_type, _, _, offset, size, link, _, _, entsize in sections:
    if sh_type != 2:  # SHT_SYMTAB
      continue
    strtab = sections[link][4]
    for at in range(offset + entsize, offset + size, entsize):  # (entry 0 is the null symbol)
      name, info, _, shndx = struct.unpack_from("<IBBH", elf, at)
      if shndx == 0 and name and info >> 4 == 1:  # SHN_UNDEF, STB_GLOBAL
        out.append(elf[strtab + name:elf.index(b"\0", strtab + name)].decode())
  return out


def assembly(src: str, arch: str) -> str:
  """The AMDGPU assembly clang makes of `src` for `arch` (what DEBUG=5 shows; tests look for instructions in it)."""
  with tempfile.TemporaryDirectory(prefix="tg_amd_") as d:
    hip, asm = os.path.join(d, "kernel.hip"), os.path.join(d, "kernel.s")
    with open(hip, "w") as f:
      f.write(src)
    _run(_clang(arch, hip, "-S", asm), arch, src)
    with open(asm) as f:
      return f.read()
