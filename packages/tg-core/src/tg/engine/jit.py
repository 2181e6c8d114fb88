"""TinyJit: run a function's kernels again without Python rebuilding them.

Call 1 runs the function normally (everything compiles). Call 2 runs it again while recording every
kernel it executes, with the buffers it used. From call 3 on, the recorded kernels are replayed with
the new inputs' buffers put in place of the recorded inputs' (and new values for symbolic sizes), and
the function itself is not called at all. The capture's scratch buffers (neither inputs, nor returned, nor held
outside) share memory, planned once at capture (memory.py).

What that requires of the function, as in tinygrad: its tensor inputs are arguments (data made inside
the function from Python/numpy is frozen at capture); it returns realized tensors (call .realize());
state it updates lives in realized tensors written in place (`assign`, which optimizers use).
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from tg import divcheck
from tg.device import Buffer, Device
from tg.engine import memory, pending
from tg.engine.realize import CompiledRunner, ExecItem, capturing
from tg.helpers import DEBUG
from tg.interrupts import hold_sigint
from tg.settings import JIT, JIT_GRAPH
from tg.shape.symbolic import Node, Variable

ReturnType = TypeVar("ReturnType")


class JitError(RuntimeError):
  pass


def _input_tensors(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[str, Any]]:
  from tg.tensor import Tensor
  named = [(str(i), a) for i, a in enumerate(args)] + sorted(kwargs.items())
  return [(name, t) for name, t in named if isinstance(t, Tensor)]


def _signature(t: Any) -> tuple[Any, ...]:
  """What must stay the same between calls: the shape (symbolic sizes by variable), dtype and device."""
  shape = tuple(s.unbind()[0] if isinstance(s, Node) else s for s in t.shape)
  return (shape, t.dtype, t.device)


class TinyJit(Generic[ReturnType]):
  def __init__(self, fxn: Callable[..., ReturnType]) -> None:
    self.fxn = fxn
    self.reset()
    functools.update_wrapper(self, fxn)  # type: ignore[arg-type]

  def reset(self) -> None:
    self.cnt = 0
    self.jit_cache: list[ExecItem] = []
    self.input_replace: dict[tuple[int, int], int] = {}  # (item, buffer position) -> input number
    self.signature: list[tuple[str, tuple[Any, ...]]] = []
    self.ret: Any = None
    self.graph: Any = None
    self.div_flags: list[Buffer] = []  # integer divisions' zero-divisor flags (tg.divcheck), read after each replay

  def __get__(self, obj: Any, objtype: Any = None) -> Any:
    """Used as a method decorator, bind the instance."""
    return functools.partial(self.__call__, obj) if obj is not None else self

  def __call__(self, *args: Any, **kwargs: Any) -> ReturnType:
    inputs = _input_tensors(args, kwargs)
    for _, t in inputs:  # inputs are buffers the replay can point at
      if t.lazydata.base.realized is None or not t.lazydata.st.contiguous:
        t.realize()
        if not t.lazydata.st.contiguous:
          t.lazydata = t.contiguous().realize().lazydata
    signature = [(name, _signature(t)) for name, t in inputs]
    var_vals: dict[Variable, int] = {}
    for _, t in inputs:
      for s in t.shape:
        if isinstance(s, Node):
          var_vals.update(Node.unbind(s)[1])  # Node.unbind, not Variable.unbind: the values of all its variables
    if self.cnt == 0 or JIT.value == 0:
      self.cnt += 1
      self.signature = signature
      return self.fxn(*args, **kwargs)
    if signature != self.signature:
      raise JitError(f"TinyJit inputs changed: the function was captured with {self.signature}, now called with {signature}; "
                     "a jitted function needs the same shapes (sizes may vary only through Variables), dtypes and devices every call")
    buffers = [t.lazydata.base.realized for _, t in inputs]
    if self.cnt == 1:
      self._capture(args, kwargs, buffers)
    else:
      self._replay(buffers, var_vals)
    self.cnt += 1
    return self.ret  # type: ignore[no-any-return]

  def _capture(self, args: tuple[Any, ...], kwargs: dict[str, Any], buffers: list[Buffer | None]) -> None:
    with capturing() as captured, divcheck.recording() as self.div_flags:
      self.ret = self.fxn(*args, **kwargs)
    from tg.tensor import Tensor
    outs = [self.ret] if isinstance(self.ret, Tensor) else list(self.ret) if isinstance(self.ret, (tuple, list)) else []
    for o in outs:
      if isinstance(o, Tensor) and o.lazydata.base.realized is None:
        raise JitError("a jitted function must return realized tensors: call .realize() on what it returns")
    self.jit_cache = [ei for ei, _ in captured]
    self.captured_vals = [vals for _, vals in captured]
    positions = {id(b): i for i, b in enumerate(buffers) if b is not None}
    self.input_replace = {(j, k): positions[id(b)] for j, ei in enumerate(self.jit_cache) for k, b in enumerate(ei.bufs) if id(b) in positions}
    # everything else the kernels use that nobody outside holds is scratch: replays share its memory
    returned = [o.lazydata.base.buffer for o in outs if isinstance(o, Tensor)]
    memory.plan_jit(self.jit_cache, {b for b in buffers + returned + self.div_flags if b is not None})
    if DEBUG >= 1:
      print(f"TinyJit captured {len(self.jit_cache)} kernels with {len(buffers)} inputs")
    devices = {ei.prg.device for ei in self.jit_cache}
    if len(devices) == 1 and all(isinstance(ei.prg, CompiledRunner) for ei in self.jit_cache) and JIT_GRAPH.value:
      graph_cls = Device[devices.pop()].graph
      if graph_cls is not None:
        self.graph = graph_cls(self.jit_cache, self.input_replace)

  def _replay(self, buffers: list[Buffer | None], var_vals: dict[Variable, int]) -> None:
    for (j, k), i in self.input_replace.items():
      b = buffers[i]
      assert b is not None
      self.jit_cache[j].bufs[k] = b
    if pending.has_open():  # a failed realize left kernels to run that read what this replay overwrites: run them first
      roots = {memory.root(b) for ei in self.jit_cache for b in ei.bufs}
      pending.settle(roots, roots)
    # a replay is one step (an optimizer's state and parameters move together): Ctrl-C waits for its end
    with hold_sigint():
      if self.graph is not None:
        self.graph(var_vals)  # one launch of the whole step: a failure inside it is not split per kernel
      else:
        for i, (ei, vals) in enumerate(zip(self.jit_cache, self.captured_vals)):
          try:
            ei.run({**vals, **var_vals})
          except BaseException:
            # the kernels before ran: the rest of the step stays to do, and runs before anything reads what it writes
            rest = [_ReplayRest(e, {**v, **var_vals}) for e, v in zip(self.jit_cache[i:], self.captured_vals[i:])]
            pending.PendingWork(rest, lower=_ReplayRest.runner)  # type: ignore[arg-type]
            raise
    divcheck.check_flags(self.div_flags)


class _ReplayRest:
  """One kernel of a replay that failed part way, with the buffers and values of that replay (the next replay rebinds
  the jit's ExecItems to its own inputs)."""

  def __init__(self, ei: ExecItem, var_vals: dict[Variable, int]) -> None:
    self.ei, self.var_vals = ExecItem(ei.prg, list(ei.bufs), ei.outs), var_vals

  @property
  def outputs(self) -> list[Buffer]:
    return self.ei.bufs[:self.ei.outs]

  @property
  def bufs(self) -> list[Buffer]:
    return self.ei.bufs

  def runner(self) -> Callable[[], object]:
    return functools.partial(self.ei.run, self.var_vals)
