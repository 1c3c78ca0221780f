"""RMSprop, plain and centered, with and without momentum."""

from __future__ import annotations

from typing import Optional

import torch

from .. import numerics
from ..variables import IndexedSlices
from . import roots
from . import rows as sparse_rows
from .adagrad import packet_row
from .blocks import elementwise
from .native import Flag, Integer, Scalar, compiled

__all__ = ["rmsprop", "rmsprop_slices"]

Tensors = list[torch.Tensor]


def _rmsprop_denominator(grads: Tensors, velocity: Tensors, average_gradient: Optional[Tensors], *, rho: float,
                         one_minus_rho: float, epsilon: float, epsilon_inside_root: bool,
                         scaled_squares: Optional[Tensors] = None, scaled: Optional[Tensors] = None) -> Tensors:
    """Updates the averages and returns the denominator of RMSprop's increment (new tensors).

    ``scaled_squares`` / ``scaled`` replace ``(g*g) * (1 - rho)`` / ``g * (1 - rho)`` when given.
    """
    torch._foreach_mul_(velocity, rho)
    if scaled_squares is None:
        scaled_squares = torch._foreach_mul(grads, grads)
        torch._foreach_mul_(scaled_squares, one_minus_rho)
    torch._foreach_add_(velocity, scaled_squares)
    if average_gradient is not None:
        torch._foreach_mul_(average_gradient, rho)
        torch._foreach_add_(average_gradient, torch._foreach_mul(grads, one_minus_rho) if scaled is None else scaled)
        denom = torch._foreach_sub(velocity, torch._foreach_mul(average_gradient, average_gradient))
        if epsilon_inside_root:
            torch._foreach_add_(denom, epsilon)
        roots.sqrt_(denom)
    elif epsilon_inside_root:
        denom = torch._foreach_add(velocity, epsilon)
        roots.sqrt_(denom)
    else:
        denom = roots.sqrt(velocity)
    if not epsilon_inside_root:
        torch._foreach_add_(denom, epsilon)
    return denom


def _rmsprop_increments(grads: Tensors, denom: Tensors, *, lr: float) -> Tensors:
    """``(lr * g) / denom`` (new tensors)."""
    increment = torch._foreach_mul(grads, lr)
    torch._foreach_div_(increment, denom)
    return increment


@compiled("rmsprop", 5, (Scalar("lr"), Scalar("rho"), Scalar("one_minus_rho"), Scalar("momentum_decay"),
                         Scalar("epsilon"), Flag("epsilon_inside_root"), Flag("has_momentum", given="momentum"),
                         Flag("centered", given="average_gradient")))
@elementwise
def rmsprop(params: Tensors, grads: Tensors, velocity: Tensors, momentum: Optional[Tensors],
            average_gradient: Optional[Tensors], *, lr: float, rho: float, one_minus_rho: float,
            momentum_decay: float, epsilon: float, epsilon_inside_root: bool = True) -> None:
    """RMSprop as Keras 3 evaluates it (epsilon inside the square root in every variant).

    ``v = rho * v + (1 - rho) * g*g``; centered: ``a = rho * a + (1 - rho) * g`` and ``d = (v - a*a) + eps``,
    else ``d = v + eps``; ``inc = (lr * g) / sqrt(d)``; with momentum ``mom = mu * mom + inc`` and
    ``w -= mom``, else ``w -= inc``. ``momentum`` / ``average_gradient`` are None when the variant is off.

    ``epsilon_inside_root=False`` is the tf.keras legacy ``RMSprop`` without momentum:
    ``inc = (lr * g) / (sqrt(v - a*a) + eps)`` (centered) or ``(lr * g) / (sqrt(v) + eps)``.
    """
    denom = _rmsprop_denominator(grads, velocity, average_gradient, rho=rho, one_minus_rho=one_minus_rho,
                                 epsilon=epsilon, epsilon_inside_root=epsilon_inside_root)
    increment = _rmsprop_increments(grads, denom, lr=lr)
    if momentum is not None:
        _momentum_step(params, momentum, increment, momentum_decay=momentum_decay)
    else:
        torch._foreach_sub_(params, increment)


def _momentum_step(params: Tensors, momentum: Tensors, increment: Tensors, *, momentum_decay: float) -> None:
    """``mom = mu * mom + inc``; ``w -= mom``."""
    torch._foreach_mul_(momentum, momentum_decay)
    torch._foreach_add_(momentum, increment)
    torch._foreach_sub_(params, momentum)


def rmsprop_slices(param: torch.Tensor, grad: IndexedSlices, velocity: torch.Tensor,
                   momentum: Optional[torch.Tensor], average_gradient: Optional[torch.Tensor], *, lr: float,
                   rho: float, one_minus_rho: float, momentum_decay: float, epsilon: float) -> None:
    """Keras 3 ``RMSprop`` on slices (TensorFlow backend, keras3_sparse.md §4.5): the averages take the per-slice
    ``(1 - rho) * g*g`` (and ``(1 - rho) * g``) summed per row; the increment is per slice,
    ``inc_j = (lr * g_j) / sqrt(d)[i_j]`` with the new averages; with momentum ``mom = mu * mom + Σinc`` and
    ``w -= mom``, else ``w[i_j] -= inc_j`` one slice at a time. The tensors may be a block of rows of the
    variable (``grad`` then holds that block's slices with local indices).
    """
    values = grad.values

    def summed(x: torch.Tensor) -> torch.Tensor:
        return sparse_rows.segment_sum(x, grad.indices, param.shape[0])

    scaled_squares = summed((values * values).mul_(one_minus_rho))
    scaled = summed(values * one_minus_rho) if average_gradient is not None else None
    denom = _rmsprop_denominator([values], [velocity], None if average_gradient is None else [average_gradient],
                                 rho=rho, one_minus_rho=one_minus_rho, epsilon=epsilon, epsilon_inside_root=True,
                                 scaled_squares=[scaled_squares], scaled=None if scaled is None else [scaled])
    increment = _rmsprop_increments([values], [denom[0].index_select(0, grad.indices)], lr=lr)[0]
    if momentum is not None:
        _momentum_step([param], [momentum], [summed(increment)], momentum_decay=momentum_decay)
    else:
        sparse_rows.scatter_add_(param, grad.indices, increment.neg_())


@compiled("apply_rmsprop", 5, (Scalar("lr"), Scalar("one_minus_rho"), Scalar("momentum"), Scalar("epsilon"),
                               Flag("centered", given="mg")))
@elementwise
def apply_rmsprop(params: Tensors, grads: Tensors, ms: Tensors, mom: Tensors, mg: Tensors | None, *, lr: float,
                  one_minus_rho: float, momentum: float, epsilon: float) -> None:
    """TensorFlow's fused ``ApplyRMSProp`` / ``ApplyCenteredRMSProp`` kernels (TF1 ``RMSPropOptimizer``; the
    tf.keras legacy ``RMSprop`` with momentum or centered), epsilon inside the root:

    ``ms <- ms + (g*g - ms) * (1 - rho)``; centered (``mg`` given): ``mg <- mg + (g - mg) * (1 - rho)`` and
    ``den = (ms - mg*mg) + eps``, else ``den = ms + eps``; ``mom <- mom * mu + (g * lr) / sqrt(den)``;
    ``w <- w - mom``.
    """
    delta = torch._foreach_mul(grads, grads)
    torch._foreach_sub_(delta, ms)
    torch._foreach_mul_(delta, one_minus_rho)
    torch._foreach_add_(ms, delta)
    if mg is not None:
        delta = torch._foreach_sub(grads, mg)
        torch._foreach_mul_(delta, one_minus_rho)
        torch._foreach_add_(mg, delta)
        denom = torch._foreach_sub(ms, torch._foreach_mul(mg, mg))
        torch._foreach_add_(denom, epsilon)
    else:
        denom = torch._foreach_add(ms, epsilon)
    roots.sqrt_(denom)
    increment = torch._foreach_mul(grads, lr)
    torch._foreach_div_(increment, denom)
    torch._foreach_mul_(mom, momentum)
    torch._foreach_add_(mom, increment)
    torch._foreach_sub_(params, mom)


@compiled("sparse_apply_rmsprop", 5, (Scalar("lr"), Scalar("rho"), Scalar("one_minus_rho"), Scalar("momentum"),
                                      Scalar("epsilon"), Flag("centered", given="mg"),
                                      Integer("packet_row", packet_row, ("params", True))))
def sparse_apply_rmsprop(params: Tensors, grads: Tensors, ms: Tensors, mom: Tensors, mg: Tensors | None, *,
                         lr: float, rho: float, one_minus_rho: float, momentum: float, epsilon: float) -> None:
    """TensorFlow's ``SparseApplyRMSProp`` / ``SparseApplyCenteredRMSProp`` on the touched rows (other forms
    than the dense kernel), with TensorFlow's ``rsqrt`` (``numerics.rsqrt``, packets from each row's start):

    ``ms <- ms * rho + (g*g) * (1 - rho)``; centered: ``mg <- mg * rho + g * (1 - rho)`` and
    ``den = (ms + eps) - mg*mg``, else ``den = ms + eps``; ``mom <- mom * mu + (rsqrt(den) * lr) * g``;
    ``w <- w - mom``.
    """
    torch._foreach_mul_(ms, rho)
    scaled = torch._foreach_mul(grads, grads)
    torch._foreach_mul_(scaled, one_minus_rho)
    torch._foreach_add_(ms, scaled)
    denom = torch._foreach_add(ms, epsilon)
    if mg is not None:
        torch._foreach_mul_(mg, rho)
        torch._foreach_add_(mg, torch._foreach_mul(grads, one_minus_rho))
        torch._foreach_sub_(denom, torch._foreach_mul(mg, mg))
    denom = numerics.rsqrt(denom, rows=True)  # TensorFlow's, packets from each gathered row's start
    torch._foreach_mul_(denom, lr)
    torch._foreach_mul_(denom, grads)
    torch._foreach_mul_(mom, momentum)
    torch._foreach_add_(mom, denom)
    torch._foreach_sub_(params, mom)


__all__ += ["apply_rmsprop", "sparse_apply_rmsprop"]


def sparse_rmsprop(params: Tensors, rows: Tensors, grads: Tensors, rms: Tensors, mg: Optional[Tensors], *,
                   lr: float, rho: float, one_minus_rho: float, epsilon: float) -> None:
    """tf.keras legacy ``RMSprop`` without momentum on a sparse gradient (rows unique, values summed): the
    averages decay on ALL rows, the variable moves on the touched rows only; epsilon outside the root.

    ``rms <- rms * rho`` (all rows); ``rms[u] += (g*g) * (1 - rho)``; centered: ``mg <- mg * rho`` (all rows),
    ``mg[u] += g * (1 - rho)`` and ``d = rms[u] - mg[u]^2``, else ``d = rms[u]``;
    ``w[u] <- w[u] + ((-lr) * g) / (sqrt(d) + eps)``.
    """
    torch._foreach_mul_(rms, rho)
    for rms_i, r, g in zip(rms, rows, grads):
        rms_i.index_add_(0, r, (g * g).mul_(one_minus_rho))
    denom = [rms_i.index_select(0, r) for rms_i, r in zip(rms, rows)]
    if mg is not None:
        torch._foreach_mul_(mg, rho)
        for mg_i, r, g in zip(mg, rows, grads):
            mg_i.index_add_(0, r, g * one_minus_rho)
        mg_rows = [mg_i.index_select(0, r) for mg_i, r in zip(mg, rows)]
        torch._foreach_sub_(denom, torch._foreach_mul(mg_rows, mg_rows))
    roots.sqrt_(denom)
    torch._foreach_add_(denom, epsilon)
    step = torch._foreach_mul(grads, -lr)
    torch._foreach_div_(step, denom)
    for w, r, s in zip(params, rows, step):
        w.index_add_(0, r, s)


__all__ += ["sparse_rmsprop"]
