"""slotopt.legacy numerics: float64 runs against numpy float64 formulas (spec §3 "LEG"), every sparse path with
duplicate indices (which rows of the variable and of the slots move, spec §7.2), and grouped vs per-variable
kernels giving identical bits."""

import math

import numpy as np
import pytest
import torch

import slotopt
from slotopt.legacy import SGD, Adadelta, Adagrad, Adam, Adamax, Ftrl, Nadam, RMSprop

F64 = torch.float64


def f32(x):
    """A hyperparameter stored in a float32 variable and read back in float64."""
    return float(np.float32(x))


# ---------------------------------------------------------------------------------------------- references
# Each reference takes the state (a dict of float64 arrays: "w" and the slots), the gradient, the step t (1 for
# the first step) and the hyperparameters exactly as the optimizer holds them, and updates the state in place.


def ref_sgd(s, g, t, lr, momentum=0.0, nesterov=False):
    if momentum:
        s["momentum"] = s["momentum"] * momentum - g * lr
        s["w"] = s["w"] + (s["momentum"] * momentum - g * lr if nesterov else s["momentum"])
    else:
        s["w"] = s["w"] - g * lr


def ref_adam(s, g, t, lr, beta_1, beta_2, epsilon, amsgrad=False):
    alpha = lr * math.sqrt(1 - beta_2**t) / (1 - beta_1**t)
    s["m"] = s["m"] + (g - s["m"]) * (1 - beta_1)
    s["v"] = s["v"] + (g * g - s["v"]) * (1 - beta_2)
    v = s["v"]
    if amsgrad:
        s["vhat"] = np.maximum(s["vhat"], s["v"])
        v = s["vhat"]
    s["w"] = s["w"] - (s["m"] * alpha) / (np.sqrt(v) + epsilon)


def ref_adamax(s, g, t, lr, beta_1, beta_2, epsilon):
    s["m"] = s["m"] + (g - s["m"]) * (1 - beta_1)
    s["v"] = np.maximum(beta_2 * s["v"], np.abs(g))
    s["w"] = s["w"] - (lr / (1 - beta_1**t)) * (s["m"] / (s["v"] + epsilon))


def ref_nadam(s, g, t, lr, beta_1, beta_2, epsilon, psi=0.004):
    mu_t = beta_1 * (1 - 0.5 * f32(0.96) ** (psi * t))
    mu_next = beta_1 * (1 - 0.5 * f32(0.96) ** (psi * (t + 1)))
    s["cache"] = s["cache"] * mu_t
    product_next = s["cache"] * mu_next
    s["m"] = beta_1 * s["m"] + (1 - beta_1) * g
    s["v"] = beta_2 * s["v"] + (1 - beta_2) * g * g
    m_bar = (1 - mu_t) * g / (1 - s["cache"]) + mu_next * s["m"] / (1 - product_next)
    s["w"] = s["w"] - lr * m_bar / (np.sqrt(s["v"] / (1 - beta_2**t)) + epsilon)


def ref_rmsprop(s, g, t, lr, rho, momentum, epsilon, centered):
    if momentum:
        s["rms"] = s["rms"] + (g * g - s["rms"]) * (1 - rho)
        d = s["rms"]
        if centered:
            s["mg"] = s["mg"] + (g - s["mg"]) * (1 - rho)
            d = s["rms"] - s["mg"] ** 2
        s["momentum"] = s["momentum"] * momentum + g * lr / np.sqrt(d + epsilon)
        s["w"] = s["w"] - s["momentum"]
    else:
        s["rms"] = rho * s["rms"] + (1 - rho) * g * g
        d = s["rms"]
        if centered:
            s["mg"] = rho * s["mg"] + (1 - rho) * g
            d = s["rms"] - s["mg"] ** 2
        s["w"] = s["w"] - lr * g / (np.sqrt(d) + epsilon)


def ref_adagrad(s, g, t, lr, epsilon):
    s["accumulator"] = s["accumulator"] + g * g
    s["w"] = s["w"] - g * lr / (np.sqrt(s["accumulator"]) + epsilon)


def ref_adadelta(s, g, t, lr, rho, epsilon):
    s["accum_grad"] = s["accum_grad"] * rho + g * g * (1 - rho)
    update = np.sqrt(s["accum_var"] + epsilon) / np.sqrt(s["accum_grad"] + epsilon) * g
    s["w"] = s["w"] - update * lr
    s["accum_var"] = s["accum_var"] * rho + update * update * (1 - rho)


def ref_ftrl(s, g, t, lr, power, l1, l2, shrinkage, beta):
    l2_adjusted = l2 + beta / (2 * lr)
    g_linear = g + 2 * shrinkage * s["w"] if shrinkage > 0 else g
    n_new = s["accumulator"] + g * g
    s["linear"] = s["linear"] + g_linear - (n_new ** -power - s["accumulator"] ** -power) / lr * s["w"]
    z = s["linear"]
    quadratic = n_new ** -power / lr + 2 * l2_adjusted
    s["w"] = np.where(np.abs(z) > l1, (l1 * np.sign(z) - z) / quadratic, 0.0)
    s["accumulator"] = n_new


# Every legacy optimizer: (constructor, reference with the hyperparameters it should see in float64, slot names,
# initial slot values other than 0, sparse semantics). Hyperparameters are representable in float32 except where noted.
CASES = {
    "sgd": (lambda: SGD(learning_rate=0.25), lambda s, g, t: ref_sgd(s, g, t, 0.25), [], None, "scatter"),
    "sgd_momentum": (lambda: SGD(learning_rate=0.25, momentum=0.75),
                     lambda s, g, t: ref_sgd(s, g, t, 0.25, 0.75), ["momentum"], None, "lazy"),
    "sgd_nesterov": (lambda: SGD(learning_rate=0.25, momentum=0.75, nesterov=True),
                     lambda s, g, t: ref_sgd(s, g, t, 0.25, 0.75, True), ["momentum"], None, "lazy"),
    "adam": (lambda: Adam(learning_rate=0.125, beta_1=0.75, beta_2=0.875, epsilon=1e-3),
             lambda s, g, t: ref_adam(s, g, t, 0.125, 0.75, 0.875, 1e-3), ["m", "v"], None, "dense"),
    "adam_amsgrad": (lambda: Adam(learning_rate=0.125, beta_1=0.75, beta_2=0.875, epsilon=1e-3, amsgrad=True),
                     lambda s, g, t: ref_adam(s, g, t, 0.125, 0.75, 0.875, 1e-3, True), ["m", "v", "vhat"], None,
                     "dense"),
    "adam_default_betas": (lambda: Adam(learning_rate=0.1),  # 0.9 / 0.999 go through float32
                           lambda s, g, t: ref_adam(s, g, t, f32(0.1), f32(0.9), f32(0.999), 1e-7), ["m", "v"],
                           None, "dense"),
    "adamax": (lambda: Adamax(learning_rate=0.125, beta_1=0.75, beta_2=0.875, epsilon=1e-3),
               lambda s, g, t: ref_adamax(s, g, t, 0.125, 0.75, 0.875, 1e-3), ["m", "v"], None, "lazy"),
    "nadam": (lambda: Nadam(learning_rate=0.125, beta_1=0.75, beta_2=0.875, epsilon=1e-3),
              lambda s, g, t: ref_nadam(s, g, t, 0.125, 0.75, 0.875, 1e-3, psi=0.004), ["m", "v"], None,
              "decay_all_rows"),
    "rmsprop": (lambda: RMSprop(learning_rate=0.125, rho=0.75, epsilon=1e-3),
                lambda s, g, t: ref_rmsprop(s, g, t, 0.125, 0.75, 0.0, 1e-3, False), ["rms"], None,
                "decay_all_rows"),
    "rmsprop_centered": (lambda: RMSprop(learning_rate=0.125, rho=0.75, epsilon=1e-3, centered=True),
                         lambda s, g, t: ref_rmsprop(s, g, t, 0.125, 0.75, 0.0, 1e-3, True), ["rms", "mg"], None,
                         "decay_all_rows"),
    "rmsprop_momentum": (lambda: RMSprop(learning_rate=0.125, rho=0.75, momentum=0.5, epsilon=1e-3),
                         lambda s, g, t: ref_rmsprop(s, g, t, 0.125, 0.75, 0.5, 1e-3, False), ["rms", "momentum"],
                         None, "lazy"),
    "rmsprop_centered_momentum": (
        lambda: RMSprop(learning_rate=0.125, rho=0.75, momentum=0.5, epsilon=1e-3, centered=True),
        lambda s, g, t: ref_rmsprop(s, g, t, 0.125, 0.75, 0.5, 1e-3, True), ["rms", "momentum", "mg"], None, "lazy"),
    "adagrad": (lambda: Adagrad(learning_rate=0.25, initial_accumulator_value=0.5, epsilon=1e-3),
                lambda s, g, t: ref_adagrad(s, g, t, 0.25, 1e-3), ["accumulator"], {"accumulator": 0.5}, "lazy"),
    "adadelta": (lambda: Adadelta(learning_rate=0.5, rho=0.75, epsilon=1e-3),
                 lambda s, g, t: ref_adadelta(s, g, t, 0.5, 0.75, 1e-3), ["accum_grad", "accum_var"], None, "lazy"),
    "ftrl": (lambda: Ftrl(learning_rate=0.25, initial_accumulator_value=0.5),
             lambda s, g, t: ref_ftrl(s, g, t, 0.25, -0.5, 0.0, 0.0, 0.0, 0.0), ["accumulator", "linear"], {"accumulator": 0.5},
             "lazy"),
    "ftrl_all_terms": (
        lambda: Ftrl(learning_rate=0.25, learning_rate_power=-0.25, initial_accumulator_value=0.5,
                     l1_regularization_strength=0.125, l2_regularization_strength=0.25,
                     l2_shrinkage_regularization_strength=0.0625, beta=0.5),
        lambda s, g, t: ref_ftrl(s, g, t, 0.25, -0.25, 0.125, 0.25, 0.0625, 0.5), ["accumulator", "linear"], {"accumulator": 0.5},
        "lazy"),
}

INIT = np.array([[0.5, -1.0], [1.5, 2.0], [-0.25, 0.75], [1.0, -2.0], [0.125, 0.5]])
GRADS = [
    np.array([[0.5, -0.25], [1.0, 2.0], [-1.5, 0.75], [0.25, 0.5], [2.0, -1.0]]),
    np.array([[-1.0, 0.5], [0.25, -0.75], [0.5, 0.5], [-2.0, 1.0], [0.125, 0.25]]),
    np.array([[0.75, 1.25], [-0.5, 0.125], [1.0, -1.0], [0.5, -0.5], [-0.25, 2.5]]),
]


def _state(opt, var, slot_names):
    state = {"w": var.detach().numpy().copy()}
    for name in slot_names:
        state[name] = opt.get_slot(var, name).detach().numpy().copy()
    return state


@pytest.mark.parametrize("case", list(CASES))
def test_dense_float64_matches_numpy_reference(case):
    make, reference, slot_names, initial, _ = CASES[case]
    opt = make()
    w = slotopt.Variable(torch.tensor(INIT, dtype=F64), name="w")
    b = slotopt.Variable(torch.tensor([0.5, -0.5], dtype=F64), name="b")
    initial = initial or {}
    expected = {"w": INIT.copy(), **{n: np.full_like(INIT, initial.get(n, 0.0)) for n in slot_names}, "cache": 1.0}
    expected_b = {"w": np.array([0.5, -0.5]), **{n: np.full(2, initial.get(n, 0.0)) for n in slot_names},
                  "cache": 1.0}
    for t, g in enumerate(GRADS, start=1):
        opt.apply_gradients([(torch.tensor(g, dtype=F64), w), (torch.tensor(g[0], dtype=F64), b)])
        reference(expected, g, t)
        reference(expected_b, g[0], t)
        expected_b["cache"] = expected["cache"]  # Nadam: one momentum cache per optimizer
        np.testing.assert_allclose(w.detach().numpy(), expected["w"], rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(b.detach().numpy(), expected_b["w"], rtol=1e-13, atol=1e-15)
    for name in slot_names:
        np.testing.assert_allclose(opt.get_slot(w, name).detach().numpy(), expected[name], rtol=1e-13, atol=1e-15)
    assert int(opt.iterations) == 3


@pytest.mark.parametrize("case", list(CASES))
def test_sparse_duplicates_move_the_rows_the_spec_says(case):
    """A dense warm-up step, then IndexedSlices with indices [3, 1, 3] (rows 1 and 3 touched)."""
    make, reference, slot_names, initial, mode = CASES[case]
    opt = make()
    w = slotopt.Variable(torch.tensor(INIT, dtype=F64), name="table")
    opt.apply_gradients([(torch.tensor(GRADS[0], dtype=F64), w)])
    before = _state(opt, w, slot_names)
    if case == "nadam":
        before["cache"] = float(opt.weights[1])
    values = np.array([[0.5, -1.0], [0.25, 0.75], [-1.5, 0.5]])
    indices = [3, 1, 3]
    summed = np.zeros_like(INIT)
    np.add.at(summed, indices, values)
    opt.apply_gradients([(slotopt.IndexedSlices(torch.tensor(values, dtype=F64), torch.tensor(indices),
                                                INIT.shape), w)])
    after = _state(opt, w, slot_names)
    touched, untouched = [1, 3], [0, 2, 4]

    expected = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in before.items()}
    if mode in ("lazy", "scatter"):
        rows = {k: v[touched] for k, v in expected.items() if isinstance(v, np.ndarray)}
        reference(rows, summed[touched], 2)
        for k in rows:
            expected[k][touched] = rows[k]
    else:  # Adam: all of it dense; Nadam / RMSprop without momentum: dense moments, touched rows of w only
        reference(expected, summed, 2)
        if mode == "decay_all_rows":
            expected["w"][untouched] = before["w"][untouched]
    for k in ["w", *slot_names]:
        np.testing.assert_allclose(after[k], expected[k], rtol=1e-13, atol=1e-15, err_msg=k)

    # Which rows moved at all, compared bit for bit.
    w_moved = not np.array_equal(after["w"][untouched], before["w"][untouched])
    assert w_moved == (mode == "dense")
    assert np.array_equal(after["w"][touched], before["w"][touched]) is False
    for name in slot_names:
        if name == "vhat":  # max(vhat, decayed v) keeps vhat on untouched rows
            continue
        slot_moved = not np.array_equal(after[name][untouched], before[name][untouched])
        assert slot_moved == (mode in ("dense", "decay_all_rows")), name


def test_sparse_sgd_adds_duplicate_rows_one_at_a_time():
    """Plain SGD scatter-adds each slice in turn: (w + (-g1)*lr) + (-g2)*lr, not w - (g1 + g2)*lr."""
    w0 = np.float32(1.0)
    g1, g2, lr = np.float32(0.3), np.float32(0.7), np.float32(0.1)
    w = slotopt.Variable(torch.tensor([[w0], [0.0]], dtype=torch.float32), name="w")
    SGD(learning_rate=0.1).apply_gradients([(slotopt.IndexedSlices(torch.tensor([[g1], [g2]]), [0, 0], (2, 1)), w)])
    one_at_a_time = np.float32(np.float32(w0 + np.float32(-g1 * lr)) + np.float32(-g2 * lr))
    summed_first = np.float32(w0 - np.float32(np.float32(g1 + g2) * lr))
    assert one_at_a_time != summed_first  # the two orders differ for these numbers
    assert w[0, 0].item() == one_at_a_time
    assert w[1, 0].item() == 0.0


def test_torch_sparse_coo_gradient_is_the_same_as_indexed_slices():
    values = torch.tensor([[0.5, -1.0], [0.25, 0.75], [-1.5, 0.5]], dtype=F64)
    coo = torch.sparse_coo_tensor(torch.tensor([[3, 1, 3]]), values, INIT.shape, check_invariants=True)
    results = []
    for grad in (coo, slotopt.IndexedSlices(values, [3, 1, 3], INIT.shape)):
        w = slotopt.Variable(torch.tensor(INIT, dtype=F64), name="w")
        Adagrad(learning_rate=0.5).apply_gradients([(grad, w)])
        results.append(w.detach().clone())
    assert torch.equal(results[0], results[1])


def test_float64_variables_see_float32_hyperparameters_and_float64_epsilon():
    """beta_1 = 0.9 reaches a float64 variable as float64(float32(0.9)); epsilon stays a float64 literal."""
    w = slotopt.Variable(torch.tensor([1.0], dtype=F64), name="w")
    opt = Adam(learning_rate=0.1, epsilon=1e-7)
    opt.apply_gradients([(torch.tensor([0.5], dtype=F64), w)])
    m = opt.get_slot(w, "m").item()
    v = opt.get_slot(w, "v").item()
    assert m == 0.5 * (1 - f32(0.9))
    assert v == 0.25 * (1 - f32(0.999))
    assert m != 0.5 * (1 - 0.9)


def test_float32_adam_uses_the_f_form_of_one_minus_beta():
    """After one step with g=1 the second moment is 1 - float32(0.999) computed in float32 (spec §0.4)."""
    w = slotopt.Variable(torch.tensor([1.0]), name="w")
    opt = Adam()
    opt.apply_gradients([(torch.tensor([1.0]), w)])
    assert opt.get_slot(w, "v").item() == 0.0009999871253967285


MIXED_CASES = ["sgd_momentum", "adam_amsgrad", "adamax", "nadam", "rmsprop_centered", "rmsprop_centered_momentum",
               "adagrad", "adadelta", "ftrl_all_terms"]


class _PerVariable:
    """Mixin: a subclass overriding ``_resource_apply_dense`` (so the base runs it variable by variable)."""

    def _resource_apply_dense(self, grad, var, apply_state=None):
        return super()._resource_apply_dense(grad, var, apply_state)


@pytest.mark.parametrize("case", MIXED_CASES)
def test_grouped_kernels_equal_per_variable_updates_bit_for_bit(case):
    make = CASES[case][0]
    torch.manual_seed(0)
    inits = [torch.randn(4, 3), torch.randn(3), torch.randn(2, 2, dtype=F64), torch.randn(5)]
    grads = [[torch.randn_like(x) for x in inits] for _ in range(3)]
    results = []
    for mode in ("grouped", "foreach_off", "per_variable"):
        opt = make()
        if mode == "per_variable":
            opt.__class__ = type("PerVariable" + type(opt).__name__, (_PerVariable, type(opt)), {})
        if mode == "foreach_off":
            opt.foreach = False
        variables = [slotopt.Variable(x, name=f"v{i}") for i, x in enumerate(inits)]
        for step in grads:
            opt.apply_gradients(zip(step, variables))
        results.append([v.detach().clone() for v in variables] + [w.detach().clone() for w in opt.weights])
    for other in results[1:]:
        assert len(other) == len(results[0])
        for a, b in zip(results[0], other):
            assert torch.equal(a, b)


def test_float16_variables_update_in_their_own_dtype():
    w = slotopt.Variable(torch.tensor([1.0, -1.0], dtype=torch.float16), name="w")
    opt = Adam(learning_rate=0.125)
    opt.apply_gradients([(torch.tensor([0.5, -0.5], dtype=torch.float16), w)])
    assert w.dtype == torch.float16 and opt.get_slot(w, "m").dtype == torch.float16
    np.testing.assert_allclose(w.detach().float().numpy(), [0.875, -0.875], rtol=1e-3)
