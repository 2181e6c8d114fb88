"""examples/llama.py against Hugging Face transformers' LlamaForCausalLM, on a tiny random LLaMA (grouped-query
attention) saved with save_pretrained and written to GGUF files as llama.cpp's converter writes them: logits to 1e-4
(safetensors, GGUF F32, and each quantized file against transformers with the file's dequantized weights), the
quantization's own error within documented bounds, greedy tokens identical, the jitted decode step compiled once,
RoPE scalings, tied embeddings, the command line and its errors."""
from __future__ import annotations

import copy
import json
import os
import sys
from typing import Any

import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("gguf")
import gguf
import lm_checks as check
import torch
from examples import llama, lm_common
from lm_checks import COUNT, PROMPT, hf_greedy, hf_logits, tg_logits
from tiny_llama import llamacpp_permute, make_tiny_llama, write_gguf

from tg import Tensor

# the quantization's own effect on the logits, max |ours - transformers fp32| / max |transformers fp32|, on the two
# tiny models (docs/models.md has the measured figures): the test model's random weights (initializer_range 0.3) make a
# chaotic network, where Q4_0's error is as large as the logits (no bound: only its exactness is checked); at LLaMA's
# own initializer_range 0.02 the model is calm and the bounds mean something
BOUNDS = {"test": {"F16": 0.01, "Q8_0": 0.15}, "calm": {"F16": 0.002, "Q8_0": 0.03, "Q4_0": 0.35}}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Any]:
  path = str(tmp_path_factory.mktemp("tiny-llama"))
  return path, make_tiny_llama(path)


@pytest.fixture(scope="module")
def calm(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Any]:
  path = str(tmp_path_factory.mktemp("tiny-llama-calm"))
  return path, make_tiny_llama(path, seed=1, initializer_range=0.02)


_files: dict[tuple[str, str], str] = {}


def gguf_file(ckpt: tuple[str, Any], qtype: str) -> str:
  """The checkpoint's weights as a GGUF file of `qtype`, written once per session."""
  if (ckpt[0], qtype) not in _files:
    _files[(ckpt[0], qtype)] = write_gguf(ckpt[1], os.path.join(ckpt[0], f"model-{qtype}.gguf"), qtype)
  return _files[(ckpt[0], qtype)]


@pytest.fixture(scope="module")
def model(checkpoint: tuple[str, Any]) -> llama.Llama:
  return llama.load_llama(checkpoint[0])


def test_logits_match_transformers(checkpoint: tuple[str, Any], model: llama.Llama) -> None:
  check.check_batch_logits(model, checkpoint[1], 320)
  assert model.config.n_kv_heads == 2 and model.config.num_attention_heads == 4, "the test model should group its query heads"


def test_greedy_tokens_and_decode_logits_match_transformers(checkpoint: tuple[str, Any], model: llama.Llama) -> None:
  check.check_greedy_decode(model, llama.generate, checkpoint[1])


def test_jitted_decode_compiles_once_and_matches_eager(checkpoint: tuple[str, Any]) -> None:
  check.check_jit_compiles_once(llama.load_llama(checkpoint[0]), llama.generate)


def test_sampling_is_reproducible_and_top_k_1_is_greedy(model: llama.Llama) -> None:
  check.check_sampling(model, llama.generate, 8)


def test_gguf_f32_matches_transformers(checkpoint: tuple[str, Any]) -> None:
  """A GGUF file written as llama.cpp's converter writes it (q/k rows permuted): the same logits and greedy tokens."""
  m = llama.load_llama(gguf_file(checkpoint, "F32"))
  np.testing.assert_allclose(tg_logits(m, [PROMPT]), hf_logits(checkpoint[1], [PROMPT]), atol=1e-4, rtol=0)
  assert llama.generate(m, PROMPT, COUNT) == hf_greedy(checkpoint[1], PROMPT, COUNT)


def test_gguf_unpermute_inverts_llamacpp_permute() -> None:
  for heads, rows in ((4, 64), (2, 32), (1, 8)):
    w = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)
    np.testing.assert_array_equal(llama.gguf_unpermute(Tensor(llamacpp_permute(w, heads)), heads).numpy(), w)
  # llama.cpp's order within a head: HF's rows 0, d/2, 1, d/2 + 1, ... (adjacent pairs rotate together)
  assert llamacpp_permute(np.arange(8), 1).tolist() == [0, 4, 1, 5, 2, 6, 3, 7]


def dequantized(hf: Any, qtype: str) -> Any:
  """A copy of `hf` whose 2-d weights went through `qtype` and back with the gguf package's own (de)quantizer: what a
  GGUF file of that type holds (llama.cpp's row permutation moves whole rows, and ggml's blocks lie along a row)."""
  qt = gguf.GGMLQuantizationType[qtype]
  out = copy.deepcopy(hf)
  with torch.no_grad():
    for t in out.parameters():
      if t.ndim == 2:
        a = t.numpy()
        back = a.astype(np.float16).astype(np.float32) if qtype == "F16" else gguf.quants.dequantize(gguf.quants.quantize(a, qt), qt)
        t.copy_(torch.from_numpy(np.ascontiguousarray(back).reshape(a.shape)))
  return out


def relative_error(ours: np.ndarray, ref: np.ndarray) -> float:
  return float(np.abs(ours - ref).max() / np.abs(ref).max())


@pytest.mark.parametrize("qtype", ["F16", "Q8_0", "Q4_0"])
def test_gguf_quantized(checkpoint: tuple[str, Any], calm: tuple[str, Any], qtype: str) -> None:
  """tg reads each quantized file exactly (its logits are transformers' with the file's dequantized weights, to
  1e-4), and the quantization moves the logits from the float32 model's within the documented bounds."""
  batch = [PROMPT, PROMPT[::-1]]
  for name, ckpt in (("test", checkpoint), ("calm", calm)):
    ours = tg_logits(llama.load_llama(gguf_file(ckpt, qtype)), batch)
    np.testing.assert_allclose(ours, hf_logits(dequantized(ckpt[1], qtype), batch), atol=1e-4, rtol=0)
    err = relative_error(ours, hf_logits(ckpt[1], batch))
    if qtype in BOUNDS[name]:
      assert err <= BOUNDS[name][qtype], f"{qtype} on the {name} model: max diff {err:.4f} of the logits' max"


def test_tied_embeddings(tmp_path: str) -> None:
  """tie_word_embeddings: no lm_head.weight in the checkpoint (nor output.weight in the GGUF file); the head is the
  token embedding."""
  hf = make_tiny_llama(str(tmp_path), seed=2, tie_word_embeddings=True)
  ref = hf_logits(hf, [PROMPT])
  for src in (str(tmp_path), write_gguf(hf, os.path.join(tmp_path, "tied.gguf"))):
    m = llama.load_llama(src)
    assert m.config.tie_word_embeddings and not m.lm_head
    np.testing.assert_allclose(tg_logits(m, [PROMPT]), ref, atol=1e-4, rtol=0)


LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 16}


@pytest.mark.parametrize("rope", [LLAMA3_ROPE, {"rope_type": "linear", "rope_theta": 500000.0, "factor": 4.0}], ids=["llama3", "linear"])
def test_rope_scaling(tmp_path: str, rope: dict[str, Any]) -> None:
  """LLaMA 3's frequency scaling (original context 16: the head's frequencies fall in all three of its bands) and
  linear scaling, from config.json; llama3's also from GGUF, where llama.cpp stores it as rope_freqs.weight."""
  hf = make_tiny_llama(str(tmp_path), seed=3, rope_parameters=rope)
  prompt = [int(t) for t in np.random.default_rng(0).integers(0, 320, 48)]  # positions past the original context
  ref = hf_logits(hf, [prompt])
  srcs = [str(tmp_path)] + ([write_gguf(hf, os.path.join(tmp_path, "llama3.gguf"))] if rope["rope_type"] == "llama3" else [])
  for src in srcs:
    m = llama.load_llama(src)
    np.testing.assert_allclose(tg_logits(m, [prompt]), ref, atol=1e-4, rtol=0)
  assert not np.allclose(llama.rope_inverse_frequencies(m.config), llama.rope_inverse_frequencies(llama.LlamaConfig(head_dim=16)))


def test_checkpoint_variants_load(checkpoint: tuple[str, Any], tmp_path: str) -> None:
  """LlamaModel's names (no `model.` prefix) with an lm_head.weight, older checkpoints' rotary inv_freq buffers, an old
  config.json (rope_theta and rope_scaling at the top level) and bfloat16 weights (real LLaMAs' dtype) load."""
  from safetensors.torch import save_file
  hf = checkpoint[1]
  tensors = {k.removeprefix("model."): v.to(torch.bfloat16).contiguous() for k, v in hf.state_dict().items()}
  tensors["layers.0.self_attn.rotary_emb.inv_freq"] = torch.ones(8)
  save_file(tensors, os.path.join(tmp_path, "model.safetensors"))
  with open(os.path.join(checkpoint[0], "config.json")) as f:
    config = json.load(f)
  theta = config.pop("rope_parameters")["rope_theta"]
  with open(os.path.join(tmp_path, "config.json"), "w") as f:
    json.dump({**config, "rope_theta": theta, "rope_scaling": None}, f)
  rounded = copy.deepcopy(hf)
  with torch.no_grad():
    for t in rounded.parameters():  # not .to(bfloat16): that would round the rotary inv_freq buffer too
      t.copy_(t.to(torch.bfloat16).to(torch.float32))
  ref = hf_logits(rounded, [PROMPT])
  np.testing.assert_allclose(tg_logits(llama.load_llama(str(tmp_path)), [PROMPT]), ref, atol=1e-4, rtol=0)


def test_load_errors(checkpoint: tuple[str, Any], tmp_path: str) -> None:
  config = check.check_directory_errors(llama.load_llama, checkpoint[0], tmp_path, r"neither a model directory nor a GGUF file.*hf download")
  cases: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"num_hidden_layers": 3}, ValueError, r"missing \['model.layers.2.input_layernorm.weight'"),
    ({"intermediate_size": 96}, ValueError, r"model.layers.0.mlp.down_proj.weight has shape \(64, 128\), the config's LLaMA needs \(64, 96\)"),
    ({"model_type": "gpt2"}, ValueError, "not a LLaMA"),
    ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4}}, ValueError, r"rope scaling 'yarn' is not supported"),
    ({"rope_parameters": {"rope_type": "llama3", "factor": 4.0, "rope_theta": 1e4}}, ValueError, r"'llama3' needs low_freq_factor"),
    ({"attention_bias": True}, ValueError, "attention_bias is not supported"),
    ({"num_key_value_heads": 3}, ValueError, "not a multiple of num_key_value_heads 3"),
  ]
  for change, err, msg in cases:
    check.write_config(str(tmp_path), {**config, **change})
    with pytest.raises(err, match=msg):
      llama.load_llama(str(tmp_path))
  not_gguf = os.path.join(tmp_path, "model.bin")
  with open(not_gguf, "wb") as f:
    f.write(b"PK\x03\x04 not a gguf file")
  with pytest.raises(ValueError, match="not a GGUF file"):
    llama.load_llama(not_gguf)


def write_small_gguf(path: str, arch: str, **kv: int) -> str:
  w = gguf.GGUFWriter(path, arch)
  for key, value in kv.items():
    w.add_uint32(key, value)
  w.add_tensor("token_embd.weight", np.zeros((8, 32), np.float32))
  w.write_header_to_file()
  w.write_kv_data_to_file()
  w.write_tensors_to_file()
  w.close()
  return path


def test_gguf_errors(tmp_path: str) -> None:
  with pytest.raises(ValueError, match=r"GGUF architecture 'gpt2' is not supported: examples/llama.py reads architecture 'llama'"):
    llama.load_llama(write_small_gguf(os.path.join(tmp_path, "gpt2.gguf"), "gpt2"))
  with pytest.raises(ValueError, match=r"has no llama.embedding_length"):
    llama.load_llama(write_small_gguf(os.path.join(tmp_path, "bare.gguf"), "llama", **{"llama.attention.head_count": 2}))
  with pytest.raises(ValueError, match=r"mixture of experts"):
    llama.load_llama(write_small_gguf(os.path.join(tmp_path, "moe.gguf"), "llama", **{"llama.expert_count": 8}))


def test_generate_errors(model: llama.Llama) -> None:
  check.check_generate_errors(model, llama.generate, "max_position_embeddings")


def test_tokenizers(checkpoint: tuple[str, Any], tmp_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
  """tokenizers with a tokenizer.json when both are there; without the library, the byte-level fallback finds the
  byte tokens in tokenizer.json's vocabulary, or in a GGUF file's, or takes byte b as token b without a vocabulary."""
  tokenizers = pytest.importorskip("tokenizers")
  from tiny_llama import vocabulary
  vocab = {p: i for i, p in enumerate(vocabulary(320))}
  tok = tokenizers.Tokenizer(tokenizers.models.BPE(vocab, [], unk_token="<unk>", byte_fallback=True))
  tok.decoder = tokenizers.decoders.ByteFallback()
  tok.save(os.path.join(tmp_path, "tokenizer.json"))
  t, which = lm_common.load_hf_tokenizer(str(tmp_path), 320)
  assert which.startswith("tokenizers") and t.encode("Hi") == [3 + ord("H"), 3 + ord("i")] and t.decode(t.encode("Hi")) == "Hi"
  monkeypatch.setitem(sys.modules, "tokenizers", None)  # as if it were not installed
  t, which = lm_common.load_hf_tokenizer(str(tmp_path), 320)
  assert "fallback" in which and "<0xNN>" in which and t.encode("é") == [3 + 0xC3, 3 + 0xA9] and t.decode([*t.encode("é ✓"), 2]) == "é ✓</s>"
  t, which = llama.load_tokenizer(llama.read_checkpoint(gguf_file(checkpoint, "Q8_0")))
  assert "GGUF file's vocabulary" in which and t.encode("Hi") == [1, 75, 108] and t.decode([1, 75, 108, 2, 259]) == "Hi e"  # BOS first
  t, which = lm_common.load_hf_tokenizer(checkpoint[0], 320)
  assert "byte b is token b" in which and t.encode("Hi") == [72, 105]
  order = lm_common.gpt2_byte_order()  # a byte-level BPE vocabulary (LLaMA 3's, GPT-2's): bytes spelled as characters
  t = lm_common.ByteTokenizer([chr(b if i < 188 else 256 + i - 188) for i, b in enumerate(order)] + ["\u0120the"], 257)
  assert "byte-level tokens" in t.kind and t.encode("a") == [order.index(ord("a"))] and t.decode([*t.encode("é"), 256]) == "é the"


def test_cli_prints_prompt_and_greedy_ids(checkpoint: tuple[str, Any]) -> None:
  assert "(safetensors)" in check.check_cli_greedy_ids("llama.py", checkpoint[0], checkpoint[1])


def test_cli_gguf_and_text_prompt(checkpoint: tuple[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
  llama.main(["--model", gguf_file(checkpoint, "F32"), "--prompt-ids", "1 17 250", "--count", "5", "--greedy"])
  out, err = capsys.readouterr()
  assert out.split() == [str(t) for t in [1, 17, 250, *hf_greedy(checkpoint[1], [1, 17, 250], 5)]] and "GGUF (F32)" in err
  llama.main(["--model", gguf_file(checkpoint, "F32"), "--prompt", "Hi!", "--count", "3", "--seed", "0"])
  out, err = capsys.readouterr()
  assert "byte-level fallback" in err and out.startswith("Hi!")


@pytest.mark.parametrize("args, msg", [
  (["--count", "57"], "count can be at most 56"),
  (["--prompt-ids", ",".join(["1"] * 70), "--count", "0"], "more than the model's context of 64 (max_position_embeddings)"),
  (["--count", "-1"], "--count must be >= 0"),
  (["--greedy", "--top-k", "5"], "--greedy takes no"),
  (["--model", "/nonexistent/llama"], "neither a model directory nor a GGUF file"),
])
def test_cli_errors(checkpoint: tuple[str, Any], capsys: pytest.CaptureFixture[str], args: list[str], msg: str) -> None:
  check.check_cli_error(llama.main, ["--model", checkpoint[0], "--prompt-ids", ",".join(map(str, PROMPT)), *args], msg, capsys)
