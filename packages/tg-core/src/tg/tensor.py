"""Tensor: the user API, torch-like. Built only from autograd Functions and movement ops; it never
touches a device directly (data moves in and out through Buffers, compute through the scheduler)."""
from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar

import tg.divcheck as divcheck
import tg.float_mod as float_mod
import tg.function as F
from tg.device import Buffer, Device, is_dtype_supported
from tg.dtype import PLAIN_FLOATS, ConstType, DType, dtypes, least_upper_dtype, least_upper_float, round_float, to_dtype
from tg.engine.realize import realize_lazybuffers
from tg.engine.schedule import ScheduleItem, create_schedule
from tg.errors import AxisError, DTypeError, GradientError, ShapeError, TgArgumentError
from tg.helpers import argfix, prod
from tg.lazy import LazyBuffer
from tg.multi import MultiLazyBuffer, parts
from tg.ops import MetaOps
from tg.shape.symbolic import Node, Variable, bound_value, sint
from tg.tensor_index import IndexingMixin
from tg.tensor_math import MathMixin, _signbit, _with_grad
from tg.tensor_nn import NNMixin
from tg.tensor_select import SelectMixin

Scalar = ConstType


def _concrete(x: sint) -> int:
  """The value of a size: itself, or a symbolic size at the value its variables are bound to."""
  return x if isinstance(x, int) else bound_value(x)


def _new_shape(*shape: Any) -> tuple[sint, ...]:
  """The shape a creation function is given (f(2, 3), f((2, 3)) or f([2, 3])), checked: each size a non-negative int or
  a symbolic size, as torch refuses a negative one."""
  shape = argfix(*shape)
  if not all(isinstance(s, (int, Node)) and not isinstance(s, bool) for s in shape) or any(isinstance(s, int) and s < 0 for s in shape):
    raise TgArgumentError(f"bad shape {shape}: sizes must be non-negative ints (or symbolic)")
  return shape


def _random_float_dtype(name: str, dtype: DType | str) -> DType:
  dt = to_dtype(dtype)
  if not dtypes.is_float(dt):
    raise DTypeError(f"{name} draws floating point numbers: dtype {dt} is not a floating point dtype (torch: not implemented for it)")
  return dt


def _parts(lbs: Sequence[LazyBuffer | MultiLazyBuffer]) -> list[LazyBuffer]:
  """The LazyBuffers behind several tensors' data (tg.multi.parts of each)."""
  return [x for lb in lbs for x in parts(lb)]


def _multi_data(data: Any, device: str | tuple[str, ...] | list[str] | None, dtype: DType | None) -> LazyBuffer | MultiLazyBuffer:
  """A Tensor's data when it is sharded, or asked to be on several devices: given devices take the whole value on each
  (Tensor.shard splits it)."""
  if isinstance(data, MultiLazyBuffer):
    if device is not None and tuple(Device.canonicalize(d) for d in (device if isinstance(device, (tuple, list)) else (device,))) != data.device:
      raise RuntimeError(f"a tensor sharded over {data.device} can't be made on {device}: use .to() or .shard()")
    return data if dtype is None or dtype == data.dtype else data.cast(dtype)
  assert isinstance(device, (tuple, list))
  devices = tuple(Device.canonicalize(d) for d in device)
  if not devices:
    raise ValueError("a tensor on several devices needs at least one device")
  lb = Tensor(data, device=devices[0], dtype=dtype).lazydata
  assert isinstance(lb, LazyBuffer)
  return MultiLazyBuffer.from_sharded(lb, devices, None)


def _on_devices(fn: Callable[..., Tensor]) -> Callable[..., Tensor]:
  """A creation function asked for several devices (`device=(...)`): made on the first, then whole on each, as tinygrad's."""
  @functools.wraps(fn)
  def wrapper(*args: Any, **kwargs: Any) -> Tensor:
    if isinstance(device := kwargs.get("device"), (tuple, list)):
      ret = fn(*args, **{**kwargs, "device": device[0]})
      return Tensor(ret.lazydata, device=tuple(device), requires_grad=ret.requires_grad)
    return fn(*args, **kwargs)
  return wrapper



def _run(lbs: Sequence[LazyBuffer | MultiLazyBuffer]) -> None:
  """Realize `lbs` after the checks of the integer divisions and index tensors they depend on (tg.divcheck): the
  checks' flags are realized and read first, so that a failed one raises before any kernel of `lbs` ran, and its
  in-place assigns are dropped (a training step with a bad index updates no weight, nor the optimizer's state)."""
  targets = _parts(lbs)
  flags, guards = divcheck.with_guards(targets)
  if flags:
    realize_lazybuffers(flags)
  divcheck.check(guards, targets)  # a failed check cancels the targets' in-place assigns: the realize changes nothing
  realize_lazybuffers(targets)


# cumsum over an axis longer than twice this runs in blocks of this many elements (tinygrad 0.9.1's SPLIT)
CUMSUM_BLOCK = 256


def _weights_error(code: int | None) -> BaseException:
  """multinomial's error (torch's messages) for the code _check_weights's detail computes."""
  if code == 1:
    return TgArgumentError("multinomial: probability tensor contains either `inf`, `nan` or element < 0")
  if code == 2:
    return TgArgumentError("multinomial: invalid multinomial distribution (sum of probabilities <= 0)")
  return TgArgumentError("multinomial: invalid weights (an element negative, inf or NaN, or a row summing to 0)")


def _check_weights(result: Tensor, w: Tensor) -> None:
  """Make multinomial's `result` raise when realized (a lazy guard, tg.divcheck) where the weights `w` (rows of the
  last axis) hold a negative, inf or NaN element, or a row of zeros: the draws from them would be meaningless."""
  bad = ((w >= 0) & (w < math.inf)).logical_not().any()  # (NaN compares false both ways)
  flag = bad | (w > 0).any(1).logical_not().any()

  def detail() -> LazyBuffer:  # the failure path only: which of the two
    b = bad.to(bad.device[0]) if isinstance(bad.device, tuple) else bad
    lb = b.where(1, 2).cast(dtypes.int32).lazydata
    assert isinstance(lb, LazyBuffer)
    return lb

  fl = flag.lazydata if isinstance(flag.lazydata, LazyBuffer) and flag.lazydata.is_unrealized_const() else flag.contiguous().lazydata
  flags = fl.to_axis(None).lbs if isinstance(fl, MultiLazyBuffer) else [fl]
  on = {f.device: f for f in flags}
  for rp in _parts([result.lazydata]):  # every part of a sharded result, by the flag on its device
    divcheck.guard(rp, on.get(rp.device, flags[0]), _weights_error, detail)


def _index_dtype(n: int, device: str) -> DType:
  """The dtype of indices into n elements: int32, or int64 past int32's range where the device has it (else int32,
  and the kernel's lowering refuses the indices that pass it)."""
  return dtypes.int64 if n > dtypes.max(dtypes.int32) and is_dtype_supported(dtypes.int64, device) else dtypes.int32


def _broadcast_shape(*shapes: tuple[sint, ...]) -> tuple[sint, ...]:
  ndim = max(len(s) for s in shapes)
  padded = [(1,) * (ndim - len(s)) + s for s in shapes]
  out: list[sint] = []
  for dims in zip(*padded):
    sizes = {d for d in dims if d != 1}
    if len(sizes) > 1:
      raise ShapeError(f"shapes {' and '.join(str(s) for s in shapes)} can't be broadcast together (sizes {sorted(sizes)} in one axis)")
    out.append(sizes.pop() if sizes else 1)
  return tuple(out)


PAD_MODES = ("constant", "reflect", "replicate", "circular")


def _check_pad_mode(mode: str, value: float) -> None:
  if mode not in PAD_MODES:
    raise TgArgumentError(f"unknown padding mode {mode!r}: one of {', '.join(PAD_MODES)} (torch's F.pad modes)")
  if mode != "constant" and value != 0:  # (torch takes value=0 with any mode)
    raise TgArgumentError(f'Padding mode "{mode}" doesn\'t take in value argument (as torch): the padding is copied from the input')


def _host_array(data: Any, dtype: DType | None) -> Any:
  """A list or tuple (of numbers, lists, or numpy arrays) as a numpy array of `dtype`, or of the dtype tinygrad gives it."""
  import numpy as np
  if dtype is None:
    try:
      dtype = dtypes.from_py(data)
    except TypeError:  # numpy arrays inside: their kind, at tg's default widths
      kind = np.array(data).dtype
      dtype = dtypes.bool if kind == np.bool_ else dtypes.default_int if np.issubdtype(kind, np.integer) else dtypes.default_float
  npdt = np.float32 if dtype == dtypes.bfloat16 else dtype.np
  try:
    return np.array(data, dtype=npdt)
  except OverflowError:  # an int past the dtype's range wraps around, as a C cast (and tinygrad) does
    try:
      return np.array(data, dtype=np.int64).astype(npdt)
    except OverflowError:
      return np.array(data, dtype=np.uint64).astype(npdt)


def _from_host(data: Any, dtype: DType | None, device: str) -> LazyBuffer:
  """Copy host data (a list, numpy array or scalar, or bytes) into a new buffer on `device`."""
  import numpy as np
  if isinstance(data, bytes):
    arr = np.frombuffer(data, dtype=np.uint8)
  elif isinstance(data, (np.ndarray, np.generic)):
    arr = np.asarray(data)  # a numpy scalar (np.float32(1.5)) is a 0-d array of its dtype
  else:
    arr = _host_array(data, dtype)
  if arr.dtype == object:
    raise TypeError(f"can't make a Tensor from {type(data).__name__} of mixed or non-numeric values")
  target = dtype or dtypes.from_np(arr.dtype)
  stored = dtypes.float32 if target == dtypes.bfloat16 else target  # bfloat16 is rounded on device
  shape = arr.shape
  flat = np.ascontiguousarray(arr.astype(stored.np, copy=False)).reshape(-1)
  buf = Buffer(device, flat.size, stored).copyin(memoryview(flat.view(np.uint8).data))
  lb = LazyBuffer.from_buffer(buf, shape)
  return lb.cast(target) if stored != target else lb


class _Switch:
  """A class-wide on/off setting that reads as a bool and is also a context manager and decorator:
  `if Tensor.no_grad:`, `Tensor.no_grad = True`, `with Tensor.no_grad(): ...`, `@Tensor.train()`."""

  def __init__(self, value: bool = False) -> None:
    self.value = value

  def __bool__(self) -> bool:
    return self.value

  def __eq__(self, other: object) -> bool:  # `Tensor.training == False` as tinygrad programs write it
    return self.value == other

  def __hash__(self) -> int:
    return hash(self.value)

  def __repr__(self) -> str:
    return str(self.value)

  def __call__(self, mode: bool = True) -> _SwitchContext:
    return _SwitchContext(self, mode)


class _SwitchContext(contextlib.ContextDecorator):
  def __init__(self, switch: _Switch, mode: bool) -> None:
    self.switch, self.mode = switch, mode
    self.prev: list[bool] = []  # a stack, so the same context object can be entered again while active

  def __enter__(self) -> None:
    self.prev.append(self.switch.value)
    self.switch.value = self.mode

  def __exit__(self, *exc: Any) -> None:
    self.switch.value = self.prev.pop()


class _TensorMeta(type):
  """Makes `Tensor.no_grad = True` and `Tensor.training = False` set the switches rather than replace them."""
  _switches: dict[str, _Switch] = {"no_grad": _Switch(False), "training": _Switch(False)}

  def __getattr__(cls, name: str) -> Any:
    if name in _TensorMeta._switches:
      return _TensorMeta._switches[name]
    raise AttributeError(name)

  def __setattr__(cls, name: str, value: Any) -> None:
    if name in _TensorMeta._switches:
      _TensorMeta._switches[name].value = bool(value)
    else:
      super().__setattr__(name, value)


class Tensor(IndexingMixin, NNMixin, MathMixin, SelectMixin, metaclass=_TensorMeta):
  """A multi-dimensional array on a device, with autograd.

  Operations build a lazy graph; `realize()` (or reading the data) runs it.
  """
  # numpy's operators step aside for a Tensor (`np.float64(2) * t` calls t.__rmul__, not numpy's elementwise loop)
  __array_ufunc__ = None

  __slots__ = ("_ctx", "_released", "_requires_grad", "grad", "lazydata")
  _released: bool  # set by a backward() that freed the graph this tensor's value came from; unset otherwise (read with getattr)
  # `Tensor.training` and `Tensor.no_grad` are switches held by the metaclass (see _Switch)
  training: ClassVar[_Switch]
  no_grad: ClassVar[_Switch]
  _seed: ClassVar[int] = 0
  _rng_states: ClassVar[dict[str, Tensor]] = {}

  def __init__(self, data: Any, device: str | tuple[str, ...] | None = None, dtype: DType | str | None = None,
               requires_grad: bool | None = None) -> None:
    dtype = to_dtype(dtype) if dtype is not None else None
    self.grad: Tensor | None = None
    self._ctx: F.Function | None = None
    if isinstance(device, (tuple, list)) or isinstance(data, MultiLazyBuffer):
      self.lazydata: LazyBuffer | MultiLazyBuffer = _multi_data(data, device, dtype)
      self.requires_grad = requires_grad  # (after the data: the dtype decides whether it may)
      return
    # a LazyBuffer stays where it is unless a device is asked for; other data goes to the default device
    device = data.device if device is None and isinstance(data, LazyBuffer) else Device.canonicalize(device)
    if isinstance(data, LazyBuffer):
      lb = data if dtype is None or dtype == data.dtype else data.cast(dtype)
    elif type(data).__module__ == "numpy":
      # before Python numbers: np.float64 is a float, but a numpy scalar keeps its own dtype (as a 0-d array and torch do)
      lb = _from_host(data, dtype, device)
    elif isinstance(data, (bool, int, float)):
      lb = LazyBuffer.full(data, (), dtype or dtypes.from_py(data), device)
    elif data is None:
      lb = LazyBuffer.full(0, (0,), dtype or dtypes.default_float, device)
    elif isinstance(data, (list, tuple, bytes)):
      lb = _from_host(data, dtype, device)
    else:
      raise TypeError(f"can't make a Tensor from {type(data).__name__}: use a number, list, bytes or numpy array")
    self.lazydata = lb if lb.device == device else lb.copy_to_device(device)
    self.requires_grad = requires_grad

  @property
  def requires_grad(self) -> bool | None:
    """Whether backward() computes a gradient for this tensor: True, False, or None (not said, as tinygrad: no
    gradient, but an optimizer given it makes it True)."""
    return self._requires_grad

  @requires_grad.setter
  def requires_grad(self, value: bool | None) -> None:
    # as torch: an integer tensor's gradient would be truncated to integers (0.5 became 0), so it can't ask for one
    if value and not dtypes.is_float(self.dtype):
      raise DTypeError(f"only Tensors of floating point dtype can require gradients, not {self.dtype.name}: cast it to a float first")
    self._requires_grad = value

  @staticmethod
  def train(mode: bool = True) -> _SwitchContext:
    """`with Tensor.train():` turns training behaviour (dropout, batchnorm statistics) on inside."""
    return Tensor.training(mode)

  @staticmethod
  def test() -> _SwitchContext:
    return Tensor.training(False)

  @staticmethod
  def inference_mode(mode: bool = True) -> _SwitchContext:
    """`with Tensor.inference_mode():` records no autograd graph inside (same as `Tensor.no_grad()`)."""
    return Tensor.no_grad(mode)

  def __repr__(self) -> str:
    return f"<Tensor {self.lazydata!r} on {self.device} with grad {(self.grad.lazydata if self.grad is not None else None)!r}>"

  def __hash__(self) -> int:
    return id(self)

  def __bool__(self) -> bool:
    raise TypeError("the truth value of a Tensor is ambiguous: use .item(), .numpy(), or (t == x).all()-style reductions")

  def __len__(self) -> int:
    if not self.shape:
      raise TypeError("len() of a 0-d tensor")
    return _concrete(self.shape[0])

  def __iter__(self) -> Iterator[Tensor]:
    """The rows along the first axis, as torch. (Without it Python iterates through __getitem__ until an IndexError,
    which a 0-d tensor raises at once: it iterated as empty, where torch raises TypeError.)"""
    if not self.shape:
      raise TypeError("iteration over a 0-d tensor")
    return (self[i] for i in range(len(self)))

  @property
  def device(self) -> str:
    """The device's name; for a sharded tensor (Tensor.shard), the tuple of its devices' names (as tinygrad's)."""
    return self.lazydata.device  # type: ignore[return-value]  # (typed str: what every tensor but a sharded one has)
  @property
  def shape(self) -> tuple[sint, ...]: return self.lazydata.shape
  @property
  def dtype(self) -> DType: return self.lazydata.dtype
  @property
  def ndim(self) -> int: return len(self.shape)
  def numel(self) -> sint: return prod(self.shape)
  def element_size(self) -> int: return self.dtype.itemsize
  def nbytes(self) -> sint: return self.numel() * self.element_size()
  def is_floating_point(self) -> bool: return dtypes.is_float(self.dtype)

  def size(self, dim: int | None = None) -> sint | tuple[sint, ...]:
    """The shape, or the size of axis `dim` (torch's and tinygrad's)."""
    return self.shape if dim is None else self.shape[self._resolve_axis(dim)]


  # ---------- running and reading ----------
  @staticmethod
  def realize_all(*tensors: Tensor) -> None:
    _run([t.lazydata for t in tensors])

  def realize(self, *lst: Tensor) -> Tensor:
    """Compute this tensor (and the others given, in one schedule: `Tensor.realize(a, b)` as in tinygrad)."""
    if not lst and type(lb := self.lazydata) is LazyBuffer and not divcheck._pending:  # (_run's work, in one call: an eager op)
      realize_lazybuffers([lb])
    else:
      Tensor.realize_all(self, *lst)
    return self

  def _contiguous_buffer(self) -> Buffer:
    """A realized buffer whose first numel() elements are this tensor's, in row-major order."""
    lb = self.lazydata
    assert isinstance(lb, LazyBuffer), "a sharded tensor's data is read gathered (see data())"
    if lb.base.realized is None:
      _run([lb])
    elif divcheck._pending:
      divcheck.check_read(lb)  # a result whose check failed raises again when read (tg.divcheck)
    if not lb.st.contiguous:  # a view that isn't a prefix of its base's memory: copy it out in order
      lb = LazyBuffer.metaop(MetaOps.CONTIGUOUS, lb.shape, lb.dtype, lb.device, srcs=(lb,))
      _run([lb])
    return lb.base.buffer.ensure_allocated()

  def data(self) -> memoryview:
    """This tensor's bytes on the host (bfloat16 as its raw 16-bit words)."""
    if isinstance(self.lazydata, MultiLazyBuffer):  # sharded: put together on its first device
      return self.to(self.lazydata.device[0]).data()
    if any(isinstance(s, Node) for s in self.shape):
      raise RuntimeError(f"reading a tensor needs a concrete shape, not {self.shape}: reshape to the bound sizes first")
    n = prod(self.shape)
    return self._contiguous_buffer().as_buffer()[:n * self.dtype.itemsize] if n else memoryview(b"")

  def numpy(self) -> Any:
    import numpy as np
    raw = np.frombuffer(self.data(), dtype=np.uint16 if self.dtype == dtypes.bfloat16 else self.dtype.np)
    if self.dtype == dtypes.bfloat16:  # numpy has no bfloat16: widen the bits to float32
      raw = (raw.astype(np.uint32) << 16).view(np.float32)
    return raw.reshape(self.shape).copy()

  def tolist(self) -> Any:
    return self.numpy().tolist()

  def item(self) -> Scalar:
    if self.numel() != 1:
      raise TgArgumentError(f"item() needs a tensor with one element, this one has shape {self.shape}")
    return self.numpy().reshape(()).item()  # type: ignore[no-any-return]

  def to(self, device: str | tuple[str, ...] | None) -> Tensor:
    if isinstance(device, (tuple, list)):  # several devices: the whole value on each (as tinygrad's)
      devices = tuple(Device.canonicalize(d) for d in device)
      return self if isinstance(self.lazydata, MultiLazyBuffer) and self.lazydata.device == devices else self.shard(devices)
    device = Device.canonicalize(device)
    if device == self.device:
      return self
    # a Function, so the gradient flows back across the copy (to this tensor's device)
    ret: Tensor = F.Copy.apply(self, device=device)
    if self.grad is not None:
      ret.grad = self.grad.to(device)
    return ret

  def shard(self, devices: tuple[str, ...] | list[str], axis: int | None = None) -> Tensor:
    """This tensor on several devices (tinygrad's): whole on each with axis None, else split along `axis` into equal
    parts, the i-th on devices[i]. Every op then runs on each device's part; gradients flow back to this tensor."""
    if isinstance(self.lazydata, MultiLazyBuffer):
      raise RuntimeError(f"this tensor is already sharded over {self.lazydata.device}: use .to(device) to gather it first")
    if not isinstance(devices, (tuple, list)) or not devices:
      raise TypeError(f"shard() takes a tuple of devices, not {devices!r}")
    if axis is not None and self.ndim == 0:
      raise AxisError(f"shard of a 0-d tensor along axis {axis}: it has no axis to split; shard with axis=None for a whole copy on each device")
    return F.Shard.apply(self, devices=tuple(Device.canonicalize(d) for d in devices),  # type: ignore[no-any-return]
                         axis=None if axis is None else self._resolve_axis(axis))

  def shard_(self, devices: tuple[str, ...] | list[str], axis: int | None = None) -> Tensor:
    """Shard this tensor in place (its data, and its gradient if it has one): for a model's parameters."""
    sharded = self.shard(devices, axis)
    if self.grad is not None:
      self.grad = self.grad.shard(devices, axis)
    self.lazydata = sharded.lazydata
    return self

  def assign(self, x: Tensor | Scalar) -> Tensor:
    """Give this tensor a new value (same shape and dtype), keeping its identity for those holding it.

    A realized tensor, or a view of one (a slice, a permute: `cache[:, pos:pos+1].assign(new)`), gets the value written
    into its memory in place at the next realize, as in tinygrad: a captured (TinyJit) kernel that reads the buffer
    later reads the new value, and so does every tensor over the buffer a view was cut from. Otherwise (an unrealized
    value, or a new value that is part of the autograd graph) the tensor's lazy graph is swapped."""
    if not isinstance(x, Tensor):
      x = Tensor.full(self.shape, x, dtype=self.dtype, device=self.device)
    if x.lazydata is self.lazydata:
      return self  # assigning a tensor its own value changes nothing
    if x.shape != self.shape or x.dtype != self.dtype or x.device != self.device:
      raise ValueError(f"assign of {x.shape} {x.dtype} on {x.device} to {self.shape} {self.dtype} on {self.device}: they must match")
    lb = self.lazydata
    if isinstance(lb, MultiLazyBuffer) and lb.gathered_view:
      # (swapping its value, as for an unrealized tensor, would drop the write without a word)
      raise NotImplementedError(f"assign into a view of a sharded tensor that cuts or moves its split axis: the view's {lb.shape} is a copy "
                                "gathered from the devices' parts, so the write can't reach them; write through the tensor itself "
                                "(`t[indices] = value`), or shard it along an axis the view keeps whole")
    # a new value, which doesn't come from the graph a backward() released (an optimizer's step on a parameter that is
    # an op's result, such as t.contiguous(): it trains on as before, a leaf)
    released, self._released = getattr(self, "_released", False), False
    if isinstance(lb, MultiLazyBuffer) and isinstance(x.lazydata, MultiLazyBuffer) and x._ctx is None:
      if lb.realized:
        self.lazydata = lb.assign(x.lazydata)
        return self
      x = Tensor(x.lazydata.to_axis(lb.axis), requires_grad=x.requires_grad)  # the tensor stays split as it was
    elif isinstance(lb, LazyBuffer) and isinstance(xl := x.lazydata, LazyBuffer) and x._ctx is None and lb.base.realized is not None \
        and (lb.base is lb or lb.writable_view()):
      self.lazydata = lb.assign(xl)
      return self
    if x._ctx is not None:
      # the new value is part of the autograd graph (an in-place op on a non-leaf, as torch records it): the old
      # value moves to a fresh Tensor that x's graph points to, and this one becomes x's node
      old = Tensor(self.lazydata, device=self.device, requires_grad=self.requires_grad)
      old._ctx = self._ctx
      old._released = released  # (an in-place op on a released tensor: a backward through it still raises)
      for t in x._toposort():
        if t._ctx is not None and any(p is self for p in t._ctx.parents):
          t._ctx.parents = tuple(old if p is self else p for p in t._ctx.parents)
      self._ctx, self.requires_grad = x._ctx, x.requires_grad
    self.lazydata = x.lazydata
    return self

  def detach(self) -> Tensor:
    return Tensor(self.lazydata, device=self.device, requires_grad=False)

  def contiguous(self) -> Tensor: return F.Contiguous.apply(self)  # type: ignore[no-any-return]

  def contiguous_backward(self) -> Tensor:
    """The identity, whose gradient is made contiguous before it flows back (tinygrad's)."""
    return F.ContiguousBackward.apply(self)  # type: ignore[no-any-return]

  def to_(self, device: str | None) -> None:
    """Move this tensor (and its gradient) to `device` in place (tinygrad's: returns nothing)."""
    real = self.to(device)
    if self.grad is not None and real.grad is not None:
      self.grad.lazydata = real.grad.lazydata
    self.lazydata = real.lazydata

  def replace(self, x: Tensor) -> Tensor:
    """Take x's data (dtype and device may differ, the shape may not) as this tensor's, keeping its identity: for
    swapping a parameter for a new version of it. Neither may be part of an autograd graph."""
    if x.requires_grad or self._ctx is not None:
      raise GradientError("replace() of a tensor in an autograd graph, or with one that requires grad: use assign, or detach x")
    if x.shape != self.shape:
      raise ShapeError(f"replace of shape {self.shape} with {x.shape}: the shapes must match")
    self.lazydata = x.lazydata
    return self

  def sequential(self, ll: Sequence[Callable[[Tensor], Tensor]]) -> Tensor:
    """Apply the functions (layers) in order, each to the last one's output."""
    ret = self
    for f in ll:
      ret = f(ret)
    return ret

  def schedule_with_vars(self, *lst: Tensor, seen: set[LazyBuffer] | None = None) -> tuple[list[ScheduleItem], dict[Variable, int]]:
    """The kernels (ScheduleItems) that realize these tensors, and the values of the Variables bound in their shapes: run
    them with tg.engine.realize.run_schedule. Unlike realize(), a schedule run this way doesn't check integer division
    by zero (tg.divcheck). `seen` (tinygrad's buffers already scheduled) must be empty: tg schedules a graph in one go."""
    if seen:
      raise NotImplementedError("schedule(seen=...) with buffers already scheduled: realize the earlier schedule first")
    schedule = create_schedule(_parts([t.lazydata for t in (self, *lst)]))
    var_vals: dict[Variable, int] = {}
    for si in schedule:
      var_vals.update(si.var_vals)
    if seen is not None:
      seen.update(lb.base for lb in _parts([t.lazydata for t in (self, *lst)]))
    return schedule, var_vals

  def schedule(self, *lst: Tensor, seen: set[LazyBuffer] | None = None) -> list[ScheduleItem]:
    """The kernels that realize these tensors (see schedule_with_vars), for shapes without bound Variables."""
    schedule, var_vals = self.schedule_with_vars(*lst, seen=seen)
    if var_vals:
      raise RuntimeError(f"schedule() of tensors whose shapes have bound Variables {sorted(v.expr for v in var_vals)}: use schedule_with_vars")
    return schedule

  # ---------- creation ----------
  @staticmethod
  @_on_devices
  def full(shape: sint | tuple[sint, ...], fill_value: Scalar, **kwargs: Any) -> Tensor:
    shape = _new_shape(shape)
    dtype = to_dtype(kwargs.pop("dtype")) if kwargs.get("dtype") is not None else dtypes.from_py(fill_value)
    kwargs.pop("dtype", None)
    return Tensor(LazyBuffer.full(fill_value, shape, dtype, Device.canonicalize(kwargs.pop("device", None))), **kwargs)

  @staticmethod
  def zeros(*shape: Any, **kwargs: Any) -> Tensor:
    return Tensor.full(argfix(*shape), 0.0, **{"dtype": dtypes.default_float, **kwargs})

  @staticmethod
  def ones(*shape: Any, **kwargs: Any) -> Tensor:
    return Tensor.full(argfix(*shape), 1.0, **{"dtype": dtypes.default_float, **kwargs})

  @staticmethod
  def empty(*shape: Any, **kwargs: Any) -> Tensor:
    dtype = to_dtype(kwargs.pop("dtype", dtypes.default_float))
    if isinstance(device := kwargs.pop("device", None), (tuple, list)):  # uninitialized memory on each device
      return Tensor(MultiLazyBuffer([Tensor.empty(*shape, dtype=dtype, device=d).lazydata for d in device], None), **kwargs)  # type: ignore[misc]
    lb = LazyBuffer.metaop(MetaOps.EMPTY, _new_shape(*shape), dtype, Device.canonicalize(device))
    return Tensor(lb, **kwargs)

  @staticmethod
  @_on_devices
  def arange(start: Scalar, stop: Scalar | None = None, step: Scalar = 1, **kwargs: Any) -> Tensor:
    if stop is None:
      start, stop = 0, start
    if step == 0:
      raise TgArgumentError("arange step must not be zero")
    dtype = to_dtype(kwargs.pop("dtype")) if kwargs.get("dtype") is not None else dtypes.from_py([start, stop, step])
    kwargs.pop("dtype", None)
    device = Device.canonicalize(kwargs.pop("device", None))
    n = max(0, math.ceil((stop - start) / step))
    # the positions 0..n-1 are no data: each kernel that reads them computes the ones it reads (LazyBuffer.iota), in int64
    # past int32's range (a device without int64 then refuses the kernel, as its indices pass int32 too)
    idx = Tensor(LazyBuffer.iota(n, _index_dtype(n, device), device))
    ret = idx.cast(dtype) * step + start if (step, start) != (1, 0) else idx.cast(dtype)
    return Tensor(ret.cast(dtype).lazydata, device=device, **kwargs)

  @staticmethod
  @_on_devices
  def eye(n: int, m: int | None = None, **kwargs: Any) -> Tensor:
    m = n if m is None else m
    dtype = kwargs.pop("dtype", dtypes.default_float)
    device = kwargs.pop("device", None)
    if n == 0 or m == 0:
      return Tensor.zeros(n, m, dtype=dtype, device=device, **kwargs)
    k = max(n, m)
    ones = Tensor.ones(k, 1, dtype=dtype, device=device).pad(((0, 0), (0, k))).flatten()[:k * k].reshape(k, k)
    return Tensor(ones[:n, :m].lazydata, **kwargs)

  @staticmethod
  @_on_devices
  def linspace(start: float, stop: float, steps: int, **kwargs: Any) -> Tensor:
    if steps < 0:
      raise TgArgumentError(f"linspace needs steps >= 0, got {steps}")
    dtype = to_dtype(kwargs.pop("dtype", dtypes.default_float))
    device = Device.canonicalize(kwargs.pop("device", None))
    if steps == 1:
      return Tensor([start], dtype=dtype, device=device, **kwargs)
    ret = Tensor.arange(steps, device=device).cast(dtypes.float32) * ((stop - start) / max(steps - 1, 1)) + start
    return Tensor(ret.cast(dtype).lazydata, device=device, **kwargs)

  def full_like(self, fill_value: Scalar, **kwargs: Any) -> Tensor:
    return Tensor.full(self.shape, fill_value, **{"dtype": self.dtype, "device": self.device, **kwargs})

  def zeros_like(self, **kwargs: Any) -> Tensor: return self.full_like(0, **kwargs)
  def ones_like(self, **kwargs: Any) -> Tensor: return self.full_like(1, **kwargs)

  # ---------- random numbers: a counter-based hash, computed on the device ----------
  @staticmethod
  def manual_seed(seed: int = 0) -> None:
    Tensor._seed = seed
    # each device's state restarts from the new seed, written in place: a TinyJit replay reads the buffer it captured
    for device, st in Tensor._rng_states.items():
      st.assign(Tensor._rng_start(device)).realize()

  @staticmethod
  def _rng_start(device: str) -> Tensor:
    return Tensor([(Tensor._seed * 0x85EBCA6B + 0x1B873593) & 0xFFFFFFFF, 0], dtype=dtypes.uint32, device=device)

  @staticmethod
  def _rng_state(device: str) -> Tensor:
    """The device's random state, uint32 [key, counter]: read by the random kernels (not baked into them, so one
    compiled kernel serves every call) and advanced in place on the device (so a TinyJit replay draws new numbers)."""
    if (st := Tensor._rng_states.get(device)) is None:
      st = Tensor._rng_states[device] = Tensor._rng_start(device).realize()
    return st

  @staticmethod
  def _random_bits(n: int, device: str) -> Tensor:
    """n uint32 random words: a stateless integer hash of (seed, counter), so a seed gives the same
    numbers on every device."""
    state = Tensor._rng_state(device)
    # advance the counter by n now: `drawn` (a buffer of this call) holds [key, counter + n], and the state takes it
    # in place; the kernels are the same for every call of this size, and a draw realized later still sees its own counter
    drawn = state + (Tensor.arange(2, device=device, dtype=dtypes.int32) == 1).cast(dtypes.uint32) * (n & 0xFFFFFFFF)
    Tensor.realize_all(drawn, state.assign(drawn))  # one schedule: the assign's kernel runs after drawn's read of the state
    key, start = drawn[0], drawn[1] - (n & 0xFFFFFFFF)
    counter = Tensor.arange(n, device=device, dtype=dtypes.int32).cast(dtypes.uint32) + start
    x = counter * 0x9E3779B9 + key
    for mul in (0x7FEB352D, 0x846CA68B):  # two rounds of a 32-bit finalizer (xorshift-multiply)
      x = (x ^ x.rshift(16)) * mul
    return x ^ x.rshift(16)

  @staticmethod
  @_on_devices
  def rand(*shape: Any, **kwargs: Any) -> Tensor:
    """Uniform in [0, 1), in a float dtype (torch has no rand of ints: it raises "not implemented for 'Int'")."""
    shape = _new_shape(*shape)
    dtype = _random_float_dtype("rand", kwargs.pop("dtype", dtypes.default_float))
    device = Device.canonicalize(kwargs.pop("device", None))
    bits = Tensor._random_bits(prod(shape), device)
    # as many random bits as the dtype's significand holds, so that the value is exact in it and below 1 (24 bits cast to
    # bfloat16 rounded up to 1.0 about once in 550 draws)
    keep = min(dtypes.significand_bits(dtype), 24) if dtypes.is_float(dtype) else 24
    u = bits.rshift(32 - keep).cast(dtypes.float32) * (1.0 / (1 << keep))
    return Tensor(u.reshape(shape).cast(dtype).lazydata, device=device, **kwargs)

  @staticmethod
  @_on_devices
  def randn(*shape: Any, **kwargs: Any) -> Tensor:
    """Standard normal, by the Box-Muller transform of two uniforms; a float dtype, as rand."""
    shape = _new_shape(*shape)
    dtype = _random_float_dtype("randn", kwargs.pop("dtype", dtypes.default_float))
    device = Device.canonicalize(kwargs.pop("device", None))
    u = Tensor.rand(2, prod(shape), device=device)
    r = (1 - u[0]).log().mul(-2).sqrt()  # 1 - u is in (0, 1]: log is finite
    z = r * (u[1] * (2 * math.pi)).add(math.pi / 2).sin()
    return Tensor(z.reshape(shape).cast(dtype).lazydata, device=device, **kwargs)

  @staticmethod
  @_on_devices
  def uniform(*shape: Any, low: float = 0.0, high: float = 1.0, **kwargs: Any) -> Tensor:
    """Uniform in [low, high); low == high gives low (torch's uniform_)."""
    if not low <= high:  # (a NaN bound too)
      raise TgArgumentError(f"uniform_ expects to return a [from, to) range, but found from={low} > to={high} (as torch)")
    dtype = to_dtype(kwargs.pop("dtype", dtypes.default_float))
    return Tensor((Tensor.rand(*shape, device=kwargs.pop("device", None)) * (high - low) + low).cast(dtype).lazydata, **kwargs)

  @staticmethod
  @_on_devices
  def randint(*shape: Any, low: int = 0, high: int = 10, **kwargs: Any) -> Tensor:
    """Uniform integers in [low, high), as torch: random bits % (high - low) + low, in an unsigned integer as wide as
    the result (64 bits for 64-bit dtypes), wrapping. A range past 2^16 takes 64 random bits where the device has
    64-bit integers, so the modulo's bias stays below 2^-32 (with 32 bits, as torch's below 2^32, a range near 2^32
    draws its low values up to twice as often). A float dtype gets the integers of int64 (int32 without it)."""
    if isinstance(low, bool) or isinstance(high, bool) or not isinstance(low, int) or not isinstance(high, int):
      raise TypeError(f"randint's low and high must be ints, got {low!r} and {high!r}")
    if high <= low:
      raise TgArgumentError(f"randint needs low < high, got [{low}, {high})")
    dtype = to_dtype(kwargs.pop("dtype", dtypes.int32))
    device = Device.canonicalize(kwargs.pop("device", None))
    work = dtype if dtypes.is_int(dtype) else dtypes.int64 if is_dtype_supported(dtypes.int64, device) else dtypes.int32
    lowest, highest = (0, 1) if dtype == dtypes.bool else (dtypes.min(work), dtypes.max(work))
    if low < lowest:
      raise TgArgumentError(f"randint: low={low} is out of bounds for {dtype}")
    if high - 1 > highest:
      raise TgArgumentError(f"randint: high - 1 = {high - 1} is out of bounds for {dtype}")
    r, n = high - low, prod(argfix(*shape))
    words = 2 if r > 1 << 32 or (r > 1 << 16 and is_dtype_supported(dtypes.uint64, device)) else 1
    ut = dtypes.uint64 if words == 2 or work.itemsize == 8 else dtypes.uint32
    width = ut.itemsize * 8
    bits = Tensor._random_bits(n * words, device)
    u = (bits[:n].cast(ut).lshift(32) | bits[n:].cast(ut)) if words == 2 else bits.cast(ut)
    if r != 1 << width:  # (the whole range of ut: the bits themselves)
      u = u % r
    v = (u + low % (1 << width)).cast(work).cast(dtype)  # low's bits added in ut (wrapping), then ut's low bits as work
    return Tensor(v.reshape(argfix(*shape)).lazydata, device=device, **kwargs)

  @staticmethod
  @_on_devices
  def normal(*shape: Any, mean: float = 0.0, std: float = 1.0, **kwargs: Any) -> Tensor:
    """mean + std * randn; std 0 gives the mean (torch's normal)."""
    if not std >= 0:  # (a NaN std too)
      raise TgArgumentError(f"normal expects std >= 0.0, but found std {std} (as torch)")
    dtype = to_dtype(kwargs.pop("dtype", dtypes.default_float))
    return Tensor((Tensor.randn(*shape, device=kwargs.pop("device", None)) * std + mean).cast(dtype).lazydata, **kwargs)

  @staticmethod
  def scaled_uniform(*shape: Any, **kwargs: Any) -> Tensor:
    """Uniform in [-1, 1) scaled by 1/sqrt(numel)."""
    return Tensor.uniform(*shape, low=-1.0, high=1.0, **kwargs).mul(prod(argfix(*shape)) ** -0.5)

  @staticmethod
  def glorot_uniform(*shape: Any, **kwargs: Any) -> Tensor:
    s = argfix(*shape)
    # a shape with no elements has nothing to draw (torch's init is a no-op there): no bound to divide by its fans
    bound = math.sqrt(6 / (s[0] + prod(s[1:]))) if prod(s) else 0.0
    return Tensor.uniform(*s, low=-bound, high=bound, **kwargs)

  @staticmethod
  def kaiming_uniform(*shape: Any, a: float = 0.01, **kwargs: Any) -> Tensor:
    s = argfix(*shape)
    bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(prod(s[1:])) if prod(s) else 0.0
    return Tensor.uniform(*s, low=-bound, high=bound, **kwargs)

  @staticmethod
  def kaiming_normal(*shape: Any, a: float = 0.01, **kwargs: Any) -> Tensor:
    s = argfix(*shape)
    std = math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(prod(s[1:])) if prod(s) else 0.0
    return Tensor.normal(*s, mean=0.0, std=std, **kwargs)

  def multinomial(self, num_samples: int = 1, replacement: bool = False) -> Tensor:
    """Sample indices from the (unnormalized) weights in the last axis, as torch. With replacement, several samples:
    inverse transform of uniforms. Otherwise the k largest of w / Exp(1) (torch's way, the Gumbel-max trick): in the
    order of drawing one at a time, each drawn index then out, so the indices are distinct, the zero weights last.
    Weights that are negative, inf or NaN, or a row of zeros, raise RuntimeError when the samples are realized."""
    if self.ndim not in (1, 2):
      raise ShapeError(f"multinomial needs weights of 1 or 2 axes, got {self.shape}")
    if num_samples < 1:
      raise TgArgumentError(f"multinomial: cannot sample num_samples={num_samples} <= 0 samples")
    w = self.unsqueeze(0) if self.ndim == 1 else self
    w = w if dtypes.is_float(w.dtype) else w.cast(dtypes.default_float)
    n = _concrete(w.shape[1])
    if not replacement and num_samples > n:
      raise TgArgumentError(f"can't draw {num_samples} samples without replacement from {n} categories")
    if replacement and num_samples > 1:
      cdf = w.cumsum(1)
      cdf = cdf / cdf[:, -1:]
      u = Tensor.rand(w.shape[0], num_samples, 1, device=self.device)
      idx = (cdf.unsqueeze(1) < u).sum(2).cast(dtypes.int32).minimum(n - 1)  # rounding can put u past the last cdf
    else:
      e = -(1 - Tensor.rand(*w.shape, device=self.device)).log()  # Exp(1): 1 - u is in (0, 1]
      keys = (w > 0).where(w / e, -1.0)  # a zero weight below every other (w / 0 is inf: drawn first)
      idx = (keys.argmax(1, keepdim=True) if num_samples == 1 else keys.topk(num_samples, 1)[1]).cast(dtypes.int32)
    _check_weights(idx, w)
    return idx.squeeze(0) if self.ndim == 1 else idx

  def rand_like(self, **kwargs: Any) -> Tensor:
    return Tensor.rand(self.shape, **{"dtype": self.dtype, "device": self.device, **kwargs})

  def randn_like(self, **kwargs: Any) -> Tensor:
    return Tensor.randn(self.shape, **{"dtype": self.dtype, "device": self.device, **kwargs})

  # ---------- autograd ----------
  def _toposort(self) -> list[Tensor]:
    order: list[Tensor] = []
    seen: set[int] = set()
    stack: list[tuple[Tensor, bool]] = [(self, False)]
    while stack:
      t, expanded = stack.pop()
      if expanded:
        order.append(t)
        continue
      if id(t) in seen:
        continue
      seen.add(id(t))
      stack.append((t, True))
      if t._ctx is not None:
        stack.extend((p, False) for p in t._ctx.parents if id(p) not in seen)
    return order

  def backward(self, gradient: Tensor | None = None, retain_graph: bool = False) -> Tensor:
    """Add the gradient of self (times `gradient`; 1 for a scalar) to the .grad of each tensor in its graph that requires
    grad. As torch, the graph is released on the way (what its ops saved for the gradient is dropped: a training loop's
    last loss doesn't hold a step's activations), so a second backward through it raises: one that found nothing to do
    (tinygrad's) left the gradients silently short. retain_graph=True keeps it, and another backward adds the same
    gradients again."""
    if gradient is None:
      if self.shape != ():
        raise RuntimeError(f"backward() without a gradient needs a scalar (shape ()), this tensor has shape {self.shape}; "
                           "call .sum() first or pass gradient=")
      gradient = Tensor(1.0, dtype=self.dtype, device=self.device, requires_grad=False)
    if gradient.shape != self.shape:
      raise ShapeError(f"gradient shape {gradient.shape} does not match tensor shape {self.shape}")
    if self._ctx is None and not self.requires_grad:
      raise GradientError("this tensor does not require grad and has no graph: set requires_grad=True on an input (comparisons, "
                          "bitwise ops and integer division have no gradient: a result that depends on its inputs only through "
                          "them has none, as in torch)")
    order = self._toposort()
    if any(getattr(t, "_released", False) for t in order):  # (before any .grad changes)
      raise GradientError("Trying to backward through the graph a second time: an earlier backward() released it (what its ops "
                          "saved for the gradient is freed); give that one retain_graph=True to backward through it again")
    # this call's gradient of each tensor, apart from .grad: on a retained graph .grad also holds the earlier calls'
    grads: dict[int, Tensor] = {id(self): gradient}
    for t0 in reversed(order):
      if (g0 := grads.pop(id(t0), None)) is None:
        continue
      t0.grad = g0 if t0.grad is None else (t0.grad + g0)
      if (ctx := t0._ctx) is None:
        continue
      out = ctx.backward(g0.lazydata)
      for t, g in zip(ctx.parents, [out] if len(ctx.parents) == 1 else out):
        if g is None or not t.requires_grad:
          continue
        assert g.shape == t.shape, f"gradient shape {g.shape} != {t.shape} in {type(ctx).__name__}"
        gt = Tensor(g, device=t.device, requires_grad=False)
        grads[id(t)] = gt if (prev := grads.get(id(t))) is None else (prev + gt)
      if not retain_graph:
        t0._ctx, t0._released = None, True
    return self

  # ---------- movement ----------
  def _resolve_axis(self, axis: int, ndim: int | None = None) -> int:
    ndim = self.ndim if ndim is None else ndim
    if not -max(ndim, 1) <= axis < max(ndim, 1):
      raise AxisError(f"axis {axis} is out of range for a tensor with {ndim} dimensions")
    return axis + ndim if axis < 0 else axis

  def reshape(self, shape: Any, *args: sint | None) -> Tensor:
    """A view with the same elements in a new shape: one -1 is inferred, and None keeps that axis's size (tinygrad's)."""
    given = argfix(shape, *args)
    if any(s is None for s in given[self.ndim:]):
      raise AxisError(f"reshape {given}: None keeps an axis's size, and {self.shape} has only {self.ndim} axes")
    new_shape = tuple(self.shape[i] if s is None else s for i, s in enumerate(given))
    if new_shape.count(-1) > 1:
      raise TgArgumentError(f"only one dimension of {new_shape} can be -1")
    if -1 in new_shape:
      rest = _concrete(prod(s for s in new_shape if s != -1))
      if rest == 0 or _concrete(self.numel()) % rest:
        raise ShapeError(f"can't reshape {self.shape} to {new_shape}")
      new_shape = tuple(_concrete(self.numel()) // rest if s == -1 else s for s in new_shape)
    if any(isinstance(s, int) and s < 0 for s in new_shape) or _concrete(prod(new_shape)) != _concrete(self.numel()):
      raise ShapeError(f"can't reshape {self.shape} ({self.numel()} elements) to {new_shape}")
    return self if new_shape == self.shape else F.Reshape.apply(self, shape=new_shape)  # type: ignore[no-any-return]

  view = reshape

  def expand(self, shape: Any, *args: sint | None) -> Tensor:
    """Grow size-1 axes (and add leading ones) to `shape`; -1 or None keeps an axis's size."""
    new_shape = argfix(shape, *args)
    if len(new_shape) < self.ndim:
      raise ShapeError(f"can't expand {self.shape} to fewer dimensions {new_shape}")
    new_shape = tuple(s if ns == -1 or ns is None else ns for s, ns in zip((1,) * (len(new_shape) - self.ndim) + self.shape, new_shape))
    base = self.reshape((1,) * (len(new_shape) - self.ndim) + self.shape)
    for s, ns in zip(base.shape, new_shape):
      if s != ns and s != 1:
        raise ShapeError(f"can't expand {self.shape} to {new_shape}: only size-1 axes can grow")
    return base if new_shape == base.shape else F.Expand.apply(base, shape=new_shape)  # type: ignore[no-any-return]

  def permute(self, order: Any, *args: int) -> Tensor:
    order = tuple(self._resolve_axis(a) for a in argfix(order, *args))
    if sorted(order) != list(range(self.ndim)):
      raise AxisError(f"permute order {order} is not a permutation of {self.ndim} axes")
    return F.Permute.apply(self, order=order)  # type: ignore[no-any-return]

  def transpose(self, ax1: int = 1, ax2: int = 0) -> Tensor:
    order = list(range(self.ndim))
    a, b = self._resolve_axis(ax1), self._resolve_axis(ax2)
    if self.ndim == 0:
      return self  # dims 0 and -1 of a 0-d tensor (torch): nothing to swap
    order[a], order[b] = order[b], order[a]
    return self.permute(order)

  @property
  def T(self) -> Tensor: return self.transpose()

  def t(self) -> Tensor:
    """torch's t(): a matrix transposed; 0-d and 1-d tensors as they are."""
    if self.ndim > 2:
      raise TgArgumentError(f"t() expects a tensor of at most 2 dims, this one has shape {self.shape}: use transpose(a, b) or permute")
    return self if self.ndim < 2 else self.transpose()

  def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    if self.ndim == 0:
      return self.reshape(1)
    s, e = self._resolve_axis(start_dim), self._resolve_axis(end_dim)
    if s > e:  # as torch: the product over no axes would insert a size-1 axis
      raise TgArgumentError(f"flatten({start_dim}, {end_dim}) has invalid args: start_dim cannot come after end_dim")
    return self.reshape(self.shape[:s] + (prod(self.shape[s:e + 1]),) + self.shape[e + 1:])

  def squeeze(self, dim: int | Sequence[int] | None = None) -> Tensor:
    """Drop size-1 axes: all of them, or those of `dim` (an int, or a tuple as torch's) that have size 1. A 0-d tensor
    takes dim 0 or -1 and stays as it is."""
    if dim is None:
      return self.reshape(tuple(s for s in self.shape if s != 1))
    axes = {self._resolve_axis(d) for d in ((dim,) if isinstance(dim, int) else dim)}
    if not self.ndim:
      return self
    return self.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes or s != 1))

  def unsqueeze(self, dim: int) -> Tensor:
    d = self._resolve_axis(dim, self.ndim + 1)
    return self.reshape(self.shape[:d] + (1,) + self.shape[d:])

  def pad(self, padding: Sequence[tuple[sint, sint] | None], value: float = 0.0, mode: str = "constant") -> Tensor:
    """Pad each axis by (before, after); None leaves an axis alone. `mode` is torch's F.pad's: 'constant' fills with
    `value`; 'reflect' mirrors the axis about its end elements, 'replicate' repeats them, 'circular' wraps around."""
    if len(padding) != self.ndim:
      raise ShapeError(f"pad needs one (before, after) per axis: got {len(padding)} for {self.ndim} axes")
    _check_pad_mode(mode, value)
    # symbolic amounts stay symbolic (a cat along a symbolic axis pads by it); ints are checked here
    arg = tuple((0, 0) if p is None else (p[0] if isinstance(p[0], Node) else int(p[0]), p[1] if isinstance(p[1], Node) else int(p[1]))
                for p in padding)
    if any(_concrete(b) < 0 or _concrete(a) < 0 for b, a in arg):
      raise TgArgumentError(f"negative padding {arg}: use shrink or slicing to cut")
    if all(p == (0, 0) for p in arg):
      return self
    if mode != "constant":
      x = self
      for axis, (b, a) in enumerate(arg):
        x = x._pad_edges(axis, _concrete(b), _concrete(a), mode) if (b, a) != (0, 0) else x
      return x
    ret = F.Pad.apply(self, arg=arg)
    if value == 0:
      return ret  # type: ignore[no-any-return]
    valid = F.Pad.apply(Tensor.ones(self.shape, dtype=dtypes.bool, device=self.device), arg=arg)
    return valid.where(ret, value)  # type: ignore[no-any-return]

  def _pad_edges(self, axis: int, before: int, after: int, mode: str) -> Tensor:
    """Pad one axis by copies of its own elements (pad's modes other than 'constant'), with torch's limits: a reflection
    shorter than the axis, a wrap no longer than it, something to replicate."""
    n = _concrete(self.shape[axis])
    if mode == "reflect" and max(before, after) >= n:
      raise TgArgumentError(f"Padding size should be less than the corresponding input dimension, but got: padding ({before}, {after}) "
                            f"at dimension {axis} of input {list(self.shape)} (reflect, as torch)")
    if mode == "circular" and max(before, after) > n:
      raise TgArgumentError(f"Padding value causes wrapping around more than once: padding ({before}, {after}) at dimension {axis} "
                            f"of input {list(self.shape)} (circular, as torch)")
    if n == 0:
      raise TgArgumentError(f"{mode} padding needs non-zero dimensions: dimension {axis} of input {list(self.shape)} is empty (as torch)")
    def part(start: int, stop: int) -> Tensor:
      return self.shrink(tuple((start, stop) if i == axis else None for i in range(self.ndim)))
    if mode == "reflect":  # the elements next to each end, mirrored (the end itself isn't repeated)
      left, right = part(1, before + 1).flip(axis), part(n - 1 - after, n - 1).flip(axis)
    elif mode == "replicate":
      left, right = part(0, 1)._repeat_axis(axis, before), part(n - 1, n)._repeat_axis(axis, after)
    else:  # circular: the other end's elements
      left, right = part(n - before, n), part(0, after)
    return self._stitch(axis, left, right)

  def _repeat_axis(self, axis: int, times: int) -> Tensor:
    return self.expand(tuple(times if i == axis else s for i, s in enumerate(self.shape)))

  def _stitch(self, axis: int, left: Tensor, right: Tensor) -> Tensor:
    """left, self and right joined along `axis`, each element taken from one of them by a where: exact, -0.0 included
    (cat adds zero-padded pieces, and -0.0 + 0.0 is 0.0)."""
    b, n, a = (_concrete(t.shape[axis]) for t in (left, self, right))
    def placed(t: Tensor, start: int) -> Tensor:
      return t.pad(tuple((start, b + n + a - start - _concrete(t.shape[axis])) if i == axis else None for i in range(self.ndim)))
    def region(start: int, size: int) -> Tensor:  # True on [start, start + size) along the axis: a mask the kernel computes
      return placed(Tensor.ones(tuple(size if i == axis else 1 for i in range(self.ndim)), dtype=dtypes.bool, device=self.device), start)
    out = placed(self, b)
    out = region(0, b).where(placed(left, 0), out) if b else out
    return region(b + n, a).where(placed(right, b + n), out) if a else out

  def shrink(self, arg: Sequence[tuple[sint, sint] | None]) -> Tensor:
    if len(arg) != self.ndim:
      raise ShapeError(f"shrink needs one (start, end) per axis: got {len(arg)} for {self.ndim} axes")
    narg = tuple((0, s) if a is None else a for a, s in zip(arg, self.shape))
    for (b, e), s in zip(narg, self.shape):
      if any(isinstance(x, Node) and any(v.val is None for v in x.vars()) for x in (b, e, s)):
        continue  # an unbound Variable: checked when it is bound (as tinygrad, which takes these shrinks)
      if not 0 <= _concrete(b) <= _concrete(e) <= _concrete(s):
        raise ShapeError(f"shrink {narg} is out of bounds for shape {self.shape}")
    return self if narg == tuple((0, s) for s in self.shape) else F.Shrink.apply(self, arg=narg)  # type: ignore[no-any-return]

  def flip(self, axis: int | Sequence[int], *args: int) -> Tensor:
    axes = tuple(self._resolve_axis(a) for a in argfix(axis, *args))
    if len(set(axes)) != len(axes):
      raise AxisError(f"flip axes {argfix(axis, *args)} name axis {next(a for a in axes if axes.count(a) > 1)} twice")
    return F.Flip.apply(self, axis=axes)  # type: ignore[no-any-return]

  def repeat(self, repeats: Sequence[int], *args: int) -> Tensor:
    """Tile the tensor `repeats[i]` times along each axis (torch.Tensor.repeat)."""
    reps = argfix(repeats, *args)
    if len(reps) < self.ndim:
      raise ShapeError(f"repeat needs at least one count per axis: {reps} for shape {self.shape}")
    base = self.reshape((1,) * (len(reps) - self.ndim) + self.shape)
    interleaved = tuple(x for s in base.shape for x in (1, s))
    tiled = tuple(x for r, s in zip(reps, base.shape) for x in (r, s))
    return base.reshape(interleaved).expand(tiled).reshape(tuple(r * s for r, s in zip(reps, base.shape)))

  def _resize_axis(self, axis: int, n: int) -> Tensor:
    """Cut or zero-pad `axis` to length n."""
    s = self.shape[axis]
    assert isinstance(s, int)
    if n <= s:
      return self.shrink(tuple((0, n) if i == axis else None for i in range(self.ndim)))
    return self.pad(tuple((0, n - s) if i == axis else None for i in range(self.ndim)))

  def pad2d(self, padding: Sequence[int], value: float = 0.0, mode: str = "constant") -> Tensor:
    """Pad the last len(padding)//2 axes; padding is (left, right, top, bottom, ...) from the last axis back, as torch's
    F.pad, and so are `mode` and a negative amount, which crops."""
    if len(padding) % 2 or len(padding) // 2 > self.ndim:
      raise ShapeError(f"pad2d needs (before, after) pairs for at most {self.ndim} axes, got {padding}")
    _check_pad_mode(mode, value)
    pairs = [(padding[2 * i], padding[2 * i + 1]) for i in range(len(padding) // 2)][::-1]
    keep: list[tuple[sint, sint] | None] = [None] * (self.ndim - len(pairs))
    grow = keep + [(max(b, 0), max(a, 0)) for b, a in pairs]
    if not any(b < 0 or a < 0 for b, a in pairs):
      return self.pad(grow, value, mode)
    # a negative amount crops. reflect and replicate read the uncropped axis, as torch's (crop after padding); circular
    # wraps the cropped one (torch's too)
    spatial = self.shape[-len(pairs):]
    if mode in ("reflect", "replicate") and any(_concrete(s) + b + a <= 0 for (b, a), s in zip(pairs, spatial)):
      raise TgArgumentError(f"input {list(self.shape)} is too small for the padding {list(padding)}: an output axis would have no element "
                            f"({mode}, as torch)")
    if mode in ("reflect", "replicate"):
      x = self.pad(grow, value, mode)
      return x.shrink(keep + [(-min(b, 0), s - (-min(a, 0))) for (b, a), s in zip(pairs, x.shape[-len(pairs):])])
    x = self.shrink(keep + [(-min(b, 0), s - (-min(a, 0))) for (b, a), s in zip(pairs, spatial)])
    return x.pad(grow, value, mode)

  def tril(self, diagonal: int = 0) -> Tensor:
    """Keep the elements on and below the `diagonal`-th diagonal of the last two axes; zero the rest."""
    return self._tri(diagonal, lower=True)

  def triu(self, diagonal: int = 0) -> Tensor:
    return self._tri(diagonal, lower=False)

  def _tri(self, diagonal: int, lower: bool) -> Tensor:
    if self.ndim < 2:  # as torch (the last two axes were indexed: IndexError)
      raise TgArgumentError(f"{'tril' if lower else 'triu'}: input tensor must have at least 2 dimensions, got shape {self.shape}")
    n, m = _concrete(self.shape[-2]), _concrete(self.shape[-1])
    rows = Tensor.arange(n, device=self.device).reshape(n, 1)
    cols = Tensor.arange(m, device=self.device).reshape(1, m)
    keep = (cols <= rows + diagonal) if lower else (cols >= rows + diagonal)
    return keep.where(self, False if self.dtype == dtypes.bool else (0 if not dtypes.is_float(self.dtype) else 0.0))

  def squeeze_axes(self, axes: Sequence[int]) -> Tensor:
    """Drop the given (size-1) axes."""
    return self.reshape(tuple(s for i, s in enumerate(self.shape) if i not in set(axes)))

  def unflatten(self, dim: int, sizes: Sequence[int]) -> Tensor:
    d = self._resolve_axis(dim)
    return self.reshape(self.shape[:d] + tuple(sizes) + self.shape[d + 1:])

  @staticmethod
  def _join_args(name: str, first: Any, args: tuple[Any, ...], dim: int) -> tuple[list[Tensor], int]:
    """The tensors and dim of cat and stack, called tinygrad's way (`a.cat(b, c, dim=1)`, `Tensor.cat(a, b, dim=1)`)
    or torch's (`Tensor.cat([a, b], 1)`, a list or tuple and maybe the dim after it)."""
    if isinstance(first, Tensor):
      tensors, rest = [first, *args], []
    else:
      tensors, rest = list(first), list(args)
      if len(rest) == 1 and isinstance(rest[0], int) and not isinstance(rest[0], bool):
        dim, rest = rest[0], []
    if rest or not all(isinstance(t, Tensor) for t in tensors):
      raise TypeError(f"{name} takes tensors (a.{name}(b, c, dim=0), Tensor.{name}(a, b, dim=0)) or one list of them (Tensor.{name}([a, b], 0))")
    if not tensors:
      raise TgArgumentError(f"{name} needs at least one tensor")
    return tensors, dim

  def cat(self: Any, *args: Any, dim: int = 0) -> Tensor:
    """Join along `dim`: each tensor is padded to the full length at its place, and the pads summed. tinygrad's forms
    `a.cat(b, c, dim=1)` and `Tensor.cat(a, b, dim=1)`, and torch's `Tensor.cat([a, b], 1)` with a list or tuple."""
    ts, dim = Tensor._join_args("cat", self, args, dim)
    x = ts[0]
    d = x._resolve_axis(dim)
    if any(t.ndim == 0 for t in ts):
      raise ShapeError(f"cat: a 0-d tensor can't be joined along an axis (shapes {[t.shape for t in ts]}): use stack, or reshape it to (1,)")
    for t in ts:
      if t.ndim != x.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, x.shape)) if i != d):
        raise ShapeError(f"cat along axis {d}: shapes {[t.shape for t in ts]} differ outside that axis")
    dt = least_upper_dtype(*[t.dtype for t in ts])
    sizes = [t.shape[d] for t in ts]  # symbolic sizes stay symbolic: the result's axis is their sum, as tinygrad's
    total: sint = sum(sizes)
    out: Tensor | None = None
    start: sint = 0
    for t, n in zip(ts, sizes):
      piece = t.cast(dt).pad(tuple((start, total - start - n) if i == d else None for i in range(x.ndim)))
      out = piece if out is None else out + piece
      start += n
    assert out is not None
    return out

  def stack(self: Any, *args: Any, dim: int = 0) -> Tensor:
    """Join tensors of one shape along a new axis `dim`. tinygrad's forms `a.stack(b, c, dim=1)` and
    `Tensor.stack(a, b, dim=1)`, and torch's `Tensor.stack([a, b], 1)` with a list or tuple."""
    tensors, dim = Tensor._join_args("stack", self, args, dim)
    d = tensors[0]._resolve_axis(dim, tensors[0].ndim + 1)
    ts = [t.unsqueeze(d) for t in tensors]
    return ts[0].cat(*ts[1:], dim=d)

  def split(self, sizes: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
    """Pieces of `sizes` along `dim` (an int: equal pieces of that size, the last maybe smaller)."""
    d = self._resolve_axis(dim)
    if self.ndim == 0:
      raise TgArgumentError("split and chunk take a tensor of at least one dimension, not a 0-d one")
    n = _concrete(self.shape[d])
    if isinstance(sizes, int):
      if sizes <= 0:
        raise TgArgumentError(f"split size must be positive, got {sizes}")
      sizes = [min(sizes, n - i) for i in range(0, n, sizes)] or [0]
    if sum(sizes) != n:
      raise ShapeError(f"split sizes {list(sizes)} don't add up to {n}, the length of axis {d}")
    out, start = [], 0
    for s in sizes:
      out.append(self.shrink(tuple((start, start + s) if i == d else None for i in range(self.ndim))))
      start += s
    return tuple(out)

  def chunk(self, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    if not isinstance(chunks, int) or chunks < 1:
      raise TgArgumentError(f"chunk needs a number of chunks of at least 1, not {chunks!r}")
    d = self._resolve_axis(dim)
    if self.ndim == 0:
      raise TgArgumentError("split and chunk take a tensor of at least one dimension, not a 0-d one")
    n = _concrete(self.shape[d])
    if n == 0:  # an empty axis: `chunks` empty pieces, as torch and tinygrad
      return self.split([0] * chunks, dim)
    return self.split(-(-n // chunks), dim)

  # ---------- elementwise ----------
  def _broadcasted(self, y: Tensor | Scalar, reverse: bool = False) -> tuple[Tensor, Tensor]:
    x: Tensor = self
    if not isinstance(y, Tensor):
      if type(y) not in (float, int, bool) and type(y).__module__ == "numpy" and getattr(y, "ndim", None) == 0:
        # a numpy scalar acts as the Python number (torch); checked after the common case, a Python number, on this hot path
        y = y.item()  # type: ignore[union-attr]
      if not isinstance(y, (bool, int, float)):
        raise TypeError(f"can't combine a Tensor with {type(y).__name__}")
      # a Python scalar takes the tensor's dtype unless its kind is wider (float with an int tensor, int with bool)
      xdt = x.lazydata.dtype
      if type(y) is float and xdt in PLAIN_FLOATS:  # (the common case first: a tuple's `in` tries identity first)
        dt = xdt
      elif isinstance(y, float) and not dtypes.is_float(xdt):
        dt = dtypes.default_float
      elif isinstance(y, int) and not isinstance(y, bool) and xdt == dtypes.bool:
        dt = dtypes.default_int
      else:
        dt = xdt
      # a constant already of x's shape and of the result's dtype (least_upper_dtype(x.dtype, dt) is dt): no reshape,
      # expand or cast to build, which are most of the Python an op with a scalar costs
      if dt is not xdt:
        x = x.cast(dt)
      c = Tensor.__new__(Tensor)  # (what Tensor(lb) makes, without its checks: this runs for every op with a scalar)
      lb = x.lazydata
      c.lazydata = LazyBuffer.operand(y, lb.shape, dt, lb.device) if type(lb) is LazyBuffer else lb.const(y)
      c._requires_grad, c.grad, c._ctx = None, None, None
      return (c, x) if reverse else (x, c)
    if y.device != x.device:
      raise RuntimeError(f"tensors are on different devices: {x.device} and {y.device}; move one with .to()")
    if reverse:
      x, y = y, x
    if (out_dtype := x.dtype) is not y.dtype:  # (the same dtype, as nearly always: no promotion to work out, no cast)
      out_dtype = least_upper_dtype(out_dtype, y.dtype)
      x, y = x.cast(out_dtype), y.cast(out_dtype)
    shape = _broadcast_shape(x.shape, y.shape)
    return x._broadcast_to(shape), y._broadcast_to(shape)

  def _broadcast_to(self, shape: tuple[sint, ...]) -> Tensor:
    """self grown to `shape` (leading axes added, size-1 axes grown), as numpy broadcasts: the reshape and the expand
    are applied directly after one check, where reshape() and expand() each checked their arguments again (which made
    an op with a 0-d tensor, Adam's per-step scalars, cost four times another op)."""
    if (own := self.shape) == shape:
      return self
    lead = len(shape) - len(own)
    if lead < 0 or any(s != n and s != 1 for s, n in zip(own, shape[lead:])):
      raise ShapeError(f"can't broadcast {own} to {shape}: only size-1 axes can grow")
    base = F.Reshape.apply(self, shape=(1,) * lead + own) if lead else self
    return base if base.shape == shape else F.Expand.apply(base, shape=shape)  # type: ignore[no-any-return]

  def _half_with_scalar(self, y: object, exact_ok: bool = True) -> bool:
    """Whether `self * y` or `self / y` must be computed in float32 and rounded to self's half dtype once: y a Python
    float and self float16/bfloat16, where the half dtype doesn't hold y exactly (exact_ok=False: always). torch's
    mul and div keep such a scalar in float32: `float16(0.001) * 1e5` is 100.06, where rounding 1e5 to float16 first
    gave inf. (torch's add and sub round the scalar to the half dtype, `float16(-65000) + 1e5` is inf there: so here.)"""
    # (identity tests: this runs for every op with a float scalar, and `in` a tuple would call DType.__eq__ for float32)
    if type(y) is not float or ((dt := self.lazydata.dtype) is not dtypes.float16 and dt is not dtypes.bfloat16):
      return False
    return y == y and (not exact_ok or round_float(y, dt) != y)

  def add(self, x: Tensor | Scalar, reverse: bool = False) -> Tensor: return F.Add.apply(*self._broadcasted(x, reverse))  # type: ignore[no-any-return]

  def mul(self, x: Tensor | Scalar, reverse: bool = False) -> Tensor:
    if self._half_with_scalar(x):
      return self.cast(dtypes.float32).mul(x, reverse).cast(self.dtype)
    return F.Mul.apply(*self._broadcasted(x, reverse))  # type: ignore[no-any-return]

  def sub(self, x: Tensor | Scalar, reverse: bool = False) -> Tensor:
    a, b = self._broadcasted(x, reverse)
    return a + (-b)

  def div(self, x: Tensor | Scalar, reverse: bool = False, rounding_mode: str | None = None) -> Tensor:
    """True division; rounding_mode "trunc" or "floor" divides and rounds toward zero or down (as torch)."""
    if rounding_mode == "trunc":
      return self.idiv(x, reverse)
    if rounding_mode == "floor":
      return self.floordiv(x, reverse)
    if rounding_mode is not None:
      raise TgArgumentError(f"rounding_mode must be None, 'trunc' or 'floor', not {rounding_mode!r}")
    if self._half_with_scalar(x, exact_ok=False):  # a half reciprocal of even an exact scalar (1/3) is 1e-3 off
      return self.cast(dtypes.float32).div(x, reverse).cast(self.dtype)
    a, b = self._broadcasted(x, reverse)
    if not dtypes.is_float(a.dtype):
      a, b = a.cast(least_upper_float(a.dtype)), b.cast(least_upper_float(b.dtype))
    return a * b.reciprocal()

  def _quotient(self, x: Tensor | Scalar, reverse: bool, floor: bool) -> tuple[Tensor, Tensor, Tensor]:
    """(a, b, q): the operands, broadcast, and their quotient rounded down (floor) or toward zero. Floats divide and
    round; ints divide as C (truncating) and, to floor, step down where that is one above the floor. An integer zero
    divisor raises ZeroDivisionError now (a Python 0 or a constant) or when the result is realized (see tg.divcheck)."""
    a, b = self._broadcasted(x, reverse)
    if dtypes.is_float(a.dtype):
      return a, b, ((a / b).floor() if floor else (a / b).trunc())
    divisor = self if reverse else x
    if not isinstance(divisor, Tensor) and divisor == 0:
      raise ZeroDivisionError("integer division or modulo by zero")
    q = F.IDiv.apply(a, b)
    if isinstance(divisor, Tensor):
      d = divisor.cast(b.dtype)
      if d.lazydata.is_unrealized_const():
        if d.lazydata.const_value == 0:
          raise ZeroDivisionError("integer division or modulo by zero")
      else:
        flag = (d == 0).any().contiguous()
        # every result below is computed from q; a sharded q is guarded part by part (the flag is on every device)
        flags = flag.lazydata.to_axis(None).lbs if isinstance(flag.lazydata, MultiLazyBuffer) else [flag.lazydata]
        for qp, fp in zip(_parts([q.lazydata]), flags):
          divcheck.guard(qp, fp)
    if floor and not (dtypes.is_unsigned(a.dtype) or a.dtype == dtypes.bool):
      # C's quotient is one above the floor where the remainder is nonzero and its sign differs from the divisor's
      r = a - q * b  # C's %, from the quotient: one integer division, not two (CPUs have no vector integer division)
      q = q - ((r != 0) & ((r < 0) != (b < 0))).cast(q.dtype)
    return a, b, q

  def idiv(self, x: Tensor | Scalar, reverse: bool = False) -> Tensor:
    """Integer division rounding toward zero (C's /, torch's div(rounding_mode="trunc")); `//` floors."""
    return self._quotient(x, reverse, floor=False)[2]

  def floordiv(self, x: Tensor | Scalar, reverse: bool = False) -> Tensor:
    """`//`: division rounding down, as Python, numpy and torch (-7 // 2 is -4); floats as torch, from the exact
    remainder (tg.float_mod)."""
    if (exact := self._exact_float_mod(x, reverse)) is not None:
      a, b, m, out = exact
      return self._zero_grad(float_mod.floordiv(a, m, b).cast(out))
    return self._quotient(x, reverse, floor=True)[2]

  def mod(self, x: Tensor | Scalar, reverse: bool = False) -> Tensor:
    """`%`: the remainder of floor division, with the divisor's sign (Python's %, torch.remainder); floats exactly,
    as torch (tg.float_mod)."""
    if (exact := self._exact_float_mod(x, reverse)) is not None:
      a, b, m, out = exact
      return _with_grad(float_mod.remainder(a, m, b).cast(out), [a, b], lambda: [a.ones_like(), -float_mod.floordiv(a, m, b)])
    a, b, q = self._quotient(x, reverse, floor=True)
    return a - q * b

  def fmod(self, x: Tensor | Scalar) -> Tensor:
    """The remainder of truncated division, with the dividend's sign (C's fmod, torch.fmod); floats exactly, as torch."""
    if (exact := self._exact_float_mod(x, False)) is not None:
      a, b, m, out = exact
      return _with_grad(m.cast(out), [a, b], lambda: [a.ones_like(), -(a / b).trunc()])
    a, b, q = self._quotient(x, False, floor=False)
    return a - q * b

  def _exact_float_mod(self, x: Tensor | Scalar, reverse: bool) -> tuple[Tensor, Tensor, Tensor, DType] | None:
    """(a, b, fmod(a, b), the result's dtype) for float operands that get the exact remainder here (float32 and the half
    floats, computed in float32, on a device with float64: tg.float_mod); None for the others."""
    a, b = self._broadcasted(x, reverse)
    if not float_mod.exact(a):
      return None
    out = a.dtype
    a, b = a.cast(dtypes.float32), b.cast(dtypes.float32)
    return a, b, float_mod.fmod(a.detach(), b.detach(), out), out

  def neg(self) -> Tensor:
    return self.logical_not() if self.dtype == dtypes.bool else F.Neg.apply(self)  # type: ignore[no-any-return]

  def logical_not(self) -> Tensor: return F.Neq.apply(*self.cast(dtypes.bool)._broadcasted(True))  # type: ignore[no-any-return]
  def _float_math(self, fn: Callable[[Tensor], Tensor]) -> Tensor:
    """fn(self) as a float: ints as the default float; float16 and bfloat16 computed in float32 and rounded once at the
    end, as torch computes them (with every step rounded to half, float16 exp was 3 ulp off and gelu(-3.5) 39%)."""
    return fn(self._upcast_half()).cast(self._out_float())  # (the float a reduction computes in, and its result's)

  def reciprocal(self) -> Tensor: return self._float_math(F.Reciprocal.apply)
  def exp(self) -> Tensor: return self._float_math(F.Exp.apply)
  def log(self) -> Tensor: return self._float_math(F.Log.apply)
  def sqrt(self) -> Tensor: return self._float_math(F.Sqrt.apply)
  def sin(self) -> Tensor: return self._float_math(F.Sin.apply)
  def relu(self) -> Tensor: return F.Relu.apply(self)  # type: ignore[no-any-return]
  def sigmoid(self) -> Tensor: return self._float_math(F.Sigmoid.apply)
  def square(self) -> Tensor: return self * self

  def abs(self) -> Tensor:
    if dtypes.is_unsigned(self.dtype) or self.dtype == dtypes.bool:  # (-x of an unsigned int wraps: relu(-x) isn't 0)
      return self
    if not dtypes.is_float(self.dtype):  # the minimum stays itself, as torch's (it has no positive twin)
      return (self < 0).where(-self, self)
    return self.relu() + (-self).relu()

  def sign(self) -> Tensor:
    if self.dtype == dtypes.bool:
      return self
    return self._zero_grad((self > 0).cast(self.dtype) - (self < 0).cast(self.dtype))

  def exp2(self) -> Tensor: return self._float_math(lambda x: (x * math.log(2)).exp())
  def log2(self) -> Tensor: return self._float_math(lambda x: x.log() / math.log(2))
  def rsqrt(self) -> Tensor: return self._float_math(lambda x: x.sqrt().reciprocal())
  def tan(self) -> Tensor: return self._float_math(lambda x: x.sin() / x.cos())
  def lerp(self, end: Tensor | Scalar, weight: Tensor | Scalar) -> Tensor: return self + (end - self) * weight
  def isnan(self) -> Tensor: return self != self

  def isinf(self, detect_positive: bool = True, detect_negative: bool = True) -> Tensor:
    return (self == math.inf) * detect_positive + (self == -math.inf) * detect_negative

  def isfinite(self) -> Tensor: return (self.isinf() | self.isnan()).logical_not()

  def _zero_grad(self, value: Tensor) -> Tensor:
    """`value` (a step function of self: a rounding, the sign) with torch's gradient for it: zero everywhere."""
    return Tensor.ones(self.shape, dtype=dtypes.bool, device=self.device).where(value.detach(), self * 0)

  def trunc(self) -> Tensor:
    if not dtypes.is_float(self.dtype):
      return self
    big = 2.0 ** (52 if self.dtype == dtypes.float64 else 23)  # floats this large are already integers
    # below 2**23 an int32 holds every value: int64 only for float64 (some devices have no int64: missing_dtypes)
    as_int = self._zero_signed_as_self(self.cast(dtypes.int64 if self.dtype == dtypes.float64 else dtypes.int32).cast(self.dtype))
    return self._zero_grad((self.abs() < big).where(as_int, self))

  def _zero_signed_as_self(self, r: Tensor) -> Tensor:
    """r (a rounding of self) with self's sign where it is zero, as C's and torch's: trunc(-0.5), ceil(-0.4) and
    round(-0.4) are -0.0 (an integer cast has no -0, and x + 0.5 rounds the sign away)."""
    return (r == 0).where(_signbit(self).where(-0.0, 0.0), r)

  def floor(self) -> Tensor:
    t = self.trunc()
    return self._zero_grad((t > self).where(t - 1, t)) if dtypes.is_float(self.dtype) else self

  def ceil(self) -> Tensor:
    t = self.trunc()
    return self._zero_grad((t < self).where(t + 1, t)) if dtypes.is_float(self.dtype) else self

  def round(self) -> Tensor:
    """Round half to even, as torch and numpy."""
    if not dtypes.is_float(self.dtype):
      return self
    f = (self + 0.5).floor()
    tie = (f - self) == 0.5
    odd = (f * 0.5).floor() * 2 != f
    big = 2.0 ** (dtypes.significand_bits(self.dtype) - 1)
    # floats this large are already integers, and x + 0.5 would round (8388609 + 0.5 is 8388610 in float32)
    return self._zero_grad((self.abs() < big).where(self._zero_signed_as_self((tie & odd).where(f - 1, f)), self))

  def maximum(self, x: Tensor | Scalar) -> Tensor:
    a, b = self._broadcasted(x)
    if not dtypes.is_float(a.dtype):
      return (a < b).detach().where(b, a)
    # b where a < b or b is NaN (a NaN in a already stays): NaN from either side, as torch; ties share the gradient
    return ((a < b) | (b != b)).detach().where(b, (a == b).detach().where((a + b) * 0.5, a))

  def minimum(self, x: Tensor | Scalar) -> Tensor:
    a, b = self._broadcasted(x)
    if not dtypes.is_float(a.dtype):  # (-x wraps for unsigned ints and at a signed int's minimum)
      return (b < a).detach().where(b, a)
    return -((-a).maximum(-b))

  def clip(self, min_: Tensor | Scalar | None = None, max_: Tensor | Scalar | None = None) -> Tensor:
    """Clamp into [min_, max_] (either may be None: no bound); the gradient passes where the input is inside, bounds
    included. A min above the max gives the max everywhere, with no gradient (as torch and tinygrad). Tensor bounds
    broadcast, as torch's and tinygrad's (see _clip_tensors)."""
    if min_ is None and max_ is None:
      raise TgArgumentError("clip needs at least one of min_ and max_")
    if isinstance(min_, Tensor) or isinstance(max_, Tensor):
      return self._clip_tensors(min_, max_)
    if any(isinstance(b, float) and b != b for b in (min_, max_)):  # a NaN bound: NaN everywhere, as torch (a compare ignored it)
      return self._zero_grad(Tensor.full(self.shape, math.nan, device=self.device).cast(least_upper_dtype(self.dtype, dtypes.default_float)))
    if dtypes.is_int(self.dtype):  # an int bound in the tensor's dtype, as torch: wrapped if it was compared wrapped
      min_, max_ = (self._int_bound(b) for b in (min_, max_))
    if min_ is not None and max_ is not None and min_ > max_:  # (an int max keeps an integer tensor's dtype: uint8 stays uint8)
      dt = self.dtype if dtypes.is_int(self.dtype) and isinstance(max_, int) else least_upper_dtype(self.dtype, dtypes.from_py(max_))
      return self._zero_grad(Tensor.full(self.shape, max_, device=self.device).cast(dt))
    ret = self if min_ is None else (self < min_).where(min_, self)
    return ret if max_ is None else (self > max_).where(max_, ret)

  def _int_bound(self, b: Scalar | None) -> Scalar | None:
    """A scalar int bound of an integer tensor's clip in its dtype: torch converts it, letting a negative one wrap into an
    unsigned dtype (-1 -> 255) and refusing any other that doesn't fit (uint8 at 256 clamped to 0, int8 at -129 to 127)."""
    if not isinstance(b, int) or isinstance(b, bool):
      return b
    lo, hi = dtypes.min(self.dtype), dtypes.max(self.dtype)
    if b > hi or b < (-hi if dtypes.is_unsigned(self.dtype) else lo):
      raise TgArgumentError(f"clip bound {b} cannot be converted to type {self.dtype} without overflow")
    return dtypes.as_const(b, self.dtype)

  def _clip_tensors(self, min_: Tensor | Scalar | None, max_: Tensor | Scalar | None) -> Tensor:
    """clip with a tensor bound, elementwise as torch's clamp: min(max(x, lo), hi) over the three broadcast together
    and promoted to one dtype (a scalar bound takes the dtype it would in x + bound), NaN where any of them is NaN. The
    gradient is torch's: to x where lo <= x <= hi, to lo where x < lo < hi, to hi where x > hi or hi < lo, and to none
    where x < lo == hi."""
    x = self
    lo = min_ if min_ is None or isinstance(min_, Tensor) else x._broadcasted(min_)[1]
    hi = max_ if max_ is None or isinstance(max_, Tensor) else x._broadcasted(max_)[1]
    if lo is not None and hi is not None:
      out = ((x > hi) | (hi < lo)).where(hi, hi.detach())
      out = ((x < lo) & (lo < hi)).where(lo, out)
      out = ((x >= lo) & (x <= hi)).where(x, out)
    elif lo is not None:
      out = (x < lo).where(lo, x)
    else:
      assert hi is not None
      out = (x > hi).where(hi, x)
    if not dtypes.is_float(out.dtype):
      return out
    nan = x.isnan()
    for b in (lo, hi):
      nan = nan if b is None else nan | b.isnan()
    return nan.where(math.nan, out)

  def clamp(self, min: Tensor | Scalar | None = None, max: Tensor | Scalar | None = None) -> Tensor:
    """torch's name (and argument names) for clip."""
    return self.clip(min, max)

  def rshift(self, bits: Tensor | int, reverse: bool = False) -> Tensor:
    """self >> bits, arithmetic for signed dtypes. As torch: by the bit width or more, or by a negative amount, the
    result is 0, or -1 for a negative signed value."""
    from tg.ops import BinaryOps
    return self._shift(BinaryOps.SHR, bits, reverse)

  def lshift(self, bits: Tensor | int, reverse: bool = False) -> Tensor:
    """self << bits, wrapping. As torch: by the bit width or more, or by a negative amount, the result is 0."""
    from tg.ops import BinaryOps
    return self._shift(BinaryOps.SHL, bits, reverse)

  def _shift(self, op: Any, bits: Tensor | int, reverse: bool = False) -> Tensor:
    # a shift by the bit width or more (or by a negative amount) is undefined in C and in compiler IRs, and some shading
    # languages take the amount mod the width: such amounts are settled here, for every device, and the shift ops
    # only ever see 0 .. width-1
    from tg.ops import BinaryOps
    if not isinstance(bits, Tensor) and not reverse:
      if type(bits).__module__ == "numpy" and getattr(bits, "ndim", None) == 0:
        bits = bits.item()  # type: ignore[attr-defined]
      if not isinstance(bits, int):
        raise TypeError(f"a shift amount must be an int or an integer Tensor, not {type(bits).__name__}")
      if not dtypes.is_int(self.dtype):
        raise DTypeError(f"bit shifts need an integer tensor, not {self.dtype}")
      lb, width = self.lazydata, self.dtype.itemsize * 8
      if not 0 <= bits < width:  # all bits shifted out: 0, or the sign everywhere (a shift by width - 1)
        if op is BinaryOps.SHL or dtypes.is_unsigned(self.dtype):
          return Tensor(lb.const(0))
        bits = width - 1
      return Tensor(lb.e(op, lb.const(bits)))  # type: ignore[arg-type]  # (a MultiLazyBuffer's const is a MultiLazyBuffer)
    x, y = self._broadcasted(bits, reverse)
    if not dtypes.is_int(x.dtype):
      raise DTypeError(f"bit shifts need integer tensors, not {x.dtype}")
    width = x.dtype.itemsize * 8
    out = (y < 0) | (y >= width) if not dtypes.is_unsigned(y.dtype) else y >= width
    if op is BinaryOps.SHR and not dtypes.is_unsigned(x.dtype):
      return Tensor(x.lazydata.e(op, out.where(width - 1, y).lazydata))  # type: ignore[arg-type]
    return out.where(0, Tensor(x.lazydata.e(op, out.where(0, y).lazydata)))  # type: ignore[arg-type]

  def xor(self, x: Tensor | Scalar, reverse: bool = False) -> Tensor:
    a, b = self._broadcasted(x, reverse)
    if dtypes.is_float(a.dtype):
      raise DTypeError(f"^ needs integer or bool tensors, not {a.dtype}")
    return F.Xor.apply(a, b)  # type: ignore[no-any-return]

  def bitwise_and(self, x: Tensor | Scalar, reverse: bool = False) -> Tensor:
    a, b = self._broadcasted(x, reverse)
    if dtypes.is_float(a.dtype):
      raise DTypeError(f"& needs integer or bool tensors, not {a.dtype}")
    return F.BitwiseAnd.apply(a, b)  # type: ignore[no-any-return]

  def bitwise_or(self, x: Tensor | Scalar, reverse: bool = False) -> Tensor:
    a, b = self._broadcasted(x, reverse)
    if dtypes.is_float(a.dtype):
      raise DTypeError(f"| needs integer or bool tensors, not {a.dtype}")
    return F.BitwiseOr.apply(a, b)  # type: ignore[no-any-return]

  def bitwise_not(self) -> Tensor:
    """`~`: logical not of bools, every bit flipped for ints (x ^ all ones, as torch)."""
    if dtypes.is_float(self.dtype):
      raise DTypeError(f"~ needs integer or bool tensors, not {self.dtype}")
    if self.dtype == dtypes.bool:
      return self.logical_not()
    return self.xor(dtypes.max(self.dtype) if dtypes.is_unsigned(self.dtype) else -1)

  def _int_pow(self, n: int) -> Tensor:
    """self ** n for an int n >= 1 by repeated squaring: exact where the products are, and its gradient (from the
    multiplications) is n * x**(n-1) everywhere, 0 included."""
    if n == 1:
      return self
    half = self._int_pow(n // 2)
    sq = half * half
    return sq * self if n % 2 else sq

  def pow(self, x: Tensor | Scalar, reverse: bool = False) -> Tensor:
    """self ** x (x ** self with reverse), with torch's gradients: at a zero base, for negative bases (integer exponents
    only: nan otherwise) and for the exponent (b**e * ln b, 0 where b == 0 and e >= 0)."""
    if not dtypes.is_float(self.dtype) and isinstance(x, float) and not reverse:  # an int tensor to a float power: floats
      return self.cast(least_upper_float(self.dtype)).pow(x)
    if self.dtype == dtypes.bool and not reverse:  # bools to a power are ints, as torch's
      return self.cast(dtypes.default_int).pow(x)
    if not reverse and isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x):
      if x < 0 and not dtypes.is_float(self.dtype):
        raise ValueError("Integers to negative integer powers are not allowed (as torch): cast the tensor to a float first")
      if x == 0:  # 1 everywhere (nan included), still in the graph so its gradient is 0 as in torch
        return Tensor.ones(self.shape, dtype=dtypes.bool, device=self.device).where(1.0 if dtypes.is_float(self.dtype) else 1, self)
      if x == 0.5:
        return self.sqrt()
      if x == int(x) and 0 < abs(x) <= 1024:  # integer powers by multiplication: exact, as torch's
        return self._int_pow(int(x)) if x > 0 else self.reciprocal()._int_pow(-int(x))
    base, ex = self._broadcasted(x, reverse)
    if not dtypes.is_float(base.dtype):  # ints to int powers are ints, exact (and wrapping) as torch's, not float32's
      return base._int_pow_tensor(ex)
    return F.Pow.apply(base, ex)  # type: ignore[no-any-return]

  def _int_pow_tensor(self, e: Tensor) -> Tensor:
    """self ** e elementwise for int (or bool) tensors: square-and-multiply over every bit of e, in one kernel. A
    negative power is 0 except for a base of 1 (1) and -1 (+-1), as torch."""
    if self.dtype == dtypes.bool:
      return self.cast(dtypes.default_int)._int_pow_tensor(e.cast(dtypes.default_int))
    out, b, k = Tensor.ones(self.shape, dtype=self.dtype, device=self.device), self, e
    for _ in range(e.dtype.itemsize * 8 - (0 if dtypes.is_unsigned(e.dtype) else 1)):
      out = ((k & 1) != 0).where(out * b, out)
      b, k = b * b, k >> 1
    if dtypes.is_unsigned(e.dtype):
      return out
    odd = (e & 1) != 0
    negative = (self == 1).where(1, (self == -1).where(odd.where(-1, 1), 0)).cast(self.dtype)
    return (e < 0).where(negative, out)

  def where(self, x: Tensor | Scalar, y: Tensor | Scalar) -> Tensor:
    cond = self.cast(dtypes.bool) if self.dtype != dtypes.bool else self
    if not isinstance(x, Tensor):
      if isinstance(y, Tensor):  # the scalar takes y's dtype unless its kind is wider, as in y + x (an int with bools: int)
        y, x = y._broadcasted(x)
      else:
        x = Tensor(LazyBuffer.full(x, (), dtypes.from_py(x), cond.device))
    xb, yb = x._broadcasted(y)
    shape = _broadcast_shape(cond.shape, xb.shape)
    return F.Where.apply(cond._broadcast_to(shape), xb._broadcast_to(shape), yb._broadcast_to(shape))  # type: ignore[no-any-return]

  def cast(self, dtype: DType | str) -> Tensor:
    dtype = to_dtype(dtype)
    return self if (own := self.dtype) is dtype or own == dtype else F.Cast.apply(self, dtype=dtype)  # type: ignore[no-any-return]

  def bitcast(self, dtype: DType | str) -> Tensor:
    dtype = to_dtype(dtype)
    return self if self.dtype == dtype else F.Cast.apply(self, dtype=dtype, bitcast=True)  # type: ignore[no-any-return]

  # comparisons
  def __lt__(self, x: Tensor | Scalar) -> Tensor: return F.Less.apply(*self._broadcasted(x))  # type: ignore[no-any-return]
  def __gt__(self, x: Tensor | Scalar) -> Tensor: return F.Less.apply(*self._broadcasted(x, True))  # type: ignore[no-any-return]
  def __ge__(self, x: Tensor | Scalar) -> Tensor: return self._or_equal(x, True)
  def __le__(self, x: Tensor | Scalar) -> Tensor: return self._or_equal(x, False)

  def _or_equal(self, x: Tensor | Scalar, greater: bool) -> Tensor:
    """self >= x (greater) or self <= x. Integers: not(self < x); floats: (self > x) or (self == x), which is False when
    either is NaN (IEEE, torch), where not(self < x) would be True."""
    a, b = self._broadcasted(x, greater)  # (x, self) for >=: both become a <= b
    if not dtypes.is_float(a.dtype):
      return F.Less.apply(b, a).logical_not()  # type: ignore[no-any-return]
    return F.Less.apply(a, b) | (a == b)  # type: ignore[no-any-return]
  def __ne__(self, x: Tensor | Scalar) -> Tensor: return F.Neq.apply(*self._broadcasted(x))  # type: ignore[no-any-return,override]
  def __eq__(self, x: Tensor | Scalar) -> Tensor: return (self != x).logical_not()  # type: ignore[override]

  # operators
  def __neg__(self) -> Tensor: return self.neg()
  def __add__(self, x: Tensor | Scalar) -> Tensor: return self.add(x)
  def __sub__(self, x: Tensor | Scalar) -> Tensor: return self.sub(x)
  def __mul__(self, x: Tensor | Scalar) -> Tensor: return self.mul(x)
  def __truediv__(self, x: Tensor | Scalar) -> Tensor: return self.div(x)
  def __floordiv__(self, x: Tensor | Scalar) -> Tensor: return self.floordiv(x)
  def __mod__(self, x: Tensor | Scalar) -> Tensor: return self.mod(x)
  def __pow__(self, x: Tensor | Scalar) -> Tensor: return self.pow(x)
  def __matmul__(self, x: Tensor) -> Tensor: return self.matmul(x)
  def __xor__(self, x: Tensor | Scalar) -> Tensor: return self.xor(x)
  def __rxor__(self, x: Scalar) -> Tensor: return self.xor(x, True)
  def __rand__(self, x: Scalar) -> Tensor: return self.bitwise_and(x, True)
  def __ror__(self, x: Scalar) -> Tensor: return self.bitwise_or(x, True)
  def __invert__(self) -> Tensor: return self.bitwise_not()
  def __and__(self, x: Tensor | Scalar) -> Tensor: return self.bitwise_and(x)
  def __or__(self, x: Tensor | Scalar) -> Tensor: return self.bitwise_or(x)
  def __rshift__(self, x: Tensor | int) -> Tensor: return self.rshift(x)
  def __lshift__(self, x: Tensor | int) -> Tensor: return self.lshift(x)
  def __rrshift__(self, x: int) -> Tensor: return self.rshift(x, True)
  def __rlshift__(self, x: int) -> Tensor: return self.lshift(x, True)
  def __radd__(self, x: Scalar) -> Tensor: return self.add(x, True)
  def __rsub__(self, x: Scalar) -> Tensor: return self.sub(x, True)
  def __rmul__(self, x: Scalar) -> Tensor: return self.mul(x, True)
  def __rtruediv__(self, x: Scalar) -> Tensor: return self.div(x, True)
  def __rfloordiv__(self, x: Scalar) -> Tensor: return self.floordiv(x, True)
  def __rmod__(self, x: Scalar) -> Tensor: return self.mod(x, True)
  def __rpow__(self, x: Scalar) -> Tensor: return self.pow(x, True)
  def __rmatmul__(self, x: Tensor) -> Tensor: return x.matmul(self)
  # in place: the tensor keeps its identity and takes the new value
  def __iadd__(self, x: Tensor | Scalar) -> Tensor: return self.assign(self.add(x).cast(self.dtype))
  def __isub__(self, x: Tensor | Scalar) -> Tensor: return self.assign(self.sub(x).cast(self.dtype))
  def __imul__(self, x: Tensor | Scalar) -> Tensor: return self.assign(self.mul(x).cast(self.dtype))
  def __itruediv__(self, x: Tensor | Scalar) -> Tensor: return self.assign(self.div(x).cast(self.dtype))
  def __ifloordiv__(self, x: Tensor | Scalar) -> Tensor: return self.assign(self.floordiv(x).cast(self.dtype))
  def __imod__(self, x: Tensor | Scalar) -> Tensor: return self.assign(self.mod(x).cast(self.dtype))
  def __ipow__(self, x: Tensor | Scalar) -> Tensor: return self.assign(self.pow(x).cast(self.dtype))
  def __imatmul__(self, x: Tensor) -> Tensor: return self.assign(self.matmul(x).cast(self.dtype))
  def __iand__(self, x: Tensor | Scalar) -> Tensor: return self.assign(self.bitwise_and(x))
  def __ior__(self, x: Tensor | Scalar) -> Tensor: return self.assign(self.bitwise_or(x))
  def __ixor__(self, x: Tensor | Scalar) -> Tensor: return self.assign(self.xor(x))
  def __ilshift__(self, x: Tensor | int) -> Tensor: return self.assign(self.lshift(x))
  def __irshift__(self, x: Tensor | int) -> Tensor: return self.assign(self.rshift(x))

  # ---------- reductions ----------
  def _reduce_axes(self, axis: int | Sequence[int] | None) -> tuple[int, ...]:
    if axis is None:
      return tuple(range(self.ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    return tuple(sorted({self._resolve_axis(a) for a in axes}))

  def _reduce(self, fxn: type[F.Function], axis: int | Sequence[int] | None, keepdim: bool) -> Tensor:
    axes = self._reduce_axes(axis)
    if self.ndim == 0:
      return self
    # the reduced axes are dropped by the reduction itself (see function._Reduction)
    return fxn.apply(self, axis=axes, shape=None if keepdim else tuple(s for i, s in enumerate(self.shape) if i not in axes))  # type: ignore[no-any-return]

  def _int_acc(self) -> DType:
    """torch's result dtype for sums and products of ints and bools: int64 (int32, or uint32 for unsigned, where the
    device has no int64)."""
    if is_dtype_supported(dtypes.int64, self.device):
      return dtypes.int64
    return least_upper_dtype(self.dtype, dtypes.uint32 if dtypes.is_unsigned(self.dtype) else dtypes.int32)

  def sum(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, acc_dtype: DType | None = None,
          dtype: DType | str | None = None) -> Tensor:
    """Sum over `axis`. Ints and bools sum to int64 (as torch); half floats accumulate in float32 and are cast back.
    `dtype` (torch's): cast the input to it first; `acc_dtype` (tinygrad's): accumulate in it and return it."""
    if dtype is not None:
      dt = to_dtype(dtype)
      return self.cast(dt).sum(axis, keepdim, acc_dtype if acc_dtype is not None or dtypes.is_float(dt) else dt)
    if acc_dtype is None:
      acc = self._int_acc() if not dtypes.is_float(self.dtype) else least_upper_dtype(self.dtype, dtypes.float32)
    else:
      acc = to_dtype(acc_dtype)
    ret = self.cast(acc)._reduce(F.Sum, axis, keepdim)
    return ret.cast(self.dtype) if acc_dtype is None and dtypes.is_float(self.dtype) else ret

  def max(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    """The max over `axis` (all axes by default), values only: tinygrad's max, torch's amax. The gradient is split evenly
    between tied maxima, as torch's amax and max() over all axes (torch's max(dim), which also returns indices, gives it
    all to one; so does max_pool2d, as torch's)."""
    if self.numel() == 0 and any(self.shape[a] == 0 for a in self._reduce_axes(axis)):
      raise RuntimeError(f"max of an empty axis of shape {self.shape} has no identity")
    return self._reduce(F.Max, axis, keepdim)

  def min(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    # ints: ~x reverses the order with no overflow (-x wraps at the dtype's minimum, and unsigned has no negatives)
    if self.dtype == dtypes.bool:
      return self.logical_not().max(axis, keepdim).logical_not()
    if dtypes.is_int(self.dtype):
      return ~((~self).max(axis, keepdim))
    return -((-self).max(axis, keepdim))

  def _upcast_half(self) -> Tensor:
    """float16 and bfloat16 as float32, where reductions accumulate and intermediate sums may pass 65504 (as torch);
    ints as the default float; other floats as they are."""
    if self.dtype in (dtypes.float16, dtypes.bfloat16):
      return self.cast(dtypes.float32)
    return self if dtypes.is_float(self.dtype) else self.cast(dtypes.default_float)

  def _out_float(self) -> DType:
    return self.dtype if dtypes.is_float(self.dtype) else dtypes.default_float

  def mean(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    x = self._upcast_half()
    out = x.sum(axis, keepdim)
    n = prod(self.shape[a] for a in self._reduce_axes(axis)) if self.ndim else 1
    if isinstance(n, Node):  # a symbolic count: divide by it as a tensor, so the kernel reads the Variable's value
      return (out / self._symbolic_count(axis, keepdim)).cast(self._out_float())
    return (out * (1 / n) if n else out * math.nan).cast(self._out_float())

  def _symbolic_count(self, axis: int | Sequence[int] | None, keepdim: bool) -> Tensor:
    """How many elements a reduce over `axis` sees, as a float tensor of the reduce's shape (for symbolic sizes)."""
    return Tensor.ones(self.shape, dtype=self._out_float(), device=self.device).sum(axis, keepdim)

  def var(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, correction: int = 1) -> Tensor:
    x = self._upcast_half()
    n_sym = prod(self.shape[a] for a in self._reduce_axes(axis)) if self.ndim else 1
    sq = (x - x.mean(axis, keepdim=True)).square().sum(axis, keepdim)
    if isinstance(n_sym, Node):  # a symbolic count, as in mean; n - correction <= 0 gives inf/nan as the division does
      return (sq / (self._symbolic_count(axis, keepdim) - correction).relu()).cast(self._out_float())
    n = n_sym
    if n - correction > 0:
      return (sq / (n - correction)).cast(self._out_float())
    # n - correction <= 0 divides by 0, as torch: inf, with its gradient, or nan where the squares sum to 0 (written as a
    # constant: a device without strict IEEE floats (WGSL's) may make 0 * inf a 0)
    return (sq == 0).where(math.nan, sq / 0).cast(self._out_float())

  def std(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, correction: int = 1) -> Tensor:
    """sqrt(var), with torch's gradient where the deviation is 0: 0, not sqrt's inf times 0 (nan stays nan)."""
    # the root of the float32 variance of a half tensor, rounded once: half's variance itself may pass 65504
    v = self._upcast_half().var(axis, keepdim, correction)
    zero = v == 0
    return zero.where(0.0, zero.where(1.0, v).sqrt()).cast(self._out_float())

  def prod(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    """Product over `axis`: ints and bools to int64 as sum; half floats multiply in float32 and are cast back."""
    if not dtypes.is_float(self.dtype):
      return self.cast(self._int_acc())._reduce(F.Prod, axis, keepdim)
    return self._upcast_half()._reduce(F.Prod, axis, keepdim).cast(self.dtype)

  def any(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    return self.cast(dtypes.bool).sum(axis, keepdim) > 0  # a sum, not a max: any() of nothing is False

  def all(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
    return self.logical_not().any(axis, keepdim).logical_not()

  def cumsum(self, axis: int = 0) -> Tensor:
    """Running sum along `axis`. Up to 2 * CUMSUM_BLOCK elements, each output sums a window of the input padded by n-1
    zeros in front (n^2 work, one kernel). A longer axis is cut into blocks (tinygrad's split): each block's running
    sums that way, plus the running sum of the totals of the blocks before it (blocked again where there are many):
    about n * CUMSUM_BLOCK work. 2^20 elements took minutes as one window sum."""
    ax = self._resolve_axis(axis)
    if self.ndim == 0:
      return self
    n = _concrete(self.shape[ax])
    if n <= 1:
      return self
    return self.transpose(ax, -1)._cumsum_last().transpose(ax, -1)

  def _cumsum_last(self) -> Tensor:
    n = _concrete(self.shape[-1])
    if n <= 2 * CUMSUM_BLOCK:
      return self.pad2d((n - 1, 0))._pool((n,)).sum(-1)
    # half floats add in float32 across the blocks too (each window sum does already), rounded once at the end
    x = self.cast(dtypes.float32) if self.dtype in (dtypes.float16, dtypes.bfloat16) else self
    b, nb = CUMSUM_BLOCK, -(-n // CUMSUM_BLOCK)
    lead = x.shape[:-1]
    # zeros in front make the last block whole; the blocks are copied out first, so the window sums index a plain
    # buffer, not the padded view, and the sums are kept (read twice: for the totals and the result)
    inner = x.pad2d((nb * b - n, 0)).reshape(*lead, nb, b).contiguous()._cumsum_last().contiguous()
    totals = inner.shrink(tuple([None] * len(lead) + [(0, nb - 1), (b - 1, b)])).reshape(*lead, nb - 1)
    before = totals._cumsum_last().pad2d((1, 0))  # the sum of the blocks before each block (0 before the first)
    out = (inner + before.unsqueeze(-1)).reshape(*lead, nb * b).shrink(tuple([None] * len(lead) + [(nb * b - n, nb * b)]))
    return out.cast(self.dtype) if x is not self else out

  @staticmethod
  def _one_dim(name: str, axis: Any) -> None:
    """argmax's and argmin's dim is one int or None, as torch's (a tuple was compared with ints: a bare TypeError)."""
    if axis is not None and not isinstance(axis, int):
      raise TypeError(f"{name}(): argument 'dim' must be int, not {type(axis).__name__} (as torch); for several axes, flatten them "
                      "into one first")

  def argmin(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
    Tensor._one_dim("argmin", axis)
    if dtypes.is_float(self.dtype):
      return (-self).argmax(axis, keepdim)
    # ~x (x ^ all ones) reverses the order of ints without -x's overflow at the minimum, and needs no wider dtype
    flipped = self.logical_not() if self.dtype == dtypes.bool else self.xor(dtypes.max(self.dtype) if dtypes.is_unsigned(self.dtype) else -1)
    return flipped.argmax(axis, keepdim)

  def argmax(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
    Tensor._one_dim("argmax", axis)
    if axis is None:
      out = self.flatten().argmax(0)
      return out.reshape((1,) * self.ndim) if keepdim else out
    ax = self._resolve_axis(axis)
    if self.ndim == 0:  # dims 0 and -1 of a 0-d tensor (torch): its one element is at index 0
      return self.reshape(1).argmax(0)
    n = _concrete(self.shape[ax])
    is_max = self == self.max(ax, keepdim=True)
    if dtypes.is_float(self.dtype):  # a NaN is the max (max() propagates it) and never equals it: torch picks its index
      is_max = is_max | self.isnan()
    # the first index of the max: count down from n so the earliest match is the largest; int32 as tinygrad, int64 where
    # an index can pass int32's range
    idx = _index_dtype(n, self.device)
    rev = Tensor.arange(n, 0, -1, device=self.device, dtype=idx).reshape((n,) + (1,) * (self.ndim - ax - 1))
    return (n - (is_max.cast(idx) * rev).max(ax, keepdim)).cast(idx)

  # ---------- linear algebra ----------
  def dot(self, w: Tensor) -> Tensor:
    n1, n2 = self.ndim, w.ndim
    if n1 == 0 or n2 == 0:
      raise ShapeError(f"matmul needs at least 1 dimension on both sides, got shapes {self.shape} and {w.shape}")
    if self.shape[-1] != w.shape[-min(n2, 2)]:
      raise ShapeError(f"matmul shape mismatch: {self.shape} @ {w.shape} ({self.shape[-1]} != {w.shape[-min(n2, 2)]})")
    x = self.reshape(self.shape[:-1] + (1,) * min(n1 - 1, n2 - 1, 1) + self.shape[-1:])
    wt = w.reshape(w.shape[:-2] + (1,) * min(n1 - 1, n2 - 1, 1) + w.shape[-min(n2, 2):]).transpose(-1, -min(n2, 2))
    if (dt := least_upper_dtype(x.dtype, wt.dtype)) in (dtypes.float16, dtypes.bfloat16):
      # products in float32 too, as torch: 300 * 300 passes float16's 65504 though the dot product may not
      return (x.cast(dtypes.float32) * wt.cast(dtypes.float32)).sum(-1).cast(dt)
    # an integer (or bool) matmul keeps its operands' dtype, as torch's and tinygrad's: the sum alone would be int64
    return (x * wt).sum(-1) if dtypes.is_float(dt) else (x * wt).sum(-1).cast(dt)

  @staticmethod
  def einsum(formula: str, *operands: Tensor) -> Tensor:
    """Einstein summation, e.g. "ij,jk->ik": operands broadcast over all the letters, multiply, and sum
    the letters that are not in the output (implicit output: the letters seen once, sorted). '...' stands for the
    dims no letter names, as torch's: they broadcast across the operands aligned on the right, and come first in an
    implicit output (an explicit output without '...' sums them)."""
    ops = list(operands[0]) if len(operands) == 1 and isinstance(operands[0], (list, tuple)) else list(operands)
    formula = formula.replace(" ", "")
    lhs, _, out = formula.partition("->")
    inputs = lhs.split(",")
    if len(inputs) != len(ops):
      raise ShapeError(f"einsum {formula!r} names {len(inputs)} operands, got {len(ops)}")
    if "->" not in formula:
      out = "..." * any("..." in term for term in inputs) + "".join(sorted(c for c in set(lhs) if c.isalpha() and lhs.count(c) == 1))
    if "." in formula:
      inputs, out = Tensor._einsum_ellipsis(formula, inputs, out, ops)
    sizes: dict[str, sint] = {}
    for letters, t in zip(inputs, ops):
      if len(letters) != t.ndim:
        raise ShapeError(f"einsum operand {letters!r} has {len(letters)} letters for a tensor of shape {t.shape}")
      if len(set(letters)) != len(letters):
        raise NotImplementedError(f"einsum with a repeated letter in one operand ({letters!r}, a diagonal) is not supported")
      for c, s in zip(letters, t.shape):
        if sizes.setdefault(c, s) != s and s != 1 and sizes[c] != 1:
          raise ShapeError(f"einsum {'letter ' + repr(c) if c in formula else 'dims under ...'} has sizes {sizes[c]} and {s}, which don't broadcast")
        if sizes[c] == 1:
          sizes[c] = s
    if set(out) - set(sizes):
      raise TgArgumentError(f"einsum output {out!r} has letters no operand has")
    if len(set(out)) != len(out):  # as torch (the permute below would name an axis twice)
      raise TgArgumentError(f"einsum output {out!r} names a letter more than once")
    order = list(out) + sorted(set(sizes) - set(out))
    full = tuple(sizes[c] for c in order)
    prod_: Tensor | None = None
    for letters, t in zip(inputs, ops):
      present = [c for c in order if c in letters]
      x = t.permute([letters.index(c) for c in present]) if present else t
      x = x.reshape(tuple(sizes[c] if c in letters and t.shape[letters.index(c)] != 1 else 1 for c in order)).expand(full)
      prod_ = x if prod_ is None else prod_ * x
    assert prod_ is not None
    if len(order) == len(out):
      return prod_
    ret = prod_.sum(tuple(range(len(out), len(order))))
    return ret if dtypes.is_float(prod_.dtype) else ret.cast(prod_.dtype)  # integers keep their dtype, as torch's einsum

  @staticmethod
  def _einsum_ellipsis(formula: str, inputs: list[str], out: str, ops: list[Tensor]) -> tuple[list[str], str]:
    """einsum's terms with each '...' spelled out in letters the formula doesn't use: the same letters for the same
    dims counted from the right, so the ellipsis dims of the operands broadcast as torch's do."""
    counts = []
    for i, (term, t) in enumerate(zip(inputs, ops)):
      if term.count(".") != 3 * term.count("...") or term.count("...") > 1:
        raise TgArgumentError(f"einsum {formula!r}: operand {i} ({term!r}) has a '.' that is not one ellipsis '...' (as torch)")
      named = len(term) - 3 * term.count("...")
      if named > t.ndim or (named < t.ndim and "..." not in term):
        raise ShapeError(f"einsum operand {term!r} has {named} letters for a tensor of shape {t.shape}: "
                         f"{'more subscripts than dims' if named > t.ndim else 'name every dim or add ...'}")
      counts.append(t.ndim - named if "..." in term else 0)
    if out.count(".") != 3 * out.count("...") or out.count("...") > 1:
      raise TgArgumentError(f"einsum {formula!r}: the output has a '.' that is not one ellipsis '...' (as torch)")
    free = [c for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in formula]
    n = max(counts, default=0)
    if n > len(free):
      raise TgArgumentError(f"einsum {formula!r}: too many dims for the letters left to name them")
    dims = "".join(free[:n])
    return [term.replace("...", dims[n - k:]) for term, k in zip(inputs, counts)], out.replace("...", dims)

  def matmul(self, x: Tensor, reverse: bool = False) -> Tensor:
    return x.dot(self) if reverse else self.dot(x)

  def linear(self, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    x = self.mul(weight) if weight.ndim == 1 else self.dot(weight)
    return x.add(bias) if bias is not None else x

  # last in the class: these names shadow the builtins in annotations that follow them
  def float(self) -> Tensor: return self.cast(dtypes.float32)
  def half(self) -> Tensor: return self.cast(dtypes.float16)
  def int(self) -> Tensor: return self.cast(dtypes.int32)
  def bool(self) -> Tensor: return self.cast(dtypes.bool)


F._Tensor = Tensor  # (see function._Tensor)
