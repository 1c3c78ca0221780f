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

from itertools import repeat
from operator import itemgetter
from typing import Any, Optional

from .atomic import GUARDED, UNCONSTRAINED, KeptValues, StepGuard, outer_step
from .plan import Ordinary
from .routing import optimizer_weights

__all__ = ["StepGuard", "StepValues", "constrained_step", "guarded"]

_variable = itemgetter(1)


class StepValues(KeptValues):
    """The values of every tensor a step may write (its variables and all the optimizer's own variables: slots,
    ``iterations``, moving averages, accumulators, a wrapper's counters and its inner optimizers' variables),
    taken before the step's first write so that a step that fails part-way (a constraint that raises or returns
    a value of the wrong shape) can be undone."""

    def __init__(self, opt: Any, variables: Any) -> None:
        super().__init__([*variables, *optimizer_weights(opt)])


def constrained_step(opt: Any, pairs: Any) -> Optional[StepGuard]:
    """A ``StepValues`` for a step whose variables have a constraint (one C-level pass over them), else a
    ``StepGuard`` marking that none has: a step without constraints cannot fail after its first write, so it
    copies nothing. None inside an outer step that looked already (its variables include these)."""
    if outer_step() is not None:
        return None
    if type(pairs) is Ordinary:
        # The C++ checks read each variable's constraint in their pass over the step (its objects in cache then);
        # else the variables are the plan's, checked in this step: read from its list, no pair is touched.
        constrained = pairs.constrained
        if constrained is None:
            constrained = any(map(getattr, pairs.plan.variables, repeat("constraint"), repeat(None)))
    else:
        constrained = any(map(getattr, map(_variable, pairs), repeat("constraint"), repeat(None)))
    if not constrained:
        return StepGuard(UNCONSTRAINED)
    return StepValues(opt, [pair[1] for pair in pairs])


def guarded() -> bool:
    """Whether an outer step (a wrapper's) holds a ``StepValues`` for the step running now."""
    return outer_step() is GUARDED
