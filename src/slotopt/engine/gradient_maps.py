"""The one way a stage replaces the gradients of a step: planned pairs in, planned pairs out.

A stage that maps the gradients (clipping, unscaling, ``clipvalue``, ``loss_scale_factor``, accumulation, legacy
``gradient_transformers``) used to return a plain list, and the step lost its plan (``engine/plan.py``) for every
stage after it: on many small tensors the per-tensor path costs far more than the arithmetic. ``replaced`` gives
the next stage an ``Ordinary`` step of the same plan whenever the new gradients fit it, proven as any step's are:

* gradients slotopt's own code made in this step from the step's proven gradients (``trusted``): fresh dense
  tensors nothing else holds; their layout (type, dtype, shape, device, contiguity, bounds) is proven by the C++
  checks' one pass where they run, else read in bulk, and the step keeps what its start proved of its variables
  (``quiet``, ``held``, ``constrained``: no code but slotopt's own ran in between);
* anything else (a user's transformer's result): the plan's full ``fits``, variables included, and nothing the
  start proved is carried over.

Where they do not fit (a transformer returning a sparse or strided gradient, or other variables), the plain list
goes on to the full path, as before. The compiled maps (``engine/compiled_maps.py``) write into buffers kept with
the plan and make their ``Ordinary`` directly.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from itertools import repeat
from typing import Any

import torch

from ..kernels.native import tensor_table
from ..kernels.native.operands import plain
from .plan import Ordinary, Pair

__all__ = ["replaced", "replaced_pairs"]

_is = operator.is_


def replaced(step: Any, grads: Sequence[Any], trusted: bool = True) -> list[Pair]:
    """``step``'s pairs with ``grads`` in place of its gradients (in pair order), as an ``Ordinary`` step of its
    plan when ``step`` is one and the gradients fit it (see the module docstring), else a plain list."""
    pairs = [(g, v) for g, (_, v) in zip(grads, step)]
    if getattr(step, "plan", None) is None:
        return pairs
    return _planned(step, pairs, trusted)


def replaced_pairs(step: Any, pairs: Sequence[Pair], trusted: bool = False) -> list[Pair]:
    """``pairs`` (a stage's result for ``step``, e.g. a transformer's) as an ``Ordinary`` step of ``step``'s plan
    when ``step`` is one and they fit it, else as a list."""
    pairs = list(pairs)
    if getattr(step, "plan", None) is None or len(pairs) != len(step):
        return pairs
    return _planned(step, pairs, trusted)


def _planned(step: Ordinary, pairs: list[Pair], trusted: bool) -> list[Pair]:
    plan = step.plan
    if trusted and not (tensor_table.active() and plan.table is not None):
        # (the Python checks: what a fresh result of torch's ops on the proven gradients may differ in, in bulk)
        grads = [g for g, _ in pairs]
        if not (all(map(_is, map(type, grads), repeat(torch.Tensor))) and all(map(_is, [v for _, v in pairs],
                                                                                   plan.variables))
                and list(map(operator.attrgetter("dtype"), grads)) == plan.dtypes
                and list(map(operator.attrgetter("shape"), grads)) == plan.shapes
                and (all(map(operator.attrgetter("is_cpu"), grads)) if plan.on_cpu
                     else list(map(operator.attrgetter("device"), grads)) == plan.devices)
                and all(map(torch.Tensor.is_contiguous, grads)) and plain(grads)):
            return pairs
        again = Ordinary.of(pairs, plan, grads, list(map(torch.Tensor.data_ptr, grads)), step.constrained)
    else:
        again = plan.fits(pairs)
        if again is None:
            return pairs
    if trusted:
        again.constrained, again.quiet, again.held = step.constrained, step.quiet, step.held
        again.proof = step.proof
    return again
