"""The legacy face's answers to ``engine/torch_protocol.py``: a torch parameter group carries the ``_set_hyper``
hyperparameters and ``epsilon``, read, written and swapped through the hyperparameter table; the counter and the
weights are the torch state.

Functions of the optimizer (``self``) that ``slotopt.legacy.Optimizer`` (legacy/optimizer.py) binds as
its methods, not a base class."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, Optional

import torch

from .. import schedules as schedules_module
from ..engine import as_written
from ..variables import Variable
from .hyperparameters import is_number


def _has_learning_rate(self) -> bool:
    return "learning_rate" in self._hyper


def _configuration_values(self) -> dict[str, Any]:
    values = {name: value for name, value in self._hyper.items() if not isinstance(value, Variable)}
    values.update(decay=self._initial_decay, clipnorm=self._clipnorm, clipvalue=self._clipvalue,
                  global_clipnorm=self._global_clipnorm)
    if is_number(self.__dict__.get("epsilon")):
        values["epsilon"] = self.epsilon
    return values


def _hyperparameter_keys(self) -> tuple[str, ...]:
    keys = tuple(k for k in self._hyper if k not in ("learning_rate", "decay"))
    return keys + ("epsilon",) if is_number(self.__dict__.get("epsilon")) else keys


def _read_hyperparameter(self, key: str) -> Any:
    if key == "epsilon":
        return self.epsilon
    value = self._hyper[key]
    if is_number(value) or isinstance(value, torch.Tensor):
        return as_written.shown(self.__dict__.get("_as_written", {}), key, float(value))
    return value


def _write_hyperparameter(self, key: str, value: Any) -> None:
    if key == "epsilon":
        object.__setattr__(self, key, value)
    else:
        self._set_hyper(key, value)


def _current_lr(self) -> float:
    value = self._hyper["learning_rate"]
    if isinstance(value, schedules_module.LearningRateSchedule):
        return float(value(self.iterations.detach().to(torch.float32)))
    return as_written.shown(self.__dict__.get("_as_written", {}), "learning_rate",
                            float(self._call_if_callable(value)))


def _write_learning_rate(self, value: float) -> None:
    self._set_hyper("learning_rate", value)


def _lr_is_driven(self) -> bool:
    value = self._hyper.get("learning_rate")
    return isinstance(value, schedules_module.LearningRateSchedule) or (
        callable(value) and not isinstance(value, torch.Tensor))


def _swap_hyperparameters(self, overrides: Mapping[str, Any]) -> Callable[[], None]:
    saved_hyper, saved_state, saved_epsilon = dict(self._hyper), self._apply_state, self.__dict__.get("epsilon")
    for key, value in overrides.items():
        if key == "epsilon":
            object.__setattr__(self, "epsilon", value)
        else:  # a float32 value, as a number hyperparameter is kept
            self._hyper["learning_rate" if key == "lr" else key] = torch.tensor(float(value), dtype=torch.float32)
    self._apply_state = None  # coefficients are recomputed from the group's values

    def restore() -> None:
        self._hyper.clear()
        self._hyper.update(saved_hyper)
        self._apply_state = saved_state
        object.__setattr__(self, "epsilon", saved_epsilon)
    return restore


def _state_counter(self) -> Optional[torch.Tensor]:
    return self._iterations


def _state_variables(self) -> list[torch.Tensor]:
    return self._weights


def _add_variables(self, groups: list[Mapping[str, Any]]) -> None:
    self.build(groups)


def _load_legacy_format(self, state_dict: Mapping[str, Any]) -> bool:
    if "weights" not in state_dict:
        return False
    self.set_weights(list(state_dict["weights"]))  # slotopt 0.1's {"config", "weights"}
    return True


# A capturable step's per-step scalars (engine/capture.py, engine/step_recipes.py): tf.keras's parameters.
def _capture_count(self) -> int:
    return int(self.iterations) + 1


def _capture_rate(self, dtype: torch.dtype) -> Any:
    """``_decayed_lr`` as a recipe: the rate (a schedule's at ``iterations``) cast to ``dtype``, divided by
    ``1 + decay * iterations``."""
    from ..engine import step_recipes as R
    from .hyperparameters import as_scalar

    value = self._hyper.get("learning_rate")
    if isinstance(value, schedules_module.LearningRateSchedule):  # at ``float(iterations)``, then cast
        lr = R.cast(value._capture_recipe(lambda d: R.step(d, -1)), dtype)
    else:
        lr = R.const(float(self._get_hyper("learning_rate", dtype)), dtype)
    if self._initial_decay > 0.0:
        lr = lr / (1.0 + R.const(float(as_scalar(self._initial_decay, dtype)), dtype) * R.step(dtype, -1))
    return lr


def _capture_learning_rate_refusal(self) -> Any:
    from ..engine import step_recipes as R

    value = self._hyper.get("learning_rate")
    if isinstance(value, schedules_module.LearningRateSchedule) \
            and value._capture_recipe(lambda d: R.step(d, -1)) is not None:
        return None  # (a schedule with a device form: computed on the device at each step)
    if self._lr_is_driven():
        return (f"`learning_rate={type(self._hyper.get('learning_rate')).__name__}` is evaluated on the host at "
                "each step (a number's steps can be captured)")
    return None


def _capture_terms(self, rule: str, dtype: torch.dtype, t: Any, lr: Any) -> Any:
    return {} if rule in self._capture_rules else None
