"""LLaMA-family inference in tg: a Hugging Face checkpoint directory or a GGUF file, a KV cache, and a decode step
under TinyJit.

  python examples/llama.py --model DIR --prompt "The capital of France is" --count 40
  python examples/llama.py --model model-Q8_0.gguf --prompt-ids 1,450,7483,310,3444,338 --count 20 --greedy   # prints token ids

The model is Hugging Face's LlamaForCausalLM (RMSNorm, rotary position embeddings, a SwiGLU MLP, grouped-query
attention), with its parameter names, so a checkpoint's tensors load by name. --model is either a Hugging Face model
directory (config.json and model.safetensors, as written by `save_pretrained` or downloaded with huggingface_hub's
`hf download`), or a GGUF file of architecture "llama" as llama.cpp's converter writes it: F32, F16, BF16 or the
quantizations tg's gguf_load dequantizes (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) to float32 on load.
Everything computes in float32.

tg ships no tokenizer: text prompts are tokenized by `tokenizers` with the directory's tokenizer.json (for a GGUF
file, a tokenizer.json beside it) when it is installed, else byte by byte through the vocabulary's byte tokens (the
GGUF file's own vocabulary, or tokenizer.json's read as JSON), which the model reads less well; the program says which.
Information goes to stderr; stdout gets the text (prompt included) or, with --prompt-ids, the token ids on one line.

How it runs is examples/gpt2.py's way, both from examples/lm_common.py (CachedAttention, CachedDecoder): the prompt
goes through the model in one call (the prefill), which writes every layer's keys and values into a cache
preallocated for the context; then each new token is one call of a decode step that reads the cache up to `start_pos`
and writes its own keys and values at `start_pos`, run under TinyJit with `start_pos` and the token as bound
Variables, so one captured set of kernels serves every position.
"""
from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from tg import Device, Tensor, Variable
from tg.nn import Embedding, Linear, RMSNorm
from tg.nn.state import get_state_dict, gguf_load, load_state_dict

# lm_common lies beside this file: on sys.path already when this runs as a script, not when it is imported as
# examples.llama (the tests, bench/); appended, not prepended, so examples/' file names shadow nothing
if (_here := os.path.dirname(os.path.abspath(__file__))) not in sys.path:
  sys.path.append(_here)
import lm_common as lm
from lm_common import ByteTokenizer, Tokenizer

DEFAULT_PROMPT = "The capital of France is"
DEFAULT_CONTEXT = 4096  # the cache's length when none is asked for: Llama 3's 131072 positions would take gigabytes
GET_IT = "get one with `hf download REPO --local-dir DIR` (pip install huggingface_hub), or `save_pretrained` in transformers"

# ---------- the configuration ----------


@dataclass(frozen=True)
class LlamaConfig:
  """The fields of a Hugging Face LlamaConfig (config.json) that change the computation, and GGUF's equivalents."""
  vocab_size: int = 32000
  hidden_size: int = 4096
  intermediate_size: int = 11008
  num_hidden_layers: int = 32
  num_attention_heads: int = 32
  num_key_value_heads: int | None = None  # None: as many as the query heads (no grouping)
  head_dim: int | None = None  # None: hidden_size // num_attention_heads
  rms_norm_eps: float = 1e-6
  rope_theta: float = 10000.0
  rope_scaling: dict[str, Any] | None = None  # {"rope_type": "linear" or "llama3", ...}; None: plain RoPE
  rope_freq_factors: tuple[float, ...] | None = None  # GGUF's rope_freqs.weight: each frequency is divided by its factor
  max_position_embeddings: int = 2048
  tie_word_embeddings: bool = False

  @property
  def n_kv_heads(self) -> int:
    return self.num_key_value_heads or self.num_attention_heads

  @property
  def dim_per_head(self) -> int:
    return self.head_dim or self.hidden_size // self.num_attention_heads

  def check(self, where: str) -> LlamaConfig:
    if self.head_dim is None and self.hidden_size % self.num_attention_heads:
      raise ValueError(f"{where}: hidden_size {self.hidden_size} is not divisible by num_attention_heads {self.num_attention_heads}")
    if self.num_attention_heads % self.n_kv_heads:
      raise ValueError(f"{where}: num_attention_heads {self.num_attention_heads} is not a multiple of num_key_value_heads {self.n_kv_heads}")
    if self.dim_per_head % 2:
      raise ValueError(f"{where}: head_dim {self.dim_per_head} is odd; rotary embeddings rotate pairs")
    rope_inverse_frequencies(self)  # an unsupported rope_scaling is an error now, not at the first call
    return self

  @staticmethod
  def from_json(path: str) -> LlamaConfig:
    raw = lm.read_config_json(path, "llama", "a LLaMA")
    if raw.get("hidden_act", "silu") != "silu":
      raise ValueError(f"{path}: hidden_act {raw['hidden_act']!r} is not supported (LLaMA's MLP is SwiGLU: silu)")
    for flag in ("attention_bias", "mlp_bias"):
      if raw.get(flag):
        raise ValueError(f"{path}: {flag} is not supported (LLaMA's projections have no biases)")
    # transformers 5 writes rope_parameters ({"rope_type", "rope_theta", ...}); earlier ones rope_theta and rope_scaling
    rope = {**(raw.get("rope_scaling") or {}), **(raw.get("rope_parameters") or {})}
    theta = raw.get("rope_theta", rope.get("rope_theta", 10000.0))
    scaling = {k: v for k, v in rope.items() if k != "rope_theta"}
    if scaling.get("rope_type", scaling.get("type", "default")) == "default":
      scaling = {}
    known = {f.name for f in fields(LlamaConfig)} - {"rope_theta", "rope_scaling", "rope_freq_factors"}
    try:
      cfg = LlamaConfig(**{k: v for k, v in raw.items() if k in known}, rope_theta=float(theta), rope_scaling=scaling or None)
    except TypeError as e:
      raise ValueError(f"{path}: {e}") from None
    return cfg.check(path)


def rope_inverse_frequencies(cfg: LlamaConfig) -> np.ndarray:
  """The rotary embedding's head_dim / 2 angular frequencies, computed as transformers computes them (float32), with
  the scalings it implements for LLaMA that this example does too: "linear" (positions divided by a factor) and
  "llama3" (long wavelengths divided by the factor, short ones kept, the ones between interpolated)."""
  dim = cfg.dim_per_head
  inv = (1.0 / (np.float32(cfg.rope_theta) ** (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)))).astype(np.float32)
  if cfg.rope_freq_factors is not None:
    if len(cfg.rope_freq_factors) != dim // 2:
      raise ValueError(f"rope_freqs has {len(cfg.rope_freq_factors)} factors, head_dim {dim} needs {dim // 2}")
    inv = (inv / np.asarray(cfg.rope_freq_factors, np.float32)).astype(np.float32)
  s = cfg.rope_scaling or {}
  kind = s.get("rope_type", s.get("type", "default"))
  if kind == "default":
    return inv
  if kind == "linear":
    if "factor" not in s:
      raise ValueError(f"rope scaling 'linear' needs a factor: {s}")
    return (inv / np.float32(s["factor"])).astype(np.float32)
  if kind == "llama3":
    if missing := [k for k in ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings") if k not in s]:
      raise ValueError(f"rope scaling 'llama3' needs {', '.join(missing)}: {s}")
    factor, low, high = float(s["factor"]), float(s["low_freq_factor"]), float(s["high_freq_factor"])
    old = float(s["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv
    scaled = np.where(wavelen > old / low, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    medium = (wavelen >= old / high) & (wavelen <= old / low)
    return np.where(medium, (1 - smooth) * scaled / factor + smooth * scaled, scaled).astype(np.float32)
  raise ValueError(f"rope scaling {kind!r} is not supported (this example implements default, linear and llama3): {s}")


def rope_tables(cfg: LlamaConfig, n: int) -> tuple[np.ndarray, np.ndarray]:
  """cos and sin of every position's angles, (n, head_dim / 2) float32 each, as transformers computes them."""
  angles = np.arange(n, dtype=np.float32)[:, None] * rope_inverse_frequencies(cfg)[None, :]
  return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


# ---------- the model ----------


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
  """Rotary embedding in Hugging Face's convention ("rotate_half"): element i of a head turns with element
  i + head_dim/2 by the angle of frequency i, x (batch, heads, seqlen, head_dim), cos and sin (seqlen, head_dim/2)."""
  half = x.shape[-1] // 2
  x1, x2 = x[..., :half], x[..., half:]
  return (x1 * cos - x2 * sin).cat(x2 * cos + x1 * sin, dim=-1)


class Attention(lm.CachedAttention):
  def __init__(self, cfg: LlamaConfig, max_context: int) -> None:
    self.n_heads, self.n_kv, self.head_dim = cfg.num_attention_heads, cfg.n_kv_heads, cfg.dim_per_head
    self.q_proj = Linear(cfg.hidden_size, self.n_heads * self.head_dim, bias=False)
    self.k_proj = Linear(cfg.hidden_size, self.n_kv * self.head_dim, bias=False)
    self.v_proj = Linear(cfg.hidden_size, self.n_kv * self.head_dim, bias=False)
    self.o_proj = Linear(self.n_heads * self.head_dim, cfg.hidden_size, bias=False)
    # the cache (2, batch, kv heads, max_context, head_dim) holds the kv heads only (grouped-query attention's saving)
    super().__init__(max_context)

  def __call__(self, x: Tensor, start_pos: int | Variable, cos: Tensor, sin: Tensor, mask: Tensor | None) -> Tensor:
    bsz, seqlen, _ = x.shape
    q = rotate(self.q_proj(x).reshape(bsz, seqlen, self.n_heads, self.head_dim).transpose(1, 2), cos, sin)
    k = rotate(self.k_proj(x).reshape(bsz, seqlen, self.n_kv, self.head_dim).transpose(1, 2), cos, sin)
    v = self.v_proj(x).reshape(bsz, seqlen, self.n_kv, self.head_dim).transpose(1, 2)
    out = self.attend(q, k, v, start_pos, 1 / math.sqrt(self.head_dim), mask)  # (batch, heads, seqlen, head_dim)
    return self.o_proj(out.transpose(1, 2).reshape(bsz, seqlen, self.n_heads * self.head_dim))


class MLP:
  def __init__(self, cfg: LlamaConfig) -> None:
    self.gate_proj = Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
    self.up_proj = Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
    self.down_proj = Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

  def __call__(self, x: Tensor) -> Tensor:
    return self.down_proj(self.gate_proj(x).silu() * self.up_proj(x))


class DecoderLayer:
  def __init__(self, cfg: LlamaConfig, max_context: int) -> None:
    self.input_layernorm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
    self.post_attention_layernorm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
    self.self_attn, self.mlp = Attention(cfg, max_context), MLP(cfg)

  def __call__(self, x: Tensor, start_pos: int | Variable, cos: Tensor, sin: Tensor, mask: Tensor | None) -> Tensor:
    h = x + self.self_attn(self.input_layernorm(x), start_pos, cos, sin, mask)
    return h + self.mlp(self.post_attention_layernorm(h))


class LlamaModel:
  """Hugging Face's LlamaModel: the token embedding, the decoder layers, the final RMSNorm (embed_tokens, layers.N, norm)."""

  def __init__(self, cfg: LlamaConfig, max_context: int) -> None:
    self.embed_tokens = Embedding(cfg.vocab_size, cfg.hidden_size)
    self.layers = [DecoderLayer(cfg, max_context) for _ in range(cfg.num_hidden_layers)]
    self.norm = RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)


class Llama(lm.CachedDecoder):
  """Hugging Face's LlamaForCausalLM: `model` and the language-model head, `lm_head.weight`, or the token embedding's
  weight when the config ties them (tie_word_embeddings). Prefill, the jitted decode step (`logits_next`) and the
  prompt's embedding (`embed`) are lm_common.CachedDecoder's, as GPT2's are."""

  def __init__(self, cfg: LlamaConfig, max_context: int | None = None) -> None:
    self.config = cfg
    self.max_context = min(max_context or DEFAULT_CONTEXT, cfg.max_position_embeddings)
    self.model = LlamaModel(cfg, self.max_context)
    self.lm_head: dict[str, Tensor] = {} if cfg.tie_word_embeddings else {"weight": Tensor.empty(cfg.vocab_size, cfg.hidden_size)}
    # the rotary embedding's cos and sin for every position of the cache (max_context, head_dim / 2): buffers, not
    # parameters (as Hugging Face's inv_freq), so load_weights leaves them out (BUFFERS)
    cos, sin = rope_tables(cfg, self.max_context)
    self.rope_cos, self.rope_sin = Tensor(cos).realize(), Tensor(sin).realize()
    super().__init__(cfg.vocab_size, self.max_context)

  def token_embedding(self) -> Embedding:
    return self.model.embed_tokens

  def __call__(self, tokens: Tensor | Variable | list[int], start_pos: int | Variable = 0, last_only: bool = False) -> Tensor:
    """Logits (batch, seqlen, vocab) for `tokens` at positions start_pos.., keys and values of the earlier positions
    coming from the cache. `tokens` is a (batch, seqlen) int Tensor, one sequence of ids (a list: batch 1), or one
    token as a bound Variable (batch 1, seqlen 1: its embedding is a symbolic slice of embed_tokens, so a jitted step
    needs no input tensor). `last_only`: the logits of the last position only."""
    m = self.model
    seqlen, x = self.embed(tokens)
    cos, sin = (t.shrink(((start_pos, start_pos + seqlen), None)) for t in (self.rope_cos, self.rope_sin))
    mask = lm.causal_mask(seqlen, start_pos, x)
    for layer in m.layers:
      x = layer(x, start_pos, cos, sin, mask)
    if last_only:
      x = x[:, -1:]
    return m.norm(x) @ self.lm_head.get("weight", m.embed_tokens.weight).T


def generate(model: Llama, prompt: list[int], count: int, **kw: Any) -> list[int]:
  """`count` new tokens after `prompt`: lm_common.generate (its sampling options, seed, jit, on_token)."""
  return lm.generate(model, prompt, count, context_name="max_position_embeddings", **kw)


# ---------- checkpoints: Hugging Face directories and GGUF files ----------


@dataclass
class Checkpoint:
  """What a checkpoint holds: the config, the tensors under Hugging Face's names (LlamaForCausalLM's, q/k rows in
  Hugging Face's order), and, for a GGUF file, its vocabulary (for the byte-level tokenizer fallback)."""
  config: LlamaConfig
  weights: dict[str, Tensor]
  where: str
  what: str  # "safetensors", "GGUF (Q8_0)", ...
  pieces: list[str] | None = None
  control: list[int] = field(default_factory=list)
  bos: int | None = None  # the GGUF tokenizer's BOS, when it adds one (tokenizer.ggml.add_bos_token, true by default)


IGNORED = (".self_attn.rotary_emb.inv_freq",)  # older checkpoints store the rotary frequencies: computed here
BUFFERS = ("rope_cos", "rope_sin")  # the model's tensors that no checkpoint holds


def read_hf(model_dir: str) -> Checkpoint:
  cfg = LlamaConfig.from_json(lm.config_path(model_dir))
  weights = lm.read_hf_weights(model_dir, GET_IT)
  what = "safetensors" if any(f.endswith(".safetensors") for f in os.listdir(model_dir)) else "pytorch_model.bin"
  return Checkpoint(cfg, weights, model_dir, what)


# GGUF tensor names (llama.cpp's, for architecture "llama") -> Hugging Face's; blk.N. is model.layers.N.
GGUF_NAMES = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight", "output.weight": "lm_head.weight"}
GGUF_LAYER_NAMES = {
  "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
  "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}
GGUF_FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 15: "Q4_K_M", 17: "Q5_K_M", 18: "Q6_K", 32: "BF16"}


def gguf_unpermute(w: Tensor, n_heads: int) -> Tensor:
  """llama.cpp's converter reorders the rows of each head of attn_q and attn_k (`permute` in convert_hf_to_gguf.py):
  Hugging Face's rows [0, head_dim/2) and [head_dim/2, head_dim), the two halves rotate_half pairs, become interleaved
  (row 2i is HF's row i, row 2i+1 HF's row i + head_dim/2), because llama.cpp rotates adjacent pairs. This puts them
  back, so one model serves both kinds of file. It moves whole rows, so it commutes with quantization (ggml's blocks
  lie along a row)."""
  rows, cols = w.shape
  return w.reshape(n_heads, rows // n_heads // 2, 2, cols).transpose(1, 2).reshape(rows, cols)


def read_gguf(path: str) -> Checkpoint:
  kv, tensors = gguf_load(path)
  arch = kv.get("general.architecture")
  if arch != "llama":
    raise ValueError(f"{path}: GGUF architecture {arch!r} is not supported: examples/llama.py reads architecture 'llama' "
                     "(LLaMA 1-3, Mistral 7B and the others llama.cpp converts as 'llama')")

  def get(key: str, default: Any = None) -> Any:
    if f"llama.{key}" not in kv and default is None:
      raise ValueError(f"{path}: the GGUF metadata has no llama.{key}")
    return kv.get(f"llama.{key}", default)
  if get("expert_count", 0):
    raise ValueError(f"{path}: a mixture of experts (llama.expert_count {kv['llama.expert_count']}) is not supported")
  heads = int(get("attention.head_count"))
  hidden = int(get("embedding_length"))
  head_dim = int(get("attention.key_length", hidden // heads))
  if int(get("rope.dimension_count", head_dim)) != head_dim:
    raise ValueError(f"{path}: llama.rope.dimension_count {kv['llama.rope.dimension_count']} is not head_dim {head_dim} "
                     "(partial rotary is not supported)")
  scaling: dict[str, Any] | None = None
  if (kind := get("rope.scaling.type", "none")) == "linear":
    scaling = {"rope_type": "linear", "factor": float(get("rope.scaling.factor"))}
  elif kind != "none":
    raise ValueError(f"{path}: llama.rope.scaling.type {kind!r} is not supported (none and linear are; llama3's factors come as rope_freqs.weight)")
  if "token_embd.weight" not in tensors:
    raise ValueError(f"{path}: the GGUF file has no token_embd.weight")
  factors = tensors.pop("rope_freqs.weight", None)
  cfg = LlamaConfig(
    vocab_size=int(get("vocab_size", tensors["token_embd.weight"].shape[0])), hidden_size=hidden,
    intermediate_size=int(get("feed_forward_length")), num_hidden_layers=int(get("block_count")), num_attention_heads=heads,
    num_key_value_heads=int(get("attention.head_count_kv", heads)), head_dim=head_dim, rms_norm_eps=float(get("attention.layer_norm_rms_epsilon")),
    rope_theta=float(get("rope.freq_base", 10000.0)), rope_scaling=scaling, max_position_embeddings=int(get("context_length")),
    rope_freq_factors=tuple(float(f) for f in factors.numpy().reshape(-1)) if factors is not None else None,
    tie_word_embeddings="output.weight" not in tensors).check(path)
  weights: dict[str, Tensor] = {}
  for name, t in tensors.items():
    parts = name.split(".")
    if name in GGUF_NAMES:
      weights[GGUF_NAMES[name]] = t
    elif len(parts) == 4 and parts[0] == "blk" and parts[2] in GGUF_LAYER_NAMES and parts[3] == "weight":
      if parts[2] in ("attn_q", "attn_k"):
        t = gguf_unpermute(t.to(Device.DEFAULT), heads if parts[2] == "attn_q" else cfg.n_kv_heads)
      weights[f"model.layers.{parts[1]}.{GGUF_LAYER_NAMES[parts[2]]}.weight"] = t
    else:
      weights[name] = t  # unexpected: load_weights names it
  pieces = kv.get("tokenizer.ggml.tokens")
  types = kv.get("tokenizer.ggml.token_type") or []
  what = f"GGUF ({GGUF_FILE_TYPES.get(kv.get('general.file_type', -1), 'type ' + str(kv.get('general.file_type', '?')))})"
  bos = kv.get("tokenizer.ggml.bos_token_id") if kv.get("tokenizer.ggml.add_bos_token", True) else None
  return Checkpoint(cfg, weights, path, what, pieces if isinstance(pieces, list) else None, [i for i, t in enumerate(types) if t == 3],
                    bos if isinstance(bos, int) else None)


def read_checkpoint(path: str) -> Checkpoint:
  """A Hugging Face model directory or a GGUF file."""
  if os.path.isdir(path):
    return read_hf(path)
  if os.path.isfile(path):
    with open(path, "rb") as f:
      magic = f.read(4)
    if magic != b"GGUF":
      raise ValueError(f"{path} is a file but not a GGUF file (it starts with {magic!r}); --model takes a Hugging Face directory or a GGUF file")
    return read_gguf(path)
  raise FileNotFoundError(f"{path!r} is neither a model directory nor a GGUF file; {GET_IT}")


def load_weights(model: Llama, ckpt: Checkpoint) -> None:
  """Fill `model` with a checkpoint's tensors (Hugging Face names; LlamaModel's, without the `model.` prefix, too).
  Each tensor takes the model's dtype (float32) as it moves to the device."""
  want = {k: v for k, v in get_state_dict(model).items() if k not in BUFFERS}
  state: dict[str, Tensor] = {}
  for name, t in ckpt.weights.items():
    if name.endswith(IGNORED) or (name == "lm_head.weight" and model.config.tie_word_embeddings):
      continue
    state[name if name.startswith(("model.", "lm_head.")) else f"model.{name}"] = t
  lm.check_names(want, state, ckpt.where, "the config's LLaMA")
  for name, t in state.items():
    if tuple(t.shape) != tuple(want[name].shape):
      raise ValueError(f"{ckpt.where}: {name} has shape {tuple(t.shape)}, the config's LLaMA needs {tuple(want[name].shape)}")
  load_state_dict(model, state, strict=False)  # strict minus BUFFERS: checked above


def load_llama(path: str, max_context: int | None = None) -> Llama:
  """A Llama with the weights of a Hugging Face model directory or a GGUF file, on Device.DEFAULT, its cache
  `max_context` positions long (default: max_position_embeddings, at most DEFAULT_CONTEXT)."""
  ckpt = read_checkpoint(path)
  model = Llama(ckpt.config, max_context)
  load_weights(model, ckpt)
  return model


def load_tokenizer(ckpt: Checkpoint) -> tuple[Tokenizer, str]:
  """(a tokenizer for the checkpoint, a line saying which): see load_hf_tokenizer; a GGUF file's own vocabulary gives
  the byte-level fallback its byte tokens unless a tokenizer.json beside the file can be used."""
  if os.path.isdir(ckpt.where):
    return lm.load_hf_tokenizer(ckpt.where, ckpt.config.vocab_size)
  beside = os.path.dirname(os.path.abspath(ckpt.where))
  tok, which = lm.load_hf_tokenizer(beside, ckpt.config.vocab_size)
  if which.startswith("tokenizers") or ckpt.pieces is None:
    return tok, which
  tok = ByteTokenizer(ckpt.pieces, ckpt.config.vocab_size, ckpt.control, ckpt.bos)
  return tok, f"byte-level fallback (the GGUF file's vocabulary: {tok.kind}), which the model reads less well than its merged tokens"


# ---------- command line ----------


def main(argv: list[str] | None = None) -> None:
  args, sampling = lm.parse_command_line(__doc__, "DIR_OR_GGUF", "a Hugging Face LLaMA directory (config.json + model.safetensors) or a GGUF file",
                                         DEFAULT_PROMPT, argv)
  try:
    st = time.perf_counter()
    ckpt = read_checkpoint(args.model)
  except (FileNotFoundError, ValueError, NotImplementedError) as e:  # NotImplementedError: a ggml type gguf_load can't dequantize
    raise SystemExit(f"error: {e}") from None
  cfg = ckpt.config
  tokenizer: Tokenizer | None = None
  if args.prompt_ids is not None:
    ids = args.prompt_ids
  else:
    try:
      tokenizer, which = load_tokenizer(ckpt)
    except ValueError as e:
      raise SystemExit(f"error: {e}; pass --prompt-ids instead") from None
    lm.log(f"tokenizer: {which}")
    ids = tokenizer.encode(args.prompt if args.prompt is not None else DEFAULT_PROMPT)
  # the cache holds exactly what this run needs: a LLaMA's full context would take gigabytes for a short generation
  model = Llama(cfg, min(max(len(ids) + args.count, 2), cfg.max_position_embeddings))
  try:
    lm.check_prompt(model, ids, args.count, "max_position_embeddings")
    load_weights(model, ckpt)
  except ValueError as e:
    raise SystemExit(f"error: {e}") from None
  lm.log(f"loaded {args.model} ({ckpt.what}): {cfg.num_hidden_layers} layers, {cfg.hidden_size} wide, {cfg.num_attention_heads} heads "
      f"({cfg.n_kv_heads} kv), vocab {cfg.vocab_size}, context {cfg.max_position_embeddings}, in {time.perf_counter() - st:.1f}s")
  lm.run_generation(model, ids, tokenizer, args, sampling, "max_position_embeddings")


if __name__ == "__main__":
  main()
