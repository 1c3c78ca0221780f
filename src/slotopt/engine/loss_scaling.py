"""The loss-scale wrappers' per-step work on an ordinary step (``engine/plan.py``), without Python per tensor.

Both wrappers (Keras 3 ``LossScaleOptimizer``, tf.keras ``legacy.LossScaleOptimizer``) look at every gradient
on every step: the step is skipped when any element of any gradient is inf or NaN, and the Keras 3 wrapper
then hands the inner optimizer ``g / dynamic_scale``. Done per tensor (a reduction, a division, a new tensor
each), that costs several times the update itself on many small tensors. On an ordinary step (every gradient a
dense contiguous tensor of its variable's dtype, shape and device: checked in one pass by the plan) the
gradients of each (device, dtype) kind are instead handled at once:

* finite check: where the compiled library runs and the gradients are on the CPU, one call reads them where
  they are (``native.first_nonfinite``: an exponent field of all ones, bits only, no copy); elsewhere the
  minimum and maximum of a flat copy (one ``cat`` per kind; ``torch.aminmax``: NaN propagates to both, an inf
  is one of them). Unlike a sum or a 2-norm neither can overflow: huge finite gradients stay finite. Exactly
  "every element finite".
* unscale: the gradients copied flat (one ``cat``), then ``flat.to(promote_types(dtype, float32)) / scale``,
  the very operation each gradient took (an element-wise true division with the same operands, so the same
  bits on every device: CUDA's reciprocal-multiply for a CPU scalar divisor included), written into a buffer
  kept with the plan whose views, shaped like the gradients, are what the inner optimizer receives. The views
  are made once per plan: a step then creates no tensor per gradient. Where the compiled library runs, the
  gradients are contiguous CPU tensors and the buffer is kept, one compiled pass per kind does the finite check
  and this unscale at once, reading the gradients where they are (``native.unscale_into``: no ``cat``, whose
  per-tensor overhead was a third of a step on many small tensors; the same bits, flush-to-zero included).

The buffer is kept (reused on the next step) only where nothing can hold on to the gradients the inner
optimizer receives: a built-in slotopt optimizer updating with its own kernels (a subclass's ``update_step``
or gradient hook could keep them), and not more than ``KEPT_BYTES``; otherwise each step unscales into a new
flat tensor, cut into views. Anything else (sparse or missing gradients, complex dtypes, FSDP2 shards) takes
the wrappers' full path.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any, Optional

import numpy as np
import torch

from ..kernels import native
from .plan import Ordinary, plan_of

__all__ = ["ordinary_step", "all_finite", "finite_unscaled", "handed_on", "kept_views", "gradients_finite",
           "keeps_no_gradients", "KEPT_BYTES"]

#: The largest unscale buffer kept between steps (bytes). Above it the per-tensor bookkeeping is small next to the
#: arithmetic, and the memory is not held between steps.
KEPT_BYTES = 1 << 26

_REAL = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_flatten = torch._C._nn.flatten_dense_tensors
_unflatten = torch._C._nn.unflatten_dense_tensors
_KINDS = ("loss_scaling", "kinds")


def ordinary_step(opt: Any, pairs: Sequence[Any]) -> Optional[Ordinary]:
    """``pairs`` when they are an ordinary step whose gradients the flat path takes (real floating dtypes, no
    FSDP2 shard whose finiteness must be agreed across processes), else None."""
    plan = plan_of(pairs)
    if plan is None or opt.__dict__.get("_sharded"):
        return None
    if not all(dtype in _REAL for _, dtype in plan.kinds):
        return None
    return pairs


def _kinds(step: Ordinary) -> list[tuple[Optional[list[int]], bool]]:
    """The pair indices of each (device, dtype) kind of the step (None: all of them) and whether all their
    gradients are 1-D, kept with the plan."""
    plan = step.plan
    kinds = plan.memo.get(_KINDS)
    if kinds is None:
        if len(plan.kinds) == 1:
            groups: list[Optional[list[int]]] = [None]
        else:
            by_kind: dict[Any, list[int]] = {}
            for i, kind in enumerate(zip(plan.devices, plan.dtypes)):
                by_kind.setdefault(kind, []).append(i)
            groups = list(by_kind.values())
        kinds = [(indices, all(len(shape) == 1 for shape in _take(plan.shapes, indices))) for indices in groups]
        plan.memo[_KINDS] = kinds
    return kinds


def _take(items: Sequence[Any], indices: Optional[list[int]]) -> list[Any]:
    if indices is None:
        return items if type(items) is list else list(items)
    return [items[i] for i in indices]


def _flat(step: Ordinary, k: int, buffer: Optional[torch.Tensor]) -> torch.Tensor:
    """The gradients of kind ``k`` of ``step`` copied flat (into ``buffer``, of their dtype, when given)."""
    indices, one_dimensional = _kinds(step)[k]
    grads = _take(step.grads, indices)
    if one_dimensional:
        return torch.cat(grads) if buffer is None else torch.cat(grads, out=buffer)
    # (``cat`` takes tensors of one rank only; ``flatten`` returns a lone tensor itself, not a copy)
    flat = _flatten(grads) if len(grads) > 1 else grads[0].reshape(-1).clone()
    return flat if buffer is None else buffer.copy_(flat)


def all_finite(flats: Sequence[torch.Tensor]) -> bool:
    """Whether every element of every tensor is finite (neither inf nor NaN)."""
    for flat in flats:
        if flat.numel():
            low, high = torch.aminmax(flat)
            if not bool(torch.isfinite(low) & torch.isfinite(high)):
                return False
    return True


def gradients_finite(step: Ordinary) -> bool:
    """Whether every element of every gradient of ``step`` is finite: per kind, one read of the gradients where
    they are by the compiled check where it runs (contiguous CPU gradients), else ``all_finite`` of a flat copy
    (into buffers kept with the plan, see ``_copy_buffer``)."""
    found, unchecked = _checked_in_place(step)
    if found:
        return False
    return all_finite([_flat(step, k, _copy_buffer(step, k)) for k in unchecked])  # (only the kinds left)


def _checked_in_place(step: Ordinary, kinds: Optional[Sequence[int]] = None) -> tuple[bool, list[int]]:
    """``(whether the compiled check found an inf or a NaN, the kinds it could not check)``, over ``kinds`` (all
    by default)."""
    plan = step.plan
    addresses = _grad_addresses(step)
    unchecked = []
    all_kinds = _kinds(step)
    for k in range(len(all_kinds)) if kinds is None else kinds:
        indices = all_kinds[k][0]
        position = _first(indices)
        found = None
        if addresses is not None and plan.devices[position].type == "cpu":
            positions, offsets = _offsets(step, k, indices)
            found = native.first_nonfinite(addresses if positions is None else addresses[positions], offsets,
                                           plan.dtypes[position], lambda indices=indices: _take(step.grads, indices))
        if found is None:
            unchecked.append(k)
        elif found >= 0:
            return True, []
    return False, unchecked


def _grad_addresses(step: Ordinary) -> Optional[np.ndarray]:
    """The gradients' data addresses read this step (uint64), or None when a gradient is not contiguous."""
    addresses = step.grad_addresses
    if addresses is not None and type(addresses) is not np.ndarray:
        addresses = np.asarray(addresses, dtype=np.uint64)  # (the Python checks give a list)
    return addresses


def _offsets(step: Ordinary, k: int, indices: Optional[list[int]]) -> tuple[Optional[np.ndarray], np.ndarray]:
    """Kind ``k``'s pair indices (an index array, None for all) and the prefix sums of its gradients' element
    counts, kept with the plan."""
    key = ("loss_scaling", "offsets", k)
    kept = step.plan.memo.get(key)
    if kept is None:
        sizes = [math.prod(shape) for shape in _take(step.plan.shapes, indices)]
        kept = (None if indices is None else np.asarray(indices, dtype=np.int64),
                np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(np.int64))
        step.plan.memo[key] = kept
    return kept


def finite_unscaled(step: Ordinary, scale: torch.Tensor, keep: bool) -> Optional[list[torch.Tensor]]:
    """``g.to(promote_types(g.dtype, float32)) / scale`` for every gradient of ``step``, in pair order, or None
    when an element of a gradient is inf or NaN (checked before the division). ``keep``: the result lives in a
    buffer kept with the plan and rewritten by the next step (see the module docstring)."""
    plan = step.plan
    kinds = _kinds(step)
    kept = [_kept_buffer(step, k, indices) if keep else None for k, (indices, _) in enumerate(kinds)]
    unscaled = _unscaled_in_one_pass(step, kept, scale)
    if unscaled is None:
        return None
    flats: dict[int, torch.Tensor] = {}
    rest = [k for k, done in enumerate(unscaled) if not done]
    if rest:
        found, unchecked = _checked_in_place(step, rest)
        if found:
            return None
        # The gradients are copied straight into a kept buffer of their own dtype (then divided in place).
        for k in rest:
            buffer = kept[k]
            flats[k] = _flat(step, k, buffer[0] if buffer is not None
                             and buffer[0].dtype is plan.dtypes[_first(kinds[k][0])] else None)
        if unchecked and not all_finite([flats[k] for k in unchecked]):
            return None
    parts: list[torch.Tensor] = []
    for k, ((indices, _), buffer) in enumerate(zip(kinds, kept)):
        flat = flats.get(k)
        if flat is None:  # unscaled into its buffer by the compiled pass
            views = buffer[1]  # type: ignore[index]
        else:
            flat = flat.to(torch.promote_types(flat.dtype, torch.float32))  # (the same tensor when it is already)
            if buffer is None:
                views = _unflatten(flat.div_(scale), _take(step.grads, indices))  # (``flat``: this step's own)
            else:
                if flat is buffer[0]:
                    flat.div_(scale)
                else:
                    torch.div(flat, scale, out=buffer[0])
                views = buffer[1]
        if indices is None:
            return list(views)
        parts.extend(views)
    return list(_reorder(plan, kinds)(parts))


def handed_on(step: Ordinary, grads: list[torch.Tensor], inner: Any) -> list[tuple[torch.Tensor, Any]]:
    """The ``(unscaled gradient, variable)`` pairs ``finite_unscaled`` gives the inner optimizer, as an
    ``Ordinary`` step of its current plan when nothing in them needs checking again: the gradients are the kept
    buffer's views (made here, of the variables' dtypes and shapes, held by nothing else), the variables are the
    ones ``step``'s plan checked in this step, in the inner plan's order. The pairs, the views' addresses and that
    verdict are kept with both plans: a step then makes no tuple and reads no tensor per gradient. Otherwise plain
    2-tuples, which the inner optimizer checks as any step's."""
    plan = step.plan
    current = getattr(inner, "_current_plan", None)
    inner_plan = current() if current is not None else None
    kept = plan.memo.get(("loss_scaling", "handed on"))
    if kept is not None and kept[0] is inner_plan and len(grads) == len(kept[1]) \
            and all(map(operator.is_, grads, kept[1])):
        return Ordinary.of(kept[2], inner_plan, kept[1], kept[3])
    pairs = list(zip(grads, plan.variables))
    views = kept_views(step)
    if inner_plan is not None and views is not None and len(views) == len(grads) \
            and all(map(operator.is_, grads, views)) and len(inner_plan.variables) == len(plan.variables) \
            and all(map(operator.is_, inner_plan.variables, plan.variables)) \
            and [g.dtype for g in grads] == plan.dtypes:  # (float16 gradients are unscaled into float32)
        addresses = np.array([g.data_ptr() for g in grads], dtype=np.uint64)
        plan.memo[("loss_scaling", "handed on")] = (inner_plan, list(grads), pairs, addresses)
    return pairs


def kept_views(step: Ordinary) -> Optional[list[torch.Tensor]]:
    """The views of the kept unscale buffers in pair order (what ``finite_unscaled`` returns when it keeps them),
    or None when a kind has no kept buffer."""
    plan = step.plan
    kinds = _kinds(step)
    buffers = [plan.memo.get(("loss_scaling", "buffer", k)) for k in range(len(kinds))]
    if not all(buffers):
        return None
    if len(kinds) == 1:
        return list(buffers[0][1])  # type: ignore[index]
    return list(_reorder(plan, kinds)([view for buffer in buffers for view in buffer[1]]))  # type: ignore[index]


def _unscaled_in_one_pass(step: Ordinary, kept: Sequence[Optional[tuple[torch.Tensor, list[Any]]]],
                          scale: torch.Tensor) -> Optional[list[bool]]:
    """Per kind of ``step``, whether the compiled unscale (``native.unscale_into``) checked it and wrote its
    unscaled gradients into its kept buffer, reading them where they are (no flat copy, no per-tensor torch
    call); None when it found an inf or a NaN. It runs on a kind of contiguous CPU gradients with a kept buffer
    and a float32 CPU scale while the compiled path is active; every other kind is left to the torch path."""
    done = [False] * len(kept)
    addresses = _grad_addresses(step)
    if addresses is None or not native.active() or scale.dtype is not torch.float32 or not scale.is_cpu:
        return done
    plan = step.plan
    value = None
    for k, ((indices, _), buffer) in enumerate(zip(_kinds(step), kept)):
        position = _first(indices)
        if buffer is None or plan.devices[position].type != "cpu":
            continue
        if value is None:
            value = float(scale)
        positions, offsets = _offsets(step, k, indices)
        found = native.unscale_into(addresses if positions is None else addresses[positions], offsets,
                                    plan.dtypes[position], buffer[0], value,
                                    tensors=lambda indices=indices: _take(step.grads, indices))
        if found is None:
            return done
        if found:
            return None
        done[k] = True
    return done


def _first(indices: Optional[list[int]]) -> int:
    return 0 if indices is None else indices[0]


def _copy_buffer(step: Ordinary, k: int) -> Optional[torch.Tensor]:
    """Kind ``k``'s buffer of the gradients' own dtype, kept with the plan, for ``_flat`` to copy them into on
    every step (no new memory to map each step), or None when it would be larger than ``KEPT_BYTES``."""
    kept = _kept_buffer(step, k, _kinds(step)[k][0], promote=False)
    return None if kept is None else kept[0]


def _kept_buffer(step: Ordinary, k: int, indices: Optional[list[int]],
                 promote: bool = True) -> Optional[tuple[torch.Tensor, list[Any]]]:
    """Kind ``k``'s buffer (of the unscaled dtype, or the gradients' own with ``promote=False``) and its views
    shaped like the gradients, kept with the plan (made at the first use), or None when it would be larger than
    ``KEPT_BYTES``."""
    plan = step.plan
    key = ("loss_scaling", "buffer" if promote else "copy", k)
    kept = plan.memo.get(key)
    if kept is False:
        return None
    if kept is None:
        position = _first(indices)
        dtype = plan.dtypes[position]
        if promote:
            dtype = torch.promote_types(dtype, torch.float32)
        grads = _take(step.grads, indices)
        numel = sum(g.numel() for g in grads)
        if numel * dtype.itemsize > KEPT_BYTES:
            plan.memo[key] = False
            return None
        buffer = torch.empty(numel, dtype=dtype, device=plan.devices[position])
        kept = (buffer, list(_unflatten(buffer, grads)) if promote else [])
        plan.memo[key] = kept
    return kept


def _reorder(plan: Any, kinds: list[tuple[Optional[list[int]], bool]]) -> Any:
    """Takes the concatenated per-kind results back to pair order (an ``itemgetter``, kept with the plan)."""
    key = ("loss_scaling", "order")
    take = plan.memo.get(key)
    if take is None:
        where = {i: j for j, i in enumerate(i for indices, _ in kinds for i in indices)}  # type: ignore[union-attr]
        take = operator.itemgetter(*[where[i] for i in range(len(where))])  # (two kinds or more: 2+ keys)
        plan.memo[key] = take
    return take


def keeps_no_gradients(opt: Any) -> bool:
    """Whether ``opt`` is sure to drop the gradients it is given once its step is done: a built-in slotopt
    optimizer (no user subclass, no composite) updating through its own kernels."""
    from .composed import ComposesOptimizers, WrapsInnerOptimizer

    has_custom_update = getattr(opt, "_has_custom_update", None)
    return (type(opt).__module__.startswith("slotopt.") and callable(has_custom_update)
            and not has_custom_update() and not isinstance(opt, (ComposesOptimizers, WrapsInnerOptimizer))
            and not getattr(opt, "gradient_transformers", None))
