"""Keras 3 slices in one pass over the table (engine/sparse_pass.py) give the bits of the row-block path, for
every rule that takes it, with repeated and unsorted rows, in every compiled dtype, and under the bounds check."""

import pytest
import torch

import slotopt
from slotopt.engine import sparse_pass
from slotopt.kernels import native

pytestmark = pytest.mark.skipif(not native.active(), reason="compiled kernels not built")

CONFIGS = {
    "Adam": lambda: slotopt.Adam(learning_rate=0.01),
    "Adam amsgrad": lambda: slotopt.Adam(learning_rate=0.01, amsgrad=True),
    "AdamW": lambda: slotopt.AdamW(learning_rate=0.01, weight_decay=0.1),
    "Adamax": lambda: slotopt.Adamax(learning_rate=0.01),
    "Nadam": lambda: slotopt.Nadam(learning_rate=0.01),
    "RMSprop": lambda: slotopt.RMSprop(learning_rate=0.01),
    "RMSprop centered momentum": lambda: slotopt.RMSprop(learning_rate=0.01, momentum=0.5, centered=True),
    "SGD momentum": lambda: slotopt.SGD(learning_rate=0.01, momentum=0.9),
    "SGD nesterov": lambda: slotopt.SGD(learning_rate=0.01, momentum=0.9, nesterov=True),
    "SGD momentum weight decay": lambda: slotopt.SGD(learning_rate=0.01, momentum=0.9, weight_decay=0.05),
    "Adam weight decay": lambda: slotopt.Adam(learning_rate=0.01, weight_decay=0.05, amsgrad=True),
    "Lion": lambda: slotopt.Lion(learning_rate=0.01),
    "Adam clipnorm ema": lambda: slotopt.Adam(learning_rate=0.01, clipnorm=1.0, use_ema=True),
}
ROWS = 2000  # 2000 x 40 = 80000 elements: two chunks of the zero-gradient pass


def _run(make, dtype, one_pass, monkeypatch):
    gen = torch.Generator().manual_seed(3)
    table = slotopt.Variable(torch.randn(ROWS, 40, generator=gen).to(dtype), name="table")
    bias = slotopt.Variable(torch.randn(7, generator=gen).to(dtype), name="bias")
    opt = make()
    if not one_pass:
        opt._sparse_one_pass = False
    taken = []
    original = sparse_pass.update
    monkeypatch.setattr(sparse_pass, "update", lambda *a: taken.append(original(*a)) or taken[-1])
    for step in range(4):
        rows = torch.randint(0, ROWS, (64,), generator=gen)
        rows[:8] = torch.tensor([5, 5, 5, ROWS - 1, 0, 5, ROWS - 1, 1999 - step])  # repeats, ends, unsorted
        values = torch.randn(64, 40, generator=gen).to(dtype)
        grads = [slotopt.IndexedSlices(values, rows, (ROWS, 40)), torch.randn(7, generator=gen).to(dtype)]
        if step == 2:  # a dense step in between
            grads[0] = torch.randn(ROWS, 40, generator=gen).to(dtype)
        opt.apply_gradients(zip(grads, [table, bias]))
    return [table.detach().clone(), bias.detach().clone()] + [v.detach().clone() for v in opt.variables], taken


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_one_pass_gives_the_bits_of_the_row_block_path(name, dtype, monkeypatch):
    if dtype not in native.dtypes():
        pytest.skip("dtype not compiled")
    expected, _ = _run(CONFIGS[name], dtype, False, monkeypatch)
    got, taken = _run(CONFIGS[name], dtype, True, monkeypatch)
    assert taken and all(taken), "the one-pass path did not run"
    assert len(expected) == len(got)
    for i, (a, b) in enumerate(zip(expected, got)):
        assert torch.equal(a.view(torch.int16 if a.dtype == torch.bfloat16 else a.dtype), b.view(
            torch.int16 if b.dtype == torch.bfloat16 else b.dtype)) or torch.equal(a, b), f"tensor {i} differs"


def test_one_pass_under_the_bounds_check(monkeypatch):
    previous = native.check_bounds(True)
    try:
        before = native._checked_calls
        got, taken = _run(CONFIGS["Adam"], torch.float32, True, monkeypatch)
        assert all(taken) and native._checked_calls > before
    finally:
        native.check_bounds(previous)
    expected, _ = _run(CONFIGS["Adam"], torch.float32, False, monkeypatch)
    assert all(torch.equal(a, b) for a, b in zip(expected, got))


def test_the_chunked_table_never_reaches_a_foreach_kernel():
    var = torch.zeros(3 * sparse_pass.CHUNK_ELEMENTS)
    chunks = native.Verified.chunks(var, sparse_pass.CHUNK_ELEMENTS)
    assert len(chunks) == 3 and chunks.offsets.tolist()[-1] == var.numel()
    previous = native.use("foreach")
    try:
        from slotopt.kernels import sgd

        with pytest.raises(native.NotCompiled):
            sgd.sgd(chunks, native.Matched([torch.ones(sparse_pass.CHUNK_ELEMENTS)] * 3), lr=0.1)
    finally:
        native.use(previous)
    assert var.eq(0).all()
