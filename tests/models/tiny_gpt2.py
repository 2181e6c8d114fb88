"""A tiny GPT-2 with random weights, written by transformers as a Hugging Face model directory (config.json +
model.safetensors): what the model tests load, since no real checkpoint can be downloaded in CI.

  python tests/models/tiny_gpt2.py DIR    # writes one for a quick run of examples/gpt2.py
"""
from __future__ import annotations

import sys
from typing import Any

TINY = {"n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 300, "n_positions": 64}


def make_tiny_gpt2(path: str, seed: int = 0, **overrides: Any) -> Any:
  """Save a random GPT2LMHeadModel to `path` and return it (in eval mode). vocab_size 300 holds GPT-2's 256 byte
  tokens, so the byte-level fallback tokenizer works too. initializer_range 0.3 (GPT-2's is 0.02) makes the logits
  differ enough from token to token that greedy decoding wanders through the vocabulary instead of repeating one
  token, so 20 matching tokens mean something."""
  import torch
  from transformers import GPT2Config, GPT2LMHeadModel
  torch.manual_seed(seed)
  # bos/eos inside the small vocabulary (GPT-2's 50256 is not, and transformers warns about it)
  cfg = GPT2Config(**{**TINY, "initializer_range": 0.3, "bos_token_id": 0, "eos_token_id": 0, **overrides})
  model = GPT2LMHeadModel(cfg).eval()
  model.save_pretrained(path)
  return model


if __name__ == "__main__":
  if len(sys.argv) != 2:
    raise SystemExit(f"usage: {sys.argv[0]} DIR")
  make_tiny_gpt2(sys.argv[1])
  print(f"wrote a tiny random GPT-2 to {sys.argv[1]}")
