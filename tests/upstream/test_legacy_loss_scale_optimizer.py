"""tf-keras's mixed-precision LossScaleOptimizer suite (keras-team/tf-keras,
``tf_keras/mixed_precision/loss_scale_optimizer_test.py``), ported for the legacy (OptimizerV2) wrapper,
``slotopt.legacy.LossScaleOptimizer``. Each test names the upstream test it carries over; the suite's V3 variants
(the wrapper of tf.keras's new optimizers), its distribution strategies and its tf.function modes are not ported
(see ``NOT_APPLICABLE.md``)."""

from __future__ import annotations

import pytest
import torch

import slotopt
from slotopt import legacy


def sgd_lso(**kwargs):
    return legacy.LossScaleOptimizer(legacy.SGD(), **kwargs)


def test_get_scaled_loss():
    # loss_scale_optimizer_test.py: testGetScaledLoss
    opt = legacy.LossScaleOptimizer(legacy.SGD(), dynamic=False, initial_scale=2.0)
    assert float(opt.get_scaled_loss(torch.tensor(5.0))) == 10.0
    assert float(opt.get_scaled_loss(lambda: torch.tensor(5.0))()) == 10.0


def test_get_unscaled_gradients():
    # loss_scale_optimizer_test.py: testGetUnscaledGradients
    opt = legacy.LossScaleOptimizer(legacy.SGD(), dynamic=False, initial_scale=2.0)
    grads = opt.get_unscaled_gradients([torch.tensor(3.0), None, torch.tensor(-4.0)])
    assert [None if g is None else float(g) for g in grads] == [1.5, None, -2.0]


def test_get_unscaled_sparse_gradients():
    # loss_scale_optimizer_test.py: testGetUnscaledSparseGradients
    opt = legacy.LossScaleOptimizer(legacy.SGD(), dynamic=False, initial_scale=2.0)
    sparse = slotopt.IndexedSlices(torch.tensor([[4.0, 2.0]]), torch.tensor([1]), (3, 2))
    (unscaled,) = opt.get_unscaled_gradients([sparse])
    assert unscaled.values.tolist() == [[2.0, 1.0]] and unscaled.indices.tolist() == [1]


def test_fixed_loss_scale_applied_to_loss_with_minimize():
    # loss_scale_optimizer_test.py: testFixedLossScaleAppliedToLossWithMinimize (the loss is scaled and the
    # gradient unscaled: the step is the unscaled one)
    var = slotopt.Variable(torch.tensor([5.0]), name="v")
    opt = legacy.LossScaleOptimizer(legacy.SGD(2.0), dynamic=False, initial_scale=5.0)
    opt.minimize(lambda: var.sum() * 1.0, [var])
    assert var.tolist() == [3.0]


def test_dynamic_loss_scale_default_values():
    # loss_scale_optimizer_test.py: testDynamicLossScaleDefaultValues
    opt = sgd_lso()
    assert opt.initial_scale == 2**15 and opt.dynamic_growth_steps == 2000 and float(opt.loss_scale) == 2**15


def test_dynamic_update():
    # loss_scale_optimizer_test.py: testDynamicUpdate (finite steps double the scale every dynamic_growth_steps;
    # a non-finite step halves it and leaves the variable)
    var = slotopt.Variable(torch.tensor([1.0, 2.0]), name="v")
    opt = legacy.LossScaleOptimizer(legacy.SGD(1.0), initial_scale=2, dynamic_growth_steps=1)
    opt.minimize(lambda: var.sum(), [var])
    assert var.tolist() == [0.0, 1.0] and float(opt.loss_scale) == 4
    opt.minimize(lambda: var.sum() * float("nan"), [var])
    assert var.tolist() == [0.0, 1.0] and float(opt.loss_scale) == 2


def test_iterations():
    # loss_scale_optimizer_test.py: testIterations (assigned before any step, through the wrapper)
    inner = legacy.SGD(2.0)
    lso = legacy.LossScaleOptimizer(inner, dynamic=False, initial_scale=10.0)
    lso.iterations = 7
    assert int(lso.iterations) == 7 and int(inner.iterations) == 7


def test_hyper_parameters_exposed():
    # loss_scale_optimizer_test.py: testHyperParametersExposed
    inner = legacy.Adam(learning_rate=1.0, beta_1=0.5, beta_2=0.9)
    lso = legacy.LossScaleOptimizer(inner)
    assert float(lso.beta_1) == 0.5 and float(lso.lr) == 1.0 and float(lso.learning_rate) == 1.0
    lso.beta_1 = 0.25
    assert float(lso.beta_1) == 0.25 and float(inner.beta_1) == 0.25
    inner.beta_1 = 0.75
    assert float(lso.beta_1) == 0.75
    lso.lr = 2.0
    assert float(lso.lr) == float(lso.learning_rate) == float(inner.lr) == float(inner.learning_rate) == 2.0

    class MyOpt(legacy.SGD):
        def __init__(self):
            super().__init__()
            self._set_hyper("loss_scale", 123.0)

    with pytest.raises(AttributeError):
        legacy.LossScaleOptimizer(MyOpt()).loss_scale = 2.0


def test_arbitrary_attributes_not_exposed():
    # loss_scale_optimizer_test.py: testArbitraryAttributesNotExposed
    inner = legacy.SGD()
    lso = legacy.LossScaleOptimizer(inner)
    assert inner.nesterov is False
    with pytest.raises(AttributeError, match="'LossScaleOptimizer' object has no attribute 'nesterov'"):
        _ = lso.nesterov
    lso.nesterov = True
    assert lso.nesterov is True and inner.nesterov is False


@pytest.mark.parametrize("version", ["v2", "tf2_3"])
def test_get_config_dynamic(version):
    # loss_scale_optimizer_test.py: testGetConfigDynamic (v2: the wrapper's own config; tf2_3: TF 2.3's format)
    if version == "v2":
        config = legacy.LossScaleOptimizer(legacy.SGD(2.0, momentum=0.5), initial_scale=2,
                                           dynamic_growth_steps=3).get_config()
    else:
        config = {"optimizer": {"class_name": "SGD", "config": {"learning_rate": 2.0, "momentum": 0.5, "decay": 0.0,
                                                                "nesterov": False, "name": "SGD"}},
                  "loss_scale": {"class_name": "DynamicLossScale",
                                 "config": {"initial_loss_scale": 2.0, "increment_period": 3, "multiplier": 2.0}}}
    opt = legacy.LossScaleOptimizer.from_config(config)
    assert float(opt.learning_rate) == 2.0 and float(opt.inner_optimizer.momentum) == 0.5
    assert float(opt.loss_scale) == 2.0 and opt.initial_scale == 2.0 and opt.dynamic_growth_steps == 3
    assert opt.dynamic
    var = slotopt.Variable(torch.tensor([5.0]), name="v")
    opt.minimize(lambda: var.sum(), [var])
    assert var.tolist() == [3.0] and int(opt.dynamic_counter) == 1


def test_from_config_with_invalid_multiplier():
    # loss_scale_optimizer_test.py: test_from_config_with_invalid_multiplier
    config = {"optimizer": {"class_name": "SGD", "config": {"learning_rate": 2.0}},
              "loss_scale": {"class_name": "DynamicLossScale",
                             "config": {"initial_loss_scale": 2.0, "increment_period": 3, "multiplier": 4.0}}}
    with pytest.raises(ValueError, match="Cannot deserialize LossScaleOptimizer with a DynamicLossScale whose "
                                         "multiplier is not 2"):
        legacy.LossScaleOptimizer.from_config(config)


def test_serialization_with_built_in_optimizer():
    # loss_scale_optimizer_test.py: testSerializationWithBuiltInOptimizer (the legacy wrapper comes back as the
    # legacy wrapper around the legacy SGD, issue 24 item 1)
    opt = legacy.LossScaleOptimizer(legacy.SGD(2.0, momentum=0.5), initial_scale=2.0, dynamic_growth_steps=3.0)
    again = slotopt.deserialize(slotopt.serialize(opt))
    assert type(again) is legacy.LossScaleOptimizer and type(again.inner_optimizer) is legacy.SGD
    assert float(again.learning_rate) == 2.0 and float(again.inner_optimizer.momentum) == 0.5
    assert float(again.loss_scale) == 2.0 and again.dynamic_growth_steps == 3


def test_serialization_with_custom_optimizer():
    # loss_scale_optimizer_test.py: testSerializationWithCustomOptimizer
    class MySGD(legacy.SGD):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.my_attribute = 123

    opt = legacy.LossScaleOptimizer(MySGD(2.0, momentum=0.5), initial_scale=2.0, dynamic_growth_steps=3.0)
    again = slotopt.deserialize(slotopt.serialize(opt), custom_objects={"MySGD": MySGD})
    assert float(again.learning_rate) == 2.0 and float(again.inner_optimizer.momentum) == 0.5
    assert float(again.loss_scale) == 2.0 and again.dynamic_growth_steps == 3
    assert again.inner_optimizer.my_attribute == 123


def test_invalid_args_with_fixed_loss_scale():
    # loss_scale_optimizer_test.py: testInvalidArgsWithFixedLossScale
    with pytest.raises(ValueError, match='"initial_scale" must be specified if "dynamic" is False'):
        sgd_lso(dynamic=False)
    with pytest.raises(ValueError, match='"dynamic_growth_steps" must be None if "dynamic" is False, but got: 2'):
        sgd_lso(dynamic=False, initial_scale=1, dynamic_growth_steps=2)


def test_dynamic_must_be_bool():
    # loss_scale_optimizer_test.py: testDynamicMustBeBool
    with pytest.raises(TypeError, match='"dynamic" argument to LossScaleOptimizer.__init__ must be a bool, but got: '
                                        "'dynamic'"):
        legacy.LossScaleOptimizer(legacy.SGD(), "dynamic")


def test_error_when_nesting():
    # loss_scale_optimizer_test.py: testErrorWhenNesting
    with pytest.raises(TypeError, match="LossScaleOptimizer cannot wrap another LossScaleOptimizer"):
        legacy.LossScaleOptimizer(sgd_lso())


def test_error_wrapping_same_optimizer_multiple_times():
    # loss_scale_optimizer_test.py: testErrorWrappingSameOptimizerMultipleTimes
    inner = legacy.SGD()
    legacy.LossScaleOptimizer(inner)
    with pytest.raises(ValueError, match='"inner_optimizer" is already wrapped by a LossScaleOptimizer.'):
        legacy.LossScaleOptimizer(inner)


def test_error_when_wrapping_non_optimizer():
    # loss_scale_optimizer_test.py: testErrorWhenWrappingNonOptimizer
    with pytest.raises(TypeError, match='"inner_optimizer" must be an instance of '
                                        "`tf.keras.optimizers.Optimizer`, but got: 1"):
        legacy.LossScaleOptimizer(1)


def test_error_when_v2_lso_wraps_v3_optimizer():
    # loss_scale_optimizer_test.py: testErrorWhenV2LsoWrapsV3Optimizer (a Keras 3 optimizer is not an OptimizerV2)
    with pytest.raises(TypeError, match="only the classic optimizers subclassing from "
                                        "`tf.keras.optimizers.Optimizer` can be passed"):
        legacy.LossScaleOptimizer(slotopt.SGD())
