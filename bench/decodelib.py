"""The harness of bench/gpt2_decode.py and bench/llama_decode.py: a language model of examples/ against the same
weights in Hugging Face transformers on torch, fp32, batch 1: the prefill of a prompt, then decoding one token at a
time with the KV cache (tg's decode step eager and under TinyJit). A benchmark describes its model (`DecodeModel`) and
calls `run` and `main`; this module is not a benchmark.

Prefill: the whole prompt in one call, filling the cache, logits of the last position only (transformers:
`logits_to_keep=1`). Decode: one call per token at the next position, reading the cache and writing its own keys and
values (transformers: `cache`, before 5.x `past_key_values`); each timed call is one token, so tokens/s = 1 / time per
call. Positions advance with every call, warm-up included, in both libraries alike.
"""
from __future__ import annotations

import argparse
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import benchlib as bl  # sorts first: sets thread counts before numpy/torch load
import numpy as np
import torch


@dataclass(frozen=True)
class DecodeModel:
  name: str  # as the rows say it: "GPT-2 124M"
  vocab: int
  make_models: Callable[[], tuple[Any, Any]]  # (tg's model, with logits_next; transformers' model with the same weights)
  prefill_flops: Callable[[int], int]  # of a prompt of that many tokens
  weight_bytes: int  # what a decode step reads: every weight once


def run(spec: DecodeModel, mode: str = "small", prompt_len: int = 128, reps: int | None = None) -> list[bl.Row]:
  reps = reps or (4 if mode == "quick" else 12)
  model, hf = spec.make_models()
  prompt = [int(t) for t in np.random.default_rng(0).integers(0, spec.vocab, prompt_len)]
  prompt_t = torch.tensor([prompt])
  out: dict[str, Any] = {}

  # prefill: tg writes its cache from position 0 each call; transformers builds a new cache each call
  # transformers 5 renamed past_key_values (argument and output) to cache
  cache_name = "cache" if "cache" in inspect.signature(hf.forward).parameters else "past_key_values"

  def tg_prefill() -> None: out["tg"] = model.logits_next(prompt, 0)
  def torch_prefill() -> None: out["torch"] = hf(prompt_t, use_cache=True, logits_to_keep=1)
  s_pre = bl.measure_tg(tg_prefill, reps=max(reps // 2, 3), warmup=2)
  with torch.inference_mode():
    s_pre_t = bl.measure(torch_prefill, reps=max(reps // 2, 3), warmup=2)
  ref = out["torch"].logits[0, -1].numpy()
  pre_diff = bl.max_abs_diff(out["tg"], ref)

  # decode from the prompt on: each call one token at the next position (the last prompt token's successor first)
  token = int(ref.argmax())
  state = {"tg": len(prompt), "torch": getattr(out["torch"], cache_name)}
  first: dict[str, np.ndarray] = {}

  def tg_step(jit: bool) -> Any:
    def step() -> None:
      logits = model.logits_next([token], state["tg"], jit=jit)
      first.setdefault("jit" if jit else "eager", logits)
      state["tg"] += 1
    return step

  def torch_step() -> None:
    o = hf(torch.tensor([[token]]), use_cache=True, **{cache_name: state["torch"]})
    if "torch" not in first:
      first["torch"] = o.logits[0, -1].numpy().copy()
    state["torch"] = getattr(o, cache_name)

  s_eager = bl.measure_tg(tg_step(False), reps=max(reps // 3, 3), warmup=2)
  state["tg"] = len(prompt)  # the jitted steps start over at the prompt's end: the same positions as torch's
  s_jit = bl.measure_tg(tg_step(True), reps=reps, warmup=3)
  with torch.inference_mode():
    s_torch = bl.measure(torch_step, reps=reps, warmup=3)
  dec_diff = max(bl.max_abs_diff(first[k], first["torch"]) for k in ("eager", "jit"))

  def tps(s: bl.Stat | None) -> str: return f"{1 / s.median:.1f}" if s is not None else "-"
  note = (f"tokens/s: tg eager {tps(s_eager)}, tg TinyJit {tps(s_jit)}, transformers {tps(s_torch)}; max|tg-torch| logits: "
          f"prefill {pre_diff:.2g}, first decode step {dec_diff:.2g}")
  rows = [bl.Row(f"{spec.name} prefill T={prompt_len}", s_pre, None, s_pre_t, work=spec.prefill_flops(prompt_len), unit="GFLOP/s"),
          bl.Row(f"{spec.name} decode/token, eager", s_eager, None, s_torch, work=spec.weight_bytes, unit="GB/s"),
          bl.Row(f"{spec.name} decode/token, TinyJit", s_jit, None, s_torch, work=spec.weight_bytes, unit="GB/s", note=note)]
  for r in rows:
    bl.print_row(r)
  return rows


def main(spec: DecodeModel, doc: str | None, title: str) -> None:
  p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--quick", action="store_true", help="fewer decode steps timed")
  p.add_argument("--prompt", type=int, default=128, help="prompt length (default 128)")
  p.add_argument("--reps", type=int, help="timed decode steps after warm-up")
  args = p.parse_args()
  bl.print_env()
  bl.print_table(run(spec, "quick" if args.quick else "full", args.prompt, args.reps), title)
