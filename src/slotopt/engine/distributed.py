"""Explicit gradient aggregation across processes (``slotopt.distributed.all_reduce_sum`` / ``all_reduce_mean``).

TensorFlow's OptimizerV2 sums gradients over the replicas of its distribution strategy before clipping and
updating. On PyTorch, DDP and FSDP2 have already reduced the gradients when the optimizer runs, so no slotopt
optimizer reduces them again by default (that would multiply every gradient by the world size). A manual
data-parallel loop without DDP asks for TensorFlow's contract explicitly by passing ``all_reduce_sum`` (or
``all_reduce_mean``) as a legacy optimizer's ``gradient_aggregator``: with a ``torch.distributed`` group of more
than one process it reduces every gradient; otherwise it returns the pairs unchanged (no copy, no communication).

Dense gradients are summed with one ``all_reduce`` per (device, dtype) bucket: they are flattened into one
buffer, reduced, and split back, so the caller's gradient tensors (possibly ``.grad``) are never modified.
Row-sparse gradients (``IndexedSlices``) are gathered, not reduced: the result holds every process's rows,
concatenated in rank order, with duplicates left for the optimizer to sum (as TensorFlow's all-reduce of
``IndexedSlices`` does).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Optional

import torch

from ..kernels.shards import (  # below the engine: kernels use them
    ShardLayout,
    sum_over_layouts,
    sum_over_shards,
)
from ..variables import IndexedSlices, as_indexed_slices, is_sparse

__all__ = ["is_distributed", "world_size", "all_reduce_sum_gradients", "all_reduce_mean_gradients",
           "no_aggregation", "ShardLayout", "sum_over_layouts", "sum_over_shards"]


def no_aggregation(grads_and_vars: Iterable[tuple[Any, torch.Tensor]]) -> list[tuple[Any, torch.Tensor]]:
    """The default aggregator: the gradients as they are (DDP/FSDP2 or a single process already reduced them)."""
    return list(grads_and_vars)


def world_size() -> int:
    """Number of processes in the default ``torch.distributed`` group (1 when it is not initialised)."""
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()):
        return 1
    return dist.get_world_size()


def is_distributed() -> bool:
    """True when a ``torch.distributed`` default group with more than one process is initialised."""
    return world_size() > 1


def all_reduce_sum_gradients(grads_and_vars: Iterable[tuple[Any, torch.Tensor]]) -> list[tuple[Any, torch.Tensor]]:
    """Sums each gradient over all processes; the identity on a single process.

    ``None`` gradients stay ``None``. Every process must call this with the same variables in the same order
    (as with any collective).

    Example:
        >>> import torch
        >>> from slotopt.engine.distributed import all_reduce_sum_gradients
        >>> g, w = torch.ones(2), torch.zeros(2)
        >>> all_reduce_sum_gradients([(g, w)])[0][0] is g  # not distributed: unchanged
        True
    """
    pairs = list(grads_and_vars)
    if not is_distributed():
        return pairs
    out: list[Any] = [g for g, _ in pairs]
    buckets: dict[tuple[torch.device, torch.dtype], list[int]] = {}
    for i, (grad, _) in enumerate(pairs):
        if grad is None:
            continue
        if is_sparse(grad):
            out[i] = _all_gather_rows(as_indexed_slices(grad))
        else:
            buckets.setdefault((grad.device, grad.dtype), []).append(i)
    for positions in buckets.values():
        tensors = [pairs[i][0] for i in positions]
        flat = torch.cat([t.reshape(-1) for t in tensors])
        torch.distributed.all_reduce(flat, op=torch.distributed.ReduceOp.SUM)
        for i, piece, t in zip(positions, torch.split(flat, [t.numel() for t in tensors]), tensors):
            out[i] = piece.view(t.shape)
    return [(g, v) for g, (_, v) in zip(out, pairs)]


def all_reduce_mean_gradients(grads_and_vars: Iterable[tuple[Any, torch.Tensor]]) -> list[tuple[Any, torch.Tensor]]:
    """``all_reduce_sum_gradients`` divided by the number of processes (what DDP computes).

    Example:
        >>> import torch
        >>> from slotopt.engine.distributed import all_reduce_mean_gradients
        >>> all_reduce_mean_gradients([(torch.ones(2), torch.zeros(2))])[0][0].tolist()
        [1.0, 1.0]
    """
    pairs = all_reduce_sum_gradients(grads_and_vars)
    size = world_size()
    if size == 1:
        return pairs
    out = []
    for grad, var in pairs:
        if isinstance(grad, IndexedSlices):
            grad = IndexedSlices(grad.values / size, grad.indices, grad.dense_shape)
        elif grad is not None:
            grad = grad / size
        out.append((grad, var))
    return out


def _all_gather_rows(grad: IndexedSlices) -> IndexedSlices:
    """Concatenates every process's ``(indices, values)`` in rank order (row counts may differ)."""
    dist = torch.distributed
    n = world_size()
    count = torch.tensor([grad.indices.numel()], dtype=torch.int64, device=grad.indices.device)
    counts = [torch.zeros_like(count) for _ in range(n)]
    dist.all_gather(counts, count)
    sizes = [int(c) for c in counts]
    longest = max(sizes)
    indices = _padded(grad.indices, longest)
    values = _padded(grad.values, longest)
    gathered_indices = [torch.empty_like(indices) for _ in range(n)]
    gathered_values = [torch.empty_like(values) for _ in range(n)]
    dist.all_gather(gathered_indices, indices)
    dist.all_gather(gathered_values, values)
    return IndexedSlices(
        torch.cat([v[:k] for v, k in zip(gathered_values, sizes)]),
        torch.cat([i[:k] for i, k in zip(gathered_indices, sizes)]),
        grad.dense_shape,
    )


def _padded(t: torch.Tensor, rows: int) -> torch.Tensor:
    if t.shape[0] == rows:
        return t.contiguous()
    pad = torch.zeros((rows - t.shape[0],) + tuple(t.shape[1:]), dtype=t.dtype, device=t.device)
    return torch.cat([t, pad])


# ---------------------------------------------------------------------------------------------- sharded parameters
# FSDP2 (``fully_shard``) hands the optimizer DTensor parameters and gradients. Element-wise rules run on the local
# shards (views of the parameter's storage): no gathering. What needs a whole tensor sums the local parts over the
# mesh dimensions the tensor is sharded on: norms for clipping, loss-scale finiteness, Lamb's trust ratio,
# Adafactor's RMS and its factored means over a sharded axis. Muon's matrix products gather the whole matrix.


def is_dtensor(value: Any) -> bool:
    return hasattr(value, "device_mesh") and hasattr(value, "to_local") and hasattr(value, "placements")


def known_local_view(value: Any) -> Optional[torch.Tensor]:
    """The local-shard view ``local_view`` made for ``value`` (a DTensor), or None when it made none."""
    return getattr(value, "_slotopt_local_view", None)


def local_view(value: Any) -> torch.Tensor:
    """The local shard of a DTensor (a view of its storage: in-place updates update the parameter). The same view
    object every time, so that optimizers sharing a parameter (a loss-scale wrapper and its inner optimizer)
    recognise it."""
    view = getattr(value, "_slotopt_local_view", None)
    if view is None:
        with torch.no_grad():
            view = value.to_local()
        value._slotopt_local_view = view
    return view
