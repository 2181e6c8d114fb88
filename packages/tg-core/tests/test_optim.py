"""Optimizers against torch.optim (SGD, Adam, AdamW) and against numpy versions of the same formulas (LAMB, LARS).

Every test builds the same tiny model from one numpy init, takes a few steps and compares parameters after each
step, so an error in the state carried between steps (momentum, moments, bias correction) shows up too."""
import numpy as np
import pytest

from tg import Tensor
from tg.engine import realize as realize_mod
from tg.nn.optim import LAMB, LARS, SGD, Adam, AdamW, Optimizer, OptimizerGroup

ATOL, RTOL = 1e-5, 1e-4
STEPS = 5


@pytest.fixture(autouse=True)
def training():
  """Optimizers step only in training mode, as tinygrad's (tests/compat/test_nn_tinygrad.py checks the refusal)."""
  with Tensor.train():
    yield


@pytest.fixture
def torch():
  return pytest.importorskip("torch")


def _init(seed=0):
  rng = np.random.default_rng(seed)
  x = rng.uniform(-1, 1, (5, 4)).astype(np.float32)
  w = rng.uniform(-1, 1, (4, 3)).astype(np.float32)
  b = rng.uniform(-1, 1, (3,)).astype(np.float32)
  return x, w, b


def _tg_loss(x, w, b):
  return ((x @ w + b).relu() ** 2).sum()


def _tg_params(w, b):
  return Tensor(w, requires_grad=True), Tensor(b, requires_grad=True)


def _tg_step(opt, x, w, b):
  opt.zero_grad()
  _tg_loss(x, w, b).backward()
  opt.step()


def _grads(x, w, b):
  """Gradients of sum(relu(x @ w + b)^2) in numpy, for the numpy reference optimizers."""
  z = x @ w + b
  dz = 2 * np.maximum(z, 0)
  return x.T @ dz, dz.sum(axis=0)


def _run_vs_torch(torch, make_tg, make_torch, lr_change=None):
  """Take STEPS steps in tg and torch from the same init, comparing parameters after each. lr_change=(step, lr)
  sets a new learning rate before that step, through `opt.lr.assign` in tg and the param group in torch."""
  x, w, b = _init()
  tw, tb = _tg_params(w, b)
  opt = make_tg([tw, tb])
  xt = Tensor(x)
  pw, pb = torch.tensor(w, requires_grad=True), torch.tensor(b, requires_grad=True)
  popt = make_torch([pw, pb])
  px = torch.tensor(x)
  for step in range(STEPS):
    if lr_change is not None and step == lr_change[0]:
      opt.lr.assign(Tensor([lr_change[1]]))
      for group in popt.param_groups:
        group["lr"] = lr_change[1]
    _tg_step(opt, xt, tw, tb)
    popt.zero_grad()
    ((px @ pw + pb).relu() ** 2).sum().backward()
    popt.step()
    np.testing.assert_allclose(tw.numpy(), pw.detach().numpy(), atol=ATOL, rtol=RTOL, err_msg=f"w after step {step + 1}")
    np.testing.assert_allclose(tb.numpy(), pb.detach().numpy(), atol=ATOL, rtol=RTOL, err_msg=f"b after step {step + 1}")


SGD_CASES = {
  "plain": {},
  "momentum": {"momentum": 0.9},
  "nesterov": {"momentum": 0.9, "nesterov": True},
  "weight_decay": {"momentum": 0.5, "weight_decay": 0.1},
  # with a constant lr, lr-before-momentum gives the same steps as torch's lr-after-momentum
  "classic": {"momentum": 0.9, "classic": True, "weight_decay": 0.1},
}


@pytest.mark.parametrize("case", list(SGD_CASES))
def test_sgd_matches_torch(torch, case):
  kw = SGD_CASES[case]
  torch_kw = {k: v for k, v in kw.items() if k != "classic"}
  _run_vs_torch(torch, lambda ps: SGD(ps, lr=0.01, **kw), lambda ps: torch.optim.SGD(ps, lr=0.01, **torch_kw))


def test_adam_matches_torch(torch):
  _run_vs_torch(torch, lambda ps: Adam(ps, lr=0.01), lambda ps: torch.optim.Adam(ps, lr=0.01))


def test_adam_l2_weight_decay_matches_torch(torch):
  _run_vs_torch(torch, lambda ps: Adam(ps, lr=0.01, weight_decay=0.1), lambda ps: torch.optim.Adam(ps, lr=0.01, weight_decay=0.1))


def test_adamw_matches_torch(torch):
  _run_vs_torch(torch, lambda ps: AdamW(ps, lr=0.01, weight_decay=0.1), lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1))


def test_defaults_match_torch(torch):
  """tinygrad's and torch's defaults agree for these, so the default-constructed optimizers should too."""
  _run_vs_torch(torch, lambda ps: AdamW(ps), lambda ps: torch.optim.AdamW(ps))
  _run_vs_torch(torch, lambda ps: SGD(ps, momentum=0.9), lambda ps: torch.optim.SGD(ps, lr=0.001, momentum=0.9))


def test_lr_change_takes_effect(torch):
  _run_vs_torch(torch, lambda ps: SGD(ps, lr=0.01, momentum=0.9), lambda ps: torch.optim.SGD(ps, lr=0.01, momentum=0.9), lr_change=(2, 0.05))
  _run_vs_torch(torch, lambda ps: Adam(ps, lr=0.01), lambda ps: torch.optim.Adam(ps, lr=0.01), lr_change=(3, 0.001))


def _np_lars(lr, momentum, wd, nesterov, classic, tcoef, lrs=None):
  """LARS as documented in tg.nn.optim.LARS, in float64 numpy; lrs optionally gives the lr of each step."""
  x, w, b = (a.astype(np.float64) for a in _init())
  params, bufs, out = [w, b], [np.zeros_like(w), np.zeros_like(b)], []
  for step in range(STEPS):
    step_lr = lr if lrs is None else lrs[step]
    grads = _grads(x, *params)
    for i, (p, g) in enumerate(zip(params, grads)):
      wn, gn = np.linalg.norm(p), np.linalg.norm(g)
      r = tcoef * wn / (gn + wd * wn) if tcoef and wn > 0 and gn > 0 else 1.0
      g = g + wd * p
      if classic:
        g = g * r * step_lr
      if momentum:
        bufs[i] = momentum * bufs[i] + g
        g = g + momentum * bufs[i] if nesterov else bufs[i]
      if not classic:
        g = g * r * step_lr
      params[i] = p - g
    out.append([p.copy() for p in params])
  return out


def _np_lamb(lr, b1, b2, eps, wd, adam):
  """LAMB as documented in tg.nn.optim.LAMB, in float64 numpy."""
  x, w, b = (a.astype(np.float64) for a in _init())
  params, m, v, out = [w, b], [np.zeros_like(w), np.zeros_like(b)], [np.zeros_like(w), np.zeros_like(b)], []
  for t in range(1, STEPS + 1):
    grads = _grads(x, *params)
    for i, (p, g) in enumerate(zip(params, grads)):
      m[i] = b1 * m[i] + (1 - b1) * g
      v[i] = b2 * v[i] + (1 - b2) * g * g
      up = (m[i] / (1 - b1 ** t)) / (np.sqrt(v[i] / (1 - b2 ** t)) + eps) + wd * p
      wn, un = np.linalg.norm(p), np.linalg.norm(up)
      r = wn / un if not adam and wn > 0 and un > 0 else 1.0
      params[i] = p - lr * r * up
    out.append([p.copy() for p in params])
  return out


def _run_vs_numpy(opt_cls, kw, expected, lrs=None):
  x, w, b = _init()
  tw, tb = _tg_params(w, b)
  opt = opt_cls([tw, tb], **kw)
  xt = Tensor(x)
  for step, (ew, eb) in enumerate(expected):
    if lrs is not None:
      opt.lr.assign(Tensor([lrs[step]]))
    _tg_step(opt, xt, tw, tb)
    np.testing.assert_allclose(tw.numpy(), ew, atol=ATOL, rtol=RTOL, err_msg=f"w after step {step + 1}")
    np.testing.assert_allclose(tb.numpy(), eb, atol=ATOL, rtol=RTOL, err_msg=f"b after step {step + 1}")


@pytest.mark.parametrize("kw", [{}, {"wd": 0.01, "adam": True}, {"wd": 0.1, "eps": 1e-8}], ids=["default", "adam", "wd"])
def test_lamb_matches_numpy(kw):
  args = {"lr": 0.01, "b1": 0.9, "b2": 0.999, "eps": 1e-6, "wd": 0.0, "adam": False, **kw}
  expected = _np_lamb(**args)
  _run_vs_numpy(LAMB, {"lr": 0.01, "eps": args["eps"], "weight_decay": args["wd"], "adam": args["adam"]}, expected)


def test_lamb_adam_flag_is_adamw():
  x, w, b = _init()
  a, c = _tg_params(w, b), _tg_params(w, b)
  o1, o2 = LAMB(list(a), lr=0.01, eps=1e-8, weight_decay=0.01, adam=True), AdamW(list(c), lr=0.01)
  for _ in range(2):
    _tg_step(o1, Tensor(x), *a)
    _tg_step(o2, Tensor(x), *c)
  np.testing.assert_allclose(a[0].numpy(), c[0].numpy(), atol=1e-7)


LARS_CASES = {
  "default": {},
  "sgd_style": {"classic": False, "momentum": 0.5, "weight_decay": 0.01},
  "nesterov": {"nesterov": True, "tcoef": 0.01},
  "big_weight_decay": {"weight_decay": 0.5, "tcoef": 0.05},
  "no_momentum": {"momentum": 0.0, "tcoef": 0.02},
}


@pytest.mark.parametrize("case", list(LARS_CASES))
def test_lars_matches_numpy(case):
  args = {"lr": 0.1, "momentum": 0.9, "wd": 1e-4, "nesterov": False, "classic": True, "tcoef": 0.001}
  args.update({("wd" if k == "weight_decay" else k): v for k, v in LARS_CASES[case].items()})
  expected = _np_lars(**args)
  _run_vs_numpy(LARS, {("weight_decay" if k == "wd" else k): v for k, v in args.items()}, expected)


@pytest.mark.parametrize("classic", [True, False])
def test_classic_flag_differs_after_lr_change(classic):
  """classic folds each step's lr into the momentum buffer; torch-style scales the whole buffer by the current lr."""
  lrs = [0.01, 0.01, 0.05, 0.05, 0.002]
  kw = {"lr": 0.01, "momentum": 0.9, "wd": 0.0, "nesterov": False, "classic": classic, "tcoef": 0.0}
  expected = _np_lars(**kw, lrs=lrs)
  _run_vs_numpy(SGD, {"lr": 0.01, "momentum": 0.9, "classic": classic}, expected, lrs=lrs)
  other = _np_lars(**{**kw, "classic": not classic}, lrs=lrs)
  assert not np.allclose(expected[-1][0], other[-1][0], atol=ATOL, rtol=RTOL)


def test_trust_ratio_is_one_for_zero_weights():
  """A zero weight tensor has ||w|| = 0: the trust ratio falls back to 1 instead of freezing the layer at 0."""
  x, w, b = _init()
  tw, tb = _tg_params(w, np.zeros_like(b))
  opt = LAMB([tw, tb], lr=0.01)
  _tg_step(opt, Tensor(x), tw, tb)
  nb = tb.numpy()
  assert np.all(np.isfinite(nb)) and np.any(nb != 0)
  opt2 = LARS([p := Tensor(np.zeros(3, np.float32), requires_grad=True)], lr=0.1, momentum=0.0, weight_decay=0.0)
  (p * Tensor([1.0, 2.0, 3.0])).sum().backward()
  opt2.step()
  np.testing.assert_allclose(p.numpy(), [-0.1, -0.2, -0.3], atol=ATOL, rtol=RTOL)


def test_step_without_backward_raises():
  x, w, b = _init()
  tw, tb = _tg_params(w, b)
  opt = Adam([tw, tb])
  with pytest.raises(RuntimeError, match="backward"):
    opt.step()
  (Tensor(x) @ tw).sum().backward()  # b gets no gradient
  with pytest.raises(RuntimeError, match=r"\[1\]"):
    opt.step()
  np.testing.assert_array_equal(tw.numpy(), w)  # a failed step changes nothing


def test_params_and_buffers():
  a, b = Tensor([1.0, 2.0]), Tensor([3.0], requires_grad=False)
  opt = SGD([a, b, a], lr=0.1)
  assert a.requires_grad is True
  assert len(opt.params) == 1 and opt.params[0] is a  # listed twice, updated once
  assert len(opt.buffers) == 1 and opt.buffers[0] is b
  with pytest.raises(ValueError):
    SGD([b])


def test_integer_tensor_given_as_a_param_is_a_buffer():
  # an integer tensor can't require grad (as torch): one handed over with the rest (a step counter) stays a buffer
  w, steps = Tensor([1.0, 2.0]), Tensor([0])
  opt = SGD([w, steps], lr=0.1)
  assert steps.requires_grad is None and opt.params == [w] and opt.buffers == [steps]


def test_in_place_one_realize_and_no_recompile(monkeypatch):
  """Parameters keep their identity, a step is one realize_all call, and later steps (lr change included) reuse
  the kernels of the first, since lr and the bias-correction powers are buffers rather than constants."""
  x, w, b = _init()
  tw, tb = _tg_params(w, b)
  opt = Adam([tw, tb], lr=0.01)
  xt = Tensor(x)
  calls = []
  real = Tensor.realize_all
  monkeypatch.setattr(Tensor, "realize_all", staticmethod(lambda *ts: (calls.append(len(ts)), real(*ts))[1]))
  ids = (id(tw), id(tb), id(tw.lazydata))
  _tg_step(opt, xt, tw, tb)
  assert len(calls) == 1 and id(tw) == ids[0] and id(tb) == ids[1] and id(tw.lazydata) != ids[2]
  assert all(t.lazydata.base.realized is not None for t in [tw, tb, opt.b1_t, opt.b2_t, *opt.m, *opt.v])
  opt.lr.assign(Tensor([0.001])).realize()  # (its own copy kernel may be new: a GPU copies the value device to device)
  n_kernels = len(realize_mod.method_cache)
  for _ in range(2):
    _tg_step(opt, xt, tw, tb)
  assert len(realize_mod.method_cache) == n_kernels


def test_optimizer_group_steps_all():
  x, w, b = _init()
  tw, tb = _tg_params(w, b)
  g = OptimizerGroup(SGD([tw], lr=0.1), Adam([tb], lr=0.01))
  assert not hasattr(g, "lr") and g[0].lr is not g[1].lr
  _tg_step(g, Tensor(x), tw, tb)
  assert tw.grad is not None and tb.grad is not None
  gw, gb = _grads(x, w, b)
  np.testing.assert_allclose(tw.numpy(), w - 0.1 * gw, atol=ATOL, rtol=RTOL)
  np.testing.assert_allclose(tb.numpy(), b - 0.01 * np.sign(gb), atol=1e-4)  # Adam's first step is lr * sign(g)
  g.zero_grad()
  assert tw.grad is None and tb.grad is None


def test_scalar_and_2d_params():
  """A 0-d parameter stays 0-d (lr is (1,), but must not broadcast the update to (1,))."""
  s = Tensor(2.0, requires_grad=True)
  for opt in [SGD([s], lr=0.1, momentum=0.9), LAMB([s], lr=0.1), LARS([s], lr=0.1)]:
    opt.zero_grad()
    (s * s).sum().backward()
    opt.step()
    assert s.shape == ()
  assert isinstance(SGD([s]), Optimizer) and isinstance(s.item(), float)
