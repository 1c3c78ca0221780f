"""The per-step checks in Python (the C++ tensor table off or not built): every property read once per step, each
step proven once where only slotopt's own code runs until its first write, and proven again where anything else
could have run in between (issue 35)."""

from __future__ import annotations

import gc
import sys

import pytest
import torch
from _kernel_paths import ALL_PATHS, on_path, path_id

import slotopt
from slotopt.engine import plan as plan_module
from slotopt.engine.plan import Ordinary, StepPlan, collections, quiet_now
from slotopt.engine.proof.unchanged import proven_again
from slotopt.kernels.native import tensor_table

PATHS = ALL_PATHS


@pytest.fixture(params=PATHS, ids=path_id)
def path(request):
    with on_path(*request.param):
        yield request.param


@pytest.fixture
def python_checks():
    previous = tensor_table.use(False)
    yield
    tensor_table.use(previous)


FACES = {
    "keras3": lambda params: slotopt.Adam(learning_rate=0.1, params=params),
    "legacy": lambda params: slotopt.legacy.Adam(learning_rate=0.1, params=params),
    "v1": lambda params: slotopt.v1.AdamOptimizer(0.1, params=params),
}


def _params(n=3, size=8):
    torch.manual_seed(0)
    return [torch.nn.Parameter(torch.randn(size)) for _ in range(n)]


def _grads(params, step):
    g = torch.Generator().manual_seed(step)
    return [torch.randn(p.shape, generator=g) for p in params]


def _state(opt, params):
    slots = [t.clone() for table in opt._slots.values() for t in table.values() if isinstance(t, torch.Tensor)]
    return [p.detach().clone() for p in params] + slots


def _same(a, b):
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("face", sorted(FACES))
def test_a_lazily_negated_gradient_is_read_with_its_sign(face, path):
    # A planned step's gradient that is a negated view (``_neg_view``: the same memory read negated) was taken by
    # address on the Python path, and the compiled rule read it unnegated: the update went the other way. Its kind
    # is now proven with the variables' (the full path resolves it), so the bits are those of a plain gradient.
    results = []
    for negated in (False, True):
        params = _params()
        opt = FACES[face](params)
        for step in range(3):
            opt.apply_gradients(list(zip(_grads(params, step), params)))
        grads = _grads(params, 7)
        if negated:
            grads = [(-g)._neg_view() for g in grads]
            assert all(g.is_neg() for g in grads)
        opt.apply_gradients(list(zip(grads, params)))
        results.append(_state(opt, params))
    assert _same(*results)


class _Counted:
    """Counts ``StepPlan.fits`` calls (slotopt's own function, wrapped; nothing of torch is replaced)."""

    def __init__(self, monkeypatch):
        self.calls = 0
        original = StepPlan.fits

        def fits(plan, pairs):
            self.calls += 1
            return original(plan, pairs)

        monkeypatch.setattr(StepPlan, "fits", fits)


@pytest.mark.parametrize("face", sorted(FACES))
def test_a_quiet_planned_step_is_proven_once(face, python_checks, monkeypatch):
    # Nothing but slotopt's code runs between the step's proof and its first write: proven once, not twice.
    params = _params()
    opt = FACES[face](params)
    for step in range(3):
        for p, g in zip(params, _grads(params, step)):
            p.grad = g
        opt.step()
    counted = _Counted(monkeypatch)
    opt.step()
    assert counted.calls == 1


class _Hooked(slotopt.legacy.Adam):
    """A subclass whose hook (any method of its own) runs between the step's proof and its first write."""

    armed: list = []

    def _transform_gradients(self, pairs):
        if self.armed:
            self.armed.pop()(self)
        return super()._transform_gradients(pairs)


def _moves_second(params):
    def move(_opt):
        params[1].data = torch.zeros(2)  # (a smaller tensor: the stale 8-element gradient would overflow it)
    return move


@pytest.mark.parametrize("how", ["subclass-hook", "patched-stage", "learning-rate-callable"])
def test_code_that_runs_after_the_proof_is_followed_by_a_second_proof(how, path, monkeypatch):
    # Where code that is not slotopt's own runs between the proof and the first write (a subclass's hook, a stage
    # replaced on the instance, a callable hyperparameter), the step is proven again before it: a variable moved by
    # that code is refused with nothing written, on every path.
    params = _params()
    armed = []
    if how == "subclass-hook":
        opt = _Hooked(learning_rate=0.1, params=params)
        monkeypatch.setattr(_Hooked, "armed", armed)
    else:
        def lr():
            if armed:
                armed.pop()(None)
            return 0.1
        opt = slotopt.legacy.Adam(learning_rate=lr if how == "learning-rate-callable" else 0.1, params=params)
        if how == "patched-stage":
            original = opt._transform_gradients

            def patched(pairs):
                if armed:
                    armed.pop()(opt)
                return original(pairs)
            opt._transform_gradients = patched
    for step in range(3):
        for p, g in zip(params, _grads(params, step)):
            p.grad = g
        opt.step()
    for p, g in zip(params, _grads(params, 5)):
        p.grad = g
    kept = [params[0].detach().clone(), params[2].detach().clone()] + [
        t.clone() for table in opt._slots.values() for t in table.values()]
    iterations = int(opt.iterations)
    armed.append(_moves_second(params))
    with pytest.raises((RuntimeError, ValueError)):
        opt.step()
    assert not armed
    assert _same(kept, [params[0].detach(), params[2].detach()] + [
        t for table in opt._slots.values() for t in table.values()])
    assert int(opt.iterations) == iterations


def test_a_collection_since_the_proof_brings_the_second_proof_back(python_checks):
    # ``quiet`` holds only while the cyclic collector has not run (its finalizers are Python code): after a
    # collection, a variable moved since the proof is found.
    params = _params()
    opt = slotopt.legacy.Adam(learning_rate=0.1, params=params)
    for step in range(3):
        opt.apply_gradients(list(zip(_grads(params, step), params)))
    step = opt._plan.fits(list(zip(_grads(params, 4), params)))
    assert type(step) is Ordinary
    step.quiet = collections()
    params[1].data = torch.zeros(2)
    gc.collect()
    with pytest.raises(RuntimeError, match="changed while the step ran"):
        proven_again(opt, step)
    assert step.quiet is None  # (used once: an ``Ordinary`` kept past its step proves nothing)


def test_python_code_that_may_run_anywhere_turns_quiet_off(python_checks):
    params = _params()
    opt = slotopt.legacy.Adam(learning_rate=0.1, params=params)
    for step in range(3):
        opt.apply_gradients(list(zip(_grads(params, step), params)))
    plan = opt._plan
    assert quiet_now(plan) is (sys.gettrace() is None and sys.getprofile() is None)
    previous = sys.getprofile()
    sys.setprofile(lambda *args: None)
    try:
        assert not quiet_now(plan)
    finally:
        sys.setprofile(previous)

    class Mode(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with Mode():
        assert not quiet_now(plan)

    class Mine(torch.nn.Parameter):  # (a class of the user's: its properties and methods are Python code)
        pass

    mine = Mine(torch.ones(3))
    plan.type_set = [*plan.type_set, type(mine)]
    assert not quiet_now(plan)


def test_the_bulk_storage_check_finds_a_shrunk_storage(python_checks):
    # ``inside``: the end of each tensor's bytes against its storage's, read once per tensor.
    tensors = [torch.zeros(16) for _ in range(3)]
    ends = [t.data_ptr() + 64 for t in tensors]
    assert plan_module.inside(tensors, ends, [64] * 3)
    tensors[2].untyped_storage().resize_(32)  # (its elements' address is compared by the caller: read anew)
    assert not plan_module.inside(tensors, [t.data_ptr() + 64 for t in tensors], [64] * 3)
    tensors[2].untyped_storage().resize_(0)  # (no base at all)
    assert not plan_module.inside(tensors, [t.data_ptr() + 64 for t in tensors], [64] * 3)
    assert plan_module.inside([torch.zeros(0)], [0], [0])


def test_a_quiet_steps_slots_are_read_once_and_their_kind_still_proven(python_checks):
    # In a quiet step whose slots the Python record held unchanged, the compiled rule's operands are not read again
    # for what that record proved (the mark lasts until the plan's next proof, and no collection may run since);
    # their kind still is: a moment slot replaced between steps by a lazily negated view of the same memory (same
    # object, address, dtype, sizes and storage) is never read by address (unnegated): torch's own kernels take it
    # and refuse it (they do not write such a view) before anything is written.
    params = _params()
    opt = slotopt.legacy.Adam(learning_rate=0.1, params=params)
    for step in range(3):
        opt.apply_gradients(list(zip(_grads(params, step), params)))
    assert opt._plan._held()
    gc.collect()
    assert not opt._plan._held()
    opt.apply_gradients(list(zip(_grads(params, 3), params)))
    assert opt._plan._held()
    slot = opt._slots["m"][1]
    values = slot.detach().clone()
    slot.copy_(-values)
    slot.data = slot.data._neg_view()  # (reads as ``values``)
    assert slot.is_neg() and torch.equal(slot, values)
    before = _state(opt, params)
    with pytest.raises(RuntimeError, match="negation"):
        opt.apply_gradients(list(zip(_grads(params, 4), params)))
    assert _same(before, _state(opt, params))
