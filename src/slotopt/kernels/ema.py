"""Exponential moving average of the variables (Keras 3's ``use_ema``)."""

from __future__ import annotations

import torch

from .blocks import elementwise
from .native import Scalar, compiled

__all__ = ["moving_average"]

Tensors = list[torch.Tensor]


@compiled("moving_average", 2, (Scalar("momentum"), Scalar("one_minus_momentum")), read_only=(0,))
@elementwise(scale=2)
def moving_average(params: Tensors, averages: Tensors, *, momentum: float, one_minus_momentum: float) -> None:
    """``avg <- avg * momentum + w * (1 - momentum)`` (after the update; momentum 0 on the first step)."""
    weighted = torch._foreach_mul(params, one_minus_momentum)
    torch._foreach_mul_(averages, momentum)
    torch._foreach_add_(averages, weighted)
