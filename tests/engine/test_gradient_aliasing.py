"""A gradient that shares memory with its variable (issue 35, item 5): Keras 3 AdamW with ``g is p`` gave different
bits on the compiled and foreach paths (the foreach kernels decay the whole variable, and so the gradient, before
the update; the compiled kernel reads each gradient element before decaying it), and a gradient overlapping its
variable at another offset gave different bits under every rule. Now a gradient that is exactly its variable's
memory is read as the value it had when the step began, on every path (TensorFlow's gradients are values), and one
that overlaps it otherwise is refused with nothing written (engine/proof/aliasing.py)."""

from __future__ import annotations

import pytest
import torch

import slotopt
from slotopt.engine.proof.aliasing import overlap
from slotopt.engine.routing import optimizer_weights
from slotopt.kernels import native

OPTIMIZERS = {
    "keras3-adamw": lambda: slotopt.AdamW(0.1, weight_decay=0.1),
    "keras3-lion": lambda: slotopt.Lion(0.1, weight_decay=0.1),
    "keras3-sgd-decay": lambda: slotopt.SGD(0.1, momentum=0.9, weight_decay=0.1),
    "legacy-adam": lambda: slotopt.legacy.Adam(0.1),
    "v1-adam": lambda: slotopt.v1.AdamOptimizer(0.1),
}
DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
ALIASES = {
    "g is p": lambda p: p,
    "p.detach()": lambda p: p.detach(),
    "p.data": lambda p: p.data,
}


def _bits(opt, variables):
    return [t.detach().reshape(-1).view(torch.uint8).clone() for t in [*variables, *optimizer_weights(opt)]]


def _run(name, dtype, gradient, kernels, steps=3, via_step=False):
    previous = native.use(kernels)
    try:
        g = torch.Generator().manual_seed(1)
        p = torch.nn.Parameter(torch.randn(37, generator=g).to(dtype))
        other = torch.nn.Parameter(torch.randn(8, generator=g).to(dtype))  # (two pairs: steps after the first plan)
        opt = OPTIMIZERS[name]()
        for _ in range(steps):
            if via_step:
                p.grad, other.grad = gradient(p), torch.ones_like(other)
                opt.step() if opt.param_groups else opt.apply_gradients([(p.grad, p), (other.grad, other)])
            else:
                opt.apply_gradients([(gradient(p), p), (torch.ones_like(other), other)])
        return _bits(opt, [p, other])
    finally:
        native.use(previous)


@pytest.mark.parametrize("alias", list(ALIASES))
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_a_gradient_that_is_its_variables_memory_is_read_as_it_was_on_both_paths(name, alias):
    for dtype in DTYPES:
        value = lambda p: p.detach().clone()  # noqa: E731  (what TensorFlow's gradient is: a value)
        expected = _run(name, dtype, value, "foreach")
        for kernels in ("auto", "foreach"):
            got = _run(name, dtype, ALIASES[alias], kernels)
            assert all(map(torch.equal, got, expected)), f"{name} {alias} {dtype} {kernels}"


@pytest.mark.parametrize("kernels", ["auto", "foreach"])
def test_p_grad_set_to_p_data_is_read_as_it_was(kernels):
    expected = _run("keras3-adamw", torch.float32, lambda p: p.detach().clone(), "foreach", via_step=True)
    got = _run("keras3-adamw", torch.float32, lambda p: p.data, kernels, via_step=True)
    assert all(map(torch.equal, got, expected))


@pytest.mark.parametrize("start", [2, 4], ids=["gradient-before", "gradient-after"])
@pytest.mark.parametrize("name", list(OPTIMIZERS))
@pytest.mark.parametrize("kernels", ["auto", "foreach"])
def test_a_gradient_overlapping_its_variable_otherwise_is_refused_with_nothing_written(name, start, kernels):
    previous = native.use(kernels)
    try:
        big = torch.randn(48, generator=torch.Generator().manual_seed(2))
        p = big[3:40]  # a variable that is a view of a larger buffer
        other = torch.ones(8)
        opt = OPTIMIZERS[name]()
        for _ in range(3):
            opt.apply_gradients([(torch.ones(37), p), (torch.ones(8), other)])
        before = _bits(opt, [big, other])
        with pytest.raises(ValueError, match="overlaps the variable's memory without being it"):
            opt.apply_gradients([(big[start:start + 37], p), (torch.ones(8), other)])
        assert all(map(torch.equal, before, _bits(opt, [big, other])))
    finally:
        native.use(previous)


def test_overlap_kinds():
    base = torch.zeros(10)
    assert overlap(base, base) == "same" and overlap(base.detach(), base) == "same"
    assert overlap(base[1:], base[:9]) == "partial" and overlap(base.view(2, 5).t(), base.view(5, 2)) == "partial"
    assert overlap(base[:5], base[5:]) == "none" and overlap(torch.zeros(10), base) == "none"
    assert overlap(torch.zeros(0), base) == "none"
