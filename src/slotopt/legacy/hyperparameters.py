"""How tf.keras legacy hyperparameters and initial values become tensors and numbers.

A legacy hyperparameter (``_set_hyper``) is a Python number (stored in a float32 variable), a tensor, a
no-argument callable or a learning-rate schedule. Read for a variable of dtype ``d`` it is ``tf.cast(value, d)``:
a Python number goes through float32 first (``as_scalar``). Constants that are not hyperparameters (``epsilon``,
``initial_accumulator_value``) are converted straight to ``d`` (``literal_scalar``). Kernels get the results as
Python floats (``floats``), which hold the rounded values exactly.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..engine import constants as K
from ..engine import state

__all__ = ["is_number", "is_hyper_value", "as_scalar", "literal_scalar", "initial_value", "momentum_enabled",
           "epsilon_or_default", "floats", "DEFAULT_EPSILON", "step_scalar"]

#: Keras' backend epsilon, used when ``epsilon`` is 0 or None.
DEFAULT_EPSILON = 1e-7


def is_number(value: Any) -> bool:
    """A real number (Python or numpy), not a bool."""
    return isinstance(value, (numbers.Real, np.number)) and not isinstance(value, (bool, np.bool_))


def is_hyper_value(value: Any) -> bool:
    """What ``_set_hyper`` accepts: a number, a one-element tensor or array, or a callable."""
    if is_number(value) or callable(value):
        return True
    if isinstance(value, np.ndarray):
        return value.size == 1 and np.issubdtype(value.dtype, np.number)
    return isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_complex()


def as_scalar(value: Any, dtype: torch.dtype) -> torch.Tensor:
    """``tf.cast(value, dtype)`` as a 0-dim CPU tensor.

    A Python number becomes float32 first (TensorFlow's ``convert_to_tensor``), a tensor or numpy value is cast
    from its own dtype.
    """
    dtype = K.scalar_dtype(dtype)  # bfloat16 variables: float32 coefficients (see engine/constants.py)
    if isinstance(value, torch.Tensor):
        return value.detach().reshape(()).to(device="cpu", dtype=dtype)
    if isinstance(value, (np.ndarray, np.generic)):
        return torch.as_tensor(np.asarray(value)).reshape(()).to(dtype)
    if is_number(value):
        return torch.tensor(K.cast(float(value), dtype), dtype=dtype)
    raise TypeError(f"Expected a number or a scalar tensor. Received: {value!r}")


def literal_scalar(value: float, dtype: torch.dtype) -> torch.Tensor:
    """``tf.convert_to_tensor(value, dtype)``: a Python float rounded once, straight to ``dtype``."""
    return torch.tensor(K.literal(float(value), dtype), dtype=K.scalar_dtype(dtype))


def step_scalar(count: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """An iteration count as the reference uses it, ``tf.cast(iterations, var_dtype)``, while that is finite; a
    float16 count past 65504 would be inf (training would stop), so it is float32 from there on."""
    dtype = K.scalar_dtype(dtype)
    if dtype == torch.float16 and int(count) > 65504:
        dtype = torch.float32
    return count.detach().to(dtype)


def initial_value(initializer: Any, shape: Sequence[int], dtype: torch.dtype, device: Any) -> torch.Tensor:
    """A slot's initial value; a number is rounded straight to the slot's dtype (``add_slot``'s initializer)."""
    return state.initial_value(initializer, shape, dtype, device, round_number=K.literal)


def momentum_enabled(momentum: Any) -> bool:
    """tf.keras's rule: momentum is on for a tensor, a callable or a number > 0; numbers must be in [0, 1]."""
    if isinstance(momentum, torch.Tensor) or callable(momentum):
        return True
    if not is_number(momentum):
        raise TypeError(
            f"Argument `momentum` must be a number in [0, 1], a tensor or a callable. Received: momentum={momentum!r}"
        )
    if momentum < 0 or momentum > 1:
        raise ValueError(
            f"`momentum` must be between [0, 1]. Received: momentum={momentum} (of type {type(momentum)})."
        )
    return momentum > 0


def epsilon_or_default(epsilon: Any) -> float:
    """``epsilon or 1e-7`` (so 0 and None become 1e-7); anything but a number >= 0 is rejected."""
    if epsilon is not None and (not is_number(epsilon) or epsilon < 0):
        raise ValueError(f"Argument `epsilon` must be a number >= 0. Received: epsilon={epsilon!r}")
    return epsilon or DEFAULT_EPSILON


def floats(coefficients: dict[str, Any], *names: str) -> tuple[float, ...]:
    """The named ``apply_state`` coefficients as Python floats (exact values, ready for the kernels)."""
    return tuple(float(coefficients[n]) for n in names)
