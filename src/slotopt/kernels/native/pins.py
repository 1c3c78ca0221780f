"""What a compiled kernel holds of its operands while it runs without the GIL.

The compiled rules run through ``ctypes``, which releases the GIL for the call, as the C++ rules on slices do. A
tensor object the caller holds keeps its ``TensorImpl`` alive, not its storage: another Python thread that meanwhile
runs ``p.data = torch.zeros(1)``, ``p.grad = None``, ``del opt.state[p]`` or replaces a slot lets go of the old
storage, which is freed while the kernel still writes into it (a use after free). torch's own ops hold an
``at::Tensor`` of each operand for the length of the op, and so does slotopt: ``pin`` takes a strong reference to
each operand's storage, under the GIL, and proves in the same call that every address the kernel will take lies,
with its elements, inside the storage held; the kernel runs while the returned object lives.

A step is proven against its plan before its first write (``engine/proof/unchanged.py``), but another thread may run
between that proof and a call (the GIL is handed over between any two bytecodes): an operand whose storage was let
go meanwhile fails ``pin`` (its address is no longer inside its tensor's storage), and the call raises ``Moved``
with nothing of it written. (Not torch's ops instead: they would run without the GIL on a tensor the other thread
is changing, which crashes inside torch, as torch.optim does under the same meddling. A step of several groups
raced this way may have written the groups before.) A storage resized in place by another thread
while a kernel runs (``untyped_storage().resize_(0)``) cannot be stopped by a reference; torch.optim has the same
limit (docs/architecture.md, "Threads").

With the C++ tensor table built, one pass over the operands (a few nanoseconds each: an atomic increment per
storage); without it, the storages are taken and compared in Python (a storage object held per operand).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional, Union

import numpy as np
import torch

from . import tensor_table

__all__ = ["pin", "pin_tensors", "Moved"]


class Moved(RuntimeError):
    """A compiled call whose operand let go of the storage the step proved, since that proof: another thread changed
    it while the step ran (``p.data = ...``, ``p.grad = ...``, a slot replaced). Nothing of the call was written."""

    def __init__(self, rule: str) -> None:
        super().__init__(f"An operand of the compiled {rule!r} call let go of its memory while the step ran (another "
                         "thread changed a parameter, gradient or slot: p.data = ..., p.grad = ...); not written. "
                         "Change parameters between steps, not during one.")

Row = Union[None, torch.Tensor, Sequence[torch.Tensor]]

_storage_of = torch.Tensor.untyped_storage
_storage_base = torch.UntypedStorage.data_ptr
_storage_bytes = torch.UntypedStorage.nbytes


def pin(rows: Sequence[Row], table: np.ndarray, offsets: np.ndarray, itemsize: int) -> Optional[Any]:
    """Holds the storage of every operand of a kernel call, or None when an address of ``table`` (uint64, one row
    per entry of ``rows``, ``n`` columns) no longer lies, with its elements, inside its tensor's storage (nothing is
    held then). ``offsets`` (int64, ``n + 1``): the prefix sums of the element counts; ``rows``: per row None (not
    read), ``n`` tensors (entry ``i`` covers ``offsets[i + 1] - offsets[i]`` elements of ``itemsize`` bytes), or
    one tensor holding the whole row back to back. Keep the result alive until the kernel returned."""
    n = table.shape[1] if table.ndim == 2 else table.shape[0]
    if tensor_table.active():
        if not (table.dtype == np.uint64 and table.flags.c_contiguous and offsets.dtype == np.int64
                and offsets.flags.c_contiguous and len(offsets) == n + 1):
            table = np.ascontiguousarray(table, dtype=np.uint64)
            offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        return tensor_table.pin(rows, table, offsets, n, itemsize)
    with torch._C.DisableTorchFunctionSubclass():  # (read from the tensors themselves, as the C++ pin reads them)
        return _pin_rows(rows, table, offsets, itemsize, n)


def _pin_rows(rows: Sequence[Row], table: np.ndarray, offsets: np.ndarray, itemsize: int, n: int) -> Optional[Any]:
    table = table.reshape(-1, n) if n else table.reshape(len(rows), 0)
    held: list[Any] = []
    lengths = np.diff(offsets).astype(np.uint64) * np.uint64(itemsize)
    for j, row in enumerate(rows):
        if row is None:
            continue
        if isinstance(row, torch.Tensor):
            tensors: Sequence[torch.Tensor] = [row]
            starts, sizes = table[j, :1], np.array([int(offsets[-1]) * itemsize], dtype=np.uint64)
        else:
            tensors, starts, sizes = row, table[j], lengths
            if len(tensors) != n:
                return None
        if not _covered(tensors, starts, sizes, held):
            return None
    return held


def pin_tensors(tensors: Sequence[torch.Tensor]) -> Optional[Any]:
    """``pin`` of tensors read whole from their current data addresses (the operands of one call, e.g. a rule on
    slices): returns ``(held, addresses)``, the addresses to hand to the kernel, or None when one is not a tensor
    whose elements lie inside its storage."""
    addresses = np.array([t.data_ptr() for t in tensors], dtype=np.uint64)
    sizes = np.array([t.numel() * t.element_size() for t in tensors], dtype=np.int64)
    held = _pin_each(tensors, addresses, sizes)
    return None if held is None else (held, addresses)


def _pin_each(tensors: Sequence[torch.Tensor], addresses: np.ndarray, sizes: np.ndarray) -> Optional[Any]:
    """Each tensor's storage held, its ``sizes[i]`` bytes from ``addresses[i]`` proven inside it; or None."""
    if tensor_table.active():
        kept = []
        for t, address, size in zip(tensors, addresses, sizes):
            one = tensor_table.pin([t], np.array([address], dtype=np.uint64), np.array([0, size], dtype=np.int64),
                                   1, 1)
            if one is None:
                return None
            kept.append(one)
        return kept
    held: list[Any] = []
    return held if _covered(tensors, addresses, sizes.astype(np.uint64), held) else None


def _covered(tensors: Sequence[torch.Tensor], starts: np.ndarray, sizes: np.ndarray, held: list[Any]) -> bool:
    """Whether each tensor's storage, taken now and added to ``held``, holds ``sizes[i]`` bytes from ``starts[i]``
    (the Python form of the C++ ``pin``). What is held is each tensor's storage object (``untyped_storage()``: a
    strong reference to the ``StorageImpl``, as an ``at::Tensor`` holds one), taken before its bounds are read, so
    an address proven here lies in memory ``held`` keeps whatever another thread does to the tensor meanwhile
    (``p.data = ...`` lets go of the tensor's reference, not of this one). One C-level pass per read: a tensor of the
    same storage made per operand (``.data``) cost ten times the read (0.6 to 0.9 µs a tensor, most of a step's
    Python checks). (Reading storages races with another thread's ``p.data = ...`` inside torch's bindings whatever
    is held: docs/architecture.md, "Threads".)"""
    try:
        storages = list(map(_storage_of, tensors))
    except (RuntimeError, NotImplementedError, TypeError):  # (a tensor without a storage of its own)
        return False
    held.append(storages)
    bases = np.fromiter(map(_storage_base, storages), dtype=np.uint64, count=len(storages))
    ends = bases + np.fromiter(map(_storage_bytes, storages), dtype=np.uint64, count=len(storages))
    starts = np.asarray(starts, dtype=np.uint64)
    sizes = np.asarray(sizes, dtype=np.uint64)
    inside = (bases != 0) & (starts >= bases) & (starts <= ends) & (sizes <= ends - np.minimum(starts, ends))
    return bool(np.all(inside | (sizes == 0)))
