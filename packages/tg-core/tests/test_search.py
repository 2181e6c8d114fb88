"""BEAM search: the kernel it picks computes the same numbers, and its choice is cached (a second search times nothing)."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tg import Device, Tensor
from tg.codegen.kernel import Kernel, OptOps
from tg.engine import search
from tg.engine.realize import CompiledRunner
from tg.engine.schedule import create_schedule

rng = np.random.default_rng(0)


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch) -> dict[Any, Any]:
  """An in-memory stand-in for the disk cache, so each test searches from scratch."""
  store: dict[Any, Any] = {}
  monkeypatch.setattr(search, "diskcache_get", lambda table, key: store.get((table, key)))
  monkeypatch.setattr(search, "diskcache_put", lambda table, key, val: store.__setitem__((table, key), val))
  return store


def test_beam_search_picks_a_correct_kernel_and_caches_its_choice(cache: dict[Any, Any], monkeypatch: pytest.MonkeyPatch) -> None:
  a, b = rng.standard_normal((8, 12)).astype(np.float32), rng.standard_normal((12, 8)).astype(np.float32)
  (si,) = create_schedule([(Tensor(a) @ Tensor(b)).relu().lazydata])
  renderer = Device[Device.DEFAULT].renderer
  k = search.beam_search(Kernel(si.ast, renderer), list(si.bufs), 2)
  CompiledRunner(k.to_program())([b.ensure_allocated() for b in si.bufs], {})
  np.testing.assert_allclose(np.frombuffer(si.bufs[0].as_buffer(), dtype=np.float32).reshape(8, 8), np.maximum(a @ b, 0), rtol=1e-5, atol=1e-5)
  assert list(cache.values()) == [k.applied_opts], "the choice is stored, keyed by the AST and the device"
  # a second search of the same kernel is the cached choice: nothing is compiled or timed
  monkeypatch.setattr(search, "_compile", lambda args: pytest.fail("a cached search compiled a candidate"))
  assert search.beam_search(Kernel(si.ast, renderer), list(si.bufs), 2).applied_opts == k.applied_opts


def test_candidates_cover_every_kind_of_opt_the_device_has() -> None:
  a, b = (Tensor(rng.standard_normal((32, 32)).astype(np.float16)) for _ in range(2))
  (si,) = create_schedule([(a @ b).lazydata])
  renderer = Device[Device.DEFAULT].renderer
  kinds = {c.applied_opts[0].op for c in search._candidates(Kernel(si.ast, renderer))}
  expected = {OptOps.UPCAST, OptOps.UNROLL, OptOps.PADTO}
  expected |= {OptOps.LOCAL, OptOps.GROUP, OptOps.GROUPTOP} if renderer.has_local and renderer.global_ids else {OptOps.BLOCK}
  expected |= {OptOps.TC} if renderer.tensor_cores else set()
  assert kinds == expected


def _search_output(beam_progress: int, capsys: pytest.CaptureFixture[str]) -> str:
  from tg.helpers import Context
  a = Tensor(rng.standard_normal((16, 16)).astype(np.float32))
  (si,) = create_schedule([(a * 2 + 1).sum(axis=1).lazydata])
  with Context(BEAM_PROGRESS=beam_progress):
    search.beam_search(Kernel(si.ast, Device[Device.DEFAULT].renderer), list(si.bufs), 1)
  return capsys.readouterr().err


def test_beam_shows_its_progress_on_stderr(cache: dict[Any, Any], capsys: pytest.CaptureFixture[str]) -> None:
  """BEAM_PROGRESS=2 (a log: stderr is not a terminal here): a line per stage, naming the kernel, the round and the counts."""
  lines = _search_output(2, capsys).splitlines()
  assert lines and all(line.startswith("BEAM ") for line in lines), lines
  assert any(": start: compiling 2/2," in line for line in lines), lines
  assert any(": round 1: timing " in line for line in lines), lines
  assert lines[-1].split(": ", 1)[1].startswith(f"final timing {search.RETIME_ROUNDS}/{search.RETIME_ROUNDS}, best "), lines
  assert " us, " in lines[-1], "the best time so far is shown once candidates were timed"


def test_beam_progress_is_silent_when_off_or_not_a_terminal(cache: dict[Any, Any], capsys: pytest.CaptureFixture[str]) -> None:
  assert _search_output(0, capsys) == ""
  assert _search_output(1, capsys) == "", "the default shows progress only on a terminal"


def test_beam_progress_on_a_terminal_rewrites_one_line_and_ends_it(tmp_path: Any) -> None:
  """On a terminal (a pty here) the line is rewritten in place (carriage returns) and finished with a newline, also when
  the search ends: later output starts on a line of its own."""
  import os
  import pty
  import subprocess
  import sys
  code = ("import numpy as np; from tg import Tensor; from tg.helpers import Context\n"
          "x = Tensor(np.arange(256, dtype=np.float32).reshape(16, 16))\n"
          "with Context(BEAM=1): y = (x * 2 + 1).sum(axis=1).numpy()\n"
          "assert (y == (np.arange(256, dtype=np.float32).reshape(16, 16) * 2 + 1).sum(axis=1)).all()\n")
  main, sub = pty.openpty()
  env = {**os.environ, "CACHELEVEL": "0", "BEAM_PROGRESS": "1"}
  proc = subprocess.Popen([sys.executable, "-c", code], stderr=sub, stdout=subprocess.DEVNULL, env=env)
  os.close(sub)
  out = b""
  while True:
    try:
      chunk = os.read(main, 4096)
    except OSError:  # the child closed the terminal
      break
    if not chunk:
      break
    out += chunk
  assert proc.wait(timeout=300) == 0, out.decode(errors="replace")
  text = out.decode(errors="replace")
  assert "\r\x1b[KBEAM " in text and "final timing" in text, text
  assert text.endswith("\n") and ": done, best " in text.splitlines()[-1], "the line is finished, with the search's result"
