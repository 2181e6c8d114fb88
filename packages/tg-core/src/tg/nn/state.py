"""Finding a model's tensors: get_parameters and get_state_dict walk an object's attributes."""
from __future__ import annotations

from typing import Any

from tg.tensor import Tensor


def get_state_dict(obj: Any, prefix: str = "") -> dict[str, Tensor]:
  """Every Tensor reachable from `obj` through attributes, lists, tuples and dicts, by dotted name."""
  if isinstance(obj, Tensor):
    return {prefix.strip("."): obj}
  if isinstance(obj, (list, tuple)):
    return {k: v for i, x in enumerate(obj) for k, v in get_state_dict(x, f"{prefix}{i}.").items()}
  if isinstance(obj, dict):
    return {k: v for key, x in obj.items() for k, v in get_state_dict(x, f"{prefix}{key}.").items()}
  if hasattr(obj, "__dict__"):
    return get_state_dict(vars(obj), prefix)
  return {}


def get_parameters(obj: Any) -> list[Tensor]:
  return list(get_state_dict(obj).values())
