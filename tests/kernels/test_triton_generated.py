"""Each generated Triton kernel (``kernels/triton/generate.py``: prologue and epilogue from the rule's scalar
description around its body) against the hand-written kernel it replaced (``tests/_triton_handwritten.py``), bit
for bit under Triton's interpreter: every rule variant of the compiled rules' cases, float32 and float64, scalars by
value and from the vector, random inputs with edge values (signed zeros, subnormals, infinities, NaN, huge and tiny
magnitudes), several tensors of ragged sizes in one launch, and a gradient that is its variable."""

from __future__ import annotations

import pytest
import torch
from test_native_kernels import CASES, _assert_same_bits, _make_lists

from slotopt.kernels.native.scalars import DESCRIPTIONS
from slotopt.kernels.triton import rules, table

triton = pytest.importorskip("triton")

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NaN/inf arithmetic on purpose

GENERATED_CASES = [c for c in CASES if c[1].rule in rules.RULES and "tie" not in c[0]]
SIZES = [1, 7, 300]


@pytest.fixture(scope="module")
def both(request):
    mp = pytest.MonkeyPatch()
    mp.setenv("TRITON_INTERPRET", "1")
    import _triton_handwritten

    kernels = rules.build(), _triton_handwritten.build()
    yield kernels
    mp.undo()


def _edge(lists, dtype, seed):
    """Edge values spread over the operands (the variable, the gradient and the state alike)."""
    info = torch.finfo(dtype)
    special = torch.tensor([0.0, -0.0, info.tiny / 4, -info.tiny / 8, info.tiny, float("inf"), -float("inf"),
                            float("nan"), info.max / 4, -info.max / 2, 1e-30, 2.0 ** 60], dtype=dtype)
    generator = torch.Generator().manual_seed(seed)
    for tensors in lists:
        if tensors is None:
            continue
        big = tensors[-1]
        at = torch.randperm(big.numel(), generator=generator)[:len(special)]
        big[at] = special[torch.randperm(len(special), generator=generator)]


def _launch(kernel, rule, lists, scalars, dtype, by_value, padded):
    description = DESCRIPTIONS[rule]
    read_only = description.read_only
    # The hand-written kernels read the table layout (a meta row, then the address table); the generated ones
    # the default rows layout (each program's row holding its count and addresses).
    layout = "table" if padded else "rows"
    table.configure(None, layout=layout)
    try:
        launch = table.launch_table(lists, read_only)
    finally:
        table.configure(None)
    assert launch is not None and launch.row == (0 if padded else table._width(description.operands))
    flags = {name: bool(scalars[i]) for name, i in description.flags}
    count = 11 if padded else len(description.entries)  # (the hand-written kernels took S0..S10)
    values = [float(v) for v in scalars] + [0.0] * (count - len(scalars))
    vector = table.scalar_vector(scalars, dtype, torch.device("cpu"))
    if not by_value:
        values = [0.0] * count
    rows = {} if padded else {"ROW": launch.row}
    kernel[(launch.programs,)](launch.addresses, launch.meta, vector, launch.tensors, *values, **flags,
                               BY_VALUE=by_value, ALIGNED=launch.aligned, BLOCK=launch.block, **rows)


# (float64 scalars always come from the vector: a by-value argument is a float32 parameter)
@pytest.mark.parametrize("dtype,by_value", [(torch.float32, True), (torch.float32, False), (torch.float64, False)],
                         ids=["float32-by-value", "float32-vector", "float64-vector"])
@pytest.mark.parametrize("case", GENERATED_CASES, ids=[c[0] for c in GENERATED_CASES])
def test_each_generated_kernel_equals_the_hand_written_one_bit_for_bit(case, dtype, by_value, both, monkeypatch):
    import test_native_kernels

    monkeypatch.setattr(test_native_kernels, "SIZES", SIZES)
    generated, handwritten = both
    name, kernel, roles, kwargs = case
    reference = _make_lists(roles, dtype, seed=len(name))
    _edge(reference, dtype, seed=len(name))
    candidate = [None if ts is None else [t.clone() for t in ts] for ts in reference]
    scalars = kernel.scalar_vector(*reference, **kwargs)
    while len(reference) > DESCRIPTIONS[kernel.rule].operands and reference[-1] is None:
        reference, candidate = reference[:-1], candidate[:-1]
    for _ in range(2):
        _launch(handwritten[kernel.rule], kernel.rule, reference, scalars, dtype, by_value, padded=True)
        _launch(generated[kernel.rule], kernel.rule, candidate, scalars, dtype, by_value, padded=False)
    _assert_same_bits(reference, candidate, name)


@pytest.mark.parametrize("rule", ["sgd", "adam", "lion", "ftrl_root", "apply_adagrad_da", "nadam"])
def test_a_gradient_that_is_its_variable_reads_the_same_in_both(rule, both):
    generated, handwritten = both
    case = next(c for c in GENERATED_CASES if c[1].rule == rule)
    name, kernel, roles, kwargs = case
    import test_native_kernels

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(test_native_kernels, "SIZES", SIZES)
        lists = _make_lists(roles, torch.float32, seed=3)
    scalars = kernel.scalar_vector(*lists, **kwargs)
    lists = [ts for ts in lists if ts is not None]
    reference = [[t.clone() for t in ts] for ts in lists]
    reference[1] = reference[0]  # the gradient IS the variable
    candidate = [[t.clone() for t in ts] for ts in lists]
    candidate[1] = candidate[0]
    _launch(handwritten[rule], rule, reference, scalars, torch.float32, True, padded=True)
    _launch(generated[rule], rule, candidate, scalars, torch.float32, True, padded=False)
    _assert_same_bits(reference, candidate, f"{name} aliased")


def test_every_rule_has_a_generated_kernel_with_one_scalar_argument_per_entry(both):
    generated, _ = both
    for rule in rules.RULES:
        text = rules.source(rule)
        entries = DESCRIPTIONS[rule].entries
        assert text.startswith(f"def {rule}(tab_ptr, meta_ptr, s_ptr, T, "
                               + ", ".join(f"S{k}" for k in range(len(entries))) + ",\n"), rule
        assert f"_b_{rule}(" in text and rule in generated


def test_an_entry_the_body_does_not_read_yet_declines_the_call_when_set(monkeypatch):
    """A number or flag added to a description (a new option of the C rule) flows into the generated kernel's
    signature; until the body reads it, a call that sets it is left to the other paths (the right bits)."""
    import dataclasses

    from slotopt.kernels import triton as triton_kernels
    from slotopt.kernels.native.scalars import Flag, Scalar
    from slotopt.kernels.triton import generate

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(triton_kernels, "_kernels", None)
    grown = dataclasses.replace(DESCRIPTIONS["sgd"], entries=DESCRIPTIONS["sgd"].entries + (
        Scalar("clip_scale"), Flag("clip")))
    monkeypatch.setitem(DESCRIPTIONS, "sgd", grown)
    assert generate.unread(grown, ["w", "g", "lr", "weight_decay", "weight_decay_lr", "DECAY"]) == (4, 5)
    params, grads = [torch.ones(8)], [torch.full((8,), 0.5)]
    assert not triton_kernels.apply("sgd", [params, grads], [0.25, 0.0, 0.0, 0.0, 0.5, 0.0])
    assert not triton_kernels.apply("sgd", [params, grads], [0.25, 0.0, 0.0, 0.0, 0.0, 1.0])
    assert torch.equal(params[0], torch.ones(8))  # declined: nothing written
    assert triton_kernels.apply("sgd", [params, grads], [0.25, 0.0, 0.0, 0.0, 0.0, 0.0])  # off: the rule as it was
    assert torch.equal(params[0], torch.full((8,), 0.875))
    assert "S5," in triton_kernels.rules.source("sgd") and "CLIP: tl.constexpr" in triton_kernels.rules.source("sgd")
