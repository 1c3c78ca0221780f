"""CUDA graph capture of a step: what is refused, and why, until the step's scalars live on the device.

A slotopt step computes its learning rate, iteration count and per-step scalars (bias corrections, schedules) on
the host, as Python numbers with TensorFlow's float32 rounding, and hands them to the kernels as launch arguments.
A CUDA graph records a launch with its arguments: replayed, it would apply step 1's scalars at every step. So a
step that meets a capture refuses it with :class:`CaptureRefused` naming the optimizer and the reason, before
anything is written (``engine/pipeline.py``), rather than record frozen scalars or, inside ``numerics``, torch's
CUDA functions with other bits (``numerics.device.NotCapturable``, re-raised here with the optimizer's name).

The interface a construction flag selects (``capturable=True``, torch's spelling; ``engine/torch_arguments.py``):
:func:`refusal` says why an optimizer's steps cannot be captured (None once they can). Capturable steps, in the
design of issue 48: the learning rate, the iteration count and every per-step scalar kept as device tensors and
computed there by kernels with TensorFlow's bits (float32 products and ``pow`` as ``numerics`` does them), the
rules reading them from device memory (``BY_VALUE=False``, as float64 rules already do), and the plan's tables
built before the capture. Until then every optimizer is refused, by name.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from ..numerics.device import NotCapturable

__all__ = ["CaptureRefused", "refusal", "check", "capturing", "refused"]


class CaptureRefused(RuntimeError):
    """A step that cannot be captured in a CUDA graph (the message names the optimizer and the reason)."""


def _name(opt: Any) -> str:
    """The optimizer's public name: ``slotopt.Adam`` (Keras 3), ``slotopt.legacy.SGD``, ``slotopt.v1....``."""
    cls = opt if isinstance(opt, type) else type(opt)
    parts = cls.__module__.split(".")
    if parts[0] != "slotopt" or len(parts) < 2:
        return cls.__qualname__
    return f"slotopt.{cls.__qualname__}" if parts[1] == "keras3" else f"slotopt.{parts[1]}.{cls.__qualname__}"


def refusal(opt: Any) -> Optional[str]:
    """Why the steps of ``opt`` (an optimizer or its class) cannot be captured in a CUDA graph, or None where they
    can (none yet: see the module). A constructor given ``capturable=True`` raises with this where it is not None."""
    return (f"{_name(opt)}: its step computes the learning rate, the iteration count and the per-step scalars on "
            "the host, as Python numbers a CUDA graph would replay frozen (capturable steps, with these on the "
            "device, are not implemented yet)")


def capturing() -> bool:
    """Whether a CUDA graph is being captured on the current stream (never without CUDA initialised)."""
    return torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing()


def check(opt: Any) -> None:
    """Raises :class:`CaptureRefused` while a CUDA graph is being captured and ``opt`` cannot be."""
    if capturing():
        reason = refusal(opt)
        if reason is not None:
            raise CaptureRefused(f"A step of {reason}. Run the step outside `torch.cuda.graph`.")


def refused(opt: Any, error: NotCapturable) -> CaptureRefused:
    """``numerics``' refusal (a value with no device kernel) with the optimizer's name."""
    return CaptureRefused(f"A step of {_name(opt)} cannot be captured in a CUDA graph: {error}")
