"""RMSprop, plain and centered, with and without momentum."""

from __future__ import annotations

from typing import Optional

import torch

from ..engine.blocks import elementwise
from . import roots
from .native import compiled

__all__ = ["rmsprop"]

Tensors = list[torch.Tensor]


@compiled("rmsprop", 5, lambda p, g, v, mom, avg, *, lr, rho, one_minus_rho, momentum_decay, epsilon,
          epsilon_inside_root=True: (lr, rho, one_minus_rho, momentum_decay, epsilon, epsilon_inside_root,
                                     mom is not None, avg is not None))
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
    torch._foreach_mul_(velocity, rho)
    scaled = torch._foreach_mul(grads, grads)
    torch._foreach_mul_(scaled, one_minus_rho)
    torch._foreach_add_(velocity, scaled)
    if average_gradient is not None:
        torch._foreach_mul_(average_gradient, rho)
        scaled = torch._foreach_mul(grads, one_minus_rho)
        torch._foreach_add_(average_gradient, scaled)
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
    increment = torch._foreach_mul(grads, lr)
    torch._foreach_div_(increment, denom)
    if momentum is not None:
        torch._foreach_mul_(momentum, momentum_decay)
        torch._foreach_add_(momentum, increment)
        torch._foreach_sub_(params, momentum)
    else:
        torch._foreach_sub_(params, increment)


@compiled("apply_rmsprop", 5, lambda p, g, ms, mom, mg, *, lr, one_minus_rho, momentum, epsilon: (
    lr, one_minus_rho, momentum, epsilon, mg is not None))
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


@compiled("sparse_apply_rmsprop", 5, lambda p, g, ms, mom, mg, *, lr, rho, one_minus_rho, momentum, epsilon: (
    lr, rho, one_minus_rho, momentum, epsilon, mg is not None))
@elementwise
def sparse_apply_rmsprop(params: Tensors, grads: Tensors, ms: Tensors, mom: Tensors, mg: Tensors | None, *,
                         lr: float, rho: float, one_minus_rho: float, momentum: float, epsilon: float) -> None:
    """TensorFlow's ``SparseApplyRMSProp`` / ``SparseApplyCenteredRMSProp`` on the touched rows (other forms
    than the dense kernel), with ``rsqrt(x) = 1 / sqrt(x)``:

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
    denom = roots.rsqrt(denom)
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
