"""tg.nn as tinygrad 0.9.1 programs (and PyTorch users) expect it, with torch as the oracle for the numbers:
`tg.nn.state`/`tg.nn.optim` reachable without importing them, optimizers that refuse to step outside training,
torch's LR schedulers, BatchNorm's running statistics over a training run, Dropout, Sequential and ModuleList with
torch's state-dict names. MultiheadAttention and LSTMCell/LSTM are in test_nn_layers_torch.py."""
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


# ---------- LR schedulers, against torch.optim.lr_scheduler ----------

def _tg_sgd(lr, n=1):
  from tg.nn.optim import SGD
  return SGD([Tensor.zeros(2, requires_grad=True).contiguous().realize() for _ in range(n)], lr=lr)


def _torch_sgd(lr):
  return torch.optim.SGD([torch.zeros(2, requires_grad=True)], lr=lr)


SCHEDULES = {
  "step": ("StepLR", {"step_size": 7, "gamma": 0.5}, 0.1, 40),
  "multistep": ("MultiStepLR", {"milestones": [3, 10, 10, 25], "gamma": 0.3}, 0.2, 40),
  "cosine": ("CosineAnnealingLR", {"T_max": 12, "eta_min": 1e-3}, 0.05, 45),  # runs past T_max: the cosine goes back up
  "onecycle_cos": ("OneCycleLR", {"max_lr": 0.4, "total_steps": 50, "cycle_momentum": False}, 0.01, 49),
  "onecycle_linear_3phase": ("OneCycleLR", {"max_lr": 0.3, "epochs": 4, "steps_per_epoch": 10, "anneal_strategy": "linear",
                                            "three_phase": True, "pct_start": 0.25, "div_factor": 10.0, "cycle_momentum": False},
                             0.01, 39),
  "lambda": ("LambdaLR", {"lr_lambda": lambda e: 1.0 / (1 + e) ** 0.5}, 0.1, 30),
}


@pytest.mark.parametrize("name", SCHEDULES)
def test_scheduler_lr_sequence_matches_torch(name):
  from tg.nn import optim
  cls, kwargs, lr, steps = SCHEDULES[name]
  opt, popt = _tg_sgd(lr), _torch_sgd(lr)
  sched, psched = getattr(optim, cls)(opt, **kwargs), getattr(torch.optim.lr_scheduler, cls)(popt, **kwargs)
  got, want = [], []
  for _ in range(steps + 1):
    assert len(sched.get_last_lr()) == 1
    got.append((sched.get_last_lr()[0], float(opt.lr.numpy()[0])))
    want.append(psched.get_last_lr()[0])
    popt.step()
    psched.step()
    sched.step()
  np.testing.assert_allclose([g[0] for g in got], want, rtol=1e-6, atol=1e-12, err_msg="get_last_lr()")
  np.testing.assert_allclose([g[1] for g in got], want, rtol=1e-6, atol=1e-12, err_msg="the optimizer's lr tensor")
  ours, theirs = sched.state_dict(), psched.state_dict()
  for key in ("last_epoch", "_step_count", "base_lrs", "_last_lr"):
    np.testing.assert_allclose(ours[key], theirs[key], rtol=1e-6, err_msg=key)


def test_onecycle_past_total_steps_raises():
  from tg.nn.optim import OneCycleLR
  sched = OneCycleLR(_tg_sgd(0.1), max_lr=0.1, total_steps=3, cycle_momentum=False)
  for _ in range(3):
    sched.step()
  with pytest.raises(ValueError, match="total steps"):
    sched.step()


def test_scheduler_over_an_optimizer_group():
  """Each member of an OptimizerGroup is one of torch's param groups: one lr each, scheduled from its own base."""
  from tg.nn.optim import MultiStepLR, OptimizerGroup
  group = OptimizerGroup(_tg_sgd(0.1), _tg_sgd(0.02))
  popt = torch.optim.SGD([{"params": [torch.zeros(1, requires_grad=True)], "lr": 0.1},
                          {"params": [torch.zeros(1, requires_grad=True)], "lr": 0.02}])
  sched, psched = MultiStepLR(group, milestones=[2, 4], gamma=0.5), torch.optim.lr_scheduler.MultiStepLR(popt, milestones=[2, 4], gamma=0.5)
  for _ in range(6):
    popt.step()
    psched.step()
    sched.step()
    np.testing.assert_allclose(sched.get_last_lr(), psched.get_last_lr(), rtol=1e-6)
    np.testing.assert_allclose([group[0].lr.numpy()[0], group[1].lr.numpy()[0]], psched.get_last_lr(), rtol=1e-6)


def test_onecycle_momentum_is_not_cycled_and_says_so():
  from tg.nn.optim import OneCycleLR
  with pytest.warns(UserWarning, match="momentum"):
    sched = OneCycleLR(_tg_sgd(0.1), max_lr=0.1, total_steps=10)  # torch's default cycle_momentum=True
  assert sched.get_last_lr() == pytest.approx([0.1 / 25])
  with pytest.raises(ValueError, match="total_steps"):
    OneCycleLR(_tg_sgd(0.1), max_lr=0.1, cycle_momentum=False)


def test_scheduler_state_dict_resumes():
  """A scheduler rebuilt from state_dict() continues the sequence where the first one stopped."""
  from tg.nn.optim import CosineAnnealingLR
  opt = _tg_sgd(0.1)
  first = CosineAnnealingLR(opt, T_max=10)
  for _ in range(4):
    first.step()
  state = first.state_dict()
  second = CosineAnnealingLR(_tg_sgd(0.1), T_max=10)
  second.load_state_dict(state)
  popt = _torch_sgd(0.1)
  psched = torch.optim.lr_scheduler.CosineAnnealingLR(popt, T_max=10)
  for _ in range(4):
    popt.step()
    psched.step()
  for _ in range(8):
    popt.step()
    psched.step()
    first.step()
    second.step()
    np.testing.assert_allclose([first.get_last_lr()[0], second.get_last_lr()[0]], psched.get_last_lr()[0] * np.ones(2), rtol=1e-6)


PLATEAU = {
  "min_rel": ({}, None),
  "max_abs_cooldown": ({"mode": "max", "threshold_mode": "abs", "threshold": 0.05, "patience": 2, "cooldown": 3, "factor": 0.5}, None),
  "min_lr": ({"patience": 1, "factor": 0.2, "min_lr": 0.004}, None),
}


@pytest.mark.parametrize("name", PLATEAU)
def test_reduce_lr_on_plateau_matches_torch(name):
  from tg.nn.optim import ReduceLROnPlateau
  kwargs, _ = PLATEAU[name]
  opt, popt = _tg_sgd(0.1), _torch_sgd(0.1)
  sched, psched = ReduceLROnPlateau(opt, **kwargs), torch.optim.lr_scheduler.ReduceLROnPlateau(popt, **kwargs)
  rng = np.random.default_rng(1)
  # a noisy metric that improves, then stalls, then improves a little: hits patience, cooldown and min_lr
  metrics = np.concatenate([np.linspace(1, 0.5, 10), 0.5 + 0.02 * rng.standard_normal(40), np.linspace(0.49, 0.45, 10)])
  for i, m in enumerate(metrics):
    # a 0-d Tensor (from an array: a Python float would be a constant compiled into a kernel per value) or a float
    metric = Tensor(np.array(m, dtype=np.float32)) if i % 10 == 0 else float(m)
    popt.step()
    psched.step(float(np.float32(m)))
    sched.step(metric)
    np.testing.assert_allclose(sched.get_last_lr(), psched.get_last_lr(), rtol=1e-6, err_msg=f"step {i}")
    np.testing.assert_allclose(opt.lr.numpy(), psched.get_last_lr(), rtol=1e-6, err_msg=f"step {i}")
  ours, theirs = sched.state_dict(), psched.state_dict()
  for key in ("best", "num_bad_epochs", "cooldown_counter", "last_epoch", "_last_lr"):
    np.testing.assert_allclose(ours[key], theirs[key], rtol=1e-6, err_msg=key)


def test_scheduler_drives_a_jitted_step():
  """The scheduler writes the lr in place, so a TinyJit'd step replays with this step's lr, as torch's SGD does."""
  from tg import TinyJit
  from tg.nn.optim import SGD, StepLR
  w0 = np.array([1.0, -2.0, 3.0], dtype=np.float32)
  w = Tensor(w0, requires_grad=True).contiguous().realize()
  opt = SGD([w], lr=0.1, momentum=0.9)
  sched = StepLR(opt, step_size=2, gamma=0.5)

  @TinyJit
  def step():
    opt.zero_grad()
    loss = (w * w).sum()
    loss.backward()
    opt.step()
    return loss.realize()

  pw = torch.tensor(w0, requires_grad=True)
  popt = torch.optim.SGD([pw], lr=0.1, momentum=0.9)
  psched = torch.optim.lr_scheduler.StepLR(popt, step_size=2, gamma=0.5)
  with Tensor.train():
    for i in range(8):
      step()
      sched.step()
      popt.zero_grad()
      (pw * pw).sum().backward()
      popt.step()
      psched.step()
      np.testing.assert_allclose(w.numpy(), pw.detach().numpy(), rtol=1e-5, atol=1e-6, err_msg=f"step {i}")


# ---------- BatchNorm2d trained side by side with torch ----------

def _copy_from_torch(t_param) -> Tensor:
  return Tensor(t_param.detach().numpy().copy(), requires_grad=True)


def test_batchnorm2d_trains_like_torch():
  """conv -> BatchNorm2d -> relu -> linear, trained 20 SGD steps in tg and torch from the same weights:
  outputs, running statistics (unbiased variance, momentum 0.1) and weights stay equal, and eval mode agrees."""
  from tg import nn
  torch.manual_seed(0)
  tconv, tbn, tlin = torch.nn.Conv2d(2, 3, 3), torch.nn.BatchNorm2d(3), torch.nn.Linear(3 * 3 * 3, 4)
  with torch.no_grad():  # weight and bias away from 1 and 0, so the affine part is tested too
    tbn.weight.uniform_(0.5, 1.5)
    tbn.bias.uniform_(-0.5, 0.5)
  conv, bn, lin = nn.Conv2d(2, 3, 3), nn.BatchNorm2d(3), nn.Linear(3 * 3 * 3, 4)
  conv.weight, conv.bias = _copy_from_torch(tconv.weight), _copy_from_torch(tconv.bias)
  bn.weight, bn.bias = _copy_from_torch(tbn.weight), _copy_from_torch(tbn.bias)
  lin.weight, lin.bias = _copy_from_torch(tlin.weight), _copy_from_torch(tlin.bias)
  tparams = [tconv.weight, tconv.bias, tbn.weight, tbn.bias, tlin.weight, tlin.bias]
  params = [conv.weight, conv.bias, bn.weight, bn.bias, lin.weight, lin.bias]
  opt, topt = nn.optim.SGD(params, lr=0.1), torch.optim.SGD(tparams, lr=0.1)
  rng = np.random.default_rng(0)
  with Tensor.train():
    for i in range(20):
      x = rng.standard_normal((4, 2, 5, 5)).astype(np.float32) * 2 + 1  # mean and variance far from 0 and 1
      y = rng.integers(0, 4, 4)
      out = lin(bn(conv(Tensor(x))).relu().reshape(4, -1))
      tout = tlin(tbn(tconv(torch.tensor(x))).relu().reshape(4, -1))
      opt.zero_grad()
      out.sparse_categorical_crossentropy(Tensor(y.astype(np.int32))).backward()  # int32: WEBGPU has no int64
      opt.step()
      topt.zero_grad()
      torch.nn.functional.cross_entropy(tout, torch.tensor(y)).backward()
      topt.step()
      np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-5, atol=1e-5, err_msg=f"output at step {i}")
      np.testing.assert_allclose(bn.running_mean.numpy(), tbn.running_mean.numpy(), rtol=1e-5, atol=1e-5, err_msg=f"running_mean {i}")
      np.testing.assert_allclose(bn.running_var.numpy(), tbn.running_var.numpy(), rtol=1e-5, atol=1e-5, err_msg=f"running_var {i}")
  for name, p, tp in zip(["conv.w", "conv.b", "bn.w", "bn.b", "lin.w", "lin.b"], params, tparams):
    np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=1e-5, atol=1e-5, err_msg=name)
  assert int(bn.num_batches_tracked.numpy().reshape(-1)[0]) == int(tbn.num_batches_tracked) == 20
  tbn.eval()
  x = rng.standard_normal((2, 2, 5, 5)).astype(np.float32)
  np.testing.assert_allclose(bn(conv(Tensor(x))).numpy(), tbn(tconv(torch.tensor(x))).detach().numpy(), rtol=1e-5, atol=1e-5)


def test_batchnorm_state_dict_names_match_torch():
  from tg import nn
  from tg.nn.state import get_state_dict
  assert sorted(get_state_dict(nn.BatchNorm2d(3))) == sorted(torch.nn.BatchNorm2d(3).state_dict())


def test_batchnorm_without_tracking_as_tinygrad():
  """tinygrad's BatchNorm always has running statistics; track_running_stats=False only stops training from updating
  them, and eval normalizes with them (torch would use the batch's statistics: tinygrad programs rely on this)."""
  from tg import nn
  bn = nn.BatchNorm2d(2, track_running_stats=False)
  bn.running_mean, bn.running_var = Tensor([1.0, -1.0]), Tensor([4.0, 0.25])
  x = np.arange(16, dtype=np.float32).reshape(2, 2, 2, 2)
  want = (x - np.array([1.0, -1.0]).reshape(1, 2, 1, 1)) / np.sqrt(np.array([4.0, 0.25]) + 1e-5).reshape(1, 2, 1, 1)
  np.testing.assert_allclose(bn(Tensor(x)).numpy(), want, rtol=1e-5)
  with Tensor.train():
    bn(Tensor(x)).realize()
  np.testing.assert_allclose(bn.running_mean.numpy(), [1.0, -1.0])  # not updated


@pytest.mark.parametrize("shape", [(1, 3), (1, 3, 1), (1, 3, 1, 1)])
def test_batchnorm_one_value_per_channel_raises_when_training(shape):
  """torch refuses to train with one value per channel (its variance is 0: the output would be 0, or the bias); in
  eval, and with more than one value, it runs."""
  from tg import nn
  tbn, bn = torch.nn.BatchNorm1d(3) if len(shape) < 4 else torch.nn.BatchNorm2d(3), nn.BatchNorm(3)
  with pytest.raises(ValueError, match="more than 1 value per channel"):
    tbn(torch.ones(shape))
  with Tensor.train(), pytest.raises(ValueError, match="more than 1 value per channel"):
    bn(Tensor.ones(*shape))
  assert bn(Tensor.ones(*shape)).shape == shape  # eval: the running statistics
  with Tensor.train():
    assert bn(Tensor.ones(2, *shape[1:])).shape == (2, *shape[1:])


def test_batchnorm_empty_batch_keeps_running_stats():
  """Training on a batch of 0 samples: an empty output and the running statistics left as they are (torch); tg set
  them to NaN (the mean of nothing), silently breaking every later eval."""
  from tg import nn
  for shape in [(0, 3), (0, 3, 2, 2)]:
    tbn, bn = torch.nn.BatchNorm1d(3) if len(shape) < 4 else torch.nn.BatchNorm2d(3), nn.BatchNorm(3)
    with Tensor.train():
      out = bn(Tensor.zeros(*shape))
      assert out.shape == tuple(tbn(torch.zeros(shape)).shape) == shape
      out.realize()
    np.testing.assert_array_equal(bn.running_mean.numpy(), tbn.running_mean.numpy())
    np.testing.assert_array_equal(bn.running_var.numpy(), tbn.running_var.numpy())
    assert int(bn.num_batches_tracked.numpy().reshape(-1)[0]) == int(tbn.num_batches_tracked) == 1


def test_batchnorm_momentum_none_is_a_cumulative_average():
  """torch's momentum=None: the running statistics are the plain average over the batches seen (factor 1/n for the
  n-th batch); tg raised TypeError int - NoneType."""
  from tg import nn
  tbn, bn = torch.nn.BatchNorm1d(3, momentum=None), nn.BatchNorm(3, momentum=None)
  rng = np.random.default_rng(0)
  with Tensor.train():
    for _ in range(3):
      x = rng.standard_normal((5, 3)).astype(np.float32) * 3 + 2
      np.testing.assert_allclose(bn(Tensor(x)).numpy(), tbn(torch.tensor(x)).detach().numpy(), rtol=1e-5, atol=1e-5)
      np.testing.assert_allclose(bn.running_mean.numpy(), tbn.running_mean.numpy(), rtol=1e-5, atol=1e-5)
      np.testing.assert_allclose(bn.running_var.numpy(), tbn.running_var.numpy(), rtol=1e-5, atol=1e-5)


def test_layers_with_zero_input_features():
  """Linear(0, 4), Conv2d(0, ...) and the init helpers on a zero-element shape: torch makes them (its bias bound is 0
  where fan_in is 0) and Linear(0, 4) gives the bias for every row; tg raised ZeroDivisionError."""
  from tg import nn
  lin = nn.Linear(0, 4)
  np.testing.assert_array_equal(lin.bias.numpy(), np.zeros(4, np.float32))
  np.testing.assert_array_equal(torch.nn.Linear(0, 4).bias.detach().numpy(), np.zeros(4, np.float32))
  np.testing.assert_array_equal(lin(Tensor.ones(2, 0)).numpy(), np.zeros((2, 4), np.float32))
  assert nn.Conv2d(0, 2, 3).weight.shape == (2, 0, 3, 3)
  for f in (Tensor.kaiming_uniform, Tensor.kaiming_normal, Tensor.glorot_uniform):
    assert f(4, 0).shape == (4, 0) and f(0, 0).shape == (0, 0)


# ---------- layers: Dropout, Sequential, ModuleList (MultiheadAttention and LSTM: test_nn_layers_torch.py) ----------

def test_dropout_respects_training():
  from tg import nn
  x = Tensor.ones(64, 64)
  d = nn.Dropout(0.25)
  np.testing.assert_equal(d(x).numpy(), np.ones((64, 64), np.float32))  # eval: identity
  with Tensor.train():
    y = d(x).numpy()
  kept = y != 0
  assert 0.65 < kept.mean() < 0.85
  np.testing.assert_allclose(y[kept], 1 / 0.75, rtol=1e-6)
  assert nn.state.get_state_dict(d) == {}
  with pytest.raises(ValueError):
    nn.Dropout(1.5)


def test_sequential_and_module_list():
  from tg import nn
  from tg.nn.state import get_state_dict
  seq = nn.Sequential(nn.Linear(4, 8), Tensor.relu, nn.Linear(8, 3))
  tseq = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
  assert sorted(get_state_dict(seq)) == sorted(tseq.state_dict())
  assert len(seq) == 3 and seq[-1] is seq[2] and isinstance(seq[:2], nn.Sequential) and len(seq[:2]) == 2
  for name, tp in zip(get_state_dict(seq), tseq.state_dict().values()):
    setattr(seq[int(name.split(".")[0])], name.split(".")[1], Tensor(tp.numpy()))
  x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
  np.testing.assert_allclose(seq(Tensor(x)).numpy(), tseq(torch.tensor(x)).detach().numpy(), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(seq[:1](Tensor(x)).numpy(), tseq[:1](torch.tensor(x)).detach().numpy(), rtol=1e-5, atol=1e-6)

  class Net:  # a plain list or a ModuleList: both give torch's names
    def __init__(self):
      self.layers = nn.ModuleList([nn.Linear(2, 2) for _ in range(2)])
      self.heads = [nn.Linear(2, 1)]

  class TNet(torch.nn.Module):
    def __init__(self):
      super().__init__()
      self.layers = torch.nn.ModuleList([torch.nn.Linear(2, 2) for _ in range(2)])
      self.heads = torch.nn.ModuleList([torch.nn.Linear(2, 1)])

  net = Net()
  net.layers.append(nn.Linear(2, 2))
  tnet = TNet()
  tnet.layers.append(torch.nn.Linear(2, 2))
  assert list(get_state_dict(net)) == list(tnet.state_dict())
  assert len(nn.state.get_parameters(net)) == 8
