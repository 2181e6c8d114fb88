"""When Ctrl-C (SIGINT) is raised as KeyboardInterrupt: never where it would be lost or would leave a half-done step.

Python raises KeyboardInterrupt at whatever bytecode runs when the signal is checked. Two places make that wrong:

- inside a step that must happen whole (a kernel run and the marking of its outputs as done, an optimizer step
  replayed by TinyJit, a lock taken and its release armed): `hold_sigint()` defers it to the end of the outermost hold;
- inside a finalizer (a `__del__`, a weak reference's callback, which tg runs on every freed buffer and node): Python
  prints "Exception ignored in ..." and drops the exception, so the program never stops (a `while True` training
  loop hangs), and the finalizer stops half way (a buffer's memory counted freed but never freed). The handler sees
  a finalizer's frame on the stack and returns; a helper thread signals again every millisecond
  (`_thread.interrupt_main`) until the handler could raise. (The handler can't ask again itself: a signal it sends
  is handled at once, inside it.)

tg's handler takes SIGINT's place at the first hold. A handler the program set before that is kept and called by
tg's (outside holds and finalizers, as it would have been called, and at the end of a hold for a Ctrl-C that came
inside), so it is held back as KeyboardInterrupt is; SIG_IGN and SIG_DFL are left alone. A handler set after the
first hold replaces tg's: then Ctrl-C is not held back.
"""
from __future__ import annotations

import _thread
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import CodeType, FrameType
from typing import TypeVar

F = TypeVar("F", bound=Callable[..., object])

_hold = 0            # > 0: a SIGINT now is remembered, not raised
_interrupted = False  # a SIGINT came while held, or in a finalizer: raise it at the first safe point
_installed = False
_chained: Callable[[int, FrameType | None], object] = signal.default_int_handler  # what a Ctrl-C does when it may
_finalizer_codes: set[CodeType] = set()
# the standard library's weak-reference callbacks (WeakSet, WeakValueDictionary, weakref.finalize) run as finalizers
_FINALIZER_FILES = ("weakref.py", "_weakrefset.py")


def finalizer(fn: F) -> F:
  """Mark `fn`, a weak reference's callback, as a finalizer: Ctrl-C is never raised inside it (methods named
  `__del__` need no mark)."""
  _finalizer_codes.add(fn.__code__)  # type: ignore[attr-defined]
  return fn


def _in_finalizer(frame: FrameType | None) -> bool:
  while frame is not None:
    code = frame.f_code
    if code.co_name == "__del__" or code in _finalizer_codes or code.co_filename.endswith(_FINALIZER_FILES):
      return True
    frame = frame.f_back
  return False


def _retry_until_raised() -> None:
  while _interrupted:
    time.sleep(0.001)
    if _interrupted:
      _thread.interrupt_main()


_retrier: threading.Thread | None = None


def _defer() -> None:
  """Remember the Ctrl-C and have it signalled again until it is raised (see the module's docstring)."""
  global _interrupted, _retrier
  _interrupted = True
  if _retrier is None or not _retrier.is_alive():
    _retrier = threading.Thread(target=_retry_until_raised, name="tg-sigint-retry", daemon=True)
    _retrier.start()


def _on_sigint(signum: int, frame: FrameType | None) -> None:
  global _interrupted
  if _hold:
    _interrupted = True
  elif _in_finalizer(frame):
    _defer()
  else:
    _interrupted = False
    _chained(signum, frame)


def _install() -> None:
  """Put _on_sigint in place of the program's SIGINT handler, once, calling that one when a Ctrl-C may be delivered.
  Only the main thread may set handlers."""
  global _installed, _chained
  _installed = True
  current = signal.getsignal(signal.SIGINT)
  if threading.current_thread() is threading.main_thread() and callable(current) and current is not _on_sigint:
    _chained = current
    signal.signal(signal.SIGINT, _on_sigint)


class hold_sigint:
  """Inside, Ctrl-C waits: it is raised as KeyboardInterrupt when the outermost hold ends."""

  def __enter__(self) -> None:
    global _hold
    if not _installed:
      _install()
    _hold += 1

  def __exit__(self, *exc: object) -> None:
    global _hold, _interrupted
    _hold -= 1
    if _hold == 0 and _interrupted:
      if _in_finalizer(sys._getframe(1)):  # a hold inside a finalizer: raising here would be lost
        _defer()
        return
      _interrupted = False
      _chained(signal.SIGINT.value, sys._getframe(1))  # Python's default raises KeyboardInterrupt
