"""examples/gpt2.py against Hugging Face transformers, on a tiny random GPT-2 saved with save_pretrained: logits to
1e-4, greedy tokens identical, the KV cache's jitted decode step compiled once for every position, sampling, the
command line and its errors."""
from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

pytest.importorskip("transformers")
import lm_checks as check
from examples import gpt2
from lm_checks import COUNT, PROMPT, hf_logits
from tiny_gpt2 import make_tiny_gpt2

from tg import Tensor, dtypes


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, object]:
  path = str(tmp_path_factory.mktemp("tiny-gpt2"))
  return path, make_tiny_gpt2(path)


@pytest.fixture(scope="module")
def model(checkpoint: tuple[str, object]) -> gpt2.GPT2:
  return gpt2.load_gpt2(checkpoint[0])


def test_logits_match_transformers(checkpoint: tuple[str, object], model: gpt2.GPT2) -> None:
  check.check_batch_logits(model, checkpoint[1], 300)


def test_greedy_tokens_and_decode_logits_match_transformers(checkpoint: tuple[str, object], model: gpt2.GPT2) -> None:
  check.check_greedy_decode(model, gpt2.generate, checkpoint[1])


def test_jitted_decode_compiles_once_and_matches_eager(checkpoint: tuple[str, object]) -> None:
  check.check_jit_compiles_once(gpt2.load_gpt2(checkpoint[0]), gpt2.generate)


def test_sampling_is_reproducible_and_top_k_1_is_greedy(model: gpt2.GPT2) -> None:
  check.check_sampling(model, gpt2.generate, COUNT)


def test_top_k_and_top_p_keep_the_likely_tokens() -> None:
  logits = np.log(np.array([0.05, 0.4, 0.1, 0.3, 0.15]))
  rng = np.random.default_rng(0)

  def draws(**kw: Any) -> set[int]:
    return {gpt2.sample(logits, 1.0, rng=rng, **kw) for _ in range(300)}
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
  config = check.check_directory_errors(gpt2.load_gpt2, checkpoint[0], tmp_path, r"does not exist.*hf download gpt2")
  check.write_config(str(tmp_path), {**config, "n_layer": 3})
  with pytest.raises(ValueError, match=r"missing \['transformer.h.2.attn.c_attn.bias'"):
    gpt2.load_gpt2(str(tmp_path))
  check.write_config(str(tmp_path), {**config, "model_type": "llama"})
  with pytest.raises(ValueError, match="not GPT-2"):
    gpt2.load_gpt2(str(tmp_path))


def test_generate_errors(model: gpt2.GPT2) -> None:
  check.check_generate_errors(model, gpt2.generate, "n_positions")


def test_cli_prints_prompt_and_greedy_ids(checkpoint: tuple[str, object]) -> None:
  check.check_cli_greedy_ids("gpt2.py", checkpoint[0], checkpoint[1])


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
  check.check_cli_error(gpt2.main, ["--model", checkpoint[0], "--prompt-ids", ",".join(map(str, PROMPT)), *args], msg, capsys)


def test_cli_missing_model_and_long_prompt(checkpoint: tuple[str, object], tmp_path: str, capsys: pytest.CaptureFixture[str]) -> None:
  with pytest.raises(SystemExit, match="does not exist"):
    gpt2.main(["--model", os.path.join(tmp_path, "none"), "--prompt-ids", "1,2"])
  with pytest.raises(SystemExit, match="more than the model's context"):
    gpt2.main(["--model", checkpoint[0], "--prompt-ids", ",".join(["1"] * 70), "--count", "0"])
