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

import os
import sys
from typing import Any

import benchlib as bl  # sorts first: sets thread counts before numpy/torch load
import decodelib
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


WEIGHT_BYTES = 4 * (layer_params() + LAYERS * 2 * D + D + VOCAB * D)  # the layers, their norms, the final norm, the head
MODEL = decodelib.DecodeModel("LLaMA 125M", VOCAB, make_models, prefill_flops, WEIGHT_BYTES)


def run(mode: str = "small", prompt_len: int = 128, reps: int | None = None) -> list[bl.Row]:
  return decodelib.run(MODEL, mode, prompt_len, reps)


def main() -> None:
  decodelib.main(MODEL, __doc__, "LLaMA decode")


if __name__ == "__main__":
  main()
