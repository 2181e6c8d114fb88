"""The CI matrix and the nox sessions name the same devices: a backend added to noxfile.py's BACKENDS is tested on
every CI (`.ci/run` runs all nox sessions; the hosted workflow runs one job per backend) and the workflow installs
what each needs. Read from the files, without importing nox."""
from __future__ import annotations

import ast
import os
import re

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def _backends() -> dict[str, tuple[str, str | None]]:
  tree = ast.parse(open(os.path.join(ROOT, "noxfile.py")).read())
  for node in tree.body:
    if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "BACKENDS" for t in node.targets):
      return ast.literal_eval(node.value)
  raise AssertionError("noxfile.py defines no BACKENDS")


def test_every_nox_backend_is_a_job_of_the_workflow() -> None:
  text = open(os.path.join(ROOT, ".github", "workflows", "ci.yml")).read()
  m = re.search(r"backend:\s*\[([^\]]*)\]", text)
  assert m is not None, "the workflow has no backend matrix"
  assert sorted(b.strip() for b in m.group(1).split(",")) == sorted(_backends())


def test_seven_devices_each_with_its_package() -> None:
  backends = _backends()
  assert sorted(d for d, _ in backends.values()) == ["AMD", "CLANG", "CUDA", "LLVM", "METAL", "PYTHON", "WEBGPU"]
  for device, package in backends.values():
    assert package is None or os.path.isfile(os.path.join(ROOT, package, "pyproject.toml")), f"{device}: {package} is not a package"


def test_ci_run_installs_the_amd_toolchain() -> None:
  text = open(os.path.join(ROOT, ".ci", "run")).read()
  assert "clang-16" in text and "lld-16" in text


def test_ci_run_installs_the_aarch64_cross_toolchain() -> None:
  """nox -s aarch64 fails without qemu-user and the cross libc: .ci/run installs them (the packages tg-clang names)."""
  text = open(os.path.join(ROOT, ".ci", "run")).read()
  assert all(p in text for p in ("qemu-user", "libc6-dev-arm64-cross", "libgcc-12-dev-arm64-cross", "binutils-aarch64-linux-gnu"))


def test_every_default_nox_session_runs_in_the_workflow() -> None:
  """.ci/run runs nox's default sessions; the hosted workflow must run each of them too."""
  nox_text = open(os.path.join(ROOT, "noxfile.py")).read()
  m = re.search(r"nox\.options\.sessions = \[([^\]]*)\]", nox_text)
  assert m is not None, "noxfile.py sets no default sessions"
  defaults = [s.strip().strip('"') for s in m.group(1).split(",")]
  workflow = open(os.path.join(ROOT, ".github", "workflows", "ci.yml")).read()
  for name in defaults:
    runs = "tests(backend=" if name == "tests" else name
    assert runs in workflow, f"nox session {name} runs in .ci/run but not in .github/workflows/ci.yml"


def test_mock_gpu_sessions_skip_only_files_that_exist() -> None:
  """noxfile.py's MOCK_GPU_SKIP names device-generic test files the mock GPU sessions leave to the CPU sessions: a
  renamed or removed file must be taken off the list, not silently stop matching."""
  tree = ast.parse(open(os.path.join(ROOT, "noxfile.py")).read())
  skip = next(ast.literal_eval(n.value) for n in tree.body
              if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "MOCK_GPU_SKIP" for t in n.targets))
  tests = os.path.join(ROOT, "packages", "tg-core", "tests")
  assert skip and all(os.path.isfile(os.path.join(tests, f)) for f in skip), [f for f in skip if not os.path.isfile(os.path.join(tests, f))]
  assert not any(f.endswith(("test_ops.py", "test_ops_more.py", "test_dtype.py", "test_jit.py")) for f in skip), "the renderers' own tests stay"
