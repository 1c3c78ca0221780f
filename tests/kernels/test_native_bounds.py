"""The debug bounds check of the compiled kernels (kernels/native, ``check_bounds``): every pointer and length a
rule is handed lies inside the tensor it was computed for, checked in C against extents read from the tensor
objects before the rule runs. The sparse paths (Keras 3 slices, legacy/TF1 lazy rows) and the step plan's
remembered addresses run through it here."""

import numpy as np
import pytest
import torch

import slotopt
from slotopt.kernels import native

pytestmark = pytest.mark.skipif(not native.active() or not hasattr(native._library, "slotopt_check_table"),
                                reason="compiled kernels not built")


@pytest.fixture
def checked():
    previous = native.check_bounds(True)
    yield
    native.check_bounds(previous)


def _table(*tensors):
    table = np.array([[t.data_ptr()] for t in tensors], dtype=np.uint64)
    extents = np.array([[native._extent(t) for t in tensors]], dtype=np.uint64)[0].T.reshape(2, -1)
    return table, extents


def test_a_pointer_or_length_outside_its_tensor_is_refused_in_c():
    w, g = torch.zeros(8), torch.zeros(8)
    table, extents = _table(w, g)
    native._check_table(table, np.array([0, 8], dtype=np.int64), extents, 4)  # fits
    with pytest.raises(native.BoundsError, match="operand 1, tensor 0"):
        native._check_table(table, np.array([0, 8], dtype=np.int64),
                            np.array(extents).astype(np.uint64) - np.array([[0, 0], [0, 4]], dtype=np.uint64), 4)
    with pytest.raises(native.BoundsError, match="operand 0"):
        native._check_table(table, np.array([0, 9], dtype=np.int64), extents, 4)  # one element too many
    moved = table.copy()
    moved[0, 0] += 4  # one element into the tensor: its last element past the end
    with pytest.raises(native.BoundsError, match="operand 0"):
        native._check_table(moved, np.array([0, 8], dtype=np.int64), extents, 4)
    with pytest.raises(native.BoundsError, match="offsets"):
        native._check_table(np.zeros((2, 2), dtype=np.uint64), np.array([0, 5, 3], dtype=np.int64),
                            np.zeros((2, 4), dtype=np.uint64), 4)


def test_stale_addresses_are_refused_before_the_rule_runs(checked):
    params, grads = [torch.zeros(4), torch.zeros(6)], native.Matched([torch.ones(4), torch.ones(6)])
    grads.addresses = np.array([grads[0].data_ptr(), grads[0].data_ptr()], dtype=np.uint64)  # 6 elements in 4
    with pytest.raises(native.BoundsError):
        native.apply("sgd", [params, grads], [0.1, 0.0, 0.0, 0.0])
    assert all(p.eq(0).all() for p in params)


def _embedding_steps(make, sparse_rows):
    torch.manual_seed(0)
    table = slotopt.Variable(torch.randn(300, 8), name="table")
    other = slotopt.Variable(torch.randn(5), name="bias")
    opt = make()
    for step in range(3):
        rows = torch.tensor(sparse_rows[step % len(sparse_rows)])
        grad = slotopt.IndexedSlices(torch.randn(len(rows), 8), rows, (300, 8))
        opt.apply_gradients([(grad, table), (torch.randn(5), other)])
        opt.apply_gradients([(torch.randn(300, 8), table), (torch.randn(5), other)])
    return table.detach().clone(), other.detach().clone()


MAKERS = {
    "keras3 Adam": lambda: slotopt.Adam(learning_rate=0.01),
    "keras3 SGD momentum": lambda: slotopt.SGD(learning_rate=0.01, momentum=0.9),
    "keras3 RMSprop": lambda: slotopt.RMSprop(learning_rate=0.01, momentum=0.5),
    "keras3 Nadam": lambda: slotopt.Nadam(learning_rate=0.01),
    "legacy Adam": lambda: slotopt.legacy.Adam(learning_rate=0.01),
    "legacy Adagrad": lambda: slotopt.legacy.Adagrad(learning_rate=0.01),
    "v1 Adam": lambda: slotopt.v1.AdamOptimizer(learning_rate=0.01),
    "v1 Ftrl": lambda: slotopt.v1.FtrlOptimizer(learning_rate=0.01),
}


@pytest.mark.parametrize("name", list(MAKERS))
def test_sparse_and_planned_steps_pass_the_bounds_check_with_the_same_bits(name):
    rows = [[0, 299, 5, 5, 17], [150], [299, 0, 0, 298]]
    expected = _embedding_steps(MAKERS[name], rows)
    previous = native.check_bounds(True)
    try:
        before = native._checked_calls
        got = _embedding_steps(MAKERS[name], rows)
        assert native._checked_calls > before  # the compiled calls were checked
    finally:
        native.check_bounds(previous)
    assert all(torch.equal(a, b) for a, b in zip(expected, got))
