"""docs/capabilities.md, the capability table of tg.renderer.Renderer, can't drift from the code: every annotated
attribute of Renderer is documented, every attribute the doc's tables name exists, and the table of in-tree
renderers' values is what this file prints (regenerate it with `python packages/tg-core/tests/test_capability_doc.py`,
which fixes CPU_TARGET=x86-64-v3 and CPU_CACHES so the CPU renderers' host-dependent values are those of an AVX2
machine: it needs an x86-64 host with AVX2)."""
from __future__ import annotations

import importlib
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tg.dtype import DTYPES_DICT
from tg.renderer import Renderer
from tg.renderer.cpu_target import CPUTarget, _cpu_flags

DOC = Path(__file__).resolve().parents[3] / "docs" / "capabilities.md"
BEGIN, END = "<!-- values:begin -->", "<!-- values:end -->"
# the in-tree renderers as their devices make them when no hardware limits are known
RENDERERS = [("CLANG", "tg_clang.renderer", "ClangRenderer"), ("LLVM", "tg_llvm.renderer", "LLVMRenderer"),
             ("CUDA", "tg_cuda.renderer", "CUDARenderer"), ("WEBGPU", "tg_webgpu.renderer", "WGSLRenderer"),
             ("AMD", "tg_amd.renderer", "AMDRenderer"), ("METAL", "tg_metal.renderer", "MetalRenderer"),
             ("PYTHON", "tg.plugins.python", "PythonRenderer")]
_DT_NAMES = {dt: name for name, dt in reversed(list(DTYPES_DICT.items()))}  # the first (canonical) name of each


def _fmt(v: object) -> str:
  if isinstance(v, CPUTarget):
    return f"{v.name}: {v.isa}, {v.vector_registers} x {v.vector_bytes} B"
  if isinstance(v, frozenset):
    return "{" + ", ".join(sorted(_DT_NAMES.get(x, getattr(x, "name", str(x))) for x in v)) + "}"
  if isinstance(v, tuple) and v and hasattr(v[0], "dims"):  # tensor cores, by name
    return ", ".join(x.name for x in v)
  if isinstance(v, str):
    return f'"{v}"'
  return str(v)


def values_table() -> str:
  """The markdown table of every Renderer attribute's value in each in-tree renderer."""
  rs = [getattr(importlib.import_module(mod), cls)() for _, mod, cls in RENDERERS]
  rows = ["| attribute | " + " | ".join(name for name, _, _ in RENDERERS) + " |", "|---" * (len(RENDERERS) + 1) + "|"]
  rows += [f"| `{a}` | " + " | ".join(_fmt(getattr(r, a)) for r in rs) + " |" for a in Renderer.__annotations__]
  return "\n".join(rows)


def _doc() -> str:
  return DOC.read_text()


def _table_names(text: str) -> list[str]:
  return re.findall(r"^\| `(\w+)` \|", text, re.M)


def test_every_renderer_attribute_is_documented() -> None:
  documented = set(_table_names(_doc()))
  missing = [a for a in Renderer.__annotations__ if a not in documented]
  assert not missing, f"Renderer attributes missing from docs/capabilities.md's tables: {missing}"


def test_every_documented_name_is_a_renderer_attribute() -> None:
  unknown = [a for a in _table_names(_doc()) if a not in Renderer.__annotations__]
  assert not unknown, f"docs/capabilities.md names attributes Renderer doesn't have: {unknown}"


def test_documented_types_and_defaults_match_the_code() -> None:
  # a row: | `name` | `type` | `default` | ...; a | inside a cell is escaped as \|
  rows = re.findall(r"^\| `(\w+)` \| `([^`]*)` \| `([^`]*)` \|", _doc(), re.M)
  assert len(rows) == len(Renderer.__annotations__), "one group-table row (attribute, type, default, ...) per attribute"
  for name, typ, default in rows:
    assert typ.replace("\\|", "|") == Renderer.__annotations__[name], f"{name}: the doc's type is {typ}"
    assert default == _fmt(getattr(Renderer, name)), f"{name}: the doc says {default}, Renderer has {_fmt(getattr(Renderer, name))}"


def _groups(pairs: list[tuple[str, str]]) -> dict[str, list[str]]:
  out: dict[str, list[str]] = {}
  group = ""
  for heading, name in pairs:
    group = heading.lower() or group
    if name:
      out.setdefault(group, []).append(name)
  return out


def test_doc_groups_are_renderer_s_groups() -> None:
  # Renderer's body: `# ---- group ----` comments, then `name: type = default` lines; the doc: `## Group`, then rows
  code = _groups(re.findall(r"^  # ---- ([\w ,]+) ----$|^  (\w+): ", inspect.getsource(Renderer), re.M))
  doc = _groups(re.findall(r"^## ([\w ,]+)$|^\| `(\w+)` \| `", _doc(), re.M))
  assert code == doc, f"Renderer's groups {code}\ndocs/capabilities.md's {doc}"


def test_values_table_is_current() -> None:
  for _, mod, _ in RENDERERS:
    pytest.importorskip(mod.split(".")[0], reason=f"the values table needs every in-tree renderer ({mod})")
  if "avx2" not in _cpu_flags():
    pytest.skip("the values table is generated for x86-64-v3, which this CPU can't run")
  env = {**os.environ, "CPU_TARGET": "x86-64-v3", "CPU_CACHES": "32K,512K,32M"}
  env.pop("CPU_VECTOR_BYTES", None)
  out = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True, timeout=120)
  assert out.returncode == 0, out.stderr
  doc = _doc()
  current = doc[doc.index(BEGIN) + len(BEGIN):doc.index(END)].strip()
  assert current == out.stdout.strip(), f"docs/capabilities.md's values table is stale; regenerate it:\n{out.stdout}"


if __name__ == "__main__":
  print(values_table())
