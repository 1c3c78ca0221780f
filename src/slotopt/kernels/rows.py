"""Row-sparse gradients: duplicate summing, TensorFlow's slice densification and scatter order, and updates
that never hold a table-sized temporary."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Callable, Optional

import torch

from ..variables import IndexedSlices
from . import blocks
from .native import tensor_table

__all__ = ["first_out_of_range", "check_rows", "deduplicate", "gather_rows", "scatter_rows", "densify", "scatter_add_", "segment_sum", "summed", "last_repeats",
           "update_by_row_blocks"]

SliceUpdate = Callable[[torch.Tensor, IndexedSlices, list[torch.Tensor]], None]


def first_out_of_range(indices: torch.Tensor, rows: int) -> int:
    """The flat position of the first element of ``indices`` outside ``[0, rows)``, or -1 when there is none: read
    in place by the C++ table where it runs (contiguous CPU int64/int32 indices), else with torch."""
    found = tensor_table.first_out_of_range(indices, rows)
    if found is not None:
        return found
    if indices.numel() and (int(indices.min()) < 0 or int(indices.max()) >= rows):
        flat = indices.reshape(-1).to(torch.int64)  # (``rows`` may not fit the indices' own dtype)
        return int(((flat < 0) | (flat >= rows)).nonzero()[0, 0])
    return -1


def check_rows(indices: torch.Tensor, rows: int) -> None:
    """Raises ``ValueError`` unless every index names a row of a table of ``rows`` rows (checked before a rule on
    slices writes anything: a scatter that stops at a bad index has already written the slices before it)."""
    bad = first_out_of_range(indices, rows)
    if bad >= 0:
        raise ValueError(f"Argument `indices` must be in [0, {rows}) (the rows of the variable). Received: "
                         f"indices[{bad}]={int(indices.reshape(-1)[bad])} (indices={indices.tolist()[:20]})")


def deduplicate(grad: IndexedSlices) -> tuple[torch.Tensor, torch.Tensor]:
    """Sums the values of repeated indices. Returns ``(unique_indices, summed_values)``.

    Duplicates are added into a zero row in input order, as ``unsorted_segment_sum`` does.
    """
    unique, inverse = torch.unique(grad.indices, sorted=True, return_inverse=True)
    if unique.numel() == grad.indices.numel():
        return grad.indices, grad.values
    summed = torch.zeros((unique.numel(),) + tuple(grad.values.shape[1:]), dtype=grad.values.dtype,
                         device=grad.values.device)
    summed.index_add_(0, inverse, grad.values)
    return unique, summed


def gather_rows(tensors: Sequence[torch.Tensor], rows: torch.Tensor) -> list[torch.Tensor]:
    """Copies the given rows of each tensor (memory proportional to the touched rows)."""
    return [t.index_select(0, rows) for t in tensors]


def scatter_rows(targets: Sequence[torch.Tensor], rows: torch.Tensor, values: Sequence[torch.Tensor]) -> None:
    """Writes updated rows back in place."""
    for target, value in zip(targets, values):
        target.index_copy_(0, rows, value)


def densify(grad: IndexedSlices, like: torch.Tensor) -> torch.Tensor:
    """The dense gradient equal to ``grad`` (duplicates summed), shaped like ``like``."""
    return grad.to_dense(like.shape).to(like.dtype)


def scatter_add_(target: torch.Tensor, indices: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """``target[indices[j]] += values[j]`` for j in slice order, each add rounded (TensorFlow's CPU scatter-add).

    A contiguous target is updated through its flat view with one index per element: the CPU kernel of a 1-D
    ``index_add_`` is one serial loop in index order, where a row-wise ``index_add_`` dispatches one add per slice.
    """
    if values.dim() > 1 and target.is_contiguous() and values.numel():
        width = values[0].numel()
        flat = (indices.unsqueeze(1) * width + torch.arange(width, device=indices.device)).reshape(-1)
        target.view(-1).index_add_(0, flat, values.reshape(-1))
        return target
    return target.index_add_(0, indices, values)


def segment_sum(values: torch.Tensor, indices: torch.Tensor, rows: int) -> torch.Tensor:
    """TensorFlow's densification of slices (``UnsortedSegmentSum``): a zero table of ``rows`` rows, then
    ``out[indices[j]] += values[j]`` for j in slice order, each add rounded. Repeats of a row are summed from 0 in
    slice order, never sorted or coalesced first."""
    out = torch.zeros((rows, *values.shape[1:]), dtype=values.dtype, device=values.device)
    return scatter_add_(out, indices, values)


def summed(grad: IndexedSlices, like: torch.Tensor, values: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``Σ(x)`` of the Keras 3 sparse spec (§2.3): the densified value of per-slice ``values`` (default
    ``grad.values``) over ``grad.indices``, with as many rows as ``like``."""
    return segment_sum(grad.values if values is None else values, grad.indices, like.shape[0])


def last_repeats(grad: IndexedSlices) -> torch.Tensor:
    """The values of the last slice of each row (one row per distinct index).

    What a non-zero-preserving op (``isfinite``) sees of slices on Keras 3's TensorFlow backend: the dense result
    is filled row by row in slice order, so only the last repeat of a row survives (spec §2.2, §3.8).
    """
    k = grad.indices.numel()
    if k == 0:
        return grad.values
    unique, inverse = torch.unique(grad.indices, return_inverse=True)
    if unique.numel() == k:
        return grad.values
    last = torch.full((unique.numel(),), -1, dtype=torch.int64, device=grad.indices.device)
    last.scatter_reduce_(0, inverse, torch.arange(k, device=grad.indices.device), reduce="amax")
    return grad.values.index_select(0, last)


def update_by_row_blocks(var: torch.Tensor, grad: IndexedSlices, slots: Sequence[torch.Tensor],
                         update: SliceUpdate) -> None:
    """Runs a rule whose state is rewritten on every row over the table a block of rows at a time.

    ``update(rows of var, the slices of those rows, [rows of each slot])``: the slices keep their order and carry
    indices local to the block, so a rule that densifies them per block gets exactly the rows of the whole-table
    densification. Every block is visited (rows without a slice still decay); the extra memory is one block's.
    """
    n = var.shape[0]
    # Several cache blocks per row block: the element-wise kernels cut each row block again (kernels/blocks.py),
    # and fewer, larger row blocks keep the per-call overhead small next to the work.
    block_rows = max(1, (blocks.CPU_BLOCK_ELEMENTS * 8) // max(1, var[0].numel()))
    if n <= block_rows or var.device.type != "cpu":
        update(var, grad, list(slots))
        return
    block_of = torch.div(grad.indices, block_rows, rounding_mode="floor")
    order = torch.argsort(block_of, stable=True)  # stable: slice order kept within each block
    indices, values = grad.indices[order], grad.values[order]
    starts = list(range(0, n, block_rows))
    bounds = torch.searchsorted(block_of[order], torch.arange(len(starts) + 1, device=block_of.device)).tolist()
    for i, start in enumerate(starts):
        stop = min(start + block_rows, n)
        lo, hi = bounds[i], bounds[i + 1]
        local = IndexedSlices(values[lo:hi], indices[lo:hi] - start, (stop - start, *var.shape[1:]))
        update(var[start:stop], local, [slot[start:stop] for slot in slots])
