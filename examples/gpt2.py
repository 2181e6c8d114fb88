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

The model is importable (`from examples.gpt2 import GPT2, load_gpt2, generate`) and keeps Hugging Face's parameter
names, so the checkpoint's tensors load by name (the Conv1D weights transposed into nn.Linear's layout). How it runs:
the prompt goes through the model in one call (the prefill), which writes every layer's keys and values into a cache
preallocated for the whole context; then each new token is one call of a decode step that reads the cache up to
`start_pos` and writes its own keys and values at `start_pos`. The decode step runs under TinyJit with `start_pos`
(and the token) as bound Variables, so one captured set of kernels serves every position: nothing is compiled after
the second step.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Protocol

import numpy as np

from tg import Device, Tensor, TinyJit, Variable
from tg.nn import Embedding, LayerNorm, Linear
from tg.nn.state import get_state_dict, load_state_dict, safe_load, torch_load
from tg.shape.symbolic import Node, sint

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
    try:
      with open(path) as f:
        raw = json.load(f)
    except json.JSONDecodeError as e:
      raise ValueError(f"{path} is not valid JSON: {e}") from None
    if raw.get("model_type", "gpt2") != "gpt2":
      raise ValueError(f"{path} describes a {raw['model_type']!r} model, not GPT-2 (model_type 'gpt2')")
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


class Attention:
  def __init__(self, cfg: GPT2Config, layer_idx: int, max_context: int) -> None:
    self.c_attn, self.c_proj = Linear(cfg.n_embd, 3 * cfg.n_embd), Linear(cfg.n_embd, cfg.n_embd)
    self.n_head, self.head_dim, self.max_context = cfg.n_head, cfg.n_embd // cfg.n_head, max_context
    self.scale = (1 / math.sqrt(self.head_dim) if cfg.scale_attn_weights else 1.0) / (layer_idx + 1 if cfg.scale_attn_by_inverse_layer_idx else 1)
    self.cache_kv: Tensor | None = None  # (2, batch, heads, max_context, head_dim), made on the first call

  def __call__(self, x: Tensor, start_pos: int | Variable, mask: Tensor | None) -> Tensor:
    bsz, seqlen, dim = x.shape
    # (batch, seqlen, 3 * dim) -> three (batch, heads, seqlen, head_dim)
    qkv = self.c_attn(x).reshape(bsz, seqlen, 3, self.n_head, self.head_dim).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    if self.cache_kv is None or self.cache_kv.shape[1] != bsz:
      self.cache_kv = Tensor.zeros(2, bsz, self.n_head, self.max_context, self.head_dim, dtype=x.dtype).contiguous().realize()
    # write this call's keys and values at [start_pos, start_pos + seqlen) in place; with a symbolic start_pos the
    # kernel that does it is the same for every position
    self.cache_kv.shrink((None, None, None, (start_pos, start_pos + seqlen), None)).assign(Tensor.stack(k, v)).realize()
    keys = self.cache_kv[0].shrink((None, None, (0, start_pos + seqlen), None))
    values = self.cache_kv[1].shrink((None, None, (0, start_pos + seqlen), None))
    scores = (q @ keys.transpose(-2, -1)) * self.scale
    if mask is not None:
      scores = scores + mask
    out = scores.softmax(-1) @ values  # (batch, heads, seqlen, head_dim)
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


class GPT2:
  """Hugging Face's GPT2LMHeadModel: `transformer` and the language-model head, which reuses `transformer.wte.weight`
  (tied) unless the config unties it (then `lm_head.weight` is a tensor of its own)."""

  def __init__(self, cfg: GPT2Config, max_context: int | None = None) -> None:
    self.config, self.max_context = cfg, min(max_context or cfg.n_positions, cfg.n_positions)
    self.transformer = Transformer(cfg, self.max_context)
    self.lm_head: dict[str, Tensor] = {} if cfg.tie_word_embeddings else {"weight": Tensor.empty(cfg.vocab_size, cfg.n_embd)}
    # decode steps take the position and the token as Variables: one compiled step serves every value (a Variable's
    # range must hold two values at least, or it is a constant)
    self.start_pos_var = Variable("start_pos", 1, max(self.max_context - 1, 2))
    self.token_var = Variable("token", 0, max(cfg.vocab_size - 1, 1))
    self.row_var = Variable("row", 0, max(self.max_context - 1, 1))
    self.decode_jit: TinyJit[Tensor] | None = None

  def __call__(self, tokens: Tensor | Variable | list[int], start_pos: int | Variable = 0, last_only: bool = False) -> Tensor:
    """Logits (batch, seqlen, vocab) for `tokens` at positions start_pos.., keys and values of the earlier positions
    coming from the cache. `tokens` is a (batch, seqlen) int Tensor, or one sequence of token ids (a list: batch 1, its
    embeddings copied row by row, see embed_ids), or one token as a bound Variable (batch 1, seqlen 1: its embedding is
    a symbolic slice of wte, so a jitted step needs no input tensor at all). `last_only` computes the logits of the last
    position only (what generation needs: the head is the largest matmul of a step)."""
    tf = self.transformer
    seqlen: sint
    if isinstance(tokens, Node):
      seqlen, tok_emb = 1, tf.wte.weight.shrink(((tokens, tokens + 1), None)).reshape(1, 1, -1)
    elif isinstance(tokens, list):
      seqlen, tok_emb = len(tokens), self.embed_ids(tokens).reshape(1, len(tokens), -1)
    else:
      seqlen, tok_emb = tokens.shape[1], tf.wte(tokens)
    assert isinstance(seqlen, int), "the number of new tokens is concrete; the cache's length is what varies"
    pos_emb = tf.wpe.weight.shrink(((start_pos, start_pos + seqlen), None))
    x = tok_emb + pos_emb
    mask = None
    if seqlen > 1:  # causal: position start_pos + i sees the cache and the new tokens up to i
      if not isinstance(start_pos, int):
        raise ValueError("a call with several new tokens (a prefill) takes an int start_pos; a symbolic one is for one-token decode steps")
      mask = Tensor.full((1, 1, seqlen, start_pos + seqlen), -math.inf, dtype=x.dtype, device=x.device).triu(start_pos + 1)
    for block in tf.h:
      x = block(x, start_pos, mask)
    if last_only:
      x = x[:, -1:]
    x = tf.ln_f(x)
    return x @ self.lm_head.get("weight", tf.wte.weight).T

  def embed_ids(self, ids: list[int]) -> Tensor:
    """wte's rows for `ids` (seqlen, n_embd), copied one row per kernel launch with the token and the row as bound
    Variables, so one compiled kernel copies every row. nn.Embedding's gather (`wte(tokens)`, as tinygrad's) compares
    each token with the whole vocabulary and reduces over it: for a 128-token prompt of GPT-2's 50257 tokens that is 5
    billion multiply-adds, a second on CLANG, where these copies take milliseconds."""
    out = Tensor.empty(len(ids), self.config.n_embd, device=self.transformer.wte.weight.device).realize()
    for i, token in enumerate(ids):
      row, tok = self.row_var.bind(i), self.token_var.bind(token)
      out.shrink(((row, row + 1), None)).assign(self.transformer.wte.weight.shrink(((tok, tok + 1), None))).realize()
    return out

  def _decode_step(self, token: Variable, start_pos: Variable) -> Tensor:
    return self(token, start_pos).realize()

  def logits_next(self, tokens: list[int], start_pos: int, jit: bool = True) -> np.ndarray:
    """The next token's logits (vocab,) after `tokens` placed at start_pos.. (the cache holds what comes before):
    several tokens are a prefill, one token a decode step (jitted unless jit=False)."""
    if not (0 <= start_pos and start_pos + len(tokens) <= self.max_context):
      raise ValueError(f"positions {start_pos}..{start_pos + len(tokens) - 1} don't fit the context of {self.max_context}")
    if len(tokens) > 1 or start_pos == 0:
      out = self(tokens, start_pos, last_only=True)
    else:
      args = (self.token_var.bind(tokens[0]), self.start_pos_var.bind(start_pos))
      if not jit:
        out = self._decode_step(*args)
      else:
        if self.decode_jit is None:
          self.decode_jit = TinyJit(self._decode_step)
        out = self.decode_jit(*args)
    logits: np.ndarray = out.numpy().reshape(-1)
    return logits


# ---------- loading a Hugging Face checkpoint ----------

HF_BUFFERS = (".attn.bias", ".attn.masked_bias")  # causal-mask buffers older checkpoints store: the mask is computed here
# Hugging Face's GPT-2 computes these layers with its Conv1D, whose weight is stored (in, out): nn.Linear's transposed
CONV1D_WEIGHTS = (".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight")


def _read_weights(model_dir: str) -> dict[str, Tensor]:
  st, bin_ = os.path.join(model_dir, "model.safetensors"), os.path.join(model_dir, "pytorch_model.bin")
  index = os.path.join(model_dir, "model.safetensors.index.json")
  if os.path.isfile(st):
    return safe_load(st)
  if os.path.isfile(index):  # a sharded checkpoint: the index maps each tensor to its file
    with open(index) as f:
      shards = sorted(set(json.load(f)["weight_map"].values()))
    return {k: v for shard in shards for k, v in safe_load(os.path.join(model_dir, shard)).items()}
  if os.path.isfile(bin_):
    return torch_load(bin_)
  raise FileNotFoundError(f"{model_dir} has no weights: expected model.safetensors (or model.safetensors.index.json with its shards, or "
                          "pytorch_model.bin); download a checkpoint with `hf download gpt2 --local-dir DIR` (pip install huggingface_hub)")


def load_gpt2(model_dir: str, max_context: int | None = None) -> GPT2:
  """A GPT2 with the weights of a Hugging Face model directory (config.json + model.safetensors), on Device.DEFAULT.
  Names may carry GPT2LMHeadModel's `transformer.` prefix or not (GPT2Model's); `lm_head.weight` may be missing (it is
  wte's, tied); the attention-mask buffers old checkpoints store are ignored."""
  if not os.path.isdir(model_dir):
    raise FileNotFoundError(f"model directory {model_dir!r} does not exist; get one with `hf download gpt2 --local-dir {model_dir}` "
                            "(pip install huggingface_hub; `huggingface-cli download` before its 1.0), or `save_pretrained` in transformers")
  config_path = os.path.join(model_dir, "config.json")
  if not os.path.isfile(config_path):
    raise FileNotFoundError(f"{model_dir} has no config.json: it is not a Hugging Face model directory")
  model = GPT2(GPT2Config.from_json(config_path), max_context)
  load_hf_weights(model, _read_weights(model_dir), where=model_dir)
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
  missing, unexpected = sorted(set(want) - set(state)), sorted(set(state) - set(want))
  if missing or unexpected:
    raise ValueError(f"{where}: the weights don't match config.json's GPT-2: missing {missing[:8]}{' ...' if len(missing) > 8 else ''}, "
                     f"unexpected {unexpected[:8]}{' ...' if len(unexpected) > 8 else ''}")
  load_state_dict(model, state)


# ---------- sampling and generation ----------


def check_sampling(temperature: float, top_k: int, top_p: float) -> None:
  if not (math.isfinite(temperature) and temperature >= 0):
    raise ValueError(f"temperature must be a finite number >= 0 (0: greedy), got {temperature}")
  if top_k < 0:
    raise ValueError(f"top_k must be >= 0 (0: no limit), got {top_k}")
  if not 0 < top_p <= 1:
    raise ValueError(f"top_p must be in (0, 1] (1: no limit), got {top_p}")


def sample(logits: np.ndarray, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, rng: np.random.Generator | None = None) -> int:
  """The next token from one position's logits: argmax at temperature 0, else drawn from softmax(logits / temperature)
  restricted to the top_k most likely tokens (0: all) and then to the fewest most likely whose probability adds up to
  top_p (as Hugging Face's TopK and TopP warpers). On the host with numpy: it touches one row of vocab floats per
  token, nothing next to the step's weights, and a numpy Generator makes --seed give the same tokens on every device."""
  if temperature == 0:
    return int(np.argmax(logits))
  z = logits.astype(np.float64) / temperature
  if 0 < top_k < len(z):
    kth = np.partition(z, len(z) - top_k)[len(z) - top_k]
    z = np.where(z >= kth, z, -np.inf)
  p = np.exp(z - z.max())
  p /= p.sum()
  if top_p < 1:
    order = np.argsort(-p, kind="stable")
    before = np.cumsum(p[order]) - p[order]  # the mass of the tokens more likely than each
    drop = order[before >= top_p]  # the most likely token is always kept (its `before` is 0)
    p[drop] = 0
    p /= p.sum()
  rng = rng if rng is not None else np.random.default_rng()
  return int(rng.choice(len(p), p=p))


def generate(model: GPT2, prompt: list[int], count: int, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
             seed: int | None = None, jit: bool = True, on_token: Callable[[int], None] | None = None) -> list[int]:
  """`count` new tokens after `prompt` (a list of token ids): one prefill call, then one decode step per token."""
  check_sampling(temperature, top_k, top_p)
  if not prompt:
    raise ValueError("the prompt is empty: GPT-2 needs at least one token to start from")
  if bad := [t for t in prompt if not 0 <= t < model.config.vocab_size]:
    raise ValueError(f"prompt token ids {bad[:5]} are outside the vocabulary [0, {model.config.vocab_size})")
  if len(prompt) > model.max_context:
    raise ValueError(f"the prompt has {len(prompt)} tokens, more than the model's context of {model.max_context} (n_positions)")
  if count < 0 or len(prompt) + count > model.max_context:
    raise ValueError(f"{len(prompt)} prompt tokens + count {count} would pass the model's context of {model.max_context} (n_positions): "
                     f"count can be at most {model.max_context - len(prompt)}")
  rng = np.random.default_rng(seed)
  out: list[int] = []
  pos, new = 0, list(prompt)
  for _ in range(count):
    token = sample(model.logits_next(new, pos, jit), temperature, top_k, top_p, rng)
    pos, new = pos + len(new), [token]
    out.append(token)
    if on_token is not None:
      on_token(token)
  return out


# ---------- tokenizers ----------


def _gpt2_byte_order() -> list[int]:
  """GPT-2's first 256 token ids are the 256 bytes in this order: the printable ones first, then the rest."""
  printable = [*range(ord("!"), ord("~") + 1), *range(ord("\xa1"), ord("\xac") + 1), *range(ord("\xae"), ord("\xff") + 1)]
  return printable + [b for b in range(256) if b not in printable]


class ByteTokenizer:
  """The fallback without a tokenizer library: every byte of the text is its own token (GPT-2's single-byte tokens),
  so any text encodes, but not into the merged tokens the model was trained on. Ids past the bytes decode through the
  directory's vocab.json when there is one, else as <id>."""

  def __init__(self, model_dir: str) -> None:
    order = _gpt2_byte_order()
    self.byte_to_id = {b: i for i, b in enumerate(order)}
    self.id_to_bytes = {i: bytes([b]) for i, b in enumerate(order)}
    vocab_path = os.path.join(model_dir, "vocab.json")
    if os.path.isfile(vocab_path):
      # vocab.json spells bytes as characters: the 188 printable bytes as themselves, the n-th other byte as chr(256 + n)
      char_to_byte = {chr(b if i < 188 else 256 + i - 188): b for i, b in enumerate(order)}
      with open(vocab_path, encoding="utf-8") as f:
        for piece, i in json.load(f).items():
          if all(c in char_to_byte for c in piece):
            self.id_to_bytes[i] = bytes(char_to_byte[c] for c in piece)

  def encode(self, text: str) -> list[int]:
    return [self.byte_to_id[b] for b in text.encode("utf-8")]

  def decode(self, ids: list[int]) -> str:
    return b"".join(self.id_to_bytes.get(i, f"<{i}>".encode()) for i in ids).decode("utf-8", errors="replace")


class Tokenizer(Protocol):
  def encode(self, text: str) -> list[int]: ...
  def decode(self, ids: list[int]) -> str: ...


def load_tokenizer(model_dir: str) -> tuple[Tokenizer, str]:
  """(a tokenizer, a line saying which)."""
  tokenizers: Any
  try:
    import tokenizers
  except ImportError:
    tokenizers = None
  tj, vocab, merges = (os.path.join(model_dir, f) for f in ("tokenizer.json", "vocab.json", "merges.txt"))
  if tokenizers is not None and os.path.isfile(tj):
    tok = tokenizers.Tokenizer.from_file(tj)
    return _Wrapped(lambda s: tok.encode(s).ids, tok.decode), f"tokenizers ({tj})"
  if tokenizers is not None and os.path.isfile(vocab) and os.path.isfile(merges):
    bpe = tokenizers.ByteLevelBPETokenizer(vocab, merges)
    return _Wrapped(lambda s: bpe.encode(s).ids, bpe.decode), f"tokenizers (vocab.json + merges.txt in {model_dir})"
  why = "the tokenizers package is not installed" if tokenizers is None else f"{model_dir} has no tokenizer.json or vocab.json + merges.txt"
  return ByteTokenizer(model_dir), f"byte-level fallback ({why}): each byte is one token, which GPT-2 reads less well than its BPE tokens"


@dataclass
class _Wrapped:
  encode: Callable[[str], list[int]]
  decode: Callable[[list[int]], str]


# ---------- command line ----------


def parse_ids(text: str) -> list[int]:
  try:
    return [int(t) for t in text.replace(",", " ").split()]
  except ValueError:
    raise argparse.ArgumentTypeError(f"--prompt-ids takes integers separated by commas (1,2,3), got {text!r}") from None


def main(argv: list[str] | None = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--model", required=True, metavar="DIR", help="a Hugging Face GPT-2 directory (config.json + model.safetensors)")
  prompt = parser.add_mutually_exclusive_group()
  prompt.add_argument("--prompt", default=None, help="text to continue (default: 'Hello, I am a language model,')")
  prompt.add_argument("--prompt-ids", type=parse_ids, metavar="1,2,3", help="token ids to continue; the output is then ids too")
  parser.add_argument("--count", type=int, default=40, help="how many tokens to generate (default 40)")
  parser.add_argument("--greedy", action="store_true", help="always take the most likely token (same as --temperature 0)")
  parser.add_argument("--temperature", type=float, default=None, help="sampling temperature (default 0.8; 0: greedy)")
  parser.add_argument("--top-k", type=int, default=None, help="sample among the k most likely tokens only (default 0: all)")
  parser.add_argument("--top-p", type=float, default=None, help="sample among the most likely tokens whose probabilities add to p (default 1)")
  parser.add_argument("--seed", type=int, default=None, help="seed of the sampler: the same seed gives the same tokens")
  parser.add_argument("--no-jit", action="store_true", help="run the decode steps eagerly instead of under TinyJit")
  args = parser.parse_args(argv)
  if args.greedy and any(v is not None for v in (args.temperature, args.top_k, args.top_p)):
    parser.error("--greedy takes no --temperature, --top-k or --top-p (it always picks the most likely token)")
  temperature = 0.0 if args.greedy else (0.8 if args.temperature is None else args.temperature)
  top_k, top_p = args.top_k or 0, 1.0 if args.top_p is None else args.top_p
  try:
    check_sampling(temperature, top_k, top_p)
  except ValueError as e:
    parser.error(str(e))
  if args.count < 0:
    parser.error(f"--count must be >= 0, got {args.count}")

  def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)  # stdout carries only the generated text or ids
  log(f"device: {Device.describe_default()}")
  try:
    st = time.perf_counter()
    model = load_gpt2(args.model)
  except (FileNotFoundError, ValueError) as e:
    raise SystemExit(f"error: {e}") from None
  cfg = model.config
  log(f"loaded {args.model}: {cfg.n_layer} layers, {cfg.n_embd} wide, {cfg.n_head} heads, vocab {cfg.vocab_size}, "
      f"context {cfg.n_positions}, in {time.perf_counter() - st:.1f}s")
  tokenizer: Tokenizer | None = None
  if args.prompt_ids is not None:
    ids = args.prompt_ids
  else:
    tokenizer, which = load_tokenizer(args.model)
    log(f"tokenizer: {which}")
    ids = tokenizer.encode(args.prompt if args.prompt is not None else "Hello, I am a language model,")
  stream = tokenizer is not None and sys.stdout.isatty()
  if tokenizer is not None and stream:
    print(tokenizer.decode(ids), end="", flush=True)
  times: list[float] = []

  def on_token(token: int) -> None:
    times.append(time.perf_counter())
    if tokenizer is not None and stream:
      print(tokenizer.decode([token]), end="", flush=True)
  try:
    st = time.perf_counter()
    out = generate(model, ids, args.count, temperature, top_k, top_p, args.seed, jit=not args.no_jit, on_token=on_token)
  except ValueError as e:
    raise SystemExit(f"error: {e}") from None
  if tokenizer is None:
    print(" ".join(str(t) for t in ids + out))
  elif stream:
    print()
  else:
    print(tokenizer.decode(ids + out))
  if times:
    decode = f", then {(len(times) - 1) / (times[-1] - times[0]):.1f} tokens/s" if len(times) > 1 and times[-1] > times[0] else ""
    log(f"prefill of {len(ids)} tokens {times[0] - st:.2f}s{decode} ({'eager' if args.no_jit else 'TinyJit'} decode)")


if __name__ == "__main__":
  main()
