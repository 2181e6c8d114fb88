"""The exceptions tg raises for bad arguments, one hierarchy for the user API.

PyTorch raises RuntimeError (or IndexError for an axis out of range) for a shape that doesn't fit; Python code
expects ValueError or TypeError. Each class here is both, so `except RuntimeError` written for torch and
`except ValueError` written for Python catch the same error, and tg's message says what was wrong and what was
expected. tinygrad asserts some checks and its programs and tests catch AssertionError (a matmul, reshape, einsum or
gather whose shapes don't fit; a TinyJit input whose shape changed): those errors subclass AssertionError as well.

  TgArgumentError(ValueError, RuntimeError)    an argument's value is wrong (a negative size, an unknown mode)
    ShapeError(.., AssertionError)             shapes don't fit (matmul, reshape, broadcast, cat, gather, einsum)
      IndexShapeError(ShapeError, IndexError)  index tensors of t[...] whose shapes don't broadcast (torch: IndexError)
  AxisError(IndexError, RuntimeError)          an axis out of range, or repeated where each must be distinct
  DTypeError(TypeError, RuntimeError)          an op given a dtype it doesn't take (a bitwise op on floats)
  GradientError(RuntimeError)                  backward from a tensor that has no gradient graph: it doesn't depend on
                                               any tensor that requires grad, or only through ops that have no gradient
                                               (comparisons, bitwise ops, integer division), as torch
"""
from __future__ import annotations


class TgArgumentError(ValueError, RuntimeError):
  """An argument's value is wrong."""


class ShapeError(TgArgumentError, AssertionError):
  """Shapes that don't fit together (also an AssertionError: tinygrad asserts these)."""


class IndexShapeError(ShapeError, IndexError):
  """Index tensors (or lists) in t[...] whose shapes don't broadcast together."""


class AxisError(IndexError, RuntimeError):
  """An axis (dim) out of range for the tensor, or one given twice where each must be distinct."""


class DTypeError(TypeError, RuntimeError):
  """A dtype the op doesn't take."""


class GradientError(RuntimeError):
  """backward() through an op that has no gradient."""


class IndexOutOfRangeError(IndexError, RuntimeError):
  """An index out of range for its axis: t[idx] and Embedding (torch: IndexError), gather (torch: RuntimeError), a
  loss's target class (torch: IndexError). Both, as the classes above."""
