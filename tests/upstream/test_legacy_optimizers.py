"""tf-keras's legacy optimizer test suites (keras-team/tf-keras, ``tf_keras/optimizers/legacy/*_test.py``), ported.

Each upstream test compares the optimizer with a NumPy reference update run in the variable's dtype, or with
literal values; both carry over here (the NumPy references are rewritten below from the formulas the upstream
files state). The float16/float32/float64 loops become parametrisations; the graph-mode/eager loops collapse
into one eager run. Complex dtypes and TF-only machinery are listed in ``NOT_APPLICABLE.md``.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from _tf_testing import DATA_TYPES, DTYPES, NP, close, close_by_type, const, slices, var

import slotopt
from slotopt import legacy

FLOATS = [torch.float32, torch.float64]


class _SparseRows(torch.autograd.Function):
    """Rows of a table whose gradient is a sparse COO tensor (torch's ``embedding`` has no complex autograd)."""

    @staticmethod
    def forward(ctx, table, indices):
        ctx.save_for_backward(indices)
        ctx.shape = table.shape
        return table[indices]

    @staticmethod
    def backward(ctx, grad):
        (indices,) = ctx.saved_tensors
        return torch.sparse_coo_tensor(indices.unsqueeze(0), grad, ctx.shape), None


def lookup_row0(table):
    """``tf.nn.embedding_lookup([table], [0])`` with a sparse gradient, as upstream's embedding losses build it."""
    if table.is_complex():
        return _SparseRows.apply(table, torch.tensor([0]))
    return F.embedding(torch.tensor([0]), table, sparse=True)


# ------------------------------------------------------------------------------------- NumPy references
def adam_np(param, g, t, m, v, lr=0.001, beta1=0.9, beta2=0.999, epsilon=1e-7, vhat=None):
    lr_t = lr * np.sqrt(1 - beta2 ** (t + 1)) / (1 - beta1 ** (t + 1))
    m_t = beta1 * m + (1 - beta1) * g
    v_t = beta2 * v + (1 - beta2) * g * g
    if vhat is None:
        return param - lr_t * m_t / (np.sqrt(v_t) + epsilon), m_t, v_t
    vhat_t = np.maximum(vhat, v_t)
    return param - lr_t * m_t / (np.sqrt(vhat_t) + epsilon), m_t, v_t, vhat_t


def adam_sparse_amsgrad_np(param, indices, g, t, m, v, vhat, lr=0.001, beta1=0.9, beta2=0.999, epsilon=1e-7):
    m_t, v_t, vhat_t, param_t = np.copy(m), np.copy(v), np.copy(vhat), np.copy(param)
    lr_t = lr * np.sqrt(1 - beta2 ** (t + 1)) / (1 - beta1 ** (t + 1))
    m_t[indices] = beta1 * m[indices] + (1 - beta1) * g
    v_t[indices] = beta2 * v[indices] + (1 - beta2) * g * g
    vhat_t = np.maximum(vhat_t, v_t)
    param_t[indices] = param[indices] - lr_t * (m_t[indices] / (np.sqrt(vhat_t[indices]) + epsilon))
    return param_t, m_t, v_t, vhat_t


def adamax_np(param, g, t, m, v, alpha=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8):
    m_t = beta1 * m + (1 - beta1) * g
    v_t = np.maximum(beta2 * v, np.abs(g))
    return param - (alpha / (1 - beta1 ** (t + 1))) * (m_t / (v_t + epsilon)), m_t, v_t


def adamax_sparse_np(param, indices, g, t, m, v, alpha=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8):
    m_t, v_t, param_t = np.copy(m), np.copy(v), np.copy(param)
    m_t[indices] = beta1 * m[indices] + (1 - beta1) * g
    v_t[indices] = np.maximum(beta2 * v[indices], np.abs(g))
    param_t[indices] = param[indices] - (alpha / (1 - beta1 ** (t + 1))) * (m_t[indices] / (v_t[indices] + epsilon))
    return param_t, m_t, v_t


def nadam_mu(t, beta1=0.9):
    return beta1 * (1 - 0.5 * 0.96 ** (0.004 * (t + 1)))


def nadam_np(param, g, t, m, v, m_cache, alpha=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8):
    mu_t, mu_t1 = nadam_mu(t, beta1), nadam_mu(t + 1, beta1)
    g_prime = g / (1 - m_cache)
    m_t = beta1 * m + (1 - beta1) * g
    v_t = beta2 * v + (1 - beta2) * g * g
    m_prime = m_t / (1 - m_cache * mu_t1)
    v_prime = v_t / (1 - beta2 ** (t + 1))
    m_bar = (1 - mu_t) * g_prime + mu_t1 * m_prime
    return param - alpha * m_bar / (np.sqrt(v_prime) + epsilon), m_t, v_t


def adagrad_np(param, accum, g, lr=0.001, epsilon=1e-7):
    accum_t = accum + g * g
    return param - lr * g / (np.sqrt(accum_t) + epsilon), accum_t


def adagrad_sparse_np(param, accum, indices, values, lr=0.001, epsilon=1e-7):
    accum_t, param_t = copy.deepcopy(accum), copy.deepcopy(param)
    for i, gv in zip(indices, values):
        accum_t[i] = accum_t[i] + gv * gv
    for i, gv in zip(indices, values):
        param_t[i] = param_t[i] - lr * gv / (np.sqrt(accum_t[i]) + epsilon)
    return param_t, accum_t


def rmsprop_np(var_, g, mg, rms, mom, lr, rho, momentum, epsilon, centered):
    rms_t = rms * rho + (1 - rho) * g * g
    if centered:
        mg_t = mg * rho + (1 - rho) * g
        denom = rms_t - mg_t * mg_t
    else:
        mg_t, denom = mg, rms_t
    if momentum > 0.0:
        mom_t = momentum * mom + lr * g / np.sqrt(denom + epsilon)
        return var_ - mom_t, mg_t, rms_t, mom_t
    return var_ - lr * g / (np.sqrt(denom) + epsilon), mg_t, rms_t, mom


def rmsprop_sparse_np(var_, indices, values, mg, rms, mom, lr, rho, momentum, epsilon, centered):
    mg_t, rms_t, mom_t, var_t = (copy.deepcopy(a) for a in (mg, rms, mom, var_))
    for i, gv in zip(indices, values):
        rms_t[i] = rms[i] * rho + (1 - rho) * gv * gv
        if centered:
            mg_t[i] = mg_t[i] * rho + (1 - rho) * gv
            denom = rms_t[i] - mg_t[i] * mg_t[i]
        else:
            denom = rms_t[i]
        if momentum > 0.0:
            mom_t[i] = momentum * mom[i] + lr * gv / np.sqrt(denom + epsilon)
            var_t[i] = var_[i] - mom_t[i]
        else:
            var_t[i] = var_[i] - lr * gv / (np.sqrt(denom) + epsilon)
    return var_t, mg_t, rms_t, mom_t


def two_vars(dtype, a=(1.0, 2.0), b=(3.0, 4.0), ga=(0.1, 0.1), gb=(0.01, 0.01)):
    n = NP[dtype]
    return (var(a, dtype, "var0"), var(b, dtype, "var1"), np.array(a, n), np.array(b, n), np.array(ga, n),
            np.array(gb, n))


# ============================================================================================= adam_test.py
@pytest.mark.parametrize("dtype", DTYPES)
def test_adam_sparse(dtype):
    # tf_keras/optimizers/legacy/adam_test.py: AdamOptimizerTest.testSparse
    n = NP[dtype]
    var0_np, var1_np = np.array([1.0, 1.0, 2.0], n), np.array([3.0, 3.0, 4.0], n)
    g0_np, g1_np = np.array([0.1, 0.0, 0.1], n), np.array([0.01, 0.0, 0.01], n)
    var0, var1 = var(var0_np, dtype, "var0"), var(var1_np, dtype, "var1")
    idx = np.array([0, 2])
    grads0, grads1 = slices(g0_np[idx], idx, [3], dtype), slices(g1_np[idx], idx, [3], dtype)
    opt = legacy.Adam()
    m0 = v0 = m1 = v1 = 0.0
    for t in range(3):
        assert int(opt.iterations) == t   # beta powers are beta ** (iterations + 1)
        opt.apply_gradients(zip([grads0, grads1], [var0, var1]))
        var0_np, m0, v0 = adam_np(var0_np, g0_np, t, m0, v0)
        var1_np, m1, v1 = adam_np(var1_np, g1_np, t, m1, v1)
        close_by_type(var0, var0_np)
        close_by_type(var1, var1_np)


@pytest.mark.parametrize("cls", ["Adam", "Adamax", "Adagrad"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_sparse_repeated_indices(cls, dtype):
    # tf_keras/optimizers/legacy/{adam,adamax,adagrad}_test.py: testSparseRepeatedIndices (Adagrad with lr 3.0)
    factory = (lambda: legacy.Adagrad(3.0)) if cls == "Adagrad" else getattr(legacy, cls)
    repeated = var([[1.0], [2.0]], dtype, "repeated")
    aggregated = var([[1.0], [2.0]], dtype, "aggregated")
    g_repeated = slices([[0.1], [0.1]], [1, 1], [2, 1], dtype)
    g_aggregated = slices([[0.2]], [1], [2, 1], dtype)
    opt_r, opt_a = factory(), factory()
    for _ in range(3):
        opt_r.apply_gradients([(g_repeated, repeated)])
        opt_a.apply_gradients([(g_aggregated, aggregated)])
        close(repeated, aggregated.detach().double().numpy())


@pytest.mark.parametrize("callable_params", [False, True], ids=["testResourceBasic", "testBasicCallableParams"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_adam_basic(dtype, callable_params):
    # tf_keras/optimizers/legacy/adam_test.py: AdamOptimizerTest.doTestBasic (testResourceBasic,
    # testBasicCallableParams)
    var0, var1, var0_np, var1_np, g0_np, g1_np = two_vars(dtype)
    opt = legacy.Adam(learning_rate=(lambda: 0.001) if callable_params else 0.001)
    m0 = v0 = m1 = v1 = 0.0
    for t in range(3):
        assert int(opt.iterations) == t
        opt.apply_gradients(zip([const(g0_np, dtype), const(g1_np, dtype)], [var0, var1]))
        var0_np, m0, v0 = adam_np(var0_np, g0_np, t, m0, v0)
        var1_np, m1, v1 = adam_np(var1_np, g1_np, t, m1, v1)
        close_by_type(var0, var0_np)
        close_by_type(var1, var1_np)


@pytest.mark.parametrize("dtype", DTYPES)
def test_adam_basic_with_amsgrad(dtype):
    # tf_keras/optimizers/legacy/adam_test.py: AdamOptimizerTest.testBasicWithAmsgrad
    var0, var1, var0_np, var1_np, g0_np, g1_np = two_vars(dtype)
    opt = legacy.Adam(amsgrad=True)
    m0 = v0 = v0hat = m1 = v1 = v1hat = 0.0
    for t in range(3):
        opt.apply_gradients(zip([const(g0_np, dtype), const(g1_np, dtype)], [var0, var1]))
        var0_np, m0, v0, v0hat = adam_np(var0_np, g0_np, t, m0, v0, vhat=v0hat)
        var1_np, m1, v1, v1hat = adam_np(var1_np, g1_np, t, m1, v1, vhat=v1hat)
        close_by_type(var0, var0_np)
        close_by_type(var1, var1_np)


@pytest.mark.parametrize("dtype", FLOATS)
def test_adam_sparse_with_amsgrad(dtype):
    # tf_keras/optimizers/legacy/adam_test.py: AdamOptimizerTest.testSparseWithAmsgrad
    m0, v0, v0hat = np.zeros((2, 1)), np.zeros((2, 1)), np.zeros((2, 1))
    indices = np.array([1])
    var0_np = np.array([[1.0], [2.0]], NP[dtype])
    repeated, aggregated = var(var0_np, dtype, "repeated"), var(var0_np, dtype, "aggregated")
    g0_np = np.array([[0.2]], NP[dtype])
    g_repeated = slices([[0.1], [0.1]], [1, 1], [2, 1], dtype)
    g_aggregated = slices(g0_np, indices, [2, 1], dtype)
    opt_r, opt_a = legacy.Adam(amsgrad=True), legacy.Adam(amsgrad=True)
    for t in range(3):
        opt_r.apply_gradients([(g_repeated, repeated)])
        opt_a.apply_gradients([(g_aggregated, aggregated)])
        var0_np, m0, v0, v0hat = adam_sparse_amsgrad_np(var0_np, indices, g0_np, t, m0, v0, v0hat)
        close_by_type(aggregated, var0_np)
        close_by_type(repeated, aggregated.detach().double().numpy(), dtype=dtype)


@pytest.mark.parametrize("schedule", [False, True],
                         ids=["testBasicWithLearningRateDecay", "testBasicWithLearningRateInverseTimeDecay"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_adam_learning_rate_decay(dtype, schedule):
    # tf_keras/optimizers/legacy/adam_test.py: AdamOptimizerTest.testBasicWithLearningRateDecay and
    # testBasicWithLearningRateInverseTimeDecay (decay=0.5, or InverseTimeDecay(0.001, 1.0, 0.5))
    var0, var1, var0_np, var1_np, g0_np, g1_np = two_vars(dtype)
    if schedule:
        lr = slotopt.schedules.InverseTimeDecay(0.001, decay_steps=1.0, decay_rate=0.5)
        opt = legacy.Adam(learning_rate=lr, beta_1=0.9, beta_2=0.999, epsilon=1e-7)
    else:
        opt = legacy.Adam(learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7, decay=0.5)
    m0 = v0 = m1 = v1 = 0.0
    for t in range(3):
        opt.apply_gradients(zip([const(g0_np, dtype), const(g1_np, dtype)], [var0, var1]))
        lr_np = 0.001 / (1 + 0.5 * t)
        var0_np, m0, v0 = adam_np(var0_np, g0_np, t, m0, v0, lr=lr_np)
        var1_np, m1, v1 = adam_np(var1_np, g1_np, t, m1, v1, lr=lr_np)
        close_by_type(var0, var0_np)
        close_by_type(var1, var1_np)


@pytest.mark.parametrize("dtype", DTYPES)
def test_adam_tensor_learning_rate(dtype):
    # tf_keras/optimizers/legacy/adam_test.py: AdamOptimizerTest.testTensorLearningRate
    var0, var1, var0_np, var1_np, g0_np, g1_np = two_vars(dtype)
    opt = legacy.Adam(torch.tensor(0.001))
    m0 = v0 = m1 = v1 = 0.0
    for t in range(3):
        opt.apply_gradients(zip([const(g0_np, dtype), const(g1_np, dtype)], [var0, var1]))
        var0_np, m0, v0 = adam_np(var0_np, g0_np, t, m0, v0)
        var1_np, m1, v1 = adam_np(var1_np, g1_np, t, m1, v1)
        close_by_type(var0, var0_np)
        close_by_type(var1, var1_np)


@pytest.mark.parametrize("cls", ["Adam", "Adamax"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_sharing(cls, dtype):
    # tf_keras/optimizers/legacy/{adam,adamax}_test.py: testSharing (two apply calls on one optimizer, alternated)
    var0, var1, var0_np, var1_np, g0_np, g1_np = two_vars(dtype)
    opt = getattr(legacy, cls)()
    m0 = v0 = m1 = v1 = 0.0
    reference = adam_np if cls == "Adam" else adamax_np
    for t in range(3):
        opt.apply_gradients(zip([const(g0_np, dtype), const(g1_np, dtype)], [var0, var1]))
        var0_np, m0, v0 = reference(var0_np, g0_np, t, m0, v0)
        var1_np, m1, v1 = reference(var1_np, g1_np, t, m1, v1)
        close_by_type(var0, var0_np)
        close_by_type(var1, var1_np)


@pytest.mark.parametrize("cls,kwargs,count", [
    ("Adam", {}, 5),                                   # adam_test.py: testSlotsUniqueEager
    ("Adamax", {}, 5),                                 # adamax_test.py: testSlotsUniqueEager
    ("RMSprop", dict(momentum=0.0, centered=False), 3),  # rmsprop_test.py: testSlotsUniqueEager
    ("RMSprop", dict(momentum=0.2, centered=False), 5),
    ("RMSprop", dict(momentum=0.2, centered=True), 7),
])
def test_slots_unique(cls, kwargs, count):
    # tf_keras/optimizers/legacy/{adam,adamax,rmsprop}_test.py: testSlotsUniqueEager
    v1, v2 = var(1.0, name="v1"), var(1.0, name="v2")
    opt = getattr(legacy, cls)(1.0, **kwargs)
    opt.minimize(lambda: v1 + v2, var_list=[v1, v2])
    assert len({id(v) for v in opt.variables()}) == count
    assert int(opt.variables()[0]) == int(opt.iterations)


@pytest.mark.parametrize("cls,kwargs", [
    ("Adam", {}), ("Adamax", {}), ("Adagrad", {}), ("Nadam", {}), ("RMSprop", {}), ("SGD", {}),
    ("SGD", {"momentum": 0.9}), ("Adadelta", dict(rho=0.9, epsilon=1.0)),
])
def test_construct_with_lr(cls, kwargs):
    # tf_keras/optimizers/legacy/*_test.py: testConstruct<Name>WithLR (Adam, Adamax, Adagrad, NAdam, RMSprop,
    # SGD, Momentum, Adadelta)
    with pytest.warns(UserWarning):
        opt = getattr(legacy, cls)(lr=1.0, **kwargs)
    with pytest.warns(UserWarning):
        opt_2 = getattr(legacy, cls)(learning_rate=0.1, lr=1.0, **kwargs)
    opt_3 = getattr(legacy, cls)(learning_rate=0.1, **kwargs)
    for o in (opt, opt_2, opt_3):
        assert isinstance(o.lr, torch.Tensor)
    close(opt.lr, 1.0)
    close(opt_2.lr, 1.0)
    close(opt_3.lr, 0.1)


# ========================================================================================== adagrad_test.py
@pytest.mark.parametrize("callable_params", [False, True], ids=["testBasic", "testBasicCallableParams"])
@pytest.mark.parametrize("dtype", DATA_TYPES)
def test_adagrad_basic(dtype, callable_params):
    # tf_keras/optimizers/legacy/adagrad_test.py: doTestBasic (testBasic, testBasicCallableParams)
    var0, var1, var0_np, var1_np, g0_np, g1_np = two_vars(dtype)
    opt = legacy.Adagrad((lambda: 3.0) if callable_params else 3.0)
    accum0, accum1 = np.array([0.1, 0.1], NP[dtype]), np.array([0.1, 0.1], NP[dtype])
    for _ in range(3):
        opt.apply_gradients(zip([const(g0_np, dtype), const(g1_np, dtype)], [var0, var1]))
        var0_np, accum0 = adagrad_np(var0_np, accum0, g0_np, 3.0)
        var1_np, accum1 = adagrad_np(var1_np, accum1, g1_np, 3.0)
        close_by_type(var0, var0_np)
        close_by_type(var1, var1_np)


@pytest.mark.parametrize("schedule", [False, True],
                         ids=["testBasicWithLearningRateDecay", "testBasicWithLearningRateInverseTimeDecay"])
@pytest.mark.parametrize("dtype", DATA_TYPES)
def test_adagrad_learning_rate_decay(dtype, schedule):
    # tf_keras/optimizers/legacy/adagrad_test.py: testBasicWithLearningRateDecay and
    # testBasicWithLearningRateInverseTimeDecay
    var0, var1, var0_np, var1_np, g0_np, g1_np = two_vars(dtype)
    if schedule:
        opt = legacy.Adagrad(slotopt.schedules.InverseTimeDecay(3.0, decay_steps=1.0, decay_rate=0.5))
    else:
        opt = legacy.Adagrad(3.0, decay=0.5)
    accum0, accum1 = np.array([0.1, 0.1], NP[dtype]), np.array([0.1, 0.1], NP[dtype])
    for t in range(3):
        opt.apply_gradients(zip([const(g0_np, dtype), const(g1_np, dtype)], [var0, var1]))
        lr_np = 3.0 / (1 + 0.5 * t)
        var0_np, accum0 = adagrad_np(var0_np, accum0, g0_np, lr_np)
        var1_np, accum1 = adagrad_np(var1_np, accum1, g1_np, lr_np)
        close_by_type(var0, var0_np)
        close_by_type(var1, var1_np)


def test_adagrad_large_epsilon():
    # tf_keras/optimizers/legacy/adagrad_test.py: testBasicWithLargeEpsilon (float64)
    var0, var1, var0_np, var1_np, g0_np, g1_np = two_vars(torch.float64)
    opt = legacy.Adagrad(3.0, epsilon=1.0)
    accum0, accum1 = np.array([0.1, 0.1]), np.array([0.1, 0.1])
    for _ in range(3):
        opt.apply_gradients(zip([const(g0_np, torch.float64), const(g1_np, torch.float64)], [var0, var1]))
        var0_np, accum0 = adagrad_np(var0_np, accum0, g0_np, 3.0, 1.0)
        var1_np, accum1 = adagrad_np(var1_np, accum1, g1_np, 3.0, 1.0)
        close_by_type(var0, var0_np)
        close_by_type(var1, var1_np)


@pytest.mark.parametrize("dtype", DATA_TYPES)
def test_adagrad_minimize_sparse(dtype):
    # tf_keras/optimizers/legacy/adagrad_test.py: testMinimizeSparseResourceVariable
    var0 = var([[1.0, 2.0], [3.0, 4.0]], dtype, "var0")
    x = const([[4.0], [5.0]], dtype)
    legacy.Adagrad(1.0).minimize(lambda: (lookup_row0(var0) @ x) ** 2, var_list=[var0])
    close_by_type(var0, [[0, 1], [3, 4]], atol=0.01)


@pytest.mark.parametrize("dtype", DATA_TYPES)
def test_adagrad_tensor_learning_rate(dtype):
    # tf_keras/optimizers/legacy/adagrad_test.py: testTensorLearningRate
    var0, var1, var0_np, var1_np, g0_np, g1_np = two_vars(dtype)
    opt = legacy.Adagrad(torch.tensor(3.0))
    accum0, accum1 = np.array([0.1, 0.1], NP[dtype]), np.array([0.1, 0.1], NP[dtype])
    for _ in range(3):
        opt.apply_gradients(zip([const(g0_np, dtype), const(g1_np, dtype)], [var0, var1]))
        var0_np, accum0 = adagrad_np(var0_np, accum0, g0_np, 3.0)
        var1_np, accum1 = adagrad_np(var1_np, accum1, g1_np, 3.0)
        close_by_type(var0, var0_np)
        close_by_type(var1, var1_np)


@pytest.mark.parametrize("dtype", DATA_TYPES)
def test_adagrad_sparse_basic(dtype):
    # tf_keras/optimizers/legacy/adagrad_test.py: testSparseBasic
    n = NP[dtype]
    var0_np, var1_np = np.array([1.0, 1.0, 2.0], n), np.array([3.0, 3.0, 4.0], n)
    g0_np, g1_np = np.array([0.1, 0, 0.1], n), np.array([0.01, 0, 0.01], n)
    var0, var1 = var(var0_np, dtype, "var0"), var(var1_np, dtype, "var1")
    idx = np.array([0, 2])
    grads0, grads1 = slices(g0_np[idx], idx, [3], dtype), slices(g1_np[idx], idx, [3], dtype)
    opt = legacy.Adagrad(3.0)
    accum0, accum1 = np.full(3, 0.1, n), np.full(3, 0.1, n)
    for _ in range(3):
        opt.apply_gradients(zip([grads0, grads1], [var0, var1]))
        var0_np, accum0 = adagrad_sparse_np(var0_np, accum0, idx, g0_np[idx], 3.0)
        var1_np, accum1 = adagrad_sparse_np(var1_np, accum1, idx, g1_np[idx], 3.0)
        close_by_type(var0, var0_np)
        close_by_type(var1, var1_np)


@pytest.mark.parametrize("dtype", DATA_TYPES)
def test_adagrad_sparse_single_var_dim(dtype):
    # tf_keras/optimizers/legacy/adagrad_test.py: testSparseSingleVarDim. Upstream gives the IndexedSlices a
    # dense_shape of [3] for a [1] variable, which TensorFlow never reads; slotopt checks dense_shape against the
    # variable (issue 11 part 3), so the port passes the variable's own shape.
    n = NP[dtype]
    var0_np, g0_np = np.array([1.0], n), np.array([0.1], n)
    var0 = var(var0_np, dtype, "var0")
    opt = legacy.Adagrad(3.0, epsilon=1.0)
    accum0 = np.array([0.1], n)
    for _ in range(3):
        opt.apply_gradients(zip([slices(g0_np, [0], [1], dtype)], [var0]))
        var0_np, accum0 = adagrad_sparse_np(var0_np, accum0, [0], g0_np, 3.0, epsilon=1.0)
        close_by_type(var0, var0_np)


@pytest.mark.parametrize("dtype", DATA_TYPES)
def test_adagrad_sparse_repeated_indices_by_embedding_lookup(dtype):
    # tf_keras/optimizers/legacy/adagrad_test.py: testSparseRepeatedIndicesByEmbeddingLookUp
    var_repeated, var_aggregated = var([1.0, 2.0], dtype, "repeated"), var([1.0, 2.0], dtype, "aggregated")
    opt_r, opt_a = legacy.Adagrad(2.0), legacy.Adagrad(2.0)
    for _ in range(3):
        # A dense lookup (upstream's embedding_lookup gradient of a non-partitioned table): row indexing, which
        # torch differentiates for complex tables too.
        opt_r.minimize(lambda: var_repeated[torch.tensor([0, 0])].sum(), var_list=[var_repeated])
        opt_a.minimize(lambda: 2 * var_aggregated[torch.tensor([0])].sum(), var_list=[var_aggregated])
        close_by_type(var_repeated, var_aggregated.detach().numpy(), dtype=dtype)


def test_adagrad_sparse_stability():
    # tf_keras/optimizers/legacy/adagrad_test.py: testSparseStability (float16; upstream re-initialises and
    # repeats the same single step 100 times)
    var0_np = np.array([[0.00872496, -0.106952, 0.110467, 0.226505, -0.0147257, -0.0105945]], np.float16)
    g0_np = np.array([[-5.91278e-05, 5.31673e-05, -2.5779e-06, 4.29153e-05, -8.4877e-05, -9.48906e-05]], np.float16)
    var0 = var(var0_np, torch.float16, "var0")
    opt = legacy.Adagrad(1.0)
    opt.apply_gradients(zip([slices(g0_np, [0], [1, 6], torch.float16)], [var0]))
    close_by_type(opt.get_slot(var0, "accumulator"), [[0.1] * 6])
    close_by_type(var0, [[0.00891194, -0.10712013, 0.11047515, 0.22636929, -0.0144573, -0.01029443]])


@pytest.mark.parametrize("dtype", DATA_TYPES)
def test_adagrad_sharing(dtype):
    # tf_keras/optimizers/legacy/adagrad_test.py: testSharing
    var0, var1, var0_np, var1_np, g0_np, g1_np = two_vars(dtype)
    opt = legacy.Adagrad(3.0)
    for _ in range(3):
        opt.apply_gradients(zip([const(g0_np, dtype), const(g1_np, dtype)], [var0, var1]))
    assert opt.get_slot(var0, "accumulator").shape == var0.shape
    assert opt.get_slot(var1, "accumulator").shape == var1.shape
    accum0, accum1 = np.array([0.1, 0.1], NP[dtype]), np.array([0.1, 0.1], NP[dtype])
    for _ in range(3):
        var0_np, accum0 = adagrad_np(var0_np, accum0, g0_np, 3.0)
        var1_np, accum1 = adagrad_np(var1_np, accum1, g1_np, 3.0)
    close_by_type(var0, var0_np)
    close_by_type(var1, var1_np)


# ========================================================================================= adadelta_test.py
@pytest.mark.parametrize("callable_params", [False, True], ids=["testResourceBasic", "testBasicCallableParams"])
@pytest.mark.parametrize("dtype", DATA_TYPES)
def test_adadelta_basic(dtype, callable_params):
    # tf_keras/optimizers/legacy/adadelta_test.py: doTestBasic (4 steps, every gradient and learning rate)
    rho, epsilon = 0.95, 1e-8
    for grad in [0.2, 0.1, 0.01]:
        for lr in [1.0, 0.5, 0.1]:
            var0, var1 = var([1.0, 2.0], dtype, "var0"), var([3.0, 4.0], dtype, "var1")
            grads = const([grad, grad], dtype)
            if callable_params:
                opt = legacy.Adadelta(learning_rate=lambda lr=lr: lr, rho=lambda: rho, epsilon=epsilon)
            else:
                opt = legacy.Adadelta(learning_rate=lr, rho=rho, epsilon=epsilon)
            accum = accum_update = 0.0
            total = 0.0
            for _ in range(4):
                opt.apply_gradients(zip([grads, grads], [var0, var1]))
                accum = accum * rho + (grad**2) * (1 - rho)
                update = np.sqrt(accum_update + epsilon) * (1.0 / np.sqrt(accum + epsilon)) * grad
                accum_update = accum_update * rho + (update**2) * (1.0 - rho)
                total += update * lr
                for v in (var0, var1):
                    close_by_type(opt.get_slot(v, "accum_grad"), [accum, accum], rtol=1e-5)
                    close_by_type(opt.get_slot(v, "accum_var"), [accum_update, accum_update], rtol=1e-5)
                close_by_type(var0, [1.0 - total, 2.0 - total], rtol=1e-5)
                close_by_type(var1, [3.0 - total, 4.0 - total], rtol=1e-5)


@pytest.mark.parametrize("dtype", DATA_TYPES)
def test_adadelta_minimize_sparse(dtype):
    # tf_keras/optimizers/legacy/adadelta_test.py: testMinimizeSparseResourceVariable
    var0 = var([[1.0, 2.0]], dtype, "var0")
    x = const([[4.0], [5.0]], dtype)
    legacy.Adadelta(1.0, 1.0, 1.0).minimize(lambda: (lookup_row0(var0) @ x) ** 2, var_list=[var0])
    close_by_type(var0, [[-111, -138]])


def test_adadelta_epsilon_values():
    # tf_keras/optimizers/legacy/adadelta_test.py: testConstructAdadeltaWithEpsilonValues
    assert legacy.Adadelta(epsilon=None).epsilon == 1e-7
    assert legacy.Adadelta(epsilon=1e-8).epsilon == 1e-8


# =========================================================================================== adamax_test.py
@pytest.mark.parametrize("dtype", DTYPES)
def test_adamax_resource_sparse(dtype):
    # tf_keras/optimizers/legacy/adamax_test.py: testResourceSparse (indices [0, 1] and [2, 1])
    n = NP[dtype]
    m0, v0, m1, v1 = (np.zeros(3, n) for _ in range(4))
    var0_np, var1_np = np.array([1.0, 2.0, 3.0], n), np.array([4.0, 5.0, 6.0], n)
    g0_np, g1_np = np.array([0.1, 0.1], n), np.array([0.01, 0.01], n)
    var0, var1 = var(var0_np, dtype, "var0"), var(var1_np, dtype, "var1")
    idx0, idx1 = np.array([0, 1]), np.array([2, 1])
    grads0, grads1 = slices(g0_np, idx0, [3], dtype), slices(g1_np, idx1, [3], dtype)
    opt = legacy.Adamax()
    for t in range(3):
        opt.apply_gradients(zip([grads0, grads1], [var0, var1]))
        var0_np, m0, v0 = adamax_sparse_np(var0_np, idx0, g0_np, t, m0, v0)
        var1_np, m1, v1 = adamax_sparse_np(var1_np, idx1, g1_np, t, m1, v1)
        close_by_type(var0, var0_np)
        close_by_type(var1, var1_np)


@pytest.mark.parametrize("decay", [None, 0.002], ids=["testBasic", "testBasicWithLearningRateDecay"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_adamax_basic(dtype, decay):
    # tf_keras/optimizers/legacy/adamax_test.py: testBasic and testBasicWithLearningRateDecay (rtol=1e-2)
    var0, var1, var0_np, var1_np, g0_np, g1_np = two_vars(dtype)
    opt = legacy.Adamax() if decay is None else legacy.Adamax(learning_rate=0.001, decay=decay)
    m0, v0, m1, v1 = np.zeros(2), np.zeros(2), np.zeros(2), np.zeros(2)
    for t in range(3):
        assert int(opt.iterations) == t
        opt.apply_gradients(zip([const(g0_np, dtype), const(g1_np, dtype)], [var0, var1]))
        lr = 0.001 / (1 + (decay or 0.0) * t)
        var0_np, m0, v0 = adamax_np(var0_np, g0_np, t, m0, v0, alpha=lr)
        var1_np, m1, v1 = adamax_np(var1_np, g1_np, t, m1, v1, alpha=lr)
        close_by_type(var0, var0_np, rtol=1e-2)
        close_by_type(var1, var1_np, rtol=1e-2)


@pytest.mark.parametrize("dtype", DTYPES)
def test_adamax_tensor_learning_rate(dtype):
    # tf_keras/optimizers/legacy/adamax_test.py: testTensorLearningRate
    var0, var1, var0_np, var1_np, g0_np, g1_np = two_vars(dtype)
    opt = legacy.Adamax(torch.tensor(0.001))
    m0 = v0 = m1 = v1 = 0.0
    for t in range(3):
        opt.apply_gradients(zip([const(g0_np, dtype), const(g1_np, dtype)], [var0, var1]))
        var0_np, m0, v0 = adamax_np(var0_np, g0_np, t, m0, v0)
        var1_np, m1, v1 = adamax_np(var1_np, g1_np, t, m1, v1)
        close_by_type(var0, var0_np)
        close_by_type(var1, var1_np)


# ============================================================================================ nadam_test.py
@pytest.mark.parametrize("sparse", [True, False], ids=["testSparse", "testBasic"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_nadam(dtype, sparse):
    # tf_keras/optimizers/legacy/nadam_test.py: testSparse (epsilon 1e-7) and testBasic
    n = NP[dtype]
    if sparse:
        var0_np, var1_np = np.array([1.0, 1.0, 2.0], n), np.array([3.0, 3.0, 4.0], n)
        g0_np, g1_np = np.array([0.1, 0, 0.1], n), np.array([0.01, 0, 0.01], n)
        idx = np.array([0, 2])
        grads = [slices(g0_np[idx], idx, [3], dtype), slices(g1_np[idx], idx, [3], dtype)]
        epsilon = 1e-7
        opt = legacy.Nadam(epsilon=epsilon)
    else:
        var0_np, var1_np = np.array([1.0, 2.0], n), np.array([3.0, 4.0], n)
        g0_np, g1_np = np.array([0.1, 0.1], n), np.array([0.01, 0.01], n)
        grads = [const(g0_np, dtype), const(g1_np, dtype)]
        epsilon = 1e-8
        opt = legacy.Nadam()
    var0, var1 = var(var0_np, dtype, "var0"), var(var1_np, dtype, "var1")
    m0 = v0 = m1 = v1 = 0.0
    mcache = 1.0
    for t in range(3):
        opt.apply_gradients(zip(grads, [var0, var1]))
        mcache = mcache * nadam_mu(t)
        var0_np, m0, v0 = nadam_np(var0_np, g0_np, t, m0, v0, mcache, epsilon=epsilon)
        var1_np, m1, v1 = nadam_np(var1_np, g1_np, t, m1, v1, mcache, epsilon=epsilon)
        close_by_type(var0, var0_np)
        close_by_type(var1, var1_np)


def test_nadam_schedule_decay():
    # tf_keras/optimizers/legacy/nadam_test.py: testConstructNAdamWithScheduleDecay
    opt = legacy.Nadam(schedule_decay=0.2)
    assert isinstance(opt.decay, torch.Tensor)
    close(opt.decay, 0.2)


# ========================================================================================== rmsprop_test.py
RMSPROP_PARAMS = [  # learning_rate, rho, momentum, epsilon, centered
    (0.05, 0.9, 0.0, 1e-3, True), (0.05, 0.9, 0.0, 1e-3, False), (0.1, 0.9, 0.0, 1e-3, True),
    (0.01, 0.9, 0.0, 1e-5, True), (0.01, 0.9, 0.9, 1e-5, True),
]


def _rmsprop_slots(opt, v, centered, momentum):
    return (opt.get_slot(v, "mg") if centered else None, opt.get_slot(v, "rms"),
            opt.get_slot(v, "momentum") if momentum > 0 else None)


@pytest.mark.parametrize("params", RMSPROP_PARAMS)
@pytest.mark.parametrize("dtype", DATA_TYPES)
def test_rmsprop_dense(dtype, params):
    # tf_keras/optimizers/legacy/rmsprop_test.py: testDense
    lr, rho, momentum, epsilon, centered = params
    n = NP[dtype]
    var0, var1, var0_np, var1_np, g0_np, g1_np = two_vars(dtype, ga=(0.1, 0.2), gb=(0.01, 0.2))
    opt = legacy.RMSprop(learning_rate=lr, rho=rho, momentum=momentum, epsilon=epsilon, centered=centered)
    state = [[np.zeros(2, n) for _ in range(3)] for _ in range(2)]
    for _ in range(3):
        opt.apply_gradients(zip([const(g0_np, dtype), const(g1_np, dtype)], [var0, var1]))
        var0_np, *state[0] = rmsprop_np(var0_np, g0_np, *state[0], lr, rho, momentum, epsilon, centered)
        var1_np, *state[1] = rmsprop_np(var1_np, g1_np, *state[1], lr, rho, momentum, epsilon, centered)
        for v, (mg_np, rms_np, mom_np) in zip((var0, var1), state):
            mg, rms, mom = _rmsprop_slots(opt, v, centered, momentum)
            if centered:
                close_by_type(mg, mg_np)
            if momentum > 0:
                close_by_type(mom, mom_np)
            close_by_type(rms, rms_np)
        close_by_type(var0, var0_np)
        close_by_type(var1, var1_np)


@pytest.mark.parametrize("schedule", [False, True],
                         ids=["testDenseWithLearningRateDecay", "testDenseWithLearningRateInverseTimeDecay"])
def test_rmsprop_learning_rate_decay(schedule):
    # tf_keras/optimizers/legacy/rmsprop_test.py: testDenseWithLearningRateDecay and
    # testDenseWithLearningRateInverseTimeDecay (float64, 2 steps)
    var0, var1, var0_np, var1_np, g0_np, g1_np = two_vars(torch.float64, ga=(0.1, 0.2), gb=(0.01, 0.2))
    kwargs = dict(rho=0.9, momentum=0.0, epsilon=1e-7, centered=False)
    if schedule:
        opt = legacy.RMSprop(learning_rate=slotopt.schedules.InverseTimeDecay(0.01, decay_steps=1.0, decay_rate=0.5),
                             **kwargs)
    else:
        opt = legacy.RMSprop(learning_rate=0.01, decay=0.5, **kwargs)
    state = [[np.zeros(2) for _ in range(3)] for _ in range(2)]
    for t in range(2):
        opt.apply_gradients(zip([const(g0_np, torch.float64), const(g1_np, torch.float64)], [var0, var1]))
        lr = 0.01 / (1 + 0.5 * t)
        var0_np, *state[0] = rmsprop_np(var0_np, g0_np, *state[0], lr, 0.9, 0.0, 1e-7, False)
        var1_np, *state[1] = rmsprop_np(var1_np, g1_np, *state[1], lr, 0.9, 0.0, 1e-7, False)
        close_by_type(opt.get_slot(var0, "rms"), state[0][1])
        close_by_type(opt.get_slot(var1, "rms"), state[1][1])
        close_by_type(var0, var0_np)
        close_by_type(var1, var1_np)


@pytest.mark.parametrize("centered,epsilon,expected,upstream", [
    (False, 0.0, [[0.0, 1.0]], "testMinimizeSparseResourceVariable"),
    (True, 1.0, [[-111, -138]], "testMinimizeSparseResourceVariableCentered"),
])
@pytest.mark.parametrize("dtype", DATA_TYPES)
def test_rmsprop_minimize_sparse(dtype, centered, epsilon, expected, upstream):
    # tf_keras/optimizers/legacy/rmsprop_test.py: <upstream>
    var0 = var([[1.0, 2.0]], dtype, "var0")
    x = const([[4.0], [5.0]], dtype)
    opt = legacy.RMSprop(learning_rate=1.0, rho=0.0, momentum=0.0, epsilon=epsilon, centered=centered)
    opt.minimize(lambda: (lookup_row0(var0) @ x) ** 2, var_list=[var0])
    close_by_type(var0, expected, atol=0.01)


@pytest.mark.parametrize("params", RMSPROP_PARAMS)
@pytest.mark.parametrize("dtype", DATA_TYPES)
def test_rmsprop_sparse(dtype, params):
    # tf_keras/optimizers/legacy/rmsprop_test.py: testSparse. Upstream's dense_shape is [1] for [2] variables
    # (never read by TensorFlow); the port passes the variables' shape [2] (slotopt checks it, issue 11 part 3).
    lr, rho, momentum, epsilon, centered = params
    n = NP[dtype]
    var0, var1, var0_np, var1_np, _, _ = two_vars(dtype)
    g0_np, g1_np = np.array([0.1], n), np.array([0.01], n)
    grads = [slices(g0_np, [0], [2], dtype), slices(g1_np, [1], [2], dtype)]
    opt = legacy.RMSprop(learning_rate=lr, rho=rho, momentum=momentum, epsilon=epsilon, centered=centered)
    state = [[np.zeros(2, n) for _ in range(3)] for _ in range(2)]
    for _ in range(3):
        opt.apply_gradients(zip(grads, [var0, var1]))
        var0_np, *state[0] = rmsprop_sparse_np(var0_np, [0], g0_np, *state[0], lr, rho, momentum, epsilon, centered)
        var1_np, *state[1] = rmsprop_sparse_np(var1_np, [1], g1_np, *state[1], lr, rho, momentum, epsilon, centered)
        for v, (mg_np, rms_np, mom_np) in zip((var0, var1), state):
            mg, rms, mom = _rmsprop_slots(opt, v, centered, momentum)
            if centered:
                close_by_type(mg, mg_np)
            if momentum > 0:
                close_by_type(mom, mom_np)
            close_by_type(rms, rms_np)
        close_by_type(var0, var0_np)
        close_by_type(var1, var1_np)


@pytest.mark.parametrize("dtype", DATA_TYPES)
def test_rmsprop_callable_params(dtype):
    # tf_keras/optimizers/legacy/rmsprop_test.py: testCallableParams. A callable momentum selects the momentum
    # branch (epsilon inside the root) even though it returns 0.
    var0, var1 = var([1.0, 2.0], dtype, "var0"), var([3.0, 4.0], dtype, "var1")
    grads0, grads1 = const([0.1, 0.1], dtype), const([0.01, 0.01], dtype)
    opt = legacy.RMSprop(lambda: 2.0, lambda: 0.9, lambda: 0.0, 1.0)
    opt.apply_gradients(zip([grads0, grads1], [var0, var1]))
    s0, s1 = 0.1 * 2.0 / math.sqrt(0.001 + 1.0), 0.01 * 2.0 / math.sqrt(0.00001 + 1.0)
    close_by_type(var0, [1.0 - s0, 2.0 - s0])
    close_by_type(var1, [3.0 - s1, 4.0 - s1])
    opt.apply_gradients(zip([grads0, grads1], [var0, var1]))
    t0, t1 = 0.1 * 2.0 / math.sqrt(0.001 * 0.9 + 0.001 + 1.0), 0.01 * 2.0 / math.sqrt(0.00001 * 0.9 + 1e-5 + 1.0)
    close_by_type(var0, [1.0 - s0 - t0, 2.0 - s0 - t0])
    close_by_type(var1, [3.0 - s1 - t1, 4.0 - s1 - t1])


def test_rmsprop_momentum_proper_value():
    # tf_keras/optimizers/legacy/rmsprop_test.py: testMomentumProperValue
    with pytest.raises(ValueError, match=r"`momentum` must be between \[0, 1\]. Received: momentum=2.5 "
                                         r"\(of type <class \'float\'>\)."):
        legacy.RMSprop(1.0, momentum=2.5, centered=False)


# ============================================================================================= ftrl_test.py
FTRL_LITERAL = {
    # upstream test: (dtypes, init0, init1, ftrl kwargs, steps, expected0, expected1)
    "testFtrlWithoutRegularization": ([torch.float32], [0.0, 0.0], [0.0, 0.0],
                                      dict(l1_regularization_strength=0.0, l2_regularization_strength=0.0), 3,
                                      [-2.60260963, -4.29698515], [-0.28432083, -0.56694895]),
    "testFtrlwithoutRegularization2": ([torch.float16, torch.float32], [1.0, 2.0], [4.0, 3.0],
                                       dict(l1_regularization_strength=0.0, l2_regularization_strength=0.0), 3,
                                       [-2.55607247, -3.98729396], [-0.28232238, -0.56096673]),
    "testFtrlWithL1": ([torch.float16, torch.float32], [1.0, 2.0], [4.0, 3.0],
                       dict(l1_regularization_strength=0.001, l2_regularization_strength=0.0), 10,
                       [-7.66718769, -10.91273689], [-0.93460727, -1.86147261]),
    "testFtrlWithBeta": ([torch.float16, torch.float32], [1.0, 2.0], [4.0, 3.0], dict(beta=0.1), 10,
                         [-6.096838, -9.162214], [-0.717741, -1.425132]),
    "testFtrlWithL2_Beta": ([torch.float16, torch.float32], [1.0, 2.0], [4.0, 3.0],
                            dict(l1_regularization_strength=0.0, l2_regularization_strength=0.1, beta=0.1), 10,
                            [-2.735487, -4.704625], [-0.294335, -0.586556]),
    "testFtrlWithL1_L2": ([torch.float16, torch.float32], [1.0, 2.0], [4.0, 3.0],
                          dict(l1_regularization_strength=0.001, l2_regularization_strength=2.0), 10,
                          [-0.24059935, -0.46829352], [-0.02406147, -0.04830509]),
    "testFtrlWithL1_L2_L2Shrinkage": ([torch.float16, torch.float32], [1.0, 2.0], [4.0, 3.0],
                                      dict(l1_regularization_strength=0.001, l2_regularization_strength=2.0,
                                           l2_shrinkage_regularization_strength=0.1), 10,
                                      [-0.22578995, -0.44345796], [-0.14378493, -0.13229476]),
}
FTRL_CASES = [(name, dt) for name, case in FTRL_LITERAL.items() for dt in case[0]]


@pytest.mark.parametrize("upstream,dtype", FTRL_CASES)
def test_ftrl_literal(upstream, dtype):
    # tf_keras/optimizers/legacy/ftrl_test.py: <upstream> (testResourceFtrlWithoutRegularization is the same case)
    _, init0, init1, kwargs, steps, expected0, expected1 = FTRL_LITERAL[upstream]
    var0, var1 = var(init0, dtype, "var0"), var(init1, dtype, "var1")
    grads0, grads1 = const([0.1, 0.2], dtype), const([0.01, 0.02], dtype)
    opt = legacy.Ftrl(3.0, initial_accumulator_value=0.1, **kwargs)
    for _ in range(steps):
        opt.apply_gradients(zip([grads0, grads1], [var0, var1]))
    close_by_type(var0, expected0)
    close_by_type(var1, expected1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_ftrl_minimize_sparse(dtype):
    # tf_keras/optimizers/legacy/ftrl_test.py: testMinimizeSparseResourceVariable
    var0 = var([[1.0, 2.0]], dtype, "var0")
    x = const([[4.0], [5.0]], dtype)
    legacy.Ftrl(1.0).minimize(lambda: (lookup_row0(var0) @ x) ** 2, var_list=[var0])
    close_by_type(var0, [[0, 1]], atol=0.01)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_ftrl_l1_l2_l2_shrinkage_sparse(dtype):
    # tf_keras/optimizers/legacy/ftrl_test.py: testFtrlWithL1_L2_L2ShrinkageSparse
    var0, var1 = var([[1.0], [2.0]], dtype, "var0"), var([[4.0], [3.0]], dtype, "var1")
    grads0, grads1 = slices([[0.1]], [0], [2, 1], dtype), slices([[0.02]], [1], [2, 1], dtype)
    opt = legacy.Ftrl(3.0, initial_accumulator_value=0.1, l1_regularization_strength=0.001,
                      l2_regularization_strength=2.0, l2_shrinkage_regularization_strength=0.1)
    for _ in range(10):
        opt.apply_gradients(zip([grads0, grads1], [var0, var1]))
    close_by_type(var0, [[-0.22578995], [2.0]])
    close_by_type(var1, [[4.0], [-0.13229476]])


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_ftrl_l2_shrinkage_does_not_change_lr_schedule(dtype):
    # tf_keras/optimizers/legacy/ftrl_test.py: testFtrlWithL2ShrinkageDoesNotChangeLrSchedule
    var0, var1 = var([1.0, 2.0], dtype, "var0"), var([1.0, 2.0], dtype, "var1")
    grads0, grads1 = const([0.1, 0.2], dtype), const([0.1, 0.2], dtype)
    common = dict(initial_accumulator_value=0.1, l1_regularization_strength=0.001, l2_regularization_strength=2.0)
    opt0 = legacy.Ftrl(3.0, l2_shrinkage_regularization_strength=0.1, **common)
    opt1 = legacy.Ftrl(3.0, **common)
    for _ in range(10):
        opt0.apply_gradients([(grads0, var0)])
        opt1.apply_gradients([(grads1, var1)])
    assert bool((var0.detach() ** 2 < var1.detach() ** 2).all())
    close_by_type(opt0.get_slot(var0, "accumulator"), opt1.get_slot(var1, "accumulator").detach().double().numpy(),
                  dtype=dtype)


def _apply_ftrl_like(opt, dtype, sparse, steps=5):
    if sparse:
        var0, var1 = var([[0.0], [0.0]], dtype, "var0"), var([[0.0], [0.0]], dtype, "var1")
        grads0, grads1 = slices([[0.1]], [0], [2, 1], dtype), slices([[0.02]], [1], [2, 1], dtype)
        apply = opt.apply_gradients
    else:
        var0, var1 = var([0.0, 0.0], dtype, "var0"), var([0.0, 0.0], dtype, "var1")
        grads0, grads1 = const([0.1, 0.2], dtype), const([0.01, 0.02], dtype)
        apply = opt.apply_gradients
    for _ in range(steps):
        apply(list(zip([grads0, grads1], [var0, var1])))
    return var0, var1


@pytest.mark.parametrize("upstream,power,sparse,other", [
    ("testEquivAdagradwithoutRegularization", -0.5, False, "adagrad"),
    ("testEquivSparseAdagradwithoutRegularization", -0.5, True, "adagrad"),
    ("testEquivSparseGradientDescentwithoutRegularization", -0.0, True, "sgd"),
    ("testEquivGradientDescentwithoutRegularization", -0.0, False, "sgd"),
])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_ftrl_equivalences(upstream, power, sparse, other, dtype):
    # tf_keras/optimizers/legacy/ftrl_test.py: <upstream> (against tf.compat.v1.train.AdagradOptimizer /
    # GradientDescentOptimizer, i.e. slotopt.v1)
    ftrl = legacy.Ftrl(3.0, learning_rate_power=power, initial_accumulator_value=0.1,
                       l1_regularization_strength=0.0, l2_regularization_strength=0.0)
    val0, val1 = _apply_ftrl_like(ftrl, dtype, sparse)
    reference = (slotopt.v1.AdagradOptimizer(3.0, initial_accumulator_value=0.1) if other == "adagrad"
                 else slotopt.v1.GradientDescentOptimizer(3.0))
    val2, val3 = _apply_ftrl_like(reference, dtype, sparse)
    close_by_type(val0, val2.detach().double().numpy(), dtype=dtype)
    close_by_type(val1, val3.detach().double().numpy(), dtype=dtype)


# ================================================================================ gradient_descent_test.py
@pytest.mark.parametrize("lr", [3.0, "callable", "tensor"],
                         ids=["testBasic", "testBasicCallableParams", "testTensorLearningRate"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_sgd_basic(dtype, lr):
    # tf_keras/optimizers/legacy/gradient_descent_test.py: GradientDescentOptimizerTest.testBasic,
    # testBasicCallableParams, testTensorLearningRate
    lr = {"callable": lambda: 3.0, "tensor": torch.tensor(3.0)}.get(lr, lr)
    var0, var1 = var([1.0, 2.0], dtype, "var0"), var([3.0, 4.0], dtype, "var1")
    legacy.SGD(lr).apply_gradients(zip([const([0.1, 0.1], dtype), const([0.01, 0.01], dtype)], [var0, var1]))
    close_by_type(var0, [1.0 - 3.0 * 0.1, 2.0 - 3.0 * 0.1])
    close_by_type(var1, [3.0 - 3.0 * 0.01, 4.0 - 3.0 * 0.01])


def _two_sgd_steps_with_decay(sgd, dtype):
    var0, var1 = var([1.0, 2.0], dtype, "var0"), var([3.0, 4.0], dtype, "var1")
    grads = [const([0.1, 0.1], dtype), const([0.01, 0.01], dtype)]
    sgd.apply_gradients(zip(grads, [var0, var1]))
    close_by_type(var0, [1.0 - 3.0 * 0.1, 2.0 - 3.0 * 0.1])
    close_by_type(var1, [3.0 - 3.0 * 0.01, 4.0 - 3.0 * 0.01])
    sgd.apply_gradients(zip(grads, [var0, var1]))
    close_by_type(var0, [1.0 - 3.0 * 0.1 - 2.0 * 0.1, 2.0 - 3.0 * 0.1 - 2.0 * 0.1])
    close_by_type(var1, [3.0 - 3.0 * 0.01 - 2.0 * 0.01, 4.0 - 3.0 * 0.01 - 2.0 * 0.01])


@pytest.mark.parametrize("how", ["decay", "schedule", "schedule_round_trip"],
                         ids=["testBasicWithLearningRateDecay", "testBasicWithLearningRateInverseTimeDecay",
                              "testBasicWithLearningRateInverseTimeDecaySerializeAndDeserialize"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_sgd_learning_rate_decay(dtype, how):
    # tf_keras/optimizers/legacy/gradient_descent_test.py: GradientDescentOptimizerTest.<id>
    if how == "decay":
        sgd = legacy.SGD(learning_rate=3.0, decay=0.5)
    else:
        sgd = legacy.SGD(learning_rate=slotopt.schedules.InverseTimeDecay(3.0, decay_steps=1.0, decay_rate=0.5))
        if how == "schedule_round_trip":
            sgd = legacy.SGD.from_config(sgd.get_config())
    _two_sgd_steps_with_decay(sgd, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_sgd_minimize(dtype):
    # tf_keras/optimizers/legacy/gradient_descent_test.py: GradientDescentOptimizerTest.testMinimizeResourceVariable
    var0, var1 = var([[1.0, 2.0]], dtype, "var0"), var([3.0], dtype, "var1")
    x = const([[4.0], [5.0]], dtype)
    legacy.SGD(1.0).minimize(lambda: var0 @ x + var1, [var0, var1])
    close_by_type(var0, [[1.0 - 4.0, 2.0 - 5.0]])
    close_by_type(var1, [3.0 - 1.0])


@pytest.mark.parametrize("dtype", DTYPES)
def test_sgd_minimize_sparse(dtype):
    # tf_keras/optimizers/legacy/gradient_descent_test.py: GradientDescentOptimizerTest.testMinimizeSparseResourceVariable
    var0, var1 = var([[1.0, 2.0]], dtype, "var0"), var([3.0], dtype, "var1")
    x = const([[4.0], [5.0]], dtype)
    legacy.SGD(1.0).minimize(lambda: (lookup_row0(var0) @ x + var1) ** 2, [var0, var1])
    np_grad = 2 * (1.0 * 4.0 + 2.0 * 5.0 + 3.0)
    close_by_type(var0, [[1.0 - np_grad * 4.0, 2.0 - np_grad * 5.0]])
    close_by_type(var1, [3.0 - np_grad])


@pytest.mark.parametrize("dtype", DTYPES)
def test_sgd_grad_wrt_ref(dtype):
    # tf_keras/optimizers/legacy/gradient_descent_test.py: GradientDescentOptimizerTest.testGradWrtRef
    opt = legacy.SGD(3.0)
    vars_ = [var([1.0], dtype, "a"), var([3.0], dtype, "b")]
    for grad, _ in opt._compute_gradients(lambda: vars_[0] + vars_[1], vars_):
        close_by_type(grad, [1.0])


@pytest.mark.parametrize("decay", [None, 0.5], ids=["testSparseBasic", "testSparseBasicWithLearningRateDecay"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_sgd_sparse_basic(dtype, decay):
    # tf_keras/optimizers/legacy/gradient_descent_test.py: GradientDescentOptimizerTest.<id>
    var0, var1 = var([[1.0], [2.0]], dtype, "var0"), var([[3.0], [4.0]], dtype, "var1")
    grads = [slices([[0.1]], [0], [2, 1], dtype), slices([[0.01]], [1], [2, 1], dtype)]
    opt = legacy.SGD(3.0) if decay is None else legacy.SGD(3.0, decay=decay)
    opt.apply_gradients(zip(grads, [var0, var1]))
    close_by_type(var0, [[1.0 - 3.0 * 0.1], [2.0]])
    close_by_type(var1, [[3.0], [4.0 - 3.0 * 0.01]])
    if decay is not None:
        opt.apply_gradients(zip(grads, [var0, var1]))
        close_by_type(var0, [[1.0 - 3.0 * 0.1 - 2.0 * 0.1], [2.0]])
        close_by_type(var1, [[3.0], [4.0 - 3.0 * 0.01 - 2.0 * 0.01]])


def _momentum_two_steps(dtype, first, second, check_slots=True):
    var0, var1 = var([1.0, 2.0], dtype, "var0"), var([3.0, 4.0], dtype, "var1")
    grads = [const([0.1, 0.1], dtype), const([0.01, 0.01], dtype)]
    first(zip(grads, [var0, var1]))
    opt = first.__self__
    slot0, slot1 = opt.get_slot(var0, "momentum"), opt.get_slot(var1, "momentum")
    assert slot0.shape == var0.shape and slot1.shape == var1.shape
    close_by_type(slot0, [-0.2, -0.2])
    close_by_type(slot1, [-0.02, -0.02])
    close_by_type(var0, [1.0 - (0.1 * 2.0), 2.0 - (0.1 * 2.0)])
    close_by_type(var1, [3.0 - (0.01 * 2.0), 4.0 - (0.01 * 2.0)])
    second(zip(grads, [var0, var1]))
    close_by_type(slot0, [(0.9 * (-0.2) - 2.0 * 0.1)] * 2)
    close_by_type(slot1, [(0.9 * (-0.02) - 2.0 * 0.01)] * 2)
    close_by_type(var0, [1.0 - (0.1 * 2.0) - ((0.9 * 0.1 + 0.1) * 2.0), 2.0 - (0.1 * 2.0) - ((0.9 * 0.1 + 0.1) * 2.0)])
    close_by_type(var1, [2.98 - ((0.9 * 0.01 + 0.01) * 2.0), 3.98 - ((0.9 * 0.01 + 0.01) * 2.0)])


@pytest.mark.parametrize("tensors", [False, True], ids=["testBasic", "testTensorLearningRateAndMomentum"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_momentum_basic(dtype, tensors):
    # tf_keras/optimizers/legacy/gradient_descent_test.py: MomentumOptimizerTest.testBasic,
    # testTensorLearningRateAndMomentum (and testSharing: the same optimizer applied twice)
    if tensors:
        opt = legacy.SGD(learning_rate=torch.tensor(2.0), momentum=torch.tensor(0.9))
    else:
        opt = legacy.SGD(learning_rate=2.0, momentum=0.9)
    _momentum_two_steps(dtype, opt.apply_gradients, opt.apply_gradients)


def nesterov_np(var_, accum, g, lr, momentum):
    accum = accum * momentum - g * lr
    return var_ + accum * momentum - g * lr, accum


@pytest.mark.parametrize("sparse", [False, True], ids=["testNesterovMomentum", "testSparseNesterovMomentum"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_nesterov_momentum(dtype, sparse):
    # tf_keras/optimizers/legacy/gradient_descent_test.py: MomentumOptimizerTest.testNesterovMomentum and
    # testSparseNesterovMomentum (loss 5 * var0 ** 2 + 3 * var1)
    n = NP[dtype]
    var0, var1 = var([1.0, 2.0], dtype, "var0"), var([3.0, 4.0], dtype, "var1")
    var0_np, var1_np = np.array([1.0, 2.0], n), np.array([3.0, 4.0], n)
    accum0, accum1 = np.zeros(2, n), np.zeros(2, n)
    opt = legacy.SGD(learning_rate=2.0, momentum=0.9, nesterov=True)
    for _ in range(4):
        if sparse:
            grads = [slices(var0_np * 10, [0, 1], [2], dtype), const([3.0, 3.0], dtype)]
            opt.apply_gradients(zip(grads, [var0, var1]))
        else:
            opt.minimize(lambda: 5 * var0 * var0 + 3 * var1, [var0, var1])
        var0_np, accum0 = nesterov_np(var0_np, accum0, var0_np * 10, 2.0, 0.9)
        var1_np, accum1 = nesterov_np(var1_np, accum1, 3, 2.0, 0.9)
        close(var0, var0_np)
        close(var1, var1_np)


@pytest.mark.parametrize("dtype", DTYPES)
def test_momentum_minimize_sparse(dtype):
    # tf_keras/optimizers/legacy/gradient_descent_test.py: MomentumOptimizerTest.testMinimizeSparseResourceVariable
    var0 = var([[1.0, 2.0]], dtype, "var0")
    x = const([[4.0], [5.0]], dtype)
    legacy.SGD(learning_rate=1.0, momentum=0.9).minimize(lambda: (lookup_row0(var0) @ x) ** 2, [var0])
    close_by_type(var0, [[-111, -138]])


def test_momentum_minimize_with_2d_indices():
    # tf_keras/optimizers/legacy/gradient_descent_test.py: MomentumOptimizerTest.testMinimizeWith2DIndicesForEmbeddingLookup
    var0 = var(np.ones((2, 2)), name="var0")
    opt = legacy.SGD(learning_rate=1.0, momentum=0.9)
    opt.minimize(lambda: F.embedding(torch.tensor([[1]]), var0, sparse=True).sum(), [var0])
    close_by_type(var0, [[1, 1], [0, 0]])


@pytest.mark.parametrize("dtype", DTYPES)
def test_momentum_sparse(dtype):
    # tf_keras/optimizers/legacy/gradient_descent_test.py: MomentumOptimizerTest.testSparse
    var0 = var(np.zeros((4, 2)), dtype, "var0")
    var1 = var(np.ones((4, 2)), dtype, "var1")
    grads = [slices([[0.1, 0.1]], [1], [4, 2], dtype), slices([[0.01, 0.01], [0.01, 0.01]], [2, 3], [4, 2], dtype)]
    opt = legacy.SGD(learning_rate=2.0, momentum=0.9)
    opt.apply_gradients(zip(grads, [var0, var1]))
    slot0, slot1 = opt.get_slot(var0, "momentum"), opt.get_slot(var1, "momentum")
    assert slot0.shape == var0.shape and slot1.shape == var1.shape
    close_by_type(slot0[0], [0, 0])
    close_by_type(slot0[1], [-2.0 * 0.1, -2.0 * 0.1])
    close_by_type(slot1[2], [-2.0 * 0.01, -2.0 * 0.01])
    close_by_type(var0[0], [0, 0])
    close_by_type(var0[1], [-(0.1 * 2.0), -(0.1 * 2.0)])
    close_by_type(var1[2], [1.0 - (0.01 * 2.0), 1.0 - (0.01 * 2.0)])
    opt.apply_gradients(zip(grads, [var0, var1]))
    close(slot0[0], [0, 0])
    close_by_type(slot0[1], [(0.9 * (-0.2) - 2.0 * 0.1)] * 2)
    close_by_type(slot1[2], [(0.9 * (-0.02) - 2.0 * 0.01)] * 2)
    close(var0[0], [0, 0])
    close_by_type(var0[1], [-(0.1 * 2.0) - ((0.9 * 0.1 + 0.1) * 2.0)] * 2)
    close_by_type(var1[2], [0.98 - ((0.9 * 0.01 + 0.01) * 2.0)] * 2)


def test_momentum_config():
    # tf_keras/optimizers/legacy/gradient_descent_test.py: MomentumOptimizerTest.testConfig
    opt = legacy.SGD(learning_rate=1.0, momentum=0.9, nesterov=True)
    config = opt.get_config()
    opt2 = legacy.SGD.from_config(config)
    for name in ("learning_rate", "momentum", "decay"):
        close(opt2._get_hyper(name), float(opt._get_hyper(name)))
    var0 = var([[1.0], [2.0]], name="var0")
    opt.minimize(lambda: 3 * var0, [var0])
    opt3 = legacy.SGD.from_config(opt.get_config())
    for name in ("learning_rate", "momentum", "decay"):
        close(opt3._get_hyper(name), float(opt._get_hyper(name)))
    assert opt3.nesterov


def test_nesterov_without_momentum():
    # tf_keras/optimizers/legacy/gradient_descent_test.py: MomentumOptimizerTest.testNesterovWithoutMomentum
    with pytest.raises(ValueError, match="must be between"):
        legacy.SGD(learning_rate=1.0, momentum=2.0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_minimize_loss_tensor(dtype):
    # tf_keras/optimizers/legacy/gradient_descent_test.py: MomentumOptimizerTest.testMinimizeLossTensor. TF needs
    # the GradientTape that recorded a loss tensor (ValueError "`tape` is required" without it); with autograd the
    # tensor carries its graph, so slotopt takes it without a tape. The numbers carry over.
    var0, var1 = var([[1.0, 2.0]], dtype, "var0"), var([3.0], dtype, "var1")
    x = const([[4.0], [5.0]], dtype)
    legacy.SGD(1.0).minimize(var0 @ x + var1, [var0, var1])
    close_by_type(var0, [[1.0 - 4.0, 2.0 - 5.0]])
    close_by_type(var1, [3.0 - 1.0])


# ======================================================================================= optimizer_v2_test.py
@pytest.mark.parametrize("dtype", DATA_TYPES)
def test_v2_basic(dtype):
    # tf_keras/optimizers/legacy/optimizer_v2_test.py: OptimizerTest.testBasic (a vector loss)
    var0, var1 = var([1.0, 2.0], dtype, "var0"), var([3.0, 4.0], dtype, "var1")
    legacy.SGD(3.0).minimize(lambda: 5 * var0 + 3 * var1, var_list=[var0, var1])
    close(var0, [-14.0, -13.0])
    close(var1, [-6.0, -5.0])


@pytest.mark.parametrize("dtype", DATA_TYPES)
def test_v2_adaptive_learning_rate(dtype):
    # tf_keras/optimizers/legacy/optimizer_v2_test.py: OptimizerTest.testAdaptiveLearningRate
    var0, var1 = var([1.0, 2.0], dtype, "var0"), var([3.0, 4.0], dtype, "var1")
    sgd = legacy.SGD(1.0)
    sgd.minimize(lambda: 5 * var0 + 3 * var1, [var0, var1])
    close(var0, [-4.0, -3.0])
    close(var1, [0.0, 1.0])
    sgd.learning_rate = 0.5
    sgd.minimize(lambda: 5 * var0 + 3 * var1, [var0, var1])
    close(var0, [-6.5, -5.5])
    close(var1, [-1.5, -0.5])
    sgd.learning_rate = slotopt.schedules.InverseTimeDecay(0.5, decay_steps=1.0, decay_rate=0.5)
    sgd.minimize(lambda: 5 * var0 + 3 * var1, [var0, var1])   # upstream checks only that this runs
    assert int(sgd.iterations) == 3


@pytest.mark.parametrize("dtype", DATA_TYPES)
def test_v2_precomputed_gradient(dtype):
    # tf_keras/optimizers/legacy/optimizer_v2_test.py: OptimizerTest.testPrecomputedGradient (grad_loss)
    var0, var1 = var([1.0, 2.0], dtype, "var0"), var([3.0, 4.0], dtype, "var1")
    legacy.SGD(3.0).minimize(lambda: 5 * var0 + 3 * var1, var_list=[var0, var1], grad_loss=const([42, -42], dtype))
    close(var0, [1.0 - 3 * 5 * 42.0, 2.0 - 3 * 5 * (-42.0)])
    close(var1, [3.0 - 3 * 3 * 42.0, 4.0 - 3 * 3 * (-42.0)])


@pytest.mark.parametrize("dtype", DATA_TYPES)
def test_v2_no_gradients(dtype):
    # tf_keras/optimizers/legacy/optimizer_v2_test.py: OptimizerTest.testNoGradients,
    # testNoGradientsForAnyVariables_Minimize, testNoGradientsForAnyVariables_ApplyGradients
    var0, var1 = var([1.0, 2.0], dtype, "var0"), var([3.0, 4.0], dtype, "var1")
    with pytest.raises(ValueError, match="No gradients"):
        legacy.SGD(3.0).minimize(lambda: 5 * var0, var_list=[var1])
    with pytest.raises(ValueError, match="No gradients provided for any variable"):
        legacy.SGD(3.0).minimize(lambda: 5.0 + 0.0 * var0.sum(), var_list=[var1])   # a loss independent of var1
    with pytest.raises(ValueError, match="No gradients provided for any variable"):
        legacy.SGD(3.0).apply_gradients([(None, var0), (None, var1)])


@pytest.mark.parametrize("dtype", DATA_TYPES)
def test_v2_gradients_as_variables(dtype):
    # tf_keras/optimizers/legacy/optimizer_v2_test.py: OptimizerTest.testGradientsAsVariables
    var0, var1 = var([1.0, 2.0], dtype, "var0"), var([3.0, 4.0], dtype, "var1")
    sgd = legacy.SGD(3.0)
    grads_and_vars = sgd._compute_gradients(lambda: 5 * var0 + 3 * var1, [var0, var1])
    converted = [var(torch.zeros(2, dtype=dtype).numpy(), dtype, f"c_{j}") for j in range(2)]
    with torch.no_grad():
        for c, (g, _) in zip(converted, grads_and_vars):
            c.copy_(g)
    sgd.apply_gradients(list(zip(converted, [var0, var1])))
    close(var0, [-14.0, -13.0])
    close(var1, [-6.0, -5.0])


def test_v2_constraint():
    # tf_keras/optimizers/legacy/optimizer_v2_test.py: OptimizerTest.testConstraint
    var0 = slotopt.Variable(torch.tensor([1.0, 2.0]), name="var0", constraint=lambda x: x.clamp(-0.1, 0.0))
    var1 = slotopt.Variable(torch.tensor([3.0, 4.0]), name="var1", constraint=lambda x: x.clamp(0.0, 1.0))
    legacy.SGD(3.0).minimize(lambda: 5 * var0 + 3 * var1, var_list=[var0, var1])
    close(var0, [-0.1, -0.1])
    close(var1, [0.0, 0.0])


def test_v2_iteration_without_minimize():
    # tf_keras/optimizers/legacy/optimizer_v2_test.py: OptimizerTest.testIterationWithoutMinimize
    assert int(legacy.SGD(3.0).iterations) == 0


def test_v2_config():
    # tf_keras/optimizers/legacy/optimizer_v2_test.py: OptimizerTest.testConfig
    opt = legacy.SGD(learning_rate=1.0)
    config = opt.get_config()
    opt2 = legacy.SGD.from_config(config)
    assert float(opt._get_hyper("learning_rate")) == float(opt2._get_hyper("learning_rate"))
    var0 = var([[1.0], [2.0]], name="var0")
    opt.minimize(lambda: 3 * var0, [var0])
    opt3 = legacy.SGD.from_config(config)
    assert float(opt._get_hyper("learning_rate")) == float(opt3._get_hyper("learning_rate"))


@pytest.mark.parametrize("schedule", [
    lambda: slotopt.schedules.InverseTimeDecay(0.5, decay_steps=1.0, decay_rate=0.1),
    lambda: slotopt.schedules.PiecewiseConstantDecay([5], [1.0, 0.5]),
], ids=["InverseTimeDecay", "PiecewiseConstantDecay"])
def test_v2_config_with_learning_rate_decay(schedule):
    # tf_keras/optimizers/legacy/optimizer_v2_test.py: OptimizerTest.testConfigWithLearningRateDecay
    decay_schedule, step = schedule(), 10
    opt = legacy.SGD(decay_schedule)
    opt2 = legacy.SGD.from_config(opt.get_config())
    assert float(decay_schedule(step)) == float(opt._get_hyper("learning_rate")(step))
    assert float(decay_schedule(step)) == float(opt2._get_hyper("learning_rate")(step))
    var0 = var([[1.0], [2.0]], name="var0")
    opt.minimize(lambda: 3 * var0, [var0])
    opt3 = legacy.SGD.from_config(opt.get_config())
    assert float(opt._get_hyper("learning_rate")(step)) == float(opt3._get_hyper("learning_rate")(step))


@pytest.mark.parametrize("upstream,kwargs,init,loss,expected", [
    ("testGradClipValue", dict(clipvalue=1.0), [[1.0, 2.0]], lambda v: 3 * v[0], [[0.0, 1.0]]),
    ("testGradClipNorm", dict(clipnorm=1.0), [[1.0]], lambda v: 3 * v[0], [[0.0]]),
    ("testGradGlobalClipNorm", dict(global_clipnorm=2.0), [[1.0], [2.0]], lambda v: 3 * v[0] + 4 * v[1],
     [[-0.2], [0.4]]),
])
def test_v2_clipping(upstream, kwargs, init, loss, expected):
    # tf_keras/optimizers/legacy/optimizer_v2_test.py: OptimizerTest.<upstream>
    variables = [var(x, name=f"v{i}") for i, x in enumerate(init)]
    legacy.SGD(learning_rate=1.0, **kwargs).minimize(lambda: loss(variables), variables)
    for v, e in zip(variables, expected):
        close(v, e)


def test_v2_invalid_clip_norm():
    # tf_keras/optimizers/legacy/optimizer_v2_test.py: OptimizerTest.testInvalidClipNorm
    with pytest.raises(ValueError, match=">= 0"):
        legacy.SGD(learning_rate=1.0, clipnorm=-1.0)


@pytest.mark.parametrize("clip_type", ["clipnorm", "global_clipnorm", "clipvalue"])
def test_v2_config_with_clipping(clip_type):
    # tf_keras/optimizers/legacy/optimizer_v2_test.py: OptimizerTest.testConfigWithCliping
    opt = legacy.SGD(learning_rate=1.0, **{clip_type: 2.0})
    opt = legacy.SGD.from_config(opt.get_config())
    assert getattr(opt, clip_type) == 2.0


def test_v2_invalid_kwargs():
    # tf_keras/optimizers/legacy/optimizer_v2_test.py: OptimizerTest.testInvalidKwargs
    with pytest.raises(TypeError, match="Unexpected keyword argument"):
        legacy.SGD(learning_rate=1.0, invalidkwargs=1.0)


def test_v2_weights():
    # tf_keras/optimizers/legacy/optimizer_v2_test.py: OptimizerTest.testWeights
    opt1 = legacy.Adam(learning_rate=1.0)
    var1 = var([1.0, 2.0], name="var1")
    opt1.build([var1])
    opt2 = legacy.Adam.from_config(opt1.get_config())
    var2 = var([1.0, 2.0], name="var2")
    opt2.build([var2])
    opt2.set_weights(opt1.get_weights())
    opt1.minimize(lambda: 3 * var1, [var1])
    opt2.minimize(lambda: 3 * var2, [var2])
    close(var1, var2.detach().double().numpy())
    assert int(opt1.iterations) == 1 and int(opt2.iterations) == 1
    var3, var4 = var([1.0, 2.0, 3.0], name="var3"), var([4.0, 5.0, 6.0], name="var4")
    opt1.build([var1, var3, var4])
    weights = opt1.get_weights()
    with pytest.raises(ValueError, match="but the optimizer was"):
        opt2.set_weights(weights)
    var5, var6 = var([1.0, 2.0, 3.0], name="var5"), var([4.0, 5.0, 6.0], name="var6")
    opt2.build([var2, var5, var6])
    opt2.set_weights(weights)
    opt1.minimize(lambda: 3 * var3 + 5 * var4, [var3, var4])
    opt2.minimize(lambda: 3 * var5 + 5 * var6, [var5, var6])
    close(var3, var5.detach().double().numpy())
    close(var4, var6.detach().double().numpy())


@pytest.mark.parametrize("lr_in_constructor", [False, True],
                         ids=["testGettingHyperParameters", "testGettingHyperParametersWithLrInConstructor"])
def test_v2_getting_hyper_parameters(lr_in_constructor):
    # tf_keras/optimizers/legacy/optimizer_v2_test.py: OptimizerTest.<id>
    if lr_in_constructor:
        with pytest.warns(UserWarning):
            opt = legacy.SGD(lr=3.0)
    else:
        opt = legacy.Adam(learning_rate=1.0)
    v = var([1.0, 2.0], name="var")
    opt.minimize(lambda: 3 * v, [v])
    assert isinstance(opt.lr, torch.Tensor) and isinstance(opt.learning_rate, torch.Tensor)
    assert float(opt.lr) == (3.0 if lr_in_constructor else 1.0)
    opt.lr = 2.0
    assert float(opt.lr) == 2.0
    opt.lr.assign(4.0)
    assert float(opt.lr) == 4.0
    with pytest.raises(AttributeError):
        opt.not_an_attr += 3


def test_v2_dir():
    # tf_keras/optimizers/legacy/optimizer_v2_test.py: OptimizerTest.testDir
    dir_result = set(dir(legacy.SGD(learning_rate=1.0, momentum=0.1)))
    assert {"learning_rate", "lr", "momentum", "nesterov", "minimize"} <= dir_result


def test_v2_set_iterations():
    # tf_keras/optimizers/legacy/optimizer_v2_test.py: OptimizerTest.testOptimizerSetIterations (a global step
    # variable adopted as the optimizer's counter)
    global_step = slotopt.Variable(torch.tensor(0, dtype=torch.int64), name="global_step")
    opt = legacy.Adam(learning_rate=1.0)
    opt.iterations = global_step
    v = var([1.0, 2.0], name="var")
    opt.minimize(lambda: 3 * v, [v])
    assert int(global_step) == 1


def test_v2_callable_var_list():
    # tf_keras/optimizers/legacy/optimizer_v2_test.py: OptimizerTest.testOptimizerWithCallableVarList (the
    # variables are only known when the callable is called)
    model = torch.nn.Linear(1, 2)
    opt = legacy.Adam()
    x, y = torch.randn(20, 1), torch.randn(20, 2)
    opt.minimize(lambda: ((model(x) - y) ** 2).mean(), lambda: list(model.parameters()))
    assert float(opt.get_slot(model.weight, "m").abs().sum()) != 0.0
    assert len(list(model.parameters())) == 2


def test_v2_empty_var_list():
    # tf_keras/optimizers/legacy/optimizer_v2_test.py: OptimizerTest.testEmptyVarList
    opt = legacy.SGD(1.0)
    opt.apply_gradients([])
    assert int(opt.iterations) == 0


@pytest.mark.parametrize("aggregate", [True, False], ids=["testAggregationTrue", "testAggregationFalse"])
def test_v2_aggregation(aggregate):
    # tf_keras/optimizers/legacy/optimizer_v2_test.py: OptimizerTest.<id>
    v = var([1.0, 2.0], name="var")
    legacy.SGD(3.0).apply_gradients([(torch.tensor([0.1, 0.1]), v)], experimental_aggregate_gradients=aggregate)
    close(v, [0.7, 1.7])


def test_v2_gradient_aggregator():
    # tf_keras/optimizers/legacy/optimizer_v2_test.py: OptimizerTest.test_gradient_aggregator
    v = var(2.0, name="var")
    sgd = legacy.SGD(1.0, gradient_aggregator=lambda gv: [(g / 2, w) for g, w in gv])
    sgd.minimize(lambda: 2 * v, var_list=[v])
    assert v.item() == 1.0


def test_v2_override_aggregate_gradients():
    # tf_keras/optimizers/legacy/optimizer_v2_test.py: OptimizerTest.test_override_aggregate_gradients
    class MyOptimizer(legacy.SGD):
        def _aggregate_gradients(self, grads_and_vars):
            return [(g / 2, w) for g, w in grads_and_vars]

    v = var(2.0, name="var")
    MyOptimizer(1.0).minimize(lambda: 2 * v, var_list=[v])
    assert v.item() == 1.0


@pytest.mark.parametrize("test", ["testBasic", "testBasicWithConstantDecay"])
def test_v2_with_function_basic(test):
    # tf_keras/optimizers/legacy/optimizer_v2_test.py: OptimizerWithFunctionTest.<test>, without tf.function (the
    # two are the same case upstream)
    v = var([1.0, 2.0], name="var")
    opt = legacy.Adam(learning_rate=1.0)
    opt.minimize(lambda: 3 * v, [v])
    close(v, [0.0, 1.0], atol=1e-4)
    opt.minimize(lambda: 3 * v, [v])
    close(v, [-1.0, 0.0], atol=1e-4)


def test_v2_deepcopy():
    # tf_keras/optimizers/legacy/optimizer_v2_test.py: DeepcopyTests.test_deepcopy
    clone = copy.deepcopy(legacy.Adam(0.42))
    assert clone.get_config()["learning_rate"] == pytest.approx(0.42, rel=1e-7)


def test_v2_numeric_equivalence_for_nesterov_momentum():
    # tf_keras/optimizers/legacy/optimizer_v2_test.py: OptimizersCompatibilityTest.
    # testNumericEquivalenceForNesterovMomentum, the legacy-SGD-versus-tf.compat.v1.train.MomentumOptimizer part
    # (optimizer_v1, Keras 1's optimizers, is not part of slotopt): a small MLP trained 10 epochs of 4 batches.
    gen = torch.Generator().manual_seed(1331)
    x = torch.randn(20, 3, generator=gen)
    y = F.one_hot(torch.randint(0, 2, (20,), generator=gen), 2).float()

    def make_model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.ReLU(), torch.nn.Linear(5, 2))

    def train(model, apply):
        params = list(model.parameters())
        losses = []
        for _ in range(10):
            for b in range(4):
                loss = F.cross_entropy(model(x[5 * b:5 * b + 5]), y[5 * b:5 * b + 5])
                apply(list(zip(torch.autograd.grad(loss, params), params)))
                losses.append(loss.item())
        return losses

    model_k, model_tf = make_model(), make_model()
    losses_k = train(model_k, legacy.SGD(momentum=0.9, nesterov=True).apply_gradients)
    losses_tf = train(model_tf, slotopt.v1.MomentumOptimizer(learning_rate=0.01, momentum=0.9,
                                                             use_nesterov=True).apply_gradients)
    for a, b in zip(model_k.parameters(), model_tf.parameters()):
        close(a, b.detach().double().numpy())
    close(losses_k, losses_tf)


SUBCLASS_CASES = {
    "Adadelta": (legacy.Adadelta, {}), "Adagrad": (legacy.Adagrad, {}), "Adam": (legacy.Adam, {}),
    "Adam_amdgrad": (legacy.Adam, dict(amsgrad=True)), "Adamax": (legacy.Adamax, {}), "Ftrl": (legacy.Ftrl, {}),
    "Ftrl_l2_shrinkage": (legacy.Ftrl, dict(l2_shrinkage_regularization_strength=0.1)), "SGD": (legacy.SGD, {}),
    "SGD_momentum": (legacy.SGD, dict(momentum=0.5)), "Nadam": (legacy.Nadam, {}), "RMSprop": (legacy.RMSprop, {}),
    "RMSprop_centered": (legacy.RMSprop, dict(centered=True)),
    "RMSprop_momentum": (legacy.RMSprop, dict(momentum=0.5)),
    "RMSprop_momentum_centered": (legacy.RMSprop, dict(momentum=0.5, centered=True)),
}


@pytest.mark.parametrize("case", list(SUBCLASS_CASES))
def test_v2_subclass_compat(case):
    # tf_keras/optimizers/legacy/optimizer_v2_test.py: OptimizerCoefficientTest.test_subclass_compat: a subclass
    # overriding _resource_apply_dense/_resource_apply_sparse without `apply_state` still works (here: and gives
    # the base class's numbers, on an embedding-like sparse gradient and a dense one).
    cls, kwargs = SUBCLASS_CASES[case]

    class SubclassedOptimizer(cls):
        def _resource_apply_dense(self, grad, var):
            return super()._resource_apply_dense(grad, var)

        def _resource_apply_sparse(self, grad, var, indices):
            return super()._resource_apply_sparse(grad, var, indices)

    results = []
    for factory in (cls, SubclassedOptimizer):
        table, dense = var(np.ones((4, 3)), name="table"), var([1.0, -2.0], name="dense")
        opt = factory(**kwargs)
        for _ in range(2):
            opt.apply_gradients([(slices([[0.5, 0.5, 0.5]], [2], [4, 3]), table), (const([0.1, 0.3]), dense)])
        results.append([table.detach().clone(), dense.detach().clone()])
    for a, b in zip(*results):
        assert torch.equal(a, b)
