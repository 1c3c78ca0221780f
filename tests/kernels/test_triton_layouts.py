"""The launch table's two layouts (``kernels/triton/table.py``: ``rows``, the default, each program's row holding its
count and its operands' addresses; ``table``, a meta row per program and an address table), bit for bit against
the foreach rules under Triton's interpreter, and compiled for sm_90: the rows layout takes one memory round trip
before the data loads, the table layout two (read from the PTX, ``tests/_ptx_prologue.py``). Also the packed state
of small variables on the Triton path: no staging copies once the first step has found the rule taken."""

from __future__ import annotations

import pytest
import torch
from test_native_kernels import CASES, _assert_same_bits, _make_lists

from slotopt import numerics
from slotopt.kernels import native
from slotopt.kernels import triton as triton_kernels
from slotopt.kernels.triton import table

triton = pytest.importorskip("triton")

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NaN of sqrt(v - a*a) < 0, masked lanes

#: The first case of each rule with a Triton kernel.
FIRSTS = list({c[1].rule: c for c in reversed([c for c in CASES if c[1].rule in triton_kernels.RULES])}.values())


@pytest.fixture
def interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(triton_kernels, "_kernels", None)  # define the kernels under the interpreter
    monkeypatch.setattr(numerics.ops, "_estimate_function", lambda: None)  # the foreach rules as on a GPU
    yield
    table.configure(None)


def _foreach(kernel, lists, kwargs, steps):
    previous = native.use("foreach")
    try:
        for _ in range(steps):
            kernel(*lists, **kwargs)
    finally:
        native.use(previous)


@pytest.mark.parametrize("case", FIRSTS, ids=[c[0] for c in FIRSTS])
def test_every_rule_in_the_table_layout_equals_its_foreach_rule(case, interpreter, monkeypatch):
    """The default layout is checked for every case by test_triton_kernels.py; the other one here, once a rule."""
    import test_native_kernels

    monkeypatch.setattr(test_native_kernels, "SIZES", [1, 7, 1500])
    table.configure(None, layout="table")
    name, kernel, roles, kwargs = case
    reference = _make_lists(roles, torch.float32, seed=len(name))
    candidate = [None if ts is None else [t.clone() for t in ts] for ts in reference]
    _foreach(kernel, reference, kwargs, 2)
    values = kernel.scalar_vector(*candidate, **kwargs)
    before = triton_kernels.launches()
    for _ in range(2):
        assert triton_kernels.apply(kernel.rule, candidate, values)
    assert triton_kernels.launches() == before + 2
    assert table.launch_table([ts for ts in candidate if ts is not None][:1]).row == 0
    _assert_same_bits(reference, candidate, name)


def _small(count, ragged, seed):
    """``count`` tensors of 1,024 and, with ``ragged``, empty ones and sizes that are not multiples of 16."""
    sizes = [1024] * count
    if ragged:
        sizes[3:3] = [0, 1, 15, 17, 1000, 0, 1025, 2049]
    generator = torch.Generator().manual_seed(seed)
    return sizes, generator


@pytest.mark.parametrize("layout", table.LAYOUTS)
@pytest.mark.parametrize("ragged", [False, True], ids=["1024s", "ragged"])
def test_many_small_tensors_in_one_launch_give_the_foreach_bits(layout, ragged, interpreter):
    from slotopt.kernels.adam import adam
    from slotopt.kernels.sgd import keras_momentum

    table.configure(None, layout=layout)
    sizes, generator = _small(64, ragged, seed=int(ragged))
    for kernel, count, kwargs in ((keras_momentum, 3, {"lr": 0.01, "momentum": 0.9, "nesterov": False}),
                                  (adam, 4, {"alpha": 1e-3, "one_minus_beta_1": 0.1, "one_minus_beta_2": 0.001,
                                             "epsilon": 1e-7})):
        start = [[torch.randn(n, generator=generator) for n in sizes] for _ in range(count)]
        if kernel is adam:
            start[3] = [t.abs() for t in start[3]]
        reference = [[t.clone() for t in ts] for ts in start] + ([None] if kernel is adam else [])
        candidate = [[t.clone() for t in ts] for ts in start] + ([None] if kernel is adam else [])
        _foreach(kernel, reference, kwargs, 2)
        values = kernel.scalar_vector(*candidate, **kwargs)
        before = triton_kernels.launches()
        for _ in range(2):
            assert triton_kernels.apply(kernel.rule, candidate, values)
        assert triton_kernels.launches() == before + 2  # the whole group: one launch a step
        launch = table.launch_table(candidate[:count], (1,))
        assert launch.aligned == (not ragged)
        assert launch.programs == sum(-(-n // 1024) for n in sizes)
        _assert_same_bits(reference[:count], candidate[:count], f"{kernel.rule} {layout}")


@pytest.mark.parametrize("layout", table.LAYOUTS)
def test_a_flat_state_operand_and_a_gradient_that_is_its_variable_in_either_layout(layout, interpreter):
    from slotopt.kernels.sgd import keras_momentum

    table.configure(None, layout=layout)
    sizes = [3, 1024, 40, 0, 2048, 17]
    generator = torch.Generator().manual_seed(5)
    params = [torch.randn(n, generator=generator) for n in sizes]
    grads = [torch.randn(n, generator=generator) for n in sizes]
    flat = torch.randn(sum(sizes), generator=generator)
    kwargs = {"lr": 0.1, "momentum": 0.9, "nesterov": True}
    reference = [[p.clone() for p in params], grads, list(flat.clone().split(sizes))]
    _foreach(keras_momentum, reference, kwargs, 2)
    values = keras_momentum.scalar_vector(params, grads, [flat], **kwargs)
    for _ in range(2):
        assert triton_kernels.apply("keras_momentum", [params, grads, [flat]], values)
    _assert_same_bits(reference, [params, grads, list(flat.split(sizes))], f"flat state, {layout}")
    # the gradient IS the variable (read once, before anything is written)
    same = [p.clone() for p in params]
    reference = [[p.clone() for p in params]]
    reference.append(reference[0])
    reference.append([torch.zeros(n) for n in sizes])
    _foreach(keras_momentum, reference, kwargs, 1)
    moments = [torch.zeros(n) for n in sizes]
    assert triton_kernels.apply("keras_momentum", [same, same, moments], values)
    _assert_same_bits([reference[0], reference[2]], [same, moments], f"aliased, {layout}")


def test_the_rows_hold_64_bit_addresses_past_two_to_the_31_elements():
    """A tensor of 3 * 2**31 + 5 elements (never allocated: the rows are numpy arithmetic on its address): each
    program's address is its chunk's first element's, exactly, and the last program counts the 5 left over."""
    size = 3 * 2 ** 31 + 5
    block = 1 << 20  # (few programs, to keep the test small; the kernel's offsets are below the block either way)
    base = (1 << 40) + 256
    addresses = torch.tensor([[base, base + 8 * size, 1 << 47]], dtype=torch.float64).numpy().astype("uint64").T
    addresses = addresses.reshape(3, 1)
    rows = table.rows_layout(addresses, [size], block, 4).reshape(-1, 4)
    programs = -(-size // block)
    assert rows.shape == (programs, 4)
    assert rows[:, 0].tolist() == [block] * (programs - 1) + [5]
    last = (programs - 1) * block
    assert int(rows[-1, 1]) == base + 4 * last and int(rows[-1, 2]) == base + 8 * size + 4 * last
    assert int(rows[-1, 3]) == (1 << 47) + 4 * last and last > 2 ** 32
    assert [int(a) for a in rows[:, 1]] == [base + 4 * block * p for p in range(programs)]


def test_the_rows_layout_takes_one_round_trip_before_the_data_and_the_table_layout_two():
    """Compiled for sm_90 (no GPU needed): in the PTX, every load of the rows layout's prologue depends on the
    program's id alone, so the data loads are the second round trip; the table layout's address loads wait for
    the tensor's index, and its data loads are the third."""
    import _ptx_prologue

    from slotopt.kernels.native.scalars import DESCRIPTIONS

    for rule, dtype, aligned in (("keras_momentum", "fp32", True), ("adam", "fp32", True),
                                 ("rmsprop", "fp64", False)):
        row = table._width(DESCRIPTIONS[rule].operands)
        for layout_row, trips in ((row, 2), (0, 3)):
            compiled = _ptx_prologue.compile_rule(rule, dtype, aligned, layout_row, flags=1 if rule == "adam" else 0)
            depths = _ptx_prologue.load_depths(compiled.asm["ptx"])
            assert max(level for _, level in depths) == trips, (rule, layout_row)
            levels = [level for _, level in depths]
            operands = DESCRIPTIONS[rule].operands
            if layout_row:  # the row's count and addresses (and float64's scalars) at once, then the data
                assert set(levels) == {1, 2}, (rule, depths)
            else:  # the meta row, then one address per operand loaded, then the data
                assert set(levels) == {1, 2, 3}, (rule, depths)
            if dtype == "fp32":  # (scalars by value: every operand read, adam's optional one under its flag)
                assert levels.count(1) == (1 + operands if layout_row else 3), (rule, depths)
                assert levels.count(2) == (levels.count(trips) if layout_row else operands), (rule, depths)


def test_small_variables_packed_state_takes_no_staging_copy_once_triton_took_the_rule(interpreter):
    """The engine's packed small variables (``engine/state.py``): where the compiled CPU rules do not take them (a
    GPU's tensors; here the foreach mode with the interpreter's Triton kernels offered every compiled call first,
    through the hook capturable steps use), the first step stages them as before and learns that Triton took the
    rule; later steps launch on the variables and gradients where they are, with the packed state as one flat
    operand: one launch, no staging copies, the foreach path's bits."""
    import slotopt

    def launcher(rule, lists, values, read_only):
        return triton_kernels.apply(rule, lists, values, read_only)

    def run(through_triton):
        generator = torch.Generator().manual_seed(11)
        params = [torch.nn.Parameter(torch.randn(n, generator=generator)) for n in [64] * 30 + [5, 17]]
        opt = slotopt.SGD(learning_rate=0.01, momentum=0.9, params=params)
        counts, copies = [], []
        for _ in range(4):
            for p in params:
                p.grad = torch.randn(p.shape, generator=generator)
            previous = native.use("foreach")
            hook = native.capturable_launcher(launcher if through_triton else None)
            before = triton_kernels.launches()
            flat = opt.__dict__.get("_flat_state")
            staged = []
            if flat is not None:  # (made at the first step)
                stage = flat.stage
                flat.stage = lambda *a, s=stage, st=staged: st.append(1) or s(*a)
            try:
                with triton_kernels.recording() as launches:
                    opt.step()
            finally:
                native.capturable_launcher(hook)
                native.use(previous)
                if flat is not None:
                    del flat.stage
            counts.append(triton_kernels.launches() - before)
            copies.append((len(staged), [arguments[3] for _, _, arguments, _ in launches]))
        return [p.detach().clone() for p in params], counts, copies

    expected, counts, _ = run(False)
    assert counts == [0, 0, 0, 0]
    got, counts, copies = run(True)
    assert counts == [1, 1, 1, 1]
    # step 1 staged (2 staging copies, one flat tensor: T = 1); then the 32 variables where they are (T = 32)
    assert copies == [(2, [1]), (0, [32]), (0, [32]), (0, [32])]
    for e, g in zip(expected, got):
        assert torch.equal(e.view(torch.int32), g.view(torch.int32))
