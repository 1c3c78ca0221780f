"""``numerics.libm``'s device functions (``numerics.device``'s ``libm_cos``, ``libm_exp``, ``libm_log``, ``libm_pow``): the C
library's functions on a GPU tensor with its bits, each returning None where no device kernel has them (then
numerics takes its host copy, or refuses during a capture).

| name | float32 | float64 |
|---|---|---|
| ``libm_exp`` | ``expf`` (``libm.py``) | ``exp`` (``libm.py``) |
| ``libm_log`` | ``logf`` (``libm.py``) | ``log`` (``libm.py``) |
| ``libm_pow`` | ``powf`` (``step_scalars.py``, checked in ``libm.py``) | ``pow`` (``libm.py``) |
| ``libm_cos`` | ``cosf`` (``libm.py``) | none: the host copy |
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from . import libm

__all__ = ["FUNCTIONS", "cos", "exp", "log", "pow"]


def cos(t: torch.Tensor) -> Optional[torch.Tensor]:
    return libm.unary("cosf", t) if t.dtype == torch.float32 else None


def exp(t: torch.Tensor) -> Optional[torch.Tensor]:
    return libm.unary("expf" if t.dtype == torch.float32 else "exp", t)


def log(t: torch.Tensor) -> Optional[torch.Tensor]:
    return libm.unary("logf" if t.dtype == torch.float32 else "log", t)


def _exponent(x: torch.Tensor, y: Any) -> Any:
    """``y`` as ``libm.pow`` takes it: a number, or a tensor of ``x``'s dtype on its device (None: not here)."""
    if not isinstance(y, torch.Tensor):
        return float(y)
    if y.device != x.device:
        return float(y) if (y.device.type == "cpu" and y.dim() == 0) else None  # (a host number: no wait)
    return y.to(x.dtype)


def pow(x: torch.Tensor, y: Any) -> Optional[torch.Tensor]:  # noqa: A001 - the C library's name
    """``x ** y`` with the C library's ``powf``/``pow``, ``y`` broadcast with ``x`` as ``numerics.libm.pow``."""
    y = _exponent(x, y)
    if y is None:
        return None
    if isinstance(y, torch.Tensor) and y.shape != x.shape:
        x, y = (t.contiguous() for t in torch.broadcast_tensors(x, y))
    return libm.pow(x, y)


FUNCTIONS = {"libm_cos": cos, "libm_exp": exp, "libm_log": log, "libm_pow": pow}
