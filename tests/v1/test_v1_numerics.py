"""TF1 optimizers against NumPy float64 references written from the spec (tf1_optimizers.md §2).

Every reference below follows the spec's formulas op by op in the stated order, with Python-float
hyperparameters rounded through float32 first (§0.4). float64 results must be bit-identical.
"""

import math

import numpy as np
import pytest
import torch

import slotopt
from slotopt import IndexedSlices
from slotopt.v1 import (
    AdadeltaOptimizer,
    AdagradDAOptimizer,
    AdagradOptimizer,
    AdamOptimizer,
    FtrlOptimizer,
    GradientDescentOptimizer,
    MomentumOptimizer,
    ProximalAdagradOptimizer,
    ProximalGradientDescentOptimizer,
    RMSPropOptimizer,
)

STEPS = 4
DENSE_SHAPE = (5, 3)
ROWS_SHAPE = (6, 4)
ROWS_INDICES = [1, 4, 1, 0, 4, 4]  # duplicates: 1 twice, 4 three times
SCALAR_SHAPE = (7,)
SCALAR_INDICES = [2, 5, 2, 6]


def f32(x):
    """⟦x⟧: a Python float hyperparameter as TF1 uses it on a float64 variable."""
    return float(np.float32(x))


def dedup(indices, values):
    """Unique indices in first-occurrence order; duplicates summed from zero in input order (§1.7)."""
    order, where = [], {}
    for i in indices:
        if i not in where:
            where[i] = len(order)
            order.append(i)
    summed = np.zeros((len(order),) + values.shape[1:])
    for k, i in enumerate(indices):
        summed[where[i]] = summed[where[i]] + values[k]
    return order, summed


def rsqrt(x):
    return 1.0 / np.sqrt(x)


def initial(shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape)


def dense_grads(shape, seed=1):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=shape) for _ in range(STEPS)]


def sparse_values(shape, indices, seed=2):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(len(indices),) + shape[1:]) for _ in range(STEPS)]


def run_slotopt(opt, w0, grads, indices=None, global_step=None):
    var = slotopt.Variable(torch.tensor(w0, dtype=torch.float64), name="w")
    for g in grads:
        grad = torch.tensor(g, dtype=torch.float64)
        if indices is not None:
            grad = IndexedSlices(grad, torch.tensor(indices), tuple(var.shape))
        opt.apply_gradients([(grad, var)], global_step=global_step)
    return var


def run_reference(ref, w0, grads, indices=None):
    w = w0.copy()
    state = ref.init(w)
    for t, g in enumerate(grads):
        if indices is None:
            ref.dense(w, state, g, t)
        elif getattr(ref, "scatter", None):
            ref.scatter(w, state, indices, g, t)
        else:
            rows, summed = dedup(indices, g)
            ref.rows(w, state, rows, summed, w.ndim == 1, t)
        ref.finish(state)
    return w, state


class Ref:
    def init(self, w):
        return {}

    def finish(self, state):
        pass


# ------------------------------------------------------------------------------------------ references (§2)
class GDRef(Ref):
    def __init__(self, lr):
        self.lr = f32(lr)

    def dense(self, w, s, g, t):
        w -= g * self.lr

    def scatter(self, w, s, indices, values, t):
        for k, i in enumerate(indices):
            w[i] = w[i] + ((-values[k]) * self.lr)


class MomentumRef(Ref):
    def __init__(self, lr, mu, nesterov=False):
        self.lr, self.mu, self.nesterov = f32(lr), f32(mu), nesterov

    def init(self, w):
        return {"momentum": np.zeros_like(w)}

    def dense(self, w, s, g, t):
        a = s["momentum"]
        a[...] = (a * self.mu) + g
        w -= ((g * self.lr) + ((a * self.mu) * self.lr)) if self.nesterov else (a * self.lr)

    def rows(self, w, s, rows, gs, scalar, t):
        a, lr, mu = s["momentum"], self.lr, self.mu
        for r, g in zip(rows, gs):
            a[r] = (a[r] * mu) + g
            w[r] = w[r] - (((lr * g) + ((lr * mu) * a[r])) if self.nesterov else (lr * a[r]))


class AdamRef(Ref):
    def __init__(self, lr=0.001, b1=0.9, b2=0.999, eps=1e-8, graph=False):
        self.lr, self.b1, self.b2, self.eps = f32(lr), f32(b1), f32(b2), f32(eps)
        self.b1_32, self.b2_32 = np.float32(b1), np.float32(b2)
        self.graph = graph

    def init(self, w):
        return {"m": np.zeros_like(w), "v": np.zeros_like(w), "b1p": self.b1_32, "b2p": self.b2_32}

    def alpha(self, s):
        b1p, b2p = float(s["b1p"]), float(s["b2p"])
        return (self.lr * math.sqrt(1 - b2p)) / (1 - b1p)

    def dense(self, w, s, g, t):
        m, v = s["m"], s["v"]
        m += (g - m) * (1 - self.b1)
        v += (g * g - v) * (1 - self.b2)
        w -= (m * self.alpha(s)) / (np.sqrt(v) + self.eps)

    def rows(self, w, s, rows, gs, scalar, t):
        m, v = s["m"], s["v"]
        m[...] = m * self.b1
        v[...] = v * self.b2
        for r, g in zip(rows, gs):
            m[r] = m[r] + (g * (1 - self.b1))
            v[r] = v[r] + ((g * (g * (1 - self.b2))) if self.graph else ((g * g) * (1 - self.b2)))
        w -= (self.alpha(s) * m) / (np.sqrt(v) + self.eps)

    def finish(self, s):
        s["b1p"] = np.float32(s["b1p"] * self.b1_32)
        s["b2p"] = np.float32(s["b2p"] * self.b2_32)


class AdagradRef(Ref):
    def __init__(self, lr, iav=0.1):
        self.lr, self.iav = f32(lr), iav

    def init(self, w):
        return {"accumulator": np.full_like(w, self.iav)}

    def dense(self, w, s, g, t):
        acc = s["accumulator"]
        acc += g * g
        w -= (g * self.lr) * rsqrt(acc)

    def rows(self, w, s, rows, gs, scalar, t):
        acc = s["accumulator"]
        for r, g in zip(rows, gs):
            acc[r] = acc[r] + g * g
            w[r] = w[r] - (((self.lr * g) / np.sqrt(acc[r])) if scalar else ((self.lr * g) * rsqrt(acc[r])))


class AdadeltaRef(Ref):
    def __init__(self, lr=0.001, rho=0.95, eps=1e-8):
        self.lr, self.rho, self.eps = f32(lr), f32(rho), f32(eps)

    def init(self, w):
        return {"accum": np.zeros_like(w), "accum_update": np.zeros_like(w)}

    def _step(self, w, accum, accum_update, g):
        accum = (accum * self.rho) + ((g * g) * (1 - self.rho))
        upd = (np.sqrt(accum_update + self.eps) * rsqrt(accum + self.eps)) * g
        w = w - (upd * self.lr)
        accum_update = (accum_update * self.rho) + ((upd * upd) * (1 - self.rho))
        return w, accum, accum_update

    def dense(self, w, s, g, t):
        w[...], s["accum"][...], s["accum_update"][...] = self._step(w, s["accum"], s["accum_update"], g)

    def rows(self, w, s, rows, gs, scalar, t):
        for r, g in zip(rows, gs):
            w[r], s["accum"][r], s["accum_update"][r] = self._step(w[r], s["accum"][r], s["accum_update"][r], g)


class RMSPropRef(Ref):
    def __init__(self, lr, decay=0.9, momentum=0.0, eps=1e-10, centered=False):
        self.lr, self.rho, self.mu, self.eps = f32(lr), f32(decay), f32(momentum), f32(eps)
        self.centered = centered

    def init(self, w):
        s = {"rms": np.ones_like(w), "momentum": np.zeros_like(w)}
        if self.centered:
            s["mg"] = np.zeros_like(w)
        return s

    def dense(self, w, s, g, t):
        ms, mom = s["rms"], s["momentum"]
        ms += (g * g - ms) * (1 - self.rho)
        if self.centered:
            mg = s["mg"]
            mg += (g - mg) * (1 - self.rho)
            den = (ms - mg * mg) + self.eps
        else:
            den = ms + self.eps
        mom[...] = (mom * self.mu) + ((g * self.lr) / np.sqrt(den))
        w -= mom

    def rows(self, w, s, rows, gs, scalar, t):
        ms, mom = s["rms"], s["momentum"]
        for r, g in zip(rows, gs):
            ms[r] = (ms[r] * self.rho) + ((g * g) * (1 - self.rho))
            if self.centered:
                mg = s["mg"]
                mg[r] = (mg[r] * self.rho) + (g * (1 - self.rho))
                den = (ms[r] + self.eps) - mg[r] * mg[r]
            else:
                den = ms[r] + self.eps
            mom[r] = (mom[r] * self.mu) + ((rsqrt(den) * self.lr) * g)
            w[r] = w[r] - mom[r]


class FtrlRef(Ref):
    def __init__(self, lr, power=-0.5, iav=0.1, l1=0.0, l2=0.0, l2s=0.0, beta=0.0):
        self.lr, self.p, self.iav = f32(lr), f32(power), iav
        self.l1, self.l2s = f32(l1), f32(l2s)
        # adjusted l2 in float32 arithmetic (the dtype of the Python-float lr tensor), then cast
        l2a = np.float32(l2) + np.float32(beta) / (np.float32(2.0) * np.maximum(np.float32(lr), np.float32(1e-36)))
        self.l2a = float(np.float32(l2a))
        self.v2 = l2s > 0

    def P(self, x):
        return np.sqrt(x) if self.p == -0.5 else np.power(x, -self.p)

    def init(self, w):
        return {"accum": np.full_like(w, self.iav), "linear": np.zeros_like(w)}

    def dense(self, w, s, g, t):
        n, z = s["accum"], s["linear"]
        gh = g + ((2 * self.l2s) * w) if self.v2 else g
        n_new = n + (g * g)
        z += gh - (((self.P(n_new) - self.P(n)) / self.lr) * w)
        x = (self.l1 * np.sign(z)) - z
        y = (self.P(n_new) / self.lr) + (2 * self.l2a)
        w[...] = np.where(np.abs(z) > self.l1, x / y, 0.0)
        n[...] = n + (g * g)

    def rows(self, w, s, rows, gs, scalar, t):
        n, z = s["accum"], s["linear"]
        for r, g in zip(rows, gs):
            gh = g + ((2 * self.l2s) * w[r]) if self.v2 else g
            n_new = n[r] + g * g
            sigma = (self.P(n_new) - self.P(n[r])) / self.lr
            z_new = ((z[r] + gh) - (sigma * w[r])) if scalar else (z[r] + (gh - (sigma * w[r])))
            y = (self.P(n_new) / self.lr) + (2 * self.l2a)
            w[r] = (np.clip(z_new, -self.l1, self.l1) - z_new) / y
            n[r], z[r] = n_new, z_new


def fobos(prox, threshold, denominator, l1):
    if l1 > 0:
        return (np.sign(prox) * np.maximum(np.abs(prox) - threshold, 0.0)) / denominator
    return prox / denominator


class ProximalGDRef(Ref):
    def __init__(self, lr, l1=0.0, l2=0.0):
        self.lr, self.l1, self.l2 = f32(lr), f32(l1), f32(l2)

    def dense(self, w, s, g, t):
        w[...] = fobos(w - (g * self.lr), self.lr * self.l1, 1 + (self.l2 * self.lr), self.l1)

    def rows(self, w, s, rows, gs, scalar, t):
        for r, g in zip(rows, gs):
            w[r] = fobos(w[r] - (g * self.lr), self.lr * self.l1, 1 + (self.l2 * self.lr), self.l1)


class ProximalAdagradRef(Ref):
    def __init__(self, lr, iav=0.1, l1=0.0, l2=0.0):
        self.lr, self.iav, self.l1, self.l2 = f32(lr), iav, f32(l1), f32(l2)

    def init(self, w):
        return {"accumulator": np.full_like(w, self.iav)}

    def dense(self, w, s, g, t):
        acc = s["accumulator"]
        acc += g * g
        eta = self.lr * rsqrt(acc)
        w[...] = fobos(w - (g * eta), eta * self.l1, 1 + (self.l2 * eta), self.l1)

    def rows(self, w, s, rows, gs, scalar, t):
        acc = s["accumulator"]
        for r, g in zip(rows, gs):
            acc[r] = acc[r] + g * g
            eta = (self.lr / np.sqrt(acc[r])) if scalar else (self.lr * rsqrt(acc[r]))
            w[r] = fobos(w[r] - (g * eta), eta * self.l1, 1 + (self.l2 * eta), self.l1)


class AdagradDARef(Ref):
    def __init__(self, lr, iv=0.1, l1=0.0, l2=0.0):
        self.lr, self.iv, self.l1, self.l2 = f32(lr), iv, f32(l1), f32(l2)

    def init(self, w):
        return {"gradient_accumulator": np.zeros_like(w), "gradient_squared_accumulator": np.full_like(w, self.iv)}

    def dense(self, w, s, g, t):
        ga, gg = s["gradient_accumulator"], s["gradient_squared_accumulator"]
        step = float(np.float32(t + 1))
        ga += g
        gg += g * g
        den = (self.l2 * (step * self.lr)) + np.sqrt(gg)
        if self.l1 > 0:
            w[...] = (((self.lr * -1.0) * np.sign(ga)) * np.maximum(np.abs(ga) - (step * self.l1), 0.0)) / den
        else:
            w[...] = ((self.lr * ga) * -1.0) / den

    def rows(self, w, s, rows, gs, scalar, t):
        ga, gg = s["gradient_accumulator"], s["gradient_squared_accumulator"]
        step = float(t + 1)
        for r, g in zip(rows, gs):
            ga[r] = ga[r] + g
            gg[r] = gg[r] + g * g
            if scalar:
                den = ((step * self.l2) * self.lr) + np.sqrt(gg[r])
                if self.l1 > 0:
                    w[r] = ((np.sign(-ga[r]) * self.lr) * max(abs(ga[r]) - step * self.l1, 0.0)) / den
                else:
                    w[r] = ((-ga[r]) * self.lr) / den
            else:
                den = self.l2 + (np.sqrt(gg[r]) / (step * self.lr))
                if self.l1 > 0:
                    w[r] = ((-1.0 * np.sign(ga[r])) * np.maximum((np.abs(ga[r]) / step) - self.l1, 0.0)) / den
                else:
                    w[r] = (-1.0 * (ga[r] / step)) / den


# ------------------------------------------------------------------------------------------ cases
CASES = {
    "gd": (lambda: GradientDescentOptimizer(0.1), lambda: GDRef(0.1)),
    "momentum": (lambda: MomentumOptimizer(0.1, 0.9), lambda: MomentumRef(0.1, 0.9)),
    "momentum_nesterov": (lambda: MomentumOptimizer(0.1, 0.9, use_nesterov=True),
                          lambda: MomentumRef(0.1, 0.9, nesterov=True)),
    "adam": (lambda: AdamOptimizer(0.01), lambda: AdamRef(0.01)),
    "adam_custom": (lambda: AdamOptimizer(0.3, 0.7, 0.95, 1e-3), lambda: AdamRef(0.3, 0.7, 0.95, 1e-3)),
    "adam_graph_sparse": (lambda: AdamOptimizer(0.01, graph_mode_sparse=True), lambda: AdamRef(0.01, graph=True)),
    "adagrad": (lambda: AdagradOptimizer(0.1), lambda: AdagradRef(0.1)),
    "adagrad_iav": (lambda: AdagradOptimizer(0.3, initial_accumulator_value=0.7), lambda: AdagradRef(0.3, 0.7)),
    "adadelta": (lambda: AdadeltaOptimizer(1.0), lambda: AdadeltaRef(1.0)),
    "adadelta_custom": (lambda: AdadeltaOptimizer(0.3, rho=0.8, epsilon=1e-3),
                        lambda: AdadeltaRef(0.3, 0.8, 1e-3)),
    "rmsprop": (lambda: RMSPropOptimizer(0.01), lambda: RMSPropRef(0.01)),
    "rmsprop_momentum": (lambda: RMSPropOptimizer(0.01, momentum=0.7), lambda: RMSPropRef(0.01, momentum=0.7)),
    "rmsprop_centered": (lambda: RMSPropOptimizer(0.01, centered=True), lambda: RMSPropRef(0.01, centered=True)),
    "rmsprop_centered_momentum": (lambda: RMSPropOptimizer(0.01, decay=0.8, momentum=0.6, epsilon=1e-3,
                                                           centered=True),
                                  lambda: RMSPropRef(0.01, 0.8, 0.6, 1e-3, centered=True)),
    "ftrl": (lambda: FtrlOptimizer(0.1), lambda: FtrlRef(0.1)),
    "ftrl_l1_l2": (lambda: FtrlOptimizer(0.3, l1_regularization_strength=0.05, l2_regularization_strength=0.2),
                   lambda: FtrlRef(0.3, l1=0.05, l2=0.2)),
    "ftrl_shrinkage_beta": (lambda: FtrlOptimizer(0.3, initial_accumulator_value=0.0, l1_regularization_strength=0.01,
                                                  l2_regularization_strength=0.1,
                                                  l2_shrinkage_regularization_strength=0.3, beta=0.5),
                            lambda: FtrlRef(0.3, iav=0.0, l1=0.01, l2=0.1, l2s=0.3, beta=0.5)),
    "proximal_gd": (lambda: ProximalGradientDescentOptimizer(0.1), lambda: ProximalGDRef(0.1)),
    "proximal_gd_l1_l2": (lambda: ProximalGradientDescentOptimizer(0.3, 0.05, 0.2),
                          lambda: ProximalGDRef(0.3, 0.05, 0.2)),
    "proximal_adagrad": (lambda: ProximalAdagradOptimizer(0.1), lambda: ProximalAdagradRef(0.1)),
    "proximal_adagrad_l1_l2": (lambda: ProximalAdagradOptimizer(0.3, 0.7, 0.05, 0.2),
                               lambda: ProximalAdagradRef(0.3, 0.7, 0.05, 0.2)),
    "adagrad_da": ("da", lambda: AdagradDARef(0.1)),
    "adagrad_da_l1_l2": ("da_l1_l2", lambda: AdagradDARef(0.3, 0.7, 0.05, 0.2)),
}


def build(name):
    make, ref = CASES[name]
    step = slotopt.Variable(0, name="global_step", dtype=torch.int64)
    if make == "da":
        opt = AdagradDAOptimizer(0.1, step)
    elif make == "da_l1_l2":
        opt = AdagradDAOptimizer(0.3, step, 0.7, 0.05, 0.2)
    else:
        opt = make()
    return opt, ref(), step


def check_state(opt, var, w, state, names):
    np.testing.assert_array_equal(var.detach().numpy(), w)
    for slot_name in names:
        np.testing.assert_array_equal(opt.get_slot(var, slot_name).detach().numpy(), state[slot_name],
                                      err_msg=slot_name)


SLOT_KEYS = ("momentum", "m", "v", "accumulator", "accum", "accum_update", "rms", "mg", "linear",
             "gradient_accumulator", "gradient_squared_accumulator")


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("layout", ["dense", "rows", "scalar_rows"])
def test_float64_matches_numpy_reference_bit_for_bit(name, layout):
    opt, ref, step = build(name)
    if layout == "dense":
        w0, grads, indices = initial(DENSE_SHAPE), dense_grads(DENSE_SHAPE), None
    elif layout == "rows":
        w0, grads, indices = initial(ROWS_SHAPE), sparse_values(ROWS_SHAPE, ROWS_INDICES), ROWS_INDICES
    else:
        w0, grads, indices = initial(SCALAR_SHAPE), sparse_values(SCALAR_SHAPE, SCALAR_INDICES), SCALAR_INDICES
    var = run_slotopt(opt, w0, grads, indices, global_step=step)
    w, state = run_reference(ref, w0, grads, indices)
    check_state(opt, var, w, state, [k for k in SLOT_KEYS if k in state])
    assert int(step) == STEPS
    if isinstance(opt, AdamOptimizer):
        b1p, b2p = opt._get_beta_accumulators()
        assert b1p.dtype == torch.float32 and b2p.dtype == torch.float32
        assert float(b1p) == float(state["b1p"]) and float(b2p) == float(state["b2p"])


def test_sparse_duplicates_really_differ_from_summed_rows_for_gd():
    """GD applies duplicate rows one at a time; the result is not w - (g_a + g_b) * lr in general."""
    w0 = np.array([1.0, 0.0])
    values = [np.array([0.1, 0.2, 0.3])]
    var = run_slotopt(GradientDescentOptimizer(1.0), w0, values, [0, 0, 0])
    expected = ((1.0 + (-0.1)) + (-0.2)) + (-0.3)
    assert var[0].item() == expected
    assert expected != 1.0 - ((0.1 + 0.2) + 0.3)


def test_lazy_rows_leave_untouched_rows_and_slots_alone():
    for opt in (MomentumOptimizer(0.1, 0.9), AdagradOptimizer(0.1), RMSPropOptimizer(0.1, momentum=0.5),
                FtrlOptimizer(0.1), ProximalAdagradOptimizer(0.1), AdadeltaOptimizer(1.0)):
        var = slotopt.Variable(torch.ones(4, 2, dtype=torch.float64), name="w")
        for _ in range(2):
            opt.apply_gradients([(IndexedSlices(torch.ones(1, 2, dtype=torch.float64), torch.tensor([1]), (4, 2)),
                                  var)])
        assert var[[0, 2, 3]].eq(1).all(), type(opt).__name__
        assert not var[1].eq(1).all()


def test_adam_sparse_moves_every_row():
    var = slotopt.Variable(torch.ones(3, 2, dtype=torch.float64), name="w")
    opt = AdamOptimizer(0.1)
    opt.apply_gradients([(torch.ones(3, 2, dtype=torch.float64), var)])
    opt.apply_gradients([(IndexedSlices(torch.ones(1, 2, dtype=torch.float64), torch.tensor([0]), (3, 2)), var)])
    # rows 1 and 2 got no gradient in call 2, yet m decayed and w moved (spec §2.3)
    assert (opt.get_slot(var, "m")[1] == f32(0.9) * (1 - f32(0.9))).all()
    assert (var[1] < 1 - 0.09).all()


def test_float64_tensor_hyperparameters_are_not_rounded():
    lr = torch.tensor(0.1, dtype=torch.float64)
    var = run_slotopt(GradientDescentOptimizer(lr), np.array([1.0]), [np.array([1.0])])
    assert var.item() == 1.0 - 0.1
    var = run_slotopt(GradientDescentOptimizer(np.float64(0.1)), np.array([1.0]), [np.array([1.0])])
    assert var.item() == 1.0 - 0.1
    var = run_slotopt(GradientDescentOptimizer(0.1), np.array([1.0]), [np.array([1.0])])
    assert var.item() == 1.0 - f32(0.1) != 1.0 - 0.1


def test_rmsprop_slot_starts_at_one():
    var = slotopt.Variable(torch.zeros(2, dtype=torch.float64), name="w")
    opt = RMSPropOptimizer(0.1)
    opt.apply_gradients([(torch.zeros(2, dtype=torch.float64), var)])
    assert opt.get_slot(var, "rms").tolist() == [f32(0.9)] * 2 == [0.8999999761581421] * 2


def test_ftrl_power_other_than_half_is_close_to_numpy_pow():
    opt = FtrlOptimizer(0.2, learning_rate_power=-0.7, l1_regularization_strength=0.01)
    w0, grads = initial(DENSE_SHAPE), dense_grads(DENSE_SHAPE)
    var = run_slotopt(opt, w0, grads)
    w, _ = run_reference(FtrlRef(0.2, power=-0.7, l1=0.01), w0, grads)
    np.testing.assert_allclose(var.detach().numpy(), w, rtol=1e-14, atol=1e-15)


def test_adam_float32_matches_float32_formula():
    """In float32 every constant and every op is float32 (the spec's bit-exact case for Adam)."""
    rng = np.random.default_rng(3)
    w = rng.normal(size=(4, 3)).astype(np.float32)
    var = slotopt.Variable(torch.tensor(w), name="w")
    opt = AdamOptimizer(0.01)
    m = np.zeros_like(w)
    v = np.zeros_like(w)
    b1, b2, lr, eps, one = np.float32(0.9), np.float32(0.999), np.float32(0.01), np.float32(1e-8), np.float32(1)
    b1p, b2p = b1, b2
    for _ in range(3):
        g = rng.normal(size=w.shape).astype(np.float32)
        opt.apply_gradients([(torch.tensor(g), var)])
        alpha = (lr * np.sqrt(one - b2p)) / (one - b1p)
        m = m + (g - m) * (one - b1)
        v = v + (g * g - v) * (one - b2)
        w = w - (m * alpha) / (np.sqrt(v) + eps)
        b1p, b2p = b1p * b1, b2p * b2
    np.testing.assert_array_equal(var.detach().numpy(), w)


# ------------------------------------------------------------------------------------------ float64 widening
def _f32_rows_var(values):
    return slotopt.Variable(torch.tensor(values, dtype=torch.float32), name="w")


def test_proximal_gd_scalar_rows_divide_in_double_for_float32():
    w0 = np.array([0.7, -0.3, 0.2], dtype=np.float32)
    g = np.array([0.3, 0.9], dtype=np.float32)
    var = _f32_rows_var(w0)
    ProximalGradientDescentOptimizer(0.3, 0.05, 0.7).apply_gradients(
        [(IndexedSlices(torch.tensor(g), torch.tensor([0, 2]), (3,)), var)])
    lr, l1, l2 = np.float32(0.3), np.float32(0.05), np.float32(0.7)
    expected = w0.copy()
    for i, gi in zip([0, 2], g):
        prox = np.float32(w0[i] - lr * gi)
        num = np.float32(np.sign(prox) * np.maximum(np.abs(prox) - np.float32(lr * l1), np.float32(0)))
        expected[i] = np.float32(np.float64(num) / (1.0 + np.float64(np.float32(l2 * lr))))
    np.testing.assert_array_equal(var.detach().numpy(), expected)


def test_proximal_adagrad_scalar_rows_divide_in_double_for_float32():
    w0 = np.array([0.7, -0.3], dtype=np.float32)
    g = np.array([0.3], dtype=np.float32)
    var = _f32_rows_var(w0)
    opt = ProximalAdagradOptimizer(0.3, 0.1, 0.0, 0.7)
    opt.apply_gradients([(IndexedSlices(torch.tensor(g), torch.tensor([1]), (2,)), var)])
    lr, l2 = np.float32(0.3), np.float32(0.7)
    acc = np.float32(np.float32(0.1) + g[0] * g[0])
    eta = np.float32(lr / np.sqrt(acc))
    prox = np.float32(w0[1] - eta * g[0])
    expected = np.float32(np.float64(prox) / (1.0 + np.float64(np.float32(l2 * eta))))
    assert var[1].item() == float(expected)
    assert opt.get_slot(var, "accumulator")[1].item() == float(acc)


def test_adagrad_da_scalar_rows_in_double_for_float32():
    step = slotopt.Variable(4, name="global_step", dtype=torch.int64)
    w0 = np.array([0.7, -0.3], dtype=np.float32)
    g = np.array([0.3], dtype=np.float32)
    var = _f32_rows_var(w0)
    opt = AdagradDAOptimizer(0.3, step, 0.1, 0.05, 0.7)
    opt.apply_gradients([(IndexedSlices(torch.tensor(g), torch.tensor([1]), (2,)), var)])
    lr, l1, l2 = (float(np.float32(x)) for x in (0.3, 0.05, 0.7))
    t = 5.0
    ga = np.float32(0.0 + float(g[0]))
    gg = np.float32(float(np.float32(0.1)) + float(g[0]) * float(g[0]))
    den = (t * l2) * lr + float(np.sqrt(gg))
    expected = np.float32(((float(np.sign(-ga)) * lr) * max(abs(float(ga)) - t * l1, 0.0)) / den)
    assert var[1].item() == float(expected)
    assert var[0].item() == float(w0[0])
    assert int(step) == 4  # AdagradDA never increments global_step itself


@pytest.mark.parametrize("name", ["momentum_nesterov", "adam", "adagrad", "adadelta_custom",
                                  "rmsprop_centered_momentum", "ftrl_l1_l2", "proximal_gd_l1_l2",
                                  "proximal_adagrad_l1_l2", "adagrad_da_l1_l2"])
def test_large_tensors_run_in_cache_blocks_with_the_same_bits(name):
    opt, ref, step = build(name)
    shape = (400, 400)  # larger than one CPU block: the kernels run block by block
    w0, grads = initial(shape, seed=5), [np.random.default_rng(6 + k).normal(size=shape) for k in range(2)]
    var = run_slotopt(opt, w0, grads, global_step=step)
    w, state = run_reference(ref, w0, grads)
    check_state(opt, var, w, state, [k for k in SLOT_KEYS if k in state])
