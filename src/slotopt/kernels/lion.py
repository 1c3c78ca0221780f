"""Lion."""

from __future__ import annotations

from typing import Optional

import torch

from .blocks import elementwise
from .native import Scalar, compiled

__all__ = ["lion"]

Tensors = list[torch.Tensor]


@compiled("lion", 3, (Scalar("lr"), Scalar("beta_1"), Scalar("one_minus_beta_1"), Scalar("beta_2"),
                      Scalar("one_minus_beta_2")))
@elementwise
def lion(params: Tensors, grads: Tensors, momenta: Tensors, scaled_1: Optional[Tensors] = None,
         scaled_2: Optional[Tensors] = None, *, lr: float, beta_1: float, one_minus_beta_1: float, beta_2: float,
         one_minus_beta_2: float) -> None:
    """Lion: ``w -= lr * sign(m * b1 + g * (1 - b1))``; then ``m = m * b2 + g * (1 - b2)`` (``sign(0) = 0``).

    ``scaled_1`` / ``scaled_2`` (optional) replace ``g * (1 - b1)`` / ``g * (1 - b2)`` (Keras 3 on slices:
    products per slice, then the repeats summed).
    """
    direction = torch._foreach_mul(momenta, beta_1)
    torch._foreach_add_(direction, torch._foreach_mul(grads, one_minus_beta_1) if scaled_1 is None else scaled_1)
    if direction and direction[0].is_complex():
        for d in direction:  # TensorFlow's complex sign: z / |z| (0 for 0)
            torch.sgn(d, out=d)
    else:
        torch._foreach_sign_(direction)
    torch._foreach_mul_(direction, lr)
    torch._foreach_sub_(params, direction)
    torch._foreach_mul_(momenta, beta_2)
    torch._foreach_add_(momenta, torch._foreach_mul(grads, one_minus_beta_2) if scaled_2 is None else scaled_2)
