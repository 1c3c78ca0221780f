"""The Triton rules on slices (``sgd_slices``, ``adagrad_slices``: the CUDA path of Keras 3 on slices) against the
torch specification (``kernels.sgd.scatter_sgd``, ``kernels.adagrad.adagrad_slices``) and the compiled CPU rules,
bit for bit, under Triton's interpreter (no GPU here: ``TRITON_INTERPRET=1`` runs them on CPU tensors)."""

from __future__ import annotations

import pytest
import torch
from _slice_rules import run_rule, same_bits

from slotopt.kernels import native
from slotopt.kernels import triton as triton_kernels

pytest.importorskip("triton")

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # masked lanes hold whatever they hold

@pytest.fixture
def interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(triton_kernels, "_kernels", None)  # define the kernels under the interpreter
    yield


def _scalars(rule: str, lr: float, epsilon: float) -> tuple[float, ...]:
    return (lr,) if rule == "sgd_slices" else (lr, epsilon)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("rule", ["sgd_slices", "adagrad_slices"])
@pytest.mark.parametrize(("shape", "k", "index_dtype", "epsilon"), [
    ((7, 3), 20, torch.int64, 1e-7), ((50, 5), 20, torch.int32, 0.0), ((50, 5), 0, torch.int64, 1e-7),
    ((9,), 25, torch.int64, 1e-3), ((4, 1100), 6, torch.int64, 1e-7)],  # 1100 columns: two programs
    ids=["7x3", "50x5-int32-eps0", "empty", "flat", "wide"])
def test_triton_rule_on_slices_gives_the_torch_and_compiled_bits(dtype, rule, shape, k, index_dtype, epsilon,
                                                                 interpreter):
    g = torch.Generator().manual_seed(shape[0] * 31 + k)
    table = torch.randn(shape, generator=g, dtype=torch.float64).mul_(3.0).to(dtype)
    accumulator = torch.rand(shape, generator=g, dtype=torch.float64).add_(0.1).to(dtype)
    # Fewer rows than slices: repeated, unsorted indices
    indices = torch.randint(0, min(shape[0], 6), (k,), generator=g).to(index_dtype)
    values = torch.randn((k, *shape[1:]), generator=g, dtype=torch.float64).mul_(2.0).to(dtype)
    lr = 0.37
    outputs = {}
    for path in ("foreach", "native", "triton"):
        w, acc = table.clone(), accumulator.clone()
        if path == "triton":
            version = w._version
            with torch.no_grad():
                assert triton_kernels.apply_slices(rule, w, indices, values,
                                                   acc if rule == "adagrad_slices" else None, _scalars(rule, lr, epsilon))
            assert w._version > version  # written in place, as torch's ops would record it
        else:
            calls = run_rule(rule, path, w, indices, values, acc, lr, epsilon)
            # (whether the library is loaded, not whether the environment's mode runs it: run_rule sets the mode)
            assert calls == (0 if path == "foreach" or native.status()["library"] is None else 1)
        outputs[path] = (w, acc)
    for path in ("native", "triton"):
        assert all(same_bits(a, b) for a, b in zip(outputs[path], outputs["foreach"])), path
    if k:
        assert not torch.equal(outputs["triton"][0], table)  # a test that can fail: the rows did move
    else:
        assert torch.equal(outputs["triton"][0], table) and torch.equal(outputs["triton"][1], accumulator)


def test_a_repeated_row_takes_each_slice_in_turn_on_the_triton_path(interpreter):
    w = torch.tensor([[1.0], [5.0]], dtype=torch.float64)
    assert triton_kernels.apply_slices("sgd_slices", w, torch.tensor([0, 0]),
                                       torch.tensor([[1e16], [1.0]], dtype=torch.float64), None, (1.0,))
    # (1 - 1e16) - 1 rounds twice; the summed step 1e16 + 1 would round differently
    assert w[0, 0].item() == (1.0 - 1e16) - 1.0 and w[1, 0].item() == 5.0
    w, acc = torch.tensor([[1.0], [5.0]], dtype=torch.float64), torch.zeros(2, 1, dtype=torch.float64)
    assert triton_kernels.apply_slices("adagrad_slices", w, torch.tensor([0, 0]),
                                       torch.tensor([[3.0], [4.0]], dtype=torch.float64), acc, (1.0, 0.0))
    # acc = 9 + 16 = 25 for both slices; then 1 - 3/5 - 4/5, one slice at a time
    assert acc[0, 0].item() == 25.0 and w[0, 0].item() == (1.0 - 0.6) - 0.8 and w[1, 0].item() == 5.0


@pytest.mark.parametrize("rule", ["sgd_slices", "adagrad_slices"])
@pytest.mark.parametrize("bad", [7, -1])
def test_an_index_outside_the_table_is_refused_with_nothing_changed(rule, bad, interpreter):
    table, accumulator = torch.arange(14.0).reshape(7, 2), torch.full((7, 2), 0.5)
    w, acc = table.clone(), accumulator.clone()
    with pytest.raises(ValueError, match=rf"indices.*\[0, 7\).*indices\[2\]={bad}"):
        triton_kernels.apply_slices(rule, w, torch.tensor([1, 3, bad, 2], dtype=torch.int32), torch.ones(4, 2),
                                    acc if rule == "adagrad_slices" else None, _scalars(rule, 0.5, 1e-7))
    assert torch.equal(w, table) and torch.equal(acc, accumulator)


def test_the_triton_path_declines_what_it_cannot_take(interpreter, monkeypatch):
    w, acc, indices = torch.zeros(5, 2), torch.ones(5, 2), torch.tensor([0, 4])
    declined = [
        ("sgd_slices", w.half(), indices, torch.ones(2, 2).half(), None),  # not float32/float64
        ("sgd_slices", torch.zeros(2, 5).t(), indices, torch.ones(2, 2), None),  # not contiguous
        ("sgd_slices", w, indices, torch.ones(2, 3), None),  # another row shape
        ("sgd_slices", w, indices, torch.ones(2, 2, dtype=torch.float64), None),  # another dtype
        ("sgd_slices", w, indices.float(), torch.ones(2, 2), None),  # indices not integers
        ("adagrad_slices", w, indices, torch.ones(2, 2), None),  # the state missing
        ("adagrad_slices", w, indices, torch.ones(2, 2), acc.double()),
        ("adadelta_slices", w, indices, torch.ones(2, 2), acc),  # no such rule
    ]
    for rule, param, idx, values, state in declined:
        assert not triton_kernels.apply_slices(rule, param, idx, values, state, (0.1, 1e-7))
    assert not triton_kernels.apply_slices("sgd_slices", w, indices, torch.ones(2, 2), None, (torch.tensor(0.1),))
    with torch.enable_grad():
        assert not triton_kernels.apply_slices("sgd_slices", torch.zeros(5, 2, requires_grad=True), indices,
                                               torch.ones(2, 2), None, (0.1,))
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # CPU tensors then stay on the compiled and torch paths
    assert not triton_kernels.apply_slices("sgd_slices", w, indices, torch.ones(2, 2), None, (0.1,))
    assert torch.equal(w, torch.zeros(5, 2)) and torch.equal(acc, torch.ones(5, 2))
