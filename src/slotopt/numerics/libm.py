"""The C library's ``cos``, ``exp``, ``log`` and ``pow``, element by element, as TensorFlow's CPU kernels call them.

TensorFlow evaluates an element that does not fill a whole Eigen packet (every element of a 0-d tensor, such as
a schedule's step) with the scalar ``std::cos``/``std::pow``..., that is the C library's ``cosf``/``powf`` for
float32 and ``cos``/``pow`` for float64. torch's CPU ``cos``/``pow``/``exp``/``log`` (and NumPy's, which are
vectorised on AVX512 machines) are other approximations: ``torch.cos`` differs from ``cosf`` on about 5% of float32
inputs. Python's ``math`` functions are the C library's double-precision ones; the float32 ones are called through
ctypes. Results are flushed to zero when subnormal, as TensorFlow's kernels run with flush-to-zero.

Float tensors on a GPU take the device kernels with the C library's bits where ``slotopt.kernels`` hands them down
(``numerics.device``: ``libm_cos``, ``libm_exp``, ``libm_log``, ``libm_pow``; ``kernels/triton/libm.py`` says which
functions and dtypes, each checked against this C library on first use); the rest (``cos`` of float64; no Triton;
a C library whose bits the kernels do not reproduce) is computed from a host copy (a GPU's libraries give other
bits; the CUDA path must give the CPU path's), and while a CUDA graph is captured that is refused
(``device.NotCapturable``), never replaced by torch's functions.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
from typing import Callable, Optional

import numpy as np
import torch

from . import device

__all__ = ["cos", "exp", "log", "pow", "scalar_pow", "flush_subnormal", "c_library", "on_device"]


def _load_libm() -> ctypes.CDLL:
    name = ctypes.util.find_library("m") or "libm.so.6"
    return ctypes.CDLL(name)


_libm = _load_libm()


def _float32_function(name: str, arguments: int) -> Callable[..., float]:
    fn = getattr(_libm, name)
    fn.argtypes = [ctypes.c_float] * arguments
    fn.restype = ctypes.c_float
    return fn


_cosf, _expf, _logf = (_float32_function(n, 1) for n in ("cosf", "expf", "logf"))
_powf = _float32_function("powf", 2)
_FLOAT32_TINY = float(np.finfo(np.float32).tiny)
_FLOAT64_TINY = float(np.finfo(np.float64).tiny)


def _flushed(value: float, tiny: float) -> float:
    return math.copysign(0.0, value) if value != 0.0 and abs(value) < tiny else value


def _c_pow(x: float, y: float) -> float:
    """C's ``pow`` for doubles (Python's ``math.pow`` raises where C returns inf or NaN)."""
    try:
        return math.pow(x, y)
    except OverflowError:
        return math.copysign(math.inf, x) if (x < 0 and float(y).is_integer() and y % 2 == 1) else math.inf
    except ValueError:
        if x == 0.0:  # a negative power of zero: +-inf
            return math.copysign(math.inf, x) if (float(y).is_integer() and y % 2 == 1) else math.inf
        return math.nan


def _c_unary(fn64: Callable[[float], float], fallback: float) -> Callable[[float], float]:
    def call(x: float) -> float:
        try:
            return fn64(x)
        except (ValueError, OverflowError):
            return fallback if not math.isnan(x) else x
    return call


_DOUBLE = {"cos": _c_unary(math.cos, math.nan), "exp": _c_unary(math.exp, math.inf),
           "log": lambda x: -math.inf if x == 0.0 else (math.nan if x < 0 or math.isnan(x) else math.log(x))}
_SINGLE = {"cos": _cosf, "exp": _expf, "log": _logf}


def on_host(t: torch.Tensor, what: str = "numerics") -> bool:
    """Whether ``t`` is a float32/float64 tensor on a device with data (CUDA, ...) whose exact value is computed
    from a host copy: a GPU's libraries give other bits. While a CUDA graph is captured on its device no host copy
    can be taken: :class:`~slotopt.numerics.device.NotCapturable` naming ``what`` (never torch's functions, whose
    bits differ). ``numerics.ops`` asks the same."""
    if t.device.type in ("cpu", "meta") or t.dtype not in (torch.float32, torch.float64):
        return False
    device.refuse_capture(what, t)
    return True


def on_device(t: torch.Tensor) -> bool:
    """Whether ``t`` is a float32/float64 tensor on a device with data (not the CPU): one the device kernels may
    compute (the tests route CPU tensors here under Triton's interpreter by replacing this function)."""
    return t.device.type not in ("cpu", "meta") and t.dtype in (torch.float32, torch.float64)


def _on_the_device(name: str, *arguments: object) -> Optional[torch.Tensor]:
    """The device kernel's result (``numerics.device``'s ``libm_<name>``), or None where there is none."""
    kernel = device.function(f"libm_{name}")
    return kernel(*arguments) if kernel is not None else None


def _elementwise(name: str, t: torch.Tensor, torch_fn: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    if on_device(t):
        done = _on_the_device(name, t)  # the C library's bits on the device: no host copy, capturable
        if done is not None:
            return done.reshape(t.shape)
    if on_host(t, f"numerics.{name}"):
        return _elementwise(name, t.detach().cpu(), torch_fn).to(t.device)  # the C library's bits, on a GPU too
    if t.device.type != "cpu" or t.dtype not in (torch.float32, torch.float64):
        return torch_fn(t)
    return c_library(name, t)


def c_library(name: str, t: torch.Tensor, y: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The C library's ``name`` (``cos``, ``exp``, ``log``, ``pow`` with ``y``) of a float32/float64 CPU tensor,
    element by element and flushed to zero, never through a device kernel: the reference the device kernels are
    checked against."""
    if name == "pow":
        xs, ys = torch.broadcast_tensors(t.detach(), torch.as_tensor(y, dtype=t.dtype))
        single = t.dtype == torch.float32
        values = [scalar_pow(a, b, single) for a, b in zip(xs.reshape(-1).tolist(), ys.reshape(-1).tolist())]
        return torch.tensor(values, dtype=t.dtype).reshape(xs.shape)
    single = t.dtype == torch.float32
    fn, tiny = (_SINGLE[name], _FLOAT32_TINY) if single else (_DOUBLE[name], _FLOAT64_TINY)
    values = [_flushed(fn(x), tiny) for x in t.detach().reshape(-1).tolist()]
    return torch.tensor(values, dtype=t.dtype).reshape(t.shape)


def cos(t: torch.Tensor) -> torch.Tensor:
    """``cos`` of every element with the C library (``cosf`` for float32), as a new tensor."""
    return _elementwise("cos", t, torch.cos)


def exp(t: torch.Tensor) -> torch.Tensor:
    """``exp`` of every element with the C library, flushed to zero when subnormal."""
    return _elementwise("exp", t, torch.exp)


def log(t: torch.Tensor) -> torch.Tensor:
    """``log`` of every element with the C library."""
    return _elementwise("log", t, torch.log)


def scalar_pow(x: float, y: float, single: bool) -> float:
    """The C library's ``powf`` (``single``) or ``pow`` of two numbers of that precision, flushed to zero."""
    if single:
        return _flushed(_powf(x, y), _FLOAT32_TINY)
    return _flushed(_c_pow(x, y), _FLOAT64_TINY)


def pow(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``x ** y`` element by element (broadcast) with the C library: what TensorFlow computes for the elements
    that do not fill a whole packet. For whole tensors use :func:`slotopt.numerics.pow`."""
    if on_device(x) and isinstance(y, (torch.Tensor, int, float)):
        done = _on_the_device("pow", x, y)
        if done is not None:
            return done
    if on_host(x, "numerics.libm.pow"):
        y = y.detach().cpu() if isinstance(y, torch.Tensor) else y
        return pow(x.detach().cpu(), y).to(x.device)  # the C library's bits, on a GPU too
    if x.device.type != "cpu" or x.dtype not in (torch.float32, torch.float64):
        return torch.pow(x, y)
    return c_library("pow", x, y.detach() if isinstance(y, torch.Tensor) else y)


def flush_subnormal(t: torch.Tensor) -> torch.Tensor:
    """``t`` with subnormal values replaced by zeros of the same sign (TensorFlow's flush-to-zero), in place."""
    if t.is_floating_point():
        tiny = torch.finfo(t.dtype).tiny
        t.copy_(torch.where((t != 0) & (t.abs() < tiny), t * 0.0, t))
    return t
