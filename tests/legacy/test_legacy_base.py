"""slotopt.legacy base class (spec §2): hyperparameters, iterations, slots, weights, config, decay, schedules,
clipping, the gradient hooks, user subclasses and every validation error (state unchanged)."""

import math

import numpy as np
import pytest
import torch

import slotopt
from slotopt import schedules
from slotopt.legacy import SGD, Adadelta, Adagrad, Adam, Adamax, Ftrl, Nadam, Optimizer, RMSProp, RMSprop


def _var(values, name="w", dtype=torch.float32, **kwargs):
    return slotopt.Variable(torch.tensor(values, dtype=dtype), name=name, **kwargs)


def _snapshot(opt, *variables):
    """Every variable, every optimizer weight, and whether iterations exist."""
    return ([v.detach().clone() for v in variables], [w.detach().clone() for w in opt.weights],
            opt._iterations is not None)


def _assert_unchanged(before, opt, *variables):
    values, weights, had_iterations = before
    assert all(torch.equal(a, b) for a, b in zip(values, variables))
    assert len(weights) == len(opt.weights)
    assert all(torch.equal(a, b) for a, b in zip(weights, opt.weights))
    assert (opt._iterations is not None) == had_iterations


# ------------------------------------------------------------------------------------------------ construction
def test_default_names_are_the_class_names():
    names = [cls().get_config()["name"] for cls in (SGD, Adam, Adamax, Nadam, RMSprop, Adagrad, Adadelta, Ftrl)]
    assert names == ["SGD", "Adam", "Adamax", "Nadam", "RMSprop", "Adagrad", "Adadelta", "Ftrl"]
    assert RMSProp is RMSprop
    assert SGD(name="mine").name == "mine"
    assert Adam(name=None).name.startswith("adam")


@pytest.mark.parametrize("kwargs, error, text", [
    ({"momentun": 0.9}, TypeError, "Unexpected keyword argument passed to optimizer: momentun"),
    ({"clipnorm": -1.0}, ValueError, "Expected clipnorm >= 0, received: -1.0"),
    ({"clipvalue": -0.5}, ValueError, "Expected clipvalue >= 0"),
    ({"global_clipnorm": -2}, ValueError, "Expected global_clipnorm >= 0"),
    ({"decay": -0.1}, ValueError, "Expected decay >= 0"),
    ({"clipnorm": "big"}, TypeError, "`clipnorm` must be a number"),
    ({"clipnorm": 1.0, "global_clipnorm": 1.0}, ValueError, "Cannot accept both `clipnorm` and `global_clipnorm`"),
    ({"clipvalue": 1.0, "gradient_transformers": [lambda gv: gv]}, ValueError,
     "`clipvalue` cannot be set when `gradient_transformers` is set"),
    ({"gradient_transformers": [1]}, TypeError, "gradient_transformers"),
    ({"gradient_aggregator": "sum"}, TypeError, "gradient_aggregator"),
    ({"learning_rate": "fast"}, TypeError, "`learning_rate` must be a number"),
    ({"momentum": 1.5}, ValueError, "`momentum` must be between [0, 1]. Received: momentum=1.5"),
    ({"momentum": -0.1}, ValueError, "momentum=-0.1"),
    ({"momentum": "heavy"}, TypeError, "`momentum` must be a number"),
    ({"lr": "x"}, TypeError, "`lr` must be a number"),
])
def test_constructor_errors_name_the_argument(kwargs, error, text):
    with pytest.raises(error, match=_escape(text)):
        SGD(**kwargs)


def _escape(text):
    import re
    return re.escape(text)


@pytest.mark.parametrize("make, error, text", [
    (lambda: Adagrad(initial_accumulator_value=-0.1), ValueError, "initial_accumulator_value must be non-negative"),
    (lambda: Adagrad(initial_accumulator_value="a"), TypeError, "initial_accumulator_value"),
    (lambda: Adam(epsilon=-1.0), ValueError, "`epsilon` must be a number >= 0"),
    (lambda: RMSprop(momentum=2.0), ValueError, "`momentum` must be between [0, 1]"),
    (lambda: Ftrl(initial_accumulator_value=-1.0), ValueError, "`initial_accumulator_value` needs to be positive or zero"),
    (lambda: Ftrl(learning_rate_power=0.5), ValueError, "`learning_rate_power` needs to be negative or zero"),
    (lambda: Ftrl(l1_regularization_strength=-1.0), ValueError, "`l1_regularization_strength` needs to be positive"),
    (lambda: Ftrl(l2_regularization_strength=-1.0), ValueError, "`l2_regularization_strength` needs to be positive"),
    (lambda: Ftrl(l2_shrinkage_regularization_strength=-1.0), ValueError,
     "`l2_shrinkage_regularization_strength` needs to be positive"),
    (lambda: Nadam(learning_rate=schedules.ExponentialDecay(0.1, 10, 0.5)), ValueError,
     "The Nadam optimizer does not support"),
])
def test_optimizer_specific_constructor_errors(make, error, text):
    with pytest.raises(error, match=_escape(text)):
        make()


def test_lr_keyword_is_deprecated_but_used_except_by_ftrl():
    with pytest.warns(UserWarning, match="The `lr` argument is deprecated"):
        opt = SGD(lr=0.5)
    assert float(opt.learning_rate) == 0.5
    with pytest.warns(UserWarning):
        ftrl = Ftrl(lr=0.3)
    assert float(ftrl.learning_rate) == np.float32(0.001)


def test_epsilon_zero_or_none_means_1e_7():
    assert Adam(epsilon=0).epsilon == 1e-7
    assert Adagrad(epsilon=None).epsilon == 1e-7
    assert RMSprop(epsilon=0.0).get_config()["epsilon"] == 1e-7


# ------------------------------------------------------------------------------------------------ hyperparameters
def test_hyperparameters_are_float32_variables_readable_and_assignable_as_attributes():
    w = _var([1.0])
    opt = SGD(learning_rate=0.1, momentum=0.5)
    assert opt.get_config()["learning_rate"] == 0.1  # the Python value before the first step
    opt.apply_gradients([(torch.tensor([1.0]), w)])
    lr = opt.learning_rate
    assert isinstance(lr, torch.Tensor) and lr.dtype == torch.float32 and float(lr) == np.float32(0.1)
    assert opt.lr is lr
    config = opt.get_config()
    assert isinstance(config["learning_rate"], np.float32) and config["learning_rate"] == np.float32(0.1)
    opt.lr = 0.25
    assert float(opt.learning_rate) == 0.25 and opt.learning_rate is lr  # assigned into the same variable
    opt.momentum = 0.0
    assert float(opt.momentum) == 0.0
    assert "lr" in dir(opt) and "momentum" in dir(opt)
    with pytest.raises(AttributeError):
        _ = opt.beta_1


def test_assigning_the_learning_rate_changes_the_next_step():
    w = _var([1.0])
    opt = SGD(learning_rate=0.5)
    opt.apply_gradients([(torch.tensor([1.0]), w)])
    opt.learning_rate = 0.25
    opt.apply_gradients([(torch.tensor([1.0]), w)])
    assert w.item() == 0.25
    opt.lr = 0.125
    opt.apply_gradients([(torch.tensor([1.0]), w)])
    assert w.item() == 0.125


def test_callable_and_tensor_hyperparameters_are_read_at_every_step():
    w = _var([0.0])
    rates = iter([0.5, 0.25, 0.125])
    opt = SGD(learning_rate=lambda: next(rates))
    for _ in range(3):
        opt.apply_gradients([(torch.tensor([1.0]), w)])
    assert w.item() == -0.875
    lr = torch.tensor(0.5)
    w2 = _var([0.0])
    opt2 = Adam(learning_rate=lr, beta_1=torch.tensor(0.5))
    opt2.apply_gradients([(torch.tensor([1.0]), w2)])
    first = w2.item()
    lr.fill_(0.0)  # the tensor is read again at the next step
    opt2.apply_gradients([(torch.tensor([1.0]), w2)])
    assert w2.item() == first
    assert opt2.get_config()["learning_rate"] == 0.0
    assert opt2.get_config()["beta_1"] == 0.5


def test_setting_a_callable_replaces_the_variable_and_get_config_calls_it():
    w = _var([0.0])
    opt = SGD(learning_rate=0.5)
    opt.apply_gradients([(torch.tensor([1.0]), w)])
    opt.learning_rate = lambda: 0.25
    opt.apply_gradients([(torch.tensor([1.0]), w)])
    assert w.item() == -0.75
    assert opt.get_config()["learning_rate"] == 0.25


def test_invalid_hyperparameter_assignment_changes_nothing():
    w = _var([1.0])
    opt = SGD(learning_rate=0.5)
    opt.apply_gradients([(torch.tensor([1.0]), w)])
    before = _snapshot(opt, w)
    with pytest.raises(TypeError, match="`learning_rate` must be a number"):
        opt.learning_rate = "slow"
    with pytest.raises(TypeError, match="`momentum`"):
        opt.momentum = [0.1, 0.2]
    _assert_unchanged(before, opt, w)
    assert float(opt.learning_rate) == 0.5


def test_callable_returning_garbage_raises_before_any_update():
    w = _var([1.0])
    opt = SGD(learning_rate=lambda: "oops")
    with pytest.raises(TypeError, match="`learning_rate` must evaluate to a number"):
        opt.apply_gradients([(torch.tensor([1.0]), w)])
    assert w.item() == 1.0 and int(opt.iterations) == 0


# ------------------------------------------------------------------------------------------------ decay & schedules
def test_decay_divides_the_learning_rate_by_one_plus_decay_times_iterations():
    w = _var([0.0])
    opt = SGD(learning_rate=0.5, decay=0.25)
    deltas = []
    for _ in range(3):
        before = w.item()
        opt.apply_gradients([(torch.tensor([1.0]), w)])
        deltas.append(before - w.item())
    assert deltas == pytest.approx([0.5, 0.4, 1 / 3], rel=1e-6)
    assert opt.get_config()["decay"] == 0.25


def test_decay_in_float64_is_computed_in_float64():
    w = _var([0.0], dtype=torch.float64)
    opt = SGD(learning_rate=0.5, decay=0.25)
    for _ in range(3):
        opt.apply_gradients([(torch.tensor([1.0], dtype=torch.float64), w)])
    assert w.item() == -(0.5 + 0.5 / 1.25 + 0.5 / 1.5)


def test_nadam_overwrites_decay_with_schedule_decay_and_never_decays_the_lr():
    assert Nadam(decay=0.5).get_config()["decay"] == 0.004
    assert Nadam(schedule_decay=0.01).get_config()["decay"] == 0.01
    opt = Nadam(learning_rate=0.1)
    with pytest.raises(ValueError, match="Nadam optimizer does not support"):
        opt.learning_rate = schedules.ExponentialDecay(0.1, 10, 0.5)


class _Recording(schedules.LearningRateSchedule):
    def __init__(self):
        self.steps = []

    def __call__(self, step):
        self.steps.append(step.clone())
        return torch.tensor(0.5, dtype=torch.float32)

    def get_config(self):
        return {}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_schedules_are_called_with_float_iterations_of_the_variable_dtype(dtype):
    schedule = _Recording()
    w = _var([0.0], dtype=dtype)
    opt = SGD(learning_rate=schedule)
    for _ in range(3):
        opt.apply_gradients([(torch.tensor([1.0], dtype=dtype), w)])
    assert [s.dtype for s in schedule.steps] == [dtype] * 3
    assert [float(s) for s in schedule.steps] == [0.0, 1.0, 2.0]


SCHEDULES = [
    schedules.ExponentialDecay(0.5, decay_steps=2, decay_rate=0.5),
    schedules.ExponentialDecay(0.5, decay_steps=2, decay_rate=0.5, staircase=True),
    schedules.PiecewiseConstantDecay([0, 1], [0.5, 0.25, 0.125]),
    schedules.PolynomialDecay(0.5, decay_steps=3, end_learning_rate=0.125, power=2.0),
    schedules.PolynomialDecay(0.5, decay_steps=1, end_learning_rate=0.125, cycle=True),
    schedules.InverseTimeDecay(0.5, decay_steps=1, decay_rate=1.0),
    schedules.CosineDecay(0.5, decay_steps=4, alpha=0.25),
    schedules.CosineDecay(0.0, decay_steps=4, warmup_target=0.5, warmup_steps=2),
    schedules.CosineDecayRestarts(0.5, first_decay_steps=2),
]


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: type(s).__name__)
def test_each_schedule_type_drives_the_step_size_the_legacy_way(schedule):
    """Step k uses ``schedule(float(k))`` (k = iterations before the step), then the decay term."""
    w = _var([0.0])
    opt = SGD(learning_rate=schedule, decay=0.5)
    for k in range(4):
        before = w.item()
        opt.apply_gradients([(torch.tensor([1.0]), w)])
        lr = schedule(torch.tensor(float(k), dtype=torch.float32)).to(torch.float32)
        expected = lr / (1.0 + torch.tensor(0.5) * torch.tensor(float(k)))
        assert np.float32(before) - np.float32(w.item()) == pytest.approx(float(expected), rel=1e-6, abs=1e-7)
    config = opt.get_config()["learning_rate"]
    assert config["class_name"] == type(schedule).__name__
    rebuilt = SGD.from_config(opt.get_config())
    assert type(rebuilt._hyper["learning_rate"]) is type(schedule)


def test_piecewise_constant_compares_a_float_step_with_the_boundaries():
    schedule = schedules.PiecewiseConstantDecay([1, 2], [1.0, 0.5, 0.25])
    w = _var([0.0])
    opt = SGD(learning_rate=schedule)
    for _ in range(4):
        opt.apply_gradients([(torch.tensor([1.0]), w)])
    assert w.item() == -(1.0 + 1.0 + 0.5 + 0.25)


# ------------------------------------------------------------------------------------------------ iterations & slots
def test_iterations_can_be_set_until_the_weights_exist():
    shared = slotopt.Variable(torch.tensor(7, dtype=torch.int64), name="shared_iter")
    opt = SGD(learning_rate=0.5)
    opt.iterations = shared
    w = _var([1.0])
    opt.apply_gradients([(torch.tensor([1.0]), w)])
    assert opt.iterations is shared and int(shared) == 8 and opt.weights[0] is shared
    with pytest.raises(RuntimeError, match="Cannot set `iterations` to a new Variable after the Optimizer weights"):
        opt.iterations = slotopt.Variable(torch.tensor(0, dtype=torch.int64))
    assert opt.iterations is shared
    fresh = SGD()
    with pytest.raises(TypeError, match="`iterations` must be an integer"):
        fresh.iterations = torch.tensor(1.5)
    assert fresh._iterations is None
    fresh.iterations = 3
    assert int(fresh.iterations) == 3


def test_slots_weights_and_names_in_tf_keras_order():
    k = _var(np.ones((3, 2)).tolist(), name="k")
    b = _var([0.0, 0.0], name="b")
    opt = Adam(amsgrad=True)
    opt.apply_gradients([(torch.ones(3, 2), k), (torch.ones(2), b)])
    assert [w.path for w in opt.weights] == ["Adam/iter", "Adam/k/m", "Adam/b/m", "Adam/k/v", "Adam/b/v",
                                             "Adam/k/vhat", "Adam/b/vhat"]
    assert opt.weights == opt.variables()
    assert opt.get_slot_names() == ["m", "v", "vhat"]
    assert opt.get_slot(k, "m").shape == k.shape and opt.get_slot(k, "m").dtype == k.dtype
    with pytest.raises(KeyError, match="no slot 'rms' for variable k"):
        opt.get_slot(k, "rms")
    with pytest.raises(KeyError, match="no slot 'm' for variable stranger"):
        opt.get_slot(_var([1.0], name="stranger"), "m")
    ftrl = Ftrl()
    ftrl.apply_gradients([(torch.ones(3, 2), k), (torch.ones(2), b)])
    assert [w.path for w in ftrl.weights] == ["Ftrl/iter", "Ftrl/k/accumulator", "Ftrl/k/linear",
                                              "Ftrl/b/accumulator", "Ftrl/b/linear"]
    nadam = Nadam()
    nadam.apply_gradients([(torch.ones(3, 2), k)])
    assert [w.path for w in nadam.weights] == ["Nadam/iter", "Nadam/momentum_cache", "Nadam/k/m", "Nadam/k/v"]


def test_new_variables_are_accepted_later_and_their_slots_appended():
    a, b = _var([1.0], name="a"), _var([2.0], name="b")
    opt = Adam()
    opt.apply_gradients([(torch.ones(1), a)])
    opt.apply_gradients([(torch.ones(1), b)])
    assert [w.path for w in opt.weights] == ["Adam/iter", "Adam/a/m", "Adam/a/v", "Adam/b/m", "Adam/b/v"]


def test_add_slot_and_add_weight():
    w = _var([[1.0, 2.0]], name="w")
    opt = SGD()
    slot = opt.add_slot(w, "trace", initializer="ones")
    assert opt.add_slot(w, "trace") is slot and torch.equal(slot, torch.ones(1, 2))
    assert torch.equal(opt.add_slot(w, "fill", 0.5), torch.full((1, 2), 0.5))
    assert opt.add_slot(w, "shaped", shape=(3,)).shape == (3,)
    assert torch.equal(opt.add_slot(w, "given", lambda shape, dtype: torch.arange(2.0).reshape(shape)),
                       torch.tensor([[0.0, 1.0]]))
    extra = opt.add_weight("counter", shape=[], dtype=torch.int64)
    assert extra.dtype == torch.int64 and all(x is not extra for x in opt.weights)
    with pytest.raises(ValueError, match="Unknown initializer: 'glorot'"):
        opt.add_slot(w, "bad", initializer="glorot")
    with pytest.raises(TypeError, match="`slot_name` must be a string"):
        opt.add_slot(w, 3)
    assert opt.get_slot_names() == ["trace", "fill", "shaped", "given"]


# ------------------------------------------------------------------------------------------------ weights I/O
@pytest.mark.parametrize("make", [lambda: SGD(0.1, momentum=0.5), lambda: Adam(0.1, amsgrad=True), Adamax, Nadam,
                                  lambda: RMSprop(centered=True, momentum=0.5), Adagrad, Adadelta, Ftrl])
def test_get_weights_set_weights_round_trip_continues_the_same_trajectory(make):
    torch.manual_seed(1)
    init = [torch.randn(3, 2), torch.randn(2)]
    grads = [[torch.randn_like(x) for x in init] for _ in range(4)]
    var_a = [slotopt.Variable(x, name=f"v{i}") for i, x in enumerate(init)]
    a = make()
    for step in grads[:2]:
        a.apply_gradients(zip(step, var_a))
    var_b = [slotopt.Variable(v.detach(), name=f"v{i}") for i, v in enumerate(var_a)]
    b = make()
    b.build(var_b)
    b.set_weights(a.get_weights())
    assert int(b.iterations) == 2
    for step in grads[2:]:
        a.apply_gradients(zip(step, var_a))
        b.apply_gradients(zip(step, var_b))
    for x, y in zip(var_a + a.weights, var_b + b.weights):
        assert torch.equal(x, y)


def test_set_weights_errors_change_nothing():
    w = _var([1.0, 2.0])
    opt = Adam(0.1)
    opt.apply_gradients([(torch.ones(2), w)])
    before = _snapshot(opt, w)
    weights = opt.get_weights()
    with pytest.raises(ValueError, match="with a  weight list of length 2, but the optimizer was expecting 3"):
        opt.set_weights(weights[:2])
    bad_shape = [weights[0], np.zeros(3), weights[2]]
    with pytest.raises(ValueError, match=r"Optimizer weight shape \(2,\) not compatible with provided weight shape \(3,\)"):
        opt.set_weights(bad_shape)
    with pytest.raises(TypeError, match="`weights`"):
        opt.set_weights([weights[0], "abc", weights[2]])
    with pytest.raises(TypeError, match="`weights` must be a list"):
        opt.set_weights(5)
    _assert_unchanged(before, opt, w)


def test_set_weights_compatibility_shims():
    w = _var([1.0, 2.0])
    amsgrad = Adam(amsgrad=True)
    amsgrad.apply_gradients([(torch.ones(2), w)])
    plain = Adam()
    plain.build([w])
    plain.set_weights(amsgrad.get_weights())  # 3*n+1 weights: vhat is dropped
    assert torch.equal(plain.get_slot(w, "v"), amsgrad.get_slot(w, "v"))
    for cls in (Adagrad, Adadelta, RMSprop):
        opt = cls()
        opt.build([w])
        old_format = [np.full(2, 0.5)] * (len(opt.weights) - 1)  # no leading iteration count
        with torch.no_grad():
            opt.iterations.fill_(4)
        opt.set_weights(old_format)
        assert int(opt.iterations) == 0
        assert all(torch.equal(x, torch.full((2,), 0.5)) for x in opt.weights[1:])


def test_state_dict_round_trip():
    w = _var([1.0, 2.0])
    opt = RMSprop(0.1)
    opt.apply_gradients([(torch.ones(2), w)])
    other = RMSprop(0.1)
    other.build([w])
    other.load_state_dict(opt.state_dict())
    assert all(torch.equal(x, y) for x, y in zip(opt.weights, other.weights))


# ------------------------------------------------------------------------------------------------ config
@pytest.mark.parametrize("make", [
    lambda: SGD(0.5, momentum=0.25, nesterov=True, clipvalue=1.0),
    lambda: Adam(0.5, beta_1=0.5, beta_2=0.75, epsilon=1e-3, amsgrad=True, decay=0.5, clipnorm=2.0),
    lambda: Adamax(0.5, beta_1=0.5, beta_2=0.75, global_clipnorm=1.0),
    lambda: Nadam(0.5, beta_1=0.5, beta_2=0.75, schedule_decay=0.125),
    lambda: RMSprop(0.5, rho=0.5, momentum=0.25, centered=True),
    lambda: Adagrad(0.5, initial_accumulator_value=0.25),
    lambda: Adadelta(0.5, rho=0.5),
    lambda: Ftrl(0.5, learning_rate_power=-0.25, l1_regularization_strength=0.5, l2_regularization_strength=0.25,
                 l2_shrinkage_regularization_strength=0.125, beta=0.5),
])
def test_get_config_from_config_round_trip(make):
    opt = make()
    config = opt.get_config()
    rebuilt = type(opt).from_config(dict(config))
    assert rebuilt.get_config() == config
    w = _var([1.0, -1.0])
    opt.apply_gradients([(torch.tensor([0.5, 0.25]), w)])
    config_after = opt.get_config()
    assert {k: float(v) if isinstance(v, np.floating) else v for k, v in config_after.items()} == config


def test_base_config_omits_clip_keys_that_are_none_and_from_config_renames_lr():
    assert SGD().get_config() == {"name": "SGD", "learning_rate": 0.01, "decay": 0.0, "momentum": 0.0,
                                  "nesterov": False}
    assert float(SGD.from_config({"lr": 0.25}).learning_rate) == 0.25
    assert Adagrad.from_config({"learning_rate": 0.5}).get_config()["initial_accumulator_value"] == 0.1


# ------------------------------------------------------------------------------------------------ clipping
def _step(opt, grads, values=None):
    variables = [_var(v if values is None else values[i], name=f"v{i}") for i, v in
                 enumerate([[0.0] * len(g) for g in grads])]
    opt.apply_gradients([(torch.tensor(g), v) for g, v in zip(grads, variables)])
    return [(-v.detach()).tolist() for v in variables]  # lr 1: the applied gradient


def test_clip_by_value_then_norm_is_applied_in_that_order():
    (g,) = _step(SGD(1.0, clipvalue=0.5, clipnorm=0.6), [[3.0, 4.0]])
    assert g == pytest.approx([0.4242641, 0.4242641], rel=1e-6)


@pytest.mark.parametrize("kwargs, expected", [
    ({"clipvalue": 0.5}, [[0.5, -0.5], [0.25]]),
    ({"clipnorm": 2.5}, [[1.5, -2.0], [0.25]]),
    ({"global_clipnorm": 2.5}, [[3.0 * 2.5 / math.sqrt(25.0625), -4.0 * 2.5 / math.sqrt(25.0625)],
                                [0.25 * 2.5 / math.sqrt(25.0625)]]),
    ({"clipvalue": 3.5, "global_clipnorm": 3.0}, [[3.0 * 3.0 / math.sqrt(21.3125), -3.5 * 3.0 / math.sqrt(21.3125)],
                                                  [0.25 * 3.0 / math.sqrt(21.3125)]]),
    ({"clipvalue": 3.5, "clipnorm": 2.0}, [[3.0 * 2.0 / math.sqrt(21.25), -3.5 * 2.0 / math.sqrt(21.25)], [0.25]]),
    ({"clipnorm": 0.0}, [[0.0, 0.0], [0.0]]),
    ({"global_clipnorm": 0.0}, [[0.0, 0.0], [0.0]]),
])
def test_every_clipping_combination(kwargs, expected):
    got = _step(SGD(1.0, **kwargs), [[3.0, -4.0], [0.25]])
    for g, e in zip(got, expected):
        assert g == pytest.approx(e, rel=1e-6, abs=1e-7)


def test_clipnorm_zero_on_a_zero_gradient_gives_nan_as_tensorflow():
    (g,) = _step(SGD(1.0, clipnorm=0.0), [[0.0, 0.0]])
    assert all(math.isnan(x) for x in g)


def test_clipping_sparse_gradients_uses_the_values_without_summing_duplicates():
    w = _var([[0.0], [0.0]])
    SGD(1.0, clipnorm=1.0).apply_gradients([(slotopt.IndexedSlices(torch.tensor([[3.0], [4.0]]), [0, 0], (2, 1)), w)])
    assert w[0, 0].item() == pytest.approx(-(3.0 + 4.0) / 5.0)


def test_clip_attributes_are_settable_and_validated():
    opt = SGD(1.0)
    opt.clipvalue = 0.5
    assert _step(opt, [[2.0]]) == [[0.5]]
    with pytest.raises(ValueError, match="Expected clipnorm >= 0"):
        opt.clipnorm = -1
    assert opt.clipnorm is None
    with_transformers = SGD(1.0, gradient_transformers=[lambda gv: gv])
    with pytest.raises(ValueError, match="`global_clipnorm` cannot be set when `gradient_transformers` is set"):
        with_transformers.global_clipnorm = 1.0
    assert with_transformers.global_clipnorm is None


def test_gradient_transformers_run_in_order_after_the_aggregator():
    calls = []

    def aggregator(pairs):
        calls.append("aggregator")
        return [(g * 2, v) for g, v in pairs]

    def add_one(pairs):
        calls.append("add_one")
        return [(g + 1, v) for g, v in pairs]

    def halve(pairs):
        calls.append("halve")
        return [(g / 2, v) for g, v in pairs]

    opt = SGD(1.0, gradient_aggregator=aggregator, gradient_transformers=[add_one, halve])
    assert _step(opt, [[3.0]]) == [[3.5]]  # ((3 * 2) + 1) / 2
    assert calls == ["aggregator", "add_one", "halve"]


class _Hooks(SGD):
    def __init__(self, log, **kwargs):
        super().__init__(1.0, gradient_aggregator=lambda pairs: log.append("gradient_aggregator") or pairs,
                         **kwargs)
        self.log = log

    def _transform_unaggregated_gradients(self, grads_and_vars):
        self.log.append("unaggregated")
        return [(g + 1, v) for g, v in grads_and_vars]

    def _aggregate_gradients(self, grads_and_vars):
        self.log.append("aggregate")
        return [(g * 10, v) for g, v in super()._aggregate_gradients(grads_and_vars)]

    def _transform_gradients(self, grads_and_vars):
        self.log.append("transform")
        return super()._transform_gradients(grads_and_vars)


def test_gradient_hooks_run_in_tf_keras_order_and_can_be_skipped():
    log = []
    opt = _Hooks(log, clipvalue=100.0)
    w = _var([0.0])
    opt.apply_gradients([(torch.tensor([1.0]), w)])
    assert log == ["unaggregated", "aggregate", "gradient_aggregator", "transform"]
    assert w.item() == -20.0
    log.clear()
    opt.apply_gradients([(torch.tensor([1.0]), w)], experimental_aggregate_gradients=False)
    assert log == ["transform"]
    assert w.item() == -21.0


# ------------------------------------------------------------------------------------------------ apply / minimize
def test_minimize_with_callable_loss_and_callable_var_list():
    w = _var([3.0])
    created = []

    def loss():
        if not created:
            created.append(_var([1.0], name="late"))
        return (w * w).sum() + (created[0] * 2).sum()

    opt = SGD(0.25)
    result = opt.minimize(loss, var_list=lambda: [w] + created)
    assert int(result) == 1
    assert w.item() == 3.0 - 0.25 * 6.0 and created[0].item() == 1.0 - 0.25 * 2.0


def test_minimize_with_a_tensor_loss_grad_loss_and_a_module():
    model = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, 2.0]]))
    x = torch.tensor([[1.0, 1.0]])
    loss = model(x).sum()
    opt = SGD(0.5)
    opt.minimize(loss, model, grad_loss=torch.tensor(2.0))
    assert model.weight.tolist() == [[0.0, 1.0]]
    assert [w.path for w in opt.weights] == ["SGD/iter"]
    opt2 = Adagrad()
    opt2.minimize(model(x).sum(), model)
    assert opt2.weights[1].path == "Adagrad/weight/accumulator"
    with pytest.raises(ValueError, match="No gradients provided for any variable"):  # tf-keras: a constant loss
        opt.minimize(torch.tensor(1.0), model)


def test_none_gradients_are_skipped_with_a_warning_and_all_none_raises():
    a, b = _var([1.0], name="a"), _var([2.0], name="b")
    opt = Adam()
    with pytest.warns(UserWarning, match=r"Gradients do not exist for variables \['b'\]"):
        opt.apply_gradients([(torch.ones(1), a), (None, b)])
    assert [w.path for w in opt.weights] == ["Adam/iter", "Adam/a/m", "Adam/a/v"]
    before = _snapshot(opt, a, b)
    with pytest.raises(ValueError, match=r"No gradients provided for any variable: \(\['a', 'b'\],\)"):
        opt.apply_gradients([(None, a), (None, b)])
    _assert_unchanged(before, opt, a, b)
    assert int(opt.iterations) == 1
    assert opt.apply_gradients([]) is None
    assert int(opt.iterations) == 1


@pytest.mark.parametrize("pairs, error, text", [
    (lambda a, b: [(torch.ones(1), a), (torch.ones(3), b)], ValueError, "Gradient for variable b has shape"),
    (lambda a, b: [(torch.ones(1), a), (torch.ones(1, dtype=torch.int64), b)], ValueError, "floating-point"),
    (lambda a, b: [(torch.ones(1), a), ("grad", b)], TypeError, "variable b"),
    (lambda a, b: [(torch.ones(1), a), (torch.ones(1), "b")], TypeError, "not a tensor"),
    (lambda a, b: [(torch.ones(1), a), torch.ones(1)], TypeError, "(gradient, variable) pairs"),
    (lambda a, b: [(torch.ones(1), a), (torch.ones(1), a)], ValueError, "appears more than once"),
    (lambda a, b: [(torch.ones(1), a), (slotopt.IndexedSlices(torch.ones(1), [5], (1,)), b)], ValueError,
     "must be in [0, 1)"),
    (lambda a, b: torch.ones(1), TypeError, "`grads_and_vars` must be an iterable"),
])
def test_apply_gradients_validates_everything_before_changing_anything(pairs, error, text):
    a, b = _var([1.0], name="a"), _var([2.0], name="b")
    opt = Adam(0.5)
    opt.apply_gradients([(torch.ones(1), a)])
    before = _snapshot(opt, a, b)
    with pytest.raises(error, match=_escape(text)):
        opt.apply_gradients(pairs(a, b))
    _assert_unchanged(before, opt, a, b)


def test_constraint_with_a_sparse_gradient_raises_before_anything_changes():
    dense = _var([1.0, 2.0], name="dense", constraint=lambda v: v.clamp(min=0))
    table = _var([[1.0], [2.0]], name="table", constraint=lambda v: v.clamp(min=0))
    opt = SGD(0.5, momentum=0.5)
    opt.apply_gradients([(torch.ones(2), dense)])
    before = _snapshot(opt, dense, table)
    with pytest.raises(RuntimeError, match="Cannot use a constraint function on a sparse variable"):
        opt.apply_gradients([(torch.ones(2), dense), (slotopt.IndexedSlices(torch.ones(1, 1), [0], (2, 1)), table)])
    _assert_unchanged(before, opt, dense, table)
    opt.apply_gradients([(torch.tensor([10.0, 10.0]), dense)])
    assert dense.tolist() == [0.0, 0.0]  # constraints apply after dense updates


# ------------------------------------------------------------------------------------------------ user subclasses
class HeavyBall(Optimizer):
    """A user optimizer written only with the legacy hooks: ``v = mu * v + g``; ``w -= lr * v`` (sparse: lazy)."""

    def __init__(self, learning_rate=0.5, momentum=0.5, name="HeavyBall", **kwargs):
        super().__init__(name, **kwargs)
        self._set_hyper("learning_rate", kwargs.get("lr", learning_rate))
        self._set_hyper("decay", self._initial_decay)
        self._set_hyper("momentum", momentum)

    def _create_slots(self, var_list):
        for var in var_list:
            self.add_slot(var, "velocity")

    def _prepare_local(self, var_device, var_dtype, apply_state):
        super()._prepare_local(var_device, var_dtype, apply_state)
        apply_state[(var_device, var_dtype)]["mu"] = self._get_hyper("momentum", var_dtype)

    def _resource_apply_dense(self, grad, var, apply_state=None):
        coefficients = (apply_state or {}).get((var.device, var.dtype)) or \
            self._fallback_apply_state(var.device, var.dtype)
        velocity = self.get_slot(var, "velocity")
        velocity.mul_(coefficients["mu"]).add_(grad)
        var.sub_(velocity * coefficients["lr_t"])

    def _resource_apply_sparse(self, grad, var, indices, apply_state=None):
        coefficients = self._fallback_apply_state(var.device, var.dtype)  # no apply_state: works too
        velocity = self.get_slot(var, "velocity")
        rows = velocity.index_select(0, indices) * coefficients["mu"] + grad
        self._resource_scatter_update(velocity, indices, rows)
        self._resource_scatter_add(var, indices, -rows * coefficients["lr_t"])

    def get_config(self):
        config = super().get_config()
        config.update(learning_rate=self._serialize_hyperparameter("learning_rate"), decay=self._initial_decay,
                      momentum=self._serialize_hyperparameter("momentum"))
        return config


def test_user_subclass_with_only_the_legacy_hooks():
    w = _var([1.0, 1.0])
    table = _var([[0.0], [0.0], [0.0]], name="table")
    opt = HeavyBall(learning_rate=0.5, momentum=0.5, decay=1.0, clipvalue=4.0)
    for _ in range(2):
        opt.apply_gradients([
            (torch.tensor([2.0, 8.0]), w),
            (slotopt.IndexedSlices(torch.tensor([[1.0], [2.0]]), [2, 2], (3, 1)), table),
        ])
    # velocity 2 then 3 (clip 8 -> 4: 4 then 6); lr 0.5 then 0.25
    assert w.tolist() == [1.0 - 0.5 * 2 - 0.25 * 3, 1.0 - 0.5 * 4 - 0.25 * 6]
    assert table.flatten().tolist() == [0.0, 0.0, -0.5 * 3 - 0.25 * 4.5]  # duplicates summed: g = 3
    assert opt.get_slot_names() == ["velocity"]
    assert HeavyBall.from_config(opt.get_config()).get_config() == opt.get_config()
    assert int(opt.iterations) == 2


def test_subclass_without_a_sparse_hook_rejects_sparse_gradients_before_any_change():
    class DenseOnly(Optimizer):
        def __init__(self):
            super().__init__("DenseOnly")
            self._set_hyper("learning_rate", 1.0)

        def _resource_apply_dense(self, grad, var):
            var.sub_(grad)

    dense, table = _var([1.0]), _var([[1.0]], name="table")
    opt = DenseOnly()
    opt.apply_gradients([(torch.ones(1), dense)])
    assert dense.item() == 0.0
    before = _snapshot(opt, dense, table)
    with pytest.raises(NotImplementedError, match="does not implement `_resource_apply_sparse`.*table"):
        opt.apply_gradients([(torch.ones(1), dense), (slotopt.IndexedSlices(torch.ones(1, 1), [0], (1, 1)), table)])
    _assert_unchanged(before, opt, dense, table)


def test_step_applies_dot_grad_of_built_variables():
    model = torch.nn.Linear(2, 1)
    opt = Adagrad(0.5)
    with pytest.raises(ValueError, match="call `optimizer.build"):
        opt.step()
    opt.build(model)
    model(torch.ones(1, 2)).sum().backward()
    before = model.weight.detach().clone()
    opt.step()
    assert not torch.equal(before, model.weight) and int(opt.iterations) == 1
    opt.zero_grad()
    assert model.weight.grad is None
