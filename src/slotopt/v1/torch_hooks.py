"""The TF1 face's answers to ``engine/torch_protocol.py``: a torch parameter group carries the constructor's
hyperparameters (TF1 names), read, written, checked and swapped in the optimizer's hyperparameter dict.

Functions of the optimizer (``self``) that ``slotopt.v1.Optimizer`` (v1/optimizer.py) binds as
its methods, not a base class."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable

import torch

from ..engine import checks
from .state import is_number

#: The constructor argument behind each short hyperparameter key (TF1 keeps ``l1`` for
#: ``l1_regularization_strength``...): messages name the argument the caller wrote.
_ARGUMENT_NAMES = {"l1": "l1_regularization_strength", "l2": "l2_regularization_strength",
                   "l2_shrinkage": "l2_shrinkage_regularization_strength", "lr": "learning_rate"}


def argument_name(key: str) -> str:
    return _ARGUMENT_NAMES.get(key, key)


def _add_variables(self, groups: list[Mapping[str, Any]]) -> None:
    self.build(groups)


def _hypers(self) -> dict[str, Any]:
    return self.__dict__.get("_hyper", {})


def _configuration_values(self) -> dict[str, Any]:
    return dict(_hypers(self))


def _check_configuration(self) -> None:
    """TF1's kernels check the ranges at apply time (``InvalidArgumentError``, see ``_check_positive``), and
    slotopt keeps that; but a NaN or infinite number is refused here, since no kernel would catch it."""
    for key, value in {**self._attribute_values(), **self._configuration_values()}.items():
        if key in checks.FLAGS:
            checks.check_flag(key, value)
        elif value is not None and not (callable(value) and not isinstance(value, torch.Tensor)):
            # a number of any kind (np.bool_ too: refused), a tensor, or something convert_to_tensor refuses
            checks.check_number(argument_name(key), value, self._hyperparameter_ranges.get(key, checks.ANY))


def _check_hyperparameter(self, key: str, value: Any) -> None:
    key = "learning_rate" if key == "lr" else key
    checks.check_number(argument_name(key), value, self._hyperparameter_ranges.get(key, checks.ANY))


def _has_learning_rate(self) -> bool:
    return "learning_rate" in _hypers(self)


def _hyperparameter_keys(self) -> tuple[str, ...]:
    return tuple(k for k in _hypers(self) if k != "learning_rate")


def _read_hyperparameter(self, key: str) -> Any:
    value = _hypers(self)[key]
    return float(value) if is_number(value) or isinstance(value, torch.Tensor) else value


def _write_hyperparameter(self, key: str, value: Any) -> None:
    _hypers(self)[key] = value


def _current_lr(self) -> float:
    return float(self._call_if_callable(_hypers(self)["learning_rate"]))


def _write_learning_rate(self, value: float) -> None:
    _hypers(self)["learning_rate"] = value


def _lr_is_driven(self) -> bool:
    value = _hypers(self).get("learning_rate")
    return callable(value) and not isinstance(value, torch.Tensor)


def _swap_hyperparameters(self, overrides: Mapping[str, Any]) -> Callable[[], None]:
    hypers = _hypers(self)
    saved = dict(hypers)
    hypers.update({("learning_rate" if k == "lr" else k): v for k, v in overrides.items()})
    self._prepare()

    def restore() -> None:
        hypers.clear()
        hypers.update(saved)
        self._prepare()
    return restore


def _state_variables(self) -> list[torch.Tensor]:
    return list(self._non_slot_variables())


def _call_if_callable(param: Any) -> Any:
    return param() if callable(param) and not isinstance(param, torch.Tensor) else param


# A capturable step's per-step scalars (engine/capture.py, engine/step_recipes.py): TF1's parameters.
def _capture_count(self) -> None:
    return None  # (no iteration count: TF1's rules here read none; the groups count their own steps)


def _capture_rate(self, dtype: torch.dtype) -> Any:
    from ..engine import step_recipes as R

    return R.const(self._t("learning_rate", dtype), dtype)


def _capture_learning_rate_refusal(self) -> Any:
    if self._lr_is_driven():
        return "a callable `learning_rate` is evaluated on the host at each step (a number's steps can be captured)"
    return None


def _capture_terms(self, rule: str, dtype: torch.dtype, t: Any, lr: Any) -> Any:
    return {} if rule in self._capture_rules else None
