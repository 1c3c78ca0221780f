"""CompositeOptimizer: routing, validation before any change, iterations, weights, serialization."""

import numpy as np
import pytest
import torch

import slotopt


def _vars():
    k = slotopt.Variable(torch.tensor([[1.0, 2.0], [3.0, 4.0]]), name="dense/kernel")
    b = slotopt.Variable(torch.tensor([0.5, -0.5]), name="dense/bias")
    e = slotopt.Variable(torch.tensor([[1.0], [2.0], [3.0]]), name="user_embedding")
    return k, b, e


def _snapshot(*tensors):
    return [t.detach().clone() for t in tensors]


def test_routes_each_variable_to_its_optimizer():
    k, b, e = _vars()
    sgd, adam = slotopt.SGD(learning_rate=0.5), slotopt.Adam(learning_rate=0.25)
    opt = slotopt.CompositeOptimizer([(sgd, lambda: [k, b]), (adam, [e])])
    g = torch.ones(2, 2)
    opt.apply_gradients([(g, k), (torch.ones(2), b), (torch.ones(3, 1), e)])
    assert torch.equal(k, torch.tensor([[0.5, 1.5], [2.5, 3.5]]))
    assert torch.equal(b, torch.tensor([0.0, -1.0]))
    # Adam's first step moves by lr * sign(g), up to epsilon and the float32 rounding of 1 - beta_2
    np.testing.assert_allclose(e.detach().numpy()[:, 0], [0.75, 1.75, 2.75], rtol=1e-5)
    assert [int(o.iterations) for o in opt.optimizers] == [1, 1]
    assert int(opt.iterations) == 1


def test_optimizer_without_gradients_does_not_step():
    k, b, e = _vars()
    sgd, adam = slotopt.SGD(learning_rate=0.5), slotopt.Adam(learning_rate=0.25)
    opt = slotopt.CompositeOptimizer([(sgd, [k, b]), (adam, [e])])
    opt.apply_gradients([(torch.ones(2, 2), k), (None, e)])
    assert [int(o.iterations) for o in opt.optimizers] == [1, 0]
    assert torch.equal(e, torch.tensor([[1.0], [2.0], [3.0]]))


def test_variable_in_two_groups_is_rejected_before_any_update():
    k, b, e = _vars()
    opt = slotopt.CompositeOptimizer([(slotopt.SGD(learning_rate=0.5), [k, b]),
                                      (slotopt.Adam(learning_rate=0.25), [b, e])])
    before = _snapshot(k, b, e)
    with pytest.raises(ValueError, match="disjoint.*dense/bias"):
        opt.apply_gradients([(torch.ones(2, 2), k), (torch.ones(2), b)])
    assert all(torch.equal(x, y) for x, y in zip(before, (k, b, e)))
    assert [int(o.iterations) for o in opt.optimizers] == [0, 0]


def test_unowned_variable_is_rejected_before_any_update():
    k, b, e = _vars()
    opt = slotopt.CompositeOptimizer([(slotopt.SGD(learning_rate=0.5), [k])])
    before = _snapshot(k, b)
    with pytest.raises(ValueError, match="dense/bias is not handled by any optimizer"):
        opt.apply_gradients([(torch.ones(2, 2), k), (torch.ones(2), b)])
    assert all(torch.equal(x, y) for x, y in zip(before, (k, b)))


def test_bad_gradient_in_second_group_changes_nothing():
    k, b, e = _vars()
    opt = slotopt.CompositeOptimizer([(slotopt.SGD(learning_rate=0.5), [k]), (slotopt.SGD(learning_rate=0.5), [e])])
    before = _snapshot(k, e)
    with pytest.raises(ValueError, match="user_embedding"):
        opt.apply_gradients([(torch.ones(2, 2), k), (torch.ones(2, 2), e)])
    assert all(torch.equal(x, y) for x, y in zip(before, (k, e)))
    assert [int(o.iterations) for o in opt.optimizers] == [0, 0]


def test_empty_list_is_rejected():
    with pytest.raises(ValueError, match="optimizers_and_vars"):
        slotopt.CompositeOptimizer([])


def test_patterns_match_named_parameters_and_round_trip_through_config():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(5, 3), torch.nn.Linear(3, 1))
    opt = slotopt.CompositeOptimizer(
        [(slotopt.SGD(learning_rate=0.5), ["0.*"]), (slotopt.Adam(learning_rate=0.125), ["1.*"])], params=model)
    config = opt.get_config()
    assert [e["variables"] for e in config["optimizers_and_vars"]] == [["0.*"], ["1.*"]]
    clone = slotopt.CompositeOptimizer.from_config(config)
    assert [type(o).__name__ for o in clone.optimizers] == ["SGD", "Adam"]
    assert float(clone.optimizers[1].learning_rate) == 0.125
    assert clone.get_config() == {**config, "optimizers_and_vars": [
        {**e, "optimizer": {**e["optimizer"], "config": {**e["optimizer"]["config"],
                                                         "name": c.name}}}
        for e, c in zip(config["optimizers_and_vars"], clone.optimizers)]}


def test_callable_groups_are_not_serializable_and_say_how_to_fix_it():
    k, b, e = _vars()
    opt = slotopt.CompositeOptimizer([(slotopt.SGD(learning_rate=0.5), lambda: [k])])
    with pytest.raises(NotImplementedError, match="name patterns"):
        opt.get_config()


def test_weights_concatenate_in_constructor_order_and_set_weights_round_trips():
    k, b, e = _vars()
    sgd = slotopt.SGD(learning_rate=0.5, momentum=0.5)
    adam = slotopt.Adam(learning_rate=0.25)
    opt = slotopt.CompositeOptimizer([(sgd, [k, b]), (adam, [e])])
    opt.apply_gradients([(torch.ones(3, 1), e), (torch.ones(2, 2), k), (torch.ones(2), b)])
    weights = opt.get_weights()
    assert len(weights) == len(sgd.variables) + len(adam.variables)
    np.testing.assert_array_equal(weights[2], sgd.variables[2].detach().numpy())
    with pytest.raises(ValueError, match="length 1"):
        opt.set_weights(weights[:1])
    opt.set_weights([np.zeros_like(w) for w in weights])
    assert all(not np.any(w) for w in opt.get_weights())


def test_learning_rate_belongs_to_sub_optimizers():
    k, _, _ = _vars()
    opt = slotopt.CompositeOptimizer([(slotopt.SGD(learning_rate=0.5), [k])])
    with pytest.raises(AttributeError, match="sub-optimizer"):
        _ = opt.learning_rate


def test_iterations_setter_sets_every_sub_optimizer():
    k, _, e = _vars()
    opt = slotopt.CompositeOptimizer([(slotopt.SGD(learning_rate=0.5), [k]), (slotopt.SGD(learning_rate=0.5), [e])])
    opt.iterations = 7
    assert [int(o.iterations) for o in opt.optimizers] == [7, 7]
