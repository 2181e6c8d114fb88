"""What tests/models/test_gpt2.py and test_llama.py check the same way, on a model of examples/ (an
lm_common.CachedDecoder) and the transformers model it was loaded from: logits, greedy decoding through the KV cache,
the jitted decode step, sampling, generate's errors and the command line."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from tg import Device, Tensor, dtypes
from tg.engine import realize

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PROMPT = [17, 250, 3, 99, 42, 7, 128, 5]
COUNT = 20
Generate = Callable[..., list[int]]  # examples.gpt2.generate, examples.llama.generate


def hf_logits(hf: Any, ids: list[list[int]]) -> np.ndarray:
  with torch.no_grad():
    return hf(torch.tensor(ids)).logits.numpy()


def hf_greedy(hf: Any, prompt: list[int], count: int) -> list[int]:
  """Greedy decoding with transformers, the whole sequence each step (no cache: the plainest reference)."""
  seq = list(prompt)
  for _ in range(count):
    seq.append(int(hf_logits(hf, [seq])[0, -1].argmax()))
  return seq[len(prompt):]


def tg_logits(model: Any, ids: list[list[int]]) -> np.ndarray:
  return model(Tensor(ids, dtype=dtypes.int32)).numpy()


def check_batch_logits(model: Any, hf: Any, vocab: int) -> None:
  """The logits of a batch of two prompts, all positions, are transformers' to 1e-4."""
  batch = [PROMPT, PROMPT[::-1]]
  ours, ref = tg_logits(model, batch), hf_logits(hf, batch)
  assert ours.shape == ref.shape == (2, len(PROMPT), vocab)
  np.testing.assert_allclose(ours, ref, atol=1e-4, rtol=0)


def check_greedy_decode(model: Any, generate: Generate, hf: Any) -> None:
  """Prefill, then jitted one-token steps from the cache: each step's logits are transformers' for the whole sequence."""
  seq, pos, new = list(PROMPT), 0, list(PROMPT)
  for _ in range(COUNT):
    logits = model.logits_next(new, pos)
    np.testing.assert_allclose(logits, hf_logits(hf, [seq])[0, -1], atol=1e-4, rtol=0)
    pos, new = len(seq), [int(logits.argmax())]
    seq += new
  assert seq[len(PROMPT):] == hf_greedy(hf, PROMPT, COUNT)
  assert generate(model, PROMPT, COUNT) == seq[len(PROMPT):]
  assert generate(model, [42], 6) == hf_greedy(hf, [42], 6)  # a one-token prompt: a prefill of one at position 0
  assert len(set(seq[len(PROMPT):])) > 3, "the random model repeats one token: the comparison would mean little"


def check_jit_compiles_once(model: Any, generate: Generate) -> None:
  """On a fresh model: the jitted decode gives the eager tokens, compiles nothing the eager symbolic step had not, and
  replays from the third step on, at other positions too."""
  ran = []
  step = model._decode_step

  def counted(*a: Any) -> Tensor:
    ran.append(1)
    return step(*a)
  model._decode_step = counted
  eager = generate(model, PROMPT, COUNT, jit=False)
  assert model.decode_jit is None
  compiled = len(realize.method_cache)
  assert generate(model, PROMPT, COUNT) == eager
  assert len(realize.method_cache) == compiled, "the jitted step compiled kernels the eager symbolic step had not"
  jit = model.decode_jit
  assert jit is not None and jit.cnt == COUNT - 1 and len(jit.kernels) > 0
  assert len(ran) == COUNT - 1 + 2, "the step's Python ran after the capture: the jit did not replay"
  short = generate(model, PROMPT[:3], COUNT, jit=False)  # compiles the prefill of 3 tokens
  compiled = len(realize.method_cache)
  assert generate(model, PROMPT[:3], COUNT) == short  # other positions: the same capture replays
  assert len(realize.method_cache) == compiled and jit.cnt == 2 * (COUNT - 1)


def check_sampling(model: Any, generate: Generate, count: int) -> None:
  """A seed reproduces sampled tokens and another seed changes them; top-k 1 and a tiny top-p are greedy."""
  greedy = generate(model, PROMPT, count)
  a = generate(model, PROMPT, count, temperature=1.5, seed=3)
  assert a == generate(model, PROMPT, count, temperature=1.5, seed=3)
  assert a != generate(model, PROMPT, count, temperature=1.5, seed=4)
  assert a != greedy
  assert generate(model, PROMPT, count, temperature=1.5, top_k=1, seed=5) == greedy
  assert generate(model, PROMPT, count, temperature=1.5, top_p=1e-6, seed=5) == greedy


def check_generate_errors(model: Any, generate: Generate, context_name: str) -> None:
  """generate's ValueErrors for prompts and counts that don't fit the model's context (64) or vocabulary, and for
  invalid sampling values; the whole context is fine."""
  with pytest.raises(ValueError, match=rf"more than the model's context of 64 \({context_name}\)"):
    generate(model, [1] * 65, 1)
  with pytest.raises(ValueError, match="count can be at most 56"):
    generate(model, PROMPT, 57)
  with pytest.raises(ValueError, match="outside the vocabulary"):
    generate(model, [1, model.vocab_size], 1)
  with pytest.raises(ValueError, match="empty"):
    generate(model, [], 1)
  bad_sampling: list[tuple[dict[str, Any], str]] = [({"temperature": -1.0}, "temperature"), ({"temperature": float("nan")}, "temperature"),
                                                    ({"top_k": -1}, "top_k"), ({"top_p": 0.0}, "top_p"), ({"top_p": 1.5}, "top_p")]
  for kw, msg in bad_sampling:
    with pytest.raises(ValueError, match=msg):
      generate(model, PROMPT, 1, **kw)
  assert len(generate(model, PROMPT, 64 - len(PROMPT))) == 64 - len(PROMPT)


def write_config(path: str, config: dict[str, Any]) -> None:
  with open(os.path.join(path, "config.json"), "w") as f:
    json.dump(config, f)


def check_directory_errors(load: Callable[[str], Any], model_dir: str, tmp_path: str, nowhere: str) -> dict[str, Any]:
  """load's FileNotFoundErrors for a path that does not exist (matching `nowhere`), a directory without config.json,
  and one without weights. Then tmp_path holds model_dir's config.json and a link to its weights, and the config is
  returned, for the caller's variations of it."""
  with pytest.raises(FileNotFoundError, match=nowhere):
    load(os.path.join(tmp_path, "nowhere"))
  with pytest.raises(FileNotFoundError, match=r"no config\.json"):
    load(str(tmp_path))
  with open(os.path.join(model_dir, "config.json")) as f:
    config: dict[str, Any] = json.load(f)
  write_config(str(tmp_path), config)
  with pytest.raises(FileNotFoundError, match=r"no weights: expected model\.safetensors"):
    load(str(tmp_path))
  os.symlink(os.path.join(model_dir, "model.safetensors"), os.path.join(tmp_path, "model.safetensors"))
  return config


def run_cli(example: str, *args: str) -> subprocess.CompletedProcess[str]:
  """examples/<example> run as a program on the tests' device."""
  return subprocess.run([sys.executable, os.path.join(ROOT, "examples", example), *args], capture_output=True, text=True, timeout=300,
                        env={**os.environ, "DEVICE": Device.DEFAULT})


def check_cli_greedy_ids(example: str, model_dir: str, hf: Any) -> str:
  """The program prints the prompt's ids and transformers' greedy ids on stdout; returns its stderr."""
  r = run_cli(example, "--model", model_dir, "--prompt-ids", ",".join(map(str, PROMPT)), "--count", "12", "--greedy")
  assert r.returncode == 0, r.stderr
  assert r.stdout.split() == [str(t) for t in PROMPT + hf_greedy(hf, PROMPT, 12)]
  assert "device:" in r.stderr
  return r.stderr


def check_cli_error(main: Callable[[list[str]], None], argv: list[str], msg: str, capsys: pytest.CaptureFixture[str]) -> None:
  """main(argv) exits with a nonzero status and says `msg` (argparse's errors on stderr, the others in the exit)."""
  with pytest.raises(SystemExit) as e:
    main(argv)
  assert e.value.code != 0
  assert msg in str(e.value.code) + capsys.readouterr().err
