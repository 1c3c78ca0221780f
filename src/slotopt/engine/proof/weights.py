"""Values given for an optimizer's own tensors (``set_weights``, ``load_own_variables``, ``stateless_apply``):
every entry is converted and checked against its target first, and only then is anything assigned.

Example:
    >>> import torch
    >>> from slotopt.engine.proof import weights
    >>> targets = [torch.zeros(2), torch.zeros(())]
    >>> values = weights.checked_values(targets, [[1, 2], 3.0])
    >>> weights.assign_values(targets, values)
    >>> [t.tolist() for t in targets]
    [[1.0, 2.0], 3.0]
    >>> weights.checked_values(targets, [[1, 2]])
    Traceback (most recent call last):
    ...
    ValueError: Received 1 values for 2 optimizer variables.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable, Optional

import numpy as np
import torch

from .. import resume

__all__ = ["checked_values", "checked_entry", "entries", "as_numbers", "assign_values", "count_error", "keras_shape_error", "arrays"]

#: ``(entry index, target, received shape) -> message`` for a value whose shape is not its target's.
ShapeError = Callable[[int, torch.Tensor, tuple[int, ...]], str]


def keras_shape_error(i: int, target: torch.Tensor, shape: tuple[int, ...]) -> str:
    """Keras 3's message, with the variable's path where it has one."""
    path = getattr(target, "path", None) or getattr(target, "name", None)
    label = f"{i} ({path})" if path else str(i)
    return (f"Optimizer variable {label} has shape {tuple(target.shape)} not compatible with provided weight shape "
            f"{shape}.")


def count_error(owner_name: str, received: int, expected: int, *, spacing: str = " ", shown: str = "") -> str:
    """Keras's message for a weight list of the wrong length (tf.keras prints two spaces and the start of the
    list)."""
    return (f"You called `set_weights(weights)` on optimizer {owner_name} with a{spacing}weight list of length "
            f"{received}, but the optimizer was expecting {expected} weights.{shown}")


def checked_values(targets: Sequence[torch.Tensor], given: Sequence[Any], *, argument: str = "weights",
                   shape_error: ShapeError = keras_shape_error, count: Optional[str] = None) -> list[torch.Tensor]:
    """``given`` as new tensors of the targets' dtypes and devices, one per target, same shapes (no broadcasting:
    a wrong shape is a wrong variable). Raises before anything changes: ``ValueError`` (``count`` or a generic
    message) for a wrong number of entries or a wrong shape, ``TypeError`` for an entry that is not numbers."""
    given = entries(given, argument)
    if len(given) != len(targets):
        raise ValueError(count or f"Received {len(given)} values for {len(targets)} optimizer variables.")
    values = []
    for i, (value, target) in enumerate(zip(given, targets)):
        value = checked_entry(i, value, target, argument=argument, shape_error=shape_error)
        try:
            value = value.to(dtype=target.dtype, device=target.device, copy=True)
        except (TypeError, ValueError, RuntimeError) as err:
            raise TypeError(f"Argument `{argument}` entry {i} must be a tensor or an array of numbers. "
                            f"Received: {value!r}") from err
        values.append(value)
    return values


def checked_entry(i: int, value: Any, target: torch.Tensor, *, argument: str = "weights",
                  shape_error: ShapeError = keras_shape_error) -> torch.Tensor:
    """Entry ``i`` of ``argument`` as a tensor (not copied) after the checks ``checked_values`` applies against
    ``target`` (numbers, no complex for a real target, the same shape, in range: ``resume.check_fits``). A
    reader checks a file's state with it on a probe built on ``meta`` tensors (engine/adopt.py)."""
    value = as_numbers(value, argument, i)
    if value.is_complex() and not target.is_complex():
        raise TypeError(f"Argument `{argument}` entry {i} is complex ({value.dtype}) but optimizer variable {i} "
                        f"is {target.dtype}: casting would drop the imaginary part. Received: "
                        f"{argument}[{i}]={value!r}")
    if tuple(value.shape) != tuple(target.shape):
        raise ValueError(shape_error(i, target, tuple(value.shape)))
    name = getattr(target, "name", None) or f"entry {i}"
    # Dense real numbers of a kind that fits, scalars in range (a NaN rate, a wrapped iteration count...).
    resume.check_fits(f"Argument `{argument}` entry {i} ({name})", None if argument == "trainable_variables"
                      else str(name), value, target)
    return value


def entries(given: Any, argument: str = "weights") -> list[Any]:
    """``given`` as a list: a list, tuple or other iterable of entries (not a single tensor, string or number)."""
    if isinstance(given, (torch.Tensor, np.ndarray, str, bytes, dict)) or not hasattr(given, "__iter__"):
        raise TypeError(f"Argument `{argument}` must be a list of arrays or tensors, one per optimizer variable. "
                        f"Received: {argument}={given!r}")
    return list(given)


def as_numbers(value: Any, argument: str, i: int) -> torch.Tensor:
    """Entry ``i`` of ``argument`` as a tensor of numbers (a copy when it is not a tensor); ``TypeError`` naming
    the argument, the entry and the value for strings, objects and other non-numbers."""
    if isinstance(value, torch.Tensor):
        return value.detach()
    try:
        array = np.asarray(value)
        if array.dtype.kind not in "biufc":
            raise TypeError(f"dtype {array.dtype}")
        return torch.as_tensor(array)
    except (TypeError, ValueError, RuntimeError) as err:
        raise TypeError(f"Argument `{argument}` entry {i} must be a tensor or an array of numbers. "
                        f"Received: {argument}[{i}]={value!r}") from err


def assign_values(targets: Sequence[torch.Tensor], values: Sequence[torch.Tensor]) -> None:
    """Copies checked ``values`` into ``targets`` (outside autograd)."""
    with torch.no_grad():
        for target, value in zip(targets, values):
            target.copy_(value)


def arrays(tensors: Sequence[torch.Tensor]) -> list[np.ndarray]:
    """The tensors' values as numpy arrays (``get_weights``): copies, not live views. (Not a ``transaction.snapshot``,
    which is of an optimizer's bookkeeping.)"""
    return [t.detach().cpu().numpy().copy() for t in tensors]
