"""examples/train_charlm.py: the --quick run from the command line (the loss falls, a checkpoint and a plot are written,
text is sampled), resuming gives exactly the weights of a run that never stopped, and bad input gets a clear error."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from examples import train_charlm as charlm

from tg import Device
from tg.nn.state import safe_load, safe_save

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def test_quick_run_from_the_command_line(tmp_path: str) -> None:
  ckpt, plot = os.path.join(tmp_path, "charlm.safetensors"), os.path.join(tmp_path, "loss.png")
  out = subprocess.run([sys.executable, "examples/train_charlm.py", "--quick", "--ckpt", ckpt, "--plot", plot], cwd=ROOT,
                       env={**os.environ, "DEVICE": Device.DEFAULT}, capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stderr[-3000:]
  entropy = float(re.search(r"unigram entropy of the training text: ([\d.]+)", out.stdout).group(1))  # type: ignore[union-attr]
  assert 3.0 < entropy < 3.6, out.stdout  # the help topics' characters, in nats
  vals = [float(v) for v in re.findall(r"validation loss ([\d.]+)", out.stdout)]
  assert len(vals) >= 4 and vals[-1] < vals[0] - 0.5, out.stdout  # 30 steps of a tiny model: from ~4.55 (step 0) to ~3.65
  assert "trained 30 steps" in out.stdout and re.search(r"at step 30: train loss [\d.]+, validation loss [\d.]+, unigram entropy", out.stdout)
  assert os.path.getsize(ckpt) > 0 and not os.path.exists(ckpt + ".tmp")
  assert "sampled characters" in out.stdout
  try:
    import matplotlib  # noqa: F401
    assert os.path.getsize(plot) > 1000
  except ImportError:
    assert "matplotlib is not installed" in out.stderr


SMALL = ["--quick", "--eval-every", "100", "--sample", "0"]  # quick's tiny model, evaluated (and saved) at the end only


def _state(path: str) -> dict[str, np.ndarray]:
  return {k: v.numpy() for k, v in safe_load(path).items()}


def test_resume_gives_the_weights_of_a_straight_run(tmp_path: str) -> None:
  """4 steps, then resumed to 7, against 7 steps straight: every weight, AdamW moment and beta power bit for bit."""
  split, straight = os.path.join(tmp_path, "split.safetensors"), os.path.join(tmp_path, "straight.safetensors")
  charlm.main([*SMALL, "--steps", "4", "--ckpt", split])
  charlm.main([*SMALL, "--steps", "7", "--ckpt", split, "--resume"])
  charlm.main([*SMALL, "--steps", "7", "--ckpt", straight])
  a, b = _state(split), _state(straight)
  assert a.keys() == b.keys() and any(k.startswith("optim.") for k in a)
  for k in a:
    assert np.array_equal(a[k], b[k]), k
  meta_a, meta_b = charlm.read_checkpoint_meta(split), charlm.read_checkpoint_meta(straight)
  assert meta_a["step"] == meta_b["step"] == "7"
  assert json.loads(meta_a["history"])["train"] == json.loads(meta_b["history"])["train"]  # the same 7 losses


def test_resume_past_the_steps_trains_nothing(tmp_path: str, capsys: pytest.CaptureFixture[str]) -> None:
  ckpt = os.path.join(tmp_path, "c.safetensors")
  charlm.main([*SMALL, "--steps", "3", "--ckpt", ckpt])
  before = _state(ckpt)
  charlm.main([*SMALL, "--steps", "2", "--ckpt", ckpt, "--resume"])
  assert "nothing to train" in capsys.readouterr().out
  after = _state(ckpt)
  assert all(np.array_equal(before[k], after[k]) for k in before)


@pytest.fixture(scope="module")
def quick_ckpt(tmp_path_factory: pytest.TempPathFactory) -> str:
  path = str(tmp_path_factory.mktemp("charlm") / "quick.safetensors")
  charlm.main([*SMALL, "--steps", "2", "--ckpt", path])
  return path


@pytest.mark.parametrize("args,msg", [
  (["--dim", "64"], "holds a different model: dim 32 (this run: 64)"),
  (["--layers", "2", "--heads", "4"], "heads 2 (this run: 4), layers 1 (this run: 2)"),
  (["--context", "16"], "context 32 (this run: 16)"),
])
def test_resume_from_another_config_is_refused(quick_ckpt: str, args: list[str], msg: str) -> None:
  with pytest.raises(SystemExit, match=re.escape(msg)):
    charlm.main([*SMALL, "--steps", "4", "--ckpt", quick_ckpt, "--resume", *args])


def test_resume_errors(tmp_path: str, capsys: pytest.CaptureFixture[str]) -> None:
  missing = os.path.join(tmp_path, "none.safetensors")
  with pytest.raises(SystemExit, match=r"there is no checkpoint at .*none\.safetensors"):
    charlm.main([*SMALL, "--ckpt", missing, "--resume"])
  other = os.path.join(tmp_path, "other.safetensors")
  from tg import Tensor
  safe_save({"w": Tensor([1.0, 2.0])}, other)
  with pytest.raises(SystemExit, match="not a checkpoint of this program"):
    charlm.main([*SMALL, "--ckpt", other, "--resume"])
  garbage = os.path.join(tmp_path, "garbage.safetensors")
  with open(garbage, "wb") as f:
    f.write(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!")
  with pytest.raises(SystemExit, match="not a readable safetensors file"):
    charlm.main([*SMALL, "--ckpt", garbage, "--resume"])
  with pytest.raises(SystemExit) as e:
    charlm.main([*SMALL, "--resume"])
  assert e.value.code == 2 and "--resume needs --ckpt PATH" in capsys.readouterr().err


@pytest.mark.parametrize("args,msg", [
  (["--dim", "30", "--heads", "4"], "--dim 30 must be divisible by --heads 4"),
  (["--batch", "0"], "--batch must be at least 1"),
  (["--steps", "-1"], "--steps must be at least 0"),
  (["--lr", "nan"], "--lr must be a finite number > 0"),
])
def test_bad_options(args: list[str], msg: str, capsys: pytest.CaptureFixture[str]) -> None:
  with pytest.raises(SystemExit) as e:
    charlm.main([*SMALL, *args])
  assert e.value.code == 2 and msg in capsys.readouterr().err


def test_prompt_outside_the_vocabulary() -> None:
  with pytest.raises(SystemExit, match="--prompt: characters not in the vocabulary"):
    charlm.main([*SMALL, "--prompt", "\u4e2d"])


def test_data_order_depends_only_on_seed_and_step() -> None:
  data = charlm.CharData(charlm.load_text())
  x1, y1 = data.train_batch(0, 5, 4, 16)
  data.train_batch(0, 6, 4, 16)
  x2, _ = data.train_batch(0, 5, 4, 16)
  assert np.array_equal(x1, x2) and np.array_equal(x1[:, 1:], y1[:, :-1])
  assert not np.array_equal(x1, data.train_batch(1, 5, 4, 16)[0])
  assert data.decode(data.encode("The if statement")) == "The if statement"
