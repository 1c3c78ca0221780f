"""Correctly rounded square roots for the kernels, and a ``pow`` that does not depend on memory layout.

TensorFlow's CPU kernels take IEEE square roots (``sqrtpd``: correctly rounded). ``torch.sqrt`` on CPU is not
correctly rounded on every build: with torch 2.13 (AVX512 build) about 0.7% of float64 and float32 inputs come
out one ULP off, which breaks bit-exact parity (``x ** 0.5`` and ``torch.pow(x, 0.5)`` take the same path).
NumPy's ``sqrt`` is the hardware instruction, so CPU tensors go through it, in place on shared memory; other
devices (CUDA's ``sqrt`` is IEEE-correct) use ``torch._foreach_sqrt``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch._C._nn import flatten_dense_tensors, unflatten_dense_tensors

__all__ = ["sqrt", "sqrt_", "rsqrt", "pow"]

Tensors = list[torch.Tensor]

# complex64/complex128: NumPy's complex sqrt is the C library's principal ``csqrt``, as TensorFlow's ``std::sqrt``.
_NUMPY_DTYPES = (torch.float64, torch.float32, torch.float16, torch.complex64, torch.complex128)
_MANY = 8  # from this many tensors on, pack them into one buffer for a single NumPy call


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
    if not tensors:
        return
    if tensors[0].device.type != "cpu":
        torch._foreach_sqrt_(tensors)
    elif len(tensors) < _MANY:
        for t in tensors:
            _sqrt_cpu_(t)
    else:
        torch._foreach_copy_(tensors, sqrt(tensors))


def sqrt(tensors: Tensors) -> Tensors:
    """``sqrt(x)`` as new tensors, correctly rounded.

    Many small CPU tensors are packed into one buffer first, so NumPy is called once, not once per tensor.
    """
    if not tensors:
        return []
    if tensors[0].device.type != "cpu":
        return list(torch._foreach_sqrt(tensors))
    if len(tensors) < _MANY:
        roots = [t.detach().clone() for t in tensors]
        for root in roots:
            _sqrt_cpu_(root)
        return roots
    flat = flatten_dense_tensors([t.detach() for t in tensors])
    _sqrt_cpu_(flat)
    return list(unflatten_dense_tensors(flat, tensors))


def rsqrt(tensors: Tensors) -> Tensors:
    """TensorFlow's CPU ``rsqrt`` for float64: ``1 / sqrt(x)`` with two roundings."""
    roots = sqrt(tensors)
    torch._foreach_reciprocal_(roots)
    return roots


def pow(tensors: Tensors, exponent: float) -> Tensors:
    """``x ** exponent`` as new tensors, the same bits wherever an element sits in memory.

    On CPU, torch evaluates a contiguous run with a vectorized ``pow`` and the remainder with the C library's
    scalar ``pow``; the two differ by one ULP for a few percent of inputs, so a result would depend on blocking and
    packing. Reading the input through a strided view makes torch take the scalar loop for every element (for
    float32 the C library's ``powf`` is correctly rounded). Tensors shorter than one vector, such as those of the
    recorded reference cases, always took that loop.
    """
    if not tensors:
        return []
    if tensors[0].device.type != "cpu":
        return list(torch._foreach_pow(tensors, exponent))
    results = []
    for t in tensors:
        spread = torch.empty(2 * t.numel(), dtype=t.dtype)[::2]   # stride 2: no vectorized inner loop
        spread.copy_(t.detach().reshape(-1))
        result = torch.empty_like(t, memory_format=torch.contiguous_format)
        torch.pow(spread, exponent, out=result.view(-1))
        results.append(result)
    return results
