"""A tiny LLaMA with random weights, written by transformers as a Hugging Face model directory (config.json +
model.safetensors), and the same weights written as GGUF files the way llama.cpp's converter writes them: what the
model tests load, since no real checkpoint can be downloaded in CI.

  python tests/models/tiny_llama.py DIR            # writes DIR (safetensors) and DIR/model-F32.gguf, -F16, -Q8_0, -Q4_0
"""
from __future__ import annotations

import math
import os
import sys
from typing import Any

# grouped-query attention (4 query heads share 2 kv heads); every width a multiple of 32, ggml's quantization block
TINY = {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 320, "max_position_embeddings": 64, "rms_norm_eps": 1e-5}
GGUF_TYPES = ("F32", "F16", "Q8_0", "Q4_0")


def vocabulary(n: int) -> list[str]:
  """A SentencePiece-like vocabulary of n pieces: <unk>, <s>, </s>, the 256 byte tokens <0x00>..<0xFF> (LLaMA 2's
  layout), then made-up pieces."""
  pieces = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256))]
  letters = "etaoinshrdlucmfwypvbgkjqxz"
  extra = [f"\u2581{c}" for c in letters] + [a + b for a in letters for b in letters]
  return (pieces + extra)[:n]


def make_tiny_llama(path: str, seed: int = 0, **overrides: Any) -> Any:
  """Save a random LlamaForCausalLM to `path` and return it (in eval mode). initializer_range 0.3 (LLaMA's is 0.02)
  makes the logits differ enough from token to token that greedy decoding wanders through the vocabulary instead of
  repeating one token, so 20 matching tokens mean something."""
  import torch
  from transformers import LlamaConfig, LlamaForCausalLM
  torch.manual_seed(seed)
  cfg = LlamaConfig(**{**TINY, "initializer_range": 0.3, "bos_token_id": 1, "eos_token_id": 2, **overrides})
  model: Any = LlamaForCausalLM(cfg)
  model.eval()
  model.save_pretrained(path)
  return model


def llamacpp_permute(w: Any, n_heads: int) -> Any:
  """What llama.cpp's convert_hf_to_gguf.py does to attn_q and attn_k (its `permute`): each head's rows [0, d/2) and
  [d/2, d), the halves Hugging Face's rotate_half pairs, interleaved, as llama.cpp rotates adjacent pairs."""
  return w.reshape(n_heads, 2, w.shape[0] // n_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_rope_factors(rope: dict[str, Any], theta: float, head_dim: int) -> Any:
  """rope_freqs.weight as llama.cpp's converter computes it for rope_type llama3: what each frequency is divided by."""
  import numpy as np
  factor, low, high, old = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"], rope["original_max_position_embeddings"]
  out = []
  for freq in 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim):
    wavelen = 2 * math.pi / freq
    if wavelen < old / high:
      out.append(1.0)
    elif wavelen > old / low:
      out.append(factor)
    else:
      smooth = (old / wavelen - low) / (high - low)
      out.append(1 / ((1 - smooth) / factor + smooth))
  return np.array(out, dtype=np.float32)


def write_gguf(hf: Any, path: str, qtype: str = "F32") -> str:
  """Write `hf`'s weights to the GGUF file `path` as llama.cpp's converter does for architecture "llama": its tensor
  names, q/k rows permuted, 1-d tensors (the norms) kept F32, the 2-d ones stored as `qtype` (F32, F16, Q8_0, Q4_0:
  quantized by the gguf package's own quantizer), output.weight left out when the embeddings are tied."""
  import gguf
  import numpy as np
  cfg = hf.config
  heads, kv_heads, head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.hidden_size // cfg.num_attention_heads
  qt = gguf.GGMLQuantizationType[qtype]
  file_types = {"F32": gguf.LlamaFileType.ALL_F32, "F16": gguf.LlamaFileType.MOSTLY_F16, "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
                "Q4_0": gguf.LlamaFileType.MOSTLY_Q4_0}
  w = gguf.GGUFWriter(path, "llama")
  w.add_name("tiny-llama")
  w.add_context_length(cfg.max_position_embeddings)
  w.add_embedding_length(cfg.hidden_size)
  w.add_block_count(cfg.num_hidden_layers)
  w.add_feed_forward_length(cfg.intermediate_size)
  w.add_head_count(heads)
  w.add_head_count_kv(kv_heads)
  w.add_rope_dimension_count(head_dim)
  w.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]) if getattr(cfg, "rope_parameters", None) else float(cfg.rope_theta))
  w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
  w.add_vocab_size(cfg.vocab_size)
  w.add_file_type(file_types[qtype])
  pieces = vocabulary(cfg.vocab_size)
  w.add_tokenizer_model("llama")
  w.add_token_list(pieces)
  w.add_token_scores([0.0] * len(pieces))
  w.add_token_types([2, 3, 3, *[6] * 256, *[1] * (len(pieces) - 259)])  # unknown, control, byte, normal
  w.add_bos_token_id(1)
  w.add_eos_token_id(2)
  rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
  if rope.get("rope_type") == "llama3":  # llama.cpp stores LLaMA 3's frequency scaling as a tensor of divisors
    w.add_tensor("rope_freqs.weight", llama3_rope_factors(rope, float(rope.get("rope_theta", 10000.0)), head_dim))
  layer_names = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "self_attn.q_proj": "attn_q",
                 "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate",
                 "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
  tied = cfg.tie_word_embeddings
  for name, t in hf.state_dict().items():
    a = t.detach().float().numpy().copy()
    if name == "model.embed_tokens.weight":
      out = "token_embd.weight"
    elif name == "model.norm.weight":
      out = "output_norm.weight"
    elif name == "lm_head.weight":
      if tied:
        continue
      out = "output.weight"
    else:
      _, _, n, rest = name.split(".", 3)
      out = f"blk.{n}.{layer_names[rest.removesuffix('.weight')]}.weight"
      if rest == "self_attn.q_proj.weight":
        a = llamacpp_permute(a, heads)
      elif rest == "self_attn.k_proj.weight":
        a = llamacpp_permute(a, kv_heads)
    if a.ndim == 1 or qt == gguf.GGMLQuantizationType.F32:
      w.add_tensor(out, a.astype(np.float32))
    elif qt == gguf.GGMLQuantizationType.F16:
      w.add_tensor(out, a.astype(np.float16))
    else:
      w.add_tensor(out, gguf.quants.quantize(a, qt), raw_dtype=qt)
  w.write_header_to_file()
  w.write_kv_data_to_file()
  w.write_tensors_to_file()
  w.close()
  return path


if __name__ == "__main__":
  if len(sys.argv) != 2:
    raise SystemExit(f"usage: {sys.argv[0]} DIR")
  hf = make_tiny_llama(sys.argv[1])
  for q in GGUF_TYPES:
    write_gguf(hf, os.path.join(sys.argv[1], f"model-{q}.gguf"), q)
  print(f"wrote a tiny random LLaMA to {sys.argv[1]} (safetensors) and {', '.join(f'model-{q}.gguf' for q in GGUF_TYPES)} beside it")
