"""Keras 3 base-class behaviour (spec §1) through SGD / Adam / AdamW and a custom optimizer.

Hyperparameters are exactly representable (0.5, 0.25, ...) so expected values are exact; where rounding matters
the expectation is recomputed here with numpy scalars in the reference's evaluation order.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from torch import nn

import slotopt
from slotopt import schedules

f32 = np.float32


def var(values, name="w", dtype=torch.float32, constraint=None):
    return slotopt.Variable(torch.tensor(values, dtype=dtype), name=name, constraint=constraint)


def t(*values, dtype=torch.float32):
    return torch.tensor(values, dtype=dtype)


class RecordingSchedule(schedules.LearningRateSchedule):
    """Constant 0.5, remembering every step it was called with."""

    def __init__(self):
        self.steps = []

    def __call__(self, step):
        self.steps.append(int(step))
        return torch.tensor(0.5)

    def get_config(self):
        return {}


# ------------------------------------------------------------------------------------------ EMA (§1.8)
def test_ema_with_overwrite_frequency_follows_the_verified_sequence():
    w = var([1.0])
    opt = slotopt.SGD(learning_rate=0.5, use_ema=True, ema_momentum=0.5, ema_overwrite_frequency=3)
    values, averages = [], []
    for g in range(1, 7):
        opt.apply_gradients([(t(float(g)), w)])
        values.append(w.item())
        averages.append(opt.variables[2].item())
    assert values == [0.5, -0.5, -1.0, -3.0, -5.5, -6.125]
    assert averages == [0.5, 0.0, -1.0, -2.0, -3.75, -6.125]
    assert opt.variables[2].name == "w_average"


def test_ema_without_overwrite_and_finalize_variable_values():
    w = var([1.0])
    opt = slotopt.SGD(learning_rate=0.5, use_ema=True, ema_momentum=0.5)
    for g in (1.0, 1.0):
        opt.apply_gradients([(t(g), w)])
    # w: 0.5 then 0.0; avg: copy 0.5, then 0.5*0.5 + 0.5*0.0 = 0.25
    assert w.item() == 0.0
    opt.finalize_variable_values([w])
    assert w.item() == 0.25


def test_ema_covers_variables_without_gradient():
    a, b = var([1.0], "a"), var([2.0], "b")
    opt = slotopt.SGD(learning_rate=0.5, use_ema=True, ema_momentum=0.5)
    opt.build([a, b])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        opt.apply_gradients([(t(1.0), a), (None, b)])
    assert [v.item() for v in opt.variables[2:4]] == [0.5, 2.0]  # b's average copies b on the first step


# ------------------------------------------------------------------------------------------ accumulation (§1.9)
@pytest.mark.parametrize(
    "clipvalue, expected",
    [(None, [1.0, 0.25, 0.25, -1.5, -1.5, -4.25]), (1.0, [1.0, 0.5, 0.5, 0.0, 0.0, -0.5])],
)
def test_gradient_accumulation_follows_the_verified_sequence(clipvalue, expected):
    w = var([1.0])
    opt = slotopt.SGD(learning_rate=0.5, gradient_accumulation_steps=2, clipvalue=clipvalue)
    values, iterations = [], []
    for g in range(1, 7):
        opt.apply_gradients([(t(float(g)), w)])
        values.append(w.item())
        iterations.append(int(opt.iterations))
    assert values == expected
    assert iterations == [0, 1, 1, 2, 2, 3]
    assert int(opt._iterations) == 6


def test_accumulation_schedule_sees_raw_iterations_only_on_update_steps():
    schedule = RecordingSchedule()
    w = var([1.0])
    opt = slotopt.SGD(learning_rate=schedule, gradient_accumulation_steps=2)
    for _ in range(4):
        opt.apply_gradients([(t(1.0), w)])
    assert schedule.steps == [1, 3]
    assert w.item() == 0.0


def test_accumulation_runs_weight_decay_only_on_update_steps_and_constraints_every_call():
    w = var([2.0])
    opt = slotopt.SGD(learning_rate=0.5, weight_decay=0.5, gradient_accumulation_steps=2)
    opt.apply_gradients([(t(0.0), w)])
    assert w.item() == 2.0
    opt.apply_gradients([(t(0.0), w)])
    assert w.item() == 1.5

    c = var([1.0], constraint=lambda v: v * 0.5)
    opt = slotopt.SGD(learning_rate=0.5, gradient_accumulation_steps=2)
    opt.apply_gradients([(t(0.0), c)])
    assert c.item() == 0.5


def test_accumulation_adam_bias_correction_uses_divided_iterations():
    # Two calls of GA=2 equal one Adam step on the mean gradient.
    a, b = var([1.0, -2.0]), var([1.0, -2.0])
    acc = slotopt.Adam(learning_rate=0.5, gradient_accumulation_steps=2)
    ref = slotopt.Adam(learning_rate=0.5)
    acc.apply_gradients([(t(1.0, 2.0), a)])
    acc.apply_gradients([(t(3.0, 4.0), a)])
    ref.apply_gradients([(t(2.0, 3.0), b)])
    assert torch.equal(a, b)
    assert torch.equal(acc.variables[-1], ref.variables[-1])


# ------------------------------------------------------------------------------------------ clipping (§1.6)
def test_clipnorm_is_per_tensor():
    a, b = var([0.0, 0.0], "a"), var([0.0, 0.0], "b")
    opt = slotopt.SGD(learning_rate=1.0, clipnorm=1.0)
    opt.apply_gradients([(t(3.0, 4.0), a), (t(0.375, 0.5), b)])
    expected_a = -(np.array([3, 4], f32) * f32(1.0)) / f32(5.0)
    np.testing.assert_array_equal(a.detach().numpy(), expected_a)
    assert b.tolist() == [-0.375, -0.5]  # norm 0.625 < 1: unchanged


def test_global_clipnorm_scales_every_gradient_by_the_same_factor():
    a, b = var([0.0, 0.0], "a"), var([0.0], "b")
    opt = slotopt.SGD(learning_rate=1.0, global_clipnorm=2.5)
    opt.apply_gradients([(t(3.0, 0.0), a), (t(4.0), b)])
    scale = f32(2.5) * min(f32(1.0) / f32(5.0), f32(1.0 / 2.5))
    np.testing.assert_array_equal(a.detach().numpy(), -(np.array([3, 0], f32) * scale))
    np.testing.assert_array_equal(b.detach().numpy(), -(np.array([4], f32) * scale))


def test_global_clipnorm_with_non_finite_norm_makes_every_gradient_nan():
    a, b = var([0.0], "a"), var([0.0], "b")
    opt = slotopt.SGD(learning_rate=1.0, global_clipnorm=1.0)
    opt.apply_gradients([(t(float("inf")), a), (t(1.0), b)])
    assert torch.isnan(a).all() and torch.isnan(b).all()


def test_clipvalue_clips_elementwise():
    w = var([0.0, 0.0, 0.0])
    slotopt.SGD(learning_rate=1.0, clipvalue=0.5).apply_gradients([(t(-2.0, 0.25, 3.0), w)])
    assert w.tolist() == [0.5, -0.25, -0.5]


@pytest.mark.parametrize("kwargs", [{"clipnorm": 0.0}, {"clipnorm": -1.0}, {"global_clipnorm": 0.0},
                                    {"global_clipnorm": -2.0}, {"clipvalue": 0.0}, {"clipvalue": -0.5}])
def test_clip_value_not_positive_disables_clipping(kwargs):
    w = var([0.0, 0.0])
    slotopt.SGD(learning_rate=1.0, **kwargs).apply_gradients([(t(3.0, -4.0), w)])
    assert w.tolist() == [-3.0, 4.0]


def test_clipnorm_of_sparse_gradient_uses_its_rows_before_summing_duplicates():
    # §1.6: with IndexedSlices the norm is taken over `values` (duplicates not summed).
    w = var([[0.0], [0.0]])
    g = slotopt.IndexedSlices(t(3.0, 4.0).reshape(2, 1), torch.tensor([0, 0]), (2, 1))
    slotopt.SGD(learning_rate=1.0, clipnorm=1.0).apply_gradients([(g, w)])
    expected = -((f32(3.0) * f32(1.0)) / f32(5.0) + (f32(4.0) * f32(1.0)) / f32(5.0))
    assert w[0, 0].item() == pytest.approx(float(expected), abs=0)
    assert w[1, 0].item() == 0.0


# ------------------------------------------------------------------------------------------ weight decay (§1.7)
def test_weight_decay_runs_before_the_update_with_the_pre_update_value():
    w = var([2.0])
    slotopt.SGD(learning_rate=0.5, weight_decay=0.5).apply_gradients([(t(1.0), w)])
    assert w.item() == 1.0  # 2 - 2*0.5*0.5 = 1.5, then 1.5 - 0.5*1


def test_weight_decay_float_rounding_matches_generic_formula():
    w = var([3.0])
    slotopt.SGD(learning_rate=0.1, weight_decay=0.3).apply_gradients([(t(0.0), w)])
    expected = f32(3.0) - (f32(3.0) * f32(0.3)) * f32(0.1)
    assert w.item() == float(expected)


def test_adamw_decays_with_default_weight_decay():
    w = var([1.0])
    opt = slotopt.AdamW(learning_rate=0.5)
    assert opt.weight_decay == 0.004
    opt.apply_gradients([(t(0.0), w)])
    assert w.item() == float(f32(1.0) - (f32(1.0) * f32(0.004)) * f32(0.5))


def test_exclude_from_weight_decay_by_list_and_by_name_regex():
    kernel, bias, scale = var([2.0], "dense/kernel"), var([2.0], "bias"), var([2.0], "layer_norm_scale")
    opt = slotopt.SGD(learning_rate=0.5, weight_decay=0.5)
    opt.exclude_from_weight_decay(var_list=[scale], var_names=["bia."])
    opt.apply_gradients([(t(0.0), kernel), (t(0.0), bias), (t(0.0), scale)])
    assert [kernel.item(), bias.item(), scale.item()] == [1.5, 2.0, 2.0]


def test_exclude_from_weight_decay_call_replaces_previous_exclusions():
    kernel, bias = var([2.0], "kernel"), var([2.0], "bias")
    opt = slotopt.SGD(learning_rate=0.5, weight_decay=0.5)
    opt.exclude_from_weight_decay(var_names=["bias"])
    opt.exclude_from_weight_decay(var_list=[kernel])
    opt.apply_gradients([(t(0.0), kernel), (t(0.0), bias)])
    assert [kernel.item(), bias.item()] == [2.0, 1.5]


def test_exclude_from_weight_decay_matches_module_parameter_names():
    model = nn.Linear(2, 1)
    with torch.no_grad():
        model.weight.fill_(2.0)
        model.bias.fill_(2.0)
    opt = slotopt.SGD(learning_rate=0.5, weight_decay=0.5, params=model)
    opt.exclude_from_weight_decay(var_names=["bias"])
    model.weight.grad = torch.zeros_like(model.weight)
    model.bias.grad = torch.zeros_like(model.bias)
    opt.step()
    assert model.weight.tolist() == [[1.5, 1.5]] and model.bias.tolist() == [2.0]


# ------------------------------------------------------------------------------------------ loss scale factor (§1.10)
def test_loss_scale_factor_scales_loss_and_divides_gradients():
    w = var([1.0])
    opt = slotopt.SGD(learning_rate=0.5, loss_scale_factor=4.0)
    loss = opt.scale_loss((w * 3.0).sum())
    assert loss.item() == 12.0
    loss.backward()
    assert w.grad.item() == 12.0
    opt.apply_gradients([(w.grad, w)])
    assert w.item() == -0.5
    assert slotopt.SGD().scale_loss(5.0) == 5.0


# ------------------------------------------------------------------------------------------ constraints
def test_constraint_is_applied_after_the_update():
    w = var([1.0], constraint=lambda v: v.clamp(max=0.5))
    slotopt.SGD(learning_rate=1.0).apply_gradients([(t(-1.0), w)])
    assert w.item() == 0.5  # update to 2.0, then clamped (clamping first would give 1.5)


def test_constraint_runs_once_per_call_and_only_for_variables_with_gradients():
    halve = lambda v: v * 0.5  # noqa: E731 - not idempotent: counts applications
    a, b = var([1.0], "a", constraint=halve), var([1.0], "b", constraint=halve)
    opt = slotopt.SGD(learning_rate=0.5)
    opt.build([a, b])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        opt.apply_gradients([(t(0.0), a), (None, b)])
    assert [a.item(), b.item()] == [0.5, 1.0]


# ------------------------------------------------------------------------------------------ learning rate (§1.3)
def test_float_learning_rate_is_a_float32_variable():
    opt = slotopt.Adam(learning_rate=0.001)
    lr = opt.learning_rate
    assert isinstance(lr, slotopt.Variable) and lr.dtype == torch.float32
    assert [v.name for v in opt.variables] == ["iteration", "learning_rate"]
    assert opt.get_config()["learning_rate"] == 0.0010000000474974513
    opt.learning_rate = 0.25
    assert opt.learning_rate is lr and lr.item() == 0.25
    opt.lr = 0.5
    assert opt.lr.item() == 0.5


def test_callable_learning_rate_is_called_without_arguments():
    calls = []
    opt = slotopt.SGD(learning_rate=lambda: calls.append(1) or 0.5)
    assert opt.learning_rate == 0.5 and calls == [1]
    assert [v.name for v in opt.variables] == ["iteration"]
    w = var([1.0])
    opt.apply_gradients([(t(1.0), w)])
    assert w.item() == 0.5


def test_schedule_learning_rate_uses_iterations():
    schedule = RecordingSchedule()
    opt = slotopt.SGD(learning_rate=schedule)
    assert float(opt.learning_rate) == 0.5 and schedule.steps == [0]
    assert [v.name for v in opt.variables] == ["iteration"]


def test_setting_a_callable_untracks_the_learning_rate_variable_and_a_float_brings_it_back():
    w = var([1.0])
    opt = slotopt.SGD(learning_rate=0.5)
    opt.build([w])
    assert len(opt.variables) == 2
    opt.learning_rate = lambda: 0.25
    assert [v.name for v in opt.variables] == ["iteration"]
    opt.apply_gradients([(t(1.0), w)])
    assert w.item() == 0.75
    opt.learning_rate = 0.5
    assert [v.name for v in opt.variables] == ["iteration", "learning_rate"]
    opt.apply_gradients([(t(1.0), w)])
    assert w.item() == 0.25


def test_setting_a_schedule_on_a_float_optimizer_untracks_the_variable():
    opt = slotopt.SGD(learning_rate=0.5)
    opt.learning_rate = schedules.ExponentialDecay(0.5, 2, 0.5)
    assert [v.name for v in opt.variables] == ["iteration"]
    assert float(opt.learning_rate) == 0.5


def test_setting_a_number_on_a_schedule_optimizer_raises_type_error():
    opt = slotopt.SGD(learning_rate=schedules.ExponentialDecay(0.5, 2, 0.5))
    with pytest.raises(TypeError, match="created with a `LearningRateSchedule` object as its `learning_rate`"):
        opt.learning_rate = 0.1
    assert isinstance(opt._learning_rate, schedules.ExponentialDecay)


# ------------------------------------------------------------------------------------------ variables (§1.2)
def test_variables_order_with_ema_and_accumulation_matches_keras():
    kernel, bias = var(np.zeros((3, 2)).tolist(), "kernel"), var([0.0, 0.0], "bias")
    opt = slotopt.Adam(use_ema=True, gradient_accumulation_steps=2, name="adam")
    opt.build([kernel, bias])
    assert [v.path for v in opt.variables] == [
        "adam/iteration", "adam/learning_rate", "adam/kernel_average", "adam/bias_average",
        "adam/kernel_gradient_accumulator", "adam/bias_gradient_accumulator", "adam/kernel_momentum",
        "adam/kernel_velocity", "adam/bias_momentum", "adam/bias_velocity",
    ]
    assert opt.variables[0].dtype == torch.int64
    assert [tuple(v.shape) for v in opt.variables[2:]] == [(3, 2), (2,), (3, 2), (2,), (3, 2), (3, 2), (2,), (2,)]


def test_variables_order_amsgrad_and_schedule():
    kernel, bias = var(np.zeros((3, 2)).tolist(), "kernel"), var([0.0, 0.0], "bias")
    opt = slotopt.Adam(learning_rate=schedules.ExponentialDecay(0.5, 2, 0.5), amsgrad=True, name="ams")
    opt.build([kernel, bias])
    assert [v.name for v in opt.variables] == [
        "iteration", "kernel_momentum", "kernel_velocity", "bias_momentum", "bias_velocity",
        "kernel_velocity_hat", "bias_velocity_hat",
    ]


# ------------------------------------------------------------------------------------------ custom optimizer
class HeavyBall(slotopt.Optimizer):
    """v <- v/2 + g; w <- w - lr * v: a custom optimizer with one slot, overriding build and update_step."""

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        self.velocities = self.add_optimizer_variables(self._trainable_variables, "velocity")

    def update_step(self, gradient, variable, learning_rate):
        v = self.velocities[self._get_variable_index(variable)]
        self.assign(v, v * 0.5 + gradient)
        self.assign_sub(variable, v * learning_rate)


class PlainGD(slotopt.Optimizer):
    def update_step(self, gradient, variable, learning_rate):
        self.assign_sub(variable, gradient * learning_rate)


def test_custom_optimizer_overriding_update_step_gets_base_features():
    w = var([1.0, 2.0])
    opt = PlainGD(learning_rate=0.5, clipvalue=1.0, weight_decay=0.5, use_ema=True, ema_momentum=0.5)
    opt.apply_gradients([(t(4.0, -4.0), w)])
    # decay: [0.75, 1.5]; update with clipped [1, -1]: [0.25, 2.0]
    assert w.tolist() == [0.25, 2.0]
    assert int(opt.iterations) == 1
    assert opt.name.startswith("plain_gd")


def test_custom_optimizer_with_its_own_slots():
    a, b = var([1.0], "a"), var([2.0, 2.0], "b")
    opt = HeavyBall(learning_rate=0.5)
    for _ in range(2):
        opt.apply_gradients([(t(1.0), a), (t(1.0, 2.0), b)])
    # v: 1 then 1.5; w: 1 - 0.5 - 0.75
    assert a.tolist() == [-0.25]
    assert b.tolist() == [2.0 - 0.5 - 0.75, 2.0 - 1.0 - 1.5]
    assert [v.name for v in opt.variables] == ["iteration", "learning_rate", "a_velocity", "b_velocity"]


# ------------------------------------------------------------------------------------------ stateless_apply (§1.11)
def test_stateless_apply_returns_new_values_and_mutates_nothing():
    w = var([1.0, -1.0])
    opt = slotopt.Adam(learning_rate=0.5)
    opt.build([w])
    before_opt = [v.detach().clone() for v in opt.variables]
    before_w = w.detach().clone()
    new_vars, new_opt = opt.stateless_apply([v.detach().clone() for v in opt.variables], [t(0.5, -0.5)],
                                            [w.detach().clone()])
    assert torch.equal(w, before_w)
    assert all(torch.equal(a, b) for a, b in zip(opt.variables, before_opt))
    stateful = slotopt.Adam(learning_rate=0.5)
    w2 = var([1.0, -1.0])
    stateful.apply_gradients([(t(0.5, -0.5), w2)])
    assert torch.equal(new_vars[0], w2)
    assert len(new_opt) == len(stateful.variables)
    assert all(torch.equal(a, b) for a, b in zip(new_opt, stateful.variables))


def test_stateless_apply_starts_from_the_given_state():
    w = var([1.0])
    opt = slotopt.SGD(learning_rate=0.5)
    opt.build([w])
    new_vars, new_opt = opt.stateless_apply([torch.tensor(7), torch.tensor(0.25)], [t(1.0)], [t(3.0)])
    assert new_vars[0].tolist() == [2.75]
    assert [int(new_opt[0]), float(new_opt[1])] == [8, 0.25]
    assert w.tolist() == [1.0] and int(opt.iterations) == 0 and opt.learning_rate.item() == 0.5


# ------------------------------------------------------------------------------------------ weights I/O (§1.13)
def _trained_adam():
    w = var([1.0, -1.0])
    opt = slotopt.Adam(learning_rate=0.5)
    for g in (t(0.5, 1.0), t(-1.0, 2.0)):
        opt.apply_gradients([(g, w)])
    return opt, w


def test_get_weights_and_set_weights_round_trip():
    opt, _ = _trained_adam()
    weights = opt.get_weights()
    assert [w.shape for w in weights] == [(), (), (2,), (2,)]
    other = slotopt.Adam(learning_rate=0.1)
    other.build([var([0.0, 0.0])])
    other.set_weights(weights)
    assert all(np.array_equal(a, b) for a, b in zip(other.get_weights(), weights))
    assert int(other.iterations) == 2 and other.learning_rate.item() == 0.5


def test_save_and_load_own_variables_use_string_indices():
    opt, w = _trained_adam()
    store = {}
    opt.save_own_variables(store)
    assert sorted(store) == ["0", "1", "2", "3"]
    assert int(store["0"]) == 2
    other = slotopt.Adam(learning_rate=0.5)
    w2 = var(w.tolist())
    other.build([w2])
    other.load_own_variables(store)
    g = t(0.25, -0.75)
    opt.apply_gradients([(g, w)])
    other.apply_gradients([(g, w2)])
    assert torch.equal(w, w2)


def test_state_loaded_before_build_is_applied_at_build():
    opt, w = _trained_adam()
    store = {}
    opt.save_own_variables(store)
    other = slotopt.Adam(learning_rate=0.1)
    other.load_own_variables(store)  # not built yet: kept, not dropped
    w2 = var(w.tolist())
    other.build([w2])
    assert int(other.iterations) == 2
    assert other.learning_rate.item() == 0.5
    g = t(0.25, -0.75)
    opt.apply_gradients([(g, w)])
    other.apply_gradients([(g, w2)])
    assert torch.equal(w, w2)
    assert all(torch.equal(a, b) for a, b in zip(opt.variables, other.variables))


def test_state_set_before_build_is_applied_on_first_apply():
    opt, w = _trained_adam()
    other = slotopt.Adam(learning_rate=0.1)
    with pytest.raises(ValueError, match=r"You are calling `set_weights\(\)` on an optimizer that has not yet been "
                                         "built"):  # Keras 3's test_set_weights (issue 42)
        other.set_weights(opt.get_weights())
    other.load_own_variables({str(i): x for i, x in enumerate(opt.get_weights())})  # a store waits for the build
    w2 = var(w.tolist())
    g = t(0.25, -0.75)
    opt.apply_gradients([(g, w)])
    other.apply_gradients([(g, w2)])  # builds, then restores, then steps
    assert torch.equal(w, w2) and int(other.iterations) == 3


# ------------------------------------------------------------------------------------------ PyTorch API
def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 2), nn.Tanh(), nn.Linear(2, 1))


def _loss(model):
    x = torch.linspace(-1, 1, 12).reshape(4, 3)
    return (model(x) ** 2).mean()


@pytest.mark.parametrize("params_of", [lambda m: m, lambda m: list(m.parameters()),
                                       lambda m: list(m.named_parameters())], ids=["module", "list", "named"])
def test_step_applies_dot_grad_like_apply_gradients(params_of):
    model, ref = _model(), _model()
    opt = slotopt.Adam(learning_rate=0.25, params=params_of(model))
    ref_opt = slotopt.Adam(learning_rate=0.25)
    for _ in range(3):
        opt.zero_grad()
        _loss(model).backward()
        opt.step()
        grads = torch.autograd.grad(_loss(ref), list(ref.parameters()))
        ref_opt.apply_gradients(zip(grads, ref.parameters()))
    for p, q in zip(model.parameters(), ref.parameters()):
        assert torch.equal(p, q)
    assert int(opt.iterations) == 3


def test_step_with_closure_returns_loss_and_named_params_give_slot_names():
    model = _model()
    opt = slotopt.SGD(learning_rate=0.5, momentum=0.5, params=list(model.named_parameters()))
    assert [v.name for v in opt.variables][2:4] == ["0.weight_momentum", "0.bias_momentum"]

    def closure():
        opt.zero_grad()
        loss = _loss(model)
        loss.backward()
        return loss

    before = _loss(model).item()
    loss = opt.step(closure)
    assert loss.item() == pytest.approx(before)
    assert _loss(model).item() < before


def test_zero_grad_sets_to_none_or_zeroes():
    model = _model()
    opt = slotopt.SGD(params=model)
    _loss(model).backward()
    opt.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not p.grad.any() for p in model.parameters())
    opt.zero_grad()
    assert all(p.grad is None for p in model.parameters())


def test_step_without_any_gradient_changes_nothing():
    model = _model()
    opt = slotopt.SGD(params=model)
    before = [p.detach().clone() for p in model.parameters()]
    opt.step()
    assert int(opt.iterations) == 0
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before))


@pytest.mark.parametrize("form", ["callable_loss", "tensor_loss", "callable_var_list"])
def test_minimize_equals_apply_gradients(form):
    w, ref = var([1.0, -2.0]), var([1.0, -2.0])
    opt, ref_opt = slotopt.SGD(learning_rate=0.5), slotopt.SGD(learning_rate=0.5)
    if form == "callable_loss":
        result = opt.minimize(lambda: (w**2).sum(), [w])
    elif form == "tensor_loss":
        result = opt.minimize((w**2).sum(), [w])
    else:
        result = opt.minimize(lambda: (w**2).sum(), lambda: [w])
    ref_opt.apply_gradients([(2 * ref.detach(), ref)])
    assert torch.equal(w, ref)
    assert int(result) == 1


# ------------------------------------------------------------------------------------------ sparse gradients
def _sparse_and_dense(indices, rows):
    values = torch.tensor(rows, dtype=torch.float32)
    idx = torch.tensor(indices)
    sparse = slotopt.IndexedSlices(values, idx, (5, 2))
    dense = torch.zeros(5, 2).index_add_(0, idx, values)
    return sparse, dense


@pytest.mark.parametrize("make", [
    lambda: slotopt.SGD(learning_rate=0.5),
    lambda: slotopt.SGD(learning_rate=0.5, momentum=0.5, nesterov=True),
    lambda: slotopt.Adam(learning_rate=0.5),
    lambda: slotopt.AdamW(learning_rate=0.5, weight_decay=0.25, amsgrad=True),
], ids=["sgd", "sgd_nesterov", "adam", "adamw_amsgrad"])
def test_indexed_slices_with_unique_unsorted_indices_equal_dense(make):
    # With repeated indices Keras 3 differs from dense (keras3_sparse.md; see tests/keras3/test_keras3_sparse.py).
    table = torch.arange(10, dtype=torch.float32).reshape(5, 2) / 4
    a, b = slotopt.Variable(table, name="emb"), slotopt.Variable(table, name="emb")
    sparse_opt, dense_opt = make(), make()
    for indices, rows in [([0, 3, 1], [[1, 2], [3, 4], [0.5, 0.25]]), ([4, 2], [[1, 1], [2, -2]])]:
        sparse, dense = _sparse_and_dense(indices, rows)
        sparse_opt.apply_gradients([(sparse, a)])
        dense_opt.apply_gradients([(dense, b)])
        assert torch.equal(a, b)
    assert all(torch.equal(x, y) for x, y in zip(sparse_opt.variables, dense_opt.variables))


@pytest.mark.parametrize("name", ["sgd", "adam"])
def test_embedding_sparse_coo_gradients_equal_dense(name):
    torch.manual_seed(1)
    sparse_emb = nn.Embedding(6, 3, sparse=True)
    dense_emb = nn.Embedding(6, 3)
    dense_emb.load_state_dict(sparse_emb.state_dict())
    opt_s = slotopt.get({"class_name": name, "config": {"learning_rate": 0.25}})
    opt_d = slotopt.get({"class_name": name, "config": {"learning_rate": 0.25}})
    opt_s.build(sparse_emb)
    opt_d.build(dense_emb)
    ids = torch.tensor([1, 4, 0, 5])  # unique: with repeats Keras 3 differs from dense (test_keras3_sparse.py)
    for _ in range(3):
        for emb, opt in ((sparse_emb, opt_s), (dense_emb, opt_d)):
            opt.zero_grad()
            (emb(ids) ** 2).sum().backward()
            opt.step()
        assert torch.equal(sparse_emb.weight, dense_emb.weight)


# ------------------------------------------------------------------------------------------ dtypes
def test_float64_variables_cast_hyperparameters_through_float32():
    w = var([1.0], dtype=torch.float64)
    slotopt.SGD(learning_rate=0.1).apply_gradients([(t(0.1, dtype=torch.float64), w)])
    assert w.item() == 1.0 - 0.1 * float(f32(0.1))
    assert w.dtype == torch.float64


def test_float64_adam_matches_float64_reference():
    lr, b1, b2, eps = 0.5, 0.5, 0.75, 0.125
    w = var([1.0, -2.0, 0.5], dtype=torch.float64)
    opt = slotopt.Adam(learning_rate=lr, beta_1=b1, beta_2=b2, epsilon=eps)
    ref_w = np.array([1.0, -2.0, 0.5])
    m = np.zeros(3)
    v = np.zeros(3)
    for step, g in enumerate([[0.1, -0.3, 0.7], [0.25, 0.5, -1.0], [-0.6, 0.2, 0.3]], start=1):
        opt.apply_gradients([(torch.tensor(g, dtype=torch.float64), w)])
        g = np.array(g)
        alpha = (lr * np.sqrt(1 - b2**step)) / (1 - b1**step)
        m = m + (g - m) * (1 - b1)
        v = v + (g * g - v) * (1 - b2)
        ref_w = ref_w - (m * alpha) / (np.sqrt(v) + eps)
        np.testing.assert_allclose(w.detach().numpy(), ref_w, rtol=1e-15, atol=0)
    assert all(s.dtype == torch.float64 for s in opt.variables[2:])


def test_bfloat16_variables_keep_their_dtype():
    w = var([1.0, 2.0], dtype=torch.bfloat16)
    opt = slotopt.SGD(learning_rate=0.5, momentum=0.5)
    opt.apply_gradients([(t(1.0, 1.0, dtype=torch.bfloat16), w)])
    opt.apply_gradients([(t(1.0, 1.0, dtype=torch.bfloat16), w)])
    # m: -0.5, then -0.25 - 0.5 = -0.75; w: 0.5/1.5 then -0.25/0.75
    assert w.dtype == torch.bfloat16 and w.tolist() == [-0.25, 0.75]
    assert opt.variables[2].dtype == torch.bfloat16

    a = var([1.0, -1.0], dtype=torch.bfloat16)
    adam = slotopt.Adam(learning_rate=0.5, beta_1=0.5, beta_2=0.75)  # 0.999 would round to 1.0 in bfloat16
    adam.apply_gradients([(t(0.5, -0.5, dtype=torch.bfloat16), a)])
    # alpha = 0.5 * sqrt(0.25) / 0.5 = 0.5; m = 0.25, v = 0.0625; w -= 0.25 * 0.5 / (0.25 + eps) (eps vanishes)
    assert a.dtype == torch.bfloat16 and a.tolist() == [0.5, -0.5]


# ------------------------------------------------------------------------------------------ foreach
@pytest.mark.parametrize("make", [
    lambda fe: slotopt.Adam(learning_rate=0.1, amsgrad=True, clipnorm=1.0, use_ema=True, foreach=fe),
    lambda fe: slotopt.AdamW(learning_rate=0.1, weight_decay=0.1, global_clipnorm=0.5,
                             gradient_accumulation_steps=2, foreach=fe),
    lambda fe: slotopt.SGD(learning_rate=0.1, momentum=0.9, nesterov=True, weight_decay=0.01, foreach=fe),
], ids=["adam", "adamw", "sgd"])
def test_foreach_false_is_bit_identical_to_foreach_true(make):
    gen = torch.Generator().manual_seed(3)
    shapes = [(4, 3), (3,), (2, 2, 2)]
    inits = [torch.randn(s, generator=gen) for s in shapes]
    grads = [[torch.randn(s, generator=gen) for s in shapes] for _ in range(5)]
    results = []
    for fe in (True, False):
        variables = [slotopt.Variable(x, name=f"v{i}") for i, x in enumerate(inits)]
        opt = make(fe)
        for step_grads in grads:
            opt.apply_gradients(zip(step_grads, variables))
        results.append((variables, opt.variables))
    (va, oa), (vb, ob) = results
    assert all(torch.equal(x, y) for x, y in zip(va, vb))
    assert len(oa) == len(ob) and all(torch.equal(x, y) for x, y in zip(oa, ob))


# ------------------------------------------------------------------------------------------ every optimizer
KERAS3_NAMES = ["sgd", "adam", "adamw", "adamax", "nadam", "rmsprop", "adagrad", "adadelta", "ftrl", "lion",
                "adafactor", "lamb"]


def _resolve(name, **config):
    if name == "lamb":  # exported but not registered (as in Keras)
        cls = getattr(slotopt, "Lamb", None)
        if cls is None:
            pytest.skip("slotopt.Lamb does not exist yet")
        return cls(**config)
    try:
        return slotopt.get({"class_name": name, "config": config})
    except ValueError as err:
        if "Unknown optimizer" in str(err):
            pytest.skip(f"{name} does not exist yet")
        raise


@pytest.mark.parametrize("name", KERAS3_NAMES)
def test_sparse_embedding_model_trains_with_every_keras3_optimizer(name):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(8, 4, sparse=True), nn.Flatten(), nn.Linear(8, 1))
    ids = torch.tensor([[1, 2], [3, 1], [5, 6], [2, 2]])
    target = torch.tensor([[1.0], [-1.0], [0.5], [2.0]])
    lr = 1.0 if name == "adadelta" else 0.05
    opt = _resolve(name, learning_rate=lr)
    opt.build(model)
    untouched = model[0].weight[[0, 4, 7]].detach().clone()

    def loss_fn():
        return ((model(ids) - target) ** 2).mean()

    first = loss_fn().item()
    for _ in range(30):
        opt.zero_grad()
        loss_fn().backward()
        assert model[0].weight.grad.is_sparse
        opt.step()
    assert int(opt.iterations) == 30
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert loss_fn().item() < first
    if name not in ("adamw", "ftrl"):  # zero-gradient rows stay put (AdamW decays them, Ftrl recomputes them)
        assert torch.equal(model[0].weight[[0, 4, 7]], untouched)
