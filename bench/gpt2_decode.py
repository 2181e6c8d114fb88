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

import os
import sys
from typing import Any

import benchlib as bl  # sorts first: sets thread counts before numpy/torch load
import decodelib
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


WEIGHT_BYTES = 4 * (LAYERS * (12 * D * D + 13 * D) + VOCAB * D)  # the layers' weights, biases and norms; wte once, by the tied head
MODEL = decodelib.DecodeModel("GPT-2 124M", VOCAB, make_models, prefill_flops, WEIGHT_BYTES)


def run(mode: str = "small", prompt_len: int = 128, reps: int | None = None) -> list[bl.Row]:
  return decodelib.run(MODEL, mode, prompt_len, reps)


def main() -> None:
  decodelib.main(MODEL, __doc__, "GPT-2 decode")


if __name__ == "__main__":
  main()
