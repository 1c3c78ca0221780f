"""The compiled library's arithmetic helpers that numerics calls (``rsqrtps``, the denormal mode), handed down.

The library is built and loaded by ``kernels/native``, a floor above this one. Rather than reach up for it,
numerics is given it: ``slotopt.kernels`` calls :func:`provide` once the library is loaded (or found missing), and
numerics looks its helpers up here by name. Until then, and without a library, every helper is None and the
callers take their other path.
"""

from __future__ import annotations

from typing import Any, Optional

__all__ = ["provide", "provided", "function"]

_library: Optional[Any] = None
_provided = False


def provide(library: Optional[Any]) -> None:
    """Hands numerics the loaded compiled library (a ``ctypes.CDLL``), or None when there is none."""
    global _library, _provided
    _library, _provided = library, True


def provided() -> bool:
    """Whether the loading layer has said what library there is (so a missing helper is final)."""
    return _provided


def function(name: str, argtypes: list[Any], restype: Any) -> Optional[Any]:
    """The library's function ``name`` with its signature set, or None (no library, or one without it)."""
    fn = getattr(_library, name, None) if _library is not None else None
    if fn is not None and fn.argtypes is None:
        fn.argtypes = argtypes
        fn.restype = restype
    return fn
