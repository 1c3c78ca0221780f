"""Behaviours an independent port of the upstream optimizer suites found different from the real libraries (issue
24), each pinned here: MultiOptimizer's order and its refusal of a LossScaleOptimizer, ``overwrite_with_gradient``
under the wrappers, tf-keras LossScaleOptimizer details, ``minimize`` with a loss that does not depend on the
variables, and NumPy inputs copied."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
import torch

import slotopt
from slotopt import legacy


def var(values, name="v", dtype=torch.float32):
    return slotopt.Variable(torch.tensor(values, dtype=dtype), name=name)


# ------------------------------------------------------------------------------------------ item 2 and 3
def test_multi_optimizer_lists_the_map_in_insertion_order_and_the_default_last():
    # Keras 3.15: MultiOptimizer(OptimizerMap(rmsprop, {"a": adam, "b": sgd})).optimizers == [adam, sgd, rmsprop]
    adam, sgd, rmsprop = slotopt.Adam(), slotopt.SGD(), slotopt.RMSprop()
    multi = slotopt.MultiOptimizer(slotopt.OptimizerMap(rmsprop, {"a.*": adam, "b.*": sgd, "c.*": adam}))
    assert [o is x for o, x in zip(multi.optimizers, [adam, sgd, rmsprop])] == [True] * 3
    assert len(multi.optimizers) == 3
    a, b, c = var([1.0], "a"), var([1.0], "b"), var([1.0], "z")
    multi.build([a, b, c])
    # variables follow the same order: own two, then adam's, sgd's, rmsprop's
    assert multi.variables[2:] == [*adam.variables, *sgd.variables, *rmsprop.variables]
    # a default that is also a map value is listed once, in that value's place (as Keras 3.15.1 records it,
    # tests/data/issue50/api_corner_errors.json)
    default_in_map = slotopt.MultiOptimizer(slotopt.OptimizerMap(sgd, {"a": sgd, "b": adam}))
    assert [type(o) for o in default_in_map.optimizers] == [slotopt.SGD, slotopt.Adam]


@pytest.mark.parametrize("where", ["default", "map", "assigned later", "routing function"])
def test_a_loss_scale_optimizer_cannot_be_a_sub_optimizer(where):
    lso = slotopt.LossScaleOptimizer(slotopt.SGD())
    with pytest.raises(ValueError, match="(optimizer|LossScaleOptimizer) cannot be (LossScaleOptimizer|used inside)"):
        if where == "default":
            slotopt.MultiOptimizer(slotopt.OptimizerMap(lso))
        elif where == "map":
            slotopt.MultiOptimizer(slotopt.OptimizerMap(slotopt.SGD(), {"k": lso}))
        elif where == "assigned later":
            slotopt.OptimizerMap(slotopt.SGD())["k"] = lso
        else:
            w = var([1.0], "w")
            slotopt.MultiOptimizer(lambda v: lso).apply_gradients([(torch.ones(1), w)])
    assert int(lso.iterations) == 0


# ------------------------------------------------------------------------------------------ item 4
def test_overwrite_with_gradient_under_a_loss_scale_optimizer():
    # Keras 3 LossScaleOptimizer: a flagged variable takes its gradient as it is (not divided by the scale), on a
    # finite step only; the other variables get the unscaled gradient.
    w, scale_var = var([1.0, 1.0], "w"), var([0.0, 0.0], "scale")
    scale_var.overwrite_with_gradient = True
    opt = slotopt.LossScaleOptimizer(slotopt.SGD(learning_rate=0.5), initial_scale=4.0)
    opt.apply_gradients([(torch.tensor([4.0, 8.0]), w), (torch.tensor([3.0, -4.0]), scale_var)])
    assert w.tolist() == [0.5, 0.0] and scale_var.tolist() == [3.0, -4.0]
    opt.apply_gradients([(torch.tensor([float("inf"), 0.0]), w), (torch.tensor([7.0, 7.0]), scale_var)])
    assert w.tolist() == [0.5, 0.0] and scale_var.tolist() == [3.0, -4.0]  # skipped step: nothing changes


def test_overwrite_with_gradient_skips_clipping_decay_constraints_and_unscaling():
    w = slotopt.Variable(torch.tensor([1.0, 1.0]), name="amax", constraint=lambda t: t.clamp(min=0.0))
    w.overwrite_with_gradient = True
    opt = slotopt.AdamW(learning_rate=0.1, weight_decay=0.5, clipvalue=0.1, loss_scale_factor=8.0)
    opt.apply_gradients([(torch.tensor([3.0, -4.0]), w)])
    assert w.tolist() == [3.0, -4.0] and int(opt.iterations) == 1
    # in a MultiOptimizer each sub-optimizer overwrites its own flagged variables
    k, s = var([1.0], "kernel"), var([0.0], "scale")
    s.overwrite_with_gradient = True
    multi = slotopt.MultiOptimizer(slotopt.OptimizerMap(slotopt.SGD(1.0), {"kernel": slotopt.Adam()}))
    multi.apply_gradients([(torch.tensor([2.0]), k), (torch.tensor([5.0]), s)])
    assert s.tolist() == [5.0]


def test_overwrite_with_gradient_survives_copy_and_pickle():
    w = var([1.0], "w")
    w.overwrite_with_gradient = True
    assert copy.deepcopy(w).overwrite_with_gradient and pickle.loads(pickle.dumps(w)).overwrite_with_gradient


# ------------------------------------------------------------------------------------------ item 5
def test_tf_keras_loss_scale_optimizer_details():
    # tf_keras/mixed_precision/loss_scale_optimizer_test.py: testDynamicLossScaleWithFloat16/testGetConfigDynamic
    # store dynamic_growth_steps as given; 3.0 is the step count 3.
    opt = legacy.LossScaleOptimizer(legacy.SGD(0.1), dynamic_growth_steps=3.0)
    assert opt.dynamic_growth_steps == 3 and isinstance(opt.dynamic_growth_steps, int)
    with pytest.raises(ValueError, match="dynamic_growth_steps"):
        legacy.LossScaleOptimizer(legacy.SGD(0.1), dynamic_growth_steps=2.5)
    # testSetLossScale-style: loss_scale is read-only (tf-keras raises AttributeError)
    with pytest.raises(AttributeError):
        opt.loss_scale = 2.0
    assert "loss_scale" not in opt.inner_optimizer._hyper
    # the LossScaleOptimizerV1 class name resolves (tf-keras's old serialized name)
    old = slotopt.deserialize({"module": "keras.mixed_precision", "class_name": "LossScaleOptimizerV1",
                               "config": {"optimizer": {"class_name": "SGD", "config": {"learning_rate": 0.5}},
                                          "loss_scale": 8.0}})
    assert type(old) is legacy.LossScaleOptimizer and float(old.loss_scale) == 8.0


def test_tf_keras_loss_scale_optimizer_delegates_learning_rate_to_a_property():
    class PropertyLR(legacy.SGD):
        @property
        def learning_rate(self):
            return self._get_hyper("learning_rate") * 2

        @learning_rate.setter
        def learning_rate(self, value):
            self._set_hyper("learning_rate", value)

    opt = legacy.LossScaleOptimizer(PropertyLR(0.25))
    assert float(opt.learning_rate) == pytest.approx(0.5) and float(opt.lr) == pytest.approx(0.5)
    opt.learning_rate = 0.125
    assert float(opt.inner_optimizer._get_hyper("learning_rate")) == 0.125
    plain = legacy.LossScaleOptimizer(legacy.Adam(0.1))
    plain.lr = 0.2
    assert float(plain.inner_optimizer.learning_rate) == pytest.approx(0.2)


# ------------------------------------------------------------------------------------------ item 6
def test_tf_keras_minimize_with_a_loss_that_does_not_depend_on_the_variables():
    # tf_keras/optimizers/legacy/optimizer_v2_test.py: testNoGradients / testNoGradientsForAnyVariables_Minimize
    w = var([1.0, 2.0], "w")
    for opt in (legacy.SGD(0.1), legacy.Adam(0.1)):
        with pytest.raises(ValueError, match="No gradients provided for any variable"):
            opt.minimize(lambda: torch.tensor(1.0), [w])
        with pytest.raises(ValueError, match="No gradients provided for any variable"):
            opt.minimize(torch.tensor(1.0), [w])
        assert w.tolist() == [1.0, 2.0]
        assert opt.minimize(lambda: torch.tensor(1.0), []) is None and int(opt.iterations) == 0
    with pytest.raises(ValueError, match="loss"):
        legacy.SGD(0.1).minimize(lambda: 1.0, [w])  # not a tensor: still a clear error


# ------------------------------------------------------------------------------------------ item 7
@pytest.mark.parametrize("opt", [slotopt.SGD(0.5), legacy.SGD(0.5), slotopt.v1.GradientDescentOptimizer(0.5)],
                         ids=["keras3", "legacy", "v1"])
def test_a_numpy_array_given_to_variable_is_copied(opt):
    array = np.ones((2,), dtype=np.float32)
    w = slotopt.Variable(array, name="w")
    opt.apply_gradients([(torch.ones(2), w)])
    assert w.tolist() == [0.5, 0.5] and array.tolist() == [1.0, 1.0]
    assert slotopt.Variable(np.ones(2)).dtype == torch.float64  # a float64 array keeps its dtype
