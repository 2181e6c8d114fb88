"""One settings registry: every setting declared once (name, type, default, doc), read from the environment with an
error that names the variable, changeable with Context (which refuses unknown names), and documented in one table."""
from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import time

import pytest

from tg import Context, Tensor, getenv
from tg.engine.schedule import create_schedule
from tg.helpers import DEBUG, ContextVar
from tg.plugins import load_all_plugins
from tg.settings import FUSE_REDUCE, NEST_REDUCE, Setting, SettingError, table_rows

ROOT = pathlib.Path(__file__).resolve().parents[4]
DOC = ROOT / "docs" / "devices.md"
# environment variables tg reads that are not tg's own settings
NOT_OURS = {"XDG_CACHE_HOME"}


def run_py(code: str, **env: str) -> subprocess.CompletedProcess[str]:
  return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env}, check=False, timeout=120)


@pytest.mark.parametrize("var,value,kind", [("DEBUG", "abc", "an integer"), ("BEAM", "2.5", "an integer"), ("FUSE_REDUCE", "yes", "an integer")])
def test_a_bad_value_names_the_variable(var: str, value: str, kind: str) -> None:
  out = run_py("import tg", **{var: value})
  assert out.returncode != 0
  assert out.stderr.strip().splitlines()[-1].endswith(f"{var} must be {kind}, got '{value}'"), out.stderr


def test_a_bad_backend_value_names_the_variable() -> None:
  out = run_py("from tg.settings import lookup; lookup('LLVM_OPT')", LLVM_OPT="fast")
  if "LLVM" not in run_py("from tg import Device; print(Device.installed())").stdout:
    pytest.skip("tg-llvm is not installed")
  assert "LLVM_OPT must be an integer, got 'fast'" in out.stderr


def _kernels() -> int:
  x = Tensor.rand(16, 16).realize()
  y = (x - x.max(axis=1, keepdim=True)).exp()
  y = y / y.sum(axis=1, keepdim=True)
  return len(create_schedule([y.lazydata]))


def test_context_changes_fusion_like_the_environment() -> None:
  fused = _kernels()
  with Context(FUSE_REDUCE=0, NEST_REDUCE=0):
    assert FUSE_REDUCE.value == 0 and NEST_REDUCE.value == 0 and getenv("FUSE_REDUCE") == 0
    unfused = _kernels()
  assert FUSE_REDUCE.value == 1 and NEST_REDUCE.value == 1
  assert unfused > fused, (unfused, fused)
  code = ("from tg import Tensor\nfrom tg.engine.schedule import create_schedule\nx = Tensor.rand(16, 16).realize()\n"
          "y = (x - x.max(axis=1, keepdim=True)).exp()\nprint(len(create_schedule([(y / y.sum(axis=1, keepdim=True)).lazydata])))")
  out = run_py(code, FUSE_REDUCE="0", NEST_REDUCE="0")
  assert out.returncode == 0, out.stderr
  assert int(out.stdout) == unfused


def test_context_refuses_an_unknown_name_with_close_matches() -> None:
  with pytest.raises(SettingError, match=r"unknown setting 'FUSE_REDUC'.*FUSE_REDUCE"):
    Context(FUSE_REDUC=0)
  with pytest.raises(SettingError, match="unknown setting 'NOT_A_SETTING_AT_ALL'"):
    Context(NOT_A_SETTING_AT_ALL=1)


def test_context_checks_the_type() -> None:
  with pytest.raises(SettingError, match="DEBUG must be an integer, got 'abc'"):
    Context(DEBUG="abc")
  with Context(DEBUG=True):
    assert DEBUG.value == 1 and type(DEBUG.value) is int


def test_context_refuses_a_setting_read_only_once() -> None:
  with pytest.raises(SettingError, match="DEFAULT_FLOAT is read once, when tg is imported"):
    Context(DEFAULT_FLOAT="float16")


def test_context_works_for_every_setting_and_restores_it() -> None:
  load_all_plugins()
  for s in list(Setting.registry.values()):
    if s.read_once:
      continue
    before = s.value
    other = (s.value + 1) if s.type is int else s.value + "_x"
    with Context(**{s.name: other}):
      assert s.value == other and getenv(s.name) == other
      with Context(**{s.name: before}):
        assert s.value == before
      assert s.value == other
    assert s.value == before, s.name


def test_context_restores_after_an_exception() -> None:
  with pytest.raises(KeyError), Context(DEBUG=3):
    raise KeyError
  assert DEBUG.value == int(os.environ.get("DEBUG", "0"))


def test_tinygrad_names_keep_working() -> None:
  mine = ContextVar("TG_TEST_MY_OWN_SETTING", 3)
  assert mine is ContextVar("TG_TEST_MY_OWN_SETTING", 0) and mine.value == 3
  with Context(TG_TEST_MY_OWN_SETTING=5):
    assert mine.value == 5 and mine >= 5 and getenv("TG_TEST_MY_OWN_SETTING") == 5
  assert getenv("TG_TEST_UNREGISTERED", 7) == 7 and getenv("TG_TEST_UNREGISTERED_STR", "a") == "a"
  with Context(DEBUG=2):
    assert DEBUG >= 2 and DEBUG > 1 and not DEBUG < 2 and bool(DEBUG)


def test_backends_register_through_the_same_registry() -> None:
  load_all_plugins()
  from tg.device import Device
  owners = {"CLANG": ("TG_CLANG", "tg-clang"), "LLVM": ("LLVM_OPT", "tg-llvm"), "CUDA": ("CUDA_MOCK", "tg-cuda")}
  found = [name for dev, (name, pkg) in owners.items() if dev in Device.installed() and Setting.registry[name].package == pkg]
  if not found:
    pytest.skip("no device package with settings is installed")
  assert found == [name for dev, (name, _) in owners.items() if dev in Device.installed()]


def test_a_read_is_about_a_dict_lookup() -> None:
  n = 200_000
  st = time.perf_counter()
  for _ in range(n):
    FUSE_REDUCE.value  # noqa: B018
  attr = time.perf_counter() - st
  st = time.perf_counter()
  for _ in range(n):
    getenv("FUSE_REDUCE")
  call = time.perf_counter() - st
  assert attr / n < 1e-6 and call / n < 2e-6, (attr / n, call / n)


def _doc_rows() -> dict[str, str]:
  text = DOC.read_text()
  block = text.split("<!-- settings table begin -->")[1].split("<!-- settings table end -->")[0]
  return {m.group(1): line for line in block.strip().splitlines() if (m := re.match(r"\| `(\w+)` \|", line))}


def test_the_doc_table_and_the_registry_agree() -> None:
  """docs/devices.md holds `python -m tg.devices --settings`; rows of packages not installed here are not checked."""
  load_all_plugins()
  import tg.runtime.gpu_mock  # noqa: F401  (tg-core's settings that only the GPU packages import: declared whatever ran before)
  doc, ours = _doc_rows(), table_rows()
  packages = {s.package for s in Setting.registry.values()}
  missing = [row for name, row in ours.items() if Setting.registry[name].package.startswith("tg-") and doc.get(name) != row]
  stale = [row for name, row in doc.items() if row.split("|")[4].strip() in packages and name not in ours]
  assert not missing and not stale, "regenerate the table in docs/devices.md with `python -m tg.devices --settings`:\n" + \
    "\n".join(["missing or different:", *missing, "not a setting:", *stale])


def test_sources_read_no_setting_outside_the_registry() -> None:
  """Every environment variable a package's source reads by name is a registered setting (or not tg's)."""
  load_all_plugins()
  pattern = re.compile(r"""(?:getenv|environ\.get|environ\[)\(?\s*["']([A-Z0-9_]+)["']""")
  unregistered = []
  for src in sorted(ROOT.glob("packages/*/src/**/*.py")):
    for name in pattern.findall(src.read_text()):
      if name not in Setting.registry and name not in NOT_OURS:
        unregistered.append(f"{src.relative_to(ROOT)}: {name}")
  assert not unregistered, unregistered
