"""Decoupled weight decay (Keras 3's ``weight_decay`` argument)."""

from __future__ import annotations

import torch

from ..engine.blocks import elementwise

__all__ = ["decoupled_weight_decay"]

Tensors = list[torch.Tensor]


@elementwise(scale=2)
def decoupled_weight_decay(params: Tensors, *, weight_decay: float, lr: float) -> None:
    """``w <- w - ((w * weight_decay) * lr)``, before the optimizer's own update, with the same learning rate."""
    decay = torch._foreach_mul(params, weight_decay)
    torch._foreach_mul_(decay, lr)
    torch._foreach_sub_(params, decay)
