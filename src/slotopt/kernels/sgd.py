"""Gradient descent with (Keras) momentum and Nesterov momentum."""

from __future__ import annotations

import torch

__all__ = ["sgd", "keras_momentum"]

Tensors = list[torch.Tensor]


def sgd(params: Tensors, grads: Tensors, *, lr: float) -> None:
    """``w <- w - g * lr``."""
    torch._foreach_sub_(params, torch._foreach_mul(grads, lr))


def keras_momentum(params: Tensors, grads: Tensors, momenta: Tensors, *, lr: float, momentum: float,
                   nesterov: bool) -> None:
    """Keras momentum (Keras 3 and tf.keras legacy):

    ``m <- m * mu - g * lr``; then ``w <- w + (m * mu - g * lr)`` (Nesterov, with the new m) or ``w <- w + m``.
    """
    step = torch._foreach_mul(grads, lr)
    torch._foreach_mul_(momenta, momentum)
    torch._foreach_sub_(momenta, step)
    if nesterov:
        lookahead = torch._foreach_mul(momenta, momentum)
        torch._foreach_sub_(lookahead, step)
        torch._foreach_add_(params, lookahead)
    else:
        torch._foreach_add_(params, momenta)
