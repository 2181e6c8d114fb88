"""Model weights in and out: finding a model's tensors (get_state_dict, get_parameters), loading them
(load_state_dict), and the weight file formats: safetensors (safe_save, safe_load), PyTorch (torch_load) and
GGUF (gguf_load), each in a module of its own.

Loaders map files instead of reading them: a tensor stored whole and in order in the file becomes a realized
tensor on the DISK device whose buffer is a view of the file's one shared mapping, so loading a file bigger than
RAM is free and moving a tensor to a compute device (`.to(Device.DEFAULT)`) copies only that tensor's bytes.
Data that has to be rearranged first (strided PyTorch tensors, quantized GGUF blocks, compressed or big-endian
storages) is rearranged by numpy on the host as it moves in, and those tensors land on `Device.DEFAULT`.
Loaders never write: files are opened and mapped read-only, every tensor's extent is checked against the file
before anything is read, and a malformed, truncated or lying file raises WeightsFileError (a ValueError) naming
the file and the tensor or field.
"""
from __future__ import annotations

import time
from typing import Any

from tg.device import is_dtype_supported
from tg.helpers import GlobalCounters
from tg.nn.state._common import WeightsFileError
from tg.nn.state.gguf import ggml_data_to_tensor, ggml_dequantize, gguf_load
from tg.nn.state.pytorch import torch_load
from tg.nn.state.safetensors import safe_load, safe_load_metadata, safe_save
from tg.tensor import Tensor

__all__ = ["StateDictKeyError", "StateDictTypeError", "WeightsFileError", "get_parameters", "get_state_dict", "ggml_data_to_tensor",
           "ggml_dequantize", "gguf_load", "load_state_dict", "safe_load", "safe_load_metadata", "safe_save", "torch_load"]


# ---------- finding a model's tensors ----------

def get_state_dict(obj: Any, prefix: str = "") -> dict[str, Tensor]:
  """Every Tensor reachable from `obj` through attributes, lists, tuples and dicts, by dotted name. An object shared by
  two attributes is listed under both names; a reference back to an object on the way to it (a module that holds
  its parent) is not followed (it recursed until RecursionError)."""
  return _state_dict(obj, prefix, set())


def _state_dict(obj: Any, prefix: str, path: set[int]) -> dict[str, Tensor]:
  if isinstance(obj, Tensor):
    return {prefix.strip("."): obj}
  if not isinstance(obj, (list, tuple, dict)) and not hasattr(obj, "__dict__"):
    return {}
  if id(obj) in path:
    return {}
  path.add(id(obj))
  try:
    if isinstance(obj, (list, tuple)):
      return {k: v for i, x in enumerate(obj) for k, v in _state_dict(x, f"{prefix}{i}.", path).items()}
    if isinstance(obj, dict):
      return {k: v for key, x in obj.items() for k, v in _state_dict(x, f"{prefix}{key}.", path).items()}
    return _state_dict(vars(obj), prefix, path)
  finally:
    path.discard(id(obj))


def get_parameters(obj: Any) -> list[Tensor]:
  return list(get_state_dict(obj).values())


class StateDictTypeError(TypeError, RuntimeError):
  """A state dict value that isn't a Tensor (a numpy array, a torch tensor). A TypeError, and a RuntimeError as torch's
  load_state_dict raises for one."""


class StateDictKeyError(KeyError):
  """The keys of a state dict don't match the model's. A KeyError, as tinygrad raises for a missing key, but
  printed as a sentence (a plain KeyError prints the repr of its message)."""

  def __str__(self) -> str:
    return str(self.args[0]) if self.args else ""


def _moved(src: Tensor, v: Tensor) -> Tensor:
  """`src` on `v`'s device in `v`'s dtype. A dtype the device can't compute with (torch's int64 num_batches_tracked on
  a device without int64) is converted by numpy on the host instead of by a kernel there."""
  if src.dtype != v.dtype and not is_dtype_supported(src.dtype, v.device) and v.dtype.np is not None:
    return Tensor(src.numpy().astype(v.dtype.np), device=v.device)
  return src.to(v.device).cast(v.dtype)


def _shapes_fit(have: tuple[Any, ...], want: tuple[Any, ...]) -> bool:
  """Whether a stored value of shape `have` loads into a tensor of shape `want`: the same shape, or one element stored
  0-d where the model has (1,) or the other way round (torch saves BatchNorm's num_batches_tracked 0-d, tinygrad and tg
  keep it (1,)). Nothing looser: any other mismatch is a wrong checkpoint."""
  return have == want or {have, want} == {(), (1,)}


def load_state_dict(model: Any, state_dict: dict[str, Tensor], strict: bool = True, verbose: bool = False, consume: bool = False) -> None:
  """Give each of `model`'s tensors (named as get_state_dict names them) the value stored under its name.

  Values move to the model tensor's device and take its dtype, so a float16 DISK tensor can fill a float32
  parameter on the compute device; the model's tensor objects stay the same, so optimizers and other holders
  of them see the new values. Every key is checked before anything is assigned, so a failed load leaves the
  model as it was. Values must be Tensors, as in tinygrad and torch: a numpy array or a torch tensor raises
  StateDictTypeError naming its key. `strict` demands the two key sets match exactly; `consume` deletes loaded
  entries from `state_dict` so their (possibly large) source tensors can be freed as soon as possible."""
  model_state = get_state_dict(model)
  missing = [k for k in model_state if k not in state_dict]
  unexpected = [k for k in state_dict if k not in model_state]
  if strict and (missing or unexpected):
    raise StateDictKeyError(f"load_state_dict(strict=True): the state dict doesn't match the model: "
                   f"missing keys {missing}, unexpected keys {unexpected}")
  for k, v in model_state.items():
    if k not in state_dict:
      continue
    if not isinstance(src := state_dict[k], Tensor):
      raise StateDictTypeError(f"load_state_dict: the value for {k!r} is a {type(src).__module__}.{type(src).__qualname__}, not a tg Tensor: "
                               "convert it first (Tensor(array) for a numpy array; torch_load reads a torch checkpoint)")
    if not _shapes_fit(tuple(src.shape), tuple(v.shape)):
      raise ValueError(f"load_state_dict: shape mismatch for {k!r}: the state dict has {tuple(src.shape)}, "
                       f"the model has {tuple(v.shape)}")
  start_mem, st = GlobalCounters.mem_used, time.perf_counter()
  # every new value is made (moved, cast) before the first assign, so an error making one assigns nothing
  new = {k: _moved(state_dict[k], v).reshape(v.shape) for k, v in model_state.items() if k in state_dict}
  loaded: list[Tensor] = []
  for k, v in model_state.items():
    if k not in new:
      if verbose:
        print(f"load_state_dict: not loading {k} (not in the state dict)")
      continue
    v.assign(new[k])
    loaded.append(v)
    if consume:
      del state_dict[k]
  Tensor.realize_all(*loaded)
  if verbose:
    et = time.perf_counter() - st
    print(f"load_state_dict: loaded {len(loaded)} tensors in {et * 1e3:.2f} ms, "
          f"{(GlobalCounters.mem_used - start_mem) / 1e9:.2f} GB more memory in use")
