"""The Keras 3 optimizer family beyond the recorded reference cases.

Numerics are checked on float64 variables against numpy float64 formulas written out below. Hyperparameters are
exactly representable in float32 (0.5, 0.75, 0.25, 0.125, ...), so the D-form/F-form and literal/cast rounding rules
cannot blur the comparison: any difference is a difference in the update rule itself.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

import slotopt
from slotopt.engine import naming as optimizer_module

F64 = torch.float64
RTOL, ATOL = 1e-12, 1e-14
BASE_KEYS = ["name", "learning_rate", "weight_decay", "clipnorm", "global_clipnorm", "clipvalue", "use_ema",
             "ema_momentum", "ema_overwrite_frequency", "loss_scale_factor", "gradient_accumulation_steps"]


# ---------------------------------------------------------------------------------------------------- helpers
def initial_values(shapes=((3, 2), (2,)), seed=0):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=s) for s in shapes]


def gradient_steps(shapes=((3, 2), (2,)), steps=4, seed=1):
    rng = np.random.default_rng(seed)
    return [[rng.normal(size=s) for s in shapes] for _ in range(steps)]


def make_variables(inits, dtype=F64, names=("kernel", "bias", "extra")):
    return [slotopt.Variable(torch.tensor(x, dtype=dtype), name=n) for x, n in zip(inits, names)]


def run(opt, variables, steps):
    for grads in steps:
        opt.apply_gradients([(torch.tensor(g, dtype=v.dtype), v) for g, v in zip(grads, variables)])
    return variables


def by_path(opt):
    return {v.path.split("/", 1)[1]: v for v in opt.variables}


def close(actual, expected):
    np.testing.assert_allclose(actual.detach().numpy() if isinstance(actual, torch.Tensor) else actual, expected,
                               rtol=RTOL, atol=ATOL)


def reference(update, inits, steps, make_state):
    """Runs ``update(w, g, state, t)`` (returns the new w) for each variable and step; returns (ws, states)."""
    ws = [np.array(x, dtype=np.float64) for x in inits]
    states = [make_state(w) for w in ws]
    for t, grads in enumerate(steps, start=1):
        ws = [update(w, np.asarray(g, dtype=np.float64), s, t) for w, g, s in zip(ws, grads, states)]
    return ws, states


def zeros(*names):
    return lambda w: {n: np.zeros_like(w) for n in names}


# ---------------------------------------------------------------------------------------------------- Adamax
def test_adamax_matches_float64_reference():
    lr, b1, b2, eps = 0.25, 0.5, 0.75, 0.125

    def update(w, g, s, t):
        s["m"] = s["m"] + (g - s["m"]) * (1 - b1)
        s["u"] = np.maximum(b2 * s["u"], np.abs(g))
        return w - (lr * s["m"]) / ((1 - b1 ** t) * (s["u"] + eps))

    inits, steps = initial_values(), gradient_steps()
    opt = slotopt.Adamax(learning_rate=lr, beta_1=b1, beta_2=b2, epsilon=eps, name="amx")
    variables = run(opt, make_variables(inits), steps)
    ws, states = reference(update, inits, steps, zeros("m", "u"))
    slots = by_path(opt)
    for var, w, s in zip(variables, ws, states):
        close(var, w)
        close(slots[f"{var.name}_momentum"], s["m"])
        close(slots[f"{var.name}_norm"], s["u"])


# ---------------------------------------------------------------------------------------------------- Nadam
def nadam_reference(inits, steps, lr, b1, b2, eps):
    decay = float(np.float32(0.96))  # per variable: ops.cast(0.96, var dtype) rounds through float32
    shared = {"u": 1.0, "t": 0}

    def update(w, g, s, t):
        if shared["t"] != t:  # once per step, before the variables: bare literals, exact in float64
            shared["u"] = (shared["u"] * b1) * (1.0 - 0.5 * 0.96 ** t)
            shared["t"] = t
        mu = b1 * (1.0 - 0.5 * decay ** t)
        mu_next = b1 * (1.0 - 0.5 * decay ** (t + 1))
        product, product_next = shared["u"], shared["u"] * mu_next
        s["m"] = s["m"] + (g - s["m"]) * (1 - b1)
        s["v"] = s["v"] + (g * g - s["v"]) * (1 - b2)
        m_hat = (mu_next * s["m"]) / (1 - product_next) + ((1 - mu) * g) / (1 - product)
        v_hat = s["v"] / (1 - b2 ** t)
        return w - (m_hat * lr) / (np.sqrt(v_hat) + eps)

    ws, states = reference(update, inits, steps, zeros("m", "v"))
    return ws, states, shared["u"]


def test_nadam_matches_float64_reference_including_u_product():
    lr, b1, b2, eps = 0.25, 0.5, 0.75, 0.125
    inits, steps = initial_values(), gradient_steps()
    opt = slotopt.Nadam(learning_rate=lr, beta_1=b1, beta_2=b2, epsilon=eps, name="nad")
    variables = run(opt, make_variables(inits), steps)
    ws, states, product = nadam_reference(inits, steps, lr, b1, b2, eps)
    slots = by_path(opt)
    for var, w, s in zip(variables, ws, states):
        close(var, w)
        close(slots[f"{var.name}_momentum"], s["m"])
        close(slots[f"{var.name}_velocity"], s["v"])
    u_product = opt.variables[-1]
    assert u_product.path == "nad/variable" and u_product.dtype == F64 and u_product.shape == ()
    close(u_product, product)


def test_nadam_u_product_advances_once_per_update_step_only():
    # Gradient accumulation: the first call only accumulates, so the product must not move until the second.
    w = slotopt.Variable(torch.tensor([1.0, 2.0], dtype=F64), name="w")
    opt = slotopt.Nadam(learning_rate=0.5, beta_1=0.5, gradient_accumulation_steps=2)
    opt.apply_gradients([(torch.tensor([1.0, 1.0], dtype=F64), w)])
    assert float(opt.variables[-1]) == 1.0
    opt.apply_gradients([(torch.tensor([1.0, 1.0], dtype=F64), w)])
    assert float(opt.variables[-1]) == 0.5 * (1.0 - 0.5 * 0.96)


def test_nadam_u_product_takes_dtype_of_first_variable():
    a = slotopt.Variable(torch.ones(2, dtype=torch.float32), name="a")
    b = slotopt.Variable(torch.ones(2, dtype=F64), name="b")
    opt = slotopt.Nadam()
    opt.build([a, b])
    assert opt.variables[-1].dtype == torch.float32
    opt.apply_gradients([(torch.ones(2), a), (torch.ones(2, dtype=F64), b)])
    assert torch.isfinite(a).all() and torch.isfinite(b).all()


# ---------------------------------------------------------------------------------------------------- RMSprop
@pytest.mark.parametrize("centered", [False, True])
@pytest.mark.parametrize("momentum", [0.0, 0.5])
def test_rmsprop_variants_match_float64_reference(centered, momentum):
    lr, rho, eps = 0.25, 0.75, 0.125

    def update(w, g, s, t):
        s["v"] = rho * s["v"] + (1 - rho) * g * g
        if centered:
            s["a"] = rho * s["a"] + (1 - rho) * g
            denom = (s["v"] - s["a"] * s["a"]) + eps
        else:
            denom = s["v"] + eps
        increment = (lr * g) / np.sqrt(denom)
        if momentum > 0:
            s["mom"] = momentum * s["mom"] + increment
            return w - s["mom"]
        return w - increment

    inits, steps = initial_values(), gradient_steps()
    opt = slotopt.RMSprop(learning_rate=lr, rho=rho, momentum=momentum, epsilon=eps, centered=centered, name="rms")
    variables = run(opt, make_variables(inits), steps)
    ws, states = reference(update, inits, steps, zeros("v", "a", "mom"))
    slots = by_path(opt)
    for var, w, s in zip(variables, ws, states):
        close(var, w)
        close(slots[f"{var.name}_velocity"], s["v"])
        if momentum > 0:
            close(slots[f"{var.name}_momentum"], s["mom"])
        if centered:
            close(slots[f"{var.name}_average_gradient"], s["a"])


# ---------------------------------------------------------------------------------------------------- Adagrad
def test_adagrad_matches_float64_reference():
    lr, iav, eps = 0.5, 0.25, 0.125

    def update(w, g, s, t):
        s["acc"] = s["acc"] + g * g
        return w - (lr * g) / np.sqrt(s["acc"] + eps)

    inits, steps = initial_values(), gradient_steps()
    opt = slotopt.Adagrad(learning_rate=lr, initial_accumulator_value=iav, epsilon=eps, name="ada")
    variables = run(opt, make_variables(inits), steps)
    ws, states = reference(update, inits, steps, lambda w: {"acc": np.full_like(w, iav)})
    slots = by_path(opt)
    for var, w, s in zip(variables, ws, states):
        close(var, w)
        close(slots[f"{var.name}_accumulator"], s["acc"])


def test_adagrad_accumulator_starts_at_initial_value():
    w = slotopt.Variable(torch.zeros(3, dtype=F64), name="w")
    opt = slotopt.Adagrad(initial_accumulator_value=0.75)
    opt.build([w])
    assert opt.variables[-1].tolist() == [0.75, 0.75, 0.75]


# ---------------------------------------------------------------------------------------------------- Adadelta
def test_adadelta_matches_float64_reference():
    lr, rho, eps = 0.5, 0.75, 0.125

    def update(w, g, s, t):
        s["eg"] = rho * s["eg"] + (1 - rho) * g * g
        delta = -((np.sqrt(s["ed"] + eps) * g) / np.sqrt(s["eg"] + eps))
        s["ed"] = rho * s["ed"] + (1 - rho) * delta * delta
        return w + lr * delta

    inits, steps = initial_values(), gradient_steps()
    opt = slotopt.Adadelta(learning_rate=lr, rho=rho, epsilon=eps, name="add")
    variables = run(opt, make_variables(inits), steps)
    ws, states = reference(update, inits, steps, zeros("eg", "ed"))
    slots = by_path(opt)
    for var, w, s in zip(variables, ws, states):
        close(var, w)
        close(slots[f"{var.name}_accumulated_grad"], s["eg"])
        close(slots[f"{var.name}_accumulated_delta_var"], s["ed"])


# ---------------------------------------------------------------------------------------------------- Ftrl
FTRL_OPTIONS = [
    {},
    {"l1_regularization_strength": 0.125},
    {"l1_regularization_strength": 2.0},  # large enough that some coordinates are clipped to exactly 0
    {"l2_regularization_strength": 0.25},
    {"l2_shrinkage_regularization_strength": 0.125},
    {"beta": 0.5},
    {"learning_rate_power": -0.25},
    {"learning_rate_power": 0.0},
    {"learning_rate_power": -0.25, "l1_regularization_strength": 0.125, "l2_regularization_strength": 0.25,
     "l2_shrinkage_regularization_strength": 0.125, "beta": 0.5, "initial_accumulator_value": 0.0},
]


@pytest.mark.parametrize("options", FTRL_OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "plain")
def test_ftrl_options_match_float64_reference(options):
    lr = 0.5
    hp = {"learning_rate_power": -0.5, "initial_accumulator_value": 0.25, "l1_regularization_strength": 0.0,
          "l2_regularization_strength": 0.0, "l2_shrinkage_regularization_strength": 0.0, "beta": 0.0, **options}
    p, l1, l2 = hp["learning_rate_power"], hp["l1_regularization_strength"], hp["l2_regularization_strength"]
    shrink, beta = hp["l2_shrinkage_regularization_strength"], hp["beta"]

    def update(w, g, s, t):
        l2_total = l2 + beta / (2.0 * lr)
        g_shrunk = g + 2 * shrink * w
        n_new = s["n"] + g * g
        s["z"] = s["z"] + (g_shrunk - ((n_new ** -p - s["n"] ** -p) / lr) * w)
        quadratic = n_new ** -p / lr + 2 * l2_total
        s["n"] = n_new
        return (np.clip(s["z"], -l1, l1) - s["z"]) / quadratic

    inits, steps = initial_values(), gradient_steps()
    opt = slotopt.Ftrl(learning_rate=lr, name="ftrl_t", **hp)
    variables = run(opt, make_variables(inits), steps)
    ws, states = reference(update, inits, steps,
                           lambda w: {"n": np.full_like(w, hp["initial_accumulator_value"]), "z": np.zeros_like(w)})
    slots = by_path(opt)
    for var, w, s in zip(variables, ws, states):
        close(var, w)
        close(slots[f"{var.name}_accumulator"], s["n"])
        close(slots[f"{var.name}_linear"], s["z"])
    if options.get("l1_regularization_strength") == 2.0:
        assert (variables[0] == 0).any()


# ---------------------------------------------------------------------------------------------------- Lion
def test_lion_matches_float64_reference_including_sign_of_zero():
    lr, b1, b2 = 0.25, 0.5, 0.75

    def update(w, g, s, t):
        w = w - lr * np.sign(s["m"] * b1 + g * (1 - b1))
        s["m"] = s["m"] * b2 + g * (1 - b2)
        return w

    inits = initial_values()
    steps = [[np.zeros((3, 2)), np.array([1.0, 0.0])]] + gradient_steps(steps=3)  # sign(0) = 0 on step 1
    opt = slotopt.Lion(learning_rate=lr, beta_1=b1, beta_2=b2, name="lion_t")
    variables = make_variables(inits)
    run(opt, variables, steps[:1])
    close(variables[0], inits[0])  # zero gradient and zero momentum: no move at all
    close(variables[1], inits[1] - np.array([lr, 0.0]))
    run(opt, variables, steps[1:])
    ws, states = reference(update, inits, steps, zeros("m"))
    slots = by_path(opt)
    for var, w, s in zip(variables, ws, states):
        close(var, w)
        close(slots[f"{var.name}_momentum"], s["m"])


# ---------------------------------------------------------------------------------------------------- Adafactor
def adafactor_update(lr, decay, eps1, eps2, clip):
    def rms(x):
        return np.sqrt(np.mean(x * x))

    def update(w, g, s, t):
        rho = min(lr, 1 / math.sqrt(t))
        alpha = max(eps2, rms(w)) * rho
        regulated = g * g + eps1
        b = 1 - t ** decay
        if w.ndim >= 2:
            s["r"] = b * s["r"] + (1 - b) * regulated.mean(axis=-1)
            s["c"] = b * s["c"] + (1 - b) * regulated.mean(axis=-2)
            s["v"] = (s["r"] / s["r"].mean(axis=-1, keepdims=True))[..., None] * s["c"][..., None, :]
        else:
            s["v"] = b * s["v"] + (1 - b) * regulated
        u = g / np.sqrt(s["v"])
        u = u / max(1.0, rms(u) / clip)
        return w - alpha * u

    return update


@pytest.mark.parametrize("clip_threshold", [1.0, 0.25])
def test_adafactor_matches_float64_reference(clip_threshold):
    lr, decay, eps1, eps2 = 0.5, -0.75, 1e-30, 2.0 ** -10
    shapes = ((3, 2), (2,), (2, 3, 4), ())
    inits = initial_values(shapes)
    inits[1] = np.zeros(2)  # RMS(w) = 0: the step size falls back to epsilon_2 * rho
    steps = gradient_steps(shapes)

    def state(w):
        if w.ndim >= 2:
            return {"r": np.zeros(w.shape[:-1]), "c": np.zeros(w.shape[:-2] + w.shape[-1:]), "v": np.zeros_like(w)}
        return {"v": np.zeros_like(w)}

    opt = slotopt.Adafactor(learning_rate=lr, beta_2_decay=decay, epsilon_1=eps1, epsilon_2=eps2,
                            clip_threshold=clip_threshold, name="af")
    variables = run(opt, make_variables(inits, names=("kernel", "bias", "cube", "scalar")), steps)
    ws, states = reference(adafactor_update(lr, decay, eps1, eps2, clip_threshold), inits, steps, state)
    for var, w in zip(variables, ws):
        close(var, w)
    values = opt.variables[2:]
    # kernel: r (3,), c (2,), velocity; bias: 2 placeholders, velocity; cube: r (2,3), c (2,4), velocity; scalar.
    close(values[0], states[0]["r"])
    close(values[1], states[0]["c"])
    close(values[2], states[0]["v"])
    close(values[5], states[1]["v"])
    close(values[6], states[2]["r"])
    close(values[7], states[2]["c"])
    close(values[8], states[2]["v"])
    close(values[11], states[3]["v"])


def test_adafactor_placeholders_for_rank_below_two_are_int32_scalars():
    inits = initial_values(((3, 2), (2,), ()))
    opt = slotopt.Adafactor(name="af2")
    opt.build(make_variables(inits, names=("kernel", "bias", "scalar")))
    placeholders = [opt.variables[i] for i in (5, 6, 8, 9)]
    assert [v.path for v in placeholders] == ["af2/bias", "af2/bias", "af2/scalar", "af2/scalar"]
    assert all(v.dtype == torch.int32 and v.shape == () and int(v) == 0 for v in placeholders)
    kernel_r, kernel_c = opt.variables[2], opt.variables[3]
    assert kernel_r.shape == (3,) and kernel_c.shape == (2,) and kernel_r.dtype == F64


# ---------------------------------------------------------------------------------------------------- Lamb
def lamb_update(lr, b1, b2, eps):
    def update(w, g, s, t):
        s["m"] = s["m"] + (g - s["m"]) * (1 - b1)
        s["v"] = s["v"] + (g * g - s["v"]) * (1 - b2)
        u = (s["m"] / (1 - b1 ** t)) / (np.sqrt(s["v"] / (1 - b2 ** t)) + eps)
        w_norm, u_norm = np.sqrt(np.sum(w * w)), np.sqrt(np.sum(u * u))
        ratio = w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0
        return w - (ratio * lr) * u

    return update


def test_lamb_matches_float64_reference_including_zero_norm_trust_ratio():
    lr, b1, b2, eps = 0.25, 0.5, 0.75, 0.125
    inits, steps = initial_values(), gradient_steps()
    inits[1] = np.zeros(2)  # ||w|| = 0 on the first step: trust ratio 1
    opt = slotopt.Lamb(learning_rate=lr, beta_1=b1, beta_2=b2, epsilon=eps, name="lamb_t")
    variables = run(opt, make_variables(inits), steps)
    ws, states = reference(lamb_update(lr, b1, b2, eps), inits, steps, zeros("m", "v"))
    slots = by_path(opt)
    for var, w, s in zip(variables, ws, states):
        close(var, w)
        close(slots[f"{var.name}_momentum"], s["m"])
        close(slots[f"{var.name}_velocity"], s["v"])


# ---------------------------------------------------------------------------------------------------- layout
LAYOUTS = [
    (lambda: slotopt.Adamax(name="o"), ["kernel_momentum", "kernel_norm", "bias_momentum", "bias_norm"]),
    (lambda: slotopt.Nadam(name="o"),
     ["kernel_momentum", "kernel_velocity", "bias_momentum", "bias_velocity", "variable"]),
    (lambda: slotopt.RMSprop(name="o"), ["kernel_velocity", "bias_velocity"]),
    (lambda: slotopt.RMSprop(momentum=0.5, centered=True, name="o"),
     ["kernel_velocity", "bias_velocity", "kernel_momentum", "bias_momentum", "kernel_average_gradient",
      "bias_average_gradient"]),
    (lambda: slotopt.RMSprop(centered=True, name="o"),
     ["kernel_velocity", "bias_velocity", "kernel_average_gradient", "bias_average_gradient"]),
    (lambda: slotopt.Adagrad(name="o"), ["kernel_accumulator", "bias_accumulator"]),
    (lambda: slotopt.Adadelta(name="o"),
     ["kernel_accumulated_grad", "kernel_accumulated_delta_var", "bias_accumulated_grad",
      "bias_accumulated_delta_var"]),
    (lambda: slotopt.Ftrl(name="o"), ["kernel_accumulator", "kernel_linear", "bias_accumulator", "bias_linear"]),
    (lambda: slotopt.Lion(name="o"), ["kernel_momentum", "bias_momentum"]),
    (lambda: slotopt.Adafactor(name="o"), ["kernel", "kernel", "kernel_velocity", "bias", "bias", "bias_velocity"]),
    (lambda: slotopt.Lamb(name="o"), ["kernel_momentum", "kernel_velocity", "bias_momentum", "bias_velocity"]),
]


@pytest.mark.parametrize("factory,slots", LAYOUTS, ids=[s[0] + str(len(s)) for _, s in LAYOUTS])
def test_variables_order_and_paths(factory, slots):
    opt = factory()
    variables = make_variables(initial_values())
    opt.apply_gradients([(torch.ones_like(v), v) for v in variables])
    assert [v.path for v in opt.variables] == ["o/iteration", "o/learning_rate"] + [f"o/{s}" for s in slots]
    float_slots = [v for v in opt.variables[2:] if v.is_floating_point()]
    assert all(v.dtype == F64 for v in float_slots)


@pytest.mark.parametrize("cls,prefix", [(slotopt.Adamax, "adamax"), (slotopt.Nadam, "nadam"),
                                        (slotopt.RMSprop, "rm_sprop"), (slotopt.Adagrad, "adagrad"),
                                        (slotopt.Adadelta, "adadelta"), (slotopt.Ftrl, "ftrl"),
                                        (slotopt.Lion, "lion"), (slotopt.Adafactor, "adafactor"),
                                        (slotopt.Lamb, "lamb")])
def test_default_names_are_unique_snake_case(cls, prefix):
    first, second = cls(), cls()
    assert re.fullmatch(rf"{prefix}(_\d+)?", first.name) and re.fullmatch(rf"{prefix}_\d+", second.name)
    assert first.name != second.name


# ---------------------------------------------------------------------------------------------------- config
CONFIGS = [
    (slotopt.Adamax, {"beta_1": 0.5, "beta_2": 0.75, "epsilon": 0.125}),
    (slotopt.Nadam, {"beta_1": 0.5, "beta_2": 0.75, "epsilon": 0.125}),
    (slotopt.RMSprop, {"rho": 0.5, "momentum": 0.25, "epsilon": 0.125, "centered": True}),
    (slotopt.Adagrad, {"initial_accumulator_value": 0.5, "epsilon": 0.125}),
    (slotopt.Adadelta, {"rho": 0.5, "epsilon": 0.125}),
    (slotopt.Ftrl, {"learning_rate_power": -0.25, "initial_accumulator_value": 0.5,
                    "l1_regularization_strength": 0.125, "l2_regularization_strength": 0.25,
                    "l2_shrinkage_regularization_strength": 0.5, "beta": 0.75}),
    (slotopt.Lion, {"beta_1": 0.5, "beta_2": 0.75}),
    (slotopt.Adafactor, {"beta_2_decay": -0.5, "epsilon_1": 1e-20, "epsilon_2": 0.125, "clip_threshold": 0.5,
                         "relative_step": False}),
    (slotopt.Lamb, {"beta_1": 0.5, "beta_2": 0.75, "epsilon": 0.125}),
]


@pytest.mark.parametrize("cls,options", CONFIGS, ids=[c.__name__ for c, _ in CONFIGS])
def test_get_config_keys_and_from_config_round_trip(cls, options):
    opt = cls(learning_rate=0.5, clipnorm=1.0, name="cfg", **options)
    config = opt.get_config()
    assert list(config) == BASE_KEYS + list(options)
    assert {k: config[k] for k in options} == options
    assert config["learning_rate"] == 0.5 and config["clipnorm"] == 1.0 and config["name"] == "cfg"
    clone = cls.from_config(config)
    assert type(clone) is cls and clone.get_config() == config


def test_from_config_clone_steps_like_the_original():
    opt = slotopt.Ftrl(learning_rate=0.5, l1_regularization_strength=0.125, beta=0.5)
    clone = slotopt.Ftrl.from_config(opt.get_config())
    a, b = make_variables(initial_values()), make_variables(initial_values())
    steps = gradient_steps()
    run(opt, a, steps)
    run(clone, b, steps)
    assert all(torch.equal(x, y) for x, y in zip(a, b))


# ---------------------------------------------------------------------------------------------------- sparse
FAMILY = [
    lambda: slotopt.Adamax(learning_rate=0.25),
    # Nadam rounds beta_2 to the variable's dtype first (F-form); bfloat16(0.999) is 1.0, so use 0.75.
    lambda: slotopt.Nadam(learning_rate=0.25, beta_2=0.75),
    lambda: slotopt.RMSprop(learning_rate=0.25),
    lambda: slotopt.RMSprop(learning_rate=0.25, momentum=0.5, centered=True),
    lambda: slotopt.Adagrad(learning_rate=0.25),
    lambda: slotopt.Adagrad(learning_rate=0.25, initial_accumulator_value=0.0, epsilon=0.0),
    lambda: slotopt.Adadelta(learning_rate=0.25),
    lambda: slotopt.Ftrl(learning_rate=0.25, l1_regularization_strength=0.125,
                         l2_shrinkage_regularization_strength=0.25),
    lambda: slotopt.Lion(learning_rate=0.25),
    lambda: slotopt.Adafactor(learning_rate=0.25),
    lambda: slotopt.Lamb(learning_rate=0.25, beta_2=0.75),  # bfloat16(0.999)**t = 1: 1 - b2^t would be 0
]
FAMILY_IDS = ["adamax", "nadam", "rmsprop", "rmsprop_centered_momentum", "adagrad", "adagrad_no_eps", "adadelta",
              "ftrl", "lion", "adafactor", "lamb"]


@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("factory", FAMILY, ids=FAMILY_IDS)
def test_sparse_gradient_with_unique_indices_equals_its_dense_equivalent(factory, dtype):
    # Unique, unsorted indices; with repeats Keras 3 differs from dense (tests/keras3/test_keras3_sparse.py).
    rng = np.random.default_rng(3)
    table = rng.normal(size=(5, 3))
    sparse_var = slotopt.Variable(torch.tensor(table, dtype=dtype), name="table")
    dense_var = slotopt.Variable(torch.tensor(table, dtype=dtype), name="table")
    sparse_opt, dense_opt = factory(), factory()
    for indices in ([3, 0], [4, 1, 3], [2]):
        values = torch.tensor(rng.normal(size=(len(indices), 3)), dtype=dtype)
        index = torch.tensor(indices)
        dense = torch.zeros(5, 3, dtype=dtype).index_add_(0, index, values)
        sparse_opt.apply_gradients([(slotopt.IndexedSlices(values, index, (5, 3)), sparse_var)])
        dense_opt.apply_gradients([(dense, dense_var)])
        assert torch.equal(sparse_var, dense_var) or torch.allclose(sparse_var, dense_var, rtol=0, atol=0,
                                                                     equal_nan=True)
        for s, d in zip(sparse_opt.variables, dense_opt.variables):
            assert torch.allclose(s.double(), d.double(), rtol=0, atol=0, equal_nan=True)


def test_adagrad_sparse_rows_are_updated_in_place_only_when_safe():
    assert slotopt.Adagrad()._sparse_layout == "rows"
    assert slotopt.Adagrad(initial_accumulator_value=0.0)._sparse_layout == "rows"
    assert slotopt.Adagrad(initial_accumulator_value=0.0, epsilon=0.0)._sparse_layout is None  # densified
    for factory in FAMILY[:4] + FAMILY[6:]:
        assert factory()._sparse_layout != "rows"


# ---------------------------------------------------------------------------------------------------- bfloat16
@pytest.mark.parametrize("factory", FAMILY, ids=FAMILY_IDS)
def test_bfloat16_variables_run(factory):
    inits = initial_values(((3, 2), (2,)))
    variables = make_variables(inits, dtype=torch.bfloat16)
    opt = factory()
    run(opt, variables, gradient_steps(steps=2))
    assert all(v.dtype == torch.bfloat16 for v in variables)
    assert all(s.dtype in (torch.bfloat16, torch.int32, torch.int64, torch.float32) for s in opt.variables)
    assert all(s.dtype == torch.bfloat16 for s in opt.variables[2:] if s.shape == (3, 2))
    if not isinstance(opt, slotopt.Adagrad) or opt.epsilon > 0:
        assert all(torch.isfinite(v).all() for v in variables)
    assert not torch.equal(variables[0].float(), torch.tensor(inits[0], dtype=torch.bfloat16).float())
    assert int(opt.iterations) == 2


# ---------------------------------------------------------------------------------------------------- errors
INVALID = [
    (slotopt.Ftrl, {"initial_accumulator_value": -0.1}, "`initial_accumulator_value` needs to be positive or zero"),
    (slotopt.Ftrl, {"learning_rate_power": 0.5}, "`learning_rate_power` needs to be negative or zero"),
    (slotopt.Ftrl, {"l1_regularization_strength": -1.0}, "`l1_regularization_strength` needs to be positive"),
    (slotopt.Ftrl, {"l2_regularization_strength": -1.0}, "`l2_regularization_strength` needs to be positive"),
    (slotopt.Ftrl, {"l2_shrinkage_regularization_strength": -1.0},
     "`l2_shrinkage_regularization_strength` needs to be positive"),
    (slotopt.Ftrl, {"beta": "big"}, "`beta`"),
    (slotopt.Ftrl, {"learning_rate_power": float("nan")}, "`learning_rate_power`"),
    (slotopt.Lion, {"beta_1": 0.0}, "Argument `beta_1` must be in the \\[0, 1\\] range. Otherwise, the optimizer "
                                    "degenerates to SignSGD. Received: beta_1=0.0."),
    (slotopt.Lion, {"beta_1": 1.5}, "degenerates to SignSGD. Received: beta_1=1.5"),
    (slotopt.Lion, {"beta_1": -0.5}, "`beta_1`"),
    (slotopt.Lion, {"beta_2": 2.0}, "`beta_2`"),
    (slotopt.Adamax, {"beta_1": 1.5}, "`beta_1`"),
    (slotopt.Adamax, {"epsilon": -1.0}, "`epsilon`"),
    (slotopt.Nadam, {"beta_2": -0.5}, "`beta_2`"),
    (slotopt.Lamb, {"epsilon": float("inf")}, "`epsilon`"),
    (slotopt.RMSprop, {"rho": 1.5}, "`rho`"),
    (slotopt.RMSprop, {"momentum": -0.5}, "`momentum`"),
    (slotopt.RMSprop, {"epsilon": -1.0}, "`epsilon`"),
    (slotopt.Adagrad, {"initial_accumulator_value": -1.0}, "`initial_accumulator_value`"),
    (slotopt.Adagrad, {"epsilon": float("nan")}, "`epsilon`"),
    (slotopt.Adadelta, {"rho": -0.1}, "`rho`"),
    (slotopt.Adafactor, {"clip_threshold": 0.0}, "`clip_threshold`"),
    (slotopt.Adafactor, {"epsilon_2": -1.0}, "`epsilon_2`"),
    (slotopt.Adafactor, {"beta_2_decay": float("inf")}, "`beta_2_decay`"),
]


@pytest.mark.parametrize("cls,options,message", INVALID,
                         ids=[f"{c.__name__}-{next(iter(o))}" for c, o, _ in INVALID])
def test_invalid_hyperparameter_raises_before_anything_changes(cls, options, message):
    w = slotopt.Variable(torch.tensor([1.0, 2.0]), name="w")
    counts = dict(optimizer_module._name_counts)
    with pytest.raises(ValueError, match=message) as info:
        cls(params=[w], **options)
    argument = next(iter(options))
    assert f"{argument}=" in str(info.value)  # names the argument and shows the received value
    assert optimizer_module._name_counts == counts  # not even a default name was consumed
    assert w.tolist() == [1.0, 2.0] and w.grad is None


@pytest.mark.parametrize("factory", FAMILY, ids=FAMILY_IDS)
def test_rejected_step_changes_no_state(factory):
    variables = make_variables(initial_values())
    opt = factory()
    run(opt, variables, gradient_steps(steps=1))
    before_vars = [v.detach().clone() for v in variables]
    before_state = [v.detach().clone() for v in opt.variables]
    with pytest.raises(ValueError, match="kernel"):
        opt.apply_gradients([(torch.ones(2, 3, dtype=F64), variables[0]), (torch.ones(2, dtype=F64), variables[1])])
    assert all(torch.equal(a, b) for a, b in zip(variables, before_vars))
    assert len(opt.variables) == len(before_state)
    assert all(torch.equal(a, b) for a, b in zip(opt.variables, before_state))
