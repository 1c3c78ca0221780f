"""Every validation rule of the Keras 3 base class (spec §1.1, §1.3, §1.4, §1.8, §1.11, §1.13).

Each test checks the exception type, that the message names the argument (and the received value where there
is one), and that the variables and the optimizer state are exactly as before the failed call.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
import torch

import slotopt
from slotopt import schedules


def var(values, name="w", dtype=torch.float32):
    return slotopt.Variable(torch.tensor(values, dtype=dtype), name=name)


def t(*values, dtype=torch.float32):
    return torch.tensor(values, dtype=dtype)


class State:
    """A snapshot of model variables and optimizer state, compared bit for bit."""

    def __init__(self, opt, variables):
        self.opt, self.variables = opt, list(variables)
        self.values = [v.detach().clone() for v in self.variables]
        self.opt_values = [v.detach().clone() for v in opt.variables]
        self.paths = [v.path for v in opt.variables]
        self.built = opt.built
        self.iterations = int(opt.iterations)
        self.learning_rate = opt._learning_rate

    def assert_unchanged(self):
        assert self.opt.built == self.built
        assert int(self.opt.iterations) == self.iterations
        assert self.opt._learning_rate is self.learning_rate
        assert [v.path for v in self.opt.variables] == self.paths
        for before, now in zip(self.opt_values, self.opt.variables):
            assert torch.equal(before, now)
        for before, now in zip(self.values, self.variables):
            assert torch.equal(before, now) and before.dtype == now.dtype


def trained(make=lambda: slotopt.Adam(learning_rate=0.5), n=2):
    """An optimizer that has run one step on two variables ``a`` (shape (2,)) and ``b`` (shape (2, 2))."""
    a, b = var([1.0, -1.0], "a"), var([[0.5, 0.25], [-0.5, 1.0]], "b")
    opt = make()
    for _ in range(n):
        opt.apply_gradients([(t(0.5, -0.25), a), (torch.full((2, 2), 0.125), b)])
    return opt, a, b


# ------------------------------------------------------------------------------------------ constructor (§1.1)
@pytest.mark.parametrize("make, error, pattern", [
    (lambda: slotopt.SGD(foo=1), ValueError, r"Argument\(s\) not recognized: \{'foo': 1\}"),
    (lambda: slotopt.SGD(gradient_accumulation_steps=1), ValueError,
     r"`gradient_accumulation_steps` must be an integer >= 2. Received: gradient_accumulation_steps=1"),
    (lambda: slotopt.SGD(gradient_accumulation_steps=2.5), ValueError, r"gradient_accumulation_steps=2.5"),
    (lambda: slotopt.SGD(use_ema=True, ema_momentum=1.5), ValueError,
     r"`ema_momentum` must be in the range \[0, 1\]. Received: ema_momentum=1.5"),
    (lambda: slotopt.SGD(use_ema=True, ema_momentum=-0.5), ValueError, r"ema_momentum=-0.5"),
    (lambda: slotopt.SGD(use_ema=True, ema_overwrite_frequency=-1), ValueError,
     r"`ema_overwrite_frequency` must be an integer >= 1 or None. Received: ema_overwrite_frequency=-1"),
    (lambda: slotopt.SGD(use_ema=True, ema_overwrite_frequency=2.5), ValueError, r"ema_overwrite_frequency=2.5"),
    (lambda: slotopt.SGD(clipnorm=1.0, clipvalue=0.5), ValueError,
     r"Only one of `clipnorm`, `clipvalue` and `global_clipnorm` can be set. "
     r"Received: clipnorm=1.0, clipvalue=0.5, global_clipnorm=None"),
    (lambda: slotopt.Adam(clipnorm=1.0, global_clipnorm=1.0), ValueError, r"global_clipnorm=1.0"),
    (lambda: slotopt.SGD(learning_rate=1), ValueError,
     r"Argument `learning_rate` should be float, or an instance of LearningRateSchedule, or a callable "
     r"\(that takes in the current iteration value and returns the corresponding learning rate value\)\. "
     r"Received instead: learning_rate=1"),
    (lambda: slotopt.SGD(learning_rate="0.1"), ValueError, r"learning_rate=0.1"),
    (lambda: slotopt.SGD(learning_rate=-0.5), ValueError, r"`learning_rate`.*learning_rate=-0.5"),
    (lambda: slotopt.SGD(learning_rate=float("nan")), ValueError, r"`learning_rate`.*learning_rate=nan"),
    (lambda: slotopt.SGD(weight_decay=-0.1), ValueError, r"`weight_decay`.*weight_decay=-0.1"),
    (lambda: slotopt.AdamW(weight_decay=-0.5), ValueError, r"`weight_decay`.*weight_decay=-0.5"),
    (lambda: slotopt.AdamW(weight_decay=None), ValueError,
     r"Argument `weight_decay` must be a float. Received: weight_decay=None"),
    (lambda: slotopt.SGD(loss_scale_factor=0.0), ValueError, r"`loss_scale_factor`.*loss_scale_factor=0.0"),
    (lambda: slotopt.SGD(momentum=0), ValueError, r"`momentum` must be a float between \[0, 1\]"),
    (lambda: slotopt.SGD(momentum=1.5), ValueError, r"momentum=1.5"),
    (lambda: slotopt.Adam(beta_1=1.5), ValueError, r"`beta_1`.*beta_1=1.5"),
    (lambda: slotopt.Adam(epsilon=-1.0), ValueError, r"`epsilon`.*epsilon=-1.0"),
])
def test_constructor_rejects_bad_arguments(make, error, pattern):
    with pytest.raises(error, match=pattern):
        make()


def test_ema_arguments_are_only_checked_with_use_ema():
    opt = slotopt.SGD(ema_momentum=1.5, ema_overwrite_frequency=-1)
    assert opt.ema_momentum == 1.5 and not opt.use_ema


def test_falsy_accumulation_steps_and_overwrite_frequency_are_accepted():
    assert slotopt.SGD(gradient_accumulation_steps=0).gradient_accumulation_steps == 0
    assert slotopt.SGD(use_ema=True, ema_overwrite_frequency=0).ema_overwrite_frequency == 0


def test_decay_argument_warns_and_is_ignored():
    with pytest.warns(UserWarning, match="Argument `decay` is no longer supported and will be ignored."):
        opt = slotopt.SGD(learning_rate=0.5, decay=0.1)
    w = var([1.0])
    opt.apply_gradients([(t(1.0), w)])
    assert w.item() == 0.5
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        slotopt.SGD(decay=None)


# ------------------------------------------------------------------------------------------ learning rate setter (§1.3)
@pytest.mark.parametrize("value, error, pattern", [
    ("abc", TypeError, r"`learning_rate`.*learning_rate='abc'"),
    (None, TypeError, r"`learning_rate`.*learning_rate=None"),
    (True, TypeError, r"`learning_rate`.*learning_rate=True"),
    ([0.5], TypeError, r"`learning_rate`.*learning_rate=\[0.5\]"),
    (-1.0, ValueError, r"`learning_rate`.*learning_rate=-1.0"),
    (float("inf"), ValueError, r"`learning_rate`.*learning_rate=inf"),
])
def test_learning_rate_setter_rejects_bad_values(value, error, pattern):
    opt, a, b = trained()
    state = State(opt, [a, b])
    with pytest.raises(error, match=pattern):
        opt.learning_rate = value
    state.assert_unchanged()


def test_learning_rate_setter_on_schedule_optimizer_raises_type_error():
    opt, a, b = trained(lambda: slotopt.Adam(learning_rate=schedules.ExponentialDecay(0.5, 2, 0.5)))
    state = State(opt, [a, b])
    with pytest.raises(TypeError, match=r"hence its learning rate is not settable.*float `learning_rate` argument"):
        opt.learning_rate = 0.25
    state.assert_unchanged()


def test_learning_rate_setter_accepts_ints_and_scalar_tensors():
    opt = slotopt.SGD(learning_rate=0.5)
    opt.learning_rate = 1
    assert opt.learning_rate.item() == 1.0
    opt.learning_rate = torch.tensor(0.25)
    assert opt.learning_rate.item() == 0.25


# ------------------------------------------------------------------------------------------ apply (§1.4)
def test_apply_without_variables_before_build():
    opt = slotopt.SGD()
    state = State(opt, [])
    with pytest.raises(ValueError, match=r"When passing `grads` without `variables`, the optimizer must already be "
                                         r"built on a list of variables. Call `optimizer.build"):
        opt.apply([t(1.0)])
    state.assert_unchanged()


def test_apply_without_variables_with_wrong_gradient_count():
    opt, a, b = trained()
    state = State(opt, [a, b])
    with pytest.raises(ValueError, match=r"the gradients must match `optimizer.variables` one-to-on. Received a list "
                                         r"of 1 gradients, but the optimizer is tracking 2 trainable variables."):
        opt.apply([t(1.0, 1.0)])
    state.assert_unchanged()


def test_apply_with_mismatched_gradient_and_variable_counts():
    opt, a, b = trained()
    state = State(opt, [a, b])
    with pytest.raises(ValueError, match=r"Received 1 gradients for 2 variables"):
        opt.apply([t(1.0, 1.0)], [a, b])
    state.assert_unchanged()


def test_apply_with_unknown_variable_after_build():
    opt, a, b = trained()
    other = var([1.0, 2.0], "other")
    state = State(opt, [a, b, other])
    with pytest.raises(ValueError, match=r"Unknown variable: other. This optimizer can only be called for the "
                                         r"variables it was originally built with."):
        opt.apply_gradients([(t(1.0, 1.0), a), (t(1.0, 1.0), other)])
    state.assert_unchanged()


@pytest.mark.parametrize("built", [False, True])
def test_all_none_gradients(built):
    if built:
        opt, a, b = trained()
    else:
        opt, a, b = slotopt.Adam(), var([1.0], "a"), var([2.0], "b")
    state = State(opt, [a, b])
    with pytest.raises(ValueError, match=r"No gradients provided for any variable."):
        opt.apply_gradients([(None, a), (None, b)])
    state.assert_unchanged()


def test_some_none_gradients_warn_with_the_variable_names():
    opt, a, b = trained()
    with pytest.warns(UserWarning, match=r"Gradients do not exist for variables \['b'\] when minimizing the loss"):
        opt.apply_gradients([(t(0.5, 0.5), a), (None, b)])
    assert int(opt.iterations) == 3


def test_empty_gradient_list_is_a_no_op():
    opt, a, b = trained()
    state = State(opt, [a, b])
    opt.apply([], [])
    opt.apply_gradients([])
    state.assert_unchanged()


@pytest.mark.parametrize("built", [False, True])
def test_wrong_gradient_shape_changes_nothing(built):
    if built:
        opt, a, b = trained()
    else:
        opt, a, b = slotopt.Adam(), var([1.0, -1.0], "a"), var([[0.5, 0.25], [-0.5, 1.0]], "b")
    state = State(opt, [a, b])
    with pytest.raises(ValueError, match=r"Gradient for variable b has shape \(4,\), which does not match the "
                                         r"variable's shape \(2, 2\)"):
        opt.apply_gradients([(t(1.0, 1.0), a), (t(1.0, 1.0, 1.0, 1.0), b)])
    state.assert_unchanged()


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
def test_integer_gradient_changes_nothing(dtype):
    opt, a, b = trained()
    state = State(opt, [a, b])
    with pytest.raises(ValueError, match=rf"Gradient for variable b must be a floating-point tensor. "
                                         rf"Received: dtype={re.escape(str(dtype))}"):
        opt.apply_gradients([(t(1.0, 1.0), a), (torch.ones((2, 2), dtype=dtype), b)])
    state.assert_unchanged()


def test_non_tensor_gradient_changes_nothing():
    opt, a, b = trained()
    state = State(opt, [a, b])
    with pytest.raises(TypeError, match=r"Gradient for variable a must be a tensor, an IndexedSlices or None. "
                                        r"Received: 'abc'"):
        opt.apply_gradients([("abc", a), (torch.ones(2, 2), b)])
    state.assert_unchanged()


def test_integer_variable_is_rejected():
    opt = slotopt.SGD()
    counter = slotopt.Variable(torch.tensor([1, 2]), name="counter", trainable=False)
    state = State(opt, [counter])
    with pytest.raises(ValueError, match=r"Variable counter has dtype torch.int64"):
        opt.apply_gradients([(t(1.0, 1.0), counter)])
    state.assert_unchanged()


def test_sparse_gradient_with_out_of_range_index_changes_nothing():
    opt, a, b = trained()
    state = State(opt, [a, b])
    g = slotopt.IndexedSlices(torch.ones(2, 2), torch.tensor([1, 2]), (2, 2))
    with pytest.raises(ValueError, match=r"Sparse gradient indices for variable b must be in \[0, 2\). "
                                         r"Received: indices=\[1, 2\]"):
        opt.apply_gradients([(t(1.0, 1.0), a), (g, b)])
    state.assert_unchanged()


def test_sparse_gradient_with_wrong_row_shape_changes_nothing():
    opt, a, b = trained()
    state = State(opt, [a, b])
    g = slotopt.IndexedSlices(torch.ones(1, 3), torch.tensor([0]), (2, 3))
    with pytest.raises(ValueError, match=r"Sparse gradient rows of shape \(3,\) do not fit variable b of shape "
                                         r"\(2, 2\)"):
        opt.apply_gradients([(t(1.0, 1.0), a), (g, b)])
    state.assert_unchanged()


def test_failed_first_call_leaves_the_optimizer_unbuilt_and_usable():
    opt = slotopt.Adam(learning_rate=0.5)
    a = var([1.0, -1.0], "a")
    with pytest.raises(ValueError):
        opt.apply_gradients([(t(1.0), a)])
    assert not opt.built and len(opt.variables) == 2
    opt.apply_gradients([(t(0.5, 0.5), a)])
    assert int(opt.iterations) == 1


# ------------------------------------------------------------------------------------------ EMA finalize (§1.8)
def test_finalize_variable_values_with_wrong_length():
    opt, a, b = trained(lambda: slotopt.SGD(learning_rate=0.5, use_ema=True))
    state = State(opt, [a, b])
    with pytest.raises(ValueError, match=r"The length of model variables \(1\) to override does not match the length "
                                         r"of model variables stored in the optimizer \(2\)"):
        opt.finalize_variable_values([a])
    state.assert_unchanged()


# ------------------------------------------------------------------------------------------ stateless_apply (§1.11)
def test_stateless_apply_before_build():
    opt = slotopt.Adam()
    state = State(opt, [])
    with pytest.raises(ValueError, match=r"To call `stateless_apply`, Adam must be built \(i.e. its variables must "
                                         r"have been created\)"):
        opt.stateless_apply([], [t(1.0)], [t(1.0)])
    state.assert_unchanged()


def test_stateless_apply_with_wrong_optimizer_variable_count():
    opt, a, b = trained()
    state = State(opt, [a, b])
    with pytest.raises(ValueError, match=r"Argument `optimizer_variables` must be a list of tensors corresponding "
                                         r"1:1 to Adam\(\).variables. Received list with length 3, but expected 6"):
        opt.stateless_apply([v.detach() for v in opt.variables[:3]], [t(1.0, 1.0), torch.ones(2, 2)],
                            [a.detach(), b.detach()])
    state.assert_unchanged()


def test_stateless_apply_with_wrong_trainable_variable_count():
    opt, a, b = trained()
    state = State(opt, [a, b])
    with pytest.raises(ValueError, match=r"Argument `trainable_variables`.*Received list with length 1, but "
                                         r"expected 2"):
        opt.stateless_apply([v.detach() for v in opt.variables], [t(1.0, 1.0), torch.ones(2, 2)], [a.detach()])
    state.assert_unchanged()


def test_stateless_apply_with_bad_gradient_restores_everything():
    opt, a, b = trained()
    state = State(opt, [a, b])
    given = [torch.zeros_like(v) for v in opt.variables]
    with pytest.raises(ValueError, match=r"Gradient for variable b has shape"):
        opt.stateless_apply(given, [t(1.0, 1.0), t(1.0)], [torch.zeros(2), torch.zeros(2, 2)])
    state.assert_unchanged()
    assert all(not g.any() for g in given)


# ------------------------------------------------------------------------------------------ weights I/O (§1.13)
def test_set_weights_with_wrong_shape():
    opt, a, b = trained()
    state = State(opt, [a, b])
    weights = opt.get_weights()
    weights[0] = np.array(5)
    weights[3] = np.zeros(3, np.float32)
    with pytest.raises(ValueError, match=r"Optimizer variable 3 \(adam\w*/a_velocity\) has shape \(2,\) not "
                                         r"compatible with provided weight shape \(3,\)"):
        opt.set_weights(weights)
    state.assert_unchanged()


def test_set_weights_with_wrong_length():
    opt, a, b = trained()
    state = State(opt, [a, b])
    with pytest.raises(ValueError, match=r"with a weight list of length 2, but the optimizer was expecting 6 "
                                         r"weights"):
        opt.set_weights(opt.get_weights()[:2])
    state.assert_unchanged()


def test_load_own_variables_with_wrong_shape():
    opt, a, b = trained()
    store = {}
    opt.save_own_variables(store)
    store["4"] = np.zeros((3, 3), np.float32)
    store["0"] = np.array(99)
    other, c, d = trained()
    state = State(other, [c, d])
    with pytest.raises(ValueError, match=r"Optimizer variable 4 .*b_momentum.* has shape \(2, 2\) not compatible"):
        other.load_own_variables(store)
    state.assert_unchanged()


def test_get_weights_returns_copies():
    opt, a, b = trained()
    weights = opt.get_weights()
    weights[2][:] = 42.0
    assert not (opt.variables[2] == 42.0).any()
    store = {}
    opt.save_own_variables(store)
    opt.apply_gradients([(t(1.0, 1.0), a), (torch.ones(2, 2), b)])
    assert int(store["0"]) == 2


def test_custom_optimizer_must_call_super_init_first():
    class Forgetful(slotopt.Optimizer):
        def __init__(self):
            self.factor = 0.5
            super().__init__(learning_rate=0.5)

    with pytest.raises(RuntimeError, match=r"In optimizer 'Forgetful', you forgot to call `super\(\).__init__\(\)` "
                                           r"as the first statement in the `__init__\(\)` method. Go add it!"):
        Forgetful()


def test_constraint_on_a_sparse_gradient_raises_before_anything_changes():
    so = slotopt
    table = so.Variable(torch.ones(4, 2), name="table", constraint=lambda v: v.clamp(max=0.5))
    bias = so.Variable(torch.ones(2), name="bias")
    opt = so.Adam(learning_rate=0.1)
    opt.build([table, bias])
    before = [v.detach().clone() for v in [table, bias, *opt.variables]]
    grad = so.IndexedSlices(torch.ones(1, 2), torch.tensor([1]), (4, 2))
    with pytest.raises(RuntimeError, match="constraint function on a sparse variable"):
        opt.apply_gradients([(torch.ones(2), bias), (grad, table)])
    after = [v.detach() for v in [table, bias, *opt.variables]]
    assert all(torch.equal(a, b) for a, b in zip(before, after))
