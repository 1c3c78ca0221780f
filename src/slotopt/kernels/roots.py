"""Correctly rounded square roots for the kernels.

TensorFlow's CPU kernels take IEEE square roots (``sqrtpd``: correctly rounded). ``torch.sqrt`` on CPU is not
correctly rounded on every build: with torch 2.13 (AVX512 build) about 0.7% of float64 and float32 inputs come
out one ULP off, which breaks bit-exact parity (``x ** 0.5`` and ``torch.pow(x, 0.5)`` take the same path).
NumPy's ``sqrt`` is the hardware instruction, so CPU tensors go through it, in place on shared memory; other
devices (CUDA's ``sqrt`` is IEEE-correct) use ``torch._foreach_sqrt``.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["sqrt", "sqrt_", "rsqrt"]

Tensors = list[torch.Tensor]

_NUMPY_DTYPES = (torch.float64, torch.float32, torch.float16)


def _sqrt_cpu_(t: torch.Tensor) -> None:
    if t.dtype in _NUMPY_DTYPES:
        array = t.detach().numpy()
        np.sqrt(array, out=array)
    else:  # bfloat16: a float32 root rounded once more is correctly rounded (24 >= 2 * 8 + 2 bits)
        wide = t.detach().float()
        array = wide.numpy()
        np.sqrt(array, out=array)
        t.copy_(wide)


def sqrt_(tensors: Tensors) -> None:
    """``x <- sqrt(x)`` in place, correctly rounded."""
    other = [t for t in tensors if t.device.type != "cpu"]
    if other:
        torch._foreach_sqrt_(other)
    for t in tensors:
        if t.device.type == "cpu":
            _sqrt_cpu_(t)


def sqrt(tensors: Tensors) -> Tensors:
    """``sqrt(x)`` as new tensors, correctly rounded."""
    roots = [t.detach().clone() for t in tensors]
    sqrt_(roots)
    return roots


def rsqrt(tensors: Tensors) -> Tensors:
    """TensorFlow's CPU ``rsqrt`` for float64: ``1 / sqrt(x)`` with two roundings."""
    roots = sqrt(tensors)
    torch._foreach_reciprocal_(roots)
    return roots
