"""Collectives on tensors: all_reduce and broadcast (in place), all_gather (a new tensor), and their Python-object and
barrier companions. In a world of one rank (no launcher) each is the identity, after the same argument checks.

Every rank must call the same collectives in the same order with tensors of the same shape and dtype; `init(check=True)`
compares them across ranks first (one small allgather per call), so a mismatch is a ValueError on every rank.
"""
from __future__ import annotations

import pickle
from typing import Any

import numpy as np

from tg.distributed import host
from tg.distributed.world import World, world
from tg.dtype import DType, dtypes
from tg.helpers import prod
from tg.tensor import Tensor

OPS = ("sum", "mean", "max", "min")


def _world_for(what: str) -> World | None:
  """The world to communicate in, or None when there is nobody to talk to. Refuses inside a TinyJit capture: the MPI
  call is no kernel, so a replay would skip it and silently train on this rank's gradients alone."""
  from tg.engine import realize
  if realize.capture_open():
    raise RuntimeError(f"{what} inside a TinyJit function: a replay runs only the captured kernels, not the MPI call. Jit the steps "
                       "before and after it (e.g. forward+backward returning the gradients, then the optimizer step) and call it between")
  w = world()
  return w if w is not None and w.size > 1 else None


def _check_op(op: str, dtype: DType) -> None:
  if op not in OPS:
    raise ValueError(f"all_reduce op must be one of {', '.join(OPS)}, not {op!r}")
  if op == "mean" and not dtypes.is_float(dtype):
    raise TypeError(f"all_reduce(op='mean') of a {dtype} tensor: a mean of integers isn't one; use op='sum' and divide")


def _agree(w: World, what: str, sig: tuple[Any, ...], force: bool = False) -> None:
  """With checks on (or `force`), raise the same ValueError on every rank unless every rank passed the same `sig`."""
  if not (w.check or force):
    return
  sigs = all_gather_object(sig)
  if any(s != sigs[0] for s in sigs):
    per_rank = "; ".join(f"rank {r}: {s}" for r, s in enumerate(sigs))
    raise ValueError(f"{what}: the ranks disagree ({per_rank}); every rank must pass tensors of the same shape and dtype, in the same order")


def _reduce(w: World, src: np.ndarray, dst: np.ndarray, dtype: DType, op: str, what: str) -> None:
  """All-reduce the host array `src` (the storage dtype of `dtype`) across the ranks into `dst` (which may be `src`)."""
  MPI, in_place = w.mpi, src is dst
  mpi_op = {"sum": MPI.SUM, "mean": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}[op]
  if dtype in (dtypes.float16, dtypes.bfloat16):  # MPI has no standard 16-bit float: reduce in float32 (also more exact)
    work = _bf16_to_f32(src) if dtype == dtypes.bfloat16 else src.astype(np.float32)
    w.run(lambda: w.comm.Allreduce(MPI.IN_PLACE, work, op=mpi_op), lambda: w.comm.Iallreduce(MPI.IN_PLACE, work, op=mpi_op), what, work.nbytes)
    if op == "mean":
      np.divide(work, w.size, out=work)
    dst[:] = _f32_to_bf16(work) if dtype == dtypes.bfloat16 else work.astype(dst.dtype)
    return
  if dtype == dtypes.bool:  # MPI's logical ops want C_BOOL, which not every MPI has: bytes 0/1, where max is or and min is and
    src, dst, mpi_op = src.view(np.uint8), dst.view(np.uint8), MPI.MIN if op == "min" else MPI.MAX
  send = MPI.IN_PLACE if in_place else src
  w.run(lambda: w.comm.Allreduce(send, dst, op=mpi_op), lambda: w.comm.Iallreduce(send, dst, op=mpi_op), what, dst.nbytes)
  if op == "mean":
    np.divide(dst, w.size, out=dst)


def _bf16_to_f32(raw: np.ndarray) -> np.ndarray:
  return (raw.astype(np.uint32) << 16).view(np.float32)


def _f32_to_bf16(x: np.ndarray) -> np.ndarray:
  bits = x.view(np.uint32).astype(np.uint64)
  rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16  # to nearest, ties to even
  return np.where(np.isnan(x), 0x7FC0, rounded).astype(np.uint16)


def all_reduce(t: Tensor, op: str = "sum") -> Tensor:
  """Combine `t` across the ranks (sum, mean, max or min) and give every rank's `t` the result, in place (returns `t`).
  16-bit floats are reduced in float32; bools: sum and max are or, min is and."""
  _check_op(op, t.dtype)
  if (w := _world_for("all_reduce")) is None:
    return t
  what = f"all_reduce({op}) of {t.shape} {t.dtype}"
  _agree(w, "all_reduce", (tuple(t.shape), str(t.dtype), op))
  n = prod(t.shape)
  src = host.read(t, "all_reduce")
  buf, out = host.new_buffer(t.device, n, t.dtype)
  _reduce(w, src, out, t.dtype, op, what)
  return host.write(t, buf, out)


def reduce_owned(t: Tensor, op: str = "sum") -> Tensor:
  """all_reduce of a realized contiguous tensor that nothing else reads (a bucket made for the purpose): MPI works on
  its memory directly, with no copy on host-memory devices. Returns `t`."""
  _check_op(op, t.dtype)
  if (w := _world_for("all_reduce")) is None:
    return t
  _agree(w, "all_reduce", (tuple(t.shape), str(t.dtype), op))
  lb = host.plain(t, "all_reduce")
  buf = lb.base.buffer
  mv = host.host_memory(buf) if lb.base is lb and lb.realized is not None else None
  if mv is None:
    return all_reduce(t, op)
  arr = np.frombuffer(mv, dtype=host.storage_np(t.dtype), count=buf.size)
  _reduce(w, arr, arr, t.dtype, op, f"all_reduce({op}) of a {t.dtype} bucket")
  return t


def broadcast_owned(t: Tensor, root: int = 0) -> Tensor:
  """broadcast into a realized contiguous tensor that nothing else reads (a bucket): MPI works on its memory directly."""
  if (w := _world_for("broadcast")) is None:
    return t
  lb = host.plain(t, "broadcast")
  mv = host.host_memory(lb.base.buffer) if lb.base is lb and lb.realized is not None else None
  if mv is None:
    return broadcast(t, root)
  _agree(w, "broadcast", (tuple(t.shape), str(t.dtype), root))
  MPI = w.mpi
  w.run(lambda: w.comm.Bcast([mv, MPI.BYTE], root), lambda: w.comm.Ibcast([mv, MPI.BYTE], root), f"broadcast of a {t.dtype} bucket", mv.nbytes)
  return t


def broadcast(t: Tensor, root: int = 0) -> Tensor:
  """Give every rank's `t` the value of rank `root`'s, in place (returns `t`)."""
  w = world()
  if not 0 <= root < (w.size if w is not None else 1):
    raise ValueError(f"broadcast root {root} is not a rank of a world of {w.size if w is not None else 1}")
  if (w := _world_for("broadcast")) is None:
    return t
  _agree(w, "broadcast", (tuple(t.shape), str(t.dtype), root))
  what = f"broadcast from rank {root} of {t.shape} {t.dtype}"
  MPI = w.mpi
  if w.rank == root:
    data = host.read(t, "broadcast").view(np.uint8)
    w.run(lambda: w.comm.Bcast([data, MPI.BYTE], root), lambda: w.comm.Ibcast([data, MPI.BYTE], root), what, data.nbytes)
    return t
  buf, out = host.new_buffer(t.device, prod(t.shape), t.dtype)
  raw = out.view(np.uint8)
  w.run(lambda: w.comm.Bcast([raw, MPI.BYTE], root), lambda: w.comm.Ibcast([raw, MPI.BYTE], root), what, raw.nbytes)
  return host.write(t, buf, out)


def all_gather(t: Tensor) -> Tensor:
  """Every rank's `t`, stacked: a new tensor of shape (world_size, *t.shape) on t's device, the same on every rank
  (`.flatten(0, 1)` concatenates them instead)."""
  if (w := _world_for("all_gather")) is None:
    return t.unsqueeze(0)
  _agree(w, "all_gather", (tuple(t.shape), str(t.dtype)))
  n = prod(t.shape)
  send = host.read(t, "all_gather").view(np.uint8)
  buf, out = host.new_buffer(t.device, w.size * n, t.dtype)
  raw = out.view(np.uint8)
  MPI, what = w.mpi, f"all_gather of {t.shape} {t.dtype}"
  w.run(lambda: w.comm.Allgather([send, MPI.BYTE], [raw, MPI.BYTE]), lambda: w.comm.Iallgather([send, MPI.BYTE], [raw, MPI.BYTE]), what, send.nbytes)
  return host.to_tensor(buf, out, (w.size, *host.shape(t, "all_gather")), t.dtype, t.device)


def all_gather_object(obj: Any) -> list[Any]:
  """Every rank's picklable `obj`, as a list indexed by rank (a digest of the weights, a metric, a shape to compare)."""
  w = world()
  if w is None or w.size == 1:
    return [obj]
  MPI = w.mpi
  data = np.frombuffer(pickle.dumps(obj), dtype=np.uint8)
  sizes = np.zeros(w.size, dtype=np.int64)
  mine = np.array([data.size], dtype=np.int64)
  w.run(lambda: w.comm.Allgather(mine, sizes), lambda: w.comm.Iallgather(mine, sizes), "all_gather_object (sizes)")
  offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
  out = np.empty(int(sizes.sum()), dtype=np.uint8)
  spec = [out, (sizes, offsets), MPI.BYTE]
  w.run(lambda: w.comm.Allgatherv([data, MPI.BYTE], spec), lambda: w.comm.Iallgatherv([data, MPI.BYTE], spec), "all_gather_object")
  return [pickle.loads(out[o:o + s].tobytes()) for o, s in zip(offsets.tolist(), sizes.tolist())]


def barrier() -> None:
  """Wait until every rank got here."""
  if (w := _world_for("barrier")) is not None:
    w.run(lambda: w.comm.Barrier(), lambda: w.comm.Ibarrier(), "barrier")
