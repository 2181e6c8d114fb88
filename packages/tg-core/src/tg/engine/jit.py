"""TinyJit: run a function's kernels again without Python rebuilding them, as tinygrad 0.9.1's TinyJit does.

Call 1 runs the function normally (everything compiles). Call 2 runs it again while recording every
kernel it executes, with the buffers it used. From call 3 on, the recorded kernels are replayed with
the new inputs' buffers put in place of the recorded inputs' (and new values for symbolic sizes), and
the function itself is not called at all. The capture's scratch buffers (neither inputs, nor returned, nor held
outside) share memory, planned once at capture (memory.py). On a device with a graph, the kernels replay in
batches through it (`JIT_BATCH_SIZE` kernels in the first, twice as many in each next, as tinygrad splits them).

What that requires of the function, as in tinygrad: its tensor inputs are arguments (data made inside
the function from Python/numpy is frozen at capture); symbolic sizes come from its inputs' shapes or from bound
Variables passed as arguments; state it updates lives in realized tensors written in place (`assign`, which
optimizers use). What it returns is realized as part of the capture (tensors alone or in lists, tuples, dicts);
a returned tensor whose shape holds a Variable comes back with this call's value of it. Random numbers are drawn
from a device buffer the replay advances (Tensor._rng_state), so every replay draws new ones.

tg differs from tinygrad in two places: a non-contiguous input (a view) is copied to a buffer of its own each call,
so any view works, where tinygrad refuses a view whose offset changed; and a replay checks the arguments that aren't
tensors (numbers, strings, containers of them, a tensor inside a container) against the capture's, raising
JitInputError where they changed, where tinygrad replays the captured values silently.
"""
from __future__ import annotations

import functools
import numbers
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from tg import divcheck
from tg.device import Buffer, Device
from tg.engine import memory, pending, profile
from tg.engine.realize import CompiledRunner, ExecItem, Runner, capturing, count
from tg.helpers import DEBUG, GlobalCounters, colored
from tg.interrupts import hold_sigint
from tg.lazy import LazyBuffer
from tg.multi import MultiLazyBuffer, parts
from tg.settings import JIT, JIT_BATCH_SIZE, JIT_GRAPH
from tg.shape.symbolic import Node, Variable, sint

if TYPE_CHECKING:
  from tg.tensor import Tensor

ReturnType = TypeVar("ReturnType")


class JitError(RuntimeError):
  """A TinyJit used in a way it can't capture or replay."""


class JitInputError(JitError, AssertionError):
  """A call's inputs don't fit the capture (shapes, dtypes, devices, names; the same buffer twice). Also an
  AssertionError: tinygrad asserts these, and programs and tests written for it catch that."""


class JitCaptureError(JitError, AssertionError):
  """The capture recorded no kernel: there is nothing to replay (tinygrad asserts "didn't JIT anything")."""


class GraphRunner(Runner):
  """A batch of a TinyJit capture's kernels replayed in one go by a device's graph (tg.runtime.graph.BatchGraph,
  tg_cuda.graph.CUDAGraph). Its ExecItems are the jit's own: before each replay the jit puts that call's input
  buffers into them (at the positions of `input_replace`), so `__call__` ignores `bufs` and reads them there."""

  def __init__(self, jit_cache: list[ExecItem], input_replace: dict[tuple[int, int], int]) -> None:
    self.jit_cache, self.input_replace = jit_cache, input_replace
    op_estimate: sint = 0
    mem_estimate: sint = 0
    for ei in jit_cache:
      op_estimate, mem_estimate = op_estimate + ei.prg.op_estimate, mem_estimate + ei.prg.mem_estimate
    super().__init__(colored(f"<batched {len(jit_cache)}>", "cyan"), jit_cache[0].prg.device, op_estimate, mem_estimate)
    self.n_kernels = len(jit_cache)


class _Running(threading.local):
  """The TinyJits whose function runs now in this thread: one called inside another raises (one called by another
  thread meanwhile is not inside it)."""
  def __init__(self) -> None:
    self.jits: list[object] = []


_running = _Running()


def _input_tensors(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[str, Tensor]]:
  """The tensor arguments by name; a sharded one as its part on each device (named by the part and the axis it splits)."""
  from tg.tensor import Tensor
  named = [(str(i), a) for i, a in enumerate(args)] + sorted(kwargs.items())
  out: list[tuple[str, Tensor]] = []
  for name, t in named:
    if isinstance(t, Tensor) and isinstance(mlb := t.lazydata, MultiLazyBuffer):
      out.extend((f"{name}[{i} of axis {mlb.axis}]", Tensor(lb, device=lb.device, requires_grad=t.requires_grad)) for i, lb in enumerate(mlb.lbs))
    elif isinstance(t, Tensor):
      out.append((name, t))
  return out


def _input_var_vals(inputs: list[tuple[str, Tensor]], args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[Variable, int]:
  """The values of this call's symbolic sizes: those in the inputs' shapes and bound Variables passed as arguments
  (a KV cache's start_pos)."""
  var_vals: dict[Variable, int] = {}
  for _, t in inputs:
    for s in t.shape:
      if isinstance(s, Node):
        var_vals.update(Node.unbind(s)[1])  # Node.unbind, not Variable.unbind: the values of all its variables
  for name, a in [*enumerate(args), *kwargs.items()]:
    if isinstance(a, Variable):
      if a.val is None:
        raise JitInputError(f"TinyJit argument {name} is the unbound Variable {a.expr}: pass {a.expr}.bind(value), whose value the replay uses")
      var_vals.update(Node.unbind(a)[1])
  return var_vals


class _Same:
  """Equal to another _Same of the same live object (a weak reference: a new tensor may get a dead one's id)."""

  def __init__(self, obj: Any) -> None:
    self.ref = weakref.ref(obj)

  def __eq__(self, other: object) -> bool:
    return isinstance(other, _Same) and (o := self.ref()) is not None and o is other.ref()

  def __hash__(self) -> int:
    return id(self.ref())


def _static_key(a: Any) -> Any:
  """What the capture baked into its kernels of a non-tensor argument, for a replay to check: a number, a string or
  None by value (a float by its bits: NaN is NaN), lists, tuples and dicts of them item by item, a tensor inside one by
  identity (it is no input: the replay reads the buffer captured). Other objects (a model passed as `self`) are not
  compared: None."""
  from tg.tensor import Tensor
  if isinstance(a, Tensor):
    return (Tensor, _Same(a))
  if a is None or type(a) in (bool, int, str, bytes):
    return (type(a), a)
  if type(a) is float:
    return (float, a.hex())
  if isinstance(a, (list, tuple)):
    return (type(a), tuple(_static_key(x) for x in a))
  if isinstance(a, dict):
    return (dict, tuple((repr(k), _static_key(v)) for k, v in a.items()))
  if isinstance(a, numbers.Number) and not isinstance(a, Node):  # numpy scalars
    return (type(a), repr(a))
  return None


def _static_args(named: list[tuple[Any, Any]]) -> tuple[tuple[str, Any], ...]:
  """The non-tensor arguments by name as _static_key sees them (tensor and Variable arguments are the replay's inputs)."""
  from tg.tensor import Tensor
  return tuple((str(name), _static_key(a)) for name, a in named if not isinstance(a, (Tensor, Node)))


def _shown(static: tuple[tuple[str, Any], ...]) -> str:
  """_static_args for an error message: each argument's value (a tensor in a container as 'Tensor')."""
  def show(k: Any) -> str:
    if k is None:
      return "(not compared)"
    t, v = k
    if t is float:
      return repr(float.fromhex(v))
    if t in (list, tuple):
      inner = ", ".join(show(x) for x in v)
      return f"[{inner}]" if t is list else f"({inner})"
    if t is dict:
      return "{" + ", ".join(f"{kk}: {show(x)}" for kk, x in v) + "}"
    return "Tensor" if getattr(t, "__name__", "") == "Tensor" else repr(v)
  return "{" + ", ".join(f"{name}: {show(k)}" for name, k in static) + "}"


def _signature(t: Tensor) -> tuple[Any, ...]:
  """What must stay the same between calls: the shape (symbolic sizes by variable), dtype and device."""
  shape = tuple(s.unbind()[0] if isinstance(s, Node) else s for s in t.shape)
  return (shape, t.dtype, t.device)


def _plain_inputs(args: tuple[Any, ...]) -> tuple[list[Buffer], list[tuple[str, tuple[Any, ...]]], list[tuple[int, Any]]] | None:
  """A replay's inputs in one pass, when every argument is either not a tensor (nor a Variable) or a realized whole
  buffer of one device with a shape of numbers (a training step's batch): the buffers and the signature the general
  path (_contiguous_inputs, _input_tensors, _input_buffers, _signature) would give, which cost 9 of a replay's 12 us.
  None for anything else: views, lazy or sharded tensors, symbolic shapes, Variables, one buffer passed twice. The
  arguments that aren't tensors come third, by position."""
  from tg.tensor import Tensor
  buffers: list[Buffer] = []
  signature: list[tuple[str, tuple[Any, ...]]] = []
  others: list[tuple[int, Any]] = []
  for i, a in enumerate(args):
    if type(a) is not Tensor:
      if isinstance(a, (Tensor, Node)):
        return None
      others.append((i, a))
      continue
    lb = a.lazydata
    if type(lb) is not LazyBuffer or lb._base is not None or lb.realized is None or not lb.st.contiguous:
      return None
    if any(type(d) is not int for d in lb.shape) or any(b is lb.buffer for b in buffers):
      return None
    buffers.append(lb.buffer)
    signature.append((str(i), (lb.shape, lb.dtype, lb.device)))
  return buffers, signature, others


def _contiguous_inputs(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
  """The arguments with each tensor realized, and each view (non-contiguous) replaced by a realized copy: a replay
  points the kernels at each input's buffer, so the function must see inputs that are whole buffers. The caller's
  tensors are not changed (a view passed in stays a view of its buffer)."""
  from tg.tensor import Tensor

  def prepare(a: Any) -> Any:
    if not isinstance(a, Tensor):
      return a
    if any(lb.base.realized is None for lb in _parts(a)):
      a.realize()
    return a if all(lb.st.contiguous for lb in _parts(a)) else a.contiguous().realize()
  return tuple(prepare(a) for a in args), {k: prepare(v) for k, v in kwargs.items()}


def _parts(t: Tensor) -> list[LazyBuffer]:
  """t's LazyBuffers: one, or a sharded tensor's part on each of its devices (each an input of its own)."""
  return parts(t.lazydata)


def _input_buffers(inputs: list[tuple[str, Tensor]]) -> list[Buffer]:
  """Each input's buffer; the same buffer passed twice is refused (a replay puts each input's buffer in its own place)."""
  buffers = [_parts(t)[0].base.buffer for _, t in inputs]  # (_input_tensors gave a sharded tensor's parts one by one)
  seen: dict[int, str] = {}
  for (name, _), b in zip(inputs, buffers):
    if (other := seen.setdefault(id(b), name)) != name:
      raise JitInputError(f"TinyJit got the same buffer as inputs {other} and {name}: a replay puts each input's buffer in its own place, "
                          "so each input must be a buffer of its own (pass one of them, or a .contiguous() copy)")
  return buffers


def _returned_tensors(ret: Any) -> list[Tensor]:
  """The tensors a jitted function returned: alone or in lists, tuples and dicts."""
  from tg.tensor import Tensor
  if isinstance(ret, Tensor):
    return [ret]
  if isinstance(ret, (list, tuple)):
    return [t for x in ret for t in _returned_tensors(x)]
  if isinstance(ret, dict):
    return [t for x in ret.values() for t in _returned_tensors(x)]
  return []


def _realize_returned(ret: Any) -> None:
  from tg.tensor import Tensor
  outs = _returned_tensors(ret)
  if any(lb.base.realized is None for o in outs for lb in _parts(o)):
    Tensor.realize_all(*outs)


class TinyJit(Generic[ReturnType]):
  def __init__(self, fxn: Callable[..., ReturnType]) -> None:
    self.fxn = fxn
    self.reset()
    functools.update_wrapper(self, fxn)  # type: ignore[arg-type]

  def reset(self) -> None:
    self.cnt = 0
    self.kernels: list[ExecItem] = []  # every captured kernel, in order
    self.kernel_vals: list[dict[Variable, int]] = []  # the symbolic values each ran with at capture
    self.input_replace: dict[tuple[int, int], int] = {}  # (kernel, buffer position) -> input number
    self.jit_cache: list[ExecItem] = []  # what a replay runs: the kernels, or graphs of batches of them
    self.covers: list[list[int]] = []  # the kernels each item of jit_cache runs
    self.item_vals: list[dict[Variable, int]] = []  # the symbolic values of each item's kernels at capture
    self.plain_total: tuple[int, int, int] | None = None  # what a whole plain replay adds to GlobalCounters (_plain_total)
    self.signature: list[tuple[str, tuple[Any, ...]]] = []
    self.static: tuple[tuple[str, Any], ...] = ()  # the capture's non-tensor arguments (_static_args): baked into its kernels
    self.ret: Any = None
    self.symbolic_returns = False  # whether a returned tensor's shape or view holds a Variable (rebound to each replay's value)
    # the flags of the checks of integer divisions and index tensors (tg.divcheck), read where the capture read them
    self.div_flags = divcheck.Checks(lambda: 0)

  def __get__(self, obj: Any, objtype: Any = None) -> Any:
    """Used as a method decorator, bind the instance."""
    return functools.partial(self.__call__, obj) if obj is not None else self

  @property
  def graph(self) -> GraphRunner | None:
    """The first graph this jit replays through (None: it runs its kernels one by one)."""
    return next((ei.prg for ei in self.jit_cache if isinstance(ei.prg, GraphRunner)), None)

  @graph.setter
  def graph(self, value: GraphRunner | None) -> None:
    if value is not None:
      raise ValueError("TinyJit.graph can only be set to None (replay kernel by kernel)")
    self._use(list(self.kernels), [[j] for j in range(len(self.kernels))])

  def _use(self, jit_cache: list[ExecItem], covers: list[list[int]]) -> None:
    self.jit_cache, self.covers = jit_cache, covers
    self.item_vals = [{k: v for j in cover for k, v in self.kernel_vals[j].items()} for cover in covers]
    self.plain_total = self._plain_total()

  def _plain_total(self) -> tuple[int, int, int] | None:
    """For a replay with nothing symbolic and no division checks (most): what it adds to GlobalCounters (kernels, ops,
    bytes), so that a replay calls the items' runners directly and counts once (_replay_plain); else None. Their
    buffers are allocated here, as the first run of each would."""
    if self.div_flags.at or any(self.item_vals):
      return None
    kernels = ops = mem = 0
    for ei in self.jit_cache:
      if not isinstance(op_i := ei.prg.op_estimate, int) or not isinstance(mem_i := ei.prg.mem_estimate, int):
        return None
      kernels, ops, mem = kernels + ei.prg.n_kernels, ops + op_i, mem + mem_i
    for ei in self.kernels:
      for b in ei.bufs:
        b.ensure_allocated()
    return kernels, ops, mem

  def __call__(self, *args: Any, **kwargs: Any) -> ReturnType:
    if _running.jits:
      raise JitError("having TinyJit inside another TinyJit is not supported: the outer one captures the kernels of the inner one's "
                     "function anyway, so call that function directly")
    if self.cnt >= 2 and not kwargs and JIT.value and (plain := _plain_inputs(args)) is not None:
      buffers, signature, others = plain
      if signature == self.signature and not self.symbolic_returns and (not (others or self.static) or _static_args(others) == self.static):
        # (else the general path explains what changed)
        self._replay(buffers, {})
        self.cnt += 1
        return self.ret  # type: ignore[no-any-return]
    args, kwargs = _contiguous_inputs(args, kwargs)
    inputs = _input_tensors(args, kwargs)
    buffers = _input_buffers(inputs)
    signature = [(name, _signature(t)) for name, t in inputs]
    var_vals = _input_var_vals(inputs, args, kwargs)
    if self.cnt == 0 or JIT.value == 0:
      self.ret = self._run(args, kwargs)
    elif self.cnt == 1:
      self._capture(args, kwargs, buffers)
      self.signature, self.static = signature, _static_args([*enumerate(args), *sorted(kwargs.items())])
    else:
      if signature != self.signature:
        raise JitInputError(f"TinyJit inputs changed: the function was captured with {self.signature}, now called with {signature}; a jitted "
                            "function needs the same inputs, with the same shapes (sizes may vary only through Variables), dtypes and devices")
      if (static := _static_args([*enumerate(args), *sorted(kwargs.items())])) != self.static:
        # a replay doesn't run the function: what it made of these (x * k with k = 2) is in the kernels, and a tensor in a
        # list is no input (its captured buffer would be read), so replaying would silently give the captured call's answer
        raise JitInputError(f"TinyJit inputs changed: arguments that aren't tensors were {_shown(self.static)} at capture, now "
                            f"{_shown(static)} (a tensor in a container: the same object); a replay can't see them (the kernels hold the captured "
                            "values): pass what changes as a "
                            "Tensor (or a bound Variable), each tensor as an argument of its own, or use one TinyJit per value")
      self._replay(buffers, var_vals)
      self.cnt += 1
      return self._rebound(self.ret, var_vals) if self.symbolic_returns else self.ret  # type: ignore[no-any-return]
    self.cnt += 1
    return self.ret  # type: ignore[no-any-return]

  def _run(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Call the function, and realize what it returns (inside a capture, the kernels that does are captured too)."""
    _running.jits.append(self)
    try:
      ret = self.fxn(*args, **kwargs)
    finally:
      _running.jits.pop()
    _realize_returned(ret)
    return ret

  def _capture(self, args: tuple[Any, ...], kwargs: dict[str, Any], buffers: list[Buffer]) -> None:
    with capturing() as captured, divcheck.recording(lambda: len(captured)) as self.div_flags:
      self.ret = self._run(args, kwargs)
    if not captured:
      raise JitCaptureError("TinyJit captured no kernel (tinygrad: \"didn't JIT anything\"): the function ran nothing on a device, so "
                            "there is nothing to replay; jit a function that computes something from its inputs")
    self.kernels = [ei for ei, _ in captured]
    self.kernel_vals = [vals for _, vals in captured]
    positions = {id(b): i for i, b in enumerate(buffers)}
    self.input_replace = {(j, k): positions[id(b)] for j, ei in enumerate(self.kernels) for k, b in enumerate(ei.bufs) if id(b) in positions}
    outs = _returned_tensors(self.ret)
    self.symbolic_returns = any(_symbolic(o) for o in outs)
    # everything else the kernels use that nobody outside holds is scratch: replays share its memory
    memory.plan_jit(self.kernels, {*buffers, *(lb.base.buffer for o in outs for lb in _parts(o)), *self.div_flags})
    if DEBUG >= 1:
      print(f"TinyJit captured {len(self.kernels)} kernels with {len(buffers)} inputs")
    if JIT_GRAPH.value and JIT.value < 2:
      self._use(*self._graphed())
    else:
      self.graph = None  # kernel by kernel

  def _graphed(self) -> tuple[list[ExecItem], list[list[int]]]:
    """The kernels as a replay runs them: runs of kernels on one device with a graph become batches in a graph each,
    the first of up to JIT_BATCH_SIZE kernels and each next one twice as large as the one before (as tinygrad's JIT:
    the device can run a batch while the next is still being prepared); a lone kernel is not graphed."""
    items: list[ExecItem] = []
    covers: list[list[int]] = []
    max_batch, batch_device = JIT_BATCH_SIZE.value, None
    batch: list[int] = []

    def flush() -> None:
      nonlocal max_batch, batch
      if len(batch) > 1 and batch_device is not None and (graph_cls := Device[batch_device].graph) is not None:
        index = {j: n for n, j in enumerate(batch)}
        replace = {(index[j], k): i for (j, k), i in self.input_replace.items() if j in index}
        items.append(ExecItem(graph_cls([self.kernels[j] for j in batch], replace), [], 0))
        covers.append(batch)
        max_batch *= 2
        if DEBUG >= 2:
          print(f"\tTinyJit graphs a batch of {len(batch)} kernels on {batch_device}")
      else:
        items.extend(self.kernels[j] for j in batch)
        covers.extend([j] for j in batch)
      batch = []

    for j, ei in enumerate(self.kernels):
      device = ei.prg.device if isinstance(ei.prg, CompiledRunner) and Device[ei.prg.device].graph is not None else None
      # a batch ends where the capture read a check's flags: a replay reads them there too (see _replay)
      if batch and (device is None or device != batch_device or len(batch) >= max_batch or j in self.div_flags.at):
        flush()
      batch_device = device
      if device is None:
        items.append(ei)
        covers.append([j])
      else:
        batch.append(j)
    flush()
    return items, covers

  def _replay(self, buffers: list[Buffer], var_vals: dict[Variable, int]) -> None:
    for (j, k), i in self.input_replace.items():
      self.kernels[j].bufs[k] = buffers[i]
    if pending.has_open():  # a failed realize left kernels to run that read what this replay overwrites: run them first
      roots = {memory.root(b) for ei in self.kernels for b in ei.bufs}
      pending.settle(roots, roots)
    # a replay is one step (an optimizer's state and parameters move together): Ctrl-C waits for its end
    checks, errors = self.div_flags.at, self.div_flags.errors
    with hold_sigint():
      if 0 in checks:
        divcheck.check_flags(checks[0], errors)
      if (total := self.plain_total) is not None and not var_vals and not profile.enabled() and DEBUG.value < 2:  # (those time each kernel)
        self._replay_plain(total)
        return
      for n, (ei, vals) in enumerate(zip(self.jit_cache, self.item_vals)):
        try:
          ei.run({**vals, **var_vals})
        except BaseException:
          self._leave_rest(n, var_vals)
          raise
        # where the capture read a check's flags (a batch ends there), before the kernels that use what it checked:
        # a failed one raises, and the rest of the step never runs (nothing it would write is touched)
        if (ran := self.covers[n][-1] + 1) in checks:
          divcheck.check_flags(checks[ran], errors)

  def _replay_plain(self, total: tuple[int, int, int]) -> None:
    """A replay of items with nothing symbolic and no checks: each runner called as it is, then counted at once (what
    ExecItem.run does for each, less its checks: a replay of 50 tiny kernels in 2 batches spent a third of its time
    there)."""
    n, items = 0, self.jit_cache
    try:
      for n in range(len(items)):  # (n is read after a failure)
        items[n].prg(items[n].bufs, {})
    except BaseException:
      for ei in items[:n]:  # (the failure path: counted one by one, as ExecItem.run counts)
        count(ei.prg, {})
      self._leave_rest(n, {})
      raise
    k, op, mem = total
    GlobalCounters.kernel_count += k
    GlobalCounters.global_ops += op
    GlobalCounters.global_mem += mem

  def _leave_rest(self, failed: int, var_vals: dict[Variable, int]) -> None:
    """Item `failed` of a replay raised: the kernels before it ran, the rest of the step stays to do and runs before
    anything reads what it writes. A graph that raised is taken as whole: which of its kernels ran is not known."""
    start = failed if not isinstance(self.jit_cache[failed].prg, GraphRunner) else failed + 1
    rest = [_ReplayRest(self.kernels[j], {**self.kernel_vals[j], **var_vals}) for cover in self.covers[start:] for j in cover]
    if rest:
      pending.PendingWork(rest, lower=_ReplayRest.runner)  # type: ignore[arg-type]

  def _rebound(self, ret: Any, var_vals: dict[Variable, int]) -> Any:
    """`ret` with each tensor whose shape holds a Variable bound to this call's value of it (the buffers are the same)."""
    from tg.tensor import Tensor
    if isinstance(ret, Tensor):
      return _rebind_tensor(ret, var_vals) if _symbolic(ret) else ret
    if isinstance(ret, (list, tuple)):
      return type(ret)(self._rebound(x, var_vals) for x in ret)
    if isinstance(ret, dict):
      return {k: self._rebound(v, var_vals) for k, v in ret.items()}
    return ret


def _symbolic(t: Tensor) -> bool:
  """Whether t's shape, or where it reads its buffer (a view at start_pos), depends on a Variable."""
  return any(bool(lb.st.vars()) or any(isinstance(s, Node) for s in lb.base.shape) for lb in _parts(t))


def _rebind_tensor(t: Tensor, var_vals: dict[Variable, int]) -> Tensor:
  """A tensor over t's buffer whose symbolic sizes are bound to `var_vals` (t's are bound to the capture's values,
  which variables the call didn't give keep)."""
  from tg.shape.shapetracker import ShapeTracker
  from tg.shape.view import View
  from tg.tensor import Tensor

  def sub(x: sint) -> sint:
    if not isinstance(x, Node):
      return x
    free, captured = Node.unbind(x)  # Node.unbind: the values of all its variables, also for a lone Variable
    vals = {**captured, **var_vals}
    return free.substitute({v: v.bind(vals[v]) for v in free.vars() if v in vals})

  def rebind(st: ShapeTracker) -> ShapeTracker:
    return ShapeTracker(tuple(View.create(tuple(sub(s) for s in v.shape), tuple(sub(s) for s in v.strides), sub(v.offset),
                                          tuple((sub(b), sub(e)) for b, e in v.mask) if v.mask is not None else None) for v in st.views))
  lb = t.lazydata
  if not isinstance(lb, LazyBuffer):
    raise NotImplementedError("TinyJit returning a sharded tensor whose shape depends on a Variable: return it gathered (.to(device))")
  base = LazyBuffer.from_buffer(lb.base.buffer, tuple(sub(s) for s in lb.base.shape))
  view = base if lb.base is lb else LazyBuffer(lb.device, rebind(lb.st), lb.dtype, base=base)
  return Tensor(view, device=t.device, requires_grad=t.requires_grad)


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
