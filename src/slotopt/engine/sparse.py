"""Row-sparse gradients: duplicate summing and touched-row updates that never densify a table."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..variables import IndexedSlices

__all__ = ["deduplicate", "gather_rows", "scatter_rows", "densify"]


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
