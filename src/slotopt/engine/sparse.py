"""Row-sparse gradients: duplicate summing and touched-row updates that never densify a table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Callable

import torch

from ..variables import IndexedSlices
from . import blocks

__all__ = ["deduplicate", "gather_rows", "scatter_rows", "densify", "update_by_row_blocks"]

RowUpdate = Callable[[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]], None]


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


def update_by_row_blocks(var: torch.Tensor, grad: IndexedSlices, slots: Sequence[torch.Tensor],
                         update: RowUpdate) -> None:
    """The exact dense result of a sparse gradient for an element-wise rule, without a table-sized gradient.

    Where a sparse gradient must update every row exactly as its dense equivalent would (Keras 3), the rule
    runs over the table a block of rows at a time, ``update([rows of var], [dense gradient of those rows],
    [rows of each slot])``: the time of a dense step, the extra memory of one block.
    """
    rows, values = deduplicate(grad)
    order = torch.argsort(rows)
    rows, values = rows[order], values[order].to(var.dtype)
    row_elements = max(1, var[0].numel())
    block_rows = max(1, (blocks.CPU_BLOCK_ELEMENTS * 8) // row_elements)
    starts = list(range(0, var.shape[0], block_rows))
    bounds = torch.searchsorted(rows, torch.tensor(starts + [var.shape[0]], dtype=rows.dtype,
                                                   device=rows.device)).tolist()
    for i, start in enumerate(starts):
        stop = min(start + block_rows, var.shape[0])
        block_grad = torch.zeros((stop - start, *var.shape[1:]), dtype=var.dtype, device=var.device)
        lo, hi = bounds[i], bounds[i + 1]
        if hi > lo:
            block_grad.index_copy_(0, rows[lo:hi] - start, values[lo:hi])
        update([var[start:stop]], [block_grad], [slot[start:stop] for slot in slots])
