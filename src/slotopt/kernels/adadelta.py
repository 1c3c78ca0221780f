"""Adadelta."""

from __future__ import annotations

import torch

from ..engine.blocks import elementwise
from . import roots
from .native import compiled

__all__ = ["adadelta"]

Tensors = list[torch.Tensor]


@compiled("adadelta", 4, lambda p, g, eg, ed, *, lr, rho, one_minus_rho, epsilon: (lr, rho, one_minus_rho, epsilon))
@elementwise
def adadelta(params: Tensors, grads: Tensors, accumulated_grad: Tensors, accumulated_delta: Tensors, *,
             lr: float, rho: float, one_minus_rho: float, epsilon: float) -> None:
    """Adadelta as Keras 3 evaluates it.

    ``Eg = rho * Eg + (1 - rho) * g*g``; ``delta = -((sqrt(Ed + eps) * g) / sqrt(Eg + eps))`` (new Eg, old Ed);
    ``Ed = rho * Ed + (1 - rho) * delta*delta``; ``w += lr * delta``.
    """
    torch._foreach_mul_(accumulated_grad, rho)
    scaled = torch._foreach_mul(grads, grads)
    torch._foreach_mul_(scaled, one_minus_rho)
    torch._foreach_add_(accumulated_grad, scaled)
    delta = torch._foreach_add(accumulated_delta, epsilon)
    roots.sqrt_(delta)
    torch._foreach_mul_(delta, grads)
    denom = torch._foreach_add(accumulated_grad, epsilon)
    roots.sqrt_(denom)
    torch._foreach_div_(delta, denom)
    torch._foreach_neg_(delta)
    torch._foreach_mul_(accumulated_delta, rho)
    scaled = torch._foreach_mul(delta, delta)
    torch._foreach_mul_(scaled, one_minus_rho)
    torch._foreach_add_(accumulated_delta, scaled)
    torch._foreach_mul_(delta, lr)
    torch._foreach_add_(params, delta)


@compiled("apply_adadelta", 4, lambda p, g, a, u, *, lr, rho, one_minus_rho, epsilon: (
    lr, rho, one_minus_rho, epsilon))
@elementwise
def apply_adadelta(params: Tensors, grads: Tensors, accum: Tensors, accum_update: Tensors, *, lr: float,
                   rho: float, one_minus_rho: float, epsilon: float) -> None:
    """TensorFlow's ``ApplyAdadelta`` / ``SparseApplyAdadelta`` kernel (TF1 ``AdadeltaOptimizer`` and the
    tf.keras legacy ``Adadelta``), with ``rsqrt(x) = 1 / sqrt(x)``:

    ``accum <- accum * rho + (g*g) * (1 - rho)``; ``upd = (sqrt(accum_update + eps) * rsqrt(accum + eps)) * g``
    (new accum, old accum_update); ``w <- w - upd * lr``;
    ``accum_update <- accum_update * rho + (upd*upd) * (1 - rho)``.
    """
    torch._foreach_mul_(accum, rho)
    scaled = torch._foreach_mul(grads, grads)
    torch._foreach_mul_(scaled, one_minus_rho)
    torch._foreach_add_(accum, scaled)
    update = torch._foreach_add(accum_update, epsilon)
    roots.sqrt_(update)
    inverse_root = roots.rsqrt(torch._foreach_add(accum, epsilon))
    torch._foreach_mul_(update, inverse_root)
    torch._foreach_mul_(update, grads)
    torch._foreach_sub_(params, torch._foreach_mul(update, lr))
    torch._foreach_mul_(accum_update, rho)
    scaled = torch._foreach_mul(update, update)
    torch._foreach_mul_(scaled, one_minus_rho)
    torch._foreach_add_(accum_update, scaled)


__all__ += ["apply_adadelta"]
