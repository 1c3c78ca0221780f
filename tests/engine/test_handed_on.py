"""A step checked once is handed on checked: what a wrapper or composite gives the optimizers inside it, after its
own plan checked every pair in this step (engine/plan.py ``split``, engine/loss_scaling.py ``handed_on``), and
what an outer step found of the constraints (engine/writing/undo.py). The numbers are those of the optimizers stepped
on their own; anything that is not the checked pairs themselves is checked in full."""

import pytest
import torch

import slotopt
from slotopt.engine import loss_scaling, plan_cache
from slotopt.engine.plan import Ordinary, split


def variables(n=8, shape=(5,), dtype=torch.float32, prefix="v"):
    g = torch.Generator().manual_seed(n)
    return [slotopt.Variable(torch.randn(shape, generator=g, dtype=dtype), name=f"{prefix}{i}") for i in range(n)]


def gradients(vs, step):
    g = torch.Generator().manual_seed(100 + step)
    return [torch.randn(v.shape, generator=g, dtype=v.dtype) for v in vs]


# ------------------------------------------------------------------------------------------ the plan's part
def test_split_hands_each_group_of_the_step_to_the_plan_that_records_its_variables():
    vs = variables()
    whole, odd = slotopt.Adam(learning_rate=0.1), slotopt.Adam(learning_rate=0.1)
    for step in range(2):
        pairs = list(zip(gradients(vs, step), vs))
        whole.apply_gradients(pairs)
        odd.apply_gradients(pairs[1::2])
    owners = {id(v): i % 2 for i, v in enumerate(vs)}
    routed = []

    def route(pairs):
        routed.append(1)
        return {0: pairs[0::2], 1: pairs[1::2]}

    for step in range(2, 5):
        pairs = list(zip(gradients(vs, step), vs))
        planned = plan_cache.planned_step(whole, pairs)
        assert type(planned) is Ordinary
        shares = split(planned, owners, lambda step=planned: route(step), [None, plan_cache.current_plan(odd)])
        assert list(shares) == [0, 1]
        assert type(shares[0]) is list and all(a is b for a, b in zip(shares[0], pairs[0::2]))
        part = shares[1]
        assert type(part) is Ordinary and part.plan is plan_cache.current_plan(odd)
        assert all(a is b for a, b in zip(part, pairs[1::2]))
        assert part.grads == [g for g, _ in pairs[1::2]]
        assert list(part.grad_addresses) == [g.data_ptr() for g, _ in pairs[1::2]]
    assert len(routed) == 1  # routed once, then taken by the kept indices
    # Another ownership object, or other plans: routed again. A plan of other variables takes no group.
    split(planned, dict(owners), lambda: route(planned), [None, plan_cache.current_plan(odd)])
    assert len(routed) == 2
    shares = split(planned, owners, lambda: route(planned), [plan_cache.current_plan(odd), None])
    assert len(routed) == 3 and type(shares[0]) is list and type(shares[1]) is list
    # Groups that are not the step's own tuples (new tuples, even of the same tensors): handed on as routed.
    fresh = {0: [(g, v) for g, v in pairs[0::2]], 1: [(g, v) for g, v in pairs[1::2]]}
    assert split(planned, object(), lambda: fresh, [None, plan_cache.current_plan(odd)]) is fresh


def test_multi_optimizer_steps_give_the_bits_of_its_optimizers_stepped_alone():
    def run(multi):
        vs = variables(n=10)
        odd = [v for v in vs if int(v.name[1:]) % 2]
        even = [v for v in vs if not int(v.name[1:]) % 2]
        if multi:
            opt = slotopt.MultiOptimizer(slotopt.OptimizerMap(
                slotopt.Adam(learning_rate=0.01), {"v[13579]": slotopt.SGD(learning_rate=0.1, momentum=0.9)}))
        else:
            adam, sgd = slotopt.Adam(learning_rate=0.01), slotopt.SGD(learning_rate=0.1, momentum=0.9)
        for step in range(5):
            grads = dict(zip(map(id, vs), gradients(vs, step)))
            if multi:
                opt.apply_gradients([(grads[id(v)], v) for v in vs])
            else:
                adam.apply_gradients([(grads[id(v)], v) for v in even])
                sgd.apply_gradients([(grads[id(v)], v) for v in odd])
        return vs

    for a, b in zip(run(True), run(False)):
        assert torch.equal(a, b)


def test_multi_optimizer_refuses_a_bad_gradient_after_handed_on_steps_and_changes_nothing():
    vs = variables(n=6)
    opt = slotopt.MultiOptimizer(slotopt.OptimizerMap(slotopt.Adam(learning_rate=0.01),
                                                      {"v[135]": slotopt.Adam(learning_rate=0.01)}))
    for step in range(3):
        opt.apply_gradients(list(zip(gradients(vs, step), vs)))
    before = [v.clone() for v in vs] + [w.clone() for w in opt.variables]
    bad = list(zip(gradients(vs, 9), vs))
    bad[3] = (torch.zeros(7), vs[3])  # the wrong shape, for the second optimizer
    with pytest.raises(ValueError):
        opt.apply_gradients(bad)
    for a, b in zip(before, [*vs, *opt.variables]):
        assert torch.equal(a, b)


# ------------------------------------------------------------------------------------------ loss scaling
def test_keras3_loss_scale_hands_its_unscaled_views_to_the_inner_plan_checked():
    vs = variables()
    opt = slotopt.LossScaleOptimizer(slotopt.Adam(learning_rate=0.01), initial_scale=4.0)
    for step in range(3):
        opt.apply_gradients(list(zip(gradients(vs, step), vs)))
    step = plan_cache.planned_step(opt, list(zip(gradients(vs, 3), vs)))
    views = loss_scaling.kept_views(step)
    handed = loss_scaling.handed_on(step, views, opt.inner_optimizer)
    assert type(handed) is Ordinary and handed.plan is plan_cache.current_plan(opt.inner_optimizer)
    assert [v for _, v in handed] == vs and handed.grads == views
    # Gradients that are not the kept views (a user's tensors) are handed on as plain pairs, to be checked.
    other = gradients(vs, 4)
    plain = loss_scaling.handed_on(step, other, opt.inner_optimizer)
    assert type(plain) is list and [g for g, _ in plain] == other


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_keras3_loss_scale_steps_give_the_bits_of_the_inner_optimizer_on_unscaled_gradients(dtype):
    scaled, plain = variables(dtype=dtype), variables(dtype=dtype)
    opt = slotopt.LossScaleOptimizer(slotopt.Adam(learning_rate=0.01), initial_scale=8.0, dynamic_growth_steps=2)
    reference = slotopt.Adam(learning_rate=0.01)
    for step in range(7):
        scale = float(opt.dynamic_scale)
        grads = gradients(scaled, step)
        opt.apply_gradients(list(zip([g * scale for g in grads], scaled)))  # (a power of two: exact)
        reference.apply_gradients(list(zip(grads, plain)))
    assert float(opt.dynamic_scale) == 64.0  # grown three times: every step was finite
    for a, b in zip(scaled, plain):
        assert torch.equal(a, b)


def test_keras3_loss_scale_float16_variables_are_not_handed_on_as_checked():
    vs = variables(dtype=torch.float16)
    opt = slotopt.LossScaleOptimizer(slotopt.SGD(learning_rate=0.1))
    for step in range(3):
        opt.apply_gradients(list(zip(gradients(vs, step), vs)))
    step = plan_cache.planned_step(opt, list(zip(gradients(vs, 3), vs)))
    assert step is not None
    grads = loss_scaling.finite_unscaled(step, opt.dynamic_scale.detach(), keep=True)
    assert grads[0].dtype is torch.float32  # unscaled in float32: the inner optimizer checks them itself
    assert type(loss_scaling.handed_on(step, grads, opt.inner_optimizer)) is list


def test_keras3_loss_scale_a_variable_moved_after_handed_on_steps_is_checked_again():
    vs = variables()
    opt = slotopt.LossScaleOptimizer(slotopt.SGD(learning_rate=0.5), initial_scale=1.0)
    for step in range(3):
        opt.apply_gradients(list(zip(gradients(vs, step), vs)))
    moved = vs[2].detach().clone()
    vs[2].data = moved  # new storage: the plans' recorded addresses no longer hold
    grads = gradients(vs, 3)
    expected = moved - 0.5 * grads[2]
    opt.apply_gradients(list(zip(grads, vs)))
    assert torch.equal(vs[2], expected) and vs[2].data_ptr() == moved.data_ptr()


# ------------------------------------------------------------------------------------------ constraints
@pytest.mark.parametrize("wrapper", ["loss scale", "multi", "composite"])
def test_a_wrapper_step_runs_each_constraint_once_and_undoes_the_whole_step_when_one_fails(wrapper):
    calls = []

    def halve(value):
        calls.append(1)
        return value * 0.5

    vs = variables(n=4)
    vs[1] = slotopt.Variable(vs[1].detach().clone(), name="v1", constraint=halve)

    def make():
        if wrapper == "loss scale":
            return slotopt.LossScaleOptimizer(slotopt.SGD(learning_rate=0.1), initial_scale=1.0)
        if wrapper == "multi":
            return slotopt.MultiOptimizer(slotopt.OptimizerMap(slotopt.SGD(learning_rate=0.1),
                                                               {"v[13]": slotopt.SGD(learning_rate=0.1)}))
        return slotopt.CompositeOptimizer([(slotopt.SGD(learning_rate=0.1), lambda: vs[:2]),
                                           (slotopt.SGD(learning_rate=0.1), lambda: vs[2:])])

    opt = make()
    for step in range(3):
        grads = gradients(vs, step)
        before = vs[1].detach().clone()
        opt.apply_gradients(list(zip(grads, vs)))
        assert torch.equal(vs[1], (before - 0.1 * grads[1]) * 0.5)
    assert len(calls) == 3

    def broken(value):
        raise RuntimeError("constraint failed")

    vs[1].constraint = broken
    before = [v.detach().clone() for v in vs]
    with pytest.raises(RuntimeError, match="constraint failed"):
        opt.apply_gradients(list(zip(gradients(vs, 5), vs)))
    for a, b in zip(before, vs):
        assert torch.equal(a, b)


def test_keras3_apply_gradients_on_a_list_like_the_last_still_refuses_what_is_not_a_pair():
    vs = variables()
    opt = slotopt.Adam(learning_rate=0.01)
    for step in range(2):
        opt.apply_gradients(list(zip(gradients(vs, step), vs)))
    before = [v.clone() for v in vs]
    for bad in ([(g, v, None) for g, v in zip(gradients(vs, 3), vs)],
                [*zip(gradients(vs, 3)[:-1], vs[:-1]), (gradients(vs, 3)[-1], [1.0, 2.0])]):
        with pytest.raises(TypeError, match="grads_and_vars"):
            opt.apply_gradients(bad)
    for a, b in zip(before, vs):
        assert torch.equal(a, b)
    assert int(opt.iterations) == 2
