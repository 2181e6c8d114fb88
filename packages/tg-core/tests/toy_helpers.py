"""Shared by the plugin tests (test_plugins.py, test_device_contract.py): whether the toy third-party plugin
(tests/plugins/tg-toy) is installed, and running code in a fresh interpreter."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

try:
  import tg_toy  # noqa: F401  (installed by the nox sessions from tests/plugins/tg-toy)
  HAVE_TOY = True
except ImportError:
  HAVE_TOY = False
# nox installs the toy plugin and sets this, so there the toy tests must run, not skip
needs_toy = pytest.mark.skipif(not HAVE_TOY and not os.getenv("TG_REQUIRE_TOY"),
                               reason="tg-toy not installed: pip install packages/tg-core/tests/plugins/tg-toy")


def run_py(code: str, **env: str) -> subprocess.CompletedProcess[str]:
  return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env}, check=False, timeout=300)
