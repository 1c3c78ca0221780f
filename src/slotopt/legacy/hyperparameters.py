"""How tf.keras legacy hyperparameters and initial values become tensors and numbers.

A legacy hyperparameter (``_set_hyper``) is a Python number (stored in a float32 variable), a tensor, a
no-argument callable or a learning-rate schedule. Read for a variable of dtype ``d`` it is ``tf.cast(value, d)``:
a Python number goes through float32 first (``as_scalar``). Constants that are not hyperparameters (``epsilon``,
``initial_accumulator_value``) are converted straight to ``d`` (``literal_scalar``). Kernels get the results as
Python floats (``floats``), which hold the rounded values exactly.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Sequence
from typing import Any, Callable, Optional, Union

import numpy as np
import torch

from .. import schedules as schedules_module
from ..engine import as_written, checks, state
from ..engine import constants as K
from ..variables import Variable

__all__ = ["Hyperparameter", "is_number", "is_hyper_value", "as_scalar", "literal_scalar", "initial_value", "momentum_enabled",
           "epsilon_or_default", "floats", "DEFAULT_EPSILON", "step_scalar"]

Hyperparameter = Union[float, int, torch.Tensor, Callable[[], Any], schedules_module.LearningRateSchedule]

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


# tf.keras OptimizerV2's named hyperparameters (``_set_hyper`` / ``_get_hyper``), read as attributes: functions of
# the optimizer (``self``) that ``slotopt.legacy.Optimizer`` (legacy/optimizer.py) binds as its methods. A number
# becomes a float32 variable named ``<optimizer>/<name>`` on first use (``_create_hypers``, in sorted name order, as
# tf.keras creates them); a tensor, a no-argument callable or a schedule is kept as it is. The face initialises the
# store with ``_hyper = {}`` before anything else (``__getattr__`` reads it).
def _hyperparameter_attribute(self, name: str) -> Any:  # (the class's ``__getattr__``)
    """Hyperparameters read as attributes (``opt.learning_rate``, ``opt.lr``, ``opt.beta_1``...)."""
    if name.startswith("__") or name == "_hyper":
        raise AttributeError(name)
    hyper = self.__dict__.get("_hyper")
    key = "learning_rate" if name == "lr" else name
    if hyper is not None and key in hyper:
        return self._get_hyper(key)
    raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")


def _dir_with_hyperparameters(self) -> Iterable[str]:  # (the class's ``__dir__``)
    names = set(object.__dir__(self)) | set(self._hyper)
    if "learning_rate" in self._hyper:
        names.add("lr")
    return sorted(names)


def _set_hyper(self, name: str, value: Hyperparameter) -> None:
    """Sets hyperparameter ``name``: a number, a scalar tensor, a no-argument callable or a schedule.

    Once the hyperparameter variables exist, a number or tensor is assigned into the float32 variable
    (rounded to float32); a callable or a schedule replaces it.
    """
    if not isinstance(name, str):
        raise TypeError(f"Hyperparameter names must be strings. Received: {name!r}")
    if not is_hyper_value(value):
        raise TypeError(
            f"Hyperparameter `{name}` must be a number, a scalar tensor, a LearningRateSchedule or a "
            f"no-argument callable. Received: {name}={value!r}"
        )
    checks.check_value(name, value, self._hyperparameter_ranges)
    as_written.remember(self.__dict__.setdefault("_as_written", {}), name, value)  # (torch's view of it)
    previous = self._hyper.get(name)
    variable = self._hyper_variables.get(name)
    if variable is not None and previous is variable and not callable(value):
        with torch.no_grad():
            variable.copy_(as_scalar(value, torch.float32))
        return
    self._hyper[name] = value


def _get_hyper(self, name: str, dtype: Optional[torch.dtype] = None) -> Any:
    """The hyperparameter's value: a schedule as is; a callable is called; then cast to ``dtype`` if given
    (a 0-dim CPU tensor). Without ``dtype``, a number set before the first step is its float32 variable."""
    if not self._hypers_created:
        self._create_hypers()
    value = self._hyper[name]
    if isinstance(value, schedules_module.LearningRateSchedule):
        return value
    if callable(value):
        step_values = self.__dict__.get("_step_values")
        if step_values is not None and name in step_values:
            value = step_values[name]  # evaluated (and checked) once, before this step changed anything
        else:
            value = value()
            checks.check_result(name, value, self._hyperparameter_ranges)
        if name == "learning_rate":
            self._remember_lr(value)
    if dtype is not None:
        try:
            return as_scalar(value, dtype)
        except (TypeError, ValueError, RuntimeError) as err:
            raise TypeError(
                f"Hyperparameter `{name}` must evaluate to a number or a scalar tensor. Received: {value!r}"
            ) from err
    return value


def _create_hypers(self) -> None:
    """Turns every number hyperparameter into a float32 variable (in sorted name order)."""
    if self._hypers_created:
        return
    for name, value in sorted(self._hyper.items()):
        if isinstance(value, torch.Tensor) or callable(value):
            continue
        variable = Variable(as_scalar(value, torch.float32), name=name, trainable=False)
        variable._variable_path = f"{self._name}/{name}"
        self._hyper[name] = variable
        self._hyper_variables[name] = variable
    self._hypers_created = True


def _serialize_hyperparameter(self, name: str) -> Any:
    """A schedule → its serialized dict; a callable → its current value; a tensor → a numpy scalar."""
    value = self._hyper[name]
    if isinstance(value, schedules_module.LearningRateSchedule):
        return schedules_module.serialize(value)
    if callable(value):
        value = value()
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()[()]
    return value


def _call_if_callable(param: Any) -> Any:
    return param() if callable(param) else param
