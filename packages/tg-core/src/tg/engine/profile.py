"""PROFILE=1: a Chrome trace (chrome://tracing or https://ui.perfetto.dev) of every kernel run and copy.

Events are collected in memory and written when the process exits, to PROFILE_PATH (default
tg_profile.json in the current directory)."""
from __future__ import annotations

import atexit
import json
import os
import time
from typing import Any

from tg.settings import PROFILE, PROFILE_PATH

events: list[dict[str, Any]] = []
_start = time.perf_counter()


def enabled() -> bool:
  return bool(PROFILE.value)


def record(name: str, device: str, start: float, duration: float, args: dict[str, Any] | None = None) -> None:
  """One complete event ("X") on the device's track; times in seconds from time.perf_counter()."""
  if not events:
    atexit.register(write)
  events.append({"name": name, "ph": "X", "pid": device, "tid": "queue", "ts": (start - _start) * 1e6, "dur": duration * 1e6,
                 "args": args or {}})


def write(path: str | None = None) -> str:
  path = path or PROFILE_PATH.value
  with open(path, "w") as f:
    json.dump({"traceEvents": events, "displayTimeUnit": "us"}, f)
  print(f"PROFILE: wrote {len(events)} events to {os.path.abspath(path)}")
  return path
