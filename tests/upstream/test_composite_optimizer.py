"""TensorFlow Recommenders' CompositeOptimizer test suite (tensorflow/recommenders,
``tensorflow_recommenders/experimental/optimizers/composite_optimizer_test.py``), ported to
``slotopt.CompositeOptimizer`` over ``slotopt.legacy`` optimizers (the tf.keras optimizers TFRS composes).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import slotopt
from slotopt import legacy

OPTIMIZERS = {"sgd": legacy.SGD, "adam": legacy.Adam, "rmsprop": legacy.RMSprop, "adagrad": legacy.Adagrad}


@pytest.mark.parametrize("types", [("sgd", "adam"), ("rmsprop", "sgd"), ("adam", "adagrad"), ("adagrad", "rmsprop")])
def test_composite_optimizer(types):
    # composite_optimizer_test.py: CompositeOptimizerTest.test_composite_optimizer
    values = [[1.0, 2.0, 3.0], [0.5, 0.0, -2.0], [0.1, 0.0, -1.0]]
    grads = [torch.tensor(g) for g in ([0.1, 0.2, 1.0], [-0.1, 0.05, 2.0], [2.1, 0.0, 0.3])]
    var1, var2, var3 = (slotopt.Variable(torch.tensor(v), name=f"var{i + 1}") for i, v in enumerate(values))
    comp_1, comp_2 = OPTIMIZERS[types[0]](), OPTIMIZERS[types[1]]()
    composite = slotopt.CompositeOptimizer([(comp_1, lambda: [var1]), (comp_2, lambda: [var2, var3])])
    assert composite.optimizers == [comp_1, comp_2]
    optimizer1, optimizer2 = OPTIMIZERS[types[0]](), OPTIMIZERS[types[1]]()
    alone = [slotopt.Variable(torch.tensor(v), name=f"alone{i + 1}") for i, v in enumerate(values)]
    for _ in range(10):
        composite.apply_gradients(list(zip(grads, [var1, var2, var3])))
        optimizer1.apply_gradients([(grads[0], alone[0])])
        optimizer2.apply_gradients([(grads[1], alone[1]), (grads[2], alone[2])])
        for together, separate in zip([var1, var2, var3], alone):
            np.testing.assert_allclose(together.detach().numpy(), separate.detach().numpy(), rtol=1e-6, atol=1e-6)


def test_incorrect_inputs():
    # composite_optimizer_test.py: CompositeOptimizerTest.test_incorrect_inputs
    var1 = slotopt.Variable(torch.tensor([0.1, 0.2, 1.0]), name="var1")
    var2 = slotopt.Variable(torch.tensor([-5.1, 0.1, 0]), name="var2")
    var3 = slotopt.Variable(torch.tensor([-2.1, 1.3, 0 / 3]), name="var3")
    grads = [torch.tensor([0.1, 0.2, 1.0]), torch.tensor([0.5, 0.0, -2.0]), torch.tensor([-0.2, 0.0, -1.0])]
    # the same variable in two optimizers
    composite = slotopt.CompositeOptimizer([(legacy.Adam(), lambda: [var1]), (legacy.Adagrad(), lambda: [var1, var2])])
    with pytest.raises(ValueError):
        composite.apply_gradients(list(zip(grads[:2], [var1, var2])))
    # a variable (var3) in no optimizer
    composite = slotopt.CompositeOptimizer([(legacy.Adam(), lambda: [var1]), (legacy.Adagrad(), lambda: [var2])])
    with pytest.raises(ValueError):
        composite.apply_gradients(list(zip(grads, [var1, var2, var3])))


def _linear_model_and_optimizer():
    # tf.keras.experimental.LinearModel(units=10) on 5 features: zero-initialised kernel and bias.
    model = torch.nn.Linear(5, 10)
    torch.nn.init.zeros_(model.weight)
    torch.nn.init.zeros_(model.bias)
    composite = slotopt.CompositeOptimizer([(legacy.Adam(), lambda: [model.weight]),
                                            (legacy.Adagrad(), lambda: [model.bias])])
    return model, composite


def _fit(model, composite, x, y, batches):
    for b in range(batches):
        xb, yb = x[16 * b:16 * b + 16], y[16 * b:16 * b + 16]
        loss = ((model(xb) - yb) ** 2).mean()
        grads = torch.autograd.grad(loss, [model.weight, model.bias])
        composite.apply_gradients(list(zip(grads, [model.weight, model.bias])))


def test_checkpoint_save_restore():
    # composite_optimizer_test.py: CompositeOptimizerTest.test_checkpoint_save_restore_export (save/restore part;
    # tf.train.Checkpoint becomes state_dict/load_state_dict)
    rng = np.random.RandomState(42)
    x = torch.tensor(rng.normal(size=(8 * 16, 5)), dtype=torch.float32)
    y = torch.tensor(rng.normal(size=(8 * 16, 1)), dtype=torch.float32)
    model, composite = _linear_model_and_optimizer()
    _fit(model, composite, x, y, batches=8)
    assert int(composite.iterations) == 8
    assert len(composite.variables()) == 5
    model_state = {k: v.clone() for k, v in model.state_dict().items()}
    checkpoint = composite.state_dict()

    new_model, new_composite = _linear_model_and_optimizer()
    _fit(new_model, new_composite, x, y, batches=1)      # a restore that failed would leave iterations at 1
    new_model.load_state_dict(model_state)
    new_composite.load_state_dict(checkpoint)
    assert int(new_composite.iterations) == 8
    for a, b in zip(new_composite.variables(), composite.variables()):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-6, atol=1e-6)
    with torch.no_grad():
        assert torch.equal(new_model(x), model(x))
