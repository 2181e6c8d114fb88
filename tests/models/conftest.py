"""Model tests: programs of examples/ checked against reference implementations (transformers). They import the
examples as modules (`from examples.gpt2 import ...`), so the repository root goes on sys.path."""
from __future__ import annotations

import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
if ROOT not in sys.path:
  sys.path.insert(0, ROOT)
