"""The CUDA path: the most used update rules as Triton kernels, bit-identical to the foreach kernels.

Each kernel is one pass over a tensor's elements in exactly the foreach kernel's evaluation order, with the
three things that would otherwise break bit-exactness on a GPU turned off or replaced: fused multiply-adds
(launched with ``enable_fp_fusion=False``), the approximate division and the approximate square root (Triton's
``/`` and ``tl.sqrt`` on float32 are not correctly rounded; ``div_rn`` and ``sqrt_rn`` are). Scalars are
passed as a tensor of the variables' dtype, so float64 rules keep float64 scalars (a Python float argument
would become a float32 kernel parameter).

Rules: ``sgd``, ``keras_momentum``, ``momentum`` (TF1), ``decoupled_weight_decay``, ``adam`` (AMSGrad too),
``rmsprop`` (Keras 3 variants), ``apply_rmsprop`` (TF1), ``adagrad``, ``apply_adagrad``; the scalar vector of
each is the compiled CPU rule's (``kernels/native/rules.inc``). Rules on slices (``apply_slices``, Keras 3 on
slices leaving untouched rows alone): ``sgd_slices``, ``adagrad_slices``. Other rules, and machines without Triton,
use the foreach kernels. Triton is an optional extra (``pip install 'slotopt[triton]'``); it ships with the
CUDA builds of torch. With no GPU, the kernels run under Triton's interpreter (``TRITON_INTERPRET=1`` set
before the first use), which is how the tests check them against the foreach kernels on the CPU.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Optional

import torch

try:
    from torch.autograd.graph import increment_version as _increment_version
except ImportError:  # older torch
    _increment_version = torch._C._increment_version  # type: ignore[attr-defined]

__all__ = ["available", "status", "apply", "RULES", "apply_slices", "SLICE_RULES"]

RULES = ("sgd", "keras_momentum", "momentum", "decoupled_weight_decay", "adam", "rmsprop", "apply_rmsprop",
         "adagrad", "apply_adagrad")
BLOCK = 1024
#: The rules on slices (``apply_slices``): name -> whether the rule has a state tensor.
SLICE_RULES = {"sgd_slices": False, "adagrad_slices": True}

_kernels: Optional[dict[str, Any]] = None
_import_error: Optional[str] = None


def available() -> bool:
    """Whether the ``triton`` package can be imported."""
    global _import_error
    try:
        import triton  # noqa: F401
    except Exception as error:  # ImportError, or a broken install
        _import_error = str(error)
        return False
    return True


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def status() -> str:
    """One line: whether Triton kernels run for CUDA tensors here."""
    if not available():
        return "foreach (Triton not installed: pip install 'slotopt[triton]')"
    if _interpreting():
        return "Triton kernels under TRITON_INTERPRET=1 (the interpreter: for tests, slow)"
    if torch.cuda.is_available():
        return "Triton kernels for CUDA tensors"
    return "Triton installed; no CUDA device here (CUDA tensors would use Triton kernels)"


def _build() -> dict[str, Any]:
    """Defines the kernels on first use (after TRITON_INTERPRET is read)."""
    import triton
    import triton.language as tl

    # Correctly rounded division and root: float32 needs the _rn forms (the defaults are approximate); float64
    # division and root are IEEE-rounded already (and the _rn forms take float32 only). The dtype test is
    # resolved at compile time. The kernels find these helpers among the module's globals, as Triton resolves
    # names.
    @triton.jit
    def _div_rn(a, b):
        if a.dtype == tl.float32:
            return tl.math.div_rn(a, b)
        else:
            return a / b

    @triton.jit
    def _sqrt_rn(x):
        if x.dtype == tl.float32:
            return tl.math.sqrt_rn(x)
        else:
            return tl.sqrt(x)

    globals().update(_div_rn=_div_rn, _sqrt_rn=_sqrt_rn)

    @triton.jit
    def sgd(w_ptr, g_ptr, s_ptr, n, DECAY: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        lr = tl.load(s_ptr)
        w = tl.load(w_ptr + offs, mask=mask)
        if DECAY:  # Keras 3's decoupled weight decay first, in the same pass
            w = w - (w * tl.load(s_ptr + 2)) * tl.load(s_ptr + 3)
        g = tl.load(g_ptr + offs, mask=mask)
        tl.store(w_ptr + offs, w - g * lr, mask=mask)

    @triton.jit
    def keras_momentum(w_ptr, g_ptr, m_ptr, s_ptr, n, NESTEROV: tl.constexpr, DECAY: tl.constexpr,
                       BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        lr = tl.load(s_ptr)
        mu = tl.load(s_ptr + 1)
        g = tl.load(g_ptr + offs, mask=mask)
        step = g * lr
        m = tl.load(m_ptr + offs, mask=mask) * mu - step
        tl.store(m_ptr + offs, m, mask=mask)
        w = tl.load(w_ptr + offs, mask=mask)
        if DECAY:
            w = w - (w * tl.load(s_ptr + 4)) * tl.load(s_ptr + 5)
        if NESTEROV:
            w = w + (m * mu - step)
        else:
            w = w + m
        tl.store(w_ptr + offs, w, mask=mask)

    @triton.jit
    def momentum(w_ptr, g_ptr, a_ptr, s_ptr, n, NESTEROV: tl.constexpr, FUSED_PRODUCT: tl.constexpr,
                 BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        lr = tl.load(s_ptr)
        mu = tl.load(s_ptr + 1)
        lr_mu = tl.load(s_ptr + 4)
        g = tl.load(g_ptr + offs, mask=mask)
        a = tl.load(a_ptr + offs, mask=mask) * mu + g
        tl.store(a_ptr + offs, a, mask=mask)
        w = tl.load(w_ptr + offs, mask=mask)
        if NESTEROV:
            if FUSED_PRODUCT:
                look = a * lr_mu
            else:
                look = (a * mu) * lr
            w = w - (g * lr + look)
        else:
            w = w - a * lr
        tl.store(w_ptr + offs, w, mask=mask)

    @triton.jit
    def decoupled_weight_decay(w_ptr, s_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        wd = tl.load(s_ptr)
        lr = tl.load(s_ptr + 1)
        w = tl.load(w_ptr + offs, mask=mask)
        tl.store(w_ptr + offs, w - (w * wd) * lr, mask=mask)

    @triton.jit
    def adam(w_ptr, g_ptr, m_ptr, v_ptr, vh_ptr, s_ptr, n, AMSGRAD: tl.constexpr, DECAY: tl.constexpr,
             BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        alpha = tl.load(s_ptr)
        omb1 = tl.load(s_ptr + 1)
        omb2 = tl.load(s_ptr + 2)
        eps = tl.load(s_ptr + 3)
        g = tl.load(g_ptr + offs, mask=mask)
        m = tl.load(m_ptr + offs, mask=mask)
        v = tl.load(v_ptr + offs, mask=mask)
        m = m + (g - m) * omb1
        v = v + (g * g - v) * omb2
        tl.store(m_ptr + offs, m, mask=mask)
        tl.store(v_ptr + offs, v, mask=mask)
        if AMSGRAD:
            v = tl.maximum(tl.load(vh_ptr + offs, mask=mask), v, propagate_nan=tl.PropagateNan.ALL)
            tl.store(vh_ptr + offs, v, mask=mask)
        w = tl.load(w_ptr + offs, mask=mask)
        if DECAY:  # AdamW: the decoupled weight decay first, in the same pass
            w = w - (w * tl.load(s_ptr + 6)) * tl.load(s_ptr + 7)
        tl.store(w_ptr + offs, w - _div_rn(m * alpha, _sqrt_rn(v) + eps), mask=mask)

    @triton.jit
    def rmsprop(w_ptr, g_ptr, vel_ptr, mom_ptr, avg_ptr, s_ptr, n, INSIDE: tl.constexpr, MOMENTUM: tl.constexpr,
                CENTERED: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        lr = tl.load(s_ptr)
        rho = tl.load(s_ptr + 1)
        omr = tl.load(s_ptr + 2)
        mu = tl.load(s_ptr + 3)
        eps = tl.load(s_ptr + 4)
        g = tl.load(g_ptr + offs, mask=mask)
        vel = tl.load(vel_ptr + offs, mask=mask) * rho + (g * g) * omr
        tl.store(vel_ptr + offs, vel, mask=mask)
        if CENTERED:
            avg = tl.load(avg_ptr + offs, mask=mask) * rho + g * omr
            tl.store(avg_ptr + offs, avg, mask=mask)
            d = vel - avg * avg
            if INSIDE:
                d = d + eps
            d = _sqrt_rn(d)
        elif INSIDE:
            d = _sqrt_rn(vel + eps)
        else:
            d = _sqrt_rn(vel)
        if not INSIDE:
            d = d + eps
        inc = _div_rn(g * lr, d)
        w = tl.load(w_ptr + offs, mask=mask)
        if MOMENTUM:
            mom = tl.load(mom_ptr + offs, mask=mask) * mu + inc
            tl.store(mom_ptr + offs, mom, mask=mask)
            w = w - mom
        else:
            w = w - inc
        tl.store(w_ptr + offs, w, mask=mask)

    @triton.jit
    def apply_rmsprop(w_ptr, g_ptr, ms_ptr, mom_ptr, mg_ptr, s_ptr, n, CENTERED: tl.constexpr,
                      BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        lr = tl.load(s_ptr)
        omr = tl.load(s_ptr + 1)
        mu = tl.load(s_ptr + 2)
        eps = tl.load(s_ptr + 3)
        g = tl.load(g_ptr + offs, mask=mask)
        ms = tl.load(ms_ptr + offs, mask=mask)
        ms = ms + (g * g - ms) * omr
        tl.store(ms_ptr + offs, ms, mask=mask)
        if CENTERED:
            mg = tl.load(mg_ptr + offs, mask=mask)
            mg = mg + (g - mg) * omr
            tl.store(mg_ptr + offs, mg, mask=mask)
            d = (ms - mg * mg) + eps
        else:
            d = ms + eps
        mom = tl.load(mom_ptr + offs, mask=mask) * mu + _div_rn(g * lr, _sqrt_rn(d))
        tl.store(mom_ptr + offs, mom, mask=mask)
        w = tl.load(w_ptr + offs, mask=mask)
        tl.store(w_ptr + offs, w - mom, mask=mask)

    @triton.jit
    def adagrad(w_ptr, g_ptr, acc_ptr, s_ptr, n, INSIDE: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        lr = tl.load(s_ptr)
        eps = tl.load(s_ptr + 1)
        g = tl.load(g_ptr + offs, mask=mask)
        acc = tl.load(acc_ptr + offs, mask=mask) + g * g
        tl.store(acc_ptr + offs, acc, mask=mask)
        if INSIDE:
            d = _sqrt_rn(acc + eps)
        else:
            d = _sqrt_rn(acc) + eps
        w = tl.load(w_ptr + offs, mask=mask)
        tl.store(w_ptr + offs, w - _div_rn(g * lr, d), mask=mask)

    @triton.jit
    def apply_adagrad(w_ptr, g_ptr, acc_ptr, s_ptr, n, SCALAR_ROWS: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        lr = tl.load(s_ptr)
        g = tl.load(g_ptr + offs, mask=mask)
        acc = tl.load(acc_ptr + offs, mask=mask) + g * g
        tl.store(acc_ptr + offs, acc, mask=mask)
        step = g * lr
        if SCALAR_ROWS:
            step = _div_rn(step, _sqrt_rn(acc))
        else:
            step = step * _div_rn(tl.full(acc.shape, 1.0, acc.dtype), _sqrt_rn(acc))
        w = tl.load(w_ptr + offs, mask=mask)
        tl.store(w_ptr + offs, w - step, mask=mask)

    # Rules on slices: each program owns a block of columns and walks the k slices serially in slice order, so a
    # repeated row takes each slice's update in turn (the compiled rules' order) and no two programs share an
    # element. Row offsets are int64 (``row`` is loaded from int64 indices); the slices' pointers advance by a row
    # per slice (a 64-bit pointer: no ``j * width`` that could overflow 32 bits).
    @triton.jit
    def sgd_slices(w_ptr, g_ptr, idx_ptr, s_ptr, k, width, BLOCK: tl.constexpr):
        cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = cols < width
        lr = tl.load(s_ptr)
        g_row = g_ptr + cols
        for j in range(0, k):
            at = tl.load(idx_ptr + j) * width + cols
            g = tl.load(g_row, mask=mask)
            g_row += width
            w = tl.load(w_ptr + at, mask=mask)
            tl.store(w_ptr + at, w - g * lr, mask=mask)

    @triton.jit
    def adagrad_slices(w_ptr, g_ptr, acc_ptr, idx_ptr, s_ptr, k, width, BLOCK: tl.constexpr):
        cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = cols < width
        lr = tl.load(s_ptr)
        eps = tl.load(s_ptr + 1)
        g_row = g_ptr + cols
        for j in range(0, k):  # every slice's square first ...
            at = tl.load(idx_ptr + j) * width + cols
            g = tl.load(g_row, mask=mask)
            g_row += width
            tl.store(acc_ptr + at, tl.load(acc_ptr + at, mask=mask) + g * g, mask=mask)
        g_row = g_ptr + cols
        for j in range(0, k):  # ... then the steps, with the accumulator after all of them
            at = tl.load(idx_ptr + j) * width + cols
            g = tl.load(g_row, mask=mask)
            g_row += width
            d = _sqrt_rn(tl.load(acc_ptr + at, mask=mask) + eps)
            w = tl.load(w_ptr + at, mask=mask)
            tl.store(w_ptr + at, w - _div_rn(g * lr, d), mask=mask)

    return {name: fn for name, fn in locals().items() if name in RULES or name in SLICE_RULES}


# For each rule: how many operand lists, and its compile-time flags as (name, position in the scalar vector).
_LAYOUT: dict[str, tuple[int, tuple[tuple[str, int], ...]]] = {
    "sgd": (2, (("DECAY", 1),)),
    "keras_momentum": (3, (("NESTEROV", 2), ("DECAY", 3))),
    "momentum": (3, (("NESTEROV", 2), ("FUSED_PRODUCT", 3))),
    "decoupled_weight_decay": (1, ()),
    "adam": (5, (("AMSGRAD", 4), ("DECAY", 5))),
    "rmsprop": (5, (("INSIDE", 5), ("MOMENTUM", 6), ("CENTERED", 7))),
    "apply_rmsprop": (5, (("CENTERED", 4),)),
    "adagrad": (3, (("INSIDE", 2),)),
    "apply_adagrad": (3, (("SCALAR_ROWS", 1),)),
}


def apply(rule: str, lists: Sequence[Optional[Sequence[torch.Tensor]]], scalars: Sequence[float]) -> bool:
    """Runs ``rule`` with Triton over every tensor of the lists; False (nothing done) when it does not apply.

    Applies to CUDA tensors, or to CPU tensors under ``TRITON_INTERPRET=1``; float32 and float64 only
    (contiguous, one dtype), with the compiled rules' scalar vector (see ``kernels/native/rules.inc``).
    """
    global _kernels
    first = lists[0]
    if rule not in _LAYOUT or not first or not available():
        return False
    dtype = first[0].dtype
    if dtype not in (torch.float32, torch.float64):
        return False
    if first[0].device.type != "cuda" and not _interpreting():
        return False
    operands, flag_positions = _LAYOUT[rule]
    if len(lists) != operands:
        return False
    present = [tensors for tensors in lists if tensors is not None]
    for tensors in present:
        if len(tensors) != len(first) or not all(
                t.is_contiguous() and t.dtype == dtype and t.device == first[0].device and t.numel() == f.numel()
                for t, f in zip(tensors, first)):
            return False
    if _kernels is None:
        _kernels = _build()
    kernel = _kernels[rule]
    values = torch.tensor(list(scalars), dtype=dtype, device=first[0].device)
    flags = {name: bool(scalars[i]) for name, i in flag_positions}
    import triton

    for k in range(len(first)):
        n = first[k].numel()
        if n == 0:
            continue
        # An absent optional list is never read (its flag is off): any tensor stands in for its pointer.
        args = [tensors[k] if tensors is not None else first[k] for tensors in lists]
        kernel[(triton.cdiv(n, BLOCK),)](*args, values, n, **flags, BLOCK=BLOCK, enable_fp_fusion=False)
    return True


def _on_triton_device(tensor: torch.Tensor) -> bool:
    return tensor.device.type == "cuda" or (tensor.is_cpu and _interpreting())


def apply_slices(rule: str, param: torch.Tensor, indices: torch.Tensor, values: torch.Tensor,
                 state: Optional[torch.Tensor], scalars: Sequence[float]) -> bool:
    """Runs the rule on slices ``rule`` (``SLICE_RULES``) with Triton: slice ``j`` (``values[j]``) updates row
    ``indices[j]`` of ``param`` (and of ``state``), the slices in order; the scalar vector is the compiled CPU
    rule's (``kernels.native.apply_slices``). False (nothing done) when it does not apply: Triton missing, not
    CUDA tensors (CPU tensors under ``TRITON_INTERPRET=1``), not float32/float64, anything not contiguous or not
    of ``param``'s dtype, device and row shape, indices not integers, or autograd recording an in-place change.

    Every index is checked before anything is written (one ``aminmax`` on the device): one outside
    ``[0, param.shape[0])`` raises ``ValueError`` naming it, and nothing changes.
    """
    global _kernels
    if rule not in SLICE_RULES or SLICE_RULES[rule] != (state is not None) \
            or not all([isinstance(v, (float, int)) for v in scalars]):  # Python numbers, as the compiled rule
        return False
    dtype, device = param.dtype, param.device
    if dtype not in (torch.float32, torch.float64) or not _on_triton_device(param) or param.dim() == 0 \
            or not param.is_contiguous():
        return False
    if values.dtype is not dtype or values.device != device or values.dim() != param.dim() \
            or values.shape[1:] != param.shape[1:] or not values.is_contiguous():
        return False
    if state is not None and (state.dtype is not dtype or state.device != device or state.shape != param.shape
                              or not state.is_contiguous()):
        return False
    if indices.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8) \
            or indices.dim() != 1 or indices.shape[0] != values.shape[0] or indices.device != device:
        return False
    if torch.is_grad_enabled() and (param.requires_grad or (state is not None and state.requires_grad)):
        return False  # torch's in-place ops raise their own error there
    if not available():
        return False
    k, rows = values.shape[0], param.shape[0]
    if k:
        low, high = torch.stack(torch.aminmax(indices)).tolist()  # one transfer from the device
        if low < 0 or high >= rows:  # the message names the first bad index, as the other paths do
            from ...engine.sparse import check_rows

            check_rows(indices, rows)
        if _kernels is None:
            _kernels = _build()
        import triton

        width = param.numel() // rows
        block = min(BLOCK, max(32, triton.next_power_of_2(width)))
        # A block at least as wide as its threads (32 per warp): no element is held by two warps, which could
        # otherwise be at different slices and store one slice's value over the next's.
        grid = (triton.cdiv(width, block),)
        tensors = [param, values] if state is None else [param, values, state]
        _kernels[rule][grid](*tensors, indices.to(torch.int64).contiguous(),
                             torch.tensor(list(scalars), dtype=dtype, device=device), k, width, BLOCK=block,
                             num_warps=max(1, min(4, block // 32)), num_stages=1, enable_fp_fusion=False)
    _increment_version([param] if state is None else [param, state])
    return True
