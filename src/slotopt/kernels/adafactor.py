"""Adafactor (factored second moments)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

import torch

from .. import numerics
from . import roots
from . import rows as sparse_rows
from .shards import ShardLayout

__all__ = ["adafactor"]

Tensors = list[torch.Tensor]


def _rms(x: torch.Tensor, count: Optional[int] = None, layout: Optional[ShardLayout] = None) -> torch.Tensor:
    """``sqrt(mean(x*x))``; with ``count``, the sum of squares over ``count`` elements (slices of a tensor); with
    ``layout``, ``x`` is a local shard and the sum of squares is summed over the shards.

    Reductions run over the row-major values (a no-op for a contiguous tensor): the same values stored as a
    transposed view give the same bits."""
    square = (x * x).contiguous()
    if layout is not None:
        return numerics.sqrt(numerics.div_scalar([layout.sum(numerics.sum(square))], layout.numel)[0])
    return numerics.sqrt(numerics.mean(square) if count is None else numerics.div_scalar([numerics.sum(square)], count)[0])


def _mean(x: torch.Tensor, dim: int, axis: int, layout: Optional[ShardLayout], keepdim: bool = False) -> torch.Tensor:
    """``mean(x, dim)``, where ``x``'s ``dim`` is the parameter's ``axis``: over a split axis (FSDP2) the local
    sums are summed over the shards and divided by the whole axis's length."""
    if layout is None or not layout.is_split(axis):
        return numerics.mean(x, dim=dim, keepdim=keepdim)
    return numerics.div_scalar([layout.sum(torch.sum(x, dim=dim, keepdim=keepdim), [axis])], layout.global_shape[axis])[0]


def adafactor(params: Tensors, grads: Tensors, r: Tensors, c: Tensors, v: Tensors,
              indices: Optional[Sequence[Optional[torch.Tensor]]] = None, *, rho: float, epsilon_1: float,
              epsilon_2: float, beta_2: float, one_minus_beta_2: float, clip_threshold: float,
              layouts: Optional[Sequence[Optional[ShardLayout]]] = None) -> None:
    """Adafactor as Keras 3 evaluates it (``rho = min(lr, 1/sqrt(t))``, ``beta_2 = 1 - t^beta_2_decay``).

    ``alpha = max(eps2, RMS(w)) * rho``; ``G = g*g + eps1``. Rank >= 2 (factored over the last two axes):
    ``r = b2 * r + (1 - b2) * mean(G, -1)``; ``c = b2 * c + (1 - b2) * mean(G, -2)``;
    ``v = (r / mean(r, -1))[..., None] * c[..., None, :]``. Rank < 2: ``v = b2 * v + (1 - b2) * G``
    (``r``/``c`` are unused placeholders). Then ``u = g / sqrt(v)``; ``u /= max(1, RMS(u) / clip_threshold)``;
    ``w -= alpha * u``. ``RMS(x) = sqrt(mean(x*x))`` over the whole tensor.

    ``indices[i]`` (optional) marks ``grads[i]`` as slices (Keras 3 on its TensorFlow backend, keras3_sparse.md
    §4.10): ``G`` is the per-slice ``g*g`` summed per row, plus ``eps1``; ``u`` is per slice,
    ``u_j = g_j / sqrt(v)[i_j]``; ``RMS(u)`` sums the slices' ``u_j*u_j`` (repeats counted apart) over the dense
    element count; ``w[i_j] -= alpha * u_j`` one slice at a time.

    ``layouts[i]`` (FSDP2, dense gradients) marks ``params[i]`` as a local shard: the RMS and the means over a
    split axis are summed over the shards; ``r`` and ``c`` keep the split axes they have and hold the whole of
    the others (the same values on every process).
    """
    for i, (param, grad, row, col, velocity) in enumerate(zip(params, grads, r, c, v)):
        rows = None if indices is None else indices[i]
        layout = None if layouts is None else layouts[i]
        alpha = _rms(param, layout=layout).clamp_min(epsilon_2) * rho
        if rows is None:
            regulated = (grad * grad + epsilon_1).contiguous()  # layout-independent means (see _rms)
        else:
            regulated = sparse_rows.segment_sum(grad * grad, rows, param.shape[0]) + epsilon_1
        if param.dim() >= 2:
            row.mul_(beta_2).add_(_mean(regulated, -1, -1, layout) * one_minus_beta_2)
            col.mul_(beta_2).add_(_mean(regulated, -2, -2, layout) * one_minus_beta_2)
            # r's last axis is the parameter's second-to-last
            row_mean = _mean(row, -1, -2, layout, keepdim=True)
            velocity.copy_((row / row_mean).unsqueeze(-1) * col.unsqueeze(-2))
        else:
            velocity.mul_(beta_2).add_(regulated * one_minus_beta_2)
        root = roots.sqrt([velocity])[0]
        update = grad / (root if rows is None else root.index_select(0, rows))
        count = None if rows is None else param.numel()  # slices: their squares over the dense element count
        update = update / torch.clamp_min(numerics.div_scalar([_rms(update, count, layout)], clip_threshold)[0], 1.0)
        if rows is None:
            param.sub_(update * alpha)
        else:
            sparse_rows.scatter_add_(param, rows, (update * alpha).neg_())
