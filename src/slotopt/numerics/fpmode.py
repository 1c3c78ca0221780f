"""TensorFlow's floating-point mode: its CPU kernels run with subnormal numbers flushed to zero.

TensorFlow sets flush-to-zero and denormals-are-zero around every kernel (``ScopedFlushDenormal``): a subnormal
result becomes 0 and a subnormal input reads as 0. It shows in long runs: a state that decays (RMSprop's mean
square where a gradient stays 0) stops at the smallest normal number TensorFlow can step from, and Nadam's
momentum product becomes 0 instead of a subnormal. slotopt runs each optimizer step in the same mode
(:func:`flush_to_zero`, used by ``engine/pipeline.py``) on the calling thread; the compiled kernels carry it
into their worker threads. torch's own worker threads (the foreach path on tensors above torch's grain size,
32768 elements) keep their mode: there a subnormal can survive where TensorFlow would flush it.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Iterator
from typing import Any, Optional

import torch

from . import compiled

__all__ = ["flush_to_zero", "enter_flush_to_zero", "leave_flush_to_zero"]

_FTZ_DAZ = 0x8040  # MXCSR bits
_mode_function: Optional[Any] = None
_looked_up = False


def _mode() -> Optional[Any]:
    """The compiled library's ``slotopt_denormal_mode`` (sets the bits, returns the previous ones), if built."""
    global _mode_function, _looked_up
    if not _looked_up:
        # (handed down by slotopt.kernels, which loads the library: numerics does not reach up a floor for it)
        _mode_function = compiled.function("slotopt_denormal_mode", [ctypes.c_int], ctypes.c_int)
        _looked_up = compiled.provided()
    return _mode_function


#: What ``enter_flush_to_zero`` returns when torch's switch was used (it cannot read the previous mode).
_TORCH_SWITCH = object()


def enter_flush_to_zero() -> Any:
    """Flushes subnormals to zero on this thread from now on; returns what :func:`leave_flush_to_zero` takes to put
    the previous mode back. (Two calls instead of a context manager: a step runs this, and a generator-based
    context manager costs more than the rest of a small step's bookkeeping when the caches are cold.)"""
    fn = _mode()
    if fn is not None:
        return fn(_FTZ_DAZ)
    return _TORCH_SWITCH if torch.set_flush_denormal(True) else None


def leave_flush_to_zero(previous: Any) -> None:
    """Puts back the mode ``enter_flush_to_zero`` found. Without the compiled library, torch's
    ``set_flush_denormal`` was used, and the mode is switched off (torch cannot read the previous mode)."""
    if previous is _TORCH_SWITCH:
        torch.set_flush_denormal(False)
    elif previous is not None:
        _mode()(previous)


@contextlib.contextmanager
def flush_to_zero() -> Iterator[None]:
    """Runs the block with subnormals flushed to zero on this thread, then restores the previous mode."""
    previous = enter_flush_to_zero()
    try:
        yield
    finally:
        leave_flush_to_zero(previous)
