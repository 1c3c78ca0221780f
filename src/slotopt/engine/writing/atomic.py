"""A step runs to its end once begun: no finalizer, weakref callback of a collected cycle or SIGINT handler runs in it.

Everything a step writes is checked before its first write (engine/pipeline.py), so the only Python code that could
still run between its first and last write, besides the step's own, is code the interpreter runs on its own: a
``__del__`` or weakref callback of an object the cyclic garbage collector frees (``gc.callbacks`` too), and a signal
handler (SIGINT's raises ``KeyboardInterrupt``; ``_thread.interrupt_main()`` calls it). Such code could move a
variable (``p.data = ...``) after the step proved it, or stop the step with half of its groups written. So while a
step runs:

* the cyclic collector is off (``gc.disable``; process-wide, counted, so that concurrent or nested steps switch it
  back on only when the last one ends, and only if it was on), and
* in the main thread (the only one where Python runs signal handlers), a SIGINT whose handler is Python code is
  recorded instead of handled; the step's own handler hands it to the handler it replaced when the step ends, so
  the ``KeyboardInterrupt`` comes after the step, complete (or refused with nothing written).

Both cost about a microsecond per step (``_signal`` directly: ``signal.signal``'s enum conversion costs more than
the call), nothing per tensor. What the step calls itself (a learning-rate callable, a gradient transformer, a
subclass's hook) runs as usual; whatever it changes is re-proven before the first write (engine/proof/unchanged.py's
``proven_again``), and a composite whose later optimizer may raise in such code after an earlier one wrote keeps
the values to put back (engine/writing/undo.py).

Example:
    >>> import gc
    >>> from slotopt.engine.writing import atomic
    >>> token = atomic.hold()
    >>> gc.isenabled()
    False
    >>> atomic.release(token)
    >>> gc.isenabled()
    True
"""

from __future__ import annotations

import _signal
import _thread
import contextvars
import gc
import os
import threading
from collections.abc import Iterable
from itertools import chain
from typing import Any, Optional

import torch

from .transaction import copy_values, put_values, restore, snapshot

__all__ = ["hold", "release", "held", "StepGuard", "KeptValues", "GUARDED", "UNCONSTRAINED", "outer_step",
           "may_run_user_code"]

_SIGINT = 2  # (the same number on every platform Python runs SIGINT handlers on)
_MAIN = threading.main_thread().ident
_lock = threading.Lock()
_depth = 0  # steps running now, in any thread
_collecting = False  # whether the collector was on when the first of them began
_pending: list[tuple[int, Any]] = []  # SIGINTs that arrived during a step, for the handler it replaced


_own = threading.local()  # each thread's own steps running now (what of _depth survives a fork)


def _after_fork() -> None:
    """In a forked child: the thread that forked is its main thread, a lock another thread held stays held, and
    the steps other threads were running are gone (only the forking thread's own count): the collector they held
    off goes back on when none of the child's is running."""
    global _MAIN, _lock, _depth
    _MAIN = threading.main_thread().ident
    _lock = threading.Lock()
    _depth = getattr(_own, "depth", 0)
    if _depth == 0 and _collecting:
        gc.enable()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def _deferred(signum: int, frame: Any) -> None:
    """SIGINT's handler during a step: remembered, handled when the step ends (``release``)."""
    _pending.append((signum, frame))


def hold() -> Optional[Any]:
    """Begins a step's uninterrupted part; returns what ``release`` needs (call it in a ``finally`` entered right
    after). Written so that a SIGINT handled at any instruction in it leaves nothing behind: until SIGINT's handler
    is the step's own, a raising handler finds nothing changed yet; after, SIGINT is deferred (a call of a C
    function is where the interpreter runs pending handlers)."""
    global _depth, _collecting
    handler = None
    if _thread.get_ident() == _MAIN:  # (signal handlers run in the main thread only)
        current = _signal.getsignal(_SIGINT)
        if current is not _deferred and callable(current):  # (SIG_DFL / SIG_IGN: no Python to run)
            try:
                _signal.signal(_SIGINT, _deferred)
            except ValueError:  # (not the main interpreter)
                current = None
            handler = current
            _pending.clear()  # (one left by a step whose handler raised first: that interrupt was raised)
    with _lock:
        _depth += 1
        _own.depth = getattr(_own, "depth", 0) + 1
        if _depth == 1:
            _collecting = gc.isenabled()
            if _collecting:
                gc.disable()
    return handler


def release(token: Optional[Any]) -> None:
    """Ends what ``hold`` began: the collector back on after the last step, and a SIGINT received meanwhile handed
    to its handler now (which raises ``KeyboardInterrupt`` by default: after the step, complete)."""
    global _depth
    with _lock:  # (still deferred: nothing raises before the count is right)
        _depth -= 1
        _own.depth = getattr(_own, "depth", 1) - 1
        if _depth == 0 and _collecting:
            gc.enable()
    if token is None:
        return
    if _signal.getsignal(_SIGINT) is _deferred:  # (unless the step's own code installed another handler)
        _signal.signal(_SIGINT, token)
    if _pending:
        signum, frame = _pending[0]
        _pending.clear()
        token(signum, frame)


def held() -> bool:
    """Whether a step's uninterrupted part is running (in any thread)."""
    return _depth > 0


# What the step of a wrapper (a loss-scale, composite or multi-optimizer) found of its variables, for the steps
# of the optimizers it wraps, whose variables are among its own: ``GUARDED`` while it holds a ``KeptValues``,
# ``UNCONSTRAINED`` when none of them has a constraint. Either way those steps need not look again (a pass over
# every variable per nested step); outside any step, None.
GUARDED, UNCONSTRAINED = "guarded", "unconstrained"
_OUTER: contextvars.ContextVar[Optional[str]] = contextvars.ContextVar("slotopt_outer_step", default=None)


def outer_step() -> Optional[str]:
    """``GUARDED`` or ``UNCONSTRAINED`` inside a wrapper's step (see above), else None."""
    return _OUTER.get()


class StepGuard:
    """What a step found of its variables, marked for the steps nested in it until ``release``."""

    #: The values to put back when the step fails (``KeptValues``), or None: it cannot fail after its first write.
    values: Optional[KeptValues] = None

    def __init__(self, found: str) -> None:
        self._token = _OUTER.set(found)

    def restore(self) -> None:
        """Puts back the values taken before the step (nothing to do without any)."""

    def release(self) -> None:
        _OUTER.reset(self._token)


class KeptValues(StepGuard):
    """The values of ``tensors`` (each once), taken before a step's first write so that a step that fails part-way
    (a constraint that raises, a composite's later optimizer whose learning-rate callable raises) can be undone."""

    def __init__(self, tensors: Iterable[torch.Tensor], objects: Iterable[Any] = ()) -> None:
        seen: set[int] = set()
        self._tensors = []
        for t in tensors:
            if id(t) not in seen:
                seen.add(id(t))
                self._tensors.append(t)
        self._values = copy_values(self._tensors)
        # ``objects``' bookkeeping too (optimizers a step may build: their slots made in it are let go again)
        self._objects = [(obj, snapshot(obj)) for obj in objects]
        self.values = self
        super().__init__(GUARDED)

    def restore(self) -> None:
        for obj, saved in self._objects:
            restore(obj, saved)
        put_values(self._tensors, self._values)


def may_run_user_code(opt: Any, depth: int = 0) -> bool:
    """Whether an optimizer's step may call code that is not slotopt's before its first write, code that may raise:
    a class defined outside slotopt (its hooks), a callable hyperparameter or learning-rate schedule, a gradient
    transformer or aggregator (a callable among its attributes or in a list of them), or a wrapped optimizer that
    may. A composite whose later optimizer may keeps its values first (``engine/routing.py``'s ``dispatch``)."""
    if not type(opt).__module__.startswith("slotopt."):
        return True
    own = opt.__dict__
    hyper = own.get("_hyper")
    for value in chain(own.values(), hyper.values() if type(hyper) is dict else ()):
        if isinstance(value, torch.Tensor) or value is None or isinstance(value, (int, float, str, bool)):
            continue
        if isinstance(value, (list, tuple)) and any(callable(item) and not isinstance(item, torch.Tensor)
                                                 for item in value):
            return True
        if hasattr(value, "apply_gradients"):  # a wrapped optimizer
            if depth < 4 and may_run_user_code(value, depth + 1):
                return True
            continue
        if callable(value) and not isinstance(value, type):
            return True
    return False
