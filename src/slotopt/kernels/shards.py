"""Sums over the shards of a sharded (FSDP2 DTensor) parameter, for update rules that are not element-wise.

Below the engine, since the kernels use them (Adam's fused AdamW norms, Adafactor's moments, Muon's matrices);
``engine/distributed.py`` re-exports them for the engine's own use.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Optional

import torch

__all__ = ["ShardLayout", "sum_over_layouts", "sum_over_shards"]


def sum_over_shards(values: list[torch.Tensor], groups: list[list[Any]]) -> list[torch.Tensor]:
    """``values[i]`` (a local partial sum) summed over ``groups[i]``; an empty list of groups keeps it local.

    One ``all_reduce`` per (process group, dtype, device): the values that group reduces travel in one buffer."""
    out = [value.clone() if value_groups else value for value, value_groups in zip(values, groups)]
    buckets: dict[tuple[int, torch.dtype, torch.device], tuple[Any, list[int]]] = {}
    for i, value_groups in enumerate(groups):
        for group in value_groups:
            key = (id(group), out[i].dtype, out[i].device)
            buckets.setdefault(key, (group, []))[1].append(i)
    for group, positions in buckets.values():
        flat = torch.cat([out[i].reshape(-1) for i in positions])
        torch.distributed.all_reduce(flat, op=torch.distributed.ReduceOp.SUM, group=group)
        for i, piece in zip(positions, torch.split(flat, [out[i].numel() for i in positions])):
            out[i] = piece.view(out[i].shape)
    return out


class ShardLayout:
    """Where a parameter's local shard sits in the whole (FSDP2 DTensor) tensor, for rules that are not
    element-wise: which axes are split over which process groups, and the whole tensor's shape.

    Every process calls the collectives in the same order (the pipeline visits the parameters in the same
    order everywhere). An axis split over several mesh dimensions lists each of their groups.
    """

    def __init__(self, dtensor: Any) -> None:
        self._mesh = dtensor.device_mesh
        self._placements = tuple(dtensor.placements)
        self.global_shape = tuple(dtensor.shape)
        self.numel = math.prod(self.global_shape)
        rank = len(self.global_shape)
        self._groups: dict[int, list[Any]] = {}
        for mesh_dim, placement in enumerate(self._placements):
            if placement.is_shard():
                self._groups.setdefault(placement.dim % max(rank, 1), []).append(self._mesh.get_group(mesh_dim))

    def is_split(self, axis: int) -> bool:
        """Whether the parameter's ``axis`` (negative counts from the end) is split over processes."""
        return axis % len(self.global_shape) in self._groups

    def groups(self, axes: Optional[Sequence[int]] = None) -> list[Any]:
        """The process groups holding the other parts of the parameter's ``axes`` (None: all axes)."""
        rank = len(self.global_shape)
        chosen = self._groups if axes is None else {a % rank for a in axes}
        return [group for axis in sorted(chosen) for group in self._groups.get(axis, ())]

    def sum(self, partial: torch.Tensor, axes: Optional[Sequence[int]] = None) -> torch.Tensor:
        """``partial`` (a sum over the local shard along the parameter's ``axes``; None: all of them) summed over
        the processes holding the other parts of those axes."""
        return sum_over_shards([partial], [self.groups(axes)])[0]

    def gather(self, local: torch.Tensor) -> torch.Tensor:
        """The whole tensor from every process's shard (``local`` shaped like this process's shard)."""
        return self.wrap(local).full_tensor()

    def local_part(self, whole: torch.Tensor) -> torch.Tensor:
        """This process's shard of ``whole`` (the same on every process): a slice, no communication."""
        from torch.distributed.tensor import distribute_tensor

        return distribute_tensor(whole, self._mesh, self._placements, src_data_rank=None).to_local()

    def wrap(self, local: torch.Tensor, axes: Optional[Sequence[int]] = None) -> Any:
        """``local`` as a DTensor. ``axes`` names the parameter axis behind each of ``local``'s axes (a slot
        reduced over some axes, such as Adafactor's row and column moments); None: shaped like the parameter.
        A slot keeps the splits of the axes it has and is replicated over the others."""
        from torch.distributed.tensor import DTensor, Replicate, Shard

        rank = len(self.global_shape)
        axes = list(range(rank)) if axes is None else [a % rank for a in axes]
        placements = [Shard(axes.index(p.dim % rank)) if p.is_shard() and p.dim % rank in axes else
                      (Replicate() if p.is_shard() else p) for p in self._placements]
        shape = torch.Size([self.global_shape[a] for a in axes])
        stride = torch.empty(shape, device="meta").stride()
        return DTensor.from_local(local, self._mesh, placements, run_check=False, shape=shape, stride=stride)


def sum_over_layouts(partials: Sequence[torch.Tensor], layouts: Sequence[Optional[ShardLayout]],
                     axes: Optional[Sequence[int]] = None) -> list[torch.Tensor]:
    """``partials[i]`` (a local sum over ``axes`` of a shard laid out as ``layouts[i]``; None: not sharded)
    summed over its shards, with one ``all_reduce`` per process group for all of them."""
    return sum_over_shards(list(partials), [[] if layout is None else layout.groups(axes) for layout in layouts])
