"""Optimizer state of small variables packed into one flat buffer per (slot, device, dtype).

A model with thousands of small tensors (biases, norms, small layers) pays a per-tensor cost in every
multi-tensor op: on the CPU about a microsecond per tensor per op, which dominates the arithmetic. When the
optimizer state of those tensors lives in one buffer, an element-wise kernel can run over the buffer as a
single tensor: the gradients are packed once, the variables are packed and written back once, and every op
in between is one call. Each slot is still an ordinary tensor for the user: a view of the buffer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable, Optional

import numpy as np
import torch
from torch._C._nn import unflatten_dense_tensors

from ..kernels import native
from ..kernels import triton as _triton
from .plan import Ordinary

__all__ = ["FlatState", "SMALL_TENSOR_ELEMENTS", "constant_fill", "initial_value"]

#: Variables up to this many elements get their state packed.
SMALL_TENSOR_ELEMENTS = 1 << 15

Kind = tuple[torch.device, torch.dtype]


def constant_fill(initializer: Any, round_number: Callable[[float, torch.dtype], float]
                  ) -> Optional[Callable[[torch.dtype], float]]:
    """For a constant initializer ("zeros", "ones" or a number), its value in a given dtype; else None.

    ``round_number`` is the generation's rule for a number: Keras 3's ``Constant`` casts through float32
    (``constants.cast``), tf.keras legacy rounds it straight to the slot's dtype (``constants.literal``).
    """
    if isinstance(initializer, str):
        value = {"zeros": 0.0, "ones": 1.0}.get(initializer)
        return None if value is None else (lambda dtype: value)
    if isinstance(initializer, (int, float, np.integer, np.floating)) and not isinstance(initializer, bool):
        return lambda dtype: round_number(float(initializer), dtype)
    return None


def initial_value(initializer: Any, shape: Sequence[int], dtype: torch.dtype, device: Any,
                  round_number: Callable[[float, torch.dtype], float]) -> torch.Tensor:
    """The initial value of a slot: "zeros", "ones", a number, a tensor, or a callable ``fn(shape, dtype)``."""
    shape = tuple(int(s) for s in shape)
    fill = constant_fill(initializer, round_number)
    if fill is not None:
        return torch.full(shape, fill(dtype), dtype=dtype, device=device)
    if isinstance(initializer, (torch.Tensor, np.ndarray)):
        value = torch.as_tensor(initializer).to(dtype=dtype, device=device)
        if value.dim() == 0 and shape != ():  # a scalar tensor is a constant (Keras's ``Constant(value)``)
            return value.expand(shape).clone()
        return value.clone()
    if callable(initializer):
        return torch.as_tensor(initializer(shape, dtype)).to(dtype=dtype, device=device)
    if isinstance(initializer, str):
        raise ValueError(
            f"Unknown initializer: {initializer!r}. Use 'zeros', 'ones', a number, a tensor or a callable "
            "`fn(shape, dtype)`."
        )
    raise TypeError(
        "Argument `initializer` must be 'zeros', 'ones', a number, a tensor or a callable `fn(shape, dtype)`. "
        f"Received: initializer={initializer!r}"
    )


class FlatState:
    """Where the packed state of small variables lives, and which variables it covers."""

    def __init__(self) -> None:
        self._buffers: dict[tuple[str, torch.device, torch.dtype], torch.Tensor] = {}
        self._positions: dict[tuple[str, torch.device, torch.dtype], tuple[int, ...]] = {}
        self._views: dict[tuple[str, torch.device, torch.dtype], list[torch.Tensor]] = {}
        self._staging: dict[tuple[str, torch.device, torch.dtype], tuple[tuple[int, ...], torch.Tensor, list[torch.Tensor]]] = {}

    @staticmethod
    def packable(var: torch.Tensor) -> bool:
        return var.numel() <= SMALL_TENSOR_ELEMENTS and var.is_contiguous()

    def allocate(self, slot_name: str, refs: Sequence[tuple[int, torch.Tensor]],
                 fill: Callable[[torch.dtype], float]) -> dict[int, torch.Tensor]:
        """Packs the state ``slot_name`` of the packable ``(position, variable)`` pairs, filled with
        ``fill(dtype)``.

        Returns ``{position: view}`` for the packed variables (others are left to the caller).
        """
        views: dict[int, torch.Tensor] = {}
        by_kind: dict[Kind, list[tuple[int, torch.Tensor]]] = {}
        for pos, var in refs:
            if self.packable(var):
                by_kind.setdefault((var.device, var.dtype), []).append((pos, var))
        for (device, dtype), members in by_kind.items():
            if len(members) < 2 or (slot_name, device, dtype) in self._buffers:
                continue
            buffer = torch.full((sum(v.numel() for _, v in members),), fill(dtype), dtype=dtype, device=device)
            self._buffers[(slot_name, device, dtype)] = buffer
            self._positions[(slot_name, device, dtype)] = tuple(pos for pos, _ in members)
            for (pos, _), view in zip(members, unflatten_dense_tensors(buffer, [v for _, v in members])):
                views[pos] = view
        return views

    def covered(self, slot_names: Sequence[str], kind: Kind) -> Optional[tuple[int, ...]]:
        """The positions whose ``slot_names`` state is packed together for ``kind``, if all names agree."""
        found: Optional[tuple[int, ...]] = None
        for name in slot_names:
            positions = self._positions.get((name, *kind))
            if positions is None or (found is not None and positions != found):
                return None
            found = positions
        return found

    def stage(self, role: str, positions: tuple[int, ...], tensors: Sequence[torch.Tensor]) -> torch.Tensor:
        """Copies ``tensors`` (those of ``positions``) into a persistent flat buffer and returns the buffer.

        Reusing the buffer avoids allocating (and page-faulting) a fresh one at every step.
        """
        first = tensors[0]
        key = (role, first.device, first.dtype)
        entry = self._staging.get(key)
        if entry is None or entry[0] is not positions:
            buffer = torch.empty(sum(t.numel() for t in tensors), dtype=first.dtype, device=first.device)
            entry = (positions, buffer, list(unflatten_dense_tensors(buffer, list(tensors))))
            self._staging[key] = entry
        torch._foreach_copy_(entry[2], list(tensors))
        return entry[1]

    def unstage(self, role: str, targets: Sequence[torch.Tensor]) -> None:
        """Copies the staged buffer of ``role`` back into ``targets``."""
        first = targets[0]
        torch._foreach_copy_(list(targets), self._staging[(role, first.device, first.dtype)][2])

    def update_packed(self, group: Sequence[int], variables: Sequence[torch.Tensor],
                      grads: dict[int, torch.Tensor], slot_names: Sequence[str],
                      update: Callable[[list[torch.Tensor], list[torch.Tensor], dict[str, list[torch.Tensor]]], None],
                      step: Optional[Ordinary] = None) -> list[int]:
        """Runs ``update`` once over the packed small variables of ``group``; returns the positions left over.

        The variables and gradients are staged into flat buffers, the element-wise rule runs over them and the
        packed state as single tensors, and the variables are written back: the same arithmetic, in one call.
        Where the compiled rules (CPU) or the Triton kernels (learnt at the first step) take the rule, the
        variables and gradients stay where they are and nothing is staged.
        An ordinary ``step`` (engine/plan.py): its plan keeps what this derives from the positions alone.
        """
        if len(group) < 2:
            return list(group)
        first = variables[group[0]]
        kind = (first.device, first.dtype)
        covered = self.covered(slot_names, kind)
        plan = step.plan if step is not None else None
        remembered = plan.memo.get(("packed", id(group))) if plan is not None else None
        if remembered is None or remembered[0] is not covered or remembered[4] is not group:
            if covered is None or not set(covered) <= set(group):
                return group if plan is not None else list(group)  # (a plan's group: kept, never changed)
            done = set(covered)
            params = [variables[p] for p in covered]
            remembered = (covered, params, [p for p in group if p not in done],
                          plan.verified(covered, params) if plan is not None and native.routes(first) else None,
                          group)
            if plan is not None:
                plan.memo[("packed", id(group))] = remembered
        covered, params, left_over, verified, _ = remembered
        if native.routes(first) is not None:
            # The compiled rules (and Triton's, on a device) take the variables and gradients where they are, with
            # the packed state as per-variable views of its buffer: one call per group, and no staging copies.
            if verified is not None and step is not None:  # an ordinary step: addresses read once, in its plan
                update(verified, step.gradients(covered), self.views(slot_names, kind, params))
            else:
                update(params, native.Matched([grads[p] for p in covered]), self.views(slot_names, kind, params))
        elif self.__dict__.get("_direct", {}).get(kind):
            # A CUDA group whose rule the Triton kernels took: the variables and gradients where they are, the
            # packed state as one flat operand of the same launch (the same arithmetic, element for element).
            # Staging them (below) costs three multi-tensor copies of the group, ~100 launches for 2,000 small
            # tensors: the kernel itself is one.
            launched = _triton.launches()
            update(params, native.Matched([grads[p] for p in covered]), self.buffers(slot_names, kind))
            if _triton.launches() == launched:  # (torch's ops took it this time: staged again from the next step)
                self._direct[kind] = False
        else:
            launched = _triton.launches()
            flat_params = self.stage("params", covered, params)
            flat_grads = self.stage("grads", covered, [grads[p] for p in covered])
            update([flat_params], [flat_grads], self.buffers(slot_names, kind))
            self.unstage("params", params)
            # (learnt at the first step: a rule Triton does not take keeps the staged buffers, one foreach op each;
            # CPU tensors reach Triton only under its interpreter)
            took = _triton.launches() > launched
            if took or not first.is_cpu:
                self.__dict__.setdefault("_direct", {})[kind] = took
        return left_over

    def views(self, slot_names: Sequence[str], kind: Kind, like: Sequence[torch.Tensor]
              ) -> dict[str, list[torch.Tensor]]:
        """Per-variable views of the packed buffers (shaped like ``like``), made once per buffer."""
        out = {}
        for name in slot_names:
            key = (name, *kind)
            views = self._views.get(key)
            if views is None:
                views = self._views[key] = native.FlatViews(unflatten_dense_tensors(self._buffers[key], list(like)),
                                                            self._buffers[key])
            out[name] = views
        return out

    def relink(self, slots: dict[str, dict[int, torch.Tensor]]) -> None:
        """After unpickling: every packed slot a view of its buffer again, with the value it was saved with.

        ``pickle`` (unlike ``torch.save`` and ``copy.deepcopy``) writes each tensor's storage on its own, so the
        slots come back as separate tensors: the foreach rules would update the buffers and the slots would stop
        moving. Each slot object is rebound in place (``set_``), so every reference to it sees the buffer."""
        self._views.clear()  # views and staging buffers of the old layout: made again when first used
        self._staging.clear()
        with torch.no_grad():
            for (name, _device, _dtype), buffer in self._buffers.items():
                table = slots.get(name, {})
                offset = 0
                storage = buffer.untyped_storage()
                for pos in self._positions[(name, _device, _dtype)]:
                    slot = table.get(pos)
                    if slot is None:  # (not made yet: nothing to tie)
                        break
                    n = slot.numel()
                    if slot.untyped_storage().data_ptr() != storage.data_ptr():
                        buffer[offset:offset + n].copy_(slot.detach().reshape(-1))
                        slot.set_(storage, buffer.storage_offset() + offset, slot.shape,
                                  torch.empty(slot.shape, device="meta").stride())
                    offset += n

    def buffers(self, slot_names: Sequence[str], kind: Kind) -> dict[str, list[torch.Tensor]]:
        return {name: [self._buffers[(name, *kind)]] for name in slot_names}
