"""The base class of every learning-rate schedule, and the shared check of a built-in schedule's arguments."""

from __future__ import annotations

from typing import Any, Dict, Mapping, Union

import torch

from ..engine import checks

Number = Union[int, float]
Step = Union[int, float, torch.Tensor]
ScalarLike = Union[int, float, bool, torch.Tensor]


class LearningRateSchedule:
    """Base class of every learning-rate schedule.

    A subclass implements ``__call__(step)``, returning the learning rate for that optimizer step, and
    ``get_config()``, returning the constructor arguments as a dict so that ``cls.from_config(config)``
    (which is ``cls(**config)``) rebuilds an equal schedule.

    >>> class Halving(LearningRateSchedule):
    ...     def __init__(self, lr: float) -> None:
    ...         self.lr = lr
    ...     def __call__(self, step):
    ...         return torch.tensor(self.lr) / 2 ** torch.as_tensor(step)
    ...     def get_config(self):
    ...         return {"lr": self.lr}
    >>> float(Halving.from_config({"lr": 1.0})(3))
    0.125
    """

    def __call__(self, step: Step) -> torch.Tensor:
        raise NotImplementedError(
            f"Learning rate schedule '{type(self).__name__}' must override `__call__(self, step)`."
        )

    #: The class whose arithmetic ``_recipe`` describes (a subclass of it has none: its own may differ).
    _recipe_of: Any = None

    def _capture_recipe(self, step_of: Any) -> Any:
        """This schedule's value as a per-step recipe of the step (``engine/step_recipes.py``; ``step_of(dtype)``:
        the iteration count the schedule is called with, as a number of ``dtype``), for a capturable step that
        computes it on the device; None where it has no exact device form (the step is refused, by name)."""
        if type(self) is not self._recipe_of:  # (a subclass's arithmetic is its own)
            return None
        return self._recipe(step_of)

    def _recipe(self, step_of: Any) -> Any:
        return None

    def get_config(self) -> Dict[str, Any]:
        raise NotImplementedError(
            f"Learning rate schedule '{type(self).__name__}' must override `get_config()` in order to be "
            "serializable."
        )

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> LearningRateSchedule:
        """Builds a schedule from the dict returned by :meth:`get_config`."""
        return cls(**config)


def _check_config(schedule: LearningRateSchedule, **in_range: Any) -> None:
    """Every argument of a built-in schedule against the shared table (``engine/checks.py``): finite numbers of
    their range (``decay_steps > 0``, rates, powers and ``t_mul`` not negative...) and boolean flags.
    ``in_range``: stand-ins for values the schedule takes outside the table's range (checked by itself)."""
    checks.check_values({**schedule.get_config(), **in_range})
