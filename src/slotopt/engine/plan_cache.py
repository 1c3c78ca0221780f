"""The plan cache: the last checked step's ``StepPlan`` (engine/plan.py) kept while it holds, so that the next
ordinary steps are recognised in one pass.

Functions of the optimizer, not a base class, that ``OptimizerCore`` (engine/core.py) binds as its methods."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

import torch

from .plan import Ordinary, Pair, StepPairs, StepPlan, quiet_now
from .proof import unchanged
from .writing import atomic

__all__ = ["current_plan", "planned_step"]


def _ordinary(self, pairs: Sequence[Pair], since: Optional[tuple[int, int]] = None) -> StepPairs:
    """Checked ``pairs`` as the step's ``StepPairs``: an ``Ordinary`` step when they can be, leaving a plan for the
    next steps.

    ``since``: ``plan.proof_mark()`` read by the pipeline before this step's ``_prepare_pairs``. An ordinary step
    proven in it (after the mark), by a step where only slotopt's own code runs until the first write
    (``plan.quiet_now``, ``atomic.may_run_user_code``: no callable, schedule, transformer or subclass hook) inside
    its uninterrupted part (``atomic.held``), is marked ``quiet``: ``proven_again`` need not prove it again, as
    long as the cyclic collector has not run since the mark (engine/proof/unchanged.py)."""
    if not isinstance(pairs, StepPairs):  # (what a face's checks return: an ordinary step, or a list)
        pairs = StepPairs(pairs)
    if pairs.plan is None and len(pairs) >= 2 and self._plans_steps and StepPlan.possible(self, pairs):
        # (read back from a local: another thread resetting the optimizer's state meanwhile drops ``self._plan``)
        plan = self._plan = StepPlan(self, pairs)
        ordinary = plan.fits(pairs)  # fits: ``possible`` checked what ``fits`` does
        pairs = ordinary if ordinary is not None else pairs
    if pairs.plan is not None:
        pairs.quiet = since[1] if (since is not None and pairs.proof > since[0] and atomic.held()
                                   and quiet_now(pairs.plan) and not atomic.may_run_user_code(self)) else None
    return pairs


def current_plan(self) -> Optional[StepPlan]:
    """The last step's plan while it still holds for this optimizer (engine/plan.py), else None."""
    plan = self.__dict__.get("_plan")  # (a wrapper that forwards to its inner optimizer has none)
    return plan if plan is not None and plan.valid_for(self) else None


def planned_step(self, pairs: Sequence[Pair]) -> Optional[Ordinary]:
    """``pairs`` as an ``Ordinary`` step of the last step's plan, or None (engine/plan.py)."""
    plan = current_plan(self)
    if plan is None:
        return None
    if isinstance(pairs, StepPairs) and pairs.plan is plan:
        return pairs  # checked by this plan in this very step (a composite validates its groups first)
    ordinary = plan.fits(pairs)
    # The slots too are proven unchanged before anything is written (else the full path checks and refuses).
    return ordinary if ordinary is not None and unchanged.slots_hold(self, ordinary) else None


def _planned_params_step(self, params: list[torch.Tensor]) -> Optional[Ordinary]:
    """``step()``'s parameters with their ``.grad`` as an ``Ordinary`` step of the last step's plan, or None."""
    plan = current_plan(self)
    ordinary = None if plan is None else plan.fits_params(params)
    return ordinary if ordinary is not None and unchanged.slots_hold(self) else None

