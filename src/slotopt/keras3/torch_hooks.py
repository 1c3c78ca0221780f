"""The Keras 3 face's answers to ``engine/torch_protocol.py``: what a torch parameter group carries for a Keras 3
optimizer (its numeric hyperparameters and ``weight_decay``), read, written and swapped as attributes; the
counter and the optimizer variables as the torch state; new groups built in with Keras's variable order.

Functions of the optimizer (``self``) that ``slotopt.keras3.Optimizer`` (keras3/optimizer.py) binds as
its methods, not a base class."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable

import torch

from ..engine import as_written
from ..engine.core import Pair
from ..engine.pipeline import run_step
from ..engine.state import FlatState
from ..variables import Variable


def _floatx() -> torch.dtype:
    """Keras's ``floatx`` (the learning-rate variable's dtype): float64 when torch's default dtype is float64,
    else float32."""
    return torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32


# What a parameter group does not carry: the options of the whole optimizer.
_GLOBAL_OPTIONS = frozenset({
    "name", "learning_rate", "clipnorm", "clipvalue", "global_clipnorm", "use_ema", "ema_momentum",
    "ema_overwrite_frequency", "loss_scale_factor", "gradient_accumulation_steps", "maximize"})


def _hyperparameter_keys(self) -> tuple[str, ...]:
    keys = self.__dict__.get("_hyper_keys_cache")
    if keys is None:
        values = self._configuration_values()
        keys = tuple(k for k, v in values.items()
                     if k not in _GLOBAL_OPTIONS and (isinstance(v, (int, float)) or k == "weight_decay"))
        self.__dict__["_hyper_keys_cache"] = keys
    return keys


def _read_hyperparameter(self, key: str) -> Any:
    value = getattr(self, key)
    return 0.0 if key == "weight_decay" and value is None else value  # None and 0.0 both skip the decay


def _configuration_values(self) -> dict[str, Any]:
    lr = self._learning_rate
    if isinstance(lr, Variable):
        return self.get_config()
    # A schedule or callable is checked where it is used; serializing it here would require get_config.
    self.__dict__["_learning_rate"] = None
    try:
        return self.get_config()
    finally:
        self.__dict__["_learning_rate"] = lr


def _write_hyperparameter(self, key: str, value: Any) -> None:
    if key == "weight_decay" and not value and self.weight_decay is None:
        return  # stays None (no decay either way)
    object.__setattr__(self, key, value)


def _current_lr(self) -> float:
    return as_written.shown(self.__dict__.setdefault("_as_written", {}), "lr", float(self.learning_rate))


def _lr_is_driven(self) -> bool:
    return not isinstance(self._learning_rate, Variable)


def _swap_hyperparameters(self, overrides: Mapping[str, Any]) -> Callable[[], None]:
    saved = {}
    for key, value in overrides.items():
        attr = "_learning_rate" if key == "lr" else key
        saved[attr] = self.__dict__[attr]
        if key == "lr":
            value = Variable._adopt(torch.tensor(float(value), dtype=_floatx()), "learning_rate")
        self.__dict__[attr] = value
    return lambda: self.__dict__.update(saved)


def _state_counter(self) -> torch.Tensor:
    return self._iterations


def _state_variables(self) -> list[torch.Tensor]:
    return [v for v in self._variables if v is not self._learning_rate]  # the rate is the groups' "lr"


def _add_variables(self, groups: list[Mapping[str, Any]]) -> None:
    if not self.built:
        self.build(groups)
        return
    # Rebuild on the old and new variables together (Keras's variable order), keeping every value.
    self._restore_pending_state()
    saved = {v.path: v.detach().clone() for v in self._variables}
    iterations, learning_rate = self._iterations, self._learning_rate
    old = [(self._var_names[p], self._vars[p]) for p in self._trainable_positions]
    known = len(self._vars)
    self._register(groups)
    new = list(zip(self._var_names[known:], self._vars[known:]))
    self._variables = [v for v in (iterations, learning_rate) if isinstance(v, Variable)]
    self._slots = {}
    self._flat_state = FlatState()
    self._group_cache.clear()
    self.built = False
    self.build(old + new)
    with torch.no_grad():
        for var in self._variables:
            if var.path in saved:
                var.copy_(saved[var.path])


def _apply_step(self, pairs: list[Pair]) -> None:
    run_step(self, pairs)


def _before_state_io(self) -> None:
    self._restore_pending_state()


def _after_state_load(self) -> None:
    self._publish_param_groups()


def _load_legacy_format(self, state_dict: Mapping[str, Any]) -> bool:
    if "variables" not in state_dict:
        return False
    self._set_or_keep_weights(list(state_dict["variables"]))  # slotopt 0.1's {"config", "variables"}
    return True


# A capturable step's per-step scalars (engine/capture.py, engine/step_recipes.py): Keras 3's parameters.
def _capture_count(self) -> int:
    return self._step_count()


def _capture_rate(self, dtype: torch.dtype) -> Any:
    """This step's learning rate in ``dtype`` as a recipe: a number's (its variable's value, ``_lr_for``), or a
    schedule's at ``iterations`` (its device form), cast to ``dtype`` as ``_lr_for`` casts it."""
    from ..engine import step_recipes as R

    recipe = _schedule_recipe(self)
    if recipe is None:  # (this parameter group's: its rate is swapped in for its update)
        return R.const(self._lr_for(self.__dict__["_learning_rate"], dtype), dtype)
    return R.cast(recipe, dtype)


def _schedule_recipe(self) -> Any:
    from ..engine import step_recipes as R
    from ..schedules import LearningRateSchedule

    lr = self.__dict__.get("_learning_rate")
    if not isinstance(lr, LearningRateSchedule):
        return None
    offset = self.__dict__.get("_group_step_offset", 0)  # (the schedule reads ``iterations``: t - 1 + offset)
    return lr._capture_recipe(lambda dtype: R.step(dtype, offset - 1))


def _capture_learning_rate_refusal(self) -> Any:
    lr = self.__dict__.get("_learning_rate")
    if isinstance(lr, torch.Tensor) and not self._lr_is_driven():
        return None
    if _schedule_recipe(self) is not None:
        return None  # (a schedule with a device form: computed on the device at each step)
    return (f"`learning_rate={type(lr).__name__}` is evaluated on the host at each step (a number's steps can be "
            "captured, and ExponentialDecay, InverseTimeDecay, PiecewiseConstantDecay, PolynomialDecay and "
            "CosineDecay)")


def _capture_terms(self, rule: str, dtype: torch.dtype, t: Any, lr: Any) -> Any:
    """The face's own per-step entries of ``rule`` beside the learning rate (None: not one of its rules)."""
    return {} if rule in self._capture_rules or rule == "decoupled_weight_decay" else None
