"""A small LLaMA (125M parameters: 12 layers, 768 wide, 12 query heads sharing 4 kv heads, SwiGLU 2048 wide, vocabulary
32000, untied head), random weights, fp32, batch 1: the prefill of a 128-token prompt, then decoding one token at a time
with the KV cache, in tg (examples/llama.py: the decode step eager and under TinyJit) and in Hugging Face transformers'
LlamaForCausalLM on torch (the same weights and threads). bench/gpt2_decode.py's measurements, at GPT-2 small's size.

  python bench/llama_decode.py
  python bench/llama_decode.py --quick   # fewer decode steps timed
  python bench/llama_decode.py --prompt 256

Napkin math: a decode step reads every weight once, the embedding only a row: 100M floats = 402 MB (GB/s below counts
that), plus the cache (2 * 12 layers * 256 floats per position: grouped-query attention keeps a third of GPT-2's);
memory-bound, at most (memory bandwidth / 402 MB) tokens/s. The prefill's matmuls: 2 * 75M (the layers' parameters) *
128 + attention 2 * 2 * 128^2 * 768 * 12 + the head's one row ~ 20 GFLOP.
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
from examples.llama import Checkpoint, Llama, LlamaConfig, load_weights

LAYERS, D, HEADS, KV_HEADS, FFN, VOCAB, CONTEXT = 12, 768, 12, 4, 2048, 32000, 1024
HEAD_DIM = D // HEADS


def make_models() -> tuple[Llama, Any]:
  """transformers' LlamaForCausalLM with its own random initialisation, and tg's Llama loaded from its state dict."""
  from transformers import LlamaConfig as HFConfig
  from transformers import LlamaForCausalLM
  torch.manual_seed(0)
  shape = {"num_hidden_layers": LAYERS, "hidden_size": D, "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
           "intermediate_size": FFN, "vocab_size": VOCAB, "max_position_embeddings": CONTEXT}
  hf = LlamaForCausalLM(HFConfig(**shape)).eval()
  cfg = LlamaConfig(**shape)
  model = Llama(cfg, CONTEXT)
  load_weights(model, Checkpoint(cfg, {k: Tensor(v.detach().numpy().copy()) for k, v in hf.state_dict().items()}, "transformers", "random"))
  return model, hf


def layer_params() -> int:
  return LAYERS * (2 * D * D + 2 * D * KV_HEADS * HEAD_DIM + 3 * D * FFN)


def prefill_flops(t: int) -> int:
  return 2 * layer_params() * t + 2 * 2 * t * t * D * LAYERS + 2 * D * VOCAB


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

  weight_bytes = 4 * (layer_params() + LAYERS * 2 * D + D + VOCAB * D)  # the layers, their norms, the final norm, the head
  tps = lambda s: f"{1 / s.median:.1f}" if s is not None else "-"
  note = (f"tokens/s: tg eager {tps(s_eager)}, tg TinyJit {tps(s_jit)}, transformers {tps(s_torch)}; max|tg-torch| logits: "
          f"prefill {pre_diff:.2g}, first decode step {dec_diff:.2g}")
  rows = [bl.Row(f"LLaMA 125M prefill T={prompt_len}", s_pre, None, s_pre_t, work=prefill_flops(prompt_len), unit="GFLOP/s"),
          bl.Row("LLaMA 125M decode/token, eager", s_eager, None, s_torch, work=weight_bytes, unit="GB/s"),
          bl.Row("LLaMA 125M decode/token, TinyJit", s_jit, None, s_torch, work=weight_bytes, unit="GB/s", note=note)]
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
  bl.print_table(run("quick" if args.quick else "full", args.prompt, args.reps), "LLaMA decode")


if __name__ == "__main__":
  main()
