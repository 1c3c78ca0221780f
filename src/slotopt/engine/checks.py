"""One checker for the hyperparameters of every generation, schedule and composite.

A hyperparameter that is NaN, infinite, of the wrong type or out of its range either makes the first step NaN or
silently disables a feature (``clipnorm=nan`` turns clipping off, ``nesterov="no"`` is truthy). Every face checks
its values here, with one table of ranges keyed by the argument's name (a class narrows a range with its own
``_hyperparameter_ranges``): at construction, when an attribute or a parameter group is written, and when a
callable or schedule returns a value at a step.

Example:
    >>> from slotopt.engine.checks import check_number, UNIT_OPEN
    >>> check_number("beta_1", 0.9, UNIT_OPEN)
    0.9
    >>> check_number("beta_1", 1.0, UNIT_OPEN)
    Traceback (most recent call last):
    ...
    ValueError: Argument `beta_1` must be in [0, 1). Received: beta_1=1.0
"""

from __future__ import annotations

import inspect
import math
import numbers
import operator
import re
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import repeat
from typing import Any, Optional

import numpy as np
import torch

from . import limits

__all__ = ["HyperparameterTypeError", "Range", "RANGES", "FLAGS", "OPTIONAL", "SCHEDULED", "ANY", "NONNEGATIVE", "POSITIVE", "NONPOSITIVE", "UNIT", "UNIT_OPEN",
           "as_number", "check_number", "check_flag", "check_integer", "check_value", "check_values", "check_result", "range_of",
           "check_pairs", "two_tuples", "check_variable", "check_config_dict", "NOT_CALLABLE", "check_callable_allowed",
           "check_tensor_list", "check_leaf", "check_regex_list", "check_step_count", "check_name", "check_no_argument_callable",
           "check_argument_types"]


class HyperparameterTypeError(TypeError, ValueError):
    """A hyperparameter of the wrong type (a string, a bool, a list...). Both a ``TypeError`` and a
    ``ValueError``: Keras raises either, depending on the optimizer, for the same mistake."""


@dataclass(frozen=True)
class Range:
    """An interval of allowed values (``low_open``/``high_open`` exclude the bound)."""

    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False
    label: str = ""  # a word for the range ("positive"), used in messages instead of the bounds

    def __contains__(self, value: float) -> bool:
        if value < self.low or (self.low_open and value == self.low):
            return False
        return not (value > self.high or (self.high_open and value == self.high))

    def describe(self, finite: bool = True) -> str:
        """``"> 0"``, ``"in [0, 1)"``...; with ``finite``, ``"a finite number > 0"``..."""
        prefix = "a finite number" if finite else ""
        if self.label:
            return f"a finite {self.label} number" if finite else self.label
        if self.low == -math.inf and self.high == math.inf:
            return "a finite number"
        if self.high == math.inf:
            bound = f"{'>' if self.low_open else '>='} {self.low:g}"
        elif self.low == -math.inf:
            bound = f"{'<' if self.high_open else '<='} {self.high:g}"
        else:
            bound = f"in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}{')' if self.high_open else ']'}"
        return f"{prefix} {bound}".strip()


ANY = Range()
NONNEGATIVE = Range(0.0)
POSITIVE = Range(0.0, low_open=True)
NONPOSITIVE = Range(high=0.0)
UNIT = Range(0.0, 1.0)
UNIT_OPEN = Range(0.0, 1.0, high_open=True)

#: The range of every hyperparameter name used by a slotopt optimizer or schedule (all generations' spellings).
RANGES: dict[str, Range] = {
    # optimizers
    "learning_rate": NONNEGATIVE, "lr": NONNEGATIVE, "weight_decay": NONNEGATIVE, "decay": NONNEGATIVE,
    "momentum": UNIT, "rho": UNIT, "beta_1": UNIT, "beta_2": UNIT, "beta1": UNIT, "beta2": UNIT,
    "epsilon": NONNEGATIVE, "loss_scale_factor": POSITIVE,
    "clipnorm": ANY, "clipvalue": ANY, "global_clipnorm": ANY,  # Keras 3: a value <= 0 disables clipping
    "initial_accumulator_value": NONNEGATIVE, "learning_rate_power": NONPOSITIVE,
    "l1_regularization_strength": NONNEGATIVE, "l2_regularization_strength": NONNEGATIVE,
    "l2_shrinkage_regularization_strength": NONNEGATIVE, "beta": NONNEGATIVE,
    "beta_2_decay": ANY, "epsilon_1": NONNEGATIVE, "epsilon_2": NONNEGATIVE, "clip_threshold": POSITIVE,
    "adam_beta_1": UNIT_OPEN, "adam_beta_2": UNIT_OPEN, "adam_weight_decay": NONNEGATIVE,
    "lr_power": NONPOSITIVE, "l1": NONNEGATIVE, "l2": NONNEGATIVE, "initial_gradient_squared_accumulator_value":
        POSITIVE,
    # schedules
    "initial_learning_rate": NONNEGATIVE, "end_learning_rate": NONNEGATIVE, "decay_steps": POSITIVE,
    "first_decay_steps": POSITIVE, "decay_rate": NONNEGATIVE, "power": NONNEGATIVE, "t_mul": POSITIVE,
    "m_mul": NONNEGATIVE, "alpha": UNIT, "warmup_steps": NONNEGATIVE, "warmup_target": NONNEGATIVE,
}

#: Arguments for which ``None`` means "off" or "the default" (any other argument of ``RANGES`` must be a number).
OPTIONAL = frozenset({"weight_decay", "clipnorm", "clipvalue", "global_clipnorm", "loss_scale_factor", "decay",
                      "warmup_target", "beta", "adam_weight_decay"})

#: Arguments that may hold a learning-rate schedule (serialized as a dict in a config).
SCHEDULED = frozenset({"learning_rate", "lr"})

#: Arguments that must be booleans (a string such as "no" is truthy: refused rather than taken as True).
FLAGS = frozenset({"nesterov", "amsgrad", "centered", "use_ema", "staircase", "cycle", "use_locking",
                   "relative_step", "dynamic", "use_nesterov", "exclude_embeddings", "exclude_layernorms",
                   "use_own_namescope_for_non_slot_vars", "graph_mode_sparse"})


def range_of(name: str, overrides: Optional[Mapping[str, Range]] = None) -> Optional[Range]:
    if overrides and name in overrides:
        return overrides[name]
    return RANGES.get(name)


def as_number(name: str, value: Any) -> float:
    """``value`` as a float (possibly NaN or infinite) when it is a real number or a one-element real tensor."""
    if isinstance(value, (bool, np.bool_)) or (isinstance(value, torch.Tensor) and value.dtype == torch.bool):
        raise HyperparameterTypeError(f"Argument `{name}` must be a number, not a boolean. Received: {name}={value!r}")
    if isinstance(value, torch.Tensor):
        if value.numel() != 1 or value.is_complex():
            raise HyperparameterTypeError(f"Argument `{name}` must be a real number or a one-element tensor. Received: "
                            f"{name}={value!r}")
        return float(value.detach().reshape(()).cpu())
    if isinstance(value, np.ndarray) and value.size == 1 and value.dtype.kind in "iuf":
        return float(value.reshape(()))
    if isinstance(value, (numbers.Real, np.number)) and not isinstance(value, np.complexfloating):
        return float(value)
    raise HyperparameterTypeError(f"Argument `{name}` must be a number. Received: {name}={value!r} (of type "
                    f"{type(value).__name__})")


def check_number(name: str, value: Any, allowed: Optional[Range] = None) -> float:
    """``value`` as a float when it is a finite real number in ``allowed`` (default: ``RANGES[name]``, else any
    finite number); raises ``TypeError``/``ValueError`` naming the argument and the value otherwise."""
    number = as_number(name, value)
    allowed = allowed or RANGES.get(name, ANY)
    if not math.isfinite(number) or number not in allowed:
        raise ValueError(f"Argument `{name}` must be {allowed.describe(not math.isfinite(number))}. "
                         f"Received: {name}={value!r}")
    return number


def check_flag(name: str, value: Any) -> bool:
    """A boolean argument: ``True``/``False`` (numpy booleans and the integers 0 and 1 too)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)) and value in (0, 1):
        return bool(value)
    raise HyperparameterTypeError(f"Argument `{name}` must be a boolean (True or False). Received: {name}={value!r}")


def check_integer(name: str, value: Any, minimum: int) -> int:
    """An integer argument ``>= minimum`` (not a bool, not a float)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"Argument `{name}` must be an integer >= {minimum}. Received: {name}={value!r}")
    return int(value)


def check_value(name: str, value: Any, overrides: Optional[Mapping[str, Range]] = None) -> None:
    """Checks one configuration entry by its name: a flag, or a number of the name's range. Values that are not
    numbers (``None``, callables, schedules, tensors of a schedule...) are left to the caller."""
    if name in FLAGS:
        check_flag(name, value)
        return
    allowed = range_of(name, overrides)
    if allowed is None:
        return
    if value is None:
        # (a configuration shows None for a learning rate driven by a schedule or callable)
        if name not in OPTIONAL and name not in SCHEDULED:
            raise HyperparameterTypeError(f"Argument `{name}` must be a number, not None. Received: {name}=None")
        return
    if isinstance(value, Mapping) and name in SCHEDULED:
        return  # a serialized schedule (a config's learning rate): checked when it is deserialized
    if isinstance(value, (str, bytes, Mapping, list, tuple, set)):
        raise HyperparameterTypeError(f"Argument `{name}` must be a number. Received: {name}={value!r} (of type "
                                      f"{type(value).__name__})")
    if callable(value) and not isinstance(value, torch.Tensor):
        check_callable_allowed(name, value)
        return  # a callable or schedule: its result is checked when it is used
    check_number(name, value, allowed)


#: Arguments read outside the update (clipping, loss scaling) or at the build: a callable there would be compared
#: as a number.
NOT_CALLABLE = frozenset({"clipnorm", "clipvalue", "global_clipnorm", "loss_scale_factor",
                          # constants of the slots' initial values (every generation compares them at construction)
                          "initial_accumulator_value", "initial_gradient_squared_accumulator_value"})


def check_callable_allowed(name: str, value: Any, also: frozenset[str] = frozenset()) -> None:
    """Refuses a callable for an argument that must be a number (``NOT_CALLABLE``, or ``also``: a class's own,
    such as a value that decides at build time which slots exist)."""
    if (name in NOT_CALLABLE or name in also) and callable(value) and not isinstance(value, torch.Tensor):
        raise HyperparameterTypeError(f"Argument `{name}` must be a number or None, not a callable. "
                                      f"Received: {name}={value!r}")


def check_values(values: Mapping[str, Any], overrides: Optional[Mapping[str, Range]] = None) -> None:
    """``check_value`` for every entry of a configuration."""
    for name, value in values.items():
        check_value(name, value, overrides)


def check_result(name: str, value: Any, overrides: Optional[Mapping[str, Range]] = None) -> None:
    """Checks what a callable or schedule returned for hyperparameter ``name`` at a step."""
    allowed = range_of(name, overrides) or ANY
    try:
        number = as_number(name, value)
    except TypeError as err:
        raise HyperparameterTypeError(
            f"Hyperparameter `{name}` must evaluate to a number or a scalar tensor (its callable or schedule "
            f"returned {value!r}).") from err
    if not math.isfinite(number) or number not in allowed:
        raise ValueError(f"Hyperparameter `{name}` must evaluate to {allowed.describe()}: its callable or "
                         f"schedule returned {value!r}.")


def check_pairs(grads_and_vars: Any, argument: str = "grads_and_vars") -> list[tuple[Any, torch.Tensor]]:
    """``grads_and_vars`` as a list of ``(gradient, variable)`` pairs whose variables are tensors; raises
    ``TypeError`` naming the argument, the index and the entry otherwise (a list as a variable, a 3-tuple...)."""
    if isinstance(grads_and_vars, (torch.Tensor, str, bytes, Mapping)) or not hasattr(grads_and_vars, "__iter__"):
        raise TypeError(f"Argument `{argument}` must be an iterable of (gradient, variable) pairs. "
                        f"Received: {argument}={grads_and_vars!r}")
    items = list(grads_and_vars)
    # The common case in one C-level pass per property: 2-tuples whose second element is a tensor.
    if two_tuples(items) and all(map(isinstance, map(operator.itemgetter(1), items), repeat(torch.Tensor))):
        return items
    pairs = []
    for i, item in enumerate(items):
        if not (isinstance(item, (tuple, list)) and len(item) == 2):
            raise TypeError(f"Argument `{argument}` must hold (gradient, variable) pairs. Received at index {i}: "
                            f"{item!r}")
        check_variable(item[1], f"{argument}[{i}]")
        pairs.append((item[0], item[1]))
    return pairs


def two_tuples(items: Any) -> bool:
    """Whether ``items`` is a list of 2-tuples (one C-level pass per property): what a step's plan takes as its
    pairs without a copy (``check_pairs`` also checks that each variable is a tensor)."""
    return type(items) is list and all(map(operator.is_, map(type, items), repeat(tuple))) \
        and all(map(operator.eq, map(len, items), repeat(2)))


def check_variable(variable: Any, where: str) -> torch.Tensor:
    """A variable must be a tensor (a list or an array would be updated nowhere)."""
    if not isinstance(variable, torch.Tensor):
        raise TypeError(f"The variable at `{where}` must be a tensor (e.g. a torch.nn.Parameter or a "
                        f"slotopt.Variable). Received: {variable!r} (of type {type(variable).__name__})")
    return variable


def check_leaf(tensor: torch.Tensor, where: str) -> None:
    """torch.optim's refusal of a computed tensor as a parameter (its text first): updating it would change a
    value of the graph, not a parameter (TensorFlow refuses to update a ``tf.Tensor`` likewise)."""
    if not (tensor.is_leaf or tensor.retains_grad):
        raise ValueError(f"can't optimize a non-leaf Tensor: {where} is computed from other tensors "
                         f"(grad_fn={type(tensor.grad_fn).__name__}); optimize the leaf it comes from.")


def check_config_dict(config: Any) -> None:
    """``from_config`` takes the dict ``get_config()`` returned, with string keys, none nested past the limit
    (each entry named: ``repr`` of a value nested 50,000 deep is itself a ``RecursionError``)."""
    limits.check_config_entries(config)
    if not isinstance(config, Mapping) or not all(isinstance(k, str) for k in config):
        raise TypeError(f"Argument `config` must be a dict of arguments, as returned by `get_config()`. "
                        f"Received: config={config!r}")


def check_tensor_list(name: str, value: Any) -> list[torch.Tensor]:
    """A list (or other iterable) of tensors, possibly empty or None; a single tensor is refused (iterating it
    would give its rows)."""
    if value is None:
        return []
    if isinstance(value, (torch.Tensor, str, bytes, Mapping)) or not hasattr(value, "__iter__"):
        raise TypeError(f"Argument `{name}` must be a list of variables (tensors). Received: {name}={value!r}")
    items = list(value)
    for i, item in enumerate(items):
        if not isinstance(item, torch.Tensor):
            raise TypeError(f"Argument `{name}` must be a list of variables (tensors). Received: {name}[{i}]="
                            f"{item!r} (of type {type(item).__name__})")
    return items


def check_regex_list(name: str, value: Any) -> Optional[re.Pattern[str]]:
    """A list of regular expressions joined into one pattern (Keras: ``"|".join(set(value))``), or None when
    ``value`` is empty or None. A bare string is refused: Keras iterates it, one alternative per character."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)):
        raise TypeError(f"Argument `{name}` must be a list of strings (regular expressions), not a single string. "
                        f"Received: {name}={value!r}; write {name}=[{value!r}] for one name.")
    if isinstance(value, Mapping) or not hasattr(value, "__iter__"):
        raise TypeError(f"Argument `{name}` must be a list of strings (regular expressions). Received: "
                        f"{name}={value!r}")
    names = list(value)
    for i, item in enumerate(names):
        if not isinstance(item, str):
            raise TypeError(f"Argument `{name}` must be a list of strings (regular expressions). Received: "
                            f"{name}[{i}]={item!r} (of type {type(item).__name__})")
        try:
            re.compile(item)
        except re.error as err:
            raise ValueError(f"Argument `{name}` holds an invalid regular expression ({err}). Received: "
                             f"{name}[{i}]={item!r}") from err
    return re.compile("|".join(sorted(set(names)))) if names else None


def check_step_count(name: str, value: Any) -> int:
    """A step counter's new value: an integer >= 0, or a one-element integer tensor holding one (not a bool, a
    float such as 2.7, or a string such as "7")."""
    number = value
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not (
            value.dtype.is_floating_point or value.dtype.is_complex or value.dtype == torch.bool):
        number = int(value.detach().reshape(()).cpu())
    elif isinstance(value, np.ndarray) and value.size == 1 and value.dtype.kind in "iu":
        number = int(value.reshape(()))
    if isinstance(number, (bool, np.bool_)) or not isinstance(number, (int, np.integer)):
        raise TypeError(f"Argument `{name}` must be an integer >= 0 (or a one-element integer tensor). "
                        f"Received: {name}={value!r}")
    if number < 0:
        raise ValueError(f"Argument `{name}` must be an integer >= 0. Received: {name}={value!r}")
    return int(number)


def check_name(value: Any, argument: str = "name") -> Any:
    """An optimizer's name: a string (or None where the class has a default)."""
    if value is not None and not isinstance(value, str):
        raise TypeError(f"Argument `{argument}` must be a string. Received: {argument}={value!r} (of type "
                        f"{type(value).__name__})")
    return value


def check_no_argument_callable(name: str, value: Any, what: str = "a callable with no arguments") -> None:
    """A hyperparameter callable is called with no arguments at each step: one that needs an argument (a Keras
    ``LearningRateSchedule``, which takes the step) is refused now rather than at the first step."""
    try:
        signature = inspect.signature(value)
    except (TypeError, ValueError):
        return  # no signature to read (a builtin): trusted, as the caller's code is
    try:
        signature.bind()
    except TypeError as err:
        raise HyperparameterTypeError(
            f"Argument `{name}` must be a number, a tensor or {what} ({err}). Received: {name}={value!r}") from err


def check_argument_types(init: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any],
                         optional: frozenset[str] = OPTIONAL, own: frozenset[str] = frozenset()) -> None:
    """The types of a constructor call's hyperparameter arguments (by keyword or by position), before the
    constructor runs: a flag must be a boolean, a ``RANGES`` argument a real number or one-element real tensor
    (or a callable, or a schedule's dict for a learning rate, or None where ``optional`` allows it). Ranges are
    the generation's business and are checked after; this only keeps a constructor from comparing or testing
    the truth of a string, a list or a tensor of several values (``if amsgrad:``, ``value <= 0.0``), which would
    fail without naming the argument. Arguments in ``own`` are left to the class (it checks them with the
    message of the library it follows)."""
    named = dict(kwargs)
    if args:
        try:
            names = [p.name for p in inspect.signature(init).parameters.values()
                     if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)][1:]
        except (TypeError, ValueError):
            names = []
        named.update(zip(names, args))
    for name, value in named.items():
        if name in own:
            continue
        if name in FLAGS:
            check_flag(name, value)
        elif name in RANGES and name not in SCHEDULED:  # (a learning rate: each face has its own message)
            _check_argument_type(name, value, optional)


def _check_argument_type(name: str, value: Any, optional: frozenset[str]) -> None:
    if value is None:
        if name not in optional:
            raise HyperparameterTypeError(f"Argument `{name}` must be a number, not None. Received: {name}=None")
        return
    if isinstance(value, Mapping) and name in SCHEDULED:
        return
    if callable(value) and not isinstance(value, torch.Tensor):
        check_callable_allowed(name, value)
        return
    as_number(name, value)  # a real number, or a one-element real tensor or array; raises naming the argument
