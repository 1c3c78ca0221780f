"""The compiled rules on slices (``sgd_slices``, ``adagrad_slices`` in kernels/native/rules.inc) against their
torch specification (``kernels.sgd.scatter_sgd``, ``kernels.adagrad.adagrad_slices``), bit for bit, and the
refusal of an index outside the table on both paths with nothing changed."""

from __future__ import annotations

import pytest
import torch
from _slice_rules import run_rule, same_bits
from hypothesis import given, settings
from hypothesis import strategies as st

import slotopt
from slotopt.kernels import adagrad, native, sgd

pytestmark = pytest.mark.skipif(not native.active(), reason="compiled kernels not built")

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def _run(mode: str, rule: str, table: torch.Tensor, accumulator: torch.Tensor, indices: torch.Tensor,
         values: torch.Tensor, lr: float, epsilon: float) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The rule (``sgd`` or ``adagrad``) under ``SLOTOPT_KERNELS=mode`` on copies; returns them and how many
    compiled calls ran."""
    w, acc = table.clone(), accumulator.clone()
    calls = run_rule(f"{rule}_slices", mode, w, indices, values, acc, lr, epsilon)
    return w, acc, calls


@settings(max_examples=60, deadline=None)
@given(dtype=st.sampled_from(DTYPES), rule=st.sampled_from(["sgd", "adagrad"]), rows=st.integers(1, 40),
       width=st.sampled_from([1, 3, 8, 17]), flat=st.booleans(), k=st.integers(0, 60),
       index_dtype=st.sampled_from([torch.int64, torch.int32]), seed=st.integers(0, 2**31 - 1),
       lr=st.sampled_from([1e-3, 0.1, 0.37]), epsilon=st.sampled_from([1e-7, 0.0, 1e-3]))
def test_compiled_rules_on_slices_give_the_torch_rule_bits(dtype, rule, rows, width, flat, k, index_dtype, seed, lr,
                                                           epsilon):
    g = torch.Generator().manual_seed(seed)
    shape = (rows,) if flat else (rows, width)
    table = torch.randn(shape, generator=g, dtype=torch.float64).mul_(3.0).to(dtype)
    accumulator = torch.rand(shape, generator=g, dtype=torch.float64).add_(0.1).to(dtype)
    # Few rows and many slices: repeated, unsorted indices (k == 0: no slice at all).
    indices = torch.randint(0, rows, (k,), generator=g).to(index_dtype)
    values = torch.randn((k, *shape[1:]), generator=g, dtype=torch.float64).mul_(2.0).to(dtype)
    w_ref, acc_ref, ref_calls = _run("foreach", rule, table, accumulator, indices, values, lr, epsilon)
    w, acc, calls = _run("native", rule, table, accumulator, indices, values, lr, epsilon)
    assert ref_calls == 0 and calls == 1  # the compiled rule really ran (and the reference did not)
    assert same_bits(w, w_ref) and same_bits(acc, acc_ref)
    if k and dtype in (torch.float32, torch.float64):  # (a half step of 1e-3 may round away)
        assert not torch.equal(w, table)  # a test that can fail: the rows did move


def test_a_repeated_row_takes_each_slice_in_turn_on_the_compiled_path():
    w = torch.tensor([[1.0], [5.0]], dtype=torch.float64)
    version = w._version
    with torch.no_grad():
        before = native.calls()
        sgd.scatter_sgd(w, torch.tensor([0, 0]), torch.tensor([[1e16], [1.0]], dtype=torch.float64), lr=1.0)
    assert native.calls() == before + 1 and w._version > version  # written in place as torch's ops would
    # (1 - 1e16) - 1 rounds twice; the sum 1e16 + 1 first would round once more differently here
    assert w[0, 0].item() == (1.0 - 1e16) - 1.0 and w[1, 0].item() == 5.0
    acc = torch.full((2, 1), 0.0, dtype=torch.float64)
    w = torch.tensor([[1.0], [5.0]], dtype=torch.float64)
    with torch.no_grad():
        adagrad.adagrad_slices(w, torch.tensor([0, 0]), torch.tensor([[3.0], [4.0]], dtype=torch.float64), acc,
                               lr=1.0, epsilon=0.0)
    # acc = 9 + 16 = 25 for both slices; then 1 - 3/5 - 4/5, one slice at a time
    assert acc[0, 0].item() == 25.0 and w[0, 0].item() == (1.0 - 0.6) - 0.8 and w[1, 0].item() == 5.0


@pytest.mark.parametrize("mode", ["native", "foreach"])
@pytest.mark.parametrize("rule", ["sgd", "adagrad"])
@pytest.mark.parametrize("bad", [7, -1])
def test_an_index_outside_the_table_is_refused_with_nothing_changed(mode, rule, bad):
    table = torch.arange(14.0).reshape(7, 2)
    accumulator = torch.full((7, 2), 0.5)
    w, acc = table.clone(), accumulator.clone()
    previous = native.use(mode)
    try:
        with torch.no_grad(), pytest.raises(ValueError, match=rf"indices.*\[0, 7\).*indices\[2\]={bad}"):
            if rule == "sgd":
                sgd.scatter_sgd(w, torch.tensor([1, 3, bad, 2]), torch.ones(4, 2), lr=0.5)
            else:
                adagrad.adagrad_slices(w, torch.tensor([1, 3, bad, 2]), torch.ones(4, 2), acc, lr=0.5, epsilon=1e-7)
    finally:
        native.use(previous)
    assert torch.equal(w, table) and torch.equal(acc, accumulator)


def test_what_the_compiled_path_does_not_take_runs_the_torch_rule():
    table = torch.randn(6, 4)
    w_ref, w = table.clone(), table.t().contiguous().t()  # the same values, not contiguous
    indices, values = torch.tensor([5, 0, 5]), torch.randn(3, 4)
    with torch.no_grad():
        previous = native.use("foreach")
        sgd.scatter_sgd(w_ref, indices, values, lr=0.1)
        native.use(previous)
        before = native.calls()
        sgd.scatter_sgd(w, indices, values, lr=0.1)
    assert native.calls() == before and torch.equal(w, w_ref)
    # autograd recording an in-place change of a leaf: torch's own error, not a silent compiled write
    leaf = torch.zeros(3, 2, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf"):
        sgd.scatter_sgd(leaf, torch.tensor([0]), torch.ones(1, 2), lr=1.0)


def test_keras3_adagrad_and_sgd_steps_on_slices_take_the_compiled_rules_with_the_foreach_bits():
    def train(mode: str, name: str) -> list[torch.Tensor]:
        previous = native.use(mode)
        try:
            table = slotopt.Variable(torch.linspace(-1.0, 1.0, 50 * 8).reshape(50, 8), name="table")
            opt = getattr(slotopt, name)(learning_rate=0.05)
            g = torch.Generator().manual_seed(3)
            before = native.calls()
            for _ in range(4):
                grad = slotopt.IndexedSlices(torch.randn(30, 8, generator=g), torch.randint(0, 50, (30,), generator=g),
                                             (50, 8))
                opt.apply_gradients([(grad, table)])
            assert (native.calls() - before >= 4) == (mode == "native")
            return [table.detach().clone(), *[v.detach().clone() for v in opt.variables if v.dim() == 2]]
        finally:
            native.use(previous)

    for name in ("Adagrad", "SGD"):
        assert all(same_bits(a, b) for a, b in zip(train("native", name), train("foreach", name), strict=True))


@settings(max_examples=40, deadline=None)
@given(dtype=st.sampled_from(DTYPES), rule=st.sampled_from(["sgd", "adagrad"]), rows=st.integers(1, 30),
       width=st.sampled_from([1, 5, 16]), k=st.integers(0, 40), seed=st.integers(0, 2**31 - 1),
       operands=st.sampled_from(["plain", "int32", "strided-values", "other-dtype-values", "float-lr"]))
def test_the_cpp_call_and_the_ctypes_call_of_a_rule_on_slices_agree_bit_for_bit(dtype, rule, rows, width, k, seed,
                                                                               operands):
    # ``native.apply_slices`` hands plain operands to the C++ table (one call checks them and runs the rule) and
    # everything else to its Python checks and ctypes: both must give the same bits, versions and verdicts.
    from slotopt.kernels.native import tensor_table

    g = torch.Generator().manual_seed(seed)
    table = torch.randn(rows, width, generator=g).to(dtype)
    accumulator = torch.rand(rows, width, generator=g).to(dtype) + 0.1
    indices = torch.randint(0, rows, (k,), generator=g)
    values = torch.randn(k, width, generator=g).to(dtype)
    if operands == "int32":
        indices = indices.to(torch.int32)
    elif operands == "strided-values":
        values = torch.randn(width, k, generator=g).to(dtype).t()
    elif operands == "other-dtype-values":
        values = values.double() if dtype is not torch.float64 else values.float()
    lr = 0.25 if operands != "float-lr" else torch.tensor(0.25).item()
    results = []
    for on in (True, False):
        previous = tensor_table.use(on)
        try:
            w, acc = table.clone(), accumulator.clone()
            versions = (w._version, acc._version)
            before = native.calls()
            with torch.no_grad():
                if rule == "sgd":
                    taken = native.apply_slices("sgd_slices", w, indices, values, None, (lr,))
                else:
                    taken = native.apply_slices("adagrad_slices", w, indices, values, acc, (lr, 1e-7))
            results.append((taken, native.calls() - before, w, acc, w._version - versions[0],
                            acc._version - versions[1]))
        finally:
            tensor_table.use(previous)
    (taken_a, calls_a, w_a, acc_a, vw_a, vacc_a), (taken_b, calls_b, w_b, acc_b, vw_b, vacc_b) = results
    assert taken_a == taken_b and calls_a == calls_b == int(taken_a)
    assert same_bits(w_a, w_b) and same_bits(acc_a, acc_b)
    assert (vw_a > 0) == (vw_b > 0) == taken_a and (vacc_a > 0) == (vacc_b > 0) == (taken_a and rule == "adagrad")


def test_the_cpp_call_refuses_operands_autograd_would_see_changed_and_a_bad_index_writes_nothing():
    from slotopt.kernels.native import tensor_table

    if not tensor_table.active():
        pytest.skip(str(tensor_table.status()))
    address = native._slice_address("sgd_slices", torch.float32)
    code = native._SCALAR_TYPES[torch.float32]
    leaf = torch.zeros(3, 2, requires_grad=True)
    assert tensor_table.slices(address, code, leaf, torch.tensor([0]), torch.ones(1, 2), None, (1.0,)) is None
    w = torch.zeros(3, 2)
    assert tensor_table.slices(address, native._SCALAR_TYPES[torch.float64], w, torch.tensor([0]), torch.ones(1, 2),
                               None, (1.0,)) is None  # a rule of another dtype
    assert tensor_table.slices(0, code, w, torch.tensor([0]), torch.ones(1, 2), None, (1.0,)) is None
    version = w._version
    assert tensor_table.slices(address, code, w, torch.tensor([1, 3]), torch.ones(2, 2), None, (1.0,)) == 1
    assert not w.any() and w._version == version
    assert tensor_table.slices(address, code, w, torch.tensor([1, 1]), torch.ones(2, 2), None, (0.5,)) == -1
    assert w[1].tolist() == [-1.0, -1.0] and w._version == version + 1
