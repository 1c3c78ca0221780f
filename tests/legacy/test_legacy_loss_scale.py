"""slotopt.legacy.LossScaleOptimizer (spec §5.2): dynamic scaling, skipped steps, delegation, config, errors."""

import re

import numpy as np
import pytest
import torch

import slotopt
from slotopt.legacy import SGD, Adam, LossScaleOptimizer, RMSprop


def _var(values, name="w"):
    return slotopt.Variable(torch.tensor(values), name=name)


def test_dynamic_scale_halves_on_overflow_with_a_floor_and_grows_after_good_steps():
    """Spec example: initial 4, growth 2, grads inf x3 then 1 x3."""
    w = _var([1.0])
    opt = LossScaleOptimizer(SGD(learning_rate=0.5), initial_scale=4.0, dynamic_growth_steps=2)
    scales, counters, iterations, values = [], [], [], []
    for g in [float("inf")] * 3 + [1.0] * 3:
        opt.apply_gradients([(torch.tensor([g]), w)])
        scales.append(float(opt.loss_scale))
        counters.append(int(opt.dynamic_counter))
        iterations.append(int(opt.iterations))
        values.append(w.item())
    assert scales == [2.0, 1.0, 1.0, 1.0, 2.0, 2.0]
    assert counters == [0, 0, 0, 1, 0, 1]
    assert iterations == [1, 2, 3, 4, 5, 6]  # skipped steps still count
    assert values == [1.0, 1.0, 1.0, 0.5, 0.0, -0.5]


def test_skipped_step_changes_no_variable_and_no_slot():
    w, b = _var([1.0, 2.0]), _var([0.5], name="b")
    inner = Adam(learning_rate=0.1)
    opt = LossScaleOptimizer(inner, initial_scale=8.0)
    opt.apply_gradients([(torch.tensor([1.0, 1.0]), w), (torch.tensor([1.0]), b)])
    before = [t.detach().clone() for t in [w, b, *inner.weights[1:]]]
    opt.apply_gradients([(torch.tensor([1.0, float("nan")]), w), (torch.tensor([1.0]), b)])
    assert all(torch.equal(x, y) for x, y in zip(before, [w, b, *inner.weights[1:]]))
    assert int(inner.iterations) == 2 and float(opt.loss_scale) == 4.0


def test_sparse_non_finite_gradient_is_detected():
    table = _var([[1.0], [2.0]], name="table")
    opt = LossScaleOptimizer(SGD(1.0), initial_scale=2.0)
    opt.apply_gradients([(slotopt.IndexedSlices(torch.tensor([[float("inf")]]), [1], (2, 1)), table)])
    assert table.flatten().tolist() == [1.0, 2.0] and float(opt.loss_scale) == 1.0


def test_growth_stops_when_the_doubled_scale_is_not_finite():
    w = _var([1.0])
    opt = LossScaleOptimizer(SGD(0.0), initial_scale=2.0**127, dynamic_growth_steps=1)
    opt.apply_gradients([(torch.tensor([1.0]), w)])
    assert float(opt.loss_scale) == 2.0**127 and int(opt.dynamic_counter) == 0


def test_minimize_scales_the_loss_and_unscales_the_gradients():
    w = _var([1.0])
    seen = []
    inner = SGD(0.5, gradient_transformers=[lambda pairs: seen.append(pairs[0][0].item()) or pairs])
    opt = LossScaleOptimizer(inner, initial_scale=1024.0)
    opt.minimize(lambda: (w * 3.0).sum(), [w])
    assert seen == [3.0] and w.item() == -0.5
    scaled = opt.get_scaled_loss(torch.tensor(2.0))
    assert scaled.item() == 2048.0
    assert opt.get_scaled_loss(lambda: torch.tensor(1.5))().item() == 1536.0
    grads = opt.get_unscaled_gradients([torch.tensor([2048.0]), None,
                                        slotopt.IndexedSlices(torch.tensor([[1024.0]]), [0], (2, 1))])
    assert grads[0].item() == 2.0 and grads[1] is None
    assert grads[2].values.item() == 1.0 and grads[2].indices.tolist() == [0]


def test_fixed_scale_never_changes_and_always_applies():
    w = _var([1.0])
    opt = LossScaleOptimizer(SGD(1.0), dynamic=False, initial_scale=16.0)
    opt.apply_gradients([(torch.tensor([0.5]), w)])
    assert float(opt.loss_scale) == 16.0 and opt.dynamic_counter is None and w.item() == 0.5
    assert opt.get_scaled_loss(torch.tensor(1.0)).item() == 16.0


def test_hyperparameters_iterations_weights_and_slots_delegate_to_the_inner_optimizer():
    w = _var([1.0, 2.0])
    inner = RMSprop(learning_rate=0.5, momentum=0.25)
    opt = LossScaleOptimizer(inner)
    assert float(opt.learning_rate) == 0.5 and float(opt.lr) == 0.5 and float(opt.momentum) == 0.25
    opt.learning_rate = 0.25
    assert float(inner.learning_rate) == 0.25
    opt.lr = 0.125
    assert float(inner.learning_rate) == 0.125
    opt.clipvalue = 1.0
    assert inner.clipvalue == 1.0
    opt.build([w])
    assert opt.weights == inner.weights and opt.variables() == inner.variables()
    assert opt.get_slot_names() == ["rms", "momentum"] and opt.get_slot(w, "rms") is inner.get_slot(w, "rms")
    opt.set_weights([np.array(5)] + [np.ones(2)] * 2)
    assert int(inner.iterations) == 5
    assert all(np.array_equal(a, b) for a, b in zip(opt.get_weights(), inner.get_weights()))
    assert opt.iterations is inner.iterations
    with pytest.raises(AttributeError):
        _ = opt.beta_1


def test_config_round_trip_and_old_format():
    opt = LossScaleOptimizer(Adam(learning_rate=0.5), initial_scale=64.0, dynamic_growth_steps=10)
    config = opt.get_config()
    assert config["dynamic"] is True and config["initial_scale"] == 64.0 and config["dynamic_growth_steps"] == 10
    assert config["inner_optimizer"]["class_name"] == "Adam"
    rebuilt = LossScaleOptimizer.from_config(config)
    assert isinstance(rebuilt.inner_optimizer, Adam) and rebuilt.get_config() == config
    old = {"optimizer": {"class_name": "SGD", "config": {"learning_rate": 0.5}},
           "loss_scale": {"class_name": "DynamicLossScale",
                          "config": {"initial_loss_scale": 8.0, "increment_period": 3, "multiplier": 2.0}}}
    rebuilt = LossScaleOptimizer.from_config(old)
    assert (rebuilt.initial_scale, rebuilt.dynamic_growth_steps) == (8.0, 3)
    fixed = LossScaleOptimizer.from_config({"optimizer": {"class_name": "sgd", "config": {}}, "loss_scale": 4.0})
    assert fixed.dynamic is False and float(fixed.loss_scale) == 4.0
    with pytest.raises(ValueError, match="Unknown optimizer: 'Mystery'"):
        LossScaleOptimizer.from_config({"inner_optimizer": {"class_name": "Mystery", "config": {}}})


@pytest.mark.parametrize("make, error, text", [
    (lambda: LossScaleOptimizer(slotopt.SGD()), TypeError, "only the classic optimizers subclassing from"),
    (lambda: LossScaleOptimizer(LossScaleOptimizer(SGD())), TypeError, "cannot wrap another LossScaleOptimizer"),
    (lambda: LossScaleOptimizer(SGD(), dynamic="yes"), TypeError, '"dynamic" argument'),
    (lambda: LossScaleOptimizer(SGD(), dynamic=False), ValueError, '"initial_scale" must be specified'),
    (lambda: LossScaleOptimizer(SGD(), dynamic=False, initial_scale=2.0, dynamic_growth_steps=3), ValueError,
     '"dynamic_growth_steps" must be None'),
    (lambda: LossScaleOptimizer(SGD(), initial_scale=-1.0), ValueError, "`initial_scale` must be a finite number"),
    (lambda: LossScaleOptimizer(SGD(), dynamic_growth_steps=0), ValueError, "`dynamic_growth_steps` must be"),
])
def test_constructor_errors(make, error, text):
    with pytest.raises(error, match=re.escape(text)):
        make()


def test_an_optimizer_can_be_wrapped_only_once():
    inner = SGD()
    LossScaleOptimizer(inner)
    with pytest.raises(ValueError, match="already wrapped by a LossScaleOptimizer"):
        LossScaleOptimizer(inner)


def test_invalid_gradients_change_neither_scale_nor_state():
    w = _var([1.0])
    opt = LossScaleOptimizer(SGD(1.0), initial_scale=4.0)
    with pytest.raises(ValueError, match="Gradient for variable w has shape"):
        opt.apply_gradients([(torch.tensor([float("inf"), 1.0]), w)])
    with pytest.raises(ValueError, match="No gradients provided for any variable"):
        opt.apply_gradients([(None, w)])
    assert float(opt.loss_scale) == 4.0 and int(opt.dynamic_counter) == 0 and int(opt.iterations) == 0
    assert w.item() == 1.0
