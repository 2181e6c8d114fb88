"""Autograd Functions: each op's forward and backward, written on LazyBuffers.

Derived ops (tanh, matmul, mean, ...) are built in tensor.py from these, so their gradients come
for free. exp and log go through exp2/log2, the primitives devices provide.
"""
from __future__ import annotations

import math
import operator
from typing import Any, ClassVar

from tg.dtype import DType, dtypes
from tg.helpers import argsort
from tg.lazy import LazyBuffer
from tg.multi import MultiLazyBuffer
from tg.ops import BinaryOps, ReduceOps, TernaryOps, UnaryOps
from tg.shape.symbolic import sint

# (Tensor._requires_grad: the slot behind Tensor.requires_grad, read without the property's Python frame)
_requires_grad, _lazydata = operator.attrgetter("_requires_grad"), operator.attrgetter("lazydata")
_Tensor: Any = None  # tg.tensor.Tensor, set by tensor.py once defined: it imports this module, and an import inside
# apply (a dict lookup, one would think) cost 1 us of the 20 an eager op takes


class Function:
  """One differentiable op. `apply` runs forward and, when any input needs a gradient, records itself."""
  # False for ops with no gradient (comparisons, bitwise ops, integer division): their result never requires grad and
  # records no graph, as in torch, so backward from a result that depends on its inputs only through them raises
  differentiable: ClassVar[bool] = True

  def __init__(self, device: str, *tensors: Any) -> None:
    self.device = device
    self.needs_input_grad = needs = list(map(_requires_grad, tensors))  # (map of an attrgetter: no Python frame)
    if not self.differentiable:
      self.requires_grad: bool | None = False
    else:
      self.requires_grad = True if True in needs else (None if None in needs else False)
    if self.requires_grad:
      self.parents = tensors

  def forward(self, *args: Any, **kwargs: Any) -> LazyBuffer:
    raise NotImplementedError(type(self))

  def backward(self, *args: Any, **kwargs: Any) -> Any:
    raise RuntimeError(f"backward not implemented for {type(self).__name__}")

  @classmethod
  def apply(cls, *x: Any, **kwargs: Any) -> Any:
    ctx = cls(x[0].lazydata.device, *x)
    ret = _Tensor.__new__(_Tensor)
    ret.lazydata = ctx.forward(*map(_lazydata, x), **kwargs)
    ret._requires_grad, ret.grad = ctx.requires_grad, None
    ret._ctx = ctx if ctx.requires_grad and not _Tensor.no_grad else None
    return ret


# ---------- unary ----------

class Contiguous(Function):
  def forward(self, x: LazyBuffer) -> LazyBuffer: return x.contiguous()
  def backward(self, grad: LazyBuffer) -> LazyBuffer: return grad


class ContiguousBackward(Function):
  """The identity forward; its gradient is made contiguous (realized in order) before it flows on."""
  def forward(self, x: LazyBuffer) -> LazyBuffer: return x
  def backward(self, grad: LazyBuffer) -> LazyBuffer: return grad.contiguous()


class Copy(Function):
  """A copy to another device; the gradient is copied back to the source's device (split again as the source was)."""
  def forward(self, x: LazyBuffer, device: str) -> LazyBuffer:
    self.src_device, self.src_axis = x.device, getattr(x, "axis", None)
    return x.copy_to_device(device)

  def backward(self, grad: LazyBuffer) -> LazyBuffer:
    if isinstance(self.src_device, tuple):  # the source was sharded
      return MultiLazyBuffer.from_sharded(grad, self.src_device, self.src_axis)  # type: ignore[return-value]
    return grad.copy_to_device(self.src_device)


class Shard(Function):
  """One device's value on several devices (Tensor.shard); the gradient is put back together on the source's device."""
  def forward(self, x: LazyBuffer, devices: tuple[str, ...], axis: int | None) -> MultiLazyBuffer:  # type: ignore[override]
    self.src_device = x.device
    return MultiLazyBuffer.from_sharded(x, devices, axis)

  def backward(self, grad: MultiLazyBuffer) -> LazyBuffer: return grad.copy_to_device(self.src_device)


class Cast(Function):
  def forward(self, x: LazyBuffer, dtype: DType, bitcast: bool = False) -> LazyBuffer:
    self.input_dtype, self.bitcast = x.dtype, bitcast
    if not dtypes.is_float(dtype):  # an integer result leaves the graph, as torch's (its gradient would be truncated)
      self.requires_grad = False
    return x.cast(dtype, bitcast)

  def backward(self, grad: LazyBuffer) -> LazyBuffer:
    if self.bitcast:
      raise RuntimeError("bitcast has no gradient")
    return grad.cast(self.input_dtype)


class Neg(Function):
  def forward(self, x: LazyBuffer) -> LazyBuffer: return x.e(UnaryOps.NEG)
  def backward(self, grad: LazyBuffer) -> LazyBuffer: return grad.e(UnaryOps.NEG)


class Reciprocal(Function):
  def forward(self, x: LazyBuffer) -> LazyBuffer:
    self.ret = x.e(UnaryOps.RECIP)
    return self.ret

  def backward(self, grad: LazyBuffer) -> LazyBuffer:
    return grad.e(UnaryOps.NEG).e(BinaryOps.MUL, self.ret).e(BinaryOps.MUL, self.ret)


class Sin(Function):
  def forward(self, x: LazyBuffer) -> LazyBuffer:
    self.x = x
    return x.e(UnaryOps.SIN)

  def backward(self, grad: LazyBuffer) -> LazyBuffer:
    # cos(x) = 1 - 2 sin(x/2)^2 (x/2 is exact; pi/2 - x rounds x to its ulp first, as Tensor.cos explains)
    s = self.x.e(BinaryOps.MUL, self.x.const(0.5)).e(UnaryOps.SIN)
    cos = self.x.const(1.0).e(BinaryOps.ADD, s.e(BinaryOps.MUL, s).e(BinaryOps.MUL, self.x.const(-2.0)))
    return cos.e(BinaryOps.MUL, grad)


class Relu(Function):
  def forward(self, x: LazyBuffer) -> LazyBuffer:
    # x < 0 ? 0 : x, as torch: -0.0 stays -0.0 (max(-0.0, 0) is 0.0) and NaN stays NaN
    self.ret = x.e(BinaryOps.CMPLT, x.const(0)).e(TernaryOps.WHERE, x.const(0), x)
    return self.ret

  def backward(self, grad: LazyBuffer) -> LazyBuffer:
    # torch's: the gradient passes where the result isn't 0 (NaN included), picked, so an inf gradient elsewhere is no NaN
    return self.ret.e(BinaryOps.CMPNE, self.ret.const(0)).e(TernaryOps.WHERE, grad, grad.const(0))


class Log(Function):
  def forward(self, x: LazyBuffer) -> LazyBuffer:
    self.x = x
    return x.e(UnaryOps.LOG2).e(BinaryOps.MUL, x.const(math.log(2)))

  def backward(self, grad: LazyBuffer) -> LazyBuffer:
    return grad.e(BinaryOps.MUL, self.x.e(UnaryOps.RECIP))


class Exp(Function):
  def forward(self, x: LazyBuffer) -> LazyBuffer:
    self.ret = x.e(BinaryOps.MUL, x.const(1 / math.log(2))).e(UnaryOps.EXP2)
    return self.ret

  def backward(self, grad: LazyBuffer) -> LazyBuffer:
    return self.ret.e(BinaryOps.MUL, grad)


class Sqrt(Function):
  def forward(self, x: LazyBuffer) -> LazyBuffer:
    self.ret = x.e(UnaryOps.SQRT)
    return self.ret

  def backward(self, grad: LazyBuffer) -> LazyBuffer:
    return grad.e(BinaryOps.MUL, self.ret.e(BinaryOps.MUL, self.ret.const(2)).e(UnaryOps.RECIP))


class Sigmoid(Function):
  """1 / (1 + exp(-x)), with its gradient s * (1 - s) from the saved output."""

  def forward(self, x: LazyBuffer) -> LazyBuffer:
    e = x.e(BinaryOps.MUL, x.const(-1 / math.log(2))).e(UnaryOps.EXP2)
    self.ret = x.const(1).e(BinaryOps.ADD, e).e(UnaryOps.RECIP)
    return self.ret

  def backward(self, grad: LazyBuffer) -> LazyBuffer:
    one_minus = self.ret.const(1).e(BinaryOps.ADD, self.ret.e(UnaryOps.NEG))
    return self.ret.e(BinaryOps.MUL, one_minus).e(BinaryOps.MUL, grad)


# ---------- binary and ternary ----------

class Less(Function):
  differentiable = False
  def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer: return x.e(BinaryOps.CMPLT, y)


class Neq(Function):
  differentiable = False
  def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer: return x.e(BinaryOps.CMPNE, y)


class Xor(Function):
  differentiable = False
  def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer: return x.e(BinaryOps.XOR, y)


class BitwiseAnd(Function):
  differentiable = False
  def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer: return x.e(BinaryOps.AND, y)


class BitwiseOr(Function):
  differentiable = False
  def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer: return x.e(BinaryOps.OR, y)


class Add(Function):
  def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer: return x.e(BinaryOps.ADD, y)

  def backward(self, grad: LazyBuffer) -> tuple[LazyBuffer | None, LazyBuffer | None]:
    return grad if self.needs_input_grad[0] else None, grad if self.needs_input_grad[1] else None


class Mul(Function):
  def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
    self.x, self.y = x, y
    return x.e(BinaryOps.MUL, y)

  def backward(self, grad: LazyBuffer) -> tuple[LazyBuffer | None, LazyBuffer | None]:
    return (self.y.e(BinaryOps.MUL, grad) if self.needs_input_grad[0] else None,
            self.x.e(BinaryOps.MUL, grad) if self.needs_input_grad[1] else None)


class IDiv(Function):
  """Integer division truncating toward zero (C's /); a zero divisor gives 0 (Tensor raises, see tg.divcheck)."""
  differentiable = False
  def forward(self, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer: return x.e(BinaryOps.IDIV, y)


def _abs(x: LazyBuffer) -> LazyBuffer: return x.e(BinaryOps.MAX, x.e(UnaryOps.NEG))
def _not(b: LazyBuffer) -> LazyBuffer: return b.e(UnaryOps.NEG)  # NEG of a bool is NOT


def _pow(b: LazyBuffer, e: LazyBuffer) -> LazyBuffer:
  """b ** e for floats of one dtype and shape: exp2(e * log2|b|); a negative base takes its sign from the parity of an
  integer exponent and is nan for a fractional one; 1 where e == 0 or b == 1 (as C's pow and torch, nan included)."""
  mantissa = {dtypes.float64: 52, dtypes.float16: 10, dtypes.bfloat16: 7}.get(b.dtype, 23)
  # at and past 2**(mantissa+1) every float is an even integer; below it the exponent fits the int cast (nan and inf don't,
  # so they are cast as 0)
  small = _abs(e).e(BinaryOps.CMPLT, e.const(2.0 ** (mantissa + 1)))
  e_small = small.e(TernaryOps.WHERE, e, e.const(0))
  e_int = e_small.cast(dtypes.int64 if b.dtype == dtypes.float64 else dtypes.int32)
  is_int = small.e(TernaryOps.WHERE, _not(e_int.cast(e.dtype).e(BinaryOps.CMPNE, e_small)), small.const(True))
  odd = e_int.e(BinaryOps.AND, e_int.const(1)).e(BinaryOps.CMPNE, e_int.const(0))
  mag = e.e(BinaryOps.MUL, _abs(b).e(UnaryOps.LOG2)).e(UnaryOps.EXP2)
  # |b| == 1 to +-inf is 1 as C's pow (inf * log2(1) is nan); a nan exponent stays nan
  unit = _abs(b).e(BinaryOps.CMPNE, b.const(1)).e(TernaryOps.WHERE, small.const(False), _not(e.e(BinaryOps.CMPNE, e)))
  mag = unit.e(TernaryOps.WHERE, mag.const(1), mag)
  # a zero base: 0 to a positive power, inf to a negative one (C's pow), not exp2(e * log2(0)), which a device whose
  # log2(0) isn't -inf gets wrong (WGSL leaves it undefined: 0 ** -1 was 0); a nan exponent stays nan
  zero = _not(b.e(BinaryOps.CMPNE, b.const(0))).e(TernaryOps.WHERE, _not(e.e(BinaryOps.CMPNE, e)), small.const(False))
  mag = zero.e(TernaryOps.WHERE, e.e(BinaryOps.CMPLT, e.const(0)).e(TernaryOps.WHERE, mag.const(math.inf), mag.const(0.0)), mag)
  # a nan exponent gives nan (1 ** nan and b ** 0 are 1, below), whatever nan * log2|b| gives (0 on a device that
  # assumes no nans in arithmetic: (-1) ** nan was 1)
  mag = e.e(BinaryOps.CMPNE, e).e(TernaryOps.WHERE, mag.const(math.nan), mag)
  signed = odd.e(TernaryOps.WHERE, mag.e(UnaryOps.NEG), mag)
  neg_base = is_int.e(TernaryOps.WHERE, signed, mag.const(math.nan))
  # -0.0 keeps its sign to an odd integer power (-0.0 ** -1 is -inf, ** 3 is -0.0), else it is +0.0 or +inf, as C's
  neg_zero = b.e(BinaryOps.CMPNE, b.const(0)).e(TernaryOps.WHERE, small.const(False), b.e(UnaryOps.RECIP).e(BinaryOps.CMPLT, b.const(0)))
  odd_int = is_int.e(TernaryOps.WHERE, odd, small.const(False))
  mag = neg_zero.e(TernaryOps.WHERE, odd_int.e(TernaryOps.WHERE, signed, mag), mag)
  ret = b.e(BinaryOps.CMPLT, b.const(0)).e(TernaryOps.WHERE, neg_base, mag)
  ret = b.e(BinaryOps.CMPNE, b.const(1)).e(TernaryOps.WHERE, ret, ret.const(1))
  return e.e(BinaryOps.CMPNE, e.const(0)).e(TernaryOps.WHERE, ret, ret.const(1))


class Pow(Function):
  """b ** e (floats, broadcast to one shape) with torch's gradients, defined at 0 and for negative bases:
  d/db = e * b**(e-1), 0 where e == 0; d/de = b**e * ln(b) (nan for b < 0), 0 where b == 0 and e >= 0."""

  def forward(self, b: LazyBuffer, e: LazyBuffer) -> LazyBuffer:
    self.b, self.e = b, e
    self.ret = _pow(b, e)
    return self.ret

  def backward(self, grad: LazyBuffer) -> tuple[LazyBuffer | None, LazyBuffer | None]:
    b, e = self.b, self.e
    db = de = None
    if self.needs_input_grad[0]:
      d = e.e(BinaryOps.MUL, _pow(b, e.e(BinaryOps.ADD, e.const(-1))))
      db = e.e(BinaryOps.CMPNE, e.const(0)).e(TernaryOps.WHERE, d, d.const(0)).e(BinaryOps.MUL, grad)
    if self.needs_input_grad[1]:
      d = self.ret.e(BinaryOps.MUL, b.e(UnaryOps.LOG2).e(BinaryOps.MUL, b.const(math.log(2))))
      true = b.const(True).cast(dtypes.bool)  # (on b's device, or devices)
      keep = b.e(BinaryOps.CMPNE, b.const(0)).e(TernaryOps.WHERE, true, e.e(BinaryOps.CMPLT, e.const(0)))
      de = keep.e(TernaryOps.WHERE, d, d.const(0)).e(BinaryOps.MUL, grad)
    return db, de


class Where(Function):
  def forward(self, c: LazyBuffer, x: LazyBuffer, y: LazyBuffer) -> LazyBuffer:
    self.c = c
    return c.e(TernaryOps.WHERE, x, y)

  def backward(self, grad: LazyBuffer) -> tuple[None, LazyBuffer | None, LazyBuffer | None]:
    zero = grad.const(0)
    return (None, self.c.e(TernaryOps.WHERE, grad, zero) if self.needs_input_grad[1] else None,
            self.c.e(TernaryOps.WHERE, zero, grad) if self.needs_input_grad[2] else None)


# ---------- reductions ----------

class _Reduction(Function):
  """A reduction over `axis`. Its result keeps the reduced axes as 1s, or has `shape` (the same without them) when
  given: a sum that drops its axes then costs one Function, not a reduction and a Reshape."""

  def forward(self, x: LazyBuffer, axis: tuple[int, ...], shape: tuple[sint, ...] | None = None) -> LazyBuffer:
    ret = self.reduce(x, axis)
    self.kept = ret.shape
    return ret if shape is None or shape == ret.shape else ret.reshape(shape)

  def backward(self, grad: LazyBuffer) -> LazyBuffer:
    return self.grad(grad if grad.shape == self.kept else grad.reshape(self.kept))

  def reduce(self, x: LazyBuffer, axis: tuple[int, ...]) -> LazyBuffer:
    raise NotImplementedError(type(self))

  def grad(self, grad: LazyBuffer) -> LazyBuffer:
    """The input's gradient from the output's, `grad` in the shape with the reduced axes kept as 1s."""
    raise NotImplementedError(type(self))


class Sum(_Reduction):
  def reduce(self, x: LazyBuffer, axis: tuple[int, ...]) -> LazyBuffer:
    self.input_shape = x.shape
    return x.r(ReduceOps.SUM, axis)

  def grad(self, grad: LazyBuffer) -> LazyBuffer:
    return grad.expand(self.input_shape)


class Prod(_Reduction):
  def reduce(self, x: LazyBuffer, axis: tuple[int, ...]) -> LazyBuffer:
    self.x, self.axis = x, axis
    return x.r(ReduceOps.PROD, axis)

  def grad(self, grad: LazyBuffer) -> LazyBuffer:
    """d(prod)/dx_i is the product of the other elements. Without zeros that is prod/x_i; with one zero it is
    the product of the non-zeros at the zero and 0 elsewhere; with two or more it is 0 everywhere."""
    x, shape = self.x, self.x.shape
    is_zero = x.e(BinaryOps.CMPNE, x.const(0)).e(UnaryOps.NEG)
    nonzero = is_zero.e(TernaryOps.WHERE, x.const(1), x)
    prod_nonzero = nonzero.r(ReduceOps.PROD, self.axis).expand(shape)
    n_zeros = is_zero.cast(x.dtype).r(ReduceOps.SUM, self.axis).expand(shape)
    no_zeros = n_zeros.e(BinaryOps.CMPNE, x.const(0)).e(UnaryOps.NEG)
    one_zero = n_zeros.e(BinaryOps.CMPNE, x.const(1)).e(UnaryOps.NEG)
    at_the_zero = one_zero.e(TernaryOps.WHERE, is_zero.e(TernaryOps.WHERE, prod_nonzero, x.const(0)), x.const(0))
    others = no_zeros.e(TernaryOps.WHERE, prod_nonzero.e(BinaryOps.MUL, nonzero.e(UnaryOps.RECIP)), at_the_zero)
    return others.e(BinaryOps.MUL, grad.expand(shape))


class Max(_Reduction):
  def reduce(self, x: LazyBuffer, axis: tuple[int, ...]) -> LazyBuffer:
    self.x, self.ret, self.axis = x, x.r(ReduceOps.MAX, axis), axis
    return self.ret

  def grad(self, grad: LazyBuffer) -> LazyBuffer:
    # the gradient is split evenly between the elements equal to the max, as torch's amax does; a NaN max is the
    # NaNs' (NaN equals nothing: every element's gradient was 0/0)
    ret = self.ret.expand(self.x.shape)
    hit = self.x.e(BinaryOps.CMPNE, ret).e(UnaryOps.NEG)  # NEG of a bool is NOT
    if dtypes.is_float(self.x.dtype):
      hit = hit.e(BinaryOps.OR, self.x.e(BinaryOps.CMPNE, self.x).e(BinaryOps.AND, ret.e(BinaryOps.CMPNE, ret)))
    is_max = hit.cast(grad.dtype)
    count = is_max.r(ReduceOps.SUM, self.axis)
    return is_max.e(BinaryOps.MUL, count.e(UnaryOps.RECIP).expand(self.x.shape)).e(BinaryOps.MUL, grad.expand(self.x.shape))


# ---------- movement ----------

class Expand(Function):
  def forward(self, x: LazyBuffer, shape: tuple[sint, ...]) -> LazyBuffer:
    self.expanded_axis = tuple(i for i, (si, so) in enumerate(zip(x.shape, shape)) if si != so)
    return x.expand(shape)

  def backward(self, grad: LazyBuffer) -> LazyBuffer:
    return grad.r(ReduceOps.SUM, self.expanded_axis)


class Reshape(Function):
  def forward(self, x: LazyBuffer, shape: tuple[sint, ...]) -> LazyBuffer:
    self.input_shape = x.shape
    return x.reshape(shape)

  def backward(self, grad: LazyBuffer) -> LazyBuffer:
    return grad.reshape(self.input_shape)


class Permute(Function):
  def forward(self, x: LazyBuffer, order: tuple[int, ...]) -> LazyBuffer:
    self.input_order = order
    return x.permute(order)

  def backward(self, grad: LazyBuffer) -> LazyBuffer:
    return grad.permute(tuple(argsort(list(self.input_order))))


class Pad(Function):
  def forward(self, x: LazyBuffer, arg: tuple[tuple[sint, sint], ...]) -> LazyBuffer:
    self.narg = tuple((p[0], s + p[0]) for s, p in zip(x.shape, arg))
    return x.pad(arg)

  def backward(self, grad: LazyBuffer) -> LazyBuffer:
    return grad.shrink(self.narg)


class Shrink(Function):
  def forward(self, x: LazyBuffer, arg: tuple[tuple[sint, sint], ...]) -> LazyBuffer:
    self.narg = tuple((p[0], s - p[1]) for s, p in zip(x.shape, arg))
    return x.shrink(arg)

  def backward(self, grad: LazyBuffer) -> LazyBuffer:
    return grad.pad(self.narg)


class Flip(Function):
  def forward(self, x: LazyBuffer, axis: tuple[int, ...]) -> LazyBuffer:
    self.arg = tuple(-1 if i in axis else 1 for i in range(len(x.shape)))
    return x.stride(self.arg)

  def backward(self, grad: LazyBuffer) -> LazyBuffer:
    return grad.stride(self.arg)
