"""Gradient clipping by value, per-tensor norm and global norm (spec §1.6, §2.5).

Sums of squares and norms are TensorFlow's (``slotopt.numerics``: Eigen's summation order, IEEE square roots).

Functions take and return lists of dense tensors and never modify their inputs (the inputs may be the user's
``.grad`` tensors). Sparse gradients are clipped on their ``values``; the caller unwraps and rewraps them.

``shard_groups`` (one entry per gradient, FSDP2) names the process groups a gradient's local shard must be summed
over to give the whole tensor's sum of squares; None (the default) means every gradient is whole.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Callable, Optional, TypeVar

import torch

from .. import numerics
from ..kernels.rows import segment_sum
from ..variables import IndexedSlices, as_indexed_slices, is_sparse
from .distributed import sum_over_shards
from .gradient_maps import replaced

ShardGroups = Optional[Sequence[Sequence[Any]]]

__all__ = ["clip_by_value", "clip_by_norm", "clip_by_global_norm", "global_norm", "norm_of_sums", "sum_of_squares",
           "map_gradient_values"]

T = TypeVar("T")


def clip_by_value(grads: Sequence[torch.Tensor], clipvalue: float) -> list[torch.Tensor]:
    return [torch.clamp(g, -clipvalue, clipvalue) for g in grads]


def _in_order(g: torch.Tensor, order: Optional[Callable[[torch.Tensor], torch.Tensor]]) -> torch.Tensor:
    """``g`` in TensorFlow's logical order (``order``: engine/summation.py; a view of ``g`` or a copy)."""
    return g if order is None else order(g)


def _square_sums(grads: Sequence[torch.Tensor], shard_groups: ShardGroups, orders: Any = None) -> list[torch.Tensor]:
    sums = [numerics.sum(t * t) for t in (_in_order(g, o) for g, o in zip(grads, orders or [None] * len(grads)))]
    return sums if shard_groups is None else sum_over_shards(sums, [list(gr) for gr in shard_groups])


def clip_by_norm(grads: Sequence[torch.Tensor], clipnorm: float, shard_groups: ShardGroups = None,
                 orders: Any = None) -> list[torch.Tensor]:
    """``g * c / max(||g||, c)`` per tensor; a zero norm leaves the gradient unchanged. ``orders`` (one per
    gradient, engine/summation.py): the norm's sum is taken in TensorFlow's order of the variable's layout."""
    out = []
    for g, sq in zip(grads, _square_sums(grads, shard_groups, orders)):
        norm = torch.where(sq > 0, numerics.sqrt(torch.where(sq > 0, sq, torch.ones_like(sq))), sq)
        out.append((g * clipnorm) / torch.maximum(norm, torch.tensor(clipnorm, dtype=g.dtype, device=g.device)))
    return out


def sum_of_squares(grad: Any, rows: int, order: Any = None) -> torch.Tensor:
    """``sum(g * g)``; for slices of a ``rows``-row variable, the sum of their squares densified per row
    (Keras 3, keras3_sparse.md §3.5). ``order``: as :func:`clip_by_norm`'s (dense gradients)."""
    if isinstance(grad, IndexedSlices):
        return numerics.sum(segment_sum(grad.values * grad.values, grad.indices, rows))
    grad = _in_order(grad, order)
    return numerics.sum(grad * grad)


def global_norm(grads: Sequence[torch.Tensor], shard_groups: ShardGroups = None, orders: Any = None) -> torch.Tensor:
    """``sqrt(sum_i sum(g_i ** 2))``, accumulated on the first gradient's device (``orders``: as
    :func:`clip_by_norm`'s)."""
    return norm_of_sums(_square_sums(grads, None, orders), shard_groups)


def norm_of_sums(sums: Sequence[torch.Tensor], shard_groups: ShardGroups = None) -> torch.Tensor:
    """``sqrt(sum_i s_i)`` of per-gradient sums of squares (each summed over its shards first), on the first
    one's device and dtype."""
    if shard_groups is not None:
        sums = sum_over_shards(list(sums), [list(gr) for gr in shard_groups])
    first = sums[0]
    return numerics.sqrt(numerics.sum(torch.stack([s.to(device=first.device, dtype=first.dtype) for s in sums])))


def clip_by_global_norm(grads: Sequence[torch.Tensor], clipnorm: float, norm: Optional[torch.Tensor] = None,
                        shard_groups: ShardGroups = None, orders: Any = None) -> list[torch.Tensor]:
    """Scales all gradients by ``c * min(1/N, 1/c) + (N - N)`` (``N = norm``, default their global norm).

    A non-finite global norm N makes every gradient NaN; ``c = 0`` (which tf.keras legacy accepts) gives zero
    gradients for a finite non-zero N and NaN otherwise, as TensorFlow does.
    """
    if not grads:
        return []
    if norm is None:
        norm = global_norm(grads, shard_groups, orders)
    inverse_limit = 1.0 / clipnorm if clipnorm else math.inf
    scale = clipnorm * torch.minimum(1.0 / norm, torch.tensor(inverse_limit, dtype=norm.dtype,
                                                                device=norm.device)) + (norm - norm)
    return [g * scale.to(device=g.device, dtype=g.dtype) for g in grads]


def map_gradient_values(pairs: Sequence[tuple[Any, T]],
                        fn: Callable[[list[torch.Tensor]], list[torch.Tensor]]) -> list[tuple[Any, T]]:
    """Applies ``fn`` to the gradients (the ``values`` of sparse ones) and rewraps them; ``None`` stays. An
    ordinary step's result is an ordinary step of its plan (``gradient_maps.replaced``)."""
    if getattr(pairs, "plan", None) is not None:  # ordinary: every gradient dense and present; the map keeps the plan
        return replaced(pairs, fn(pairs.grads))
    present = [(i, g if isinstance(g, IndexedSlices) or not is_sparse(g) else as_indexed_slices(g))
               for i, (g, _) in enumerate(pairs) if g is not None]
    if not present:
        return list(pairs)
    new = fn([g.values if isinstance(g, IndexedSlices) else g for _, g in present])
    out = list(pairs)
    for (i, g), values in zip(present, new):
        out[i] = (IndexedSlices(values, g.indices, g.dense_shape) if isinstance(g, IndexedSlices) else values,
                  pairs[i][1])
    return out
