"""The Triton kernels on a real CUDA device: every rule against the CPU foreach rule bit for bit, one launch per
group, and no host-device synchronisation in a call.

Marked ``cuda``: these run wherever ``torch.cuda.is_available()`` (``pytest -m cuda`` selects them alone) and are
reported as skipped, with the reason, where it is not. On a CUDA machine a missing Triton is a failure, not a
skip: torch's CUDA builds ship it, and the CUDA path would silently fall back to foreach without it.
"""

from __future__ import annotations

import pytest
import torch
from test_native_kernels import CASES, _assert_same_bits, _make_lists

from slotopt import numerics
from slotopt.kernels import native
from slotopt.kernels import triton as triton_kernels

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here (torch.cuda)"),
              pytest.mark.filterwarnings("ignore::RuntimeWarning")]

TRITON_CASES = [c for c in CASES if c[1].rule in triton_kernels.RULES]
SIZES = [1, 7, 1500, 40_000, 1 << 20]  # a ragged tail, an aligned group, a tensor of 1,024 programs


@pytest.fixture
def gpu_form(monkeypatch):
    """The CPU foreach rules as they run on a GPU (no rsqrtps estimate: see test_triton_kernels.py)."""
    monkeypatch.setattr(numerics.ops, "_estimate_function", lambda: None)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(triton_kernels, "_kernels", None)


def test_triton_is_there_to_take_cuda_tensors():
    assert triton_kernels.available(), "torch.cuda is available but Triton cannot be imported"
    assert "Triton multi-tensor kernels on" in triton_kernels.status()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("case", TRITON_CASES, ids=[c[0] for c in TRITON_CASES])
def test_every_rule_on_cuda_equals_the_cpu_foreach_rule(case, dtype, gpu_form, monkeypatch):
    import test_native_kernels

    monkeypatch.setattr(test_native_kernels, "SIZES", SIZES)
    name, kernel, roles, kwargs = case
    reference = _make_lists(roles, dtype, seed=len(name))
    candidate = [None if ts is None else [t.cuda() for t in ts] for ts in reference]
    previous = native.use("foreach")
    try:
        for _ in range(3):
            kernel(*reference, **kwargs)
    finally:
        native.use(previous)
    before = triton_kernels.launches()
    for _ in range(3):
        kernel(*candidate, **kwargs)  # through the dispatch a step takes
    assert triton_kernels.launches() == before + 3, "one launch per call"
    _assert_same_bits(reference, [None if ts is None else [t.cpu() for t in ts] for ts in candidate], name)


def test_a_group_of_two_thousand_tensors_is_one_launch_without_a_sync(gpu_form):
    params = [torch.randn(1024, device="cuda") for _ in range(2000)]
    grads = [torch.randn(1024, device="cuda") for _ in range(2000)]
    momenta = [torch.zeros(1024, device="cuda") for _ in range(2000)]
    scalars = [0.01, 0.9, 0.0, 0.0, 0.0, 0.0]
    assert triton_kernels.apply("keras_momentum", [params, grads, momenta], scalars)  # builds the table
    torch.cuda.synchronize()
    before = triton_kernels.launches()
    torch.cuda.set_sync_debug_mode("error")
    try:
        assert triton_kernels.apply("keras_momentum", [params, grads, momenta], scalars)  # the kept table
        assert triton_kernels.apply("keras_momentum", [params, grads, momenta], [0.02, *scalars[1:]])  # new scalars
        new_grads = [g.clone() for g in grads]
        assert triton_kernels.apply("keras_momentum", [params, new_grads, momenta], scalars)  # a new table
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert triton_kernels.launches() == before + 3


def test_a_keras3_adam_step_on_cuda_equals_the_cpu_foreach_step(gpu_form):
    import slotopt

    shapes = [(3,), (33, 45), (300, 200)]
    generator = torch.Generator().manual_seed(0)
    start = [torch.randn(s, generator=generator) for s in shapes]
    grads = [[torch.randn(s, generator=generator) for s in shapes] for _ in range(5)]

    def run(device):
        params = [torch.nn.Parameter(t.clone().to(device)) for t in start]
        opt = slotopt.Adam(learning_rate=1e-3, params=params)
        for step in grads:
            for p, g in zip(params, step):
                p.grad = g.to(device)
            opt.step()
        return [p.detach().cpu() for p in params]

    previous = native.use("foreach")
    try:
        expected = run("cpu")
    finally:
        native.use(previous)
    before = triton_kernels.launches()
    actual = run("cuda")
    assert triton_kernels.launches() > before
    _assert_same_bits([expected], [actual], "keras3 Adam")


@pytest.mark.parametrize("rule", ["SGD momentum", "Adam"])
def test_two_thousand_small_variables_step_in_one_kernel_without_staging_copies(rule, gpu_form):
    """Issue 48: the packed small variables' step on CUDA is the one Triton launch (after the first step, which
    stages them and finds the rule taken), no multi-tensor copies, with the CPU foreach path's bits."""
    from torch.profiler import ProfilerActivity, profile

    import slotopt

    make = {"SGD momentum": lambda p: slotopt.SGD(learning_rate=0.01, momentum=0.9, params=p),
            "Adam": lambda p: slotopt.Adam(learning_rate=1e-3, params=p)}[rule]
    generator = torch.Generator().manual_seed(4)
    start = [torch.randn(1024, generator=generator) for _ in range(2000)]
    grads = [[torch.randn(1024, generator=generator) for _ in range(2000)] for _ in range(3)]

    def run(device, profiled=None):
        params = [torch.nn.Parameter(t.clone().to(device)) for t in start]
        opt = make(params)
        for k, step in enumerate(grads):
            for p, g in zip(params, step):
                p.grad = g.to(device)
            if profiled is not None and k == len(grads) - 1:
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    opt.step()
                    torch.cuda.synchronize()
                profiled.extend(e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
            else:
                opt.step()
        return [p.detach().cpu() for p in params]

    previous = native.use("foreach")
    try:
        expected = run("cpu")
    finally:
        native.use(previous)
    events: list = []
    actual = run("cuda", events)
    # the rule's launch alone (a table sent anew, for gradients at new addresses, is a memcpy: not counted), no
    # multi-tensor copy of the variables or gradients
    kernels = [name for name in events if not name.lower().startswith(("memcpy", "memset"))]
    assert len(kernels) == 1, kernels[:10]
    _assert_same_bits([expected], [actual], f"keras3 {rule}, 2,000 small variables")
