"""All-or-nothing changes to an optimizer's bookkeeping (which variables and slots exist, pending checkpoints).

A build that applies a checkpoint loaded before it (Keras's deferred restoration) can only check the checkpoint
once the variables exist. When that check fails, the optimizer must be left as it was: unbuilt, with the
checkpoint still pending. ``snapshot`` copies the containers of an object's ``__dict__`` (dicts, lists, sets, at
every depth) but shares everything else (tensors, schedules, functions), which is cheap before a build, and
``restore`` puts them back.

Example:
    >>> import torch, slotopt
    >>> from slotopt.engine import transaction
    >>> opt = slotopt.SGD(momentum=0.5)
    >>> saved = transaction.snapshot(opt)
    >>> opt.build([torch.nn.Parameter(torch.ones(2))])
    >>> transaction.restore(opt, saved)
    >>> opt.built, len(opt.param_groups)
    (False, 0)
"""

from __future__ import annotations

import contextvars
import copy
from itertools import repeat
from typing import Any, Optional

__all__ = ["snapshot", "restore", "copy_values", "put_values", "StepValues", "constrained_step"]


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        out = copy.copy(value)
        for key in out:
            out[key] = _copy(out[key])
        return out
    if isinstance(value, list):
        out = copy.copy(value)
        for i, item in enumerate(out):
            out[i] = _copy(item)
        return out
    if isinstance(value, set):
        return copy.copy(value)
    if type(value).__name__ == "FlatState":  # the packed-state bookkeeping: plain containers inside
        out = copy.copy(value)
        out.__dict__.update(_copy(value.__dict__))
        return out
    return value


def snapshot(obj: Any) -> dict[str, Any]:
    """The object's attributes, with every container copied (tensors and other objects shared)."""
    return _copy(obj.__dict__)


def restore(obj: Any, saved: dict[str, Any]) -> None:
    """Puts back what ``snapshot`` took: attributes added since are removed. A top-level list or dict gets its
    old content back in place, so that another object sharing it (a wrapper's ``param_groups``) sees it too."""
    current = dict(obj.__dict__)
    obj.__dict__.clear()
    for key, value in saved.items():
        existing = current.get(key)
        if type(existing) is list and type(value) is list:
            existing[:] = value
            value = existing
        elif type(existing) is dict and type(value) is dict:
            existing.clear()
            existing.update(value)
            value = existing
        obj.__dict__[key] = value


def copy_values(tensors: Any) -> list[Any]:
    """Copies of the tensors' current values (to put back with ``put_values`` when a later step fails)."""
    return [t.detach().clone() for t in tensors]


def put_values(tensors: Any, values: list[Any]) -> None:
    import torch

    with torch.no_grad():
        for t, v in zip(tensors, values):
            t.copy_(v)


# Set while an outer step holds a ``StepValues`` (a wrapper's): the steps of the optimizers it wraps need none.
_GUARDED: contextvars.ContextVar[bool] = contextvars.ContextVar("slotopt_step_guarded", default=False)


class StepValues:
    """The values of every tensor a step may write (its variables and all the optimizer's own variables: slots,
    ``iterations``, moving averages, accumulators, a wrapper's counters and its inner optimizers' variables),
    taken before the step's first write so that a step that fails part-way (a constraint that raises or returns
    a value of the wrong shape) can be undone."""

    def __init__(self, opt: Any, variables: Any) -> None:
        from .routing import optimizer_weights

        seen: set[int] = set()
        self._tensors = []
        for t in [*variables, *optimizer_weights(opt)]:
            if id(t) not in seen:
                seen.add(id(t))
                self._tensors.append(t)
        self._values = copy_values(self._tensors)
        self._token = _GUARDED.set(True)

    def restore(self) -> None:
        put_values(self._tensors, self._values)

    def release(self) -> None:
        _GUARDED.reset(self._token)


def constrained_step(opt: Any, pairs: Any) -> Optional[StepValues]:
    """A ``StepValues`` for a step whose variables have a constraint (one C-level pass over them), else None:
    a step without constraints cannot fail after its first write, so it copies nothing. None too inside an
    outer step that holds one already."""
    if not any(map(getattr, [pair[1] for pair in pairs], repeat("constraint"), repeat(None))):
        return None
    if _GUARDED.get():
        return None
    return StepValues(opt, [pair[1] for pair in pairs])
