"""The launch table of a multi-tensor Triton call: one launch per group, whatever its number of tensors.

The table is one int64 buffer on the tensors' device: the operands' addresses (``operands x T``, row ``k`` for
operand list ``k``), then one row per program, ``(tensor, start, end)``: the tensor it updates and the range of
that tensor's elements it covers (chunks of ``BLOCK``, like torch's multi-tensor apply). It depends only on the
addresses and sizes, so it is built once for a set of addresses and reused while they stay (a step's tensors
normally keep their storage), and otherwise sent with a copy that does not block the host. The per-step scalars
go the same way: one small copy from pinned memory, never a synchronising one.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import NamedTuple, Optional

import numpy as np
import torch

__all__ = ["BLOCK", "Launch", "launch_table", "scalar_vector", "clear"]

#: Elements per program.
BLOCK = 1024
#: Tables kept (by addresses and sizes): a few optimizers, each with a few groups, share it.
_CACHE_SIZE = 64
_cache: OrderedDict[tuple[object, ...], Launch] = OrderedDict()


class Launch(NamedTuple):
    """One group's launch: the table on the device and what the kernel is told about it."""

    buffer: torch.Tensor  # the whole table (keeps both views' memory alive)
    addresses: torch.Tensor  # operands x tensors
    meta: torch.Tensor  # programs x 3
    tensors: int
    programs: int
    aligned: bool


def clear() -> None:
    """Forgets every table (tests; a table holds no tensor of the caller's)."""
    _cache.clear()


def _upload(host: np.ndarray, device: torch.device) -> torch.Tensor:
    values = torch.from_numpy(host)
    if device.type != "cuda":
        return values  # the interpreter reads the host array itself
    # Pinned, then copied on the current stream without waiting: the caching host allocator keeps the pinned
    # block until the copy has run, so nothing here synchronises with the device.
    return values.pin_memory().to(device, non_blocking=True)


def scalar_vector(values: Sequence[float], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The rule's scalars as a tensor of the variables' dtype on their device (float64 rules keep float64
    scalars: a Python float kernel argument would be a float32 parameter)."""
    host = np.asarray(values, dtype=np.float64 if dtype == torch.float64 else np.float32)
    return _upload(host, device)


def _addresses(tensors: Sequence[torch.Tensor], sizes: Sequence[int], offsets: np.ndarray,
               dtype: torch.dtype, device: torch.device) -> Optional[list[int]]:
    """Each tensor's data address, or None when one is not a contiguous tensor of ``dtype`` on ``device`` of its
    counterpart's size. One flat tensor for a group of several (slotopt's packed state) gives per-tensor
    addresses inside it."""
    if len(tensors) == len(sizes):
        for t, n in zip(tensors, sizes):
            if t.dtype != dtype or t.device != device or t.numel() != n or not t.is_contiguous():
                return None
        return [t.data_ptr() for t in tensors]
    if len(tensors) == 1 and len(sizes) > 1:
        flat = tensors[0]
        if flat.dtype != dtype or flat.device != device or flat.numel() != int(offsets[-1]) \
                or not flat.is_contiguous():
            return None
        return (flat.data_ptr() + offsets[:-1] * flat.element_size()).tolist()
    return None


def launch_table(lists: Sequence[Optional[Sequence[torch.Tensor]]]) -> Optional[Launch]:
    """The launch of a group (the first list gives the tensors; an absent optional list reads as the first, its
    row is never read), or None when a tensor does not fit (see ``_addresses``)."""
    first = lists[0]
    assert first is not None
    dtype, device = first[0].dtype, first[0].device
    sizes = [t.numel() for t in first]
    offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    rows = []
    for tensors in lists:
        row = _addresses(first if tensors is None else tensors, sizes, offsets, dtype, device)
        if row is None:
            return None
        rows.append(row)
    key = (device, dtype, tuple(sizes), *map(tuple, rows))
    launch = _cache.get(key)
    if launch is not None:
        _cache.move_to_end(key)
        return launch
    table = np.array(rows, dtype=np.uint64).view(np.int64)
    counts = -(-np.asarray(sizes, dtype=np.int64) // BLOCK)  # empty tensors take no program
    which = np.repeat(np.arange(len(sizes), dtype=np.int64), counts)
    first_program = np.cumsum(counts) - counts
    meta = np.empty((len(which), 3), dtype=np.int64)
    meta[:, 0] = which
    meta[:, 1] = (np.arange(len(which), dtype=np.int64) - first_program[which]) * BLOCK
    meta[:, 2] = np.asarray(sizes, dtype=np.int64)[which]
    # Vector loads and stores need every operand 16-byte aligned and every chunk's end a multiple of 16 elements
    # (the starts are multiples of BLOCK); the arithmetic is the same either way.
    aligned = bool(np.all(table % 16 == 0) and np.all(np.asarray(sizes) % 16 == 0))
    host = np.concatenate([table.ravel(), meta.ravel()])
    buffer = _upload(host, device)
    cut = table.size
    launch = Launch(buffer, buffer[:cut], buffer[cut:], len(sizes), len(which), aligned)
    _cache[key] = launch
    if len(_cache) > _CACHE_SIZE:
        _cache.popitem(last=False)
    return launch
