"""A gradient that shares memory with its variable: read as the value it had when the step began, on every path.

TensorFlow's gradients are values, never the variable itself. Here a gradient can be the variable's own memory
(``g is p``, ``p.detach()``, ``p.grad = p.data``) or overlap it (a view of the same storage at another offset).
A rule that writes the variable before it has read all of the gradient then reads values the step has already
written: Keras 3 AdamW decays the variable before its update (the foreach kernels decay all of it first, the
compiled kernel element by element inside the update), and a gradient that starts before its variable in the same
storage is overwritten under any rule's one pass. The two kernel paths then give different bits, and neither the
bits of the reference.

So just before the first write (engine/proof/unchanged.py's ``proven_again``), a gradient that is exactly its variable's
memory (same address, sizes and strides) is replaced by a copy of itself, taken then: every path computes with the
value it had, as TensorFlow does. A gradient that overlaps its variable otherwise is almost certainly a mistake (a
view of the wrong offset) with no one meaning: it is refused, with nothing written. An ordinary step checks this
in one vectorised comparison of the addresses it has read anyway (a few nanoseconds per tensor); other steps
compare each pair's byte ranges.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..plan import Ordinary, StepPairs, is_python_dispatch

__all__ = ["unaliased", "overlap"]


def _extent(t: torch.Tensor) -> tuple[int, int]:
    """The bytes ``[start, end)`` a strided tensor's elements span (empty for no elements)."""
    start = t.data_ptr()
    if t.numel() == 0:
        return start, start
    last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    return start, start + (last + 1) * t.element_size()


def overlap(grad: Any, var: Any) -> str:
    """``"none"``, ``"same"`` (the gradient is exactly the variable's memory) or ``"partial"`` (it shares bytes
    with the variable otherwise), for two strided tensors read directly."""
    if not (isinstance(grad, torch.Tensor) and isinstance(var, torch.Tensor)) or grad.layout is not torch.strided \
            or var.layout is not torch.strided or is_python_dispatch(grad) or is_python_dispatch(var) \
            or grad.device != var.device:
        return "none"
    g0, g1 = _extent(grad)
    v0, v1 = _extent(var)
    if g0 >= v1 or v0 >= g1:
        return "none"
    if g0 == v0 and grad.shape == var.shape and grad.stride() == var.stride() and grad.dtype == var.dtype:
        return "same"
    return "partial"


def unaliased(opt: Any, pairs: StepPairs) -> StepPairs:
    """``pairs`` with each gradient that is its variable's own memory replaced by a copy of it; raises
    ``ValueError`` (nothing written) for a gradient that overlaps its variable otherwise."""
    if pairs.plan is not None:
        found = _ordinary_candidates(pairs)
    else:
        found = range(len(pairs))
    copied: dict[int, torch.Tensor] = {}
    for i in found:
        grad, var = pairs[i]
        kind = overlap(grad, var)
        if kind == "none":
            continue
        if kind == "partial":
            raise ValueError(
                f"The gradient of variable {opt._name_of(var)} overlaps the variable's memory without being it (a view "
                "of the same storage at another offset or with other strides): the step would read values it has "
                "already written. Pass a gradient of its own memory (grad.clone()). Nothing was written.")
        copied[i] = grad.clone()  # (contiguous like the variable: same sizes and strides)
    if not copied:
        return pairs
    if pairs.plan is not None:
        grads = list(pairs.grads)
        addresses = None if pairs.grad_addresses is None else np.array(pairs.grad_addresses, dtype=np.uint64)
        for i, grad in copied.items():
            pairs[i] = (grad, pairs[i][1])
            grads[i] = grad
            if addresses is not None:
                addresses[i] = grad.data_ptr()
        pairs.grads, pairs.grad_addresses = grads, addresses
        return pairs
    out = StepPairs(pairs)
    for i, grad in copied.items():
        out[i] = (grad, out[i][1])
    return out


def _ordinary_candidates(step: Ordinary) -> Sequence[int]:
    """The pairs of an ordinary step whose gradient may share its variable's bytes: with every gradient contiguous
    (its addresses read), those starting less than the variable's byte count away from it (the step proved each
    gradient of its variable's dtype and sizes, and each variable contiguous); else all of them."""
    if step.grad_addresses is None:
        return range(len(step))
    memo = step.plan.memo
    kept = memo.get("extents")
    if kept is None:
        variables = step.plan.variables
        kept = memo["extents"] = (np.asarray(step.plan.addresses, dtype=np.uint64).view(np.int64),
                                  np.asarray([v.numel() * v.element_size() for v in variables], dtype=np.int64))
    addresses, sizes = kept
    grads = np.asarray(step.grad_addresses, dtype=np.uint64).view(np.int64)
    return np.flatnonzero(np.abs(grads - addresses) < sizes).tolist()
