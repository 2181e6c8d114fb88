"""GPT-2 small (124M parameters: 12 layers, 768 wide, 12 heads, vocabulary 50257), random weights, fp32, batch 1:
the prefill of a 128-token prompt, then decoding one token at a time with the KV cache, in tg (examples/gpt2.py:
the decode step eager and under TinyJit) and in Hugging Face transformers on torch (the same weights and threads).

  python bench/gpt2_decode.py
  python bench/gpt2_decode.py --quick   # fewer decode steps timed
  python bench/gpt2_decode.py --prompt 256

Prefill: the whole prompt in one call, filling the cache, logits of the last position only (transformers:
`logits_to_keep=1`). Decode: one call per token at the next position, reading the cache and writing its own keys and
values (transformers: `cache`, before 5.x `past_key_values`); each timed call is one token, so tokens/s = 1 / time per call. Positions
advance with every call, warm-up included, in both libraries alike.

Napkin math: a decode step reads every weight once, the tied head's 50257 x 768 included (the position table only a
row): 124M floats = 495 MB (GB/s below counts that), plus the cache (2 * 12 layers * 768 floats per position, 9.4 MB
at 128); memory-bound, at most (memory bandwidth / 495 MB) tokens/s. The prefill's matmuls: 2 * 85M (the layers'
parameters) * 128 + attention 2 * 2 * 128^2 * 768 * 12 + the head's one row ~ 22 GFLOP.
"""
from __future__ import annotations

import argparse
import inspect
import os
import sys
from typing import Any

import benchlib as bl  # sorts first: sets thread counts before numpy/torch load
import numpy as np
import torch

from tg import Tensor

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from examples.gpt2 import GPT2, GPT2Config, load_hf_weights

LAYERS, D, HEADS, VOCAB, CONTEXT = 12, 768, 12, 50257, 1024


def make_models() -> tuple[GPT2, Any]:
  """transformers' GPT2LMHeadModel with its own random initialisation, and tg's GPT2 loaded from its state dict."""
  from transformers import GPT2Config as HFConfig
  from transformers import GPT2LMHeadModel
  torch.manual_seed(0)
  hf = GPT2LMHeadModel(HFConfig(n_layer=LAYERS, n_embd=D, n_head=HEADS, vocab_size=VOCAB, n_positions=CONTEXT)).eval()
  model = GPT2(GPT2Config(n_layer=LAYERS, n_embd=D, n_head=HEADS, vocab_size=VOCAB, n_positions=CONTEXT))
  load_hf_weights(model, {k: Tensor(v.detach().numpy().copy()) for k, v in hf.state_dict().items()})
  return model, hf


def prefill_flops(t: int) -> int:
  params = LAYERS * (D * 3 * D + D * D + 2 * D * 4 * D)
  return 2 * params * t + 2 * 2 * t * t * D * LAYERS + 2 * D * VOCAB


def run(mode: str = "small", prompt_len: int = 128, reps: int | None = None) -> list[bl.Row]:
  reps = reps or (4 if mode == "quick" else 12)
  model, hf = make_models()
  prompt = [int(t) for t in np.random.default_rng(0).integers(0, VOCAB, prompt_len)]
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

  weight_bytes = 4 * (LAYERS * (12 * D * D + 13 * D) + VOCAB * D)  # the layers' weights, biases and norms; wte once, by the tied head
  tps = lambda s: f"{1 / s.median:.1f}" if s is not None else "-"
  note = (f"tokens/s: tg eager {tps(s_eager)}, tg TinyJit {tps(s_jit)}, transformers {tps(s_torch)}; max|tg-torch| logits: "
          f"prefill {pre_diff:.2g}, first decode step {dec_diff:.2g}")
  rows = [bl.Row(f"GPT-2 124M prefill T={prompt_len}", s_pre, None, s_pre_t, work=prefill_flops(prompt_len), unit="GFLOP/s"),
          bl.Row("GPT-2 124M decode/token, eager", s_eager, None, s_torch, work=weight_bytes, unit="GB/s"),
          bl.Row("GPT-2 124M decode/token, TinyJit", s_jit, None, s_torch, work=weight_bytes, unit="GB/s", note=note)]
  for r in rows:
    bl.print_row(r)
  return rows


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--quick", action="store_true", help="fewer decode steps timed")
  p.add_argument("--prompt", type=int, default=128, help="prompt length (default 128)")
  p.add_argument("--reps", type=int, help="timed decode steps after warm-up")
  args = p.parse_args()
  bl.print_env()
  bl.print_table(run("quick" if args.quick else "full", args.prompt, args.reps), "GPT-2 decode")


if __name__ == "__main__":
  main()
