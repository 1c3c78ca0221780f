"""TensorFlow's reductions on the device, in Eigen's order: the bits of ``numerics.eigen.full_sum`` without a copy
to the host (issue 48: Lamb's norms, Adafactor's means, clipping by a global norm waited for the device).

Eigen's full reduction (``numerics/eigen.py``) is a tree of halves down to leaves of at most 1,024 packets (8
float32 or 4 float64 lanes); a leaf adds blocks of four packets into four accumulators, whole packets into the
first, the elements left over one by one, then ``leftover + predux(packet)``. Its shape depends only on the element
count, so the host plans it once per count (``_plan``, the same recursion as ``eigen._tree_sum``) and keeps the
plan on the device: one launch computes every leaf (a program each, the loops in Eigen's order), one launch of one
program combines them in the tree's order (``(0 + left) + right``, node after node). Several rows of one length
(a mean over the innermost axis) are planned together: still two launches. A reduction over another axis adds the
rows in order from 0 (``_columns``), as Eigen does over a preserved inner axis.

Nothing waits for the device: the plan is uploaded without blocking, the result is a 0-d (or row) tensor on the
device.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Optional

import numpy as np
import torch

from . import table

__all__ = ["full_sum", "row_sums", "column_sums", "plan"]

_LEAF = 1024  # packets per leaf (Eigen's LeafSize for float and double)
_WIDTH = {torch.float32: 8, torch.float64: 4}
_kernels: Optional[dict[str, Any]] = None


def _tree(first: int, count: int, width: int, leaves: list[tuple[int, int]],
          nodes: list[tuple[int, int, int]], base: int) -> int:
    """Plans ``eigen._tree_sum(x, first, count, width)``: appends its leaves and its inner nodes (postorder) and
    returns the index of its value in the buffer (leaves first, then nodes from ``base``)."""
    if count > width * _LEAF:
        split = width * -(-(first + -(-count // 2)) // width)
        left = min(split - first, count)
        a = _tree(first, left, width, leaves, nodes, base)
        b = _tree(split, count - left, width, leaves, nodes, base) if left < count else -1
        nodes.append((0, a, b))
        return -len(nodes)  # (a node: resolved to base + its index once the leaves are counted)
    leaves.append((first, count))
    return len(leaves) - 1


@lru_cache(maxsize=256)
def plan(rows: int, count: int, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The leaves ``(first, count)``, the inner nodes ``(dst, a, b)`` (``b = -1``: no right child) and each row's
    result index, for ``rows`` rows of ``count`` elements (each row reduced like a whole tensor)."""
    leaves: list[tuple[int, int]] = []
    nodes: list[tuple[int, int, int]] = []
    roots = []
    for r in range(rows):
        start = len(leaves)
        root = _tree(0, count, width, leaves, nodes, 0)
        leaves[start:] = [(r * count + f, c) for f, c in leaves[start:]]
        roots.append(root)
    n = len(leaves)

    def resolve(i: int) -> int:
        return n + (-i - 1) if i < 0 else i

    table_ = np.array([(n + k, resolve(a), resolve(b) if b != -1 else -1) for k, (_, a, b) in enumerate(nodes)],
                      dtype=np.int64).reshape(-1, 3)
    return (np.array(leaves, dtype=np.int64).reshape(-1, 2), table_,
            np.array([resolve(r) for r in roots], dtype=np.int64))


def _build() -> dict[str, Any]:
    import triton
    import triton.language as tl

    # The lower half of a packet plus its upper half (shape (N,) to (N // 2,)): Eigen's predux step. (Shape
    # operations only, no reduction: each add is one of Eigen's.)
    @triton.jit
    def _halves(v, N: tl.constexpr):
        lower, upper = tl.split(tl.permute(tl.reshape(v, (2, N // 2)), (1, 0)))
        return lower + upper

    globals().update(tl=tl, _halves=_halves)

    @triton.jit
    def leaf_sums(x_ptr, leaves_ptr, out_ptr, W: tl.constexpr):
        i = tl.program_id(0).to(tl.int64)
        first = tl.load(leaves_ptr + 2 * i)
        count = tl.load(leaves_ptr + 2 * i + 1)
        lanes = tl.arange(0, W)
        base = x_ptr + first
        zero = tl.full([W], 0.0, x_ptr.dtype.element_ty)
        a0 = zero
        a1 = zero
        a2 = zero
        a3 = zero
        n4 = count // (4 * W)
        for j in range(0, n4):  # four accumulators over blocks of four packets, each in order
            p = base + j * (4 * W) + lanes
            a0 = a0 + tl.load(p)
            a1 = a1 + tl.load(p + W)
            a2 = a2 + tl.load(p + 2 * W)
            a3 = a3 + tl.load(p + 3 * W)
        acc = tl.where(n4 > 0, ((a0 + a1) + a2) + a3, zero)
        whole = count // W * W
        for j in range(n4 * (4 * W), whole, W):  # whole packets into the first
            acc = acc + tl.load(base + j + lanes)
        leftover = tl.full([1], 0.0, x_ptr.dtype.element_ty)
        for j in range(whole, count):  # the rest one by one from 0
            leftover = leftover + tl.load(base + j)
        # predux: the upper half of the packet onto the lower half until one lane is left
        if W == 8:
            acc = _halves(acc, 8)
        acc = _halves(_halves(acc, 4), 2)
        tl.store(out_ptr + i + tl.arange(0, 1), leftover + acc)

    @triton.jit
    def combine(buf_ptr, nodes_ptr, n):
        for k in range(0, n):  # postorder: each node after its children, in one program
            dst = tl.load(nodes_ptr + 3 * k)
            a = tl.load(nodes_ptr + 3 * k + 1)
            b = tl.load(nodes_ptr + 3 * k + 2)
            total = 0.0 + tl.load(buf_ptr + a, volatile=True)
            right = tl.load(buf_ptr + tl.maximum(b, 0), volatile=True)
            total = tl.where(b >= 0, total + right, total)
            tl.store(buf_ptr + dst, total)
            tl.debug_barrier()  # (the next node may read this one: visible to the whole program first)

    @triton.jit
    def columns(x_ptr, out_ptr, rows, width, BLOCK: tl.constexpr):
        cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = cols < width
        total = tl.full([BLOCK], 0.0, x_ptr.dtype.element_ty)
        p = x_ptr + cols
        for _ in range(0, rows):  # in order from row 0
            total = total + tl.load(p, mask=mask)
            p += width
        tl.store(out_ptr + cols, total, mask=mask)

    return {"leaf_sums": leaf_sums, "combine": combine, "columns": columns}


def _kernel(name: str) -> Any:
    global _kernels
    if _kernels is None:
        _kernels = _build()
    return _kernels[name]


def applies(t: torch.Tensor) -> bool:
    """Whether ``t`` is reduced here: float32/float64 on a CUDA device (or on the CPU under the interpreter)."""
    from . import _on_triton_device, available

    return t.dtype in _WIDTH and _on_triton_device(t) and available()


_plans: dict[tuple[Any, ...], tuple[torch.Tensor, torch.Tensor, int, int, torch.Tensor]] = {}


def _device_plan(rows: int, count: int, dtype: torch.dtype, device: torch.device):
    key = (device, rows, count, dtype)
    kept = _plans.get(key)
    if kept is None:
        leaves, nodes, roots = plan(rows, count, _WIDTH[dtype])
        kept = (table._upload(np.ascontiguousarray(leaves.ravel()), device),
                table._upload(np.ascontiguousarray(nodes.ravel()), device), len(leaves), len(nodes),
                table._upload(roots, device))
        if len(_plans) > 256:
            _plans.clear()
        _plans[key] = kept
    return kept


def row_sums(x: torch.Tensor, rows: int, count: int) -> torch.Tensor:
    """The sum of each of ``rows`` rows of ``count`` elements of the contiguous ``x`` (a tensor of ``rows``), each
    in Eigen's full-reduction order."""
    x = x.detach().contiguous()
    leaves, nodes, n_leaves, n_nodes, roots = _device_plan(rows, count, x.dtype, x.device)
    buffer = torch.empty(n_leaves + n_nodes, dtype=x.dtype, device=x.device)
    source = x if x.numel() else torch.zeros(1, dtype=x.dtype, device=x.device)  # (a real address to point at)
    with _on(x.device):
        _kernel("leaf_sums")[(n_leaves,)](source, leaves, buffer, W=_WIDTH[x.dtype], num_warps=1,
                                                   enable_fp_fusion=False)
        if n_nodes:
            _kernel("combine")[(1,)](buffer, nodes, n_nodes, num_warps=1, enable_fp_fusion=False)
    from . import _count_launch

    _count_launch(2 if n_nodes else 1)
    if rows == 1:
        return buffer[int(plan(1, count, _WIDTH[x.dtype])[2][0])]
    return buffer.index_select(0, roots)


def full_sum(x: torch.Tensor) -> torch.Tensor:
    """``numerics.sum`` on the device: a 0-d tensor with ``eigen.full_sum``'s bits."""
    return row_sums(x, 1, x.numel())


def column_sums(x: torch.Tensor, rows: int, width: int) -> torch.Tensor:
    """The ``rows`` rows of ``width`` elements added in order from row 0 (a reduction over an outer axis)."""
    x = x.detach().contiguous()
    out = torch.empty(width, dtype=x.dtype, device=x.device)
    if width:
        block = 256
        with _on(x.device):
            _kernel("columns")[(-(-width // block),)](x, out, rows, width, BLOCK=block, num_warps=4,
                                                                     enable_fp_fusion=False)
    return out


class _on:
    """``torch.cuda.device(device)`` for a CUDA device, nothing otherwise (the interpreter's CPU tensors)."""

    def __init__(self, device: torch.device) -> None:
        self.inner = torch.cuda.device(device) if device.type == "cuda" else None

    def __enter__(self) -> None:
        if self.inner is not None:
            self.inner.__enter__()

    def __exit__(self, *exc: object) -> None:
        if self.inner is not None:
            self.inner.__exit__(*exc)
