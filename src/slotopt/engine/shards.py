"""FSDP2 sharded parameters: the optimizer's view of DTensor parameters as local shards (their layouts, their
gradients made local, the process groups they span, and a finiteness check agreed by every shard).

Functions of the optimizer, not a base class; ``OptimizerCore`` (engine/core.py) binds ``_local_pairs`` (a
pipeline stage) and ``_slot_axes`` (Adafactor overrides it) as its methods."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, Optional

import torch

from ..variables import is_sparse, variable_name
from . import distributed
from .plan import Pair

__all__ = ["shard_layouts", "shard_groups_of", "all_finite"]

Pairs = Iterable[Pair]


def shard_layouts(self, params: Sequence[torch.Tensor]) -> Optional[list[Optional[distributed.ShardLayout]]]:
    """For rules that are not element-wise: per parameter (a local shard the rule updates), where it sits
    in the whole FSDP2 tensor (None: not sharded). None when nothing is sharded (the single-process path)."""
    if not self._layouts:
        return None
    index, layouts = self._var_index, self._layouts
    return [layouts.get(index.get(id(p), -1)) for p in params]


def _slot_axes(self, name: str, slot: torch.Tensor, param: torch.Tensor) -> Optional[Sequence[int]]:
    """The parameter axes behind ``slot``'s axes, for showing a sharded parameter's slot as a DTensor:
    ``None`` for a slot shaped like the parameter's shard; faces with reduced slots (Adafactor's row and
    column moments) say which axes they keep. A slot with no answer (``()`` for a scalar) is kept whole."""
    return None if slot.shape == param.shape else ()


def _local_pairs(self, grads_and_vars: Pairs) -> Pairs:
    """FSDP2: ``(DTensor gradient, DTensor parameter)`` pairs become pairs of local shards (the pipeline's
    first stage). Without sharded parameters the pairs pass through untouched."""
    if not self._sharded:
        return grads_and_vars
    out = []
    for item in grads_and_vars:
        grad, var = item if isinstance(item, (tuple, list)) and len(item) == 2 else (None, item)
        if distributed.is_dtensor(var):
            pos = self._var_index.get(id(var))
            if pos is None:
                raise ValueError(
                    f"Sharded (FSDP2) parameter {variable_name(var, 'variable')} is unknown to this optimizer: "
                    "pass the sharded parameters with `params=` (or `build`) before the first step.")
            if is_sparse(grad):
                raise ValueError(
                    f"Sharded (FSDP2) parameter {self._var_names[pos]} received a row-sparse gradient "
                    f"({type(grad).__name__}); FSDP2 gradients are dense DTensors: densify it first.")
            if distributed.is_dtensor(grad):
                if tuple(grad.placements) != tuple(var.placements):
                    grad = grad.redistribute(var.device_mesh, var.placements)
                grad = distributed.local_view(grad)
            var = self._vars[pos]
        out.append((grad, var))
    return out


def shard_groups_of(self, pairs: Sequence[Pair]) -> Optional[list[list[Any]]]:
    """Per pair with a gradient: the process groups its variable is sharded over (None: nothing sharded)."""
    if not self._layouts:
        return None
    index, layouts = self._var_index, self._layouts
    groups = []
    for g, v in pairs:
        if g is None:
            continue
        layout = layouts.get(index.get(id(v), -1))
        groups.append(layout.groups() if layout is not None else [])
    return groups


def all_finite(self, grads: Sequence[torch.Tensor]) -> bool:
    """Every element of every gradient finite, on every shard (a loss-scale step is skipped everywhere or
    nowhere). One fused max-abs reduction per device (``torch._foreach_norm`` with ``ord=inf``: inf and NaN
    propagate and, unlike a 2-norm, it cannot overflow on large finite values), one host sync per device."""
    by_device: dict[torch.device, list[torch.Tensor]] = {}
    for g in grads:
        if g.numel():
            by_device.setdefault(g.device, []).append(g)
    # (``stack`` promotes mixed dtypes without narrowing: a huge finite float64 stays finite)
    finite = all(bool(torch.isfinite(torch.stack(torch._foreach_norm(ts, math.inf))).all())
                 for ts in by_device.values())
    flag = torch.tensor([0.0 if finite else 1.0])
    if self._sharded:
        groups = {id(gr): gr for layout in self._layouts.values() for gr in layout.groups()}
        for group in groups.values():
            torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX, group=group)
    return bool(flag.item() == 0.0)

