"""Keras 3 ``LossScaleOptimizer`` (spec §5.1): dynamic scale sequence, state layout, delegation, errors."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import slotopt

INF, NAN = float("inf"), float("nan")


def var(values, name="w", constraint=None):
    return slotopt.Variable(torch.tensor(values), name=name, constraint=constraint)


def t(*values, dtype=torch.float32):
    return torch.tensor(values, dtype=dtype)


def snapshot(opt, variables):
    return [v.detach().clone() for v in variables], [v.detach().clone() for v in opt.variables]


def assert_same(opt, variables, snap):
    values, opt_values = snap
    assert all(torch.equal(a, b) for a, b in zip(values, variables))
    assert len(opt_values) == len(opt.variables)
    assert all(torch.equal(a, b) for a, b in zip(opt_values, opt.variables))


# ------------------------------------------------------------------------------------------ the verified sequence
def test_dynamic_scale_follows_the_verified_sequence():
    w = var([1.0])
    opt = slotopt.LossScaleOptimizer(slotopt.SGD(learning_rate=0.5), initial_scale=4.0, dynamic_growth_steps=2)
    scales, counters, iterations, values = [], [], [], []
    for g in (INF, INF, INF, 1.0, 1.0, 1.0):
        opt.apply_gradients([(t(g), w)])
        scales.append(float(opt.dynamic_scale))
        counters.append(int(opt.step_counter))
        iterations.append(int(opt.iterations))
        values.append(w.item())
    assert scales == [2.0, 1.0, 0.5, 0.5, 1.0, 1.0]
    assert counters == [0, 0, 0, 1, 0, 1]
    assert iterations == [0, 0, 0, 1, 2, 3]
    # applied gradients: 1/0.5 = 2, 1/0.5 = 2, 1/1 = 1 (scale read before it grows)
    assert values == [1.0, 1.0, 1.0, 0.0, -1.0, -1.5]
    assert int(opt._iterations) == 0  # the wrapper's own counter never moves


def test_nan_gradients_halve_the_scale_without_a_floor():
    w = var([1.0])
    opt = slotopt.LossScaleOptimizer(slotopt.SGD(), initial_scale=1.0)
    for _ in range(3):
        opt.apply_gradients([(t(NAN), w)])
    assert float(opt.dynamic_scale) == 0.125 and w.item() == 1.0


def test_growth_every_step_with_one_growth_step():
    w = var([0.0])
    opt = slotopt.LossScaleOptimizer(slotopt.SGD(learning_rate=1.0), initial_scale=2.0, dynamic_growth_steps=1)
    for _ in range(3):
        opt.apply_gradients([(t(4.0), w)])
    assert float(opt.dynamic_scale) == 16.0
    assert w.item() == -(2.0 + 1.0 + 0.5)


def test_non_finite_gradient_leaves_variables_and_inner_state_untouched():
    a, b = var([1.0, -1.0], "a"), var([0.5], "b")
    opt = slotopt.LossScaleOptimizer(slotopt.Adam(learning_rate=0.5, use_ema=True), initial_scale=8.0)
    opt.apply_gradients([(t(8.0, -8.0), a), (t(4.0), b)])
    before = snapshot(opt.inner_optimizer, [a, b])
    for bad in ([t(INF, 1.0), t(1.0)], [t(1.0, 1.0), t(NAN)], [t(-INF, NAN), t(1.0)]):
        opt.apply_gradients(zip(bad, [a, b]))
    assert_same(opt.inner_optimizer, [a, b], before)
    assert float(opt.dynamic_scale) == 1.0 and int(opt.step_counter) == 0 and int(opt.iterations) == 1


def test_non_finite_sparse_gradient_is_detected():
    emb = var([[1.0, 1.0], [2.0, 2.0]], "emb")
    opt = slotopt.LossScaleOptimizer(slotopt.SGD(learning_rate=1.0), initial_scale=2.0)
    g = slotopt.IndexedSlices(torch.tensor([[1.0, INF]]), torch.tensor([1]), (2, 2))
    opt.apply_gradients([(g, emb)])
    assert emb.tolist() == [[1.0, 1.0], [2.0, 2.0]] and float(opt.dynamic_scale) == 1.0
    opt.apply_gradients([(slotopt.IndexedSlices(torch.tensor([[2.0, 4.0]]), torch.tensor([1]), (2, 2)), emb)])
    assert emb.tolist() == [[1.0, 1.0], [0.0, -2.0]]


def test_large_finite_and_empty_gradients_count_as_finite():
    a, b = var([0.0], "a"), slotopt.Variable(torch.zeros(0), name="empty")
    opt = slotopt.LossScaleOptimizer(slotopt.SGD(learning_rate=1.0), initial_scale=2.0**100)
    opt.apply_gradients([(t(3e38), a), (torch.zeros(0), b)])  # a 2-norm would overflow here
    assert int(opt.step_counter) == 1 and int(opt.iterations) == 1
    assert a.item() == pytest.approx(-3e38 / 2.0**100)


def test_half_precision_gradients_are_unscaled_in_float32():
    # Keras divides a bfloat16 gradient by the float32 scale in float32: 1/3 keeps float32 precision.
    w = var([0.0])
    opt = slotopt.LossScaleOptimizer(slotopt.SGD(learning_rate=1.0), initial_scale=3.0)
    opt.apply_gradients([(t(1.0, dtype=torch.bfloat16), w)])
    assert w.item() == -torch.tensor(1.0 / 3.0, dtype=torch.float32).item()


def test_constraints_are_applied_once_by_the_inner_optimizer():
    w = var([1.0], constraint=lambda v: v * 0.5)
    opt = slotopt.LossScaleOptimizer(slotopt.SGD(learning_rate=0.5), initial_scale=2.0)
    opt.apply_gradients([(t(0.0), w)])
    assert w.item() == 0.5


def test_inner_accumulation_and_clipping_see_unscaled_gradients():
    w = var([1.0])
    inner = slotopt.SGD(learning_rate=0.5, gradient_accumulation_steps=2, clipvalue=1.0)
    opt = slotopt.LossScaleOptimizer(inner, initial_scale=4.0)
    values = []
    for g in range(1, 7):
        opt.apply_gradients([(t(4.0 * g), w)])
        values.append(w.item())
    assert values == [1.0, 0.5, 0.5, 0.0, 0.0, -0.5]  # §1.9 clipvalue sequence


# ------------------------------------------------------------------------------------------ state layout
def test_variables_are_own_four_then_the_inner_ones():
    kernel, bias = var([[0.0, 0.0]], "kernel"), var([0.0], "bias")
    opt = slotopt.LossScaleOptimizer(slotopt.Adam(name="adam"), name="lso")
    assert [v.path for v in opt.variables] == ["lso/iteration", "lso/learning_rate", "adam/iteration",
                                               "adam/learning_rate"]
    opt.build([kernel, bias])
    assert [v.path for v in opt.variables] == [
        "lso/iteration", "lso/learning_rate", "lso/step_counter", "lso/dynamic_scale", "adam/iteration",
        "adam/learning_rate", "adam/kernel_momentum", "adam/kernel_velocity", "adam/bias_momentum",
        "adam/bias_velocity",
    ]
    assert opt.variables[2].dtype == torch.int64 and opt.variables[3].dtype == torch.float32
    assert float(opt.variables[3]) == 2.0**15 and opt.inner_optimizer.built


def test_iterations_and_learning_rate_delegate_to_the_inner_optimizer():
    inner = slotopt.SGD(learning_rate=0.5)
    opt = slotopt.LossScaleOptimizer(inner)
    assert opt.learning_rate is inner.learning_rate
    opt.learning_rate = 0.25
    assert inner.learning_rate.item() == 0.25
    opt.iterations = 7
    assert int(inner.iterations) == 7 and int(opt.iterations) == 7


def test_inner_loss_scale_factor_is_disabled():
    inner = slotopt.SGD(learning_rate=1.0, loss_scale_factor=8.0)
    opt = slotopt.LossScaleOptimizer(inner, initial_scale=2.0)
    assert inner.loss_scale_factor is None
    w = var([0.0])
    opt.apply_gradients([(t(4.0), w)])
    assert w.item() == -2.0


def test_scale_loss_before_and_after_build_and_in_the_loss_dtype():
    opt = slotopt.LossScaleOptimizer(slotopt.SGD(), initial_scale=4.0)
    assert opt.scale_loss(torch.tensor(1.5)).item() == 6.0
    assert opt.scale_loss(1.5) == 6.0
    opt.build([var([0.0])])
    opt.dynamic_scale.fill_(8.0)
    scaled = opt.scale_loss(torch.tensor(0.5, dtype=torch.bfloat16))
    assert scaled.dtype == torch.bfloat16 and scaled.item() == 4.0


def test_weights_round_trip():
    w = var([1.0, -1.0])
    opt = slotopt.LossScaleOptimizer(slotopt.Adam(learning_rate=0.5), initial_scale=4.0, dynamic_growth_steps=3)
    for g in (t(4.0, 8.0), t(INF, 0.0), t(2.0, 2.0)):
        opt.apply_gradients([(g, w)])
    weights = opt.get_weights()
    assert len(weights) == 8 and float(weights[3]) == 2.0 and int(weights[2]) == 1

    other = slotopt.LossScaleOptimizer(slotopt.Adam(learning_rate=0.1))
    with pytest.raises(ValueError, match="has not yet been built"):  # as Keras 3
        other.set_weights(weights)
    other.load_own_variables({str(i): x for i, x in enumerate(weights)})  # before the build: kept
    w2 = var(w.tolist())
    other.build([w2])
    assert float(other.dynamic_scale) == 2.0 and int(other.iterations) == 2
    for g in (t(1.0, 1.0), t(NAN, 0.0)):
        opt.apply_gradients([(g, w)])
        other.apply_gradients([(g, w2)])
    assert torch.equal(w, w2)
    assert all(torch.equal(a, b) for a, b in zip(opt.variables, other.variables))


def test_set_weights_errors_change_nothing():
    w = var([1.0, -1.0])
    opt = slotopt.LossScaleOptimizer(slotopt.Adam(learning_rate=0.5), initial_scale=4.0)
    opt.apply_gradients([(t(4.0, 8.0), w)])
    snap = snapshot(opt, [w])
    weights = opt.get_weights()
    with pytest.raises(ValueError, match=r"weight list of length 7, but the optimizer was expecting 8"):
        opt.set_weights(weights[:7])
    bad_own = list(weights)
    bad_own[3] = torch.ones(2).numpy()
    bad_own[4] = torch.tensor(99).numpy()
    with pytest.raises(ValueError, match=r"Optimizer variable 3 \(.*dynamic_scale\) has shape \(\) not compatible "
                                         r"with provided weight shape \(2,\)"):
        opt.set_weights(bad_own)
    bad_inner = list(weights)
    bad_inner[2] = torch.tensor(5).numpy()
    bad_inner[6] = torch.ones(3).numpy()
    with pytest.raises(ValueError, match=r"w_momentum\) has shape \(2,\) not compatible with provided weight shape"):
        opt.set_weights(bad_inner)
    assert_same(opt, [w], snap)


# ------------------------------------------------------------------------------------------ other entry points
def test_stateless_apply_finite_and_non_finite():
    w = var([1.0])
    opt = slotopt.LossScaleOptimizer(slotopt.SGD(learning_rate=0.5), initial_scale=2.0)
    opt.build([w])
    snap = snapshot(opt, [w])
    state = [v.detach().clone() for v in opt.variables]
    new_w, new_state = opt.stateless_apply(state, [t(2.0)], [w.detach()])
    assert new_w[0].tolist() == [0.5] and int(new_state[2]) == 1 and int(new_state[4]) == 1
    new_w, new_state = opt.stateless_apply(state, [t(INF)], [w.detach()])
    assert new_w[0].tolist() == [1.0] and float(new_state[3]) == 1.0 and int(new_state[4]) == 0
    assert_same(opt, [w], snap)


def test_finalize_variable_values_delegates():
    w = var([1.0])
    opt = slotopt.LossScaleOptimizer(slotopt.SGD(learning_rate=0.5, use_ema=True, ema_momentum=0.5),
                                     initial_scale=1.0)
    for _ in range(2):
        opt.apply_gradients([(t(1.0), w)])
    opt.finalize_variable_values([w])
    assert w.item() == 0.25


def test_step_and_zero_grad_with_a_module_and_a_scaled_loss():
    torch.manual_seed(0)
    model, ref = nn.Linear(3, 1), nn.Linear(3, 1)
    ref.load_state_dict(model.state_dict())
    opt = slotopt.LossScaleOptimizer(slotopt.SGD(learning_rate=0.5, params=model), initial_scale=2.0**10)
    ref_opt = slotopt.SGD(learning_rate=0.5, params=ref)
    x = torch.tensor([[0.5, -1.0, 2.0]])
    for _ in range(2):
        opt.zero_grad()
        opt.scale_loss(model(x).sum()).backward()
        opt.step()
        ref_opt.zero_grad()
        ref(x).sum().backward()
        ref_opt.step()
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), ref.parameters()))
    assert int(opt.iterations) == 2 and int(opt.step_counter) == 2
    opt.zero_grad()
    assert all(p.grad is None for p in model.parameters())


def test_step_with_params_on_the_wrapper():
    model = nn.Linear(2, 1)
    opt = slotopt.LossScaleOptimizer(slotopt.SGD(learning_rate=0.5), initial_scale=4.0, params=model)
    assert opt.built and opt.inner_optimizer.built
    before = model.weight.detach().clone()
    opt.scale_loss(model(torch.ones(1, 2)).sum()).backward()
    opt.step()
    assert torch.equal(model.weight, before - 0.5)


def test_minimize_scales_the_loss():
    w = var([1.0, -2.0])
    opt = slotopt.LossScaleOptimizer(slotopt.SGD(learning_rate=0.5), initial_scale=2.0**100)
    opt.minimize(lambda: (w**2).sum() * 1e9, [w])  # scaled gradients overflow float32: skipped, scale halves
    assert w.tolist() == [1.0, -2.0] and float(opt.dynamic_scale) == 2.0**99
    opt.minimize(lambda: (w**2).sum(), [w])
    assert w.tolist() == [0.0, 0.0] and int(opt.iterations) == 1


def test_config_round_trip():
    inner = slotopt.Adam(learning_rate=0.5, amsgrad=True, name="inner")
    opt = slotopt.LossScaleOptimizer(inner, initial_scale=64.0, dynamic_growth_steps=10, name="scaler")
    config = opt.get_config()
    assert config == {
        "name": "scaler",
        "inner_optimizer": slotopt.serialize(inner),
        "initial_scale": 64.0,
        "dynamic_growth_steps": 10,
    }
    again = slotopt.LossScaleOptimizer.from_config(config)
    assert again.get_config() == config
    assert type(again.inner_optimizer) is slotopt.Adam and again.inner_optimizer.amsgrad
    assert slotopt.deserialize(slotopt.serialize(opt)).get_config() == config


def test_from_config_accepts_default_base_arguments():
    config = {**slotopt.LossScaleOptimizer(slotopt.SGD()).get_config(), "clipnorm": None, "use_ema": False,
              "ema_momentum": 0.99, "dynamic": True}
    assert isinstance(slotopt.LossScaleOptimizer.from_config(config), slotopt.LossScaleOptimizer)


# ------------------------------------------------------------------------------------------ errors
@pytest.mark.parametrize("kwargs, error, pattern", [
    ({"dynamic": False}, ValueError, r"LossScaleOptimizer no longer supports `dynamic=False`. Instead, simply set "
                                     r"`loss_scale_factor` directly on the `inner_optimizer`."),
    ({"clipnorm": 1.0}, ValueError, r"LossScaleOptimizer does not support `clipnorm`. Instead, set `clipnorm` on "
                                    r"the `inner_optimizer`."),
    ({"use_ema": True}, ValueError, r"does not support `use_ema`"),
    ({"loss_scale_factor": 2.0}, ValueError, r"does not support `loss_scale_factor`"),
    ({"foo": 1, "bar": 2}, ValueError, r"LossScaleOptimizer does not support arguments: `foo`, `bar`."),
    ({"initial_scale": 0.0}, ValueError, r"`initial_scale`.*initial_scale=0.0"),
    ({"initial_scale": INF}, ValueError, r"`initial_scale`.*initial_scale=inf"),
    ({"initial_scale": "big"}, ValueError, r"`initial_scale`.*initial_scale='big'"),
    ({"dynamic_growth_steps": 0}, ValueError, r"`dynamic_growth_steps`.*dynamic_growth_steps=0"),
    ({"dynamic_growth_steps": 2.0}, ValueError, r"`dynamic_growth_steps`.*dynamic_growth_steps=2.0"),
])
def test_constructor_errors(kwargs, error, pattern):
    inner = slotopt.SGD(loss_scale_factor=4.0)
    with pytest.raises(error, match=pattern):
        slotopt.LossScaleOptimizer(inner, **kwargs)
    assert inner.loss_scale_factor == 4.0  # untouched by the failed construction


def test_inner_optimizer_must_be_a_keras3_optimizer():
    with pytest.raises(TypeError, match=r"Argument `inner_optimizer` must be .*Received: inner_optimizer='adam'"):
        slotopt.LossScaleOptimizer("adam")


def test_from_config_without_inner_optimizer():
    with pytest.raises(ValueError, match=r"needs `inner_optimizer`"):
        slotopt.LossScaleOptimizer.from_config({"initial_scale": 2.0})


@pytest.mark.parametrize("case", ["shape", "unknown", "all_none", "integer"])
def test_bad_gradients_raise_before_any_change(case):
    a, b = var([1.0, 2.0], "a"), var([3.0], "b")
    opt = slotopt.LossScaleOptimizer(slotopt.Adam(learning_rate=0.5), initial_scale=4.0)
    opt.apply_gradients([(t(4.0, 4.0), a), (t(4.0), b)])
    snap = snapshot(opt, [a, b])
    if case == "shape":
        pairs, pattern = [(t(INF, 1.0), a), (t(1.0, 1.0), b)], r"Gradient for variable b has shape \(2,\)"
    elif case == "unknown":
        pairs, pattern = [(t(INF, 1.0), a), (t(1.0), var([0.0], "c"))], r"Unknown variable: c"
    elif case == "all_none":
        pairs, pattern = [(None, a), (None, b)], r"No gradients provided for any variable"
    else:
        pairs, pattern = [(t(INF, 1.0), a), (torch.tensor([1]), b)], r"Gradient for variable b must be a floating"
    with pytest.raises(ValueError, match=pattern):
        opt.apply_gradients(pairs)
    assert_same(opt, [a, b], snap)


def test_stateless_apply_before_build():
    opt = slotopt.LossScaleOptimizer(slotopt.SGD())
    with pytest.raises(ValueError, match=r"To call `stateless_apply`, LossScaleOptimizer must be built"):
        opt.stateless_apply([], [t(1.0)], [t(1.0)])


def test_docstring_example_runs():
    import doctest

    from slotopt.keras3 import loss_scale

    failures, tried = doctest.testmod(loss_scale)
    assert tried and not failures
