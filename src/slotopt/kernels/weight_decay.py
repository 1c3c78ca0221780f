"""Decoupled weight decay (Keras 3's ``weight_decay`` argument)."""

from __future__ import annotations

import torch

from .blocks import elementwise
from .native import Scalar, compiled

__all__ = ["decoupled_weight_decay"]

Tensors = list[torch.Tensor]


@compiled("decoupled_weight_decay", 1, (Scalar("weight_decay"), Scalar("lr")), read_only=())
@elementwise(scale=2)
def decoupled_weight_decay(params: Tensors, *, weight_decay: float, lr: float) -> None:
    """``w <- w - ((w * weight_decay) * lr)``, before the optimizer's own update, with the same learning rate."""
    decay = torch._foreach_mul(params, weight_decay)
    torch._foreach_mul_(decay, lr)
    torch._foreach_sub_(params, decay)
