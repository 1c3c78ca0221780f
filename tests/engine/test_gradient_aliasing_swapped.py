"""Issue 50 item 9: each parameter's gradient being another parameter's memory (``p1.grad = p2.data`` and the
reverse). TensorFlow reads every gradient as a value before any write; the compiled kernel updated ``p1`` and then
read ``p2``'s gradient from ``p1``'s new values, so the compiled and foreach paths gave different bits. Now such a
gradient is copied just before the first write, as one that is its own variable's memory is
(engine/proof/aliasing.py), and every path computes the values' result."""

from __future__ import annotations

import pytest
import torch
from _kernel_paths import ALL_PATHS, on_path, path_id

import slotopt
from slotopt.engine.proof.aliasing import _candidates
from slotopt.engine.routing import optimizer_weights

OPTIMIZERS = {
    "keras3-adamw": lambda: slotopt.AdamW(0.1, weight_decay=0.1),
    "keras3-sgd-decay": lambda: slotopt.SGD(0.1, momentum=0.9, weight_decay=0.1),
    "legacy-adam": lambda: slotopt.legacy.Adam(0.1),
    "v1-adam": lambda: slotopt.v1.AdamOptimizer(0.1),
}
HOW = ["apply_gradients", "step"]


def _run(name: str, how: str, swapped_memory: bool, steps: int = 3) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    p1 = torch.nn.Parameter(torch.randn(37, generator=g))
    p2 = torch.nn.Parameter(torch.randn(37, generator=g))
    p3 = torch.nn.Parameter(torch.randn(5, generator=g))  # an ordinary pair beside them
    opt = OPTIMIZERS[name]()
    for _ in range(steps):
        if swapped_memory:
            g1, g2 = p2.data, p1.data
        else:  # what TensorFlow's gradients are: the values, read before the step
            g1, g2 = p2.detach().clone(), p1.detach().clone()
        g3 = torch.ones(5)
        if how == "step" and hasattr(opt, "step") and not name.startswith("v1"):
            if not opt.param_groups:
                opt.build([p1, p2, p3])
            p1.grad, p2.grad, p3.grad = g1, g2, g3
            opt.step()
        else:
            opt.apply_gradients([(g1, p1), (g2, p2), (g3, p3)])
    return [t.detach().reshape(-1).view(torch.uint8).clone() for t in [p1, p2, p3, *optimizer_weights(opt)]]


@pytest.mark.parametrize("path", ALL_PATHS, ids=path_id)
@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_swapped_gradients_read_as_values_on_every_path(name, how, path):
    with on_path("foreach", True):
        expected = _run(name, how, swapped_memory=False)
    with on_path(*path):
        got = _run(name, how, swapped_memory=True)
    assert all(map(torch.equal, got, expected)), f"{name} {how} {path}"


def test_candidates_find_a_gradient_inside_any_variable():
    big = torch.zeros(20)
    a, b = big[:10], big[10:]
    other = torch.zeros(4)
    # gradients inside some variable of the step (b itself, a slice of a, a slice of other) are found; a gradient
    # of its own buffer is not
    found = _candidates([b, a[2:6], torch.zeros(10), other[1:3]], [a, b, torch.zeros(3), other])
    assert found == [0, 1, 3]
    assert _candidates([torch.zeros(0)], [a]) == []
