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
