"""Adafactor (factored second moments)."""

from __future__ import annotations

import torch

from . import roots

__all__ = ["adafactor"]

Tensors = list[torch.Tensor]


def _rms(x: torch.Tensor) -> torch.Tensor:
    # Reductions run over the row-major values (a no-op for a contiguous tensor): the same values stored as a
    # transposed view give the same bits.
    return torch.mean((x * x).contiguous()).sqrt()


def adafactor(params: Tensors, grads: Tensors, r: Tensors, c: Tensors, v: Tensors, *, rho: float,
              epsilon_1: float, epsilon_2: float, beta_2: float, one_minus_beta_2: float,
              clip_threshold: float) -> None:
    """Adafactor as Keras 3 evaluates it (``rho = min(lr, 1/sqrt(t))``, ``beta_2 = 1 - t^beta_2_decay``).

    ``alpha = max(eps2, RMS(w)) * rho``; ``G = g*g + eps1``. Rank >= 2 (factored over the last two axes):
    ``r = b2 * r + (1 - b2) * mean(G, -1)``; ``c = b2 * c + (1 - b2) * mean(G, -2)``;
    ``v = (r / mean(r, -1))[..., None] * c[..., None, :]``. Rank < 2: ``v = b2 * v + (1 - b2) * G``
    (``r``/``c`` are unused placeholders). Then ``u = g / sqrt(v)``; ``u /= max(1, RMS(u) / clip_threshold)``;
    ``w -= alpha * u``. ``RMS(x) = sqrt(mean(x*x))`` over the whole tensor.
    """
    for param, grad, row, col, velocity in zip(params, grads, r, c, v):
        alpha = _rms(param).clamp_min(epsilon_2) * rho
        regulated = (grad * grad + epsilon_1).contiguous()  # layout-independent means (see _rms)
        if param.dim() >= 2:
            row.mul_(beta_2).add_(torch.mean(regulated, dim=-1) * one_minus_beta_2)
            col.mul_(beta_2).add_(torch.mean(regulated, dim=-2) * one_minus_beta_2)
            velocity.copy_((row / torch.mean(row, dim=-1, keepdim=True)).unsqueeze(-1) * col.unsqueeze(-2))
        else:
            velocity.mul_(beta_2).add_(regulated * one_minus_beta_2)
        update = grad / roots.sqrt([velocity])[0]
        update = update / torch.clamp_min(_rms(update) / clip_threshold, 1.0)
        param.sub_(update * alpha)
