"""Variable constraints: ``var.constraint(var)`` applied after an update, once its result is checked to fit the
variable, and refused where a generation refuses constraints with sparse gradients.

Functions of the optimizer, not a base class; ``apply_constraints`` is the stage the faces list in their step
(engine/pipeline.py)."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from typing import Any, Callable

import numpy as np
import torch

from ..variables import IndexedSlices
from .plan import Pair

__all__ = ["apply_constraints", "constrain", "reject_sparse_constraints"]


def apply_constraints(self, pairs: Sequence[Pair], call: Any) -> None:
    """Each variable's constraint, on a step that kept the values it may write (``call.kept``: a step whose
    variables have no constraint kept none)."""
    if not call.kept:
        return
    variables = [pair[1] for pair in pairs]
    if not any(map(getattr, variables, repeat("constraint"), repeat(None))):
        return  # (one C-level pass: most steps have no constraint at all)
    for var in variables:
        if getattr(var, "constraint", None) is not None:
            constrain(self, var)


def constrain(self, var: torch.Tensor) -> None:
    """``var = var.constraint(var)``, once the result is checked: a tensor of the variable's shape (a scalar
    is not spread over the tensor), on its device, of a dtype that casts safely to the variable's. A bad
    result raises (the step then puts every value back, see ``engine/pipeline.py``)."""
    constraint = var.constraint
    result = constraint(var)
    if isinstance(result, np.ndarray):
        result = torch.from_numpy(result)
    where = self._name_of(var)
    if not isinstance(result, torch.Tensor):
        raise TypeError(
            f"The constraint of variable {where} must return a tensor of the variable's shape "
            f"{tuple(var.shape)}. Received: {result!r} (of type {type(result).__name__}) from "
            f"constraint={constraint!r}")
    if result.shape != var.shape:
        raise ValueError(
            f"The constraint of variable {where} must return a tensor of the variable's shape "
            f"{tuple(var.shape)}. Received: a tensor of shape {tuple(result.shape)} from constraint={constraint!r}")
    if result.dtype == torch.bool or not torch.can_cast(result.dtype, var.dtype):
        raise TypeError(
            f"The constraint of variable {where} must return a tensor of a dtype that casts safely to the "
            f"variable's {var.dtype}. Received: dtype={result.dtype} from constraint={constraint!r}")
    if result.device != var.device:
        raise ValueError(
            f"The constraint of variable {where} must return a tensor on the variable's device {var.device}. "
            f"Received: device={result.device} from constraint={constraint!r}")
    with torch.no_grad():
        var.copy_(result)


def reject_sparse_constraints(pairs: Sequence[Pair], message: Callable[[Any, Any], str]) -> None:
    for grad, var in pairs:
        if isinstance(grad, IndexedSlices) and getattr(var, "constraint", None) is not None:
            raise RuntimeError(message(grad, var.constraint))
