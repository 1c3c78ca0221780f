"""Cache-sized blocks for element-wise kernels on the CPU.

An element-wise update is a handful of passes over the same memory. Run over whole tensors, every pass streams
the full tensors through DRAM and every temporary is a fresh large allocation (page faults for each step).
Run block by block, with blocks small enough that all of a block's operands and temporaries stay in cache,
only the first pass reads DRAM and temporaries are reused from the heap. On CUDA the whole group is one block:
there the cost is kernel launches, which blocking would multiply.

Tensors larger than a block are cut into contiguous flat views, so in-place updates of the views update the
original tensors. Only element-wise kernels may run on blocks (not ones that need whole-tensor norms).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from typing import Any, Callable, Optional

import torch

__all__ = ["BlockPlan", "plan_blocks", "elementwise", "CPU_BLOCK_ELEMENTS"]

#: Elements per block on the CPU: about 0.5 MB per float32 operand.
CPU_BLOCK_ELEMENTS = 1 << 17

Piece = tuple[int, int, int]  # (tensor position in the list, start element, end element)


class BlockPlan:
    """How to cut parallel tensor lists into blocks; computed once per group of shapes."""

    def __init__(self, blocks: list[list[Piece]], whole: bool, numels: Sequence[int] = ()) -> None:
        self.blocks = blocks
        self.whole = whole  # one block holding every tensor unchanged
        self.split = sorted({i for block in blocks for i, start, end in block if end - start != numels[i]})

    def applies_to(self, lists: Sequence[Sequence[torch.Tensor]]) -> bool:
        """Cutting needs flat views, so every tensor that gets cut must be contiguous in every list."""
        return all(tensors[i].is_contiguous() for tensors in lists for i in self.split)

    def apply(self, lists: Sequence[Sequence[torch.Tensor]]) -> Iterator[list[list[torch.Tensor]]]:
        """Yields, for each block, the given parallel lists restricted to the block's pieces.

        Tensors that fit in a block are passed as they are; only cut tensors become flat views.
        """
        if self.whole:
            yield [list(tensors) for tensors in lists]
            return
        flats = [{i: tensors[i].view(-1) for i in self.split} for tensors in lists]
        for block in self.blocks:
            yield [
                [flat[i][start:end] if i in flat else tensors[i] for i, start, end in block]
                for tensors, flat in zip(lists, flats)
            ]


def plan_blocks(tensors: Sequence[torch.Tensor], max_elements: Optional[int] = None) -> BlockPlan:
    """Plans blocks for tensors shaped like ``tensors`` (all on one device)."""
    if not tensors or tensors[0].device.type != "cpu":
        return BlockPlan([], whole=True)
    if max_elements is None:
        max_elements = CPU_BLOCK_ELEMENTS
    blocks: list[list[Piece]] = []
    current: list[Piece] = []
    filled = 0
    for i, t in enumerate(tensors):
        n, start = t.numel(), 0
        while True:  # at least one piece per tensor, even an empty one
            take = min(n - start, max_elements - filled)
            current.append((i, start, start + take))
            filled += take
            start += take
            if filled >= max_elements:
                blocks.append(current)
                current, filled = [], 0
            if start >= n:
                break
    if current:
        blocks.append(current)
    if len(blocks) <= 1:
        return BlockPlan([], whole=True)
    return BlockPlan(blocks, whole=False, numels=[t.numel() for t in tensors])


_plans: dict[tuple[int, tuple[int, ...]], BlockPlan] = {}


def elementwise(kernel: Optional[Callable[..., None]] = None, *,
                scale: int = 1) -> Any:
    """Marks a kernel as element-wise: on the CPU it then runs block by block (see module docstring).

    The kernel's positional arguments are parallel tensor lists (``None`` for an absent optional list); its
    keyword arguments are scalars. Results are bit-identical to one call over the whole lists.
    ``scale`` multiplies the block size, for kernels with few operands and temporaries (``@elementwise(scale=2)``):
    blocks as large as the cache allows amortise the per-operation cost, but temporaries beyond the allocator's
    reuse threshold would be returned to the system and faulted in again at every block.
    """
    if kernel is None:
        return functools.partial(elementwise, scale=scale)

    @functools.wraps(kernel)
    def run(*lists: Optional[Sequence[torch.Tensor]], **scalars: Any) -> None:
        first = lists[0]
        if not first or first[0].device.type != "cpu":
            return kernel(*lists, **scalars)
        block_elements = CPU_BLOCK_ELEMENTS * scale
        key = (block_elements, tuple(t.numel() for t in first))
        plan = _plans.get(key)
        if plan is None:
            if len(_plans) > 256:
                _plans.clear()
            plan = _plans[key] = plan_blocks(first, block_elements)
        present = [tensors for tensors in lists if tensors is not None]
        if plan.whole or not plan.applies_to(present):
            return kernel(*lists, **scalars)
        for block in plan.apply(present):
            pieces = iter(block)
            kernel(*(next(pieces) if tensors is not None else None for tensors in lists), **scalars)
        return None

    return run
