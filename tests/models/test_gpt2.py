"""examples/gpt2.py against Hugging Face transformers, on a tiny random GPT-2 saved with save_pretrained: logits to
1e-4, greedy tokens identical, the KV cache's jitted decode step compiled once for every position, sampling, the
command line and its errors."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("transformers")
import torch
from examples import gpt2
from tiny_gpt2 import make_tiny_gpt2

from tg import Device, Tensor, dtypes
from tg.engine import realize

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PROMPT = [17, 250, 3, 99, 42, 7, 128, 5]
COUNT = 20


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, object]:
  path = str(tmp_path_factory.mktemp("tiny-gpt2"))
  return path, make_tiny_gpt2(path)


@pytest.fixture(scope="module")
def model(checkpoint: tuple[str, object]) -> gpt2.GPT2:
  return gpt2.load_gpt2(checkpoint[0])


def hf_logits(hf: object, ids: list[list[int]]) -> np.ndarray:
  with torch.no_grad():
    return hf(torch.tensor(ids)).logits.numpy()  # type: ignore[operator]


def hf_greedy(hf: object, prompt: list[int], count: int) -> list[int]:
  """Greedy decoding with transformers, the whole sequence each step (no cache: the plainest reference)."""
  seq = list(prompt)
  for _ in range(count):
    seq.append(int(hf_logits(hf, [seq])[0, -1].argmax()))
  return seq[len(prompt):]


def test_logits_match_transformers(checkpoint: tuple[str, object], model: gpt2.GPT2) -> None:
  batch = [PROMPT, PROMPT[::-1]]
  ours = model(Tensor(batch, dtype=dtypes.int32)).numpy()
  ref = hf_logits(checkpoint[1], batch)
  assert ours.shape == ref.shape == (2, len(PROMPT), 300)
  np.testing.assert_allclose(ours, ref, atol=1e-4, rtol=0)


def test_greedy_tokens_and_decode_logits_match_transformers(checkpoint: tuple[str, object], model: gpt2.GPT2) -> None:
  """Prefill, then jitted one-token steps from the cache: each step's logits are transformers' for the whole sequence."""
  hf = checkpoint[1]
  seq, pos, new = list(PROMPT), 0, list(PROMPT)
  for _ in range(COUNT):
    logits = model.logits_next(new, pos)
    np.testing.assert_allclose(logits, hf_logits(hf, [seq])[0, -1], atol=1e-4, rtol=0)
    pos, new = len(seq), [int(logits.argmax())]
    seq += new
  assert seq[len(PROMPT):] == hf_greedy(hf, PROMPT, COUNT)
  assert gpt2.generate(model, PROMPT, COUNT) == seq[len(PROMPT):]
  assert gpt2.generate(model, [42], 6) == hf_greedy(hf, [42], 6)  # a one-token prompt: a prefill of one at position 0
  assert len(set(seq[len(PROMPT):])) > 3, "the random model repeats one token: the comparison would mean little"


def test_jitted_decode_compiles_once_and_matches_eager(checkpoint: tuple[str, object]) -> None:
  model = gpt2.load_gpt2(checkpoint[0])
  ran = []
  step = model._decode_step
  model._decode_step = lambda *a: (ran.append(1), step(*a))[1]  # type: ignore[method-assign]
  eager = gpt2.generate(model, PROMPT, COUNT, jit=False)
  assert model.decode_jit is None
  compiled = len(realize.method_cache)
  assert gpt2.generate(model, PROMPT, COUNT) == eager
  assert len(realize.method_cache) == compiled, "the jitted step compiled kernels the eager symbolic step had not"
  jit = model.decode_jit
  assert jit is not None and jit.cnt == COUNT - 1 and len(jit.kernels) > 0
  assert len(ran) == COUNT - 1 + 2, "the step's Python ran after the capture: the jit did not replay"
  short = gpt2.generate(model, PROMPT[:3], COUNT, jit=False)  # compiles the prefill of 3 tokens
  compiled = len(realize.method_cache)
  assert gpt2.generate(model, PROMPT[:3], COUNT) == short  # other positions: the same capture replays
  assert len(realize.method_cache) == compiled and jit.cnt == 2 * (COUNT - 1)


def test_sampling_is_reproducible_and_top_k_1_is_greedy(model: gpt2.GPT2) -> None:
  greedy = gpt2.generate(model, PROMPT, COUNT)
  a = gpt2.generate(model, PROMPT, COUNT, temperature=1.5, seed=3)
  assert a == gpt2.generate(model, PROMPT, COUNT, temperature=1.5, seed=3)
  assert a != gpt2.generate(model, PROMPT, COUNT, temperature=1.5, seed=4)
  assert a != greedy
  assert gpt2.generate(model, PROMPT, COUNT, temperature=1.5, top_k=1, seed=5) == greedy
  assert gpt2.generate(model, PROMPT, COUNT, temperature=1.5, top_p=1e-6, seed=5) == greedy


def test_top_k_and_top_p_keep_the_likely_tokens() -> None:
  logits = np.log(np.array([0.05, 0.4, 0.1, 0.3, 0.15]))
  rng = np.random.default_rng(0)
  draws = lambda **kw: {gpt2.sample(logits, 1.0, rng=rng, **kw) for _ in range(300)}
  assert draws() == {0, 1, 2, 3, 4}
  assert draws(top_k=2) == {1, 3}
  assert draws(top_p=0.7) == {1, 3}  # 0.4 + 0.3 reach 0.7
  assert draws(top_p=0.71) == {1, 3, 4}
  assert draws(top_k=3, top_p=0.5) == {1, 3}


def test_checkpoint_variants_load(checkpoint: tuple[str, object], tmp_path: str) -> None:
  """GPT2Model's names (no `transformer.` prefix), an explicit lm_head.weight, old checkpoints' attention-mask
  buffers: all load to the same logits."""
  from safetensors.numpy import save_file
  hf = checkpoint[1]
  tensors = {k.removeprefix("transformer."): v.numpy().copy() for k, v in hf.state_dict().items()}  # type: ignore[attr-defined]
  tensors["lm_head.weight"] = tensors["wte.weight"].copy()
  tensors["h.0.attn.bias"] = np.tril(np.ones((64, 64), np.float32))[None, None]
  tensors["h.0.attn.masked_bias"] = np.array(-1e4, np.float32)
  save_file(tensors, os.path.join(tmp_path, "model.safetensors"))
  with open(os.path.join(checkpoint[0], "config.json")) as src, open(os.path.join(tmp_path, "config.json"), "w") as dst:
    dst.write(src.read())
  logits = gpt2.load_gpt2(str(tmp_path))(Tensor([PROMPT], dtype=dtypes.int32)).numpy()
  np.testing.assert_allclose(logits, hf_logits(hf, [PROMPT]), atol=1e-4, rtol=0)


def test_load_errors(checkpoint: tuple[str, object], tmp_path: str) -> None:
  with pytest.raises(FileNotFoundError, match=r"does not exist.*hf download gpt2"):
    gpt2.load_gpt2(os.path.join(tmp_path, "nowhere"))
  with pytest.raises(FileNotFoundError, match=r"no config\.json"):
    gpt2.load_gpt2(str(tmp_path))
  with open(os.path.join(checkpoint[0], "config.json")) as f:
    config = json.load(f)
  with open(os.path.join(tmp_path, "config.json"), "w") as f:
    json.dump(config, f)
  with pytest.raises(FileNotFoundError, match=r"no weights: expected model\.safetensors"):
    gpt2.load_gpt2(str(tmp_path))
  os.symlink(os.path.join(checkpoint[0], "model.safetensors"), os.path.join(tmp_path, "model.safetensors"))
  with open(os.path.join(tmp_path, "config.json"), "w") as f:
    json.dump({**config, "n_layer": 3}, f)
  with pytest.raises(ValueError, match=r"missing \['transformer.h.2.attn.c_attn.bias'"):
    gpt2.load_gpt2(str(tmp_path))
  with open(os.path.join(tmp_path, "config.json"), "w") as f:
    json.dump({**config, "model_type": "llama"}, f)
  with pytest.raises(ValueError, match="not GPT-2"):
    gpt2.load_gpt2(str(tmp_path))


def test_generate_errors(model: gpt2.GPT2) -> None:
  with pytest.raises(ValueError, match="more than the model's context of 64"):
    gpt2.generate(model, [1] * 65, 1)
  with pytest.raises(ValueError, match="count can be at most 56"):
    gpt2.generate(model, PROMPT, 57)
  with pytest.raises(ValueError, match="outside the vocabulary"):
    gpt2.generate(model, [1, 300], 1)
  with pytest.raises(ValueError, match="empty"):
    gpt2.generate(model, [], 1)
  for kw, msg in [({"temperature": -1.0}, "temperature"), ({"temperature": float("nan")}, "temperature"), ({"top_k": -1}, "top_k"),
                  ({"top_p": 0.0}, "top_p"), ({"top_p": 1.5}, "top_p")]:
    with pytest.raises(ValueError, match=msg):
      gpt2.generate(model, PROMPT, 1, **kw)
  assert len(gpt2.generate(model, PROMPT, 64 - len(PROMPT))) == 64 - len(PROMPT)  # the whole context is fine


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
  return subprocess.run([sys.executable, os.path.join(ROOT, "examples", "gpt2.py"), *args], capture_output=True, text=True, timeout=300,
                        env={**os.environ, "DEVICE": Device.DEFAULT})


def test_cli_prints_prompt_and_greedy_ids(checkpoint: tuple[str, object]) -> None:
  r = run_cli("--model", checkpoint[0], "--prompt-ids", ",".join(map(str, PROMPT)), "--count", "12", "--greedy")
  assert r.returncode == 0, r.stderr
  assert r.stdout.split() == [str(t) for t in PROMPT + hf_greedy(checkpoint[1], PROMPT, 12)]
  assert "device:" in r.stderr


def test_cli_text_prompt_with_the_byte_fallback(checkpoint: tuple[str, object], capsys: pytest.CaptureFixture[str]) -> None:
  gpt2.main(["--model", checkpoint[0], "--prompt", "Hi!", "--count", "3", "--seed", "0"])
  out, err = capsys.readouterr()
  assert "byte-level fallback" in err and out.startswith("Hi!")
  assert gpt2.ByteTokenizer(checkpoint[0]).decode(gpt2.ByteTokenizer(checkpoint[0]).encode("héllo ✓")) == "héllo ✓"


@pytest.mark.parametrize("args, msg", [
  (["--count", "57"], "count can be at most 56"),
  (["--count", "-1"], "--count must be >= 0"),
  (["--temperature", "-0.5"], "temperature must be"),
  (["--top-p", "0"], "top_p must be in"),
  (["--top-k", "-2"], "top_k must be"),
  (["--greedy", "--top-k", "5"], "--greedy takes no"),
])
def test_cli_errors(checkpoint: tuple[str, object], capsys: pytest.CaptureFixture[str], args: list[str], msg: str) -> None:
  with pytest.raises(SystemExit) as e:
    gpt2.main(["--model", checkpoint[0], "--prompt-ids", ",".join(map(str, PROMPT)), *args])
  assert e.value.code != 0
  assert msg in str(e.value.code) + capsys.readouterr().err


def test_cli_missing_model_and_long_prompt(checkpoint: tuple[str, object], tmp_path: str, capsys: pytest.CaptureFixture[str]) -> None:
  with pytest.raises(SystemExit, match="does not exist"):
    gpt2.main(["--model", os.path.join(tmp_path, "none"), "--prompt-ids", "1,2"])
  with pytest.raises(SystemExit, match="more than the model's context"):
    gpt2.main(["--model", checkpoint[0], "--prompt-ids", ",".join(["1"] * 70), "--count", "0"])
