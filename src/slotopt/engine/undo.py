"""Undoing a step that fails after its first write.

Constraints run after the update (engine/pipeline.py), so a constraint that raises or returns a bad value would
leave variables and slots updated. A step whose variables have a constraint therefore first copies every value
it may write (``StepValues``) and puts them back when it fails. Steps without constraints cannot fail after
their first write (everything is validated before it) and copy nothing.

Example:
    >>> import torch, slotopt
    >>> from slotopt.engine import undo
    >>> w = slotopt.Variable(torch.ones(2), name="w", constraint=lambda v: v.sum())  # a scalar: refused
    >>> opt = slotopt.SGD(learning_rate=0.5, momentum=0.9)
    >>> try:
    ...     opt.apply_gradients([(torch.ones(2), w)])
    ... except ValueError as err:
    ...     print(str(err).split(".")[0])
    The constraint of variable w must return a tensor of the variable's shape (2,)
    >>> w.tolist(), int(opt.iterations), opt.variables[2].tolist()
    ([1.0, 1.0], 0, [0.0, 0.0])
"""

from __future__ import annotations

import contextvars
from itertools import repeat
from operator import itemgetter
from typing import Any, Optional

from .routing import optimizer_weights
from .transaction import copy_values, put_values

__all__ = ["StepValues", "constrained_step", "guarded"]

_variable = itemgetter(1)


# Set while an outer step holds a ``StepValues`` (a wrapper's): the steps of the optimizers it wraps need none.
_GUARDED: contextvars.ContextVar[bool] = contextvars.ContextVar("slotopt_step_guarded", default=False)


class StepValues:
    """The values of every tensor a step may write (its variables and all the optimizer's own variables: slots,
    ``iterations``, moving averages, accumulators, a wrapper's counters and its inner optimizers' variables),
    taken before the step's first write so that a step that fails part-way (a constraint that raises or returns
    a value of the wrong shape) can be undone."""

    def __init__(self, opt: Any, variables: Any) -> None:
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
    if not any(map(getattr, map(_variable, pairs), repeat("constraint"), repeat(None))):
        return None
    if _GUARDED.get():
        return None
    return StepValues(opt, [pair[1] for pair in pairs])


def guarded() -> bool:
    """Whether an outer step (a wrapper's) holds a ``StepValues`` for the step running now."""
    return _GUARDED.get()
