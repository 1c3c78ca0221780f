"""Undoing a step that fails after its first write.

Constraints run after the update (engine/pipeline.py), so a constraint that raises or returns a bad value would
leave variables and slots updated. A step whose variables have a constraint therefore first copies every value
it may write (``StepValues``) and puts them back when it fails. So does a step whose writes may run Python code that
is not slotopt's (a variable class with its own ``__torch_function__`` or ``__torch_dispatch__``, a torch function
or dispatch mode around the step: ``writes_run_user_code``), which may raise between two writes. Other steps
cannot fail after their first write (everything is validated before it, and no finalizer or signal handler runs
in a step: engine/writing/atomic.py) and copy nothing.

Example:
    >>> import torch, slotopt
    >>> from slotopt.engine.writing import undo
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

import functools
from itertools import repeat
from operator import itemgetter
from typing import Any, Optional

import torch

from ..routing import optimizer_weights
from .atomic import GUARDED, UNCONSTRAINED, KeptValues, StepGuard, outer_step

__all__ = ["StepGuard", "StepValues", "constrained_step", "guarded", "writes_run_user_code", "plain_tensor_type"]

_variable = itemgetter(1)


class StepValues(KeptValues):
    """The values of every tensor a step may write (its variables and all the optimizer's own variables: slots,
    ``iterations``, moving averages, accumulators, a wrapper's counters and its inner optimizers' variables),
    taken before the step's first write so that a step that fails part-way (a constraint that raises or returns
    a value of the wrong shape) can be undone."""

    def __init__(self, opt: Any, variables: Any) -> None:
        super().__init__([*variables, *optimizer_weights(opt)])


def constrained_step(opt: Any, pairs: Any) -> Optional[StepGuard]:
    """A ``StepValues`` for a step whose variables have a constraint (one C-level pass over them) or whose writes
    may run Python code not slotopt's (``writes_run_user_code``), else a ``StepGuard`` marking that none has: such
    a step cannot fail after its first write, so it copies nothing. None inside an outer step that looked already
    (its variables include these)."""
    if outer_step() is not None:
        return None
    if pairs.plan is not None:
        # The C++ checks read each variable's constraint in their pass over the step (its objects in cache then);
        # else the variables are the plan's, checked in this step: read from its list, no pair is touched.
        variables = pairs.plan.variables
        constrained = pairs.constrained
        if constrained is None:
            constrained = any(map(getattr, variables, repeat("constraint"), repeat(None)))
    else:
        variables = list(map(_variable, pairs))
        constrained = any(map(getattr, variables, repeat("constraint"), repeat(None)))
    if not constrained and not writes_run_user_code(variables):
        return StepGuard(UNCONSTRAINED)
    return StepValues(opt, [pair[1] for pair in pairs])


def writes_run_user_code(variables: Any) -> bool:
    """Whether writing ``variables`` may run Python code that is not slotopt's, which may raise between two writes:
    a torch function or dispatch mode active around the step, or a variable whose class has a
    ``__torch_function__`` or ``__torch_dispatch__`` of its own (a wrapper subclass's ops run in Python). One
    C-level pass over the variables' types."""
    if _function_mode() or _dispatch_modes():
        return True
    return not all(map(plain_tensor_type, set(map(type, variables))))


def _no_mode() -> Any:
    return False


# (torch's private predicates for the modes, present since at least 2.4; without them, no mode is assumed)
_function_mode = getattr(torch._C, "_is_torch_function_mode_enabled", _no_mode)
_dispatch_modes = getattr(torch._C, "_len_torch_dispatch_stack", _no_mode)
_TENSOR_FUNCTION = torch.Tensor.__torch_function__.__func__  # type: ignore[attr-defined]
_DISABLED = (torch._C._disabled_torch_function_impl, getattr(torch._C, "_disabled_torch_dispatch_impl", None))


@functools.cache
def plain_tensor_type(cls: type) -> bool:
    """Whether a tensor class runs torch's ops without Python code of its own (``torch.Tensor``, ``Parameter``,
    slotopt's ``Variable``: no ``__torch_function__`` or ``__torch_dispatch__`` of their own)."""
    if not issubclass(cls, torch.Tensor):
        return True  # (not a tensor: the step refuses it before writing)
    function = getattr(cls.__torch_function__, "__func__", cls.__torch_function__)
    dispatch = getattr(cls, "__torch_dispatch__", None)
    dispatch = getattr(dispatch, "__func__", dispatch)
    return (function is _TENSOR_FUNCTION or function in _DISABLED) and (dispatch is None or dispatch in _DISABLED)


def guarded() -> bool:
    """Whether an outer step (a wrapper's) holds a ``StepValues`` for the step running now."""
    return outer_step() is GUARDED
