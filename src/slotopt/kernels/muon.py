"""Muon: momentum orthogonalised by a quintic Newton–Schulz iteration (Keras 3.15's ``keras.optimizers.Muon``).

Only the matrix path lives here; the variables Muon sends to its AdamW path run the Adam kernel
(``kernels.adam.adam``). Newton–Schulz is a chain of matrix products: its summation order is the BLAS library's,
so results match Keras/TensorFlow to about 1e-6 relative in float32, not bit for bit. On a GPU the products are
taken in full float32 (never TF32, whatever ``torch.set_float32_matmul_precision`` says: the CPU path has no TF32),
and the Frobenius norm and the products sum in cuBLAS's and torch's CUDA order, not the CPU's: a CUDA step is
within rounding of the CPU's, not bit-identical (see docs/performance.md, GPU).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

import torch

from .shards import ShardLayout

__all__ = ["muon", "newton_schulz5"]

Tensors = list[torch.Tensor]


def newton_schulz5(x: torch.Tensor, *, steps: int, a: float, b: float, c: float, norm_epsilon: float) -> torch.Tensor:
    """An approximation of ``U V^T`` (from ``x = U S V^T``) by ``steps`` quintic Newton–Schulz iterations.

    Tall matrices are transposed first (so ``x @ x^T`` is the small Gram matrix), then
    ``x = x / (||x||_F + norm_epsilon)`` and, ``steps`` times, ``A = x @ x^T``; ``B = b*A + (c*A) @ A``;
    ``x = a*x + B @ x`` (Keras's association: ``c * A @ A`` is ``(c * A) @ A``).
    """
    if x.is_cuda and torch.get_float32_matmul_precision() != "highest":
        previous = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision("highest")  # full float32 products, as on the CPU
        try:
            return newton_schulz5(x, steps=steps, a=a, b=b, c=c, norm_epsilon=norm_epsilon)
        finally:
            torch.set_float32_matmul_precision(previous)
    tall = x.shape[-2] > x.shape[-1]
    if tall:
        x = x.transpose(-2, -1)
    norm = torch.linalg.vector_norm(x, dim=(-2, -1), keepdim=True)
    x = x / (norm + norm_epsilon)
    for _ in range(steps):
        gram = x @ x.transpose(-2, -1)
        poly = gram * b + (gram * c) @ gram
        x = x * a + poly @ x
    return x.transpose(-2, -1) if tall else x


def muon(params: Tensors, grads: Tensors, m: Tensors, *, lr: float, momentum: float, momentum_minus_one: float,
         nesterov: bool, steps: int, a: float, b: float, c: float, norm_epsilon: float,
         rms_scales: list[float], rms_rate: float | None,
         layouts: Optional[Sequence[Optional[ShardLayout]]] = None) -> None:
    """The Muon step on 2-D variables, in Keras's evaluation order.

    ``m += g + m * (momentum - 1)``; ``u = g + momentum * m`` (Nesterov) or ``m``;
    ``o = newton_schulz5(u)``; ``w -= ((lr * o) * rms_scale) * rms_rate`` where ``rms_scale = sqrt(max(rows,
    cols))`` (one per variable, rounded by the caller), or ``w -= lr * o`` when ``rms_rate`` is None.
    Not element-wise (whole-matrix products), so never run over packed or cut tensors. ``layouts[i]`` (FSDP2)
    marks ``params[i]`` as a local shard: ``u`` is gathered whole, every process orthogonalises the same matrix
    and keeps its own part of ``o``.
    """
    step = torch._foreach_mul(m, momentum_minus_one)
    torch._foreach_add_(step, grads)  # g + m*(momentum-1): addition commutes exactly
    torch._foreach_add_(m, step)
    if nesterov:
        directions = torch._foreach_mul(m, momentum)
        torch._foreach_add_(directions, grads)
    else:
        directions = list(m)
    for i, (param, direction, scale) in enumerate(zip(params, directions, rms_scales)):
        layout = None if layouts is None else layouts[i]
        if layout is not None:
            direction = layout.gather(direction)
        update = newton_schulz5(direction, steps=steps, a=a, b=b, c=c, norm_epsilon=norm_epsilon).mul_(lr)
        if rms_rate is not None:
            update.mul_(scale).mul_(rms_rate)
        param.sub_(update if layout is None else layout.local_part(update))
