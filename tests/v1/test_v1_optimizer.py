"""TF1 base-class behaviour (tf1_optimizers.md §1): errors, slots, variables(), global_step, gradients, hooks."""

import types

import numpy as np
import pytest
import torch
from torch import nn

import slotopt
from slotopt import IndexedSlices
from slotopt.engine import gradients
from slotopt.v1 import (
    AdadeltaOptimizer,
    AdagradDAOptimizer,
    AdagradOptimizer,
    AdamOptimizer,
    FtrlOptimizer,
    GradientDescentOptimizer,
    InvalidArgumentError,
    MomentumOptimizer,
    Optimizer,
    ProximalAdagradOptimizer,
    ProximalGradientDescentOptimizer,
    RMSPropOptimizer,
)

F64 = torch.float64


def f32(x):
    return float(np.float32(x))


def var(values, name="w", dtype=F64, **kwargs):
    return slotopt.Variable(torch.tensor(values, dtype=dtype), name=name, **kwargs)


def int64_step(value=0):
    return slotopt.Variable(value, name="global_step", dtype=torch.int64)


def snapshot(*tensors):
    return [t.detach().clone() for t in tensors]


def assert_unchanged(before, *tensors):
    for b, t in zip(before, tensors):
        assert torch.equal(b, t.detach())


# ------------------------------------------------------------------------------------------ constructor
def test_gate_constants_and_name():
    assert (Optimizer.GATE_NONE, Optimizer.GATE_OP, Optimizer.GATE_GRAPH) == (0, 1, 2)
    assert (slotopt.v1.GATE_NONE, slotopt.v1.GATE_OP, slotopt.v1.GATE_GRAPH) == (0, 1, 2)
    assert GradientDescentOptimizer(0.1).get_name() == "GradientDescent"
    assert AdamOptimizer(name="my_adam").get_name() == "my_adam"


@pytest.mark.parametrize("name", ["", None])
def test_empty_name_is_rejected(name):
    with pytest.raises(ValueError, match="^Must specify the optimizer name$"):
        Optimizer(False, name)
    with pytest.raises(ValueError, match="^Must specify the optimizer name$"):
        GradientDescentOptimizer(0.1, name=name)


def test_learning_rate_is_required_where_tf1_requires_it():
    for cls in (GradientDescentOptimizer, MomentumOptimizer, AdagradOptimizer, RMSPropOptimizer, FtrlOptimizer):
        with pytest.raises(TypeError, match="learning_rate"):
            cls()
    assert AdamOptimizer()._hyper["learning_rate"] == 0.001
    assert AdadeltaOptimizer()._hyper["learning_rate"] == 0.001


@pytest.mark.parametrize("make", [
    lambda name: AdagradOptimizer(0.1, initial_accumulator_value=0.0, name=name),
    lambda name: ProximalAdagradOptimizer(0.1, initial_accumulator_value=-1.0, name=name),
])
def test_adagrad_accumulator_must_be_positive_checked_before_the_name(make):
    with pytest.raises(ValueError, match="^initial_accumulator_value must be positive: "):
        make("")  # the accumulator check runs before the base class's name check


def test_adagrad_da_initial_value_and_global_step():
    with pytest.raises(ValueError, match="^initial_gradient_squared_accumulator_value must be positive: 0.0$"):
        AdagradDAOptimizer(0.1, int64_step(), 0.0)
    with pytest.raises(InvalidArgumentError, match="global_step.*int64.*int32"):
        AdagradDAOptimizer(0.1, slotopt.Variable(0, dtype=torch.int32))
    with pytest.raises(InvalidArgumentError, match="global_step.*int64.*but is a int32 tensor"):
        AdagradDAOptimizer(0.1, 5)


@pytest.mark.parametrize("kwargs, message", [
    ({"initial_accumulator_value": -1.0}, "initial_accumulator_value -1.000000 needs to be positive or zero"),
    ({"learning_rate_power": 0.5}, "learning_rate_power 0.500000 needs to be negative or zero"),
    ({"l1_regularization_strength": -0.5}, "l1_regularization_strength -0.500000 needs to be positive or zero"),
    ({"l2_regularization_strength": -2}, "l2_regularization_strength -2.000000 needs to be positive or zero"),
    ({"l2_shrinkage_regularization_strength": -1.0},
     "l2_shrinkage_regularization_strength -1.000000 needs to be positive or zero"),
])
def test_ftrl_validation_messages(kwargs, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        FtrlOptimizer(0.1, **kwargs)
    with pytest.raises(ValueError, match="^Must specify the optimizer name$"):
        FtrlOptimizer(0.1, name="", **kwargs)  # Ftrl checks the name first


def test_ftrl_validation_order_is_tf1s():
    with pytest.raises(ValueError, match="^initial_accumulator_value"):
        FtrlOptimizer(0.1, learning_rate_power=1.0, initial_accumulator_value=-1.0)


@pytest.mark.parametrize("make, arg", [
    (lambda: FtrlOptimizer(lambda: 0.1), "learning_rate"),
    (lambda: ProximalGradientDescentOptimizer(lambda: 0.1), "learning_rate"),
    (lambda: ProximalAdagradOptimizer(0.1, l1_regularization_strength=lambda: 0.1), "l1_regularization_strength"),
    (lambda: AdagradDAOptimizer(lambda: 0.1, int64_step()), "learning_rate"),
])
def test_callables_are_rejected_where_tf1_does_not_call_them(make, arg):
    with pytest.raises(ValueError, match=r"^Attempt to convert a value \(<function .*\) with an unsupported type "
                                         rf"\(<class 'function'>\) to a Tensor\. Argument `{arg}`"):
        make()


def test_bad_hyperparameter_types_are_rejected_at_construction():
    with pytest.raises(TypeError, match="`momentum`.*'fast'"):
        MomentumOptimizer(0.1, "fast")
    with pytest.raises(ValueError, match="`learning_rate` must be a scalar"):
        GradientDescentOptimizer(torch.ones(2))


# ------------------------------------------------------------------------------------------ apply_gradients errors
def test_no_variables_provided():
    opt = GradientDescentOptimizer(0.1)
    with pytest.raises(ValueError, match=r"^No variables provided\.$"):
        opt.apply_gradients([])
    with pytest.raises(ValueError, match=r"^No variables provided\.$"):
        opt.apply_gradients(iter(()))


def test_no_gradients_for_any_variable_names_every_variable_and_changes_nothing():
    w, b = var([1.0], "w"), var([2.0], "b")
    step = int64_step()
    opt = AdamOptimizer(0.1)
    with pytest.raises(ValueError, match=r"^No gradients provided for any variable: \[") as info:
        opt.apply_gradients([(None, w), (None, b)], global_step=step)
    assert str(info.value) == f"No gradients provided for any variable: {[str(w), str(b)]}."
    assert int(step) == 0 and opt.variables() == [] and opt.get_slot_names() == []


def test_gradient_type_errors():
    w = var([1.0, 2.0])
    before = snapshot(w)
    opt = MomentumOptimizer(0.1, 0.9)
    with pytest.raises(TypeError, match=r"^Gradient must be convertible to a Tensor or IndexedSlices, or None: abc$"):
        opt.apply_gradients([("abc", w)])
    with pytest.raises(TypeError, match=r"^Gradient must be convertible to a Tensor or IndexedSlices, or None: <object"):
        opt.apply_gradients([(object(), w)])
    with pytest.raises(ValueError, match=r"Gradient for variable w has shape \(3,\)"):
        opt.apply_gradients([(torch.ones(3, dtype=F64), w)])
    assert_unchanged(before, w)
    assert opt.get_slot_names() == []


def test_numbers_and_lists_convert_to_gradients():
    w = var([1.0, 2.0])
    GradientDescentOptimizer(0.5).apply_gradients([([1.0, 2.0], w)])
    assert w.tolist() == [1.0 - 1.0 * f32(0.5), 2.0 - 2.0 * f32(0.5)]


def test_unsupported_variables():
    opt = GradientDescentOptimizer(0.1)
    with pytest.raises(NotImplementedError) as info:
        opt.apply_gradients([(torch.ones(2), [1.0, 2.0])])
    assert info.value.args[0] == "Trying to optimize unsupported type "
    w = var([1.0, 2.0])
    computed = w * 2
    with pytest.raises(NotImplementedError) as info:
        opt.apply_gradients([(torch.ones(2, dtype=F64), w), (torch.ones(2, dtype=F64), computed)])
    assert info.value.args == ("Trying to update a Tensor ", computed)
    assert w.tolist() == [1.0, 2.0]  # validation happens before the first update


def test_integer_variables_with_a_gradient_are_invalid():
    counter = slotopt.Variable(torch.tensor([1, 2]), name="counter", trainable=False)
    with pytest.raises(ValueError, match=r"^Invalid type torch.int64 for counter, expected: \[torch.float32"):
        GradientDescentOptimizer(0.1).apply_gradients([(torch.ones(2), counter)])
    w = var([1.0])
    GradientDescentOptimizer(0.5).apply_gradients([(None, counter), (torch.ones(1, dtype=F64), w)])
    assert w.tolist() == [0.5] and counter.tolist() == [1, 2]


def test_unsupported_dtype_for_float_only_kernels():
    w = var([1.0], dtype=torch.float16)
    with pytest.raises(TypeError, match=r"ProximalGradientDescentOptimizer supports variables of dtype .*float16"):
        ProximalGradientDescentOptimizer(0.1).apply_gradients([(torch.ones(1, dtype=torch.float16), w)])
    assert w.tolist() == [1.0]


@pytest.mark.parametrize("bad", [3, torch.zeros(()), torch.zeros(2, dtype=torch.int64), "step"])
def test_global_step_must_be_an_integer_scalar_tensor(bad):
    w = var([1.0])
    opt = AdamOptimizer(0.1)
    with pytest.raises(TypeError, match="Argument `global_step` must be an integer scalar tensor"):
        opt.apply_gradients([(torch.ones(1, dtype=F64), w)], global_step=bad)
    assert w.tolist() == [1.0] and opt.variables() == []


# ------------------------------------------------------------------------------------------ constraints
def test_constraint_runs_after_the_dense_update():
    w = var([1.0, -3.0], constraint=lambda v: v.clamp(-1.0, 0.5))
    GradientDescentOptimizer(0.5).apply_gradients([(torch.tensor([-1.0, -1.0], dtype=F64), w)])
    # update first (1.5, -2.5), then the clip
    assert w.tolist() == [0.5, -1.0]


def test_sparse_gradient_on_constrained_variable_raises_before_anything_changes():
    w = var([[1.0], [2.0]], "w", constraint=lambda v: v)
    other = var([5.0], "other")
    step = int64_step()
    opt = MomentumOptimizer(0.1, 0.9)
    before = snapshot(w, other)
    grad = IndexedSlices(torch.ones(1, 1, dtype=F64), torch.tensor([0]), (2, 1))
    with pytest.raises(RuntimeError, match=r"^Cannot use a constraint function on a sparse variable\.$"):
        opt.apply_gradients([(torch.ones(1, dtype=F64), other), (grad, w)], global_step=step)
    assert_unchanged(before, w, other)
    assert int(step) == 0 and opt.get_slot_names() == [] and opt.get_slot(other, "momentum") is None


def test_same_variable_twice_is_updated_in_order_with_its_constraint():
    w = var([0.0], constraint=lambda v: v.clamp(max=1.0))
    GradientDescentOptimizer(1.0).apply_gradients([(torch.tensor([-3.0], dtype=F64), w),
                                                   (torch.tensor([1.0], dtype=F64), w)])
    assert w.tolist() == [0.0]  # 3 -> clipped to 1 -> 1 - 1


# ------------------------------------------------------------------------------------------ global_step
@pytest.mark.parametrize("make_step", [lambda: torch.zeros((), dtype=torch.int64), int64_step,
                                       lambda: slotopt.Variable(0, dtype=torch.int32)])
def test_global_step_counts_apply_gradients_calls(make_step):
    step = make_step()
    w = var([1.0, 2.0])
    opt = AdamOptimizer(0.1)
    for k in range(3):
        assert opt.apply_gradients([(torch.ones(2, dtype=F64), w)], global_step=step) is None
        assert int(step) == k + 1
    opt.apply_gradients([(torch.ones(2, dtype=F64), w)])
    assert int(step) == 3


def test_global_step_is_incremented_after_finish():
    seen = []

    class Recorder(GradientDescentOptimizer):
        def _finish(self, update_ops, name_scope):
            seen.append((int(step), self._hyper["learning_rate"]))

    step = int64_step(7)
    Recorder(0.5).apply_gradients([(torch.ones(1, dtype=F64), var([1.0]))], global_step=step)
    assert seen == [(7, 0.5)] and int(step) == 8


# ------------------------------------------------------------------------------------------ slots and variables
def test_get_slot_and_slot_names():
    w, unused = var([1.0, 2.0], "w"), var([3.0], "unused")
    opt = RMSPropOptimizer(0.1)
    assert opt.get_slot_names() == [] and opt.get_slot(w, "rms") is None
    opt.apply_gradients([(torch.ones(2, dtype=F64), w), (None, unused)])
    assert opt.get_slot_names() == ["momentum", "rms"]
    assert opt.get_slot(w, "rms").shape == w.shape and opt.get_slot(w, "rms").dtype == F64
    assert opt.get_slot(w, "nope") is None
    assert opt.get_slot(unused, "rms") is None  # only variables with a gradient get slots
    centered = RMSPropOptimizer(0.1, centered=True)
    centered.apply_gradients([(torch.ones(2, dtype=F64), w)])
    assert centered.get_slot_names() == ["mg", "momentum", "rms"]


def test_slots_appear_when_a_variable_first_gets_a_gradient():
    a, b = var([1.0], "a"), var([1.0], "b")
    opt = MomentumOptimizer(0.5, 0.5)
    opt.apply_gradients([(torch.ones(1, dtype=F64), a), (None, b)])
    assert opt.get_slot(b, "momentum") is None
    opt.apply_gradients([(torch.ones(1, dtype=F64), a), (torch.ones(1, dtype=F64), b)])
    assert opt.get_slot(b, "momentum").tolist() == [1.0]
    assert opt.get_slot(a, "momentum").tolist() == [1.5]


def test_adam_variables_are_sorted_by_name_and_beta_powers_are_float32():
    x, a_y = var([1.0], "x"), var([1.0], "a_y")
    opt = AdamOptimizer(0.1)
    opt.apply_gradients([(torch.ones(1, dtype=F64), x), (torch.ones(1, dtype=F64), a_y)])
    assert [v.name for v in opt.variables()] == ["a_y/Adam", "a_y/Adam_1", "beta1_power", "beta2_power", "x/Adam",
                                                "x/Adam_1"]
    b1p, b2p = opt._get_beta_accumulators()
    assert b1p.dtype == torch.float32 and b2p.dtype == torch.float32
    assert float(b1p) == 0.809999942779541  # float32(⟦0.9⟧·⟦0.9⟧) after one call
    opt.apply_gradients([(torch.ones(1, dtype=F64), x)])
    assert float(b1p) == float(np.float32(0.809999942779541) * np.float32(0.9)) == 0.7289999127388
    assert opt.get_slot(x, "m") is opt.variables()[4]


def test_adam_beta_power_dtype_follows_beta():
    opt = AdamOptimizer(0.1, beta1=np.float64(0.9), beta2=torch.tensor(0.5, dtype=F64))
    opt.apply_gradients([(torch.ones(1, dtype=F64), var([1.0]))])
    b1p, b2p = opt._get_beta_accumulators()
    assert b1p.dtype == F64 and float(b1p) == 0.9 * 0.9 and float(b2p) == 0.25


def test_adam_bias_correction_counts_calls_not_updates():
    """A variable that first gets a gradient in call 2 is corrected with t = 2 (beta powers are shared)."""
    a, b = var([1.0], "a"), var([1.0], "b")
    opt = AdamOptimizer(0.1)
    opt.apply_gradients([(torch.ones(1, dtype=F64), a)])
    opt.apply_gradients([(torch.ones(1, dtype=F64), a), (torch.tensor([0.5], dtype=F64), b)])
    lr, b1, b2, eps = f32(0.1), f32(0.9), f32(0.999), f32(1e-8)
    b1p, b2p = float(np.float32(0.9) * np.float32(0.9)), float(np.float32(0.999) * np.float32(0.999))
    alpha = (lr * np.sqrt(1 - b2p)) / (1 - b1p)
    m = 0.0 + (0.5 - 0.0) * (1 - b1)
    v = 0.0 + (0.5 * 0.5 - 0.0) * (1 - b2)
    assert b.item() == 1.0 - (m * alpha) / (np.sqrt(v) + eps)


def test_non_slot_namescope_and_ftrl_slot_names():
    opt = AdamOptimizer(0.1, name="Opt", use_own_namescope_for_non_slot_vars=True)
    opt.apply_gradients([(torch.ones(1, dtype=F64), var([1.0]))])
    assert [v.name for v in opt.variables()] == ["Opt/beta1_power", "Opt/beta2_power", "w/Opt", "w/Opt_1"]
    w = var([1.0])
    ftrl = FtrlOptimizer(0.1, accum_name="acc", linear_name="lin")
    ftrl.apply_gradients([(torch.ones(1, dtype=F64), w)])
    assert [v.name for v in ftrl.variables()] == ["w/acc", "w/lin"]
    assert ftrl.get_slot_names() == ["accum", "linear"]


def test_unnamed_tensors_get_tf_style_names():
    a, b = torch.ones(2, dtype=F64), torch.ones(2, dtype=F64)
    opt = AdagradOptimizer(0.1)
    opt.apply_gradients([(torch.ones(2, dtype=F64), a), (torch.ones(2, dtype=F64), b)])
    assert [v.name for v in opt.variables()] == ["Variable/Adagrad", "Variable_1/Adagrad"]


def test_two_optimizers_share_nothing():
    w = var([1.0])
    first, second = AdamOptimizer(0.1), AdamOptimizer(0.1)
    first.apply_gradients([(torch.ones(1, dtype=F64), w)])
    second.apply_gradients([(torch.ones(1, dtype=F64), w)])
    assert first.get_slot(w, "m") is not second.get_slot(w, "m")
    assert float(first._get_beta_accumulators()[0]) == float(second._get_beta_accumulators()[0])


# ------------------------------------------------------------------------------------------ hyperparameters
def test_callable_hyperparameters_are_called_once_per_apply():
    calls = []

    def lr():
        calls.append(1)
        return 0.5 * len(calls)

    w = var([1.0])
    opt = GradientDescentOptimizer(lr)
    opt.apply_gradients([(torch.ones(1, dtype=F64), w)])
    opt.apply_gradients([(torch.ones(1, dtype=F64), w)])
    assert len(calls) == 2
    assert w.tolist() == [(1.0 - 0.5) - 1.0]


def test_callable_momentum_adam_rmsprop_adadelta_adagrad_follow_the_schedule():
    schedule = iter([0.5, 0.25, 0.125, 0.0625] * 10)
    lr = lambda: next(schedule)  # noqa: E731
    mu_values = [0.5, 0.75]
    w = var([1.0])
    opt = MomentumOptimizer(lr, lambda: mu_values[0])
    opt.apply_gradients([(torch.ones(1, dtype=F64), w)])  # lr 0.5, mu 0.5: a = 1, w = 0.5
    mu_values[0] = 0.75
    opt.apply_gradients([(torch.ones(1, dtype=F64), w)])  # lr 0.25: a = 1.75, w = 0.5 - 0.4375
    assert w.tolist() == [0.0625]
    for make in (lambda: AdamOptimizer(lambda: 0.5, lambda: 0.5, lambda: 0.75, lambda: 0.25),
                 lambda: RMSPropOptimizer(lambda: 0.5, lambda: 0.5, lambda: 0.25, lambda: 0.0),
                 lambda: AdadeltaOptimizer(lambda: 1.0, lambda: 0.25, lambda: 1.0),
                 lambda: AdagradOptimizer(lambda: 0.5, 3.0)):
        callable_opt, plain = make(), make()
        plain._hyper = {k: v() for k, v in plain._hyper.items()}  # the same values, given as numbers
        w1, w2 = var([1.0, -2.0]), var([1.0, -2.0])
        for _ in range(3):
            callable_opt.apply_gradients([(torch.tensor([0.5, 1.5], dtype=F64), w1)])
            plain.apply_gradients([(torch.tensor([0.5, 1.5], dtype=F64), w2)])
        assert torch.equal(w1, w2) and not torch.equal(w1, var([1.0, -2.0]))


def test_adam_beta1_callable_seeds_the_beta_power():
    opt = AdamOptimizer(0.1, beta1=lambda: 0.5, beta2=lambda: 0.25)
    opt.apply_gradients([(torch.ones(1, dtype=F64), var([1.0]))])
    b1p, b2p = opt._get_beta_accumulators()
    assert float(b1p) == 0.25 and float(b2p) == 0.0625 and b1p.dtype == torch.float32


def test_variable_learning_rate_is_read_at_every_apply():
    lr = slotopt.Variable(torch.tensor(0.5, dtype=F64), name="lr", trainable=False)
    w = var([1.0])
    opt = GradientDescentOptimizer(lr)
    opt.apply_gradients([(torch.ones(1, dtype=F64), w)])
    lr.assign(0.25)
    opt.apply_gradients([(torch.ones(1, dtype=F64), w)])
    assert w.tolist() == [0.25]


def test_python_float_hyperparameters_round_through_float32_on_float64():
    w = var([0.0])
    MomentumOptimizer(0.1, 0.0).apply_gradients([(torch.ones(1, dtype=F64), w)])
    assert w.item() == -0.10000000149011612


# ------------------------------------------------------------------------------------------ kernel-side checks
def test_proximal_adagrad_kernel_checks_raise_and_change_nothing():
    w = var([1.0])
    opt = ProximalAdagradOptimizer(0.0)
    with pytest.raises(InvalidArgumentError, match=r"^lr is not a positive scalar: \[\]"):
        opt.apply_gradients([(torch.ones(1, dtype=F64), w)])
    assert w.tolist() == [1.0] and opt.get_slot_names() == [] and opt.variables() == []
    opt = ProximalAdagradOptimizer(0.1, l2_regularization_strength=torch.tensor(-1.0))
    with pytest.raises(InvalidArgumentError, match=r"^l2 regularization strength is not a non-negative scalar"):
        opt.apply_gradients([(torch.ones(1, dtype=F64), w)])


def test_ftrl_checks_lr_only_for_sparse_gradients():
    w = var([[1.0], [2.0]])
    opt = FtrlOptimizer(torch.tensor(0.0))
    grad = IndexedSlices(torch.ones(1, 1, dtype=F64), torch.tensor([0]), (2, 1))
    with pytest.raises(InvalidArgumentError,
                       match=r"^lr is not a positive scalar \(or zero if multiply_linear_by_lr is set\): \[\]"):
        opt.apply_gradients([(grad, w)])
    assert w.tolist() == [[1.0], [2.0]] and opt.get_slot_names() == []
    opt.apply_gradients([(torch.ones(2, 1, dtype=F64), w)])  # the dense kernel does not check: NaN
    assert torch.isnan(w).all()


# ------------------------------------------------------------------------------------------ gradients
def test_compute_gradients_callable_records_variables_in_first_access_order():
    a, b, c = var([1.0, 2.0], "a"), var([3.0], "b"), var([4.0], "c")
    opt = GradientDescentOptimizer(0.1)
    pairs = opt.compute_gradients(lambda: (b * 2).sum() + (a * a).sum() + (b * 0).sum())
    assert [v for _, v in pairs] == [b, a]
    assert pairs[0][0].tolist() == [2.0] and pairs[1][0].tolist() == [2.0, 4.0]
    pairs = opt.compute_gradients(lambda: (a * a).sum(), var_list=[c, a])
    assert pairs[0] == (None, c) and pairs[1][0].tolist() == [2.0, 4.0]


def test_compute_gradients_watches_non_trainable_variables_in_var_list():
    frozen = var([2.0], "frozen", trainable=False)
    pairs = GradientDescentOptimizer(0.1).compute_gradients(lambda: (frozen * frozen).sum(), var_list=[frozen])
    assert pairs[0][0].tolist() == [4.0] and not frozen.requires_grad


def test_grad_loss_scales_the_gradients():
    w = var([1.0, 2.0])
    pairs = GradientDescentOptimizer(0.1).compute_gradients(lambda: (w * w).sum(), grad_loss=3.0)
    assert pairs[0][0].tolist() == [6.0, 12.0]


def test_compute_gradients_of_a_tensor_loss():
    w, b = var([1.0, 2.0], "w"), var([0.5], "b")
    opt = GradientDescentOptimizer(0.1)
    pairs = opt.compute_gradients(((w * 3).sum() + b).sum())
    assert [v for _, v in pairs] == [w, b]
    assert pairs[0][0].tolist() == [3.0, 3.0] and pairs[1][0].tolist() == [1.0]
    model = nn.Sequential(nn.Linear(3, 2), nn.Tanh(), nn.Linear(2, 1)).double()
    pairs = opt.compute_gradients(model(torch.ones(4, 3, dtype=F64)).pow(2).mean())
    assert [v for _, v in pairs] == list(model.parameters())  # the order the forward pass used them
    with pytest.raises(ValueError, match=r"^gate_gradients must be one of: Optimizer.GATE_NONE, Optimizer.GATE_OP, "
                                         r"Optimizer.GATE_GRAPH\.  Not 7$"):
        opt.compute_gradients((w * w).sum(), gate_gradients=7)
    with pytest.raises(ValueError, match=r"Not 7$"):  # TF1 eager accepts it; slotopt refuses it on both paths
        opt.compute_gradients(lambda: (w * w).sum(), gate_gradients=7)
    with pytest.raises(RuntimeError, match="should be a function when eager execution is enabled"):
        opt.compute_gradients(torch.tensor(1.0))
    with pytest.raises(ValueError, match=r"^No variables to optimize\.$"):
        opt.compute_gradients((w * w).sum(), var_list=[])



def test_graph_leaves_holds_the_nodes_it_walks():
    """torch 2.9 frees a backward node's Python object once nothing holds it and gives its id to the next node's: a
    walk that kept only the ids took the inner SumBackward for the outer one, already visited, and missed ``w``.
    These stand-in nodes make a new Python object per access, as torch 2.9 does, on every torch."""

    class Node:
        def __init__(self, order, *children):
            self.order, self.children = order, children

        def _sequence_nr(self):
            return self.order

        @property
        def next_functions(self):
            return tuple((make(), 0) for make in self.children)

    class Leaf:
        def __init__(self, variable):
            self.variable = variable

    w, b = var([1.0, 2.0], "w"), var([0.5], "b")
    # ((w * 3).sum() + b).sum(): Sum <- Add <- (Sum <- Mul <- w, b)
    grad_fn = Node(3, lambda: Node(2, lambda: Node(1, lambda: Node(0, lambda: Leaf(w))), lambda: Leaf(b)))
    leaves = gradients.graph_leaves(types.SimpleNamespace(grad_fn=grad_fn))
    assert len(leaves) == 2 and leaves[0] is w and leaves[1] is b

def test_minimize_updates_and_counts():
    w = var([1.0, 2.0])
    step = int64_step()
    opt = GradientDescentOptimizer(0.5)
    assert opt.minimize(lambda: (w * w).sum(), global_step=step) is None
    assert w.tolist() == [0.0, 0.0] and int(step) == 1
    unused = var([1.0], "unused")
    with pytest.raises(ValueError, match=r"^No gradients provided for any variable, check your graph for ops that do "
                                         r"not support gradients, between variables \["):
        opt.minimize(lambda: (w * 0).sum().detach() + 1.0 + w.sum() * 0, var_list=[unused], global_step=step)
    assert int(step) == 1 and unused.tolist() == [1.0]


def test_minimize_with_a_module_and_sparse_embedding_gradients():
    torch.manual_seed(0)
    model = nn.Embedding(6, 2, sparse=True).double()
    before = model.weight.detach().clone()
    ids = torch.tensor([1, 3, 1])
    opt = AdagradOptimizer(0.5)
    opt.minimize(lambda: model(ids).sum(), var_list=model)
    changed = (model.weight != before).any(dim=1)
    assert changed.tolist() == [False, True, False, True, False, False]
    acc = opt.get_slot(model.weight, "accumulator")
    assert acc[1].tolist() == [0.1 + 4.0] * 2 and acc[0].tolist() == [0.1, 0.1]


def test_float32_and_float64_variables_in_one_call():
    a = var([1.0, 2.0], "a", dtype=torch.float32)
    b = var([1.0, 2.0], "b")
    MomentumOptimizer(0.1, 0.9).apply_gradients([(torch.ones(2), a), (torch.ones(2, dtype=F64), b)])
    assert a.dtype == torch.float32 and a.tolist() == [float(np.float32(1) - np.float32(0.1)),
                                                       float(np.float32(2) - np.float32(0.1))]
    assert b.tolist() == [1.0 - f32(0.1), 2.0 - f32(0.1)]


# ------------------------------------------------------------------------------------------ user subclasses
class ScaledSign(Optimizer):
    """A TF1-style optimizer written with the hooks only: ``acc += |g|``; ``w -= lr * sign(g) * acc``."""

    def __init__(self, learning_rate, use_locking=False, name="ScaledSign"):
        super().__init__(use_locking, name)
        self._lr = learning_rate
        self.finished = 0
        self.sparse_calls = []

    def _create_slots(self, var_list):
        for v in var_list:
            self._zeros_slot(v, "acc", self._name)

    def _prepare(self):
        self._lr_t = float(self._call_if_callable(self._lr))

    def _apply_dense(self, grad, var):
        acc = self.get_slot(var, "acc")
        acc.add_(grad.abs())
        var.sub_(self._lr_t * grad.sign() * acc)

    def _apply_sparse(self, grad, var):
        self.sparse_calls.append(grad.indices.tolist())
        acc = self.get_slot(var, "acc")
        acc.index_add_(0, grad.indices, grad.values.abs())
        var.index_add_(0, grad.indices, -self._lr_t * grad.values.sign() * acc[grad.indices])

    def _finish(self, update_ops, name_scope):
        self.finished += 1


def test_user_subclass_with_tf1_hooks_dense_and_sparse():
    w = var([[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]])
    step = int64_step()
    opt = ScaledSign(0.5)
    opt.apply_gradients([(torch.tensor([[1.0, -2.0], [0.0, 0.0], [0.0, 0.0]], dtype=F64), w)], global_step=step)
    assert w[0].tolist() == [0.5, 2.0] and opt.get_slot(w, "acc")[0].tolist() == [1.0, 2.0]
    grad = IndexedSlices(torch.tensor([[1.0, 1.0], [1.0, -3.0], [2.0, 2.0]], dtype=F64), torch.tensor([2, 2, 0]),
                         (3, 2))
    opt.apply_gradients([(grad, w)], global_step=step)
    # duplicates are summed before _apply_sparse: row 2 gets (2, -2) once
    assert sorted(opt.sparse_calls[0]) == [0, 2]
    assert w[2].tolist() == [1.0 - 0.5 * 2.0, 1.0 + 0.5 * 2.0]
    assert w[0].tolist() == [0.5 - 0.5 * 3.0, 2.0 - 0.5 * 4.0]
    assert opt.finished == 2 and int(step) == 2 and opt.get_slot_names() == ["acc"]
    assert [v.name for v in opt.variables()] == ["w/ScaledSign"]


def test_user_subclass_without_sparse_support_raises_on_sparse_gradients():
    class DenseOnly(Optimizer):
        def __init__(self):
            super().__init__(False, "DenseOnly")

        def _resource_apply_dense(self, grad, handle):
            handle.sub_(grad)

    w = var([1.0, 2.0])
    DenseOnly().apply_gradients([(torch.ones(2, dtype=F64), w)])
    assert w.tolist() == [0.0, 1.0]
    with pytest.raises(NotImplementedError, match="DenseOnly must implement `_apply_sparse"):
        DenseOnly().apply_gradients([(IndexedSlices(torch.ones(1, dtype=F64), torch.tensor([0]), (2,)), w)])
    with pytest.raises(NotImplementedError, match="must implement `_apply_dense"):
        Optimizer(False, "Nothing").apply_gradients([(torch.ones(2, dtype=F64), w)])


def test_overriding_a_builtin_hook_takes_the_per_variable_path():
    class LoggedMomentum(MomentumOptimizer):
        seen = []

        def _apply_dense(self, grad, var):
            self.seen.append(var.name)
            return super()._apply_dense(grad, var)

    a, b = var([1.0], "a"), var([1.0], "b")
    opt = LoggedMomentum(0.5, 0.5)
    opt.apply_gradients([(torch.ones(1, dtype=F64), a), (torch.ones(1, dtype=F64), b)])
    assert LoggedMomentum.seen == ["a", "b"] and a.tolist() == b.tolist() == [0.5]


def test_foreach_off_gives_the_same_bits():
    torch.manual_seed(1)
    values = [torch.randn(4, 3, dtype=F64) for _ in range(3)]
    grads = [torch.randn(4, 3, dtype=F64) for _ in range(3)]
    results = []
    for foreach in (True, False):
        ws = [slotopt.Variable(v, name=f"w{i}") for i, v in enumerate(values)]
        opt = AdamOptimizer(0.01)
        opt.foreach = foreach
        for _ in range(2):
            opt.apply_gradients(list(zip(grads, ws)))
        results.append(ws)
    for x, y in zip(*results):
        assert torch.equal(x, y)


# ------------------------------------------------------------------------------------------ checkpoints
def test_state_dict_round_trip_restores_slots_created_later():
    torch.manual_seed(2)
    grads = [torch.randn(3, 2, dtype=F64) for _ in range(4)]
    w = slotopt.Variable(torch.ones(3, 2, dtype=F64), name="w")
    opt = AdamOptimizer(0.01)
    for g in grads[:2]:
        opt.apply_gradients([(g, w)])
    state = opt.state_dict()
    assert sorted(state["state"][0]) == ["beta1_power", "beta2_power", "m", "v"]
    w2 = slotopt.Variable(w.detach().clone(), name="w")
    restored = AdamOptimizer(0.01)
    restored.load_state_dict(state)  # before the slots exist: applied when they are created
    for g in grads[2:]:
        opt.apply_gradients([(g, w)])
        restored.apply_gradients([(g, w2)])
    assert torch.equal(w, w2)
    assert torch.equal(opt.get_slot(w, "v"), restored.get_slot(w2, "v"))


def test_load_state_dict_rejects_wrong_shapes_without_changing_anything():
    w = var([1.0, 2.0])
    opt = MomentumOptimizer(0.1, 0.9)
    opt.apply_gradients([(torch.ones(2, dtype=F64), w)])
    before = snapshot(opt.get_slot(w, "momentum"))
    with pytest.raises(ValueError, match=r"Optimizer variable w/Momentum has shape \(2,\); the state has shape"):
        opt.load_state_dict({"variables": {"w/Momentum": torch.zeros(3)}})
    assert_unchanged(before, opt.get_slot(w, "momentum"))
    with pytest.raises(ValueError, match="`state_dict` must be a dict"):
        opt.load_state_dict([1, 2])
