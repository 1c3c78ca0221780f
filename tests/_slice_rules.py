"""What the tests of the rules on slices share (test_native_slices.py, test_triton_slices.py): running one rule
under a kernel mode, and comparing results bit for bit."""

from __future__ import annotations

import torch

from slotopt.kernels import adagrad, native, sgd

_BITS = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and torch.equal(a.view(_BITS[a.element_size()]), b.view(_BITS[b.element_size()]))


def run_rule(rule: str, mode: str, w: torch.Tensor, indices: torch.Tensor, values: torch.Tensor,
             acc: torch.Tensor, lr: float, epsilon: float) -> int:
    """The rule on slices ``rule`` (``sgd_slices`` or ``adagrad_slices``) under ``SLOTOPT_KERNELS=mode``, in place
    on ``w`` (and ``acc``); returns how many compiled calls ran."""
    previous, before = native.use(mode), native.calls()
    try:
        with torch.no_grad():
            if rule == "sgd_slices":
                sgd.scatter_sgd(w, indices, values, lr=lr)
            else:
                adagrad.adagrad_slices(w, indices, values, acc, lr=lr, epsilon=epsilon)
    finally:
        native.use(previous)
    return native.calls() - before
