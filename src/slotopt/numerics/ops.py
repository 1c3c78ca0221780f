"""TensorFlow's CPU arithmetic on torch tensors: the functions every generation calls where torch's own would give
other bits (see the package docstring).

Each function takes and returns torch tensors and never modifies its inputs. On float32/float64 tensors the
result has TensorFlow's bits; on other dtypes it falls back to torch's function. On a GPU, ``sum`` and ``mean``
run device kernels in Eigen's order and ``pow`` Eigen's packet ``pow`` where every element is in a whole packet
(``numerics.device``: handed down from ``kernels/triton`` where Triton is installed); what has no device kernel
(``pow`` of a tensor with a tail, the C library's ``cos``/``exp``/``log``, no Triton) runs on a host copy and sends
the result back, which waits for the device, and is refused while a CUDA graph is captured.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Optional, Union

import numpy as np
import torch

from . import compiled, device, eigen, libm, roots

__all__ = ["sqrt", "pow", "sum", "mean", "norm", "rsqrt", "fused_rsqrt_exact", "cos", "exp", "log", "div_scalar",
           "div_scalar_"]

Tensors = list[torch.Tensor]
Number = Union[int, float]
_EXACT = (torch.float32, torch.float64)

cos = libm.cos
exp = libm.exp
log = libm.log


def _cpu_exact(t: torch.Tensor) -> bool:
    return t.device.type == "cpu" and t.dtype in _EXACT


def _device_divides(tensors: Sequence[torch.Tensor], divisor: object) -> bool:
    """Whether ``tensors`` are float32/float64 tensors on a GPU divided by a number (the CPU, other dtypes and
    tensor divisors keep torch's own division)."""
    return bool(tensors) and tensors[0].device.type not in ("cpu", "meta") and tensors[0].dtype in _EXACT \
        and isinstance(divisor, (int, float))


def div_scalar(tensors: Sequence[torch.Tensor], divisor: float) -> Tensors:
    """``t / divisor`` for each tensor (new tensors), correctly rounded on every device: CUDA's division by a
    Python number multiplies by its reciprocal (two roundings; the CPU divides), so there the divisor is a 0-d
    tensor on the device, which CUDA divides by. No transfer: the 0-d tensor is filled on the device."""
    if not _device_divides(tensors, divisor):
        return list(torch._foreach_div(list(tensors), divisor))
    d = torch.full((), divisor, dtype=tensors[0].dtype, device=tensors[0].device)
    return [torch.div(t, d) for t in tensors]


def div_scalar_(tensors: Sequence[torch.Tensor], divisor: float) -> None:
    """In place, as :func:`div_scalar`."""
    if not _device_divides(tensors, divisor):
        torch._foreach_div_(list(tensors), divisor)
        return
    d = torch.full((), divisor, dtype=tensors[0].dtype, device=tensors[0].device)
    for t in tensors:
        t.div_(d)


def sqrt(t: torch.Tensor) -> torch.Tensor:
    """The correctly rounded square root of every element (IEEE ``sqrt``, as TensorFlow's ``Sqrt``), 0-d tensors
    included. torch's CPU ``sqrt`` is one ULP off for about 20% of float32 inputs on AVX512 builds."""
    return roots.sqrt([t])[0]


def _array(t: torch.Tensor) -> np.ndarray:
    return t.detach().contiguous().numpy()


def _pow_flat(base: np.ndarray, exponent: np.ndarray, rows: int) -> np.ndarray:
    """Eigen's packet ``pow`` on each row's whole packets, the C library's on the rest."""
    out = np.empty_like(base)
    matrix, exps, target = base.reshape(-1, rows), exponent.reshape(-1, rows), out.reshape(-1, rows)
    whole = eigen.packet_end(rows, base.dtype)
    if whole:
        target[:, :whole] = eigen.generic_pow(np.ascontiguousarray(matrix[:, :whole]).reshape(-1),
                                              np.ascontiguousarray(exps[:, :whole]).reshape(-1)).reshape(-1, whole)
    if whole < rows:
        single = base.dtype == np.float32
        tail = [libm.scalar_pow(float(a), float(b), single)
                for a, b in zip(matrix[:, whole:].reshape(-1).tolist(), exps[:, whole:].reshape(-1).tolist())]
        target[:, whole:] = np.array(tail, dtype=base.dtype).reshape(-1, rows - whole)
    return out


def pow(x: torch.Tensor, exponent: Union[Number, torch.Tensor], rows: bool = False) -> torch.Tensor:
    """``x ** exponent`` as TensorFlow's ``Pow`` computes it: Eigen's ``generic_pow`` on the whole packets from
    the tensor's element 0 (8 float32 or 4 float64), the C library's ``pow`` on the remaining elements. ``rows``:
    packets start at every row (the first axis) instead, as in TensorFlow's sparse kernels.

    ``exponent`` is a number (rounded to ``x``'s dtype) or a tensor broadcastable to ``x``.
    """
    if _on_device(x):
        kernel = device.function("pow")  # Eigen's packet pow on the device where x is whole packets
        done = kernel(x, exponent, rows) if kernel is not None else None
        if done is not None:
            return done.reshape(x.shape)
    if libm.on_host(x, "numerics.pow"):
        return pow(x.detach().cpu(), exponent, rows).to(x.device)
    if not _cpu_exact(x):
        return torch.pow(x, exponent)
    base = _array(x)
    exps = np.broadcast_to(np.asarray(exponent.detach().cpu().numpy() if isinstance(exponent, torch.Tensor)
                                      else exponent, dtype=base.dtype), base.shape)
    if base.size == 0:
        return x.detach().clone()
    row = base.size // base.shape[0] if (rows and base.ndim > 1) else base.size
    return torch.from_numpy(_pow_flat(base, np.ascontiguousarray(exps), row)).reshape(x.shape)


def _on_device(t: torch.Tensor) -> bool:
    return t.device.type not in ("cpu", "meta") and t.dtype in _EXACT


def _device_sum(t: torch.Tensor) -> torch.Tensor:
    """``sum`` of a GPU tensor: the device kernel (no wait), else from a host copy (refused during a capture)."""
    kernel = device.function("row_sums")
    if kernel is not None:
        done = kernel(t, 1, t.numel())
        if done is not None:
            return done
    libm.on_host(t, "numerics.sum")
    return sum(t.detach().cpu()).to(t.device)


def _device_mean(t: torch.Tensor, dim: Optional[int], keepdim: bool) -> Optional[torch.Tensor]:
    """``mean`` of a GPU tensor with the device kernels (Eigen's order; the division by the count IEEE-rounded,
    by a 0-d tensor filled on the device), or None where they are missing."""
    rows_kernel, columns_kernel = device.function("row_sums"), device.function("column_sums")
    if rows_kernel is None or columns_kernel is None or t.dim() == 0 and dim is not None:
        return None
    if dim is None:
        if t.numel() == 0:
            return None
        total = rows_kernel(t, 1, t.numel())
        return None if total is None else torch.div(total, torch.full((), t.numel(), dtype=t.dtype,
                                                                       device=t.device))
    axis = dim % t.dim()
    count = t.shape[axis]
    if count == 0:
        return None
    moved = t.movedim(axis, -1 if axis == t.dim() - 1 else 0).contiguous()
    if axis == t.dim() - 1:
        sums = rows_kernel(moved, moved.numel() // count, count)
    else:
        sums = columns_kernel(moved, count, moved.numel() // count)
    if sums is None:
        return None
    shape = [n for i, n in enumerate(t.shape) if i != axis]
    result = torch.div(sums.reshape(shape), torch.full((), count, dtype=t.dtype, device=t.device))
    return result.unsqueeze(axis) if keepdim else result


def sum(t: torch.Tensor) -> torch.Tensor:  # noqa: A001 - TensorFlow's name
    """The sum of every element (a 0-d tensor) in Eigen's full-reduction order (``tf.reduce_sum``)."""
    if _on_device(t):
        return _device_sum(t)
    if not _cpu_exact(t):
        return torch.sum(t)
    return torch.tensor(eigen.full_sum(_array(t)), dtype=t.dtype)


def mean(t: torch.Tensor, dim: Optional[int] = None, keepdim: bool = False) -> torch.Tensor:
    """``tf.reduce_mean``: the sum (Eigen's order) divided by the count. Over the innermost axis every row is
    reduced like a whole tensor; over another axis the elements are added in order from 0."""
    if _on_device(t):
        done = _device_mean(t, dim, keepdim)
        if done is not None:
            return done
    if libm.on_host(t, "numerics.mean"):
        return mean(t.detach().cpu(), dim, keepdim).to(t.device)
    if not _cpu_exact(t):
        return torch.mean(t) if dim is None else torch.mean(t, dim=dim, keepdim=keepdim)
    a = _array(t)
    f = a.dtype.type
    if dim is None:
        return torch.tensor(eigen.full_sum(a) / f(max(a.size, 1)) if a.size else f(np.nan), dtype=t.dtype)
    axis = dim % a.ndim
    count = a.shape[axis]
    with np.errstate(all="ignore"):
        if axis == a.ndim - 1:
            rows = a.reshape(-1, count)
            sums = np.array([eigen.full_sum(row) for row in rows], dtype=a.dtype).reshape(a.shape[:-1])
        else:
            moved = np.moveaxis(a, axis, 0)
            sums = np.zeros(moved.shape[1:], dtype=a.dtype)
            for item in moved:  # in order from 0, as Eigen's reduction over a preserved inner axis
                sums = sums + item
        result = sums / f(count) if count else np.full(sums.shape, np.nan, dtype=a.dtype)
    if keepdim:
        result = np.expand_dims(result, axis)
    return torch.from_numpy(np.ascontiguousarray(result))


def norm(t: torch.Tensor) -> torch.Tensor:
    """``sqrt(reduce_sum(t * t))``: the Euclidean norm as Keras and TensorFlow build it, as a 0-d tensor."""
    return sqrt(sum(t * t))


def _estimate_function():  # the compiled library's rsqrtps helper, if it was built with one
    return compiled.function("slotopt_tf_rsqrt_f32", [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                                      ctypes.c_int64], None)


def fused_rsqrt_exact(vendor: Optional[str] = None) -> bool:
    """Whether :func:`rsqrt` reproduces TensorFlow's float32 fused kernels as TensorFlow computes them on a
    processor of ``vendor`` (a CPUID vendor string such as ``"GenuineIntel"``; default: this machine's).

    It needs the compiled library's ``rsqrtps`` (torch and NumPy cannot produce the estimate), and the estimate's
    bits are the processor's own: they are TensorFlow's on a processor of this machine's vendor only
    (:func:`.cpu.vendor`). A reference recorded on another vendor's processor differs in the last bits.

    >>> fused_rsqrt_exact("no such vendor")
    False
    """
    from . import cpu  # (here, not at the top: not on any step's path)

    if _estimate_function() is None:
        return False
    return vendor is None or vendor == cpu.vendor()


def rsqrt(tensors: Sequence[torch.Tensor], rows: bool = False) -> Tensors:
    """``1 / sqrt(x)`` as TensorFlow's fused ``ApplyAdagrad``, ``ApplyProximalAdagrad`` and ``ApplyAdadelta``
    kernels compute it (Eigen's ``rsqrt``), as new tensors.

    float32 on CPU: on the whole 8-float packets of each tensor (``rows``: of each row), the CPU's ``rsqrtps``
    estimate refined by one Newton step (multiplies and adds, no FMA); ``1 / sqrt(x)`` with two roundings on the
    rest. Without the compiled library the estimate is unavailable and every element takes ``1 / sqrt(x)``
    (then these kernels can be one ULP off TensorFlow's; :func:`fused_rsqrt_exact` says which applies).
    Other dtypes: ``1 / sqrt(x)``.
    """
    results = roots.rsqrt(list(tensors))
    estimate = _estimate_function()
    if estimate is None:
        return results
    for source, result in zip(tensors, results):
        if source.dtype != torch.float32 or source.device.type != "cpu" or source.numel() == 0:
            continue
        x = source.detach().contiguous()
        row = x.numel() // x.shape[0] if (rows and x.dim() > 1) else x.numel()
        estimate(x.data_ptr(), result.data_ptr(), x.numel(), row)
    return results
