"""The step plan (engine/plan.py): a step like the last one skips re-deriving what depends on the variables only,
and anything else takes the full path. The plan changes what is looked up, never what is computed."""

import pytest
import torch

import slotopt
from slotopt.engine.plan import Ordinary
from slotopt.engine.proof import validation


def make(n=6, shape=(3, 4), dtype=torch.float32):
    torch.manual_seed(0)
    return [slotopt.Variable(torch.randn(shape, dtype=dtype), name=f"v{i}") for i in range(n)]


def grads_for(variables, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(v.shape, generator=g, dtype=v.dtype) for v in variables]


CONFIGS = [
    ("Adam", {}), ("AdamW", {"weight_decay": 0.01}), ("SGD", {"momentum": 0.9, "weight_decay": 0.004}),
    ("RMSprop", {"momentum": 0.5, "centered": True}), ("Adagrad", {}), ("Lion", {}), ("Nadam", {}),
    ("Adam", {"use_ema": True, "clipnorm": 1.0}), ("Adafactor", {}), ("Lamb", {}),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("name,kwargs", CONFIGS, ids=[f"{n}-{'-'.join(k) or 'plain'}" for n, k in CONFIGS])
def test_planned_steps_give_the_bits_of_full_steps(name, kwargs, dtype, monkeypatch):
    def train(plans):
        monkeypatch.setattr(slotopt.Optimizer, "_plans_steps", plans)
        variables = make(dtype=dtype)
        opt = getattr(slotopt, name)(learning_rate=0.01, **kwargs)
        if name == "AdamW":
            opt.exclude_from_weight_decay(var_names=["v1"])
        for step in range(4):
            opt.apply(grads_for(variables, step), variables)
        return variables, opt

    planned, opt = train(True)
    assert opt._plan is not None
    full, unplanned = train(False)
    assert unplanned._plan is None
    for a, b in zip(planned, full):
        assert torch.equal(a, b)


def test_an_ordinary_step_is_recognised_in_one_pass_and_runs_one_compiled_call():
    from slotopt.kernels import native

    variables = make(n=50)
    opt = slotopt.Adam(learning_rate=0.01)
    opt.apply(grads_for(variables, 0), variables)
    pairs = list(zip(grads_for(variables, 1), variables))
    assert type(validation.checked_pairs(opt, pairs)) is Ordinary
    if native.active():
        before = native.calls()
        opt.apply(grads_for(variables, 2), variables)
        assert native.calls() == before + 1  # the whole group at once


def _full_path_refusal(opt, variables, grads):
    """What the full path says of these gradients, on an optimizer that plans nothing."""
    fresh = slotopt.Adam(learning_rate=0.01)
    fresh._plans_steps = False
    fresh.build(variables)
    with pytest.raises((ValueError, TypeError)) as err:
        fresh.apply(grads, variables)
    return type(err.value), str(err.value)


@pytest.mark.parametrize("bad", ["shape", "not a tensor", "device meta", "int gradient"])
def test_a_bad_gradient_after_planned_steps_is_refused_as_before_and_changes_nothing(bad):
    variables = make()
    opt = slotopt.Adam(learning_rate=0.01)
    for step in range(2):
        opt.apply(grads_for(variables, step), variables)
    grads = grads_for(variables, 9)
    grads[3] = {"shape": torch.zeros(4, 3), "not a tensor": "g",
                "device meta": torch.zeros(3, 4, device="meta"), "int gradient": torch.zeros(3, 4, dtype=torch.int64)}[bad]
    before = [v.detach().clone() for v in variables] + [s.clone() for s in opt.variables]
    with pytest.raises((ValueError, TypeError)) as err:
        opt.apply(grads, variables)
    assert (type(err.value), str(err.value)) == _full_path_refusal(opt, variables, grads)
    after = [v.detach() for v in variables] + list(opt.variables)
    assert all(torch.equal(a, b) for a, b in zip(before, after))


@pytest.mark.filterwarnings("ignore:Gradients do not exist")  # the step with missing gradients warns, as in Keras
def test_what_differs_from_the_plan_takes_the_full_path_with_the_same_numbers():
    variables = make()
    opt = slotopt.Adam(learning_rate=0.01)
    twin_vars = make()
    twin = slotopt.Adam(learning_rate=0.01)
    twin._plans_steps = False

    def both(grads_of, order=None):
        for opt_, vs in ((opt, variables), (twin, twin_vars)):
            chosen = [vs[i] for i in order] if order else vs
            opt_.apply(grads_of(chosen), chosen)

    both(lambda vs: grads_for(vs, 0))
    plan = opt._plan
    both(lambda vs: grads_for(vs, 1), order=[5, 4, 3, 2, 1, 0])  # another order: the full path, a new plan
    assert opt._plan is not plan
    both(lambda vs: grads_for(vs, 2)[:3] + [None] * 3)  # missing gradients: the full path
    both(lambda vs: [g.t().contiguous().t() for g in grads_for(vs, 3)])  # non-contiguous gradients
    both(lambda vs: [g.double() for g in grads_for(vs, 7)])  # another dtype: cast on the full path
    sparse = [slotopt.IndexedSlices(torch.ones(1, 4), torch.tensor([1]), (3, 4))]
    both(lambda vs: sparse + grads_for(vs, 4)[1:])
    with torch.no_grad():  # a variable moved in memory (p.data = ...): checked in full again
        variables[2].data = variables[2].data.clone()
        twin_vars[2].data = twin_vars[2].data.clone()
    both(lambda vs: grads_for(vs, 5))
    both(lambda vs: grads_for(vs, 6))
    for a, b in zip(variables, twin_vars):
        assert torch.equal(a, b)


def test_a_plan_ends_when_the_variables_change():
    model = torch.nn.Linear(3, 2)
    opt = slotopt.Adam(learning_rate=0.01, params=model)
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    plan = opt._plan
    assert plan is not None and plan.valid_for(opt)
    extra = torch.nn.Parameter(torch.ones(2))
    opt.add_param_group({"params": [extra]})
    assert not plan.valid_for(opt)
    extra.grad = torch.ones(2)
    opt.step()
    assert opt._plan is not plan and extra.tolist() != [1.0, 1.0]


_SPARSE_AFTER_DENSE = """
import torch, slotopt
a, b = torch.nn.Parameter(torch.zeros(4, 2)), torch.nn.Parameter(torch.zeros(3))
o = slotopt.{name}(learning_rate=0.1, params=[a, b])
a.grad, b.grad = torch.ones(4, 2), torch.ones(3); o.step()
before = [a.detach().clone(), b.detach().clone()] + [s.clone() for s in o.variables]
a.grad = torch.sparse_coo_tensor([[{row}]], torch.ones(1, 2), (4, 2))
try:
    o.step()
    print("accepted")
except ValueError as error:
    after = [a.detach(), b.detach()] + list(o.variables)
    print("unchanged" if all(torch.equal(x, y) for x, y in zip(before, after)) else "CHANGED", error)
"""


@pytest.mark.parametrize("name", ["Adagrad", "Adafactor", "Adadelta", "Adam"])
def test_a_sparse_row_past_the_table_after_dense_steps_is_refused_not_run(name):
    # The step plan once took a sparse COO gradient for a dense one (its dtype, shape and device match): no row
    # check ran and the compiled kernels read past the table (heap corruption). A subprocess: it may crash.
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-W", "ignore", "-c", _SPARSE_AFTER_DENSE.format(name=name, row=9)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("unchanged Sparse gradient indices for variable"), result.stdout
    assert "must be in [0, 4). Received: indices=[9]" in result.stdout


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta", "ignore:The PyTorch API of nested tensors")
@pytest.mark.parametrize("layout", ["csr", "csc", "mkldnn", "nested"])
def test_gradients_of_other_layouts_are_refused_on_every_path(layout):
    variables = make(n=3, shape=(4, 4))
    for planned in (False, True):
        opt = slotopt.Muon(learning_rate=0.01)
        if planned:
            opt.apply(grads_for(variables, 0), variables)
            assert opt._plan is not None
        grads = grads_for(variables, 1)
        dense = grads[0]
        grads[0] = {"csr": torch.Tensor.to_sparse_csr, "csc": torch.Tensor.to_sparse_csc,
                    "mkldnn": torch.Tensor.to_mkldnn, "nested": lambda g: torch.nested.nested_tensor([g])}[layout](dense)
        before = [v.detach().clone() for v in variables]
        with pytest.raises(TypeError, match="must be a dense \\(strided\\) tensor, a sparse COO row gradient"):
            opt.apply(grads, variables)
        assert all(torch.equal(a, b) for a, b in zip(before, variables))


@pytest.mark.parametrize("face", ["legacy", "v1"])
def test_a_slot_moved_or_restrided_after_planned_steps_is_read_again(face):
    # The plan keeps the slots' addresses (StepPlan.state_operands); a slot whose storage was swapped or that was
    # re-strided in place must be read again, as a plan-disabled twin reads it.
    def optimizer():
        return slotopt.legacy.Adam(learning_rate=0.1) if face == "legacy" else slotopt.v1.AdamOptimizer(0.1)

    runs = []
    for plans in (True, False):
        variables = make(n=4, shape=(3, 3))
        opt = optimizer()
        if not plans:
            opt.__dict__["_plans_steps"] = False
        for step in range(3):
            opt.apply_gradients(zip(grads_for(variables, step), variables))
        assert (opt._plan is not None) == plans
        slot = opt.get_slot(variables[1], "m")
        with torch.no_grad():
            slot.data = slot.data.clone() + 1.0  # another storage
        opt.apply_gradients(zip(grads_for(variables, 5), variables))
        with torch.no_grad():
            slot.data = slot.data.t()  # the same storage, column-major
        opt.apply_gradients(zip(grads_for(variables, 6), variables))
        runs.append([v.detach().clone() for v in variables] + [slot.detach().clone()])
    assert all(torch.equal(a, b) for a, b in zip(*runs))


def test_a_slot_table_is_read_in_one_pass_only_while_its_keys_are_the_groups_positions():
    variables = make(n=4)
    opt = slotopt.Adam(learning_rate=0.01)
    opt.apply(grads_for(variables, 0), variables)
    plan = opt._plan
    group = plan.groups[0]
    assert group == [0, 1, 2, 3]
    a, b, c, d, e = (torch.zeros(1) for _ in range(5))
    in_order = {0: a, 1: b, 2: c, 3: d}
    assert plan.entries(in_order, group) == (a, b, c, d)
    in_order[2] = e  # a slot replaced in place: the values read it
    assert plan.entries(in_order, group) == (a, b, e, d)
    shuffled = {1: b, 0: a, 3: d, 2: c}
    assert plan.entries(shuffled, group) == (a, b, c, d)  # looked up per position
    grown = {0: a, 1: b, 2: c, 3: d}
    assert plan.entries(grown, group) == (a, b, c, d)
    grown[7] = e  # another variable's slot: no longer the group's keys alone
    assert plan.entries(grown, group) == (a, b, c, d)
