"""Train a small GPT on characters, from scratch, on text that ships with Python (no download): the help topics of
`pydoc_data.topics` (what `help("if")` prints), about 465,000 characters of English and Python.

  python examples/train_charlm.py                                  # the defaults: a few minutes on 2 CPU cores
  python examples/train_charlm.py --ckpt charlm.safetensors --plot loss.png --sample 500
  python examples/train_charlm.py --ckpt charlm.safetensors --resume --steps 1000   # go on to step 1000
  python examples/train_charlm.py --quick                          # a tiny model for a handful of steps (CI)

The model is a decoder-only transformer as GPT-2's, small: token and position embeddings, pre-LayerNorm blocks of
causal self-attention and a GELU MLP, a final LayerNorm, and a head tied to the token embedding. The whole training
step (forward, backward, AdamW) runs under TinyJit: the batch comes in as tensors, so from the third step on each step
replays the captured kernels in one call. The validation loss is a jitted forward pass too, and so is the sampler's.

It prints the unigram entropy of the training text: the loss (nats per character) of a model that knows only how
often each character occurs. A loss well below it means the model has learned to use the context.

--ckpt saves the model, AdamW's moments and the step count (safetensors, written at every evaluation and at the end);
--resume loads them and goes on to --steps, giving the same weights as a run that never stopped: a step's batch depends
only on --seed and the step number, and the learning rate only on the step number.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from tg import Device, Tensor, TinyJit
from tg.nn import Embedding, LayerNorm, Linear
from tg.nn.optim import AdamW, OptimizerGroup
from tg.nn.state import WeightsFileError, get_state_dict, load_state_dict, safe_load, safe_save
from tg.nn.state.safetensors import safe_load_metadata

try:  # the progress bar is optional: without tqdm the evaluations are printed as lines
  from tqdm import tqdm
except ImportError:
  tqdm = None

# ---------- the text ----------


def load_text() -> str:
  """pydoc's help topics joined in the order of their names (the dict's order is an accident of how it was written)."""
  from pydoc_data.topics import topics
  return "".join(topics[name] for name in sorted(topics))


class CharData:
  """The text as character ids: the vocabulary is the text's distinct characters in code point order; the first 90%
  is for training, the last 10% for validation (contiguous, so no validation window overlaps a training one)."""

  def __init__(self, text: str, val_fraction: float = 0.1) -> None:
    self.vocab = sorted(set(text))
    self.index = {c: i for i, c in enumerate(self.vocab)}
    ids = np.array([self.index[c] for c in text], dtype=np.int32)
    n_val = int(len(ids) * val_fraction)
    self.train, self.val = ids[:-n_val], ids[-n_val:]
    self.digest = hashlib.sha256(text.encode()).hexdigest()[:16]  # which text a checkpoint was trained on

  def encode(self, s: str) -> list[int]:
    missing = sorted({c for c in s if c not in self.index})
    if missing:
      raise ValueError(f"characters not in the vocabulary: {''.join(missing)!r}")
    return [self.index[c] for c in s]

  def decode(self, ids: list[int]) -> str:
    return "".join(self.vocab[i] for i in ids)

  def unigram_entropy(self) -> float:
    """-sum p log p over the training text's character frequencies, in nats per character."""
    p = np.bincount(self.train, minlength=len(self.vocab)).astype(np.float64) / len(self.train)
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())

  def train_batch(self, seed: int, step: int, batch: int, context: int) -> tuple[np.ndarray, np.ndarray]:
    """Step `step`'s (inputs, targets), each (batch, context): random windows of the training text, drawn from a
    generator seeded by (seed, step) alone, so a resumed run sees the batches a straight run would."""
    starts = np.random.default_rng([seed, step]).integers(0, len(self.train) - context, batch)
    win = self.train[starts[:, None] + np.arange(context + 1)]
    return win[:, :-1], win[:, 1:]

  @staticmethod
  def windows(ids: np.ndarray, n_batches: int, batch: int, context: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """A fixed set of windows of `ids` (the validation or the training text), evenly spaced: every evaluation sees
    the same ones."""
    starts = np.linspace(0, len(ids) - context - 1, n_batches * batch).astype(np.int64)
    win = ids[starts[:, None] + np.arange(context + 1)]
    return [(win[i:i + batch, :-1], win[i:i + batch, 1:]) for i in range(0, len(win), batch)]


# ---------- the model ----------


@dataclass(frozen=True)
class Config:
  vocab_size: int
  context: int = 64
  layers: int = 4
  dim: int = 128
  heads: int = 4


def _normal(*shape: int, std: float) -> Tensor:
  return Tensor.normal(*shape, std=std).realize()


def _layernorm(dim: int) -> LayerNorm:
  """nn.LayerNorm with its gain and bias in buffers of their own. Left as nn.LayerNorm makes them (lazy ones and
  zeros), the first step's kernels would fold them in as constants and the second step would compile its kernels anew."""
  ln = LayerNorm(dim)
  ln.weight, ln.bias = Tensor.ones(dim).contiguous().realize(), Tensor.zeros(dim).contiguous().realize()
  return ln


class Block:
  """Pre-LN: x + attn(ln_1(x)), then + mlp(ln_2(x)), as GPT-2's."""

  def __init__(self, cfg: Config) -> None:
    d = cfg.dim
    self.heads = cfg.heads
    self.ln_1, self.ln_2 = _layernorm(d), _layernorm(d)
    self.c_attn, self.c_proj = Linear(d, 3 * d), Linear(d, d)
    self.c_fc, self.mlp_proj = Linear(d, 4 * d), Linear(4 * d, d)
    # GPT-2's initialisation: N(0, 0.02), zero biases, and the two projections that add into the residual stream
    # scaled by 1/sqrt(2 * layers) so the stream's variance doesn't grow with depth
    resid = 0.02 / math.sqrt(2 * cfg.layers)
    for lin, (n_out, n_in), std in ((self.c_attn, (3 * d, d), 0.02), (self.c_proj, (d, d), resid), (self.c_fc, (4 * d, d), 0.02),
                                    (self.mlp_proj, (d, 4 * d), resid)):
      lin.weight, lin.bias = _normal(n_out, n_in, std=std), Tensor.zeros(n_out).contiguous().realize()

  def __call__(self, x: Tensor) -> Tensor:
    b, t, d = x.shape
    # (b, t, 3d) -> q, k, v each (b, heads, t, head_dim)
    qkv = self.c_attn(self.ln_1(x)).reshape(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
    att = qkv[0].scaled_dot_product_attention(qkv[1], qkv[2], is_causal=True).transpose(1, 2).reshape(b, t, d)
    x = x + self.c_proj(att)
    return x + self.mlp_proj(self.c_fc(self.ln_2(x)).gelu())


class CharGPT:
  """Token and position embeddings, the blocks, a final LayerNorm, and logits from the token embedding's transpose.

  The head is tied to the embedding. The untied head would cost vocab x dim parameters, few here; the reason is the
  rare characters: a character seen a handful of times in the text gets an embedding gradient only on the steps whose
  batch holds it, while as a row of the tied head it is trained on every position of every batch (pushed down where it
  doesn't come next), so its row is never left at its random start."""

  def __init__(self, cfg: Config) -> None:
    self.cfg = cfg
    self.wte, self.wpe = Embedding(cfg.vocab_size, cfg.dim), Embedding(cfg.context, cfg.dim)
    self.wte.weight, self.wpe.weight = _normal(cfg.vocab_size, cfg.dim, std=0.02), _normal(cfg.context, cfg.dim, std=0.02)
    self.h = [Block(cfg) for _ in range(cfg.layers)]
    self.ln_f = _layernorm(cfg.dim)

  def __call__(self, idx: Tensor) -> Tensor:
    """(batch, t) character ids, t <= context -> logits (batch, t, vocab)."""
    t = idx.shape[1]
    assert isinstance(t, int) and t <= self.cfg.context
    x = self.wte(idx) + self.wpe.weight[:t]  # positions are a slice, not a gather
    for block in self.h:
      x = block(x)
    return self.ln_f(x) @ self.wte.weight.T


def make_optimizer(model: CharGPT, lr: float, weight_decay: float) -> OptimizerGroup:
  """AdamW; weight decay on the matrices only (the linear weights and the embeddings), not on biases and LayerNorm
  gains, which decay would pull towards 0 instead of 1 for no gain in generalisation (as GPT-2 and nanoGPT)."""
  params = get_state_dict(model)
  decay = [p for p in params.values() if p.ndim == 2]
  no_decay = [p for p in params.values() if p.ndim != 2]
  return OptimizerGroup(AdamW(decay, lr=lr, b2=0.99, weight_decay=weight_decay), AdamW(no_decay, lr=lr, b2=0.99, weight_decay=0.0))


def lr_at(step: int, lr: float, warmup: int) -> float:
  """Linear warmup over the first `warmup` steps, then constant. It depends on the step alone (not on --steps), so
  a run stopped at N and resumed to N+M follows the same schedule as a straight run to N+M."""
  return lr * min(1.0, step / max(warmup, 1))


def set_lr(opt: OptimizerGroup, value: float) -> None:
  # a copy into each lr's own buffer, which the captured kernels read: nothing is compiled for a new value
  for o in opt.optimizers:
    o.lr.assign(Tensor(np.full(o.lr.shape, value, dtype=np.float32), device=o.lr.device)).realize()


# ---------- checkpoints ----------


def new_history() -> dict[str, Any]:
  """What a run records, saved in the checkpoint: each step's loss, [step, validation loss, training loss] at each
  evaluation, and the seconds spent in all runs so far."""
  return {"train": [], "val": [], "seconds": 0.0}


def optimizer_state(opt: OptimizerGroup) -> dict[str, Any]:
  """AdamW's state by name: each member's moments and its beta powers (beta^step, which carry the bias correction)."""
  return {str(i): {"m": o.m, "v": o.v, "b1_t": o.b1_t, "b2_t": o.b2_t} for i, o in enumerate(opt.optimizers)}  # type: ignore[attr-defined]


def save_checkpoint(path: str, model: CharGPT, opt: OptimizerGroup, step: int, data: CharData, train_args: dict[str, Any],
                    history: dict[str, Any]) -> None:
  tensors = {f"model.{k}": v for k, v in get_state_dict(model).items()}
  tensors.update({f"optim.{k}": v for k, v in get_state_dict(optimizer_state(opt)).items()})
  meta = {"format": "tg-charlm-1", "step": str(step), "config": json.dumps(asdict(model.cfg)), "vocab": json.dumps("".join(data.vocab)),
          "text": data.digest, "train": json.dumps(train_args), "history": json.dumps(history)}
  tmp = f"{path}.tmp"
  safe_save(tensors, tmp, metadata=meta)
  os.replace(tmp, path)  # a run stopped while writing leaves the previous checkpoint whole


class CheckpointError(Exception):
  pass


def read_checkpoint_meta(path: str) -> dict[str, str]:
  if not os.path.exists(path):
    raise CheckpointError(f"--resume: there is no checkpoint at {path} (train without --resume first, with --ckpt {path})")
  try:
    _, _, header = safe_load_metadata(path)
  except WeightsFileError as e:
    raise CheckpointError(f"--resume: {path} is not a readable safetensors file: {e}") from None
  meta = header.get("__metadata__", {})
  if meta.get("format") != "tg-charlm-1":
    raise CheckpointError(f"--resume: {path} is a safetensors file but not a checkpoint of this program (no tg-charlm-1 metadata)")
  return dict(meta)


def load_checkpoint(path: str, meta: dict[str, str], model: CharGPT, opt: OptimizerGroup, data: CharData) -> tuple[int, dict[str, Any]]:
  """Check that the checkpoint fits this run (the same text, vocabulary and model), then load it: the step reached and
  the loss history."""
  if meta["text"] != data.digest or json.loads(meta["vocab"]) != "".join(data.vocab):
    raise CheckpointError(f"--resume: {path} was trained on another text than this Python's pydoc_data.topics (another Python version?)")
  saved = json.loads(meta["config"])
  ours = asdict(model.cfg)
  if saved != ours:
    diff = ", ".join(f"{k} {saved.get(k)} (this run: {ours.get(k)})" for k in sorted(set(saved) | set(ours)) if saved.get(k) != ours.get(k))
    raise CheckpointError(f"--resume: {path} holds a different model: {diff}; pass the options it was trained with")
  state = safe_load(path)
  load_state_dict(model, {k[len("model."):]: v for k, v in state.items() if k.startswith("model.")})
  load_state_dict(optimizer_state(opt), {k[len("optim."):]: v for k, v in state.items() if k.startswith("optim.")})
  return int(meta["step"]), json.loads(meta["history"])


# ---------- training, evaluation, sampling ----------


def make_train_step(model: CharGPT, opt: OptimizerGroup) -> TinyJit[Tensor]:
  @TinyJit
  def train_step(x: Tensor, y: Tensor) -> Tensor:
    opt.zero_grad()
    loss = model(x).sparse_categorical_crossentropy(y).backward()
    Tensor.realize_all(loss, *opt.schedule_step())  # the loss, the weights and AdamW's state in one schedule
    return loss
  return train_step


def make_eval_loss(model: CharGPT) -> TinyJit[Tensor]:
  @TinyJit
  def eval_loss(x: Tensor, y: Tensor) -> Tensor:
    return model(x).sparse_categorical_crossentropy(y).realize()
  return eval_loss


def evaluate(eval_loss: TinyJit[Tensor], batches: list[tuple[np.ndarray, np.ndarray]]) -> float:
  with Tensor.test(), Tensor.no_grad():
    return float(np.mean([eval_loss(Tensor(x), Tensor(y)).item() for x, y in batches]))


def sample_text(model: CharGPT, data: CharData, prompt: str, count: int, temperature: float, seed: int) -> str:
  """`count` characters after `prompt`, each drawn from softmax(logits / temperature) (0: the most likely).

  The model always reads a full window of `context` ids, so one jitted forward pass serves every step: before the
  text fills the window it is padded on the right, which the causal mask keeps from reaching the position read."""
  ctx = model.cfg.context
  forward = TinyJit(lambda x: model(x).realize())
  rng = np.random.default_rng([seed, 1])
  ids = data.encode(prompt) or [data.index.get("\n", 0)]
  out: list[int] = []
  with Tensor.test(), Tensor.no_grad():
    for _ in range(count):
      window = (ids + out)[-ctx:]
      pos = len(window) - 1
      logits = forward(Tensor(np.array([window + [0] * (ctx - len(window))], dtype=np.int32))).numpy()[0, pos].astype(np.float64)
      if temperature == 0:
        nxt = int(logits.argmax())
      else:
        p = np.exp((logits - logits.max()) / temperature)
        nxt = int(rng.choice(len(p), p=p / p.sum()))
      out.append(nxt)
  return data.decode(out)


def write_plot(path: str, history: dict[str, Any], entropy: float, title: str) -> None:
  try:
    import matplotlib
    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt
  except ImportError:
    print(f"--plot: matplotlib is not installed, so no plot was written to {path} (pip install matplotlib)", file=sys.stderr)
    return
  fig, ax = plt.subplots(figsize=(8, 4.5))
  train = history["train"]
  ax.plot(range(1, len(train) + 1), train, lw=0.6, alpha=0.5, label="train (each step)")
  if len(train) >= 20:
    k = max(len(train) // 50, 5)
    smooth = np.convolve(train, np.ones(k) / k, mode="valid")
    ax.plot(range(k, len(train) + 1), smooth, lw=1.5, label=f"train (mean of {k} steps)")
  if history["val"]:
    steps, vals, trains = zip(*history["val"])
    ax.plot(steps, trains, "s-", ms=4, label="train (fixed windows)")
    ax.plot(steps, vals, "o-", label="validation")
  ax.axhline(entropy, color="gray", ls="--", label=f"unigram entropy {entropy:.3f}")
  ax.set_xlabel("step")
  ax.set_ylabel("loss (nats per character)")
  ax.set_title(title)
  ax.legend()
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)
  print(f"loss plot written to {path}")


# ---------- command line ----------

QUICK = {"steps": 30, "batch": 8, "context": 32, "layers": 1, "dim": 32, "heads": 2, "eval_every": 10, "eval_batches": 2, "sample": 80}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--steps", type=int, default=600, help="train until this step (with --resume: the total, counting the checkpoint's)")
  p.add_argument("--batch", type=int, default=32, help="sequences per step")
  p.add_argument("--context", type=int, default=64, help="characters per sequence (the model's context)")
  p.add_argument("--layers", type=int, default=4)
  p.add_argument("--dim", type=int, default=128, help="the embedding width")
  p.add_argument("--heads", type=int, default=4)
  p.add_argument("--lr", type=float, default=3e-3, help="AdamW's learning rate after the warmup")
  p.add_argument("--warmup", type=int, default=50, help="steps of linear learning-rate warmup")
  p.add_argument("--weight-decay", type=float, default=0.1)
  p.add_argument("--seed", type=int, default=0, help="initial weights, batch order and sampling")
  p.add_argument("--eval-every", type=int, default=100, help="steps between validation losses (and checkpoints)")
  p.add_argument("--eval-batches", type=int, default=8, help="batches of validation windows per evaluation")
  p.add_argument("--ckpt", metavar="PATH", help="save the model, optimizer state and step here (safetensors)")
  p.add_argument("--resume", action="store_true", help="continue from --ckpt")
  p.add_argument("--plot", metavar="PATH", help="write the loss curves as a PNG (needs matplotlib)")
  p.add_argument("--sample", type=int, default=300, metavar="N", help="characters to sample at the end (0: none)")
  p.add_argument("--prompt", default="The ", help="the sampled text's start")
  p.add_argument("--temperature", type=float, default=0.8, help="sampling temperature (0: the most likely character)")
  quick = ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in QUICK.items())
  p.add_argument("--quick", action="store_true", help=f"a tiny model for a few steps (for CI): {quick}")
  args = p.parse_args(argv)
  if args.quick:  # the quick values replace the defaults, not what was given on the command line
    given = {a.split("=")[0].lstrip("-").replace("-", "_") for a in (argv if argv is not None else sys.argv[1:]) if a.startswith("--")}
    for k, v in QUICK.items():
      if k not in given:
        setattr(args, k, v)
  for name in ("batch", "context", "layers", "dim", "heads", "eval_every", "eval_batches"):
    if getattr(args, name) < 1:
      p.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
  for name in ("steps", "warmup", "sample"):
    if getattr(args, name) < 0:
      p.error(f"--{name} must be at least 0, got {getattr(args, name)}")
  if args.dim % args.heads:
    p.error(f"--dim {args.dim} must be divisible by --heads {args.heads}")
  if not (args.lr > 0 and math.isfinite(args.lr)) or not (args.temperature >= 0 and math.isfinite(args.temperature)):
    p.error("--lr must be a finite number > 0 and --temperature a finite number >= 0")
  if args.resume and not args.ckpt:
    p.error("--resume needs --ckpt PATH, the checkpoint to continue from")
  return args


def main(argv: list[str] | None = None) -> None:
  args = parse_args(argv)
  print(f"device: {Device.describe_default()}")
  data = CharData(load_text())
  if args.context + 1 >= len(data.val):
    raise SystemExit(f"error: --context {args.context} is longer than the validation text ({len(data.val)} characters)")
  try:
    data.encode(args.prompt)
  except ValueError as e:
    raise SystemExit(f"error: --prompt: {e}") from None
  entropy = data.unigram_entropy()
  print(f"text: pydoc_data.topics, {len(data.train) + len(data.val):,} characters, vocabulary {len(data.vocab)}; "
        f"train {len(data.train):,}, validation {len(data.val):,}")
  print(f"unigram entropy of the training text: {entropy:.4f} nats per character ({entropy / math.log(2):.3f} bits)")

  meta = None
  if args.resume:
    try:
      meta = read_checkpoint_meta(args.ckpt)
    except CheckpointError as e:
      raise SystemExit(f"error: {e}") from None
  Tensor.manual_seed(args.seed)
  cfg = Config(len(data.vocab), args.context, args.layers, args.dim, args.heads)
  model = CharGPT(cfg)
  opt = make_optimizer(model, args.lr, args.weight_decay)
  n_params = sum(p.numel() for p in get_state_dict(model).values())
  print(f"model: {cfg.layers} layers, dim {cfg.dim}, {cfg.heads} heads, context {cfg.context}: {n_params:,} parameters")
  train_args = {"seed": args.seed, "batch": args.batch, "lr": args.lr, "warmup": args.warmup, "weight_decay": args.weight_decay}
  step, history = 0, new_history()
  if meta is not None:
    try:
      step, history = load_checkpoint(args.ckpt, meta, model, opt, data)
    except CheckpointError as e:
      raise SystemExit(f"error: {e}") from None
    saved_args = json.loads(meta["train"])
    changed = [f"--{k.replace('_', '-')} {train_args[k]} (checkpoint: {saved_args.get(k)})" for k in train_args if saved_args.get(k) != train_args[k]]
    if changed:
      print(f"note: resuming with {', '.join(changed)}: the run will not match one that never stopped", file=sys.stderr)
    print(f"resumed from {args.ckpt} at step {step}")
    if step >= args.steps:
      print(f"the checkpoint is at step {step}, --steps is {args.steps}: nothing to train (--steps counts the checkpoint's steps)")

  train_step, eval_loss = make_train_step(model, opt), make_eval_loss(model)
  val_windows = data.windows(data.val, args.eval_batches, args.batch, args.context)
  train_windows = data.windows(data.train, args.eval_batches, args.batch, args.context)
  log = tqdm.write if tqdm is not None else print
  st, base = time.perf_counter(), history["seconds"]

  def run_eval(step: int) -> None:
    # the training loss on fixed windows too, computed as the validation loss is: the steps' own losses are of
    # batches that differ every step, and a mean of them lags behind while the loss falls
    val, train = evaluate(eval_loss, val_windows), evaluate(eval_loss, train_windows)
    history["val"].append([step, val, train])
    history["seconds"] = base + time.perf_counter() - st
    log(f"step {step:5d}: train loss {train:.4f}, validation loss {val:.4f}   ({history['seconds']:.0f} s)")
    if args.ckpt:
      save_checkpoint(args.ckpt, model, opt, step, data, train_args, history)

  if step == 0 and args.steps > 0:
    run_eval(0)  # the untrained model: about log(vocabulary)
  first_steps, later_steps, n_later = 0.0, 0.0, 0
  with Tensor.train():
    steps = range(step + 1, args.steps + 1)
    bar = tqdm(steps, initial=step, total=args.steps, unit="step", dynamic_ncols=True) if tqdm is not None else steps
    for i, step in enumerate(bar):
      t0 = time.perf_counter()
      set_lr(opt, lr_at(step, args.lr, args.warmup))
      x, y = data.train_batch(args.seed, step, args.batch, args.context)
      loss = train_step(Tensor(x), Tensor(y)).item()
      if i < 2:  # the jit's first call runs and compiles, its second captures
        first_steps += time.perf_counter() - t0
      else:
        later_steps, n_later = later_steps + time.perf_counter() - t0, n_later + 1
      if not math.isfinite(loss):
        raise SystemExit(f"error: the loss is {loss} at step {step}: lower --lr")
      history["train"].append(round(loss, 5))
      if tqdm is not None:
        bar.set_postfix(loss=f"{loss:.4f}", refresh=False)  # type: ignore[union-attr]
      if step % args.eval_every == 0 or step == args.steps:
        run_eval(step)
  if tqdm is not None:
    bar.close()  # type: ignore[union-attr]
  if not history["val"] or history["val"][-1][0] != step:
    run_eval(step)
  elapsed = time.perf_counter() - st
  _, val, train = history["val"][-1]
  if len(steps):
    per_step = f"; then {later_steps / n_later * 1e3:.0f} ms per step" if n_later else ""
    print(f"trained {len(steps)} steps in {elapsed:.1f} s: the first {min(len(steps), 2)} (which build and capture the kernels) "
          f"{first_steps:.1f} s{per_step}; {history['seconds']:.1f} s over all runs")
  print(f"at step {step}: train loss {train:.4f}, validation loss {val:.4f}, unigram entropy {entropy:.4f} nats per character")
  if args.ckpt:
    print(f"checkpoint: {args.ckpt} (step {step})")
  if args.plot:
    write_plot(args.plot, history, entropy, f"char-level GPT on pydoc_data.topics: {cfg.layers} layers, dim {cfg.dim}, context {cfg.context}")
  if args.sample:
    text = sample_text(model, data, args.prompt, args.sample, args.temperature, args.seed)
    print(f"--- {args.sample} sampled characters (temperature {args.temperature}, seed {args.seed}) ---")
    print(args.prompt + text)


if __name__ == "__main__":
  main()
