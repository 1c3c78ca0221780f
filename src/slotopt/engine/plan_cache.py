"""The plan cache: the last checked step's ``StepPlan`` (engine/plan.py) kept while it holds, so that the next
ordinary steps are recognised in one pass.

Functions of the optimizer, not a base class, that ``OptimizerCore`` (engine/core.py) binds as its methods."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

import torch

from . import unchanged
from .plan import Ordinary, Pair, StepPlan

__all__ = ["current_plan", "planned_step"]


def _ordinary(self, pairs: list[Pair]) -> list[Pair]:
    """Checked ``pairs`` as an ``Ordinary`` step when they can be, leaving a plan for the next steps."""
    if type(pairs) is Ordinary or len(pairs) < 2 or not self._plans_steps or not StepPlan.possible(self, pairs):
        return pairs
    # (read back from a local: another thread resetting the optimizer's state meanwhile drops ``self._plan``)
    plan = self._plan = StepPlan(self, pairs)
    ordinary = plan.fits(pairs)  # fits: ``possible`` checked what ``fits`` does
    return ordinary if ordinary is not None else pairs


def current_plan(self) -> Optional[StepPlan]:
    """The last step's plan while it still holds for this optimizer (engine/plan.py), else None."""
    plan = self.__dict__.get("_plan")  # (a wrapper that forwards to its inner optimizer has none)
    return plan if plan is not None and plan.valid_for(self) else None


def planned_step(self, pairs: Sequence[Pair]) -> Optional[Ordinary]:
    """``pairs`` as an ``Ordinary`` step of the last step's plan, or None (engine/plan.py)."""
    plan = current_plan(self)
    if plan is None:
        return None
    if type(pairs) is Ordinary and pairs.plan is plan:
        return pairs  # checked by this plan in this very step (a composite validates its groups first)
    ordinary = plan.fits(pairs)
    # The slots too are proven unchanged before anything is written (else the full path checks and refuses).
    return ordinary if ordinary is not None and unchanged.slots_hold(self) else None


def _planned_params_step(self, params: list[torch.Tensor]) -> Optional[Ordinary]:
    """``step()``'s parameters with their ``.grad`` as an ``Ordinary`` step of the last step's plan, or None."""
    plan = current_plan(self)
    ordinary = None if plan is None else plan.fits_params(params)
    return ordinary if ordinary is not None and unchanged.slots_hold(self) else None

