"""Keras 3 slices in one pass over the table (keras3_sparse.md), for rules that rewrite every row.

On the TensorFlow backend a Keras 3 rule on slices densifies them row by row: a touched row gets its repeats
summed in slice order (``Σg``, and ``Σ f(g_j)`` for the per-slice parts), an untouched row gets +0 for every one
of them, and the rule then runs on every row. So an untouched row gets exactly the dense rule with a zero
gradient, and a touched row depends only on its own row of the table, the state and the slices.

The step here is therefore:

1. the touched rows (sorted, unique) and each slice's place among them (``inverse``, slice order kept);
2. copies of the touched rows of the variable and of every state tensor (memory of the touched rows only);
3. the dense rule with a zero gradient over the whole table in ONE compiled call: the table cut into chunks of
   ``CHUNK_ELEMENTS`` whose gradient pointers all point at one zero buffer of that size (no table-sized
   temporary; the touched rows are computed too, and overwritten in step 5);
4. the rule on the copies with the slices renumbered among them (the per-slice parts summed exactly as on the
   whole table, since the rows keep their slices in order);
5. the copies written back into their rows.

Every number is the one the row-block path (``sparse.update_by_row_blocks``) computes; the memory traffic is one
pass over the table plus the touched rows. It runs where the compiled kernels take the variable (CPU, a
compiled dtype) and the optimizer's dense update is one compiled rule (``_sparse_one_pass``); anything else
returns False having changed nothing, and the row-block path runs instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Callable

import numpy as np
import torch

from ..kernels import native
from ..variables import IndexedSlices

__all__ = ["CHUNK_ELEMENTS", "update"]

#: Elements per chunk of the table in the zero-gradient pass (the zero buffer's size: a few hundred KB).
CHUNK_ELEMENTS = 1 << 16

SliceUpdate = Callable[[torch.Tensor, IndexedSlices, list[torch.Tensor]], None]
ZeroUpdate = Callable[[list[torch.Tensor], list[torch.Tensor], list[list[torch.Tensor]]], None]


def update(var: torch.Tensor, grad: IndexedSlices, slots: Sequence[torch.Tensor], slice_update: SliceUpdate,
           zero_update: ZeroUpdate) -> bool:
    """Runs the steps of the module docstring; False (nothing changed) where they do not apply.

    ``slice_update(rows of var, slices renumbered among those rows, [rows of each slot])`` is the rule on slices;
    ``zero_update(params, zero grads, [[slot] ...])`` the optimizer's dense update, called once with the
    chunked table (it must reach exactly one compiled rule, which then refuses to fall back to foreach).
    """
    total = var.numel()
    if not (native.takes(var) and var.dim() >= 1 and total > CHUNK_ELEMENTS and var.is_contiguous()
            and all(s.dtype is var.dtype and s.shape == var.shape and s.is_contiguous() and s.is_cpu
                    for s in slots)):
        return False
    rows, inverse = torch.unique(grad.indices, sorted=True, return_inverse=True)
    targets = [var, *slots]
    gathered = [t.index_select(0, rows) for t in targets]
    chunks = native.Verified.chunks(var, CHUNK_ELEMENTS)
    zero = torch.zeros(CHUNK_ELEMENTS, dtype=var.dtype)
    zeros = native.Matched([zero] * len(chunks))
    zeros.addresses = np.full(len(chunks), zero.data_ptr(), dtype=np.uint64)
    before = native.calls()
    try:
        zero_update(chunks, zeros, [[s] for s in slots])
    except native.NotCompiled:
        return False  # refused before running: nothing changed
    if native.calls() != before + 1:  # (an optimizer outside the whitelist would be a bug: say so loudly)
        raise RuntimeError("slotopt: the one-pass sparse update made more than one compiled call")
    if not rows.numel():
        return True
    local = IndexedSlices(grad.values, inverse.reshape(grad.indices.shape), (rows.numel(), *var.shape[1:]))
    slice_update(gathered[0], local, gathered[1:])
    for target, rows_now in zip(targets, gathered):
        target.index_copy_(0, rows, rows_now)
    return True
