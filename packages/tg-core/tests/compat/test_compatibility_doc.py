"""docs/compatibility.md stays true: its two tables (tinygrad 0.9.1's Tensor API, and the PyTorch ops of issue 15)
say for each name whether tg supports it. A name marked supported must exist in tg, a name marked not supported
must be missing, and the first table must list exactly tinygrad 0.9.1's names. When tg gains or loses a name,
a test here fails and says which row of the doc to update. Only attribute lookups: no kernel runs."""
import re
from pathlib import Path

import pytest

import tg
from tg import Tensor

DOC = Path(__file__).resolve().parents[4] / "docs" / "compatibility.md"
TENSOR_HEADING = "## tinygrad 0.9.1 `Tensor` API"
TORCH_HEADING = "## PyTorch ops real models use"

# The public functions, properties and operators in the body of `class Tensor` in tinygrad 0.9.1's tinygrad/tensor.py
# (ast: every FunctionDef whose name has no leading underscore, plus the dunders). Kept here because tinygrad is not
# installed where the tests run.
TINYGRAD_091_TENSOR = frozenset({
  "T", "__add__", "__bool__", "__eq__", "__ge__", "__getitem__", "__gt__", "__hash__", "__iadd__", "__ilshift__",
  "__imatmul__", "__imul__", "__init__", "__ipow__", "__irshift__", "__isub__", "__itruediv__", "__ixor__", "__le__",
  "__len__", "__lshift__", "__lt__", "__matmul__", "__mul__", "__ne__", "__neg__", "__pow__", "__radd__", "__repr__",
  "__rmatmul__", "__rmul__", "__rpow__", "__rshift__", "__rsub__", "__rtruediv__", "__rxor__", "__setitem__", "__sub__",
  "__truediv__", "__xor__", "abs", "acosh", "add", "arange", "argmax", "argmin", "asinh", "assign", "atanh", "avg_pool2d",
  "backward", "batchnorm", "binary_crossentropy", "binary_crossentropy_logits", "bitcast", "cast", "cat", "ceil", "celu",
  "chunk", "clip", "contiguous", "contiguous_backward", "conv2d", "conv_transpose2d", "cos", "cosh", "cumsum", "data",
  "detach", "device", "div", "dot", "dropout", "dtype", "einsum", "element_size", "elu", "empty", "exp", "exp2", "expand",
  "eye", "flatten", "flip", "float", "floor", "from_node", "full", "full_like", "gather", "gelu", "glorot_uniform", "half",
  "hardswish", "hardtanh", "image_conv2d", "image_dot", "is_floating_point", "item", "kaiming_normal", "kaiming_uniform",
  "layernorm", "leakyrelu", "lerp", "linear", "llvm_bf16_cast", "log", "log2", "log_softmax", "logical_not", "logsumexp",
  "lshift", "manual_seed", "masked_fill", "matmul", "max", "max_pool2d", "maximum", "mean", "min", "minimum", "mish", "mul",
  "multinomial", "nbytes", "ndim", "neg", "normal", "numel", "numpy", "one_hot", "ones", "ones_like", "pad", "pad2d",
  "permute", "pow", "quick_gelu", "rand", "randint", "randn", "realize", "reciprocal", "relu", "relu6", "repeat", "replace",
  "reshape", "round", "rshift", "rsqrt", "scaled_dot_product_attention", "scaled_uniform", "schedule", "schedule_with_vars",
  "sequential", "shape", "shard", "shard_", "shrink", "sigmoid", "sign", "silu", "sin", "sinh", "size", "softmax",
  "softplus", "softsign", "sparse_categorical_crossentropy", "split", "sqrt", "square", "squeeze", "stack", "std", "sub",
  "sum", "swish", "tan", "tanh", "to", "to_", "tolist", "transpose", "tril", "triu", "trunc", "unflatten", "uniform",
  "unsqueeze", "var", "view", "where", "xor", "zeros", "zeros_like",
})

# The ops of issue 15's "The ops real models use", one row each (scatter_add / scatter_reduce, tril/triu, asin/acos/atan,
# amax/amin, isclose/allclose and LSTMCell/LSTM split into their names).
ISSUE_15_TORCH_OPS = frozenset({
  "sort", "argsort", "topk", "scatter", "scatter_add", "scatter_reduce", "index_select", "index_add", "masked_fill", "roll",
  "diag", "tril", "triu", "norm", "cross", "outer", "bmm", "tensordot", "interpolate", "erf", "log1p", "expm1", "atan2",
  "asin", "acos", "atan", "remainder", "cumprod", "cummax", "amax", "amin", "isclose", "allclose", "clone", "movedim", "tile",
  "narrow", "unfold", "pixel_shuffle", "meshgrid", "bincount", "cosine_similarity", "searchsorted", "nn.MultiheadAttention",
  "nn.LSTMCell", "nn.LSTM", "nn.Dropout", "nn.Sequential", "nn.ModuleList",
})

ROW = re.compile(r"^\| `(?P<name>[^`]+)` \| (?P<status>[^|]*?) \| (?P<notes>.*)\|$")
STATUS = re.compile(r"^(supported|supported, differs: \S.*|not supported: \S.*)$")


def _table(heading: str) -> list[tuple[int, str, str]]:
  """(line number, name, status) of each row of the first table after `heading`."""
  lines = DOC.read_text().splitlines()
  assert heading in lines, f"{DOC} has no heading {heading!r}"
  rows: list[tuple[int, str, str]] = []
  for i in range(lines.index(heading) + 1, len(lines)):
    line = lines[i]
    if line.startswith("## "):
      break
    if rows and not line.startswith("|"):
      break  # the table ended
    m = ROW.match(line)
    if m:
      rows.append((i + 1, m["name"], m["status"]))
  assert rows, f"no table rows under {heading!r} in {DOC}"
  return rows


def _exists(name: str) -> bool:
  """Whether tg has `name`: nn.X in tg.nn, anything else on tg.Tensor (methods, properties, operators)."""
  if name.startswith("nn."):
    return hasattr(tg.nn, name[3:])
  return hasattr(Tensor, name)


def _check_rows(rows: list[tuple[int, str, str]]) -> None:
  stale = []
  for line, name, status in rows:
    assert STATUS.match(status), f"{DOC.name}:{line} `{name}`: status {status!r} is not 'supported', " \
                                 "'supported, differs: <how>' or 'not supported: <why>'"
    supported = status.startswith("supported")
    if supported != _exists(name):
      now = "exists in tg" if _exists(name) else "is missing from tg"
      stale.append(f"{DOC.name}:{line} `{name}` is marked {status.split(':')[0]!r} but {now}: update that row")
  assert not stale, "docs/compatibility.md is stale:\n" + "\n".join(stale)


def _check_names(rows: list[tuple[int, str, str]], expected: frozenset[str], what: str) -> None:
  names = [name for _, name, _ in rows]
  twice = sorted({n for n in names if names.count(n) > 1})
  assert not twice, f"{DOC.name}: rows listed twice in the {what} table: {twice}"
  assert not expected - set(names), f"{DOC.name}: the {what} table lacks rows for {sorted(expected - set(names))}"
  assert not set(names) - expected, f"{DOC.name}: the {what} table has rows that are not {what} names: {sorted(set(names) - expected)}"


@pytest.fixture(scope="module")
def tensor_rows() -> list[tuple[int, str, str]]:
  return _table(TENSOR_HEADING)


@pytest.fixture(scope="module")
def torch_rows() -> list[tuple[int, str, str]]:
  return _table(TORCH_HEADING)


def test_tensor_table_lists_exactly_tinygrad_091_names(tensor_rows: list[tuple[int, str, str]]) -> None:
  _check_names(tensor_rows, TINYGRAD_091_TENSOR, "tinygrad 0.9.1 Tensor")


def test_tensor_table_status_matches_tg(tensor_rows: list[tuple[int, str, str]]) -> None:
  _check_rows(tensor_rows)


def test_torch_table_lists_the_issue_ops(torch_rows: list[tuple[int, str, str]]) -> None:
  _check_names(torch_rows, ISSUE_15_TORCH_OPS, "issue 15 PyTorch op")


def test_torch_table_status_matches_tg(torch_rows: list[tuple[int, str, str]]) -> None:
  _check_rows(torch_rows)


def test_stale_row_is_reported() -> None:
  """The check names the row: a name marked supported that tg lacks, and one marked not supported that tg has."""
  with pytest.raises(AssertionError, match=r"compatibility.md:7 `no_such_op` is marked 'supported' but is missing from tg"):
    _check_rows([(7, "no_such_op", "supported")])
  with pytest.raises(AssertionError, match=r"`sum` is marked 'not supported' but exists in tg"):
    _check_rows([(9, "sum", "not supported: because")])
  with pytest.raises(AssertionError, match="is not 'supported'"):
    _check_rows([(3, "sum", "works")])
