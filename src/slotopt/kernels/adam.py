"""Adam and AMSGrad."""

from __future__ import annotations

from typing import Optional

import torch

__all__ = ["adam"]

Tensors = list[torch.Tensor]


def adam(params: Tensors, grads: Tensors, m: Tensors, v: Tensors, v_hat: Optional[Tensors], *, alpha: float,
         one_minus_beta_1: float, one_minus_beta_2: float, epsilon: float) -> None:
    """Adam as Keras 3 and the tf.keras ``ApplyAdam`` kernel evaluate it.

    ``m += (g - m) * (1 - b1)``; ``v += (g*g - v) * (1 - b2)``; with AMSGrad ``v_hat = max(v_hat, v)``;
    ``w -= (m * alpha) / (sqrt(v or v_hat) + eps)`` where ``alpha = lr * sqrt(1 - b2^t) / (1 - b1^t)``.
    The caller rounds ``1 - b`` in its generation's form (D-form for Keras 3, F-form for legacy).
    """
    delta = torch._foreach_sub(grads, m)
    torch._foreach_mul_(delta, one_minus_beta_1)
    torch._foreach_add_(m, delta)
    delta = torch._foreach_mul(grads, grads)
    torch._foreach_sub_(delta, v)
    torch._foreach_mul_(delta, one_minus_beta_2)
    torch._foreach_add_(v, delta)
    if v_hat is not None:
        torch._foreach_maximum_(v_hat, v)
        v = v_hat
    denom = torch._foreach_sqrt(v)
    torch._foreach_add_(denom, epsilon)
    step = torch._foreach_mul(m, alpha)
    torch._foreach_div_(step, denom)
    torch._foreach_sub_(params, step)
