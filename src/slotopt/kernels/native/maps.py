"""The compiled gradient maps (``gradient_maps.inc``): the per-tensor sums of squares of clipping by norm in
Eigen's order, the full sum of a vector in that order, and the element-wise map of a step's gradients into one
flat buffer (unscale, clipvalue, per-tensor or global clip scale). ``engine/compiled_maps.py`` calls them on an
ordinary step; each returns None (nothing done) where the compiled path is off or the library predates it, and the
caller takes the foreach path (``engine/clipping.py``), the same bits.

Like every compiled call, each holds the storages of the tensors it reads and writes while it runs without the GIL,
every address proven inside them (``pins``), and with the bounds check on (``native.check_bounds``) checks its
table in C's terms first."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any, Callable, Optional

import numpy as np
import torch

from . import pins

__all__ = ["DTYPES", "GradientMap", "square_sums", "eigen_sum", "gradient_map", "accumulated_mean", "mapped_function",
           "materialized"]

#: The dtypes the maps are compiled for, with their NumPy types.
DTYPES = {torch.float32: np.float32, torch.float64: np.float64}
_SUFFIX = {torch.float32: "f32", torch.float64: "f64"}
_I64, _PTR, _F64, _INT = ctypes.c_int64, ctypes.c_void_p, ctypes.c_double, ctypes.c_int

Tensors = Callable[[], Sequence[torch.Tensor]]


class GradientMap:
    """A step's gradient map handed to the compiled update rules instead of a buffer of mapped gradients: each
    rule maps every gradient element where it loads it (``slotopt_kernels.c``, the ``_gm`` rules), with the same
    operations as :func:`gradient_map`. ``flags`` and the scalars as :func:`gradient_map` takes them;
    ``denominators`` (flag 4): one per tensor of the list it is attached to, of the gradients' dtype.

    A list of gradients carrying one (``Matched.gradient_map``, ``engine/plan.Ordinary.gradients``) holds the
    gradients as they were before the map: whatever takes it other than a compiled rule with a ``_gm`` form reads
    :func:`materialized` first (the compiled kernels' fallback does)."""

    __slots__ = ("flags", "scalars", "denominators", "dtype", "flush")

    def __init__(self, dtype: torch.dtype, flags: int, divisor: float = 1.0, lo: float = 0.0, hi: float = 0.0,
                 clip: float = 1.0, denominators: Optional[np.ndarray] = None, scale: float = 1.0) -> None:
        self.dtype, self.flags = dtype, int(flags)
        self.scalars = np.array([flags, divisor, lo, hi, clip, scale], dtype=np.float64)
        self.denominators = None if denominators is None else np.ascontiguousarray(denominators, DTYPES[dtype])
        #: Set by the step that deferred it (engine/compiled_maps.py): writes the mapped gradients into the step.
        self.flush: Optional[Callable[[object], None]] = None

    @property
    def mode(self) -> str:
        """The suffix of the compiled rules that take this map (one per common case, ``gmx`` for the others)."""
        return {1: "gm1", 2: "gm2", 4: "gm4", 8: "gm8"}.get(self.flags, "gmx")

    def arguments(self) -> tuple[float, float, float, float, Optional[np.ndarray], float]:
        """divisor, lo, hi, clip, denominators, scale: :func:`gradient_map`'s arguments."""
        divisor, lo, hi, clip, scale = (float(x) for x in self.scalars[1:])
        return divisor, lo, hi, clip, self.denominators, scale

    def select(self, order: Optional[Sequence[int]]) -> GradientMap:
        """This map for the tensors at ``order`` of the list it was made for (None: all, as they are)."""
        if order is None or self.denominators is None:
            return self
        picked = GradientMap.__new__(GradientMap)
        picked.dtype, picked.flags, picked.scalars, picked.flush = self.dtype, self.flags, self.scalars, None
        picked.denominators = np.ascontiguousarray(self.denominators[np.asarray(order, dtype=np.int64)])
        return picked

    # The compiled kernels' package reaches the two functions below through the map it is handed (it does not
    # import this module, which reads the package's library: no import circle).
    def function(self, rule: str, dtype: torch.dtype) -> Any:
        """:func:`mapped_function` of ``rule`` for ``dtype`` with this map."""
        return mapped_function(rule, dtype, self)

    def materialize(self, grads: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """:func:`materialized` of ``grads`` with this map."""
        return materialized(grads, self)


_MAPPED_ARGTYPES = [_I64, _PTR, _PTR, _PTR, _INT, _PTR, _PTR]


def mapped_function(rule: str, dtype: torch.dtype, gm: GradientMap) -> Any:
    """The compiled rule ``rule`` for ``dtype`` that takes ``gm`` in its prologue, or None where the built library
    has none (the caller then maps the gradients first: :func:`materialized`)."""
    if dtype not in _SUFFIX:
        return None
    return _native()._library_function(f"{rule}_{_SUFFIX[dtype]}_{gm.mode}", _MAPPED_ARGTYPES, None)


def materialized(grads: Sequence[torch.Tensor], gm: GradientMap) -> list[torch.Tensor]:
    """``grads`` (contiguous CPU tensors of ``gm``'s dtype, in the order ``gm`` was selected for) mapped, as new
    tensors: one compiled pass into one buffer (:func:`gradient_map`), else torch's ops in the same order (the
    reference's, engine/clipping.py)."""
    grads = list(grads)
    if not grads:
        return grads
    divisor, lo, hi, clip, denominators, scale = gm.arguments()
    offsets = np.zeros(len(grads) + 1, dtype=np.int64)
    np.cumsum([g.numel() for g in grads], out=offsets[1:])
    if all(g.is_contiguous() for g in grads):
        out = torch.empty(int(offsets[-1]), dtype=gm.dtype)
        addresses = np.array([g.data_ptr() for g in grads], dtype=np.uint64)
        if gradient_map(addresses, offsets, gm.dtype, lambda: grads, out, gm.flags, divisor, lo, hi, clip,
                        denominators, scale):
            return [out[int(a):int(b)].view(g.shape) for g, a, b in zip(grads, offsets[:-1], offsets[1:])]
    mapped = grads
    if gm.flags & 1:
        mapped = [g / divisor for g in mapped]
    if gm.flags & 2:
        mapped = [torch.clamp(g, lo, hi) for g in mapped]
    if gm.flags & 4:
        assert denominators is not None
        mapped = [(g * clip) / torch.tensor(d, dtype=gm.dtype) for g, d in zip(mapped, denominators)]
    if gm.flags & 8:
        factor = torch.tensor(scale, dtype=gm.dtype)
        mapped = [g * factor for g in mapped]
    return [m.clone() if m is g else m for m, g in zip(mapped, grads)]


def _native():  # (the package, imported when first needed: it imports nothing of this module)
    from .. import native

    return native


def _held(addresses: np.ndarray, offsets: np.ndarray, dtype: torch.dtype, tensors: Tensors) -> Optional[object]:
    native = _native()
    if native._bounds_checks:
        extents = np.array([native._extent(t) for t in tensors()], dtype=np.uint64).reshape(-1, 2).T
        native._check_table(addresses.reshape(1, -1), offsets, extents, dtype.itemsize)
    return pins.pin([tensors()], addresses.reshape(1, -1), offsets, dtype.itemsize)


def square_sums(addresses: np.ndarray, offsets: np.ndarray, dtype: torch.dtype, tensors: Tensors, flags: int = 0,
                divisor: float = 1.0, lo: float = 0.0, hi: float = 0.0) -> Optional[np.ndarray]:
    """Per tensor of a group of contiguous CPU tensors of ``dtype`` (data ``addresses``, uint64, and ``offsets``,
    int64, the prefix sums of their element counts, as ``native.first_nonfinite`` takes them), the sum of the
    squares of its elements in Eigen's full-reduction order (``numerics.sum(g * g)``), each element first divided
    by ``divisor`` (``flags & 1``) and clamped to ``[lo, hi]`` (``flags & 2``); an array of ``dtype``."""
    native = _native()
    if not native.active() or dtype not in _SUFFIX:
        return None
    fn = native._library_function(f"slotopt_square_sums_{_SUFFIX[dtype]}",
                                  [_I64, _PTR, _PTR, _I64, _F64, _F64, _F64, _PTR, _INT], None)
    if fn is None:
        return None
    addresses, offsets = np.ascontiguousarray(addresses, np.uint64), np.ascontiguousarray(offsets, np.int64)
    sums = np.empty(len(addresses), dtype=DTYPES[dtype])
    held = _held(addresses, offsets, dtype, tensors)
    if held is None:
        return None
    fn(len(addresses), addresses.ctypes.data, offsets.ctypes.data, flags, divisor, lo, hi, sums.ctypes.data,
       torch.get_num_threads())
    del held
    return sums


def eigen_sum(values: np.ndarray) -> Optional[np.generic]:
    """The sum of ``values`` (float32 or float64) in Eigen's full-reduction order (``eigen.full_sum``)."""
    native = _native()
    dtype = {np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64}.get(values.dtype)
    if not native.active() or dtype is None:
        return None
    restype = ctypes.c_float if dtype is torch.float32 else ctypes.c_double
    fn = native._library_function(f"slotopt_eigen_sum_{_SUFFIX[dtype]}", [_PTR, _I64], restype)
    if fn is None:
        return None
    values = np.ascontiguousarray(values)
    return values.dtype.type(fn(values.ctypes.data, len(values)))


def gradient_map(addresses: np.ndarray, offsets: np.ndarray, dtype: torch.dtype, tensors: Tensors,
                 out: torch.Tensor, flags: int, divisor: float = 1.0, lo: float = 0.0, hi: float = 0.0,
                 clip: float = 1.0, denominators: Optional[np.ndarray] = None, scale: float = 1.0) -> Optional[bool]:
    """``out`` (a contiguous CPU tensor of ``dtype`` and the group's element count) = the group's gradients mapped
    element by element in the step's order: ``x / divisor`` (``flags & 1``), ``clamp(x, lo, hi)`` (2),
    ``(x * clip) / denominators[k]`` (4, one denominator per tensor, of ``dtype``), ``x * scale`` (8). True when
    done, None when not (nothing written)."""
    native = _native()
    if not native.active() or dtype not in _SUFFIX:
        return None
    fn = native._library_function(f"slotopt_gradient_map_{_SUFFIX[dtype]}",
                                  [_I64, _PTR, _PTR, _PTR, _I64, _F64, _F64, _F64, _F64, _PTR, _F64, _INT], None)
    if fn is None:
        return None
    addresses, offsets = np.ascontiguousarray(addresses, np.uint64), np.ascontiguousarray(offsets, np.int64)
    if not (out.dtype is dtype and out.is_cpu and out.is_contiguous() and out.numel() == int(offsets[-1])
            and len(offsets) == len(addresses) + 1):
        raise ValueError(f"gradient_map: `out` must be a contiguous CPU tensor of {dtype} and {int(offsets[-1])} "
                         f"elements. Received: out of {out.dtype}, {tuple(out.shape)} on {out.device}")
    if flags & 4:
        denominators = np.ascontiguousarray(denominators, dtype=DTYPES[dtype])
        if len(denominators) != len(addresses):
            raise ValueError("gradient_map: one denominator per tensor")
    held = _held(addresses, offsets, dtype, tensors)
    pinned_out = pins.pin_tensors([out])
    if held is None or pinned_out is None:
        return None
    fn(len(addresses), addresses.ctypes.data, offsets.ctypes.data, int(pinned_out[1][0]), flags, divisor, lo, hi,
       clip, denominators.ctypes.data if flags & 4 else None, scale, torch.get_num_threads())
    del held, pinned_out
    native._increment_version([out])
    native._calls += 1
    return True


def accumulated_mean(grads: np.ndarray, accumulators: np.ndarray, offsets: np.ndarray, dtype: torch.dtype,
                     tensors: Callable[[], Sequence[Sequence[torch.Tensor]]], out: torch.Tensor,
                     steps: int) -> Optional[bool]:
    """``out`` (contiguous, of ``dtype``, the group's element count) = ``(g + acc) / steps`` element by element for
    a group of gradients and their accumulators (data addresses ``grads`` and ``accumulators``, uint64; ``tensors()``
    gives both lists, held while the kernel runs). True when done, None when not (nothing written)."""
    native = _native()
    if not native.active() or dtype not in _SUFFIX:
        return None
    fn = native._library_function(f"slotopt_accumulated_mean_{_SUFFIX[dtype]}",
                                  [_I64, _PTR, _PTR, _PTR, _F64, _INT], None)
    if fn is None:
        return None
    offsets = np.ascontiguousarray(offsets, np.int64)
    if not (out.dtype is dtype and out.is_cpu and out.is_contiguous() and out.numel() == int(offsets[-1])):
        raise ValueError("accumulated_mean: `out` must be a contiguous CPU tensor of the group's dtype and size")
    table = np.ascontiguousarray(np.stack([np.asarray(grads, np.uint64), np.asarray(accumulators, np.uint64)]))
    if native._bounds_checks:
        lists = tensors()
        extents = np.array([native._extent(t) for ts in lists for t in ts], dtype=np.uint64).reshape(-1, 2).T
        native._check_table(table, offsets, extents, dtype.itemsize)
    held = pins.pin(list(tensors()), table, offsets, dtype.itemsize)
    pinned_out = pins.pin_tensors([out])
    if held is None or pinned_out is None:
        return None
    fn(table.shape[1], table.ctypes.data, offsets.ctypes.data, int(pinned_out[1][0]), float(steps),
       torch.get_num_threads())
    del held, pinned_out
    native._increment_version([out])
    native._calls += 1
    return True
