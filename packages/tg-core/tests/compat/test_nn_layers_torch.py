"""tg.nn.MultiheadAttention, LSTMCell and LSTM against torch's, with weights copied from torch by torch's parameter
names: outputs, returned attention weights and states, and gradients of inputs and every parameter, to 1e-5.

Few cases, each covering several options: each case compiles its own kernels, and compiling dominates the time."""
import numpy as np
import pytest

from tg import Tensor

torch = pytest.importorskip("torch")


def _mha_pair(E, H, bias=True, batch_first=False, dropout=0.0):
  from tg import nn
  torch.manual_seed(1)
  tm = torch.nn.MultiheadAttention(E, H, bias=bias, batch_first=batch_first, dropout=dropout)
  with torch.no_grad():
    if bias:  # torch starts these at zero: random values test that they are added where they belong
      tm.in_proj_bias.uniform_(-0.5, 0.5)
      tm.out_proj.bias.uniform_(-0.5, 0.5)
  m = nn.MultiheadAttention(E, H, bias=bias, batch_first=batch_first, dropout=dropout)
  names = sorted(nn.state.get_state_dict(m))
  assert names == sorted(tm.state_dict()), names
  for name, tp in tm.state_dict().items():
    obj = m.out_proj if name.startswith("out_proj.") else m
    setattr(obj, name.split(".")[-1], Tensor(tp.numpy().copy(), requires_grad=True))
  return m, tm


MHA_CASES = {
  "self_seq_first_padding_mask": {"key_padding_mask": True},
  "batch_first_cross_float_3d_mask_per_head": {"batch_first": True, "cross": True, "attn_mask": "float3d", "average_attn_weights": False},
  "bool_mask_no_bias_no_weights": {"attn_mask": "bool", "cross": True, "bias": False, "need_weights": False},
  "unbatched": {"unbatched": True, "cross": True},
}


@pytest.mark.parametrize("name", MHA_CASES)
def test_multihead_attention_matches_torch(name):
  case = dict(MHA_CASES[name])
  E, H, L, S, N = 8, 2, 3, 4, 2
  batch_first = case.get("batch_first", False)
  m, tm = _mha_pair(E, H, bias=case.get("bias", True), batch_first=batch_first)
  rng = np.random.default_rng(2)
  cross = case.get("cross", False)
  shape = (lambda n: (n, E)) if case.get("unbatched") else (lambda n: (N, n, E) if batch_first else (n, N, E))
  q = rng.standard_normal(shape(L)).astype(np.float32)
  k = rng.standard_normal(shape(S if cross else L)).astype(np.float32) if cross else q
  v = rng.standard_normal(shape(S if cross else L)).astype(np.float32) if cross else q
  s = S if cross else L
  kwargs, tkwargs = {}, {}
  if case.get("key_padding_mask"):
    kpm = np.zeros((N, s), bool)
    kpm[0, -1] = kpm[1, 0] = True
    kwargs["key_padding_mask"], tkwargs["key_padding_mask"] = Tensor(kpm), torch.tensor(kpm)
  if case.get("attn_mask") == "bool":
    am = np.triu(np.ones((L, s), bool), 1)
    kwargs["attn_mask"], tkwargs["attn_mask"] = Tensor(am), torch.tensor(am)
  if case.get("attn_mask") == "float3d":
    am = rng.standard_normal((N * H, L, s)).astype(np.float32)
    kwargs["attn_mask"], tkwargs["attn_mask"] = Tensor(am), torch.tensor(am)
  for key in ("need_weights", "average_attn_weights"):
    if key in case:
      kwargs[key] = tkwargs[key] = case[key]
  tq = torch.tensor(q, requires_grad=True)
  tk, tv = (torch.tensor(k, requires_grad=True), torch.tensor(v, requires_grad=True)) if cross else (tq, tq)
  tout, tw = tm(tq, tk, tv, **tkwargs)
  xq = Tensor(q, requires_grad=True)
  xk, xv = (Tensor(k, requires_grad=True), Tensor(v, requires_grad=True)) if cross else (xq, xq)
  out, w = m(xq, xk, xv, **kwargs)
  np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-5, atol=1e-5)
  if tw is None:
    assert w is None
  else:
    np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-5)
  g = rng.standard_normal(out.shape).astype(np.float32)
  (out * Tensor(g)).sum().backward()
  (tout * torch.tensor(g)).sum().backward()
  np.testing.assert_allclose(xq.grad.numpy(), tq.grad.numpy(), rtol=1e-5, atol=1e-5, err_msg="query grad")
  if cross:
    np.testing.assert_allclose(xk.grad.numpy(), tk.grad.numpy(), rtol=1e-5, atol=1e-5, err_msg="key grad")
    np.testing.assert_allclose(xv.grad.numpy(), tv.grad.numpy(), rtol=1e-5, atol=1e-5, err_msg="value grad")
  for pname, tp in tm.named_parameters():
    p = m.out_proj if pname.startswith("out_proj.") else m
    np.testing.assert_allclose(getattr(p, pname.split(".")[-1]).grad.numpy(), tp.grad.numpy(), rtol=1e-5, atol=1e-5, err_msg=pname)


def test_multihead_attention_is_causal_without_mask():
  m, tm = _mha_pair(8, 2)
  x = np.random.default_rng(4).standard_normal((3, 2, 8)).astype(np.float32)
  causal = torch.triu(torch.ones(3, 3, dtype=torch.bool), 1)
  out, w = m(Tensor(x), Tensor(x), Tensor(x), is_causal=True)
  tout, tw = tm(*(torch.tensor(x),) * 3, attn_mask=causal, is_causal=True)
  np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-5)


def test_multihead_attention_dropout_only_in_training():
  m, tm = _mha_pair(8, 2, dropout=0.5)
  tm.eval()
  x = np.random.default_rng(3).standard_normal((3, 2, 8)).astype(np.float32)
  np.testing.assert_allclose(m(Tensor(x), Tensor(x), Tensor(x))[0].numpy(), tm(*(torch.tensor(x),) * 3)[0].detach().numpy(), rtol=1e-5,
                             atol=1e-5)
  with Tensor.train():
    _, w = m(Tensor(x), Tensor(x), Tensor(x), average_attn_weights=False)
    assert (w.numpy() == 0).mean() > 0.2  # weights dropped (and the rest scaled by 2), as torch's training mode


def _copy_rnn(m, tm):
  for name, tp in tm.state_dict().items():
    setattr(m, name, Tensor(tp.numpy().copy(), requires_grad=True))


def _check_grads(m, tm):
  for name, tp in tm.named_parameters():
    np.testing.assert_allclose(getattr(m, name).grad.numpy(), tp.grad.numpy(), rtol=1e-5, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("with_state,bias,batched", [(False, True, True), (True, False, False)])
def test_lstm_cell_matches_torch(with_state, bias, batched):
  from tg import nn
  tm = torch.nn.LSTMCell(5, 4, bias=bias)
  m = nn.LSTMCell(5, 4, bias=bias)
  assert sorted(nn.state.get_state_dict(m)) == sorted(tm.state_dict())
  _copy_rnn(m, tm)
  rng = np.random.default_rng(4)
  lead = (3,) if batched else ()
  x, h, c = (rng.standard_normal(lead + (n,)).astype(np.float32) for n in (5, 4, 4))
  tx = torch.tensor(x, requires_grad=True)
  th, tc = tm(tx, (torch.tensor(h), torch.tensor(c)) if with_state else None)
  xx = Tensor(x, requires_grad=True)
  hh, cc = m(xx, (Tensor(h), Tensor(c)) if with_state else None)
  np.testing.assert_allclose(hh.numpy(), th.detach().numpy(), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(cc.numpy(), tc.detach().numpy(), rtol=1e-5, atol=1e-5)
  (hh.sum() + (cc * cc).sum()).backward()
  (th.sum() + (tc * tc).sum()).backward()
  np.testing.assert_allclose(xx.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-5)
  _check_grads(m, tm)


LSTM_CASES = {
  "two_layers_batch_first_state": {"num_layers": 2, "batch_first": True, "state": True},
  "unbatched_bidirectional_no_bias": {"unbatched": True, "bias": False, "bidirectional": True},
}


@pytest.mark.parametrize("name", LSTM_CASES)
def test_lstm_matches_torch(name):
  from tg import nn
  case = LSTM_CASES[name]
  layers, bf = case.get("num_layers", 1), case.get("batch_first", False)
  layers, bidir = case.get("num_layers", 1), case.get("bidirectional", False)
  tm = torch.nn.LSTM(3, 4, num_layers=layers, bias=case.get("bias", True), batch_first=bf, bidirectional=bidir)
  m = nn.LSTM(3, 4, num_layers=layers, bias=case.get("bias", True), batch_first=bf, bidirectional=bidir)
  assert sorted(nn.state.get_state_dict(m)) == sorted(tm.state_dict())
  _copy_rnn(m, tm)
  rng = np.random.default_rng(5)
  T, N = 3, 2
  xshape = (T, 3) if case.get("unbatched") else ((N, T, 3) if bf else (T, N, 3))
  sshape = (layers * (2 if bidir else 1), 4) if case.get("unbatched") else (layers * (2 if bidir else 1), N, 4)
  x = rng.standard_normal(xshape).astype(np.float32)
  h0, c0 = rng.standard_normal(sshape).astype(np.float32), rng.standard_normal(sshape).astype(np.float32)
  tx = torch.tensor(x, requires_grad=True)
  tout, (th, tc) = tm(tx, (torch.tensor(h0), torch.tensor(c0)) if case.get("state") else None)
  xx = Tensor(x, requires_grad=True)
  out, (h, c) = m(xx, (Tensor(h0), Tensor(c0)) if case.get("state") else None)
  for got, want, what in ((out, tout, "output"), (h, th, "h_n"), (c, tc, "c_n")):
    assert got.shape == tuple(want.shape), what
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-5, err_msg=what)
  g = rng.standard_normal(tout.shape).astype(np.float32)
  ((out * Tensor(g)).sum() + c.sum()).backward()
  ((tout * torch.tensor(g)).sum() + tc.sum()).backward()
  np.testing.assert_allclose(xx.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-5)
  _check_grads(m, tm)
