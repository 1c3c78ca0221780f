"""The C++ tensor table (kernels/native/tensor_table.cpp) against the Python checks it replaces.

Every verdict of an ordinary step's checks (``StepPlan.fits``, ``state_operands``) must be the same from both
paths on the same inputs, hostile ones included; the table may only refuse more (lazily negated or conjugated
views, which then take the full path). Its other helpers must equal what they replace: ``gradients`` the
``(p.grad, p)`` list, ``bump_versions`` torch's version bump.
"""

import importlib.util
import os
import random
import types

import numpy as np
import pytest
import torch

import slotopt
from slotopt import legacy, v1
from slotopt.engine.plan import StepPlan
from slotopt.engine.proof import validation
from slotopt.kernels import native
from slotopt.kernels.native import tensor_table

pytestmark = pytest.mark.skipif(not tensor_table.active(), reason=str(tensor_table.status()))


@pytest.fixture(autouse=True, params=tensor_table.builds() or ["none"])
def build(request):
    """Each test runs on every build of the C++ checks that loads here: the source install's and, where one was
    built for this torch (tools/build_wheel_checks.py, ``make wheel``), the wheel's."""
    if request.param == "none":
        yield None
        return
    previous = tensor_table.choose(request.param)
    try:
        yield request.param
    finally:
        tensor_table.choose(previous)


def test_the_suite_runs_the_table_built_for_this_torch():
    # The set-up builds it (make test): a table that silently did not load would leave these tests skipped.
    assert tensor_table.status()["active"], tensor_table.status()


class _Opt:
    foreach = True

    def __init__(self, variables):
        self._vars = list(variables)
        self._var_index = {id(v): i for i, v in enumerate(self._vars)}

    def _groups(self, positions):
        return [list(positions)]


def _variables(rng, n):
    shapes = [(rng.randint(1, 5),) * rng.randint(1, 3) for _ in range(n)]
    return [torch.nn.Parameter(torch.randn(s)) for s in shapes]


def _hostile(rng, pairs, variables):
    """One random change to an ordinary step (or none): what a caller or a bug may hand the optimizer."""
    pairs = list(pairs)
    i = rng.randrange(len(pairs))
    g, v = pairs[i]
    kind = rng.choice(["none", "dtype", "shape", "sparse", "strided", "subclass", "list-pair", "triple",
                       "other-var", "swap", "short", "requires-grad", "view", "neg", "meta", "moved", "data",
                       "empty-like", "int", "transposed-var", "csr", "mkldnn", "nested", "functional"])
    if kind == "none":
        pass
    elif kind == "dtype":
        pairs[i] = (g.double(), v)
    elif kind == "shape":
        pairs[i] = (g.reshape(-1, 1) if g.dim() == 1 else g.reshape(-1), v)
    elif kind == "sparse":
        pairs[i] = (g.to_sparse(), v)
    elif kind == "strided":
        big = torch.randn(*g.shape, 2)
        pairs[i] = (big[..., 0], v)  # right shape and dtype, not contiguous: addresses None, still ordinary
    elif kind == "subclass":
        pairs[i] = (torch.nn.Parameter(g.clone()), v)
    elif kind == "list-pair":
        pairs[i] = [g, v]
    elif kind == "triple":
        pairs[i] = (g, v, None)
    elif kind == "other-var":
        pairs[i] = (g, torch.nn.Parameter(v.detach().clone()))
    elif kind == "swap" and len(pairs) > 1:
        j = (i + 1) % len(pairs)
        pairs[i], pairs[j] = pairs[j], pairs[i]
    elif kind == "short":
        pairs = pairs[:-1]
    elif kind == "requires-grad":
        pairs[i] = (g.clone().requires_grad_(), v)  # a plain tensor still: ordinary
    elif kind == "view":
        pairs[i] = (g.view(g.shape), v)  # a contiguous view: ordinary, at its own address
    elif kind == "neg":
        pairs[i] = (torch._neg_view(g), v)
    elif kind == "meta":
        pairs[i] = (torch.empty(g.shape, device="meta"), v)
    elif kind == "moved":
        v.data = v.data.clone()  # the variable's storage swapped: checked in full again
    elif kind == "data":
        v.data = torch.randn(*v.shape, 2)[..., 0]  # re-strided
    elif kind == "empty-like":
        pairs[i] = (torch.empty_like(g), v)
    elif kind == "int":
        pairs[i] = (g.to(torch.int32), v)
    elif kind == "csr" and g.dim() == 2:
        pairs[i] = (g.to_sparse_csr(), v)  # (no storage: its address read raises, before the guard)
    elif kind == "mkldnn":
        pairs[i] = (g.to_mkldnn(), v)
    elif kind == "nested":
        pairs[i] = (torch.nested.nested_tensor([g]), v)  # (the guard must never see it: reading its strides aborts)
    elif kind == "functional":
        pairs[i] = (torch._to_functional_tensor(g), v)
    elif kind == "transposed-var" and v.dim() == 2 and v.shape[0] == v.shape[1] and v.shape[0] > 1:
        v.data = v.data.t()
    else:
        kind = "none"  # (a change that does not apply to this step)
    return kind, pairs


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta", "ignore:The PyTorch API of nested tensors")
@pytest.mark.parametrize("seed", range(40))
def test_fits_gives_the_python_verdict_on_hostile_steps(seed):
    rng = random.Random(seed)
    torch.manual_seed(seed)
    variables = _variables(rng, rng.randint(2, 7))
    opt = _Opt(variables)
    pairs = [(torch.randn(v.shape), v) for v in variables]
    plan = StepPlan(opt, pairs)
    assert plan.table is not None
    for _ in range(6):
        kind, step = _hostile(rng, [(torch.randn(v.shape), v) for v in variables], variables)
        previous = tensor_table.use(False)
        try:
            python = plan.fits(step)
        finally:
            tensor_table.use(previous)
        table = plan.fits(step)
        if kind == "neg":  # the table refuses a lazily negated view outright; Python does not look
            assert table is None
            continue
        assert (table is None) == (python is None), kind
        if table is not None:
            assert all(a is b for a, b in zip(table.grads, python.grads)), kind
            if python.grad_addresses is None:
                assert table.grad_addresses is None, kind
            else:
                assert list(np.asarray(table.grad_addresses)) == list(python.grad_addresses), kind
        if kind in ("moved", "data", "transposed-var"):
            assert table is None  # the variable moved: the plan no longer holds
            return


def test_state_operands_refuse_a_replaced_or_moved_state_tensor_on_both_paths(monkeypatch):
    # (operands of the compiled path: run with the compiled kernels whatever SLOTOPT_KERNELS says)
    monkeypatch.setattr(native, "_mode", "auto")
    variables = [torch.nn.Parameter(torch.randn(4)) for _ in range(3)]
    opt = _Opt(variables)
    plan = StepPlan(opt, [(torch.randn(4), v) for v in variables])
    slots = [torch.zeros(4) for _ in variables]
    group = plan.groups[0]
    for on in (True, False):
        previous = tensor_table.use(on)
        try:
            plan.memo.clear()
            first = plan.state_operands("m", group, list(slots))
            assert plan.state_operands("m", group, tuple(slots)) is first  # same tensors, same place: memo
            replaced = list(slots)
            replaced[1] = torch.zeros(4)
            assert plan.state_operands("m", group, replaced) is not first
            plan.state_operands("m", group, list(slots))
            moved = slots[2]
            moved.set_(torch.zeros(4).untyped_storage())  # same object, new memory
            again = plan.state_operands("m", group, list(slots))
            assert again is not first and int(again.addresses[2]) == moved.data_ptr()
        finally:
            tensor_table.use(previous)


def test_gradients_are_the_pairs_of_parameters_with_a_gradient():
    class WithProperty(torch.Tensor):
        @property
        def grad(self):
            return torch.ones(2)

    params = [torch.nn.Parameter(torch.randn(2)) for _ in range(4)] + [torch.randn(2), WithProperty(torch.zeros(2))]
    params[0].grad = torch.randn(2)
    params[2].grad = torch.randn(2)
    params[4].grad = torch.randn(2)
    expected = [(p.grad, p) for p in params if p.grad is not None]
    got = tensor_table.gradients(params)
    assert len(got) == len(expected) == 4
    for (ga, pa), (gb, pb) in zip(got, expected):
        assert pa is pb and torch.equal(ga, gb)
    assert all(ga is gb for (ga, _), (gb, _) in zip(got[:3], expected[:3]))  # the very .grad objects


def test_bump_versions_moves_each_counter_once_and_refuses_inference_tensors_before_any():
    tensors = [torch.zeros(3) for _ in range(5)]
    before = [t._version for t in tensors]
    tensor_table.bump_versions(tensors)
    assert [t._version for t in tensors] == [b + 1 for b in before]
    with pytest.raises(TypeError, match="entry 1"):
        tensor_table.bump_versions([tensors[0], "x"])
    assert tensors[0]._version == before[0] + 1  # checked before any bump


def test_a_parameter_saved_for_backward_and_then_stepped_is_detected_by_autograd():
    # The version bump is what makes autograd refuse a backward through a value the step overwrote.
    w = torch.nn.Parameter(torch.randn(3, 3))
    others = [torch.nn.Parameter(torch.randn(3)) for _ in range(3)]
    opt = slotopt.Adam(learning_rate=0.1, params=[w, *others])
    for _ in range(2):  # the second step is an ordinary one (the plan's path, the table's bump)
        for p in (w, *others):
            p.grad = torch.randn(p.shape)
        x = torch.randn(3, 3, requires_grad=True)
        loss = (x @ w).sum()
        opt.step()
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            loss.backward()


@pytest.mark.parametrize("make", [lambda p: slotopt.Adam(learning_rate=0.01, params=p),
                                  lambda p: legacy.Adam(learning_rate=0.01, params=p),
                                  lambda p: v1.AdamOptimizer(learning_rate=0.01, params=p)],
                         ids=["keras3", "legacy", "v1"])
def test_every_face_gives_the_same_bits_with_and_without_the_table(make):
    def train(on):
        previous = tensor_table.use(on)
        try:
            torch.manual_seed(0)
            params = [torch.nn.Parameter(torch.randn(5, 3)) for _ in range(6)]
            opt = make(params)
            g = torch.Generator().manual_seed(1)
            for step in range(5):
                for p in params:
                    p.grad = torch.randn(p.shape, generator=g)
                if step == 3:
                    params[2].grad = params[2].grad.t().contiguous().t()  # not contiguous: the full path
                opt.step()
            return params
        finally:
            tensor_table.use(previous)

    for a, b in zip(train(True), train(False)):
        assert torch.equal(a, b)


def test_a_table_built_for_another_torch_is_not_loaded(monkeypatch):
    # A torch upgraded after the install: the C++ module would read tensors with the wrong layout, so the loader
    # refuses it and the Python checks run (``slotopt info`` says why).
    monkeypatch.setattr(tensor_table, "_module", None)
    monkeypatch.setattr(tensor_table, "_load_error", None)
    monkeypatch.setattr(tensor_table, "_builds", {})
    monkeypatch.setattr(tensor_table, "_build_name", None)
    monkeypatch.setattr(tensor_table, "_torch_build", lambda: "0.0.0+other")
    tensor_table._load()
    assert not tensor_table.active()
    reason = tensor_table.status()["reason"]
    assert "no wheel build for torch 0.0" in reason
    if importlib.util.find_spec("slotopt.kernels.native._tensor_table") is not None:  # (a wheel has no source build)
        assert "rebuild" in reason and "0.0.0+other" in reason
    variables = [torch.nn.Parameter(torch.randn(3)) for _ in range(3)]
    opt = slotopt.Adam(learning_rate=0.1, params=variables)
    for _ in range(3):
        for v in variables:
            v.grad = torch.ones(3)
        opt.step()
    assert opt._plan is not None and opt._plan.table is None  # planned steps, checked in Python


@pytest.mark.parametrize("on", [True, False], ids=["table", "python"])
def test_every_written_tensor_moves_its_version_once_per_step(on):
    # The state tensors' counters move while they are checked (C++) or after the rule (Python): once either way.
    previous = tensor_table.use(on)
    try:
        params = [torch.nn.Parameter(torch.randn(4)) for _ in range(3)]
        opt = legacy.Adam(learning_rate=0.1, params=params)
        for _ in range(4):
            for p in params:
                p.grad = torch.ones(4)
            slots = [opt.get_slot(params[1], name) for name in ("m", "v")]
            before = [t._version for t in (params[1], *slots)]
            opt.step()
            assert [t._version for t in (params[1], *slots)] == [b + 1 for b in before]
    finally:
        tensor_table.use(previous)


@pytest.mark.parametrize("seed", range(25))
def test_a_step_reads_and_checks_the_parameters_grads_in_one_pass_with_the_python_verdict(seed):
    rng = random.Random(seed)
    torch.manual_seed(seed)
    params = _variables(rng, rng.randint(2, 6))
    plan = StepPlan(_Opt(params), [(torch.randn(p.shape), p) for p in params])
    for _ in range(6):
        for p in params:
            p.grad = torch.randn(p.shape)
        kind, step = _hostile(rng, [(p.grad, p) for p in params], params)
        # What a hostile step does to ``.grad`` (pairs that are not 2-tuples have no ``.grad`` form).
        if kind in ("list-pair", "triple", "swap", "short", "other-var"):
            continue
        for g, p in step:
            if g is not p.grad:
                try:
                    p.grad = None if kind == "meta" else g
                except RuntimeError:  # torch itself refuses a .grad of another dtype, shape or device
                    kind = "none"
        if rng.random() < 0.15:
            params[rng.randrange(len(params))].grad = None  # a parameter without a gradient: not the plan's step
        previous = tensor_table.use(False)
        try:
            python = plan.fits(tensor_table.gradients(params))
        finally:
            tensor_table.use(previous)
        table = plan.fits_params(params)
        if kind == "neg":
            assert table is None
            continue
        assert (table is None) == (python is None), kind
        if table is not None:
            assert [pair for pair in table] == [pair for pair in python], kind  # the same (grad, param) objects
            assert all(a is b for a, b in zip(table.grads, python.grads)), kind
        if kind in ("moved", "data", "transposed-var"):
            return


def test_the_pairs_of_a_step_are_recycled_only_when_nothing_else_holds_them():
    import gc
    import weakref

    params = [torch.nn.Parameter(torch.randn(3)) for _ in range(4)]
    plan = StepPlan(_Opt(params), [(torch.randn(3), p) for p in params])
    for p in params:
        p.grad = torch.randn(3)
    held = plan.fits_params(params)
    first = list(held)
    assert [g for g, _ in held] == [p.grad for p in params] and [p for _, p in held] == params
    # Held by the caller: the next step gets tuples of its own, and the held ones keep their gradients.
    old_grads = [p.grad for p in params]
    for p in params:
        p.grad = torch.randn(3)
    second = plan.fits_params(params)
    assert all(a is not b for a, b in zip(first, second))
    assert [g for g, _ in first] == old_grads and [g for g, _ in second] == [p.grad for p in params]
    # Released: the same tuples come back with the new gradients, and the replaced gradients are let go.
    ids = [id(pair) for pair in second]
    del held, first, second
    gone = [weakref.ref(p.grad) for p in params]
    for p in params:
        p.grad = torch.randn(3)
    gc.collect()
    third = plan.fits_params(params)
    assert [id(pair) for pair in third] == ids
    assert [g for g, _ in third] == [p.grad for p in params] and [p for _, p in third] == params
    assert all(ref() is None for ref in gone)  # (no reference kept to a gradient of an earlier step)
    assert all(gc.is_tracked(pair) for pair in third)


def test_a_step_of_many_parameters_allocates_no_tuple_per_parameter():
    import gc

    params = [torch.nn.Parameter(torch.randn(4)) for _ in range(2000)]
    for p in params:
        p.grad = torch.randn(4)
    opt = slotopt.Adam(learning_rate=0.01, params=params)
    for _ in range(3):
        opt.step()
    collections = []

    def count(phase, info):
        if phase == "start":
            collections.append(info["generation"])

    gc.collect()
    gc.callbacks.append(count)
    try:
        for _ in range(5):  # 10,000 pairs: 14 collections of the youngest generation if each were a new tuple
            opt.step()
    finally:
        gc.callbacks.remove(count)
    assert collections == []


def test_a_subclass_whose_grad_is_a_property_is_not_read_in_cpp():
    class Odd(torch.nn.Parameter):
        @property
        def grad(self):
            return torch.full(self.shape, 7.0)

    params = [Odd(torch.zeros(2)) for _ in range(2)]
    plan = StepPlan(_Opt(params), [(torch.zeros(2), p) for p in params])
    assert plan.fits_params(params) is None  # the Python path reads ``.grad`` as Python defines it
    assert [float(g[0]) for g, _ in tensor_table.gradients(params)] == [7.0, 7.0]


# ---------------------------------------------------------------------------------- per-step scalars and ranges
def _python_first_out_of_range(indices, rows):
    # (in Python integers: torch compares an int32 tensor with 2**31 after wrapping the scalar to int32)
    return next((i for i, x in enumerate(indices.reshape(-1).tolist()) if x < 0 or x >= rows), -1)


@pytest.mark.parametrize("seed", range(40))
def test_the_index_range_check_finds_the_first_index_outside_the_table_as_torch_does(seed):
    rng = random.Random(seed)
    rows = rng.choice([1, 3, 100, 1 << 31])
    n = rng.choice([0, 1, 7, 1000])
    indices = torch.randint(0, rows, (n,), dtype=torch.int64)
    if n and rng.random() < 0.7:
        indices[rng.randrange(n)] = rng.choice([-1, rows, rows + 5, -(1 << 40), (1 << 62)])
    dtype = rng.choice([torch.int64, torch.int32])
    if dtype is torch.int32:
        indices = indices.clamp(-(1 << 31), (1 << 31) - 1).to(torch.int32)
    if n > 1 and rng.random() < 0.3:
        indices = indices.reshape(-1, 1) if n % 2 else indices.reshape(2, -1)
    expected = _python_first_out_of_range(indices, rows)
    assert tensor_table.first_out_of_range(indices, rows) == expected
    assert slotopt.kernels.rows.first_out_of_range(indices, rows) == expected
    previous = tensor_table.use(False)
    try:
        assert slotopt.kernels.rows.first_out_of_range(indices, rows) == expected  # the torch path
    finally:
        tensor_table.use(previous)


def test_the_index_range_check_leaves_other_kinds_of_indices_to_torch():
    assert tensor_table.first_out_of_range(torch.tensor([0, 5], dtype=torch.int16), 3) is None
    assert tensor_table.first_out_of_range(torch.tensor([0.0, 5.0]), 3) is None
    assert tensor_table.first_out_of_range(torch.arange(10)[::2], 3) is None  # not contiguous
    assert tensor_table.first_out_of_range(torch.arange(3, device="meta"), 3) is None
    assert slotopt.kernels.rows.first_out_of_range(torch.tensor([0, 5], dtype=torch.int16), 3) == 1
    assert slotopt.kernels.rows.first_out_of_range(torch.arange(10)[::2], 5) == 3
    assert slotopt.kernels.rows.first_out_of_range(torch.tensor([1, -2], dtype=torch.int16), 40000) == 1


def test_a_learning_rate_is_read_in_place_with_the_bits_torch_gives():
    from slotopt.engine import constants

    for value in [1e-3, 0.1, 3.0e-39, -0.0, float("inf"), 1 / 3]:
        for tensor_dtype, dtype in [(torch.float32, torch.float32), (torch.float32, torch.float64),
                                    (torch.float64, torch.float64), (torch.float64, torch.float32),
                                    (torch.float32, torch.float16), (torch.float32, torch.bfloat16)]:
            tensor = torch.tensor(value, dtype=tensor_dtype, requires_grad=True)
            expected = float(tensor.detach().cpu().to(dtype))
            got = constants.value_in(tensor, dtype)
            assert np.float64(got).tobytes() == np.float64(expected).tobytes(), (value, tensor_dtype, dtype)
    assert tensor_table.scalar(torch.tensor(0.5, dtype=torch.float16)) is None
    assert tensor_table.scalar(torch.tensor([0.5, 1.0])) is None
    assert tensor_table.scalar(torch.tensor([0.25])) == 0.25


def test_the_step_counter_moves_in_place_with_its_version_as_add_does():
    from slotopt.engine.core import count_step

    counter = torch.zeros((), dtype=torch.int64)
    version = counter._version
    count_step(counter)
    count_step(counter)
    assert int(counter) == 2 and counter._version == version + 2
    for other in [torch.zeros((), dtype=torch.int32), torch.zeros(()), torch.zeros(2, dtype=torch.int64)]:
        assert tensor_table.increment(other) is False and not other.any()
    with torch.inference_mode():
        inference = torch.zeros((), dtype=torch.int64)
    assert tensor_table.increment(inference) is False
    with pytest.raises(RuntimeError, match="[Ii]nference"):
        count_step(inference)  # torch's own error, from its own ``add_``


def _slices_case(rng):
    """Slices and a variable, ordinary or hostile (attributes are set after construction, as a caller may)."""
    rows = rng.choice([1, 4, 9])
    var = torch.randn(rows, 3)
    kind = rng.choice(["plain", "plain", "rows", "values-0d", "values-int", "values-complex", "values-double",
                       "index-float", "index-negative", "index-past", "index-int16", "index-int32", "index-strided",
                       "index-2d", "shape-other", "shape-list", "shape-none", "var-0d", "var-int", "var-complex",
                       "values-meta", "var-noncontiguous", "fewer-values", "more-indices"])
    k = rng.randint(0, 5)
    values = torch.randn(k, 3)
    indices = torch.randint(0, rows, (k,))
    dense_shape = (rows, 3)
    if kind == "rows":
        values = torch.randn(k, 4)
    elif kind == "values-0d":
        values = torch.tensor(1.0)
    elif kind == "values-int":
        values = values.to(torch.int32)
    elif kind == "values-complex":
        values = values.to(torch.complex64)
    elif kind == "values-double":
        values = values.double()
    elif kind == "index-float":
        indices = indices.float() + 0.5
    elif kind == "index-negative" and k:
        indices[rng.randrange(k)] = -1
    elif kind == "index-past" and k:
        indices[rng.randrange(k)] = rows
    elif kind == "index-int16":
        indices = indices.to(torch.int16)
    elif kind == "index-int32":
        indices = indices.to(torch.int32)
    elif kind == "index-strided":
        indices = torch.stack([indices, indices], 1)[:, 0]
    elif kind == "index-2d":
        indices = indices.reshape(-1, 1)
    elif kind == "shape-other":
        dense_shape = (rows + 1, 3)
    elif kind == "shape-list":
        dense_shape = [rows, 3]
    elif kind == "shape-none":
        dense_shape = None
    elif kind == "var-0d":
        var = torch.tensor(1.0)
    elif kind == "var-int":
        var = torch.zeros(rows, 3, dtype=torch.int64)
    elif kind == "var-complex":
        var = torch.randn(rows, 3, dtype=torch.complex64)
        if rng.random() < 0.5:
            values = values.to(torch.complex64)
    elif kind == "values-meta":
        values = torch.empty(k, 3, device="meta")
    elif kind == "var-noncontiguous":
        var = torch.randn(3, rows).t()
    elif kind == "fewer-values":
        values = torch.randn(max(k - 1, 0), 3)
    elif kind == "more-indices":
        indices = torch.randint(0, rows, (k + 1,))
    grad = slotopt.IndexedSlices(torch.zeros(0, 3), torch.zeros(0, dtype=torch.int64))
    grad.values, grad.indices, grad.dense_shape = values, indices, dense_shape
    return grad, var


def _verdict(grad, var):
    try:
        return ("ok", validation.check_gradient(grad, var, "v") is grad)
    except Exception as error:  # noqa: BLE001 - the verdict is the exception itself
        return (type(error).__name__, str(error))


@pytest.mark.parametrize("seed", range(300))
def test_a_sparse_gradient_gets_the_python_verdict_from_the_one_call_check(seed):
    grad, var = _slices_case(random.Random(seed))
    on = _verdict(grad, var)
    previous = tensor_table.use(False)
    try:
        off = _verdict(grad, var)
    finally:
        tensor_table.use(previous)
    assert on == off


def test_plain_slices_are_vouched_for_in_one_call():
    var = torch.randn(5, 2)
    assert tensor_table.slices_fit(torch.ones(3, 2), torch.tensor([0, 4, 0]), (5, 2), var) is True
    assert tensor_table.slices_fit(torch.ones(3, 2), torch.tensor([0, 5, 0]), (5, 2), var) is False  # undecided
    assert tensor_table.slices_fit(torch.ones(3, 2), torch.tensor([0, 1, 0]), None, var) is True


@pytest.mark.parametrize("path", ["C++", "Python"])
def test_a_step_sets_no_grad_and_flush_to_zero_and_puts_both_back(path):
    from slotopt.engine import pipeline
    from slotopt.numerics import fpmode

    mode = tensor_table.step_mode() if path == "C++" else pipeline._STEP_MODE
    if mode is None:
        pytest.skip("built without the x86 control register")
    enter, leave = mode
    tiny = torch.tensor([1e-40])  # a float32 subnormal
    for grad_on in (True, False):
        with torch.set_grad_enabled(grad_on):
            ftz = fpmode.enter_flush_to_zero()  # (nested: the step keeps a mode already on)
            fpmode.leave_flush_to_zero(ftz)
            token = enter()
            try:
                assert not torch.is_grad_enabled()
                assert (tiny * 1.0).item() == 0.0  # flushed on this thread
            finally:
                leave(token)
            assert torch.is_grad_enabled() is grad_on and (tiny * 1.0).item() != 0.0
    previous = fpmode.enter_flush_to_zero()
    try:
        token = enter()
        leave(token)
        assert (tiny * 1.0).item() == 0.0  # a mode that was on stays on
    finally:
        fpmode.leave_flush_to_zero(previous)


@pytest.mark.parametrize("seed", range(30))
def test_a_variable_kind_check_in_cpp_agrees_with_the_python_comparison(seed):
    rng = random.Random(seed)
    var = torch.nn.Parameter(torch.randn(rng.choice([(3,), (2, 4), (1, 1, 5)])))
    recorded = (var.dtype, var.device, var.shape)
    change = rng.choice(["none", "double", "half", "resize", "reshape-data", "shape-tuple", "shape-list"])
    shape = recorded[2]
    with torch.no_grad():
        if change == "double":
            var.data = var.data.double()
        elif change == "half":
            var.data = var.data.half()
        elif change == "resize":
            var.data = torch.randn(var.numel() + 1)
        elif change == "reshape-data":
            var.data = var.data.reshape(-1, 1)
        elif change == "shape-tuple":
            shape = tuple(shape)
        elif change == "shape-list":
            shape = list(shape)  # not a tuple: left to Python
    expected = var.dtype == recorded[0] and var.device == recorded[1] and var.shape == tuple(shape)
    got = tensor_table.same_kind(var, recorded[0], recorded[1], shape)
    assert got is (None if change == "shape-list" else expected)


def test_the_kind_check_reads_the_device():
    var = torch.zeros(2)
    assert tensor_table.same_kind(var, torch.float32, torch.device("meta"), (2,)) is False
    assert tensor_table.same_kind(var, torch.float32, torch.device("cpu"), (2,)) is True
    assert tensor_table.same_kind(var, torch.float64, torch.device("cpu"), (2,)) is False
    assert tensor_table.same_kind(var, torch.float32, torch.device("cpu"), (2, 1)) is False


def test_the_checks_pass_says_whether_a_variable_has_a_constraint():
    # The C++ pass reads ``getattr(v, "constraint", None)`` of every variable (engine/writing/undo.py then copies nothing
    # when none has one); the Python path leaves it to the step (None).
    variables = [torch.nn.Parameter(torch.randn(3)) for _ in range(40)]
    plan = StepPlan(_Opt(variables), [(torch.randn(3), v) for v in variables])
    for v in variables:
        v.grad = torch.randn(3)
    assert plan.fits_params(variables).constrained is False
    variables[37].constraint = lambda t: t.clamp(max=0.0)
    assert plan.fits_params(variables).constrained is True
    assert plan.fits([(v.grad, v) for v in variables]).constrained is True
    variables[37].constraint = None
    assert plan.fits([(v.grad, v) for v in variables]).constrained is False
    previous = tensor_table.use(False)
    try:
        assert plan.fits([(v.grad, v) for v in variables]).constrained is None
    finally:
        tensor_table.use(previous)


def test_a_constraint_that_cannot_be_read_leaves_the_verdict_to_the_python_scan():
    class Unreadable(slotopt.Variable):
        @property
        def constraint(self):
            raise RuntimeError("no constraint today")

        @constraint.setter
        def constraint(self, value):
            pass

    variables = [torch.nn.Parameter(torch.randn(3)), Unreadable(torch.randn(3), name="u")]
    plan = StepPlan(_Opt(variables), [(torch.randn(3), v) for v in variables])
    step = plan.fits([(torch.randn(3), v) for v in variables])
    assert step is not None and step.constrained is None
    opt = slotopt.SGD(learning_rate=0.1)
    pairs = [(torch.ones(3), v) for v in variables]
    with pytest.raises(RuntimeError, match="no constraint today"):  # (what ``getattr`` raises, on both paths)
        opt.apply_gradients(pairs)


def test_a_constraint_read_that_changes_the_step_under_the_pass_is_refused_not_trusted():
    # Reading an attribute may run Python code; the C++ pass reads every constraint before it checks any tensor,
    # holds each variable while reading it and reads the sequence again after: a read that empties the list or
    # moves a variable's storage makes the step not ordinary (the full checks then run), and nothing crashes.
    victims = [torch.nn.Parameter(torch.randn(4)) for _ in range(3)]

    class Meddling(torch.nn.Parameter):
        action = None

        @property
        def constraint(self):
            Meddling.action()
            return None

    meddler = Meddling(torch.randn(4))
    params = [*victims, meddler, *[torch.nn.Parameter(torch.randn(4)) for _ in range(20)]]
    plan = StepPlan(_Opt(params), [(torch.randn(4), v) for v in params])
    pairs = [(torch.randn(4), v) for v in params]
    Meddling.action = lambda: None
    assert plan.fits(pairs) is not None
    Meddling.action = lambda: pairs.clear()
    assert plan.fits(pairs) is None
    pairs = [(torch.randn(4), v) for v in params]
    Meddling.action = lambda: setattr(victims[0], "data", victims[0].data.clone())
    assert plan.fits(pairs) is None  # (victims[0] was checked after the read: its new address is seen)


@pytest.mark.parametrize("face", ["keras3", "legacy", "v1"])
def test_a_constraint_set_after_planned_steps_is_applied_and_undone_with_its_step(face):
    params = [torch.nn.Parameter(torch.zeros(4)) for _ in range(6)]
    make = {"keras3": lambda: slotopt.SGD(learning_rate=1.0, params=params),
            "legacy": lambda: legacy.SGD(learning_rate=1.0, params=params),
            "v1": lambda: v1.GradientDescentOptimizer(learning_rate=1.0, params=params)}[face]
    opt = make()
    for p in params:
        p.grad = torch.full((4,), -1.0)
    for _ in range(3):
        opt.step()  # planned steps, no constraint
    params[4].constraint = lambda t: t.clamp(max=3.5)
    opt.step()
    assert params[4].tolist() == [3.5] * 4 and params[3].tolist() == [4.0] * 4
    params[2].constraint = lambda t: t.sum()  # a scalar: refused, the whole step undone
    before = [p.detach().clone() for p in params]
    with pytest.raises(ValueError, match="shape"):
        opt.step()
    assert all(torch.equal(a, b) for a, b in zip(before, params))


_WHEEL_BUILD = os.path.join(os.path.dirname(tensor_table.__file__), "builds", tensor_table._wheel_tag())


@pytest.mark.skipif(not os.path.isdir(_WHEEL_BUILD), reason="no wheel build of the checks for this torch here")
def test_the_wheel_build_for_this_torch_loads_and_passes_its_check():
    assert "wheel" in tensor_table.builds()
    module = tensor_table._builds["wheel"][0]
    assert tensor_table._verified(module) is None
    assert tensor_table._release(module.torch_version) == tensor_table._release(tensor_table._torch_build())


@pytest.mark.skipif(not os.path.isdir(_WHEEL_BUILD), reason="no wheel build of the checks for this torch here")
def test_a_build_that_reads_tensors_wrongly_is_not_trusted():
    # What a build for another patch release would do if that release laid tensors out otherwise: a wrong answer
    # on a known tensor, and the loader refuses it.
    module = tensor_table._builds["wheel"][0]
    wrong = types.SimpleNamespace(**{name: getattr(module, name) for name in dir(module) if not name.startswith("__")})
    wrong.same_kind = lambda *args: True
    assert tensor_table._verified(wrong) == "wrong answers from same_kind"
    wrong.same_kind, wrong.scalar = module.same_kind, lambda tensor: 1 / 0
    assert tensor_table._verified(wrong).startswith("ZeroDivisionError")
    assert tensor_table._verified(module) is None


def test_no_wheel_build_for_another_torch_minor_version_is_loaded(monkeypatch):
    monkeypatch.setattr(tensor_table, "_torch_build", lambda: "2.99.0+other")
    module, why = tensor_table._wheel_build()
    assert module is None and why.startswith("no wheel build for torch 2.99 (torch2_99_abi")
