"""GPT-2 inference in tg: a Hugging Face GPT-2 checkpoint directory, a KV cache, and a decode step under TinyJit.

  python examples/gpt2.py --model DIR --prompt "Hello, my name is" --count 40
  python examples/gpt2.py --model DIR --prompt-ids 15496,11,616,1438,318 --count 20 --greedy   # prints token ids
  DEVICE=CLANG python examples/gpt2.py --model DIR --prompt "The meaning of life is" --temperature 0.8 --top-p 0.9 --seed 1

DIR is a Hugging Face model directory: config.json and model.safetensors (or pytorch_model.bin), as written by
`save_pretrained` or downloaded with huggingface_hub's `hf download gpt2 --local-dir DIR` (`huggingface-cli download`
before its 1.0; gpt2, gpt2-medium, gpt2-large, gpt2-xl and distilgpt2 all work). tg ships no tokenizer: text prompts
are tokenized by `tokenizers` (tokenizer.json, or vocab.json + merges.txt, in DIR) when it is installed, else byte by
byte (each byte is its own GPT-2 token, which the model reads less well; the program says so). Information goes to
stderr; stdout gets the text (prompt included) or, with --prompt-ids, the token ids on one line.

The model is importable (`from examples.gpt2 import GPT2, load_gpt2, generate, sample`) and keeps Hugging Face's
parameter names, so the checkpoint's tensors load by name (the Conv1D weights transposed into nn.Linear's layout). How
it runs (examples/lm_common.py's CachedAttention and CachedDecoder, which examples/llama.py uses too): the prompt goes
through the model in one call (the prefill), which writes every layer's keys and values into a cache preallocated for
the whole context; then each new token is one call of a decode step that reads the cache up to `start_pos` and writes
its own keys and values at `start_pos`. The decode step runs under TinyJit with `start_pos` (and the token) as bound
Variables, so one captured set of kernels serves every position: nothing is compiled after the second step. Sampling,
the generation loop and the command line's options and output are lm_common's too.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, fields

from tg import Tensor, Variable
from tg.nn import Embedding, LayerNorm, Linear
from tg.nn.state import get_state_dict, load_state_dict

# lm_common lies beside this file: on sys.path already when this runs as a script, not when it is imported as
# examples.gpt2 (the tests, bench/); appended, not prepended, so examples/' file names shadow nothing
if (_here := os.path.dirname(os.path.abspath(__file__))) not in sys.path:
  sys.path.append(_here)
import lm_common as lm
from lm_common import Tokenizer, check_sampling, parse_ids, sample  # noqa: F401  (re-exported: `from examples.gpt2 import sample`)

DEFAULT_PROMPT = "Hello, I am a language model,"
GET_IT = "download a checkpoint with `hf download gpt2 --local-dir DIR` (pip install huggingface_hub)"

# ---------- the model ----------


@dataclass(frozen=True)
class GPT2Config:
  """The fields of a Hugging Face GPT2Config (config.json) that change the computation."""
  vocab_size: int = 50257
  n_positions: int = 1024
  n_embd: int = 768
  n_layer: int = 12
  n_head: int = 12
  n_inner: int | None = None  # the MLP's width; None: 4 * n_embd
  layer_norm_epsilon: float = 1e-5
  activation_function: str = "gelu_new"
  scale_attn_weights: bool = True
  scale_attn_by_inverse_layer_idx: bool = False
  tie_word_embeddings: bool = True

  @staticmethod
  def from_json(path: str) -> GPT2Config:
    raw = lm.read_config_json(path, "gpt2", "GPT-2")
    if raw.get("add_cross_attention"):
      raise ValueError(f"{path}: add_cross_attention (GPT-2 as an encoder-decoder's decoder) is not supported")
    known = {f.name for f in fields(GPT2Config)}
    cfg = GPT2Config(**{k: v for k, v in raw.items() if k in known})
    if cfg.n_embd % cfg.n_head:
      raise ValueError(f"{path}: n_embd {cfg.n_embd} is not divisible by n_head {cfg.n_head}")
    if cfg.activation_function not in ACTIVATIONS:
      raise ValueError(f"{path}: activation_function {cfg.activation_function!r} is not one of {sorted(ACTIVATIONS)}")
    return cfg


# Hugging Face's ACT2FN names; GPT-2 checkpoints use gelu_new, the tanh approximation (tg's Tensor.gelu)
ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
  "gelu_new": Tensor.gelu, "gelu_pytorch_tanh": Tensor.gelu, "gelu_fast": Tensor.gelu,
  "gelu": lambda x: 0.5 * x * (1 + (x * (1 / math.sqrt(2))).erf()), "quick_gelu": lambda x: x * (1.702 * x).sigmoid(),
  "relu": Tensor.relu, "silu": Tensor.silu, "swish": Tensor.silu, "tanh": Tensor.tanh,
}


class Attention(lm.CachedAttention):
  def __init__(self, cfg: GPT2Config, layer_idx: int, max_context: int) -> None:
    self.c_attn, self.c_proj = Linear(cfg.n_embd, 3 * cfg.n_embd), Linear(cfg.n_embd, cfg.n_embd)
    self.n_head, self.head_dim = cfg.n_head, cfg.n_embd // cfg.n_head
    self.scale = (1 / math.sqrt(self.head_dim) if cfg.scale_attn_weights else 1.0) / (layer_idx + 1 if cfg.scale_attn_by_inverse_layer_idx else 1)
    super().__init__(max_context)  # the cache (2, batch, heads, max_context, head_dim), made on the first call

  def __call__(self, x: Tensor, start_pos: int | Variable, mask: Tensor | None) -> Tensor:
    bsz, seqlen, dim = x.shape
    # (batch, seqlen, 3 * dim) -> three (batch, heads, seqlen, head_dim)
    qkv = self.c_attn(x).reshape(bsz, seqlen, 3, self.n_head, self.head_dim).permute(2, 0, 3, 1, 4)
    out = self.attend(qkv[0], qkv[1], qkv[2], start_pos, self.scale, mask)  # (batch, heads, seqlen, head_dim)
    return self.c_proj(out.transpose(1, 2).reshape(bsz, seqlen, dim))


class MLP:
  def __init__(self, cfg: GPT2Config) -> None:
    inner = cfg.n_inner or 4 * cfg.n_embd
    self.c_fc, self.c_proj, self.act = Linear(cfg.n_embd, inner), Linear(inner, cfg.n_embd), ACTIVATIONS[cfg.activation_function]

  def __call__(self, x: Tensor) -> Tensor:
    return self.c_proj(self.act(self.c_fc(x)))


class Block:
  def __init__(self, cfg: GPT2Config, layer_idx: int, max_context: int) -> None:
    self.ln_1, self.ln_2 = LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon), LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
    self.attn, self.mlp = Attention(cfg, layer_idx, max_context), MLP(cfg)

  def __call__(self, x: Tensor, start_pos: int | Variable, mask: Tensor | None) -> Tensor:
    h = x + self.attn(self.ln_1(x), start_pos, mask)
    return h + self.mlp(self.ln_2(h))


class Transformer:
  """Hugging Face's GPT2Model: embeddings, the blocks, the final LayerNorm (named wte, wpe, h.N, ln_f as there)."""

  def __init__(self, cfg: GPT2Config, max_context: int) -> None:
    self.wte, self.wpe = Embedding(cfg.vocab_size, cfg.n_embd), Embedding(cfg.n_positions, cfg.n_embd)
    self.h = [Block(cfg, i, max_context) for i in range(cfg.n_layer)]
    self.ln_f = LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)


class GPT2(lm.CachedDecoder):
  """Hugging Face's GPT2LMHeadModel: `transformer` and the language-model head, which reuses `transformer.wte.weight`
  (tied) unless the config unties it (then `lm_head.weight` is a tensor of its own). Prefill, the jitted decode step
  (`logits_next`) and the prompt's embedding (`embed`) are lm_common.CachedDecoder's."""

  def __init__(self, cfg: GPT2Config, max_context: int | None = None) -> None:
    self.config, self.max_context = cfg, min(max_context or cfg.n_positions, cfg.n_positions)
    self.transformer = Transformer(cfg, self.max_context)
    self.lm_head: dict[str, Tensor] = {} if cfg.tie_word_embeddings else {"weight": Tensor.empty(cfg.vocab_size, cfg.n_embd)}
    super().__init__(cfg.vocab_size, self.max_context)

  def token_embedding(self) -> Embedding:
    return self.transformer.wte

  def __call__(self, tokens: Tensor | Variable | list[int], start_pos: int | Variable = 0, last_only: bool = False) -> Tensor:
    """Logits (batch, seqlen, vocab) for `tokens` at positions start_pos.., keys and values of the earlier positions
    coming from the cache. `tokens` is a (batch, seqlen) int Tensor, or one sequence of token ids (a list: batch 1, its
    embeddings copied row by row, see embed_ids), or one token as a bound Variable (batch 1, seqlen 1: its embedding is
    a symbolic slice of wte, so a jitted step needs no input tensor at all). `last_only` computes the logits of the last
    position only (what generation needs: the head is the largest matmul of a step)."""
    tf = self.transformer
    seqlen, tok_emb = self.embed(tokens)
    x = tok_emb + tf.wpe.weight.shrink(((start_pos, start_pos + seqlen), None))
    mask = lm.causal_mask(seqlen, start_pos, x)
    for block in tf.h:
      x = block(x, start_pos, mask)
    if last_only:
      x = x[:, -1:]
    x = tf.ln_f(x)
    return x @ self.lm_head.get("weight", tf.wte.weight).T


# ---------- loading a Hugging Face checkpoint ----------

HF_BUFFERS = (".attn.bias", ".attn.masked_bias")  # causal-mask buffers older checkpoints store: the mask is computed here
# Hugging Face's GPT-2 computes these layers with its Conv1D, whose weight is stored (in, out): nn.Linear's transposed
CONV1D_WEIGHTS = (".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight")


def load_gpt2(model_dir: str, max_context: int | None = None) -> GPT2:
  """A GPT2 with the weights of a Hugging Face model directory (config.json + model.safetensors), on Device.DEFAULT.
  Names may carry GPT2LMHeadModel's `transformer.` prefix or not (GPT2Model's); `lm_head.weight` may be missing (it is
  wte's, tied); the attention-mask buffers old checkpoints store are ignored."""
  if not os.path.isdir(model_dir):
    raise FileNotFoundError(f"model directory {model_dir!r} does not exist; get one with `hf download gpt2 --local-dir {model_dir}` "
                            "(pip install huggingface_hub; `huggingface-cli download` before its 1.0), or `save_pretrained` in transformers")
  model = GPT2(GPT2Config.from_json(lm.config_path(model_dir)), max_context)
  load_hf_weights(model, lm.read_hf_weights(model_dir, GET_IT), where=model_dir)
  return model


def load_hf_weights(model: GPT2, weights: dict[str, Tensor], where: str = "the weights") -> None:
  """Fill `model` with a Hugging Face GPT-2 state dict (names as in its checkpoints, Conv1D weights (in, out)).

  The Conv1D weights are transposed into nn.Linear's (out, in) once here: a decode step multiplies one token's
  vector by every weight, and with each output's weights contiguous along the reduction that matvec streams the
  weights at memory speed (about 1.5x faster than through the (in, out) layout on CLANG)."""
  want = get_state_dict(model)
  state: dict[str, Tensor] = {}
  for name, t in weights.items():
    if name.endswith(HF_BUFFERS) or (name == "lm_head.weight" and model.config.tie_word_embeddings):
      continue
    name = name if name.startswith(("transformer.", "lm_head.")) else f"transformer.{name}"
    if name.endswith(CONV1D_WEIGHTS) and name in want:
      t = t.to(want[name].device).T.contiguous()
    state[name] = t
  lm.check_names(want, state, where, "config.json's GPT-2")
  load_state_dict(model, state)


# ---------- generation ----------


def generate(model: GPT2, prompt: list[int], count: int, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
             seed: int | None = None, jit: bool = True, on_token: Callable[[int], None] | None = None) -> list[int]:
  """`count` new tokens after `prompt` (a list of token ids): one prefill call, then one decode step per token
  (lm_common.generate, its errors naming n_positions)."""
  return lm.generate(model, prompt, count, temperature, top_k, top_p, seed, jit, on_token, context_name="n_positions")


# ---------- tokenizers ----------


class ByteTokenizer(lm.ByteTokenizer):
  """The fallback without a tokenizer library: every byte of the text is its own token (GPT-2's single-byte tokens,
  its first 256 ids in lm_common.gpt2_byte_order), so any text encodes, but not into the merged tokens the model was
  trained on. Ids past the bytes decode through the directory's vocab.json when there is one, else as <id>."""

  def __init__(self, model_dir: str) -> None:
    char_to_byte = lm.byte_level_chars()
    super().__init__(list(char_to_byte), 256)  # the 256 byte characters in id order
    vocab_path = os.path.join(model_dir, "vocab.json")
    if os.path.isfile(vocab_path):  # vocab.json spells each token's bytes as characters (byte_level_chars)
      with open(vocab_path, encoding="utf-8") as f:
        for piece, i in json.load(f).items():
          if all(c in char_to_byte for c in piece):
            self.id_to_bytes[i] = bytes(char_to_byte[c] for c in piece)


def load_tokenizer(model_dir: str) -> tuple[Tokenizer, str]:
  """(a tokenizer, a line saying which): `tokenizers` with DIR's tokenizer.json, or with its vocab.json + merges.txt,
  else GPT-2's byte-level fallback."""
  tokenizers = lm.import_tokenizers()
  tj, vocab, merges = (os.path.join(model_dir, f) for f in ("tokenizer.json", "vocab.json", "merges.txt"))
  if tokenizers is not None and os.path.isfile(tj):
    return lm.json_tokenizer(tokenizers, tj)
  if tokenizers is not None and os.path.isfile(vocab) and os.path.isfile(merges):
    bpe = tokenizers.ByteLevelBPETokenizer(vocab, merges)
    return lm.Wrapped(lambda s: bpe.encode(s).ids, bpe.decode), f"tokenizers (vocab.json + merges.txt in {model_dir})"
  why = "the tokenizers package is not installed" if tokenizers is None else f"{model_dir} has no tokenizer.json or vocab.json + merges.txt"
  return ByteTokenizer(model_dir), f"byte-level fallback ({why}): each byte is one token, which GPT-2 reads less well than its BPE tokens"


# ---------- command line ----------


def main(argv: list[str] | None = None) -> None:
  args, sampling = lm.parse_command_line(__doc__, "DIR", "a Hugging Face GPT-2 directory (config.json + model.safetensors)", DEFAULT_PROMPT, argv)
  try:
    st = time.perf_counter()
    model = load_gpt2(args.model)
  except (FileNotFoundError, ValueError) as e:
    raise SystemExit(f"error: {e}") from None
  cfg = model.config
  lm.log(f"loaded {args.model}: {cfg.n_layer} layers, {cfg.n_embd} wide, {cfg.n_head} heads, vocab {cfg.vocab_size}, "
         f"context {cfg.n_positions}, in {time.perf_counter() - st:.1f}s")
  tokenizer: Tokenizer | None = None
  if args.prompt_ids is not None:
    ids = args.prompt_ids
  else:
    tokenizer, which = load_tokenizer(args.model)
    lm.log(f"tokenizer: {which}")
    ids = tokenizer.encode(args.prompt if args.prompt is not None else DEFAULT_PROMPT)
  lm.run_generation(model, ids, tokenizer, args, sampling, "n_positions")


if __name__ == "__main__":
  main()
