"""Worker for test_mpi.py: every collective checked against numpy on each rank; prints "rank R of P: ok" at the end.

  python collectives.py            # alone: a world of one, every collective the identity
  mpirun -n 2 python collectives.py [--block] [--copy]

--block: collectives wait in MPI's blocking calls (init(poll=False)) instead of polling nonblocking ones; --copy: as a
device whose buffers aren't host memory (copied out to host and back in), whatever the device.
"""
from __future__ import annotations

import argparse

import numpy as np

import tg.distributed as dist
from tg import Tensor, dtypes
from tg.distributed import host
from tg.nn import BatchNorm2d, Conv2d, Linear
from tg.nn.optim import Adam
from tg.nn.state import get_parameters

parser = argparse.ArgumentParser()
parser.add_argument("--block", action="store_true")
parser.add_argument("--copy", action="store_true")
args = parser.parse_args()
if args.copy:
  host.host_memory = lambda buf: None  # type: ignore[assignment]

dist.init(poll=not args.block)
r, P = dist.rank, dist.world_size
ranks = np.arange(P)
total = int(ranks.sum())


def check(name: str, got: Tensor, want: np.ndarray) -> None:
  g = got.numpy()
  assert g.shape == want.shape and g.dtype == want.dtype, f"{name}: {g.shape} {g.dtype} != {want.shape} {want.dtype}"
  assert np.array_equal(g, want), f"rank {r}: {name}: {g} != {want}"


# all_reduce: every op on float32 and int32, each rank a different value
base = np.array([[1, -2, 3], [4, 5, -6]], dtype=np.float32)
mine = lambda k: (base * (k + 1) + k).astype(np.float32)
everyone = np.stack([mine(k) for k in ranks])
for dt, npdt in ((dtypes.float32, np.float32), (dtypes.int32, np.int32)):
  for op, fn in (("sum", np.sum), ("max", np.max), ("min", np.min)):
    check(f"all_reduce {op} {dt}", dist.all_reduce(Tensor(mine(r).astype(npdt), dtype=dt), op), fn(everyone, axis=0).astype(npdt))
check("all_reduce mean", dist.all_reduce(Tensor(mine(r)), "mean"), (everyone.sum(axis=0) / P).astype(np.float32))

# the other dtypes: int64, float16 and bfloat16 (reduced in float32), bool (sum/max: or, min: and)
check("all_reduce int64", dist.all_reduce(Tensor(np.array([2**40 + r], dtype=np.int64))), np.array([sum(2**40 + k for k in ranks)], dtype=np.int64))
check("all_reduce float16", dist.all_reduce(Tensor(np.array([0.5, r], dtype=np.float16))), np.array([0.5 * P, total], dtype=np.float16))
bf = dist.all_reduce(Tensor([1.5, r], dtype=dtypes.bfloat16), "max")
assert bf.dtype == dtypes.bfloat16 and bf.numpy().tolist() == [1.5, P - 1], bf.numpy()
flags = [r == 0, True, False]
check("all_reduce bool sum", dist.all_reduce(Tensor(flags), "sum"), np.array([True, True, False]))
check("all_reduce bool min", dist.all_reduce(Tensor(flags), "min"), np.array([P == 1, True, False]))

# in place: the same tensor object and buffer, the new value; a lazy value built from the old value keeps it
t = Tensor(mine(r)).realize()
buffer = t.lazydata.base.buffer
old_times_10 = t * 10
assert dist.all_reduce(t) is t
assert t.lazydata.base.buffer is buffer, "all_reduce gave the tensor another buffer"
check("in place", t, everyone.sum(axis=0))
check("lazy value of the old", old_times_10, mine(r) * 10)
# an unrealized tensor, and a slice (which writes through into the tensor it was cut from, as an assign does)
check("unrealized", dist.all_reduce(Tensor(mine(r)) * 2), everyone.sum(axis=0) * 2)
whole = Tensor(np.arange(6, dtype=np.float32) + r).realize()
part = whole[2:5]
dist.all_reduce(part)
check("slice", part, (np.arange(2, 5) * P + total).astype(np.float32))
check("slice's tensor", whole, np.concatenate([np.arange(2) + r, np.arange(2, 5) * P + total, [5 + r]]).astype(np.float32))

# broadcast from each rank, all_gather
for root in ranks:
  b = Tensor(mine(r))
  assert dist.broadcast(b, int(root)) is b
  check(f"broadcast from {root}", b, mine(root))
check("all_gather", dist.all_gather(Tensor(mine(r).astype(np.int32))), everyone.astype(np.int32))
assert dist.all_gather_object(("rank", r)) == [("rank", k) for k in ranks]
assert dist.all_reduce_metric(float(r), "max") == P - 1

# gradients: bucketed and one call per parameter agree, and a DistributedOptimizer leaves every rank the same weights
Tensor.manual_seed(r)  # different initial weights on every rank: broadcast_parameters must make them equal
# a BatchNorm's weight is an unrealized constant until trained, and its running statistics are buffers the
# DistributedOptimizer takes from rank 0 after each step
model = [lambda x: x.reshape(2, 1, 1, 3), Conv2d(1, 2, (1, 2)), BatchNorm2d(2), lambda x: x.flatten(1), Linear(4, 3)]
dist.broadcast_parameters(model)
x = Tensor(mine(r))
params = get_parameters(model)
opt = dist.DistributedOptimizer(Adam(params, lr=0.01))  # Adam makes them require grad
for bucket in (True, False):
  with Tensor.train():
    for p in opt.params:
      p.grad = None
    x.sequential(model).square().sum().backward()
    local = [p.grad.numpy() for p in opt.params if p.grad is not None]
    dist.all_reduce_grads(opt.params, "mean", bucket=bucket)
    averaged = [p.grad.numpy() for p in opt.params if p.grad is not None]
  gathered = dist.all_gather_object(local)
  for i, a in enumerate(averaged):
    np.testing.assert_allclose(a, sum(g[i] for g in gathered) / P, rtol=1e-6, atol=1e-6)
for _ in range(3):
  with Tensor.train():
    opt.zero_grad()
    x.sequential(model).square().sum().backward()
    opt.step()
digests = dist.all_gather_object(dist.digest(model))
assert len(set(digests)) == 1, f"the ranks' weights differ after training: {digests}"
assert float(opt.lr.numpy()[0]) == np.float32(0.01)

# mismatched shapes: a ValueError on every rank (checked here with checks on), never a hang or corrupted memory
w = dist.world()
if w is not None and P > 1:
  w.check = True
  try:
    dist.all_reduce(Tensor.ones(2 + r))
    raise AssertionError("all_reduce of different shapes did not raise")
  except ValueError as e:
    assert "ranks disagree" in str(e), e
  w.check = False
else:
  try:
    dist.broadcast(Tensor.ones(2), 1)
    raise AssertionError("broadcast from rank 1 of a world of one did not raise")
  except ValueError:
    pass
for bad in (lambda: dist.all_reduce(Tensor([1, 2]), "mean"), lambda: dist.all_reduce(Tensor([1.0]), "avg")):
  try:
    bad()
    raise AssertionError("a bad all_reduce did not raise")
  except (TypeError, ValueError):
    pass
dist.barrier()
print(f"rank {r} of {P}: ok", flush=True)
