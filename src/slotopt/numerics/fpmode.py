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

__all__ = ["flush_to_zero"]

_FTZ_DAZ = 0x8040  # MXCSR bits
_mode_function: Optional[Any] = None
_looked_up = False


def _mode() -> Optional[Any]:
    """The compiled library's ``slotopt_denormal_mode`` (sets the bits, returns the previous ones), if built."""
    global _mode_function, _looked_up
    if not _looked_up:
        from ..kernels import native

        fn = getattr(native._library, "slotopt_denormal_mode", None) if native._library is not None else None
        if fn is not None:
            fn.argtypes = [ctypes.c_int]
            fn.restype = ctypes.c_int
        _mode_function, _looked_up = fn, True
    return _mode_function


@contextlib.contextmanager
def flush_to_zero() -> Iterator[None]:
    """Runs the block with subnormals flushed to zero on this thread, then restores the previous mode.

    Without the compiled library, torch's ``set_flush_denormal`` is used, and the mode is switched off after
    the block (torch cannot read the previous mode)."""
    fn = _mode()
    if fn is not None:
        previous = fn(_FTZ_DAZ)
        try:
            yield
        finally:
            fn(previous)
        return
    supported = torch.set_flush_denormal(True)
    try:
        yield
    finally:
        if supported:
            torch.set_flush_denormal(False)
