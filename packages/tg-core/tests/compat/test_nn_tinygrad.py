"""tg.nn as tinygrad 0.9.1 programs (and PyTorch users) expect it, with torch as the oracle for the numbers:
`tg.nn.state`/`tg.nn.optim` reachable without importing them, optimizers that refuse to step outside training,
torch's LR schedulers, BatchNorm's running statistics over a training run, and the layers programs reach for
(Dropout, Sequential, MultiheadAttention, LSTMCell/LSTM) with torch's parameter names."""
import subprocess
import sys

import numpy as np
import pytest

from tg import Tensor

torch = pytest.importorskip("torch")


def _run(code: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


# ---------- reaching nn's submodules ----------

def test_nn_submodules_without_importing_them():
  """`tg.nn.state`, `tg.nn.optim` without importing them, as in tinygrad; and `import tg` alone doesn't load tg.nn
  (it is imported on first use, so the weight-file loaders don't slow every `import tg`)."""
  code = ("import sys, tg\n"
          "print('tg.nn' in sys.modules)\n"
          "l = tg.nn.Linear(2, 3)\n"
          "assert len(tg.nn.state.get_parameters(l)) == 2\n"
          "from tg import nn\n"
          "assert nn.optim.Adam is not None and nn.optim.SGD is not None\n"
          "print(sorted(nn.state.get_state_dict(l)))\n")
  r = _run(code)
  assert r.returncode == 0, r.stderr
  assert r.stdout.splitlines() == ["False", "['bias', 'weight']"]


def test_from_tg_import_nn_alone():
  r = _run("from tg import nn\nprint(len(nn.state.get_parameters(nn.Linear(2, 3))), nn.optim.AdamW.__name__)")
  assert r.returncode == 0, r.stderr
  assert r.stdout.split() == ["2", "AdamW"]


# ---------- optimizers step only in training ----------

def _one_grad():
  from tg.nn.optim import SGD
  w = Tensor([1.0, 2.0], requires_grad=True)
  opt = SGD([w], lr=0.1)
  (w * w).sum().backward()
  return w, opt


def test_step_outside_training_raises():
  w, opt = _one_grad()
  assert not Tensor.training
  with pytest.raises(AssertionError, match=r"Tensor\.training"):
    opt.step()
  np.testing.assert_allclose(w.numpy(), [1.0, 2.0])  # nothing happened


def test_step_inside_training_works():
  w, opt = _one_grad()
  with Tensor.train():
    opt.step()
  np.testing.assert_allclose(w.numpy(), [0.8, 1.6], rtol=1e-6)


def test_schedule_step_outside_training_raises():
  _, opt = _one_grad()
  with pytest.raises(RuntimeError, match=r"Tensor\.train\(\)"):
    opt.schedule_step()
