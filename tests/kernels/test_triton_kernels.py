"""The Triton kernels (the CUDA path) against the foreach kernels, bit for bit, under Triton's interpreter.

There is no GPU here: ``TRITON_INTERPRET=1`` runs the same kernels on CPU tensors with NumPy, which performs
every operation rounded in the tensor dtype, like the GPU with FMA contraction off and ``div_rn``/``sqrt_rn``.
"""

from __future__ import annotations

import pytest
import torch
from test_native_kernels import CASES, _assert_same_bits, _make_lists

from slotopt import numerics
from slotopt.kernels import native
from slotopt.kernels import triton as triton_kernels

triton = pytest.importorskip("triton")

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NaN of sqrt(v - a*a) < 0, masked lanes

TRITON_CASES = [c for c in CASES if c[1].rule in triton_kernels.RULES]
SIZES = [1, 7, 1500]


@pytest.fixture
def interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(triton_kernels, "_kernels", None)  # define the kernels under the interpreter
    yield


def test_every_family_the_issue_names_has_triton_kernels():
    assert {"adam", "decoupled_weight_decay", "keras_momentum", "rmsprop", "adagrad"} <= set(triton_kernels.RULES)
    assert len({c[1].rule for c in TRITON_CASES}) == len(triton_kernels.RULES)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("case", TRITON_CASES, ids=[c[0] for c in TRITON_CASES])
def test_triton_rule_equals_foreach_rule_bit_for_bit(case, dtype, interpreter, monkeypatch):
    import test_native_kernels

    monkeypatch.setattr(test_native_kernels, "SIZES", SIZES)
    # On the CPU, the foreach rules of TensorFlow's fused float32 Adagrad/ProximalAdagrad/Adadelta kernels take
    # the CPU's rsqrtps estimate (slotopt.numerics.rsqrt); on a GPU, where Triton runs, they take 1 / sqrt(x),
    # as the Triton kernels do. The reference here is the foreach rule as it runs on a GPU.
    monkeypatch.setattr(numerics.ops, "_estimate_function", lambda: None)
    name, kernel, roles, kwargs = case
    reference = _make_lists(roles, dtype, seed=len(name))
    candidate = [None if ts is None else [t.clone() for t in ts] for ts in reference]
    previous = native.use("foreach")
    try:
        for _ in range(2):
            kernel(*reference, **kwargs)
    finally:
        native.use(previous)
    values = kernel.scalar_vector(*candidate, **kwargs)
    for _ in range(2):
        assert triton_kernels.apply(kernel.rule, candidate, values)
    _assert_same_bits(reference, candidate, name)


def test_triton_path_declines_what_it_cannot_take(interpreter):
    params, grads = [torch.randn(8).half()], [torch.randn(8).half()]
    assert not triton_kernels.apply("sgd", [params, grads], [0.1])
    assert not triton_kernels.apply("adadelta", [params, grads], [0.1])


def test_without_the_interpreter_cpu_tensors_stay_on_the_other_paths(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert not triton_kernels.apply("sgd", [[torch.randn(8)], [torch.randn(8)]], [0.1])


def _sgd_group(sizes, dtype=torch.float32):
    generator = torch.Generator().manual_seed(len(sizes))
    params = [torch.randn(n, generator=generator, dtype=dtype) for n in sizes]
    grads = [torch.randn(n, generator=generator, dtype=dtype) for n in sizes]
    return params, grads, [p - g * 0.25 for p, g in zip(params, grads)]


def test_a_group_of_many_tensors_is_one_launch_with_the_foreach_bits(interpreter):
    from slotopt.kernels.triton import table

    sizes = [0, 1, 7, 16, 1024, 1025, 3000, 0, 5]  # empty tensors, ragged tails, a chunk boundary
    params, grads, expected = _sgd_group(sizes)
    before = triton_kernels.launches()
    assert triton_kernels.apply("sgd", [params, grads], [0.25, 0.0])
    assert triton_kernels.launches() == before + 1
    assert all(torch.equal(p, e) for p, e in zip(params, expected))
    launch = table.launch_table([params, grads])
    assert (launch.tensors, launch.programs, launch.aligned) == (9, 1 + 1 + 1 + 1 + 2 + 3 + 1, False)


def test_the_launch_table_is_kept_for_the_same_addresses_and_remade_for_others(interpreter):
    from slotopt.kernels.triton import table

    params, grads, _ = _sgd_group([16, 2048, 4096])
    first = table.launch_table([params, grads])
    assert first.aligned  # torch's allocations are 16-byte aligned and every size a multiple of 16
    assert table.launch_table([params, grads]) is first
    other = [g.clone() for g in grads]
    remade = table.launch_table([params, other])
    assert remade is not first
    # The rows layout (the default): per program its count and both operands' addresses of its chunk, padded to 4.
    chunks = [(0, 0, 16), (1, 0, 1024), (1, 1024, 1024), (2, 0, 1024), (2, 1024, 1024), (2, 2048, 1024),
              (2, 3072, 1024)]
    assert remade.row == 4 and remade.programs == len(chunks)
    assert remade.meta.view(-1, 4).tolist() == [[n, params[t].data_ptr() + 4 * start, other[t].data_ptr() + 4 * start,
                                                 0] for t, start, n in chunks]
    table.configure(None, layout="table")  # the table layout: the address table, then (tensor, start, end) rows
    try:
        old = table.launch_table([params, other])
    finally:
        table.configure(None)
    assert old.row == 0 and old is not remade
    assert old.addresses.view(2, 3)[1].tolist() == [g.data_ptr() for g in other]
    assert old.meta.view(-1, 3).tolist() == [[0, 0, 16], [1, 0, 2048], [1, 1024, 2048], [2, 0, 4096],
                                             [2, 1024, 4096], [2, 2048, 4096], [2, 3072, 4096]]


def test_a_flat_state_buffer_serves_as_one_operand_for_the_whole_group(interpreter):
    sizes = [3, 1024, 40]
    generator = torch.Generator().manual_seed(1)
    params = [torch.randn(n, generator=generator) for n in sizes]
    grads = [torch.randn(n, generator=generator) for n in sizes]
    flat = torch.randn(sum(sizes), generator=generator)
    momenta = list(flat.clone().split(sizes))
    reference = [[p.clone() for p in params], grads, momenta]
    previous = native.use("foreach")
    try:
        from slotopt.kernels import sgd as sgd_kernels

        sgd_kernels.keras_momentum(*reference, lr=0.1, momentum=0.9, nesterov=False)
    finally:
        native.use(previous)
    assert triton_kernels.apply("keras_momentum", [params, grads, [flat]], [0.1, 0.9, 0.0, 0.0, 0.0, 0.0])
    _assert_same_bits(reference, [params, grads, list(flat.split(sizes))], "keras_momentum, flat state")


def test_a_launch_moves_the_version_counters_of_what_it_writes_only(interpreter):
    params, grads, _ = _sgd_group([8, 8])
    before = [t._version for t in params + grads]
    assert triton_kernels.apply("sgd", [params, grads], [0.25, 0.0])
    after = [t._version for t in params + grads]
    assert after == [before[0] + 1, before[1] + 1, before[2], before[3]]


def test_a_tensor_that_does_not_fit_leaves_the_whole_group_to_foreach(interpreter):
    params, grads, _ = _sgd_group([8, 16])
    untouched = [p.clone() for p in params]
    for bad in ([grads[0], grads[1].double()], [grads[0], torch.randn(32)[::2]], [grads[0], torch.randn(15)]):
        assert not triton_kernels.apply("sgd", [params, bad], [0.25, 0.0])
        assert all(torch.equal(p, u) for p, u in zip(params, untouched))


def test_the_kernels_compile_for_a_hopper_gpu_without_contraction_or_approximations():
    """Triton's compiler runs without a GPU: each kernel's PTX for sm_90 has no fused multiply-add, only correctly
    rounded division and root, and vector loads where the group is aligned."""
    import re

    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from slotopt.kernels.native.scalars import DESCRIPTIONS
    from slotopt.kernels.triton import rules

    kernels = rules.build()
    for name, dtype, aligned, row in (("adam", "fp32", True, 8), ("rmsprop", "fp64", False, 8),
                                      ("adam", "fp32", True, 0), ("rmsprop", "fp64", False, 0)):
        flags = {flag: 1 for flag, _ in DESCRIPTIONS[name].flags}
        # float32 takes its scalars by value (kernel arguments), float64 from the scalar vector; both layouts
        constants = {**flags, "BY_VALUE": dtype == "fp32", "ALIGNED": aligned, "BLOCK": 1024, "ROW": row}
        signature = {"tab_ptr": "*i64", "meta_ptr": "*i64", "s_ptr": f"*{dtype}", "T": "i32",
                     **{f"S{i}": "fp32" for i in range(len(DESCRIPTIONS[name].entries))}, **{k: "constexpr" for k in constants}}
        compiled = triton.compile(ASTSource(kernels[name], signature, constexprs=constants),
                                  target=GPUTarget("cuda", 90, 32), options={"enable_fp_fusion": False})
        ptx = compiled.asm["ptx"]
        assert not re.search(r"\bfma\.", ptx) and "approx" not in ptx, name
        assert re.search(r"div\.rn\.f" + dtype[2:], ptx) and re.search(r"sqrt\.rn\.f" + dtype[2:], ptx), name
        assert bool(re.search(r"ld\.global(\.\w+)*\.v[24]\.", ptx)) == aligned, name


def test_the_gradients_are_checked_on_every_call_even_at_known_addresses(interpreter):
    params, grads, _ = _sgd_group([16, 32])
    storage = torch.randn(64)
    assert triton_kernels.apply("sgd", [params, [grads[0], storage[:32]]], [0.25, 0.0])
    before = [p.clone() for p in params]
    # The very addresses of the last call (its table is kept), but the second gradient is now a strided view of the
    # same memory: refused, and nothing changes.
    strided = torch.as_strided(storage, (32,), (2,))
    assert strided.data_ptr() == storage.data_ptr()
    assert not triton_kernels.apply("sgd", [params, [grads[0], strided]], [0.25, 0.0])
    assert all(torch.equal(p, b) for p, b in zip(params, before))


def test_a_gradient_that_is_its_variable_leaves_a_decayed_step_to_foreach(interpreter):
    params, _, _ = _sgd_group([16])
    assert not triton_kernels.apply("sgd", [params, params], [0.25, 1.0, 0.1, 0.25])  # decay first, then read g
    assert triton_kernels.apply("sgd", [params, params], [0.25, 0.0, 0.0, 0.0])  # no decay: one read serves


def test_a_scalar_vector_is_sent_once_per_value_and_told_apart_by_its_bits():
    from slotopt.kernels.triton import table

    first = table.scalar_vector([0.5, 0.0], torch.float32, torch.device("cpu"))
    assert table.scalar_vector([0.5, 0.0], torch.float32, torch.device("cpu")) is first
    negative_zero = table.scalar_vector([0.5, -0.0], torch.float32, torch.device("cpu"))
    assert negative_zero is not first and torch.signbit(negative_zero[1])
    wide = table.scalar_vector([0.1], torch.float64, torch.device("cpu"))
    assert wide.dtype == torch.float64 and wide.item() == 0.1


def test_other_sizes_at_the_same_addresses_get_their_own_table(interpreter):
    storage = torch.randn(64)
    grads = torch.randn(64)
    expected = storage[:48] - grads[:48] * 0.25
    assert triton_kernels.apply("sgd", [[storage[:32]], [grads[:32]]], [0.0, 0.0])  # a step of 0: nothing moves
    assert triton_kernels.apply("sgd", [[storage[:48]], [grads[:48]]], [0.25, 0.0])  # the same addresses, 48 now
    assert torch.equal(storage[:48], expected)


def test_the_block_is_chosen_by_size_and_every_choice_gives_the_same_bits(interpreter, monkeypatch):
    from slotopt.kernels.triton import table

    monkeypatch.delenv("SLOTOPT_TRITON_BLOCK", raising=False)
    assert table.choose(4096 * 4096, 1) == (1024, 4)  # one large tensor: 1024x4 measured fastest on an H200
    assert table.choose(34_451_200, 150) == (1024, 4)  # a model of large tensors: likewise
    assert table.choose(2_048_000, 2000) == (1024, 4)  # many small tensors: larger programs mostly masked off
    assert table.choose(1 << 21, 1) == (1024, 4)  # too few programs of 4,096 to fill a GPU
    monkeypatch.setenv("SLOTOPT_TRITON_BLOCK", "2048x4")
    assert table.choose(16, 1) == (2048, 4)
    monkeypatch.setenv("SLOTOPT_TRITON_BLOCK", "1000x4")  # not a power of two: the size-based choice
    assert table.choose(16, 1) == (1024, 4)
    monkeypatch.delenv("SLOTOPT_TRITON_BLOCK")
    with pytest.raises(ValueError, match="powers of two"):
        triton_kernels.configure(3000, 4)

    from slotopt.kernels.adam import adam

    sizes = [5000, 16, 4096, 1]
    generator = torch.Generator().manual_seed(7)
    start = [[torch.randn(n, generator=generator) for n in sizes] for _ in range(4)]
    start[3] = [t.abs() for t in start[3]]
    kwargs = {"alpha": 1e-3, "one_minus_beta_1": 0.1, "one_minus_beta_2": 0.001, "epsilon": 1e-7}
    expected = [[t.clone() for t in ts] for ts in start]
    previous = native.use("foreach")
    try:
        for _ in range(2):
            adam(*expected, None, **kwargs)
    finally:
        native.use(previous)
    try:
        for block in (None, 16, 64, 4096):
            triton_kernels.configure(block, 8)
            lists = [[t.clone() for t in ts] for ts in start] + [None]
            values = adam.scalar_vector(*lists, **kwargs)
            for _ in range(2):  # the second call at the same addresses: the kept table of this block
                assert triton_kernels.apply("adam", lists, values)
            for got, want in zip(lists, expected):
                for g, w in zip(got, want):
                    assert torch.equal(g.view(torch.int32), w.view(torch.int32)), block
    finally:
        triton_kernels.configure(None)


def test_float32_scalars_travel_as_arguments_and_float64_ones_in_the_device_vector(interpreter):
    from slotopt.kernels.triton import table

    table.clear()
    for dtype in (torch.float32, torch.float64):
        params = [torch.ones(40, dtype=dtype)]
        grads = [torch.full((40,), 2.0, dtype=dtype)]
        for step in range(3):  # a new rate each step, as Adam's bias correction
            assert triton_kernels.apply("sgd", [params, grads], [0.125 * (step + 1), 0.0])
        assert torch.equal(params[0], torch.full((40,), 1.0 - 2.0 * 0.75, dtype=dtype))
        vectors = set(table._scalars)
        # float32: no scalar vector was made (nothing to copy per step); float64: one per distinct vector
        assert len(vectors) == (0 if dtype == torch.float32 else 3), dtype
