"""A gradient that shares memory with its variable: read as the value it had when the step began, on every path.

TensorFlow's gradients are values, never the variable itself. Here a gradient can be the variable's own memory
(``g is p``, ``p.detach()``, ``p.grad = p.data``) or overlap it (a view of the same storage at another offset).
A rule that writes the variable before it has read all of the gradient then reads values the step has already
written: Keras 3 AdamW decays the variable before its update (the foreach kernels decay all of it first, the
compiled kernel element by element inside the update), and a gradient that starts before its variable in the same
storage is overwritten under any rule's one pass. The two kernel paths then give different bits, and neither the
bits of the reference.

So just before the first write (engine/proof/unchanged.py's ``proven_again``), a gradient that is exactly its variable's
memory (same address, sizes and strides), or that shares memory with another variable of the step (two parameters'
gradients swapped: ``p1.grad = p2.data``), is replaced by a copy of itself, taken then: every path computes with
the value it had, as TensorFlow does. A gradient that overlaps its variable otherwise is almost certainly a mistake (a
view of the wrong offset) with no one meaning: it is refused, with nothing written. An ordinary step checks this
with one vectorised search of the addresses it has read anyway among its variables' sorted byte ranges (kept with
the plan); other steps search each pair's byte ranges the same way.
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
    """``pairs`` with each gradient that shares memory with a variable of the step (its own, exactly, or another
    one: ``p1.grad = p2.data``) replaced by a copy of it; raises ``ValueError`` (nothing written) for a gradient
    that overlaps its own variable otherwise."""
    if pairs.plan is not None:
        found = _ordinary_candidates(pairs)
    else:
        found = _candidates([g for g, _ in pairs], [v for _, v in pairs])
    copied: dict[int, torch.Tensor] = {}
    for i in found:
        grad, var = pairs[i]
        kind = overlap(grad, var)
        if kind == "partial":
            raise ValueError(
                f"The gradient of variable {opt._name_of(var)} overlaps the variable's memory without being it (a view "
                "of the same storage at another offset or with other strides): the step would read values it has "
                "already written. Pass a gradient of its own memory (grad.clone()). Nothing was written.")
        # Another variable's memory (two parameters' gradients swapped, say): a rule that writes that variable
        # first would make this pair read its new values, so it is read as it was, like one's own.
        if kind == "none" and not any(overlap(grad, other) != "none" for _, other in pairs):
            continue
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


def _sorted_extents(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The variables' start addresses sorted, and the running maximum of their end addresses in that order after
    a lowest value: a range ``[a, b)`` meets some variable iff the running end before the first variable that
    starts at or after ``b`` is above ``a``."""
    order = np.argsort(starts, kind="stable")
    running = np.maximum.accumulate(ends[order]) if len(order) else ends
    return starts[order], np.concatenate([np.array([np.iinfo(np.int64).min], dtype=np.int64), running])


def _meeting(sorted_starts: np.ndarray, running_ends: np.ndarray, starts: np.ndarray,
             ends: np.ndarray) -> np.ndarray:
    """Which of the ranges ``[starts, ends)`` share a byte with some variable (an empty range shares none)."""
    return (running_ends[np.searchsorted(sorted_starts, ends, side="left")] > starts) & (ends > starts)


def _candidates(grads: Sequence[Any], variables: Sequence[Any]) -> Sequence[int]:
    """The pairs whose gradient may share bytes with some variable of the step (by address range; ``overlap``
    then decides on each, devices and kinds included)."""
    def extents(tensors: Sequence[Any]) -> np.ndarray:
        return np.array([_extent(t) if isinstance(t, torch.Tensor) and t.layout is torch.strided
                         and not is_python_dispatch(t) else (0, 0) for t in tensors], dtype=np.int64).reshape(-1, 2)

    var_extents, grad_extents = extents(variables), extents(grads)
    sorted_starts, running_ends = _sorted_extents(var_extents[:, 0], var_extents[:, 1])
    return np.flatnonzero(_meeting(sorted_starts, running_ends, grad_extents[:, 0], grad_extents[:, 1])).tolist()


def _ordinary_candidates(step: Ordinary) -> Sequence[int]:
    """The pairs of an ordinary step whose gradient may share bytes with some variable: with every gradient
    contiguous (its addresses read), those whose range meets a variable's (the step proved each gradient of its
    variable's dtype and sizes, and each variable contiguous); else as any step's."""
    if step.grad_addresses is None:
        return _candidates([g for g, _ in step], [v for _, v in step])
    memo = step.plan.memo
    kept = memo.get("extents")
    if kept is None:
        variables = step.plan.variables
        starts = np.asarray(step.plan.addresses, dtype=np.uint64).view(np.int64)
        sizes = np.asarray([v.numel() * v.element_size() for v in variables], dtype=np.int64)
        sorted_starts, running_ends = _sorted_extents(starts[sizes > 0], (starts + sizes)[sizes > 0])
        kept = memo["extents"] = (sizes, sorted_starts, running_ends)
    sizes, sorted_starts, running_ends = kept
    grads = np.asarray(step.grad_addresses, dtype=np.uint64).view(np.int64)
    # (every size is above 0 or the range meets nothing: one search and one comparison per step)
    return np.flatnonzero(running_ends[np.searchsorted(sorted_starts, grads + sizes, side="left")] > grads).tolist()
