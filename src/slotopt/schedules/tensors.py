"""Tensor helpers of the schedules, mirroring Keras's ``convert_to_tensor`` / ``ops.cast`` / scalar-in-op
behaviour, and the per-schedule cache of constant tensors (per device and hyperparameter values)."""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import torch

from .base import LearningRateSchedule, Step


def _device_of(step: Any) -> torch.device:
    if isinstance(step, torch.Tensor):
        return step.device
    return torch.device("cpu")


def _to_tensor(value: Any, device: torch.device) -> torch.Tensor:
    """``convert_to_tensor`` without a dtype: Python float -> float32, Python int -> int32, bool -> bool.

    Torch tensors keep their dtype; other array-likes (numpy scalars) keep theirs through ``torch.as_tensor``.
    """
    if isinstance(value, torch.Tensor):
        return value.detach().to(device=device)
    if hasattr(value, "dtype"):  # numpy scalar or array: its own dtype, like TensorFlow
        return torch.as_tensor(value, device=device)
    if isinstance(value, bool):
        return torch.tensor(value, dtype=torch.bool, device=device)
    if isinstance(value, int):
        dtype = torch.int32 if -(2**31) <= value < 2**31 else torch.int64
        return torch.tensor(value, dtype=dtype, device=device)
    if isinstance(value, float):
        return torch.tensor(value, dtype=torch.float32, device=device)
    return torch.as_tensor(value, device=device)


def _cast(value: Any, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``ops.cast(value, dtype)`` on the TF backend: a Python float goes through float32 first."""
    return _to_tensor(value, device).to(dtype)


def _literal(value: Any, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A Python number used directly in an op: rounded once to ``dtype``."""
    if isinstance(value, torch.Tensor):
        return value.detach().to(device=device, dtype=dtype)
    return torch.tensor(value, dtype=dtype, device=device)


def _initial_lr(value: Any, device: torch.device) -> torch.Tensor:
    """``initial_learning_rate`` as a tensor; a non-floating value computes in float32."""
    lr0 = _to_tensor(value, device)
    if not lr0.is_floating_point():
        lr0 = lr0.to(torch.float32)
    return lr0


def _step_tensor(step: Step, device: torch.device) -> torch.Tensor:
    """The step as Keras sees it (a Python int is an integer tensor, a Python float a float32 one)."""
    if isinstance(step, bool):
        raise TypeError(
            f"A learning-rate schedule step must be a number or a tensor. Received: step={step!r}"
        )
    if isinstance(step, int):
        return torch.tensor(step, dtype=torch.int64, device=device)
    tensor = _to_tensor(step, device)
    # A complex step (tf.keras casts iterations to a complex variable's dtype): TensorFlow's cast to the schedule's
    # real dtype keeps the real part.
    return tensor.real if tensor.is_complex() else tensor


_CACHE_ATTR = "_slotopt_constants"
_CACHE_SIZE = 8


def _cache_key(value: Any) -> Optional[Tuple[str, str]]:
    if value is None or isinstance(value, (bool, int, float, str)):
        return (type(value).__name__, repr(value))
    return None  # tensors and other objects can change in place: never cached


def _cached(
    schedule: LearningRateSchedule,
    device: torch.device,
    raw: Sequence[Any],
    build: Callable[[torch.device], Dict[str, Any]],
    extra: Any = None,
) -> Dict[str, Any]:
    """The constant tensors of one call, built by ``build(device)``.

    They only depend on the hyperparameters, so they are reused while those are the same Python values (the key
    is read on every call, so reassigning an attribute is seen at once). The cached tensors are only ever read.
    """
    parts = [_cache_key(v) for v in raw]
    if any(p is None for p in parts):
        return build(device)
    key = (device, extra, tuple(parts))
    cache: Dict[Any, Dict[str, Any]] = schedule.__dict__.setdefault(_CACHE_ATTR, {})
    found = cache.get(key)
    if found is None:
        if len(cache) >= _CACHE_SIZE:
            cache.clear()
        found = cache[key] = build(device)
    return found
