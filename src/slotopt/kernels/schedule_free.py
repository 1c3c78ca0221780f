"""Schedule-free AdamW (Defazio et al., 2024) as Keras 3.15's ``keras.optimizers.ScheduleFreeAdamW`` evaluates it.

The model variable holds ``y`` (the point where gradients are taken) during training; the optimizer keeps ``z``
(its ``momentum`` slot, where the gradient steps land) and Adam's second moment ``v`` (its ``velocity`` slot).
The averaged sequence ``x`` is not stored: it is recovered from ``y`` and ``z`` whenever it is needed.
"""

from __future__ import annotations

import torch

from .. import numerics
from . import roots
from .adam import second_moment
from .blocks import elementwise

__all__ = ["schedule_free_adamw", "interpolate", "extrapolate"]

Tensors = list[torch.Tensor]


@elementwise
def schedule_free_adamw(params: Tensors, grads: Tensors, z: Tensors, v: Tensors, *, lr: float, beta_1: float,
                        one_minus_beta_1: float, one_minus_beta_2: float, bias_correction_2: float,
                        epsilon: float, weight: float, one_minus_weight: float) -> None:
    """One step, every constant already in the variable's dtype (``1 - b`` computed in it: F-form).

    ``v += (g*g - v) * (1 - b2)``; ``z -= (lr * g) / (sqrt(v / (1 - b2^t)) + eps)``;
    ``x = (y - (1 - b1) * z) / b1``; ``x = (1 - 1/t) * x + (1/t) * z``; ``y = (1 - b1) * z + b1 * x``.

    ``x`` is recovered with the *updated* ``z``, as Keras 3.15 on TensorFlow computes it (its ``momentum.value``
    snapshot aliases the variable that ``assign_sub`` then updates; the recorded reference shows it bit for
    bit), although its comments describe ``z_old``.
    """
    second_moment(grads, v, one_minus_beta_2=one_minus_beta_2)
    denom = numerics.div_scalar(v, bias_correction_2)  # (CUDA's division by a number is not correctly rounded)
    roots.sqrt_(denom)
    torch._foreach_add_(denom, epsilon)
    step = torch._foreach_mul(grads, lr)
    torch._foreach_div_(step, denom)
    torch._foreach_sub_(z, step)
    x = extrapolate(params, z, beta_1=beta_1, one_minus_beta_1=one_minus_beta_1)
    torch._foreach_mul_(x, one_minus_weight)
    torch._foreach_add_(x, torch._foreach_mul(z, weight))
    torch._foreach_copy_(params, interpolate(x, z, beta_1=beta_1, one_minus_beta_1=one_minus_beta_1))


def interpolate(x: Tensors, z: Tensors, *, beta_1: float, one_minus_beta_1: float) -> Tensors:
    """``y = (1 - b1) * z + b1 * x`` (new tensors): the training point from the average and ``z``."""
    y = torch._foreach_mul(z, one_minus_beta_1)
    torch._foreach_add_(y, torch._foreach_mul(x, beta_1))
    return y


def extrapolate(y: Tensors, z: Tensors, *, beta_1: float, one_minus_beta_1: float) -> Tensors:
    """``x = (y - (1 - b1) * z) / b1`` (new tensors): the average recovered from the training point and ``z``."""
    x = torch._foreach_sub(y, torch._foreach_mul(z, one_minus_beta_1))
    numerics.div_scalar_(x, beta_1)
    return x
