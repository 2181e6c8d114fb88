"""docs/cstyle.md names every attribute and render_* method of CStyleLanguage, so a dialect's author finds each hook there."""
from __future__ import annotations

import re
from pathlib import Path

from tg.renderer import Renderer
from tg.renderer.cstyle import CStyleLanguage

DOC = Path(__file__).resolve().parents[3] / "docs" / "cstyle.md"


def _hooks() -> set[str]:
  own = {n for n in vars(CStyleLanguage) if not n.startswith("_")}
  return {n for n in own if n.startswith("render") or (n not in vars(Renderer) and not callable(getattr(CStyleLanguage, n)))} | \
         {n for n in own if n == "code_for_op"}


def test_every_hook_is_documented() -> None:
  text = DOC.read_text()
  missing = sorted(n for n in _hooks() if f"`{n}" not in text)
  assert not missing, f"docs/cstyle.md does not document {missing}"


def test_every_documented_name_exists() -> None:
  names = set(re.findall(r"^\| `(\w+)[`(]", DOC.read_text(), re.M))
  names |= {"nan"}  # `infinity`, `nan` share a row
  unknown = sorted(n for n in names if not hasattr(CStyleLanguage, n))
  assert not unknown, f"docs/cstyle.md names {unknown}, which CStyleLanguage does not have"
