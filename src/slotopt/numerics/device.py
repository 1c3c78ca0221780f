"""TensorFlow's arithmetic on a GPU without a copy to the host: device kernels handed down, and what a CUDA graph
capture may not do.

The kernels (Triton, ``kernels/triton/reductions.py``, ``eigen_pow.py`` and ``libm.py``) live in a floor above
numerics; as with the compiled library (``compiled.py``), ``slotopt.kernels`` hands them down: :func:`provide`
takes a loader, called on first use, that returns the device functions by name (each takes a tensor and returns the result on its device, or None
where it does not apply). Without them (no Triton), a GPU tensor's exact value is computed from a host copy, which
waits for the device.

While a CUDA graph is being captured no host copy can be taken, and torch's CUDA functions would give other bits:
numerics refuses (:class:`NotCapturable`, naming the function) rather than change bits silently; the engine adds
the optimizer's name (``engine/capture.py``).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch

__all__ = ["provide", "function", "NotCapturable", "capturing", "refuse_capture"]

_loader: Optional[Callable[[], dict[str, Callable[..., Any]]]] = None
_functions: Optional[dict[str, Callable[..., Any]]] = None


class NotCapturable(RuntimeError):
    """A value with TensorFlow's bits that cannot be computed while a CUDA graph is being captured."""

    def __init__(self, what: str, reason: str) -> None:
        super().__init__(f"{what} cannot be captured in a CUDA graph: {reason}")
        self.what = what


def provide(loader: Optional[Callable[[], dict[str, Callable[..., Any]]]]) -> None:
    """Hands numerics the loader of its device functions (``slotopt.kernels`` does, once)."""
    global _loader, _functions
    _loader, _functions = loader, None


def function(name: str) -> Optional[Callable[..., Any]]:
    """The device function ``name`` (``row_sums``, ``column_sums``, ``pow``; the C library's ``libm_cos``,
    ``libm_exp``, ``libm_log``, ``libm_pow``), or None."""
    global _functions
    if _functions is None:
        try:
            _functions = _loader() if _loader is not None else {}
        except Exception:  # a broken optional install: the host copy serves
            _functions = {}
    return _functions.get(name)


def capturing(t: torch.Tensor) -> bool:
    """Whether a CUDA graph is being captured on the current stream of ``t``'s device."""
    return t.device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def refuse_capture(what: str, t: torch.Tensor) -> None:
    """Raises :class:`NotCapturable` for ``what`` while a graph is captured on ``t``'s device (else nothing)."""
    if capturing(t):
        raise NotCapturable(what, "it has no device kernel with TensorFlow's bits here, and a host copy cannot be "
                                  "taken during a capture (torch's CUDA function would give other bits)")
