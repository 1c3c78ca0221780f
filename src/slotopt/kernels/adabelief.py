"""AdaBelief (Zhuang et al., NeurIPS 2020): Adam whose second moment is the belief in the gradient, ``(g - m)^2``.

No reference library ships it (Keras and TensorFlow do not have it): the order of evaluation is the paper's
Algorithm 2, written once here and shared by the three generations' faces. There is no compiled or Triton form:
``native.compiled`` is not applied, so every path runs this foreach kernel (the same bits everywhere).
"""

from __future__ import annotations

import torch

from . import roots
from .blocks import elementwise

__all__ = ["adabelief"]

Tensors = list[torch.Tensor]


@elementwise
def adabelief(params: Tensors, grads: Tensors, m: Tensors, s: Tensors, *, lr: float, beta_1: float,
              one_minus_beta_1: float, beta_2: float, one_minus_beta_2: float, epsilon: float,
              bias_correction_1: float, bias_correction_2: float) -> None:
    """One AdaBelief step, in the paper's order (no fused multiply-add):

    ``m = b1 * m + (1 - b1) * g``; ``s = (b2 * s + (1 - b2) * (g - m)^2) + eps``;
    ``w -= lr * ((m / bc1) / (sqrt(s / bc2) + eps))`` with ``bc = 1 - b^t`` (rounded by the caller).
    """
    torch._foreach_mul_(m, beta_1)
    torch._foreach_add_(m, torch._foreach_mul(grads, one_minus_beta_1))
    belief = torch._foreach_sub(grads, m)
    torch._foreach_mul_(belief, belief)
    torch._foreach_mul_(belief, one_minus_beta_2)
    torch._foreach_mul_(s, beta_2)
    torch._foreach_add_(s, belief)
    torch._foreach_add_(s, epsilon)
    denom = roots.sqrt(torch._foreach_div(s, bias_correction_2))  # correctly rounded, as the reference's
    torch._foreach_add_(denom, epsilon)
    step = torch._foreach_div(m, bias_correction_1)
    torch._foreach_div_(step, denom)
    torch._foreach_mul_(step, lr)
    torch._foreach_sub_(params, step)
