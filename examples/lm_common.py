"""What the language-model examples (examples/gpt2.py, examples/llama.py) share: the KV cache and its attention, the
prompt's row-copy embedding, prefill and the jitted decode step (`CachedAttention`, `CachedDecoder`), sampling, the
generation loop, reading a Hugging Face checkpoint's weight files, the byte-level tokenizer fallback, and the command
line's options and output.

A model plugs into generation through `LanguageModel`: `logits_next(tokens, start_pos, jit)` gives the next token's
logits after `tokens` placed at positions start_pos.. (the model's KV cache holds what comes before), and the model says
its vocabulary size and the context its cache holds. `CachedDecoder` implements it for a model whose `__call__` runs
its layers on embedded tokens: it needs only the token embedding (`token_embedding`).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from tg import Device, Tensor, TinyJit, Variable, dtypes
from tg.nn import Embedding
from tg.nn.state import safe_load, torch_load
from tg.shape.symbolic import Node, sint

# ---------- the KV cache, prefill and the decode step ----------


class CachedAttention:
  """An attention layer's KV cache: one realized tensor (2, batch, kv heads, max_context, head_dim), made on the first
  call, written in place at start_pos by every call and read up to start_pos + seqlen (`attend`)."""

  def __init__(self, max_context: int) -> None:
    self.max_context = max_context
    self.cache_kv: Tensor | None = None

  def attend(self, q: Tensor, k: Tensor, v: Tensor, start_pos: int | Variable, scale: float, mask: Tensor | None) -> Tensor:
    """softmax(q k^T * scale + mask) v over the cache and this call's keys and values: q (batch, heads, seqlen,
    head_dim), k and v (batch, kv heads, seqlen, head_dim), kv heads dividing heads (grouped-query attention when fewer);
    the result is (batch, heads, seqlen, head_dim)."""
    bsz, n_kv, seqlen, head_dim = k.shape
    n_heads = q.shape[1]
    if self.cache_kv is None or self.cache_kv.shape[1] != bsz:
      self.cache_kv = Tensor.zeros(2, bsz, n_kv, self.max_context, head_dim, dtype=k.dtype).contiguous().realize()
    # write this call's keys and values at [start_pos, start_pos + seqlen) in place (with a symbolic start_pos the kernel
    # that does it is the same for every position), realized at once, so the write is ordered before the reads built
    # on the cache's buffer below
    self.cache_kv.shrink((None, None, None, (start_pos, start_pos + seqlen), None)).assign(Tensor.stack(k, v)).realize()
    keys = self.cache_kv[0].shrink((None, None, (0, start_pos + seqlen), None))
    values = self.cache_kv[1].shrink((None, None, (0, start_pos + seqlen), None))
    if n_heads != n_kv:
      # the query heads of a group share their kv head: (batch, kv, group, seqlen, hd) against (batch, kv, 1, ctx, hd)
      # broadcasts the cache instead of copying it group times
      q, keys, values = q.reshape(bsz, n_kv, n_heads // n_kv, seqlen, head_dim), keys.unsqueeze(2), values.unsqueeze(2)
    scores = (q @ keys.transpose(-2, -1)) * scale
    if mask is not None:
      scores = scores + mask
    return (scores.softmax(-1) @ values).reshape(bsz, n_heads, seqlen, head_dim)


def causal_mask(seqlen: int, start_pos: int | Variable, like: Tensor) -> Tensor | None:
  """The additive mask of `seqlen` new tokens at start_pos (None for one token): position start_pos + i sees the cache
  and the new tokens up to i."""
  if seqlen <= 1:
    return None
  if not isinstance(start_pos, int):
    raise ValueError("a call with several new tokens (a prefill) takes an int start_pos; a symbolic one is for one-token decode steps")
  return Tensor.full((1, 1, seqlen, start_pos + seqlen), -math.inf, dtype=like.dtype, device=like.device).triu(start_pos + 1)


class CachedDecoder:
  """A decoder-only model with a KV cache (its layers are `CachedAttention`s): the prompt in one call (the prefill),
  then one call per new token, the decode step, under TinyJit. The step takes the position and the token as bound
  Variables, so one captured set of kernels serves every position and token, and it needs no input tensor at all (the
  token's embedding is a symbolic slice of the embedding table). A subclass says which `token_embedding` it has and
  computes `__call__`, embedding its tokens with `embed`."""

  def __init__(self, vocab_size: int, max_context: int) -> None:
    self.vocab_size, self.max_context = vocab_size, max_context
    # a Variable's range must hold two values at least, or it is a constant
    self.start_pos_var = Variable("start_pos", 1, max(max_context - 1, 2))
    self.token_var = Variable("token", 0, max(vocab_size - 1, 1))
    self.decode_jit: TinyJit[Tensor] | None = None

  def token_embedding(self) -> Embedding:
    raise NotImplementedError

  def __call__(self, tokens: Tensor | Variable | list[int], start_pos: int | Variable = 0, last_only: bool = False) -> Tensor:
    raise NotImplementedError

  def embed(self, tokens: Tensor | Variable | list[int]) -> tuple[int, Tensor]:
    """(seqlen, the token embeddings (batch, seqlen, dim)) of a (batch, seqlen) int Tensor or of one sequence of ids (a
    list: batch 1), both through nn.Embedding (one load per element: codegen/one_hot_select.py), or of one token as a
    bound Variable (batch 1, seqlen 1: a symbolic slice of the table, so a jitted step needs no input tensor)."""
    table = self.token_embedding()
    seqlen: sint
    if isinstance(tokens, Node):
      seqlen, x = 1, table.weight.shrink(((tokens, tokens + 1), None)).reshape(1, 1, -1)
    elif isinstance(tokens, list):
      seqlen, x = len(tokens), table(Tensor([tokens], dtype=dtypes.int32, device=table.weight.device))
    else:
      seqlen, x = tokens.shape[1], table(tokens)
    assert isinstance(seqlen, int), "the number of new tokens is concrete; the cache's length is what varies"
    return seqlen, x

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


# ---------- sampling and generation ----------


class LanguageModel(Protocol):
  @property
  def vocab_size(self) -> int: ...
  @property
  def max_context(self) -> int: ...
  def logits_next(self, tokens: list[int], start_pos: int, jit: bool = True) -> np.ndarray: ...


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
  token, nothing next to a step's weights, and a numpy Generator makes a seed give the same tokens on every device."""
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
    p[order[before >= top_p]] = 0  # the most likely token is always kept (its `before` is 0)
    p /= p.sum()
  rng = rng if rng is not None else np.random.default_rng()
  return int(rng.choice(len(p), p=p))


def check_prompt(model: LanguageModel, prompt: list[int], count: int, context_name: str = "context") -> None:
  """The errors generate raises for a prompt and a count, as sentences; `context_name` names the config field that
  limits the context (n_positions, max_position_embeddings)."""
  if not prompt:
    raise ValueError("the prompt is empty: the model needs at least one token to start from")
  if bad := [t for t in prompt if not 0 <= t < model.vocab_size]:
    raise ValueError(f"prompt token ids {bad[:5]} are outside the vocabulary [0, {model.vocab_size})")
  if len(prompt) > model.max_context:
    raise ValueError(f"the prompt has {len(prompt)} tokens, more than the model's context of {model.max_context} ({context_name})")
  if count < 0 or len(prompt) + count > model.max_context:
    raise ValueError(f"{len(prompt)} prompt tokens + count {count} would pass the model's context of {model.max_context} ({context_name}): "
                     f"count can be at most {model.max_context - len(prompt)}")


def generate(model: LanguageModel, prompt: list[int], count: int, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
             seed: int | None = None, jit: bool = True, on_token: Callable[[int], None] | None = None, context_name: str = "context") -> list[int]:
  """`count` new tokens after `prompt` (a list of token ids): one prefill call, then one decode step per token."""
  check_sampling(temperature, top_k, top_p)
  check_prompt(model, prompt, count, context_name)
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


# ---------- Hugging Face checkpoints ----------


def config_path(model_dir: str) -> str:
  """A Hugging Face model directory's config.json; a FileNotFoundError when it has none."""
  path = os.path.join(model_dir, "config.json")
  if not os.path.isfile(path):
    raise FileNotFoundError(f"{model_dir} has no config.json: it is not a Hugging Face model directory")
  return path


def read_config_json(path: str, model_type: str, model_name: str) -> dict[str, Any]:
  """A config.json's fields; a ValueError when it is not JSON or its model_type is not `model_type`."""
  try:
    with open(path) as f:
      raw: dict[str, Any] = json.load(f)
  except json.JSONDecodeError as e:
    raise ValueError(f"{path} is not valid JSON: {e}") from None
  if raw.get("model_type", model_type) != model_type:
    raise ValueError(f"{path} describes a {raw['model_type']!r} model, not {model_name} (model_type {model_type!r})")
  return raw


def check_names(want: dict[str, Tensor], state: dict[str, Tensor], where: str, model_name: str) -> None:
  """A ValueError naming (the first 8 of) the tensors a checkpoint lacks and those the model has no place for."""
  missing, unexpected = sorted(set(want) - set(state)), sorted(set(state) - set(want))
  if missing or unexpected:
    raise ValueError(f"{where}: the weights don't match {model_name}: missing {missing[:8]}{' ...' if len(missing) > 8 else ''}, "
                     f"unexpected {unexpected[:8]}{' ...' if len(unexpected) > 8 else ''}")


def read_hf_weights(model_dir: str, get_it: str) -> dict[str, Tensor]:
  """The tensors of a Hugging Face model directory by name: model.safetensors, or the shards a
  model.safetensors.index.json lists, or pytorch_model.bin. `get_it` says how to get a checkpoint (for the error)."""
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
                          f"pytorch_model.bin); {get_it}")


# ---------- tokenizers ----------


class Tokenizer(Protocol):
  def encode(self, text: str) -> list[int]: ...
  def decode(self, ids: list[int]) -> str: ...


@dataclass
class Wrapped:
  encode: Callable[[str], list[int]]
  decode: Callable[[list[int]], str]


def gpt2_byte_order() -> list[int]:
  """Byte-level BPE vocabularies (GPT-2's, Llama 3's) spell the 256 bytes as characters: the 188 printable bytes as
  themselves, the n-th other byte as chr(256 + n). This is the bytes in that order (GPT-2's first 256 token ids)."""
  printable = [*range(ord("!"), ord("~") + 1), *range(ord("\xa1"), ord("\xac") + 1), *range(ord("\xae"), ord("\xff") + 1)]
  return printable + [b for b in range(256) if b not in printable]


def byte_level_chars() -> dict[str, int]:
  """How byte-level BPE vocabularies spell the bytes: character -> byte (the 188 printable bytes as themselves, the
  n-th other byte as chr(256 + n))."""
  return {chr(b if i < 188 else 256 + i - 188): b for i, b in enumerate(gpt2_byte_order())}


class ByteTokenizer:
  """The fallback without a tokenizer library: every byte of the text is one token, so any text encodes, but not into
  the merged tokens a model was trained on (it reads them less well). Which id a byte has depends on the vocabulary:

  - SentencePiece vocabularies (Llama 1/2, Mistral) have byte tokens `<0x00>`..`<0xFF>`; their other pieces spell a
    space as U+2581;
  - byte-level BPE vocabularies (GPT-2, Llama 3) spell each byte as one character (gpt2_byte_order);
  - without a vocabulary (`pieces` None), byte b is token b, the convention of byte-level toy models.

  Decoding uses the pieces, so merged tokens a model generates come out as their text; `control` ids (<s>, </s>)
  decode to nothing. `bos`, when given, starts every encoded text (as LLaMA's tokenizers do)."""

  def __init__(self, pieces: Sequence[str] | None, vocab_size: int, control: Sequence[int] = (), bos: int | None = None) -> None:
    self.id_to_bytes: dict[int, bytes] = {}
    self.bos = [bos] if bos is not None else []
    if pieces is None:
      if vocab_size < 256:
        raise ValueError(f"the byte-level fallback needs a token per byte: the vocabulary has only {vocab_size}")
      self.byte_to_id, self.kind = list(range(256)), "byte b is token b (no vocabulary to look the bytes up in)"
      self.id_to_bytes = {b: bytes([b]) for b in range(256)}
      return
    index = {p: i for i, p in enumerate(pieces)}
    char_to_byte = byte_level_chars()
    if all(f"<0x{b:02X}>" in index for b in range(256)):
      self.byte_to_id, self.kind = [index[f"<0x{b:02X}>"] for b in range(256)], "the vocabulary's <0xNN> byte tokens"
      for i, p in enumerate(pieces):
        is_byte = len(p) == 6 and p.startswith("<0x") and p.endswith(">")
        self.id_to_bytes[i] = bytes([int(p[3:5], 16)]) if is_byte else p.replace("\u2581", " ").encode()
    elif all(c in index for c in char_to_byte):
      self.byte_to_id, self.kind = [index[c] for c in sorted(char_to_byte, key=char_to_byte.__getitem__)], "the vocabulary's byte-level tokens"
      for i, p in enumerate(pieces):
        self.id_to_bytes[i] = bytes(char_to_byte[c] for c in p) if all(c in char_to_byte for c in p) else p.encode()
    else:
      raise ValueError("the vocabulary has neither <0xNN> byte tokens nor byte-level BPE tokens: the byte-level fallback can't encode with it")
    for i in control:
      self.id_to_bytes[i] = b""

  def encode(self, text: str) -> list[int]:
    return self.bos + [self.byte_to_id[b] for b in text.encode("utf-8")]

  def decode(self, ids: list[int]) -> str:
    return b"".join(self.id_to_bytes.get(i, f"<{i}>".encode()) for i in ids).decode("utf-8", errors="replace")


def import_tokenizers() -> Any:
  """The `tokenizers` module, or None where it is not installed."""
  try:
    import tokenizers
  except ImportError:
    return None
  return tokenizers


def json_tokenizer(tokenizers: Any, path: str) -> tuple[Tokenizer, str]:
  """(`tokenizers` with a tokenizer.json, a line saying so). Special tokens are added as tokenizer.json's post-processor
  says (LLaMAs' BOS), as transformers' tokenizers add them."""
  tok = tokenizers.Tokenizer.from_file(path)
  return Wrapped(lambda s: tok.encode(s).ids, lambda ids: tok.decode(ids)), f"tokenizers ({path})"


def load_hf_tokenizer(model_dir: str, vocab_size: int) -> tuple[Tokenizer, str]:
  """(a tokenizer for a Hugging Face model directory, a line saying which): `tokenizers` with the directory's
  tokenizer.json when both are there, else the byte-level fallback, with the pieces of tokenizer.json's vocabulary
  when there is one (read as JSON: no library needed)."""
  tokenizers = import_tokenizers()
  tj = os.path.join(model_dir, "tokenizer.json")
  if tokenizers is not None and os.path.isfile(tj):
    return json_tokenizer(tokenizers, tj)
  why = "the tokenizers package is not installed" if tokenizers is None else f"{model_dir} has no tokenizer.json"
  pieces: list[str] | None = None
  if os.path.isfile(tj):
    with open(tj, encoding="utf-8") as f:
      vocab = json.load(f).get("model", {}).get("vocab")
    if isinstance(vocab, dict):
      pieces = [""] * vocab_size
      for piece, i in vocab.items():
        if isinstance(i, int) and 0 <= i < vocab_size:
          pieces[i] = piece
  tok_ = ByteTokenizer(pieces, vocab_size)
  return tok_, f"byte-level fallback ({why}): each byte is one token ({tok_.kind}), which the model reads less well than its merged tokens"


# ---------- command line ----------


def parse_ids(text: str) -> list[int]:
  try:
    return [int(t) for t in text.replace(",", " ").split()]
  except ValueError:
    raise argparse.ArgumentTypeError(f"--prompt-ids takes integers separated by commas (1,2,3), got {text!r}") from None


def add_generation_arguments(parser: argparse.ArgumentParser, default_prompt: str) -> None:
  """The options every example shares after --model: the prompt, the count and the sampler."""
  prompt = parser.add_mutually_exclusive_group()
  prompt.add_argument("--prompt", default=None, help=f"text to continue (default: {default_prompt!r})")
  prompt.add_argument("--prompt-ids", type=parse_ids, metavar="1,2,3", help="token ids to continue; the output is then ids too")
  parser.add_argument("--count", type=int, default=40, help="how many tokens to generate (default 40)")
  parser.add_argument("--greedy", action="store_true", help="always take the most likely token (same as --temperature 0)")
  parser.add_argument("--temperature", type=float, default=None, help="sampling temperature (default 0.8; 0: greedy)")
  parser.add_argument("--top-k", type=int, default=None, help="sample among the k most likely tokens only (default 0: all)")
  parser.add_argument("--top-p", type=float, default=None, help="sample among the most likely tokens whose probabilities add to p (default 1)")
  parser.add_argument("--seed", type=int, default=None, help="seed of the sampler: the same seed gives the same tokens")
  parser.add_argument("--no-jit", action="store_true", help="run the decode steps eagerly instead of under TinyJit")


def sampling_from_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[float, int, float]:
  """(temperature, top_k, top_p) from the options, a parser error (exit status 2) for what doesn't go together."""
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
  return temperature, top_k, top_p


def log(msg: str) -> None:
  print(msg, file=sys.stderr, flush=True)  # stdout carries only the generated text or ids


def parse_command_line(description: str | None, model_metavar: str, model_help: str, default_prompt: str,
                       argv: list[str] | None) -> tuple[argparse.Namespace, tuple[float, int, float]]:
  """An example's command line: --model, then the generation options; (the options, the sampling from them), after
  logging the device. What doesn't parse is a parser error (exit status 2)."""
  parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--model", required=True, metavar=model_metavar, help=model_help)
  add_generation_arguments(parser, default_prompt)
  args = parser.parse_args(argv)
  sampling = sampling_from_args(parser, args)
  log(f"device: {Device.describe_default()}")
  return args, sampling


def run_generation(model: LanguageModel, ids: list[int], tokenizer: Tokenizer | None, args: argparse.Namespace, sampling: tuple[float, int, float],
                   context_name: str = "context") -> None:
  """Generate and print: the ids space-separated on one line when `tokenizer` is None (--prompt-ids), else the text,
  streamed token by token on a terminal; the timings go to stderr. A ValueError is a one-line `error:` exit."""
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
    out = generate(model, ids, args.count, *sampling, seed=args.seed, jit=not args.no_jit, on_token=on_token, context_name=context_name)
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
