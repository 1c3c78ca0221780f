"""TF1's optimizer test suites (tensorflow/tensorflow, ``tensorflow/python/training/*_test.py``), ported to
``slotopt.v1`` for the ten optimizers: gradient_descent, momentum, adam, adagrad, adagrad_da, adadelta, rmsprop,
ftrl, proximal_gradient_descent and proximal_adagrad.

Graph-mode sessions become eager calls; ``use_resource``/``RefVariable`` variants are one case here (listed in
``NOT_APPLICABLE.md``). Facts (inputs, expected values, tolerances) are upstream's.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from _tf_testing import DTYPES, NP, close, close_by_type, const, slices, var

from slotopt import v1

FLOATS = [torch.float32, torch.float64]
HALF_FLOAT = [torch.float16, torch.float32]


def lookup_row0(table):
    return F.embedding(torch.tensor([0]), table, sparse=True)


def two_vars(dtype, a=(1.0, 2.0), b=(3.0, 4.0)):
    return var(a, dtype, "var0"), var(b, dtype, "var1")


# ================================================================================ gradient_descent_test.py
@pytest.mark.parametrize("lr,upstream", [(3.0, "testBasic"), (3.0, "testBasicResourceVariable"),
                                         ("callable", "testBasicCallableParams"),
                                         ("tensor", "testTensorLearningRate")])
@pytest.mark.parametrize("dtype", DTYPES)
def test_gd_basic(dtype, lr, upstream):
    # tensorflow/python/training/gradient_descent_test.py: <upstream>
    lr = {"callable": lambda: 3.0, "tensor": torch.tensor(3.0)}.get(lr, lr)
    var0, var1 = two_vars(dtype)
    opt = v1.GradientDescentOptimizer(lr)
    opt.apply_gradients(zip([const([0.1, 0.1], dtype), const([0.01, 0.01], dtype)], [var0, var1]))
    close_by_type(var0, [1.0 - 3.0 * 0.1, 2.0 - 3.0 * 0.1])
    close_by_type(var1, [3.0 - 3.0 * 0.01, 4.0 - 3.0 * 0.01])
    assert len(opt.variables()) == 0


@pytest.mark.parametrize("sparse", [False, True], ids=["testMinimizeResourceVariable",
                                                       "testMinimizeSparseResourceVariable"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_gd_minimize(dtype, sparse):
    # tensorflow/python/training/gradient_descent_test.py: <id>
    var0, var1 = var([[1.0, 2.0]], dtype, "var0"), var([3.0], dtype, "var1")
    x = const([[4.0], [5.0]], dtype)
    rows = (lambda: lookup_row0(var0)) if sparse else (lambda: var0)
    v1.GradientDescentOptimizer(1.0).minimize(lambda: (rows() @ x + var1) ** 2, var_list=[var0, var1])
    np_grad = 2 * (1.0 * 4.0 + 2.0 * 5.0 + 3.0)
    close_by_type(var0, [[1.0 - np_grad * 4.0, 2.0 - np_grad * 5.0]])
    close_by_type(var1, [3.0 - np_grad])


@pytest.mark.parametrize("dtype", DTYPES)
def test_gd_grad_wrt_ref(dtype):
    # tensorflow/python/training/gradient_descent_test.py: testGradWrtRef
    opt = v1.GradientDescentOptimizer(3.0)
    vars_ = [var([1.0], dtype, "a"), var([3.0], dtype, "b")]
    for grad, _ in opt.compute_gradients(lambda: vars_[0] + vars_[1], vars_):
        close_by_type(grad, [1.0])


@pytest.mark.parametrize("dtype", DTYPES)
def test_gd_with_global_step(dtype):
    # tensorflow/python/training/gradient_descent_test.py: testWithGlobalStep
    global_step = torch.zeros((), dtype=torch.int64)
    var0, var1 = two_vars(dtype)
    v1.GradientDescentOptimizer(3.0).apply_gradients(
        zip([const([0.1, 0.1], dtype), const([0.01, 0.01], dtype)], [var0, var1]), global_step=global_step)
    close_by_type(var0, [1.0 - 3.0 * 0.1, 2.0 - 3.0 * 0.1])
    close_by_type(var1, [3.0 - 3.0 * 0.01, 4.0 - 3.0 * 0.01])
    assert int(global_step) == 1


@pytest.mark.parametrize("dtype", DTYPES)
def test_gd_sparse_basic(dtype):
    # tensorflow/python/training/gradient_descent_test.py: testSparseBasic
    var0, var1 = var([[1.0], [2.0]], dtype, "var0"), var([[3.0], [4.0]], dtype, "var1")
    grads = [slices([[0.1]], [0], [2, 1], dtype), slices([[0.01]], [1], [2, 1], dtype)]
    v1.GradientDescentOptimizer(3.0).apply_gradients(zip(grads, [var0, var1]))
    close_by_type(var0, [[1.0 - 3.0 * 0.1], [2.0]])
    close_by_type(var1, [[3.0], [4.0 - 3.0 * 0.01]])


# ======================================================================================== momentum_test.py
def _tf1_momentum_two_steps(opt, dtype, second=None):
    var0, var1 = two_vars(dtype)
    grads = [const([0.1, 0.1], dtype), const([0.01, 0.01], dtype)]
    opt.apply_gradients(zip(grads, [var0, var1]))
    assert opt.get_slot_names() == ["momentum"]
    slot0, slot1 = opt.get_slot(var0, "momentum"), opt.get_slot(var1, "momentum")
    assert slot0.shape == var0.shape and slot1.shape == var1.shape
    assert not slot0.requires_grad and not slot1.requires_grad
    close_by_type(slot0, [0.1, 0.1])
    close_by_type(slot1, [0.01, 0.01])
    close_by_type(var0, [1.0 - (0.1 * 2.0), 2.0 - (0.1 * 2.0)])
    close_by_type(var1, [3.0 - (0.01 * 2.0), 4.0 - (0.01 * 2.0)])
    (second or opt).apply_gradients(zip(grads, [var0, var1]))
    close_by_type(slot0, [(0.9 * 0.1 + 0.1)] * 2)
    close_by_type(slot1, [(0.9 * 0.01 + 0.01)] * 2)
    close_by_type(var0, [1.0 - (0.1 * 2.0) - ((0.9 * 0.1 + 0.1) * 2.0), 2.0 - (0.1 * 2.0) - ((0.9 * 0.1 + 0.1) * 2.0)])
    close_by_type(var1, [2.98 - ((0.9 * 0.01 + 0.01) * 2.0), 3.98 - ((0.9 * 0.01 + 0.01) * 2.0)])


@pytest.mark.parametrize("params", ["plain", "callable", "tensor"],
                         ids=["testBasic/testResourceBasic/testSharing", "testBasicCallableParams",
                              "testTensorLearningRateAndMomentum"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_momentum_basic(dtype, params):
    # tensorflow/python/training/momentum_test.py: doTestBasic (testBasic, testResourceBasic,
    # testBasicCallableParams), testTensorLearningRateAndMomentum and testSharing (one optimizer applied twice)
    if params == "callable":
        opt = v1.MomentumOptimizer(learning_rate=lambda: 2.0, momentum=lambda: 0.9)
    elif params == "tensor":
        opt = v1.MomentumOptimizer(learning_rate=torch.tensor(2.0), momentum=torch.tensor(0.9))
    else:
        opt = v1.MomentumOptimizer(learning_rate=2.0, momentum=0.9)
    _tf1_momentum_two_steps(opt, dtype)


def tf1_nesterov_np(var_, accum, g, lr, momentum):
    var_ = var_ + accum * lr * momentum
    accum = accum * momentum + g
    var_ = var_ - lr * accum
    var_ = var_ - accum * lr * momentum
    return var_, accum


@pytest.mark.parametrize("sparse", [False, True], ids=["testNesterovMomentum", "testSparseNesterovMomentum"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_momentum_nesterov(dtype, sparse):
    # tensorflow/python/training/momentum_test.py: testNesterovMomentum and testSparseNesterovMomentum
    n = NP[dtype]
    var0, var1 = two_vars(dtype)
    var0_np, var1_np = np.array([1.0, 2.0], n), np.array([3.0, 4.0], n)
    accum0, accum1 = np.zeros(2, n), np.zeros(2, n)
    global_step = torch.zeros((), dtype=torch.int64)
    opt = v1.MomentumOptimizer(learning_rate=2.0, momentum=0.9, use_nesterov=True)
    for _ in range(4):
        if sparse:
            opt.apply_gradients([(slices(var0_np * 10, [0, 1], [2], dtype), var0), (const([3.0, 3.0], dtype), var1)])
        else:
            opt.minimize(lambda: 5 * var0 * var0 + 3 * var1, global_step, [var0, var1])
        var0_np, accum0 = tf1_nesterov_np(var0_np, accum0, var0_np * 10, 2.0, 0.9)
        var1_np, accum1 = tf1_nesterov_np(var1_np, accum1, 3, 2.0, 0.9)
        close(var0, var0_np)
        close(var1, var1_np)
    if not sparse:
        assert int(global_step) == 4


@pytest.mark.parametrize("dtype", DTYPES)
def test_momentum_minimize_sparse(dtype):
    # tensorflow/python/training/momentum_test.py: testMinimizeSparseResourceVariable
    var0 = var([[1.0, 2.0]], dtype, "var0")
    x = const([[4.0], [5.0]], dtype)
    v1.MomentumOptimizer(learning_rate=1.0, momentum=0.0).minimize(lambda: (lookup_row0(var0) @ x) ** 2,
                                                                    var_list=[var0])
    close_by_type(var0, [[-111, -138]])


def test_momentum_minimize_with_2d_indices():
    # tensorflow/python/training/momentum_test.py: testMinimizeWith2DIndicesForEmbeddingLookup
    var0 = var(np.ones((2, 2)), name="var0")
    opt = v1.MomentumOptimizer(learning_rate=1.0, momentum=0.0)
    opt.minimize(lambda: F.embedding(torch.tensor([[1]]), var0, sparse=True).sum(), var_list=[var0])
    close_by_type(var0, [[1, 1], [0, 0]])


DB_GRAD = [
    [0.00096264342, 0.17914793, 0.93945462, 0.41396621, 0.53037018, 0.93197989, 0.78648776, 0.50036013, 0.55345792,
     0.96722615],
    [0.17075552, 0.88821375, 0.20873757, 0.25236958, 0.57578111, 0.15312378, 0.5513742, 0.94687688, 0.16012503,
     0.22159521],
    [0.35077485, 0.47304362, 0.44412705, 0.44368884, 0.078527533, 0.81223965, 0.31168157, 0.43203235, 0.16792089,
     0.24644311],
    [0.9694621, 0.75035888, 0.28171822, 0.83813518, 0.53807181, 0.3728098, 0.81454384, 0.03848977, 0.89759839,
     0.93665648],
    [0.38578293, 0.8536852, 0.88722926, 0.66276771, 0.13678469, 0.94036359, 0.69107032, 0.81897682, 0.5433259,
     0.67860287],
    [0.27885768, 0.76100707, 0.24625534, 0.81354135, 0.18959245, 0.48038563, 0.84163809, 0.41172323, 0.83259648,
     0.44941229],
    [0.27233034, 0.056316052, 0.5039115, 0.24105175, 0.35697976, 0.75913221, 0.73577434, 0.16014607, 0.57500273,
     0.071136251],
    [0.58697265, 0.2494842, 0.08106143, 0.39954534, 0.15892942, 0.12683646, 0.74053431, 0.16033, 0.66625422,
     0.73515922],
    [0.8215279, 0.41994119, 0.95172721, 0.68000203, 0.79439718, 0.43384039, 0.55561525, 0.22567581, 0.93331909,
     0.29438227],
    [0.68297005, 0.67758518, 0.1748755, 0.13266537, 0.70697063, 0.055731893, 0.68593478, 0.50580865, 0.12602448,
     0.093537711],
]
DB_OUT = [
    [-9.6264346e-05, -0.017914793, -0.093945466, -0.041396622, -0.053037018, -0.093197994, -0.078648776,
     -0.050036013, -0.055345792, -0.096722618],
    [-0.017181443, -0.10852765, -0.12421377, -0.070773244, -0.11591884, -0.11783017, -0.14165108, -0.14972731,
     -0.076892875, -0.1285544],
    [-0.053967446, -0.1648933, -0.1716533, -0.1180798, -0.13005978, -0.20151734, -0.17911947, -0.20289968,
     -0.095839672, -0.15638189],
    [-0.15459226, -0.24556576, -0.20456907, -0.20662397, -0.18528105, -0.24716705, -0.2643207, -0.21206589,
     -0.18749419, -0.2528303],
    [-0.20323303, -0.33900154, -0.29658359, -0.28175515, -0.20448165, -0.34576839, -0.34194785, -0.29488021,
     -0.25099224, -0.33033544],
    [-0.23598288, -0.42444581, -0.33041057, -0.3706224, -0.22536094, -0.40366709, -0.43387437, -0.34433398,
     -0.34060168, -0.38302717],
    [-0.26649091, -0.43862185, -0.38418442, -0.40361428, -0.26314685, -0.48537019, -0.51664448, -0.36529395,
     -0.40706289, -0.39540997],
    [-0.32823896, -0.46498787, -0.39766794, -0.446868, -0.28281838, -0.50622416, -0.59897494, -0.38342294,
     -0.48033443, -0.47016418],
    [-0.41656655, -0.50961858, -0.49418902, -0.51919359, -0.36422527, -0.55169362, -0.6627695, -0.40780342,
     -0.58099347, -0.50707781],
    [-0.49369633, -0.58184016, -0.52132869, -0.5396927, -0.44306302, -0.56181377, -0.73774242, -0.46082234,
     -0.60366184, -0.52012295],
]


def test_momentum_like_dist_belief_mom01():
    # tensorflow/python/training/momentum_test.py: testLikeDistBeliefMom01 (lr 0.1, momentum 0.1, 10 steps)
    var0 = var([0.0] * 10, name="var0")
    opt = v1.MomentumOptimizer(learning_rate=0.1, momentum=0.1)
    for grad, out in zip(DB_GRAD, DB_OUT):
        opt.apply_gradients([(torch.tensor(grad), var0)])
        close(var0, out)


@pytest.mark.parametrize("dtype", DTYPES)
def test_momentum_sparse(dtype):
    # tensorflow/python/training/momentum_test.py: testSparse
    var0, var1 = var(np.zeros((4, 2)), dtype, "var0"), var(np.ones((4, 2)), dtype, "var1")
    grads = [slices([[0.1, 0.1]], [1], [4, 2], dtype), slices([[0.01, 0.01], [0.01, 0.01]], [2, 3], [4, 2], dtype)]
    opt = v1.MomentumOptimizer(learning_rate=2.0, momentum=0.9)
    opt.apply_gradients(zip(grads, [var0, var1]))
    assert opt.get_slot_names() == ["momentum"]
    slot0, slot1 = opt.get_slot(var0, "momentum"), opt.get_slot(var1, "momentum")
    close_by_type(slot0[0], [0, 0])
    close_by_type(slot0[1], [0.1, 0.1])
    close_by_type(slot1[2], [0.01, 0.01])
    close_by_type(var0[0], [0, 0])
    close_by_type(var0[1], [-(0.1 * 2.0)] * 2)
    close_by_type(var1[2], [1.0 - (0.01 * 2.0)] * 2)
    opt.apply_gradients(zip(grads, [var0, var1]))
    close(slot0[0], [0, 0])
    close_by_type(slot0[1], [(0.9 * 0.1 + 0.1)] * 2)
    close_by_type(slot1[2], [(0.9 * 0.01 + 0.01)] * 2)
    close(var0[0], [0, 0])
    close_by_type(var0[1], [-(0.1 * 2.0) - ((0.9 * 0.1 + 0.1) * 2.0)] * 2)
    close_by_type(var1[2], [0.98 - ((0.9 * 0.01 + 0.01) * 2.0)] * 2)


# ============================================================================================ adam_test.py
def tf1_adam_np(param, g, t, m, v, alpha=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8):
    alpha_t = alpha * np.sqrt(1 - beta2**t) / (1 - beta1**t)
    m_t = beta1 * m + (1 - beta1) * g
    v_t = beta2 * v + (1 - beta2) * g * g
    return param - alpha_t * m_t / (np.sqrt(v_t) + epsilon), m_t, v_t


@pytest.mark.parametrize("how", ["sparse", "dense", "callable", "tensor", "sharing"],
                         ids=["testSparse/testResourceSparse", "testBasic/testResourceBasic",
                              "testBasicCallableParams", "testTensorLearningRate", "testSharing"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_adam(dtype, how):
    # tensorflow/python/training/adam_test.py: <id>
    n = NP[dtype]
    var0_np, var1_np = np.array([1.0, 2.0], n), np.array([3.0, 4.0], n)
    g0_np, g1_np = np.array([0.1, 0.1], n), np.array([0.01, 0.01], n)
    var0, var1 = var(var0_np, dtype, "var0"), var(var1_np, dtype, "var1")
    if how == "sparse":
        grads = [slices(g0_np, [0, 1], [2], dtype), slices(g1_np, [0, 1], [2], dtype)]
    else:
        grads = [const(g0_np, dtype), const(g1_np, dtype)]
    lr = {"callable": lambda: 0.001, "tensor": torch.tensor(0.001)}.get(how, 0.001)
    opt = v1.AdamOptimizer(learning_rate=lr)
    m0 = v0 = m1 = v1_ = 0.0
    for t in range(1, 4):
        if t > 1:
            beta1_power, beta2_power = opt._get_beta_accumulators()
            close_by_type(beta1_power, 0.9**t, dtype=dtype)
            close_by_type(beta2_power, 0.999**t, dtype=dtype)
        opt.apply_gradients(zip(grads, [var0, var1]))
        beta1_power, beta2_power = opt._get_beta_accumulators()
        assert any(beta1_power is v for v in opt.variables()) and any(beta2_power is v for v in opt.variables())
        close_by_type(beta1_power, 0.9 ** (t + 1), dtype=dtype)
        close_by_type(beta2_power, 0.999 ** (t + 1), dtype=dtype)
        var0_np, m0, v0 = tf1_adam_np(var0_np, g0_np, t, m0, v0)
        var1_np, m1, v1_ = tf1_adam_np(var1_np, g1_np, t, m1, v1_)
        close_by_type(var0, var0_np)
        close_by_type(var1, var1_np)


@pytest.mark.parametrize("cls", ["AdamOptimizer", "AdagradOptimizer"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_sparse_repeated_indices(cls, dtype):
    # tensorflow/python/training/{adam,adagrad}_test.py: testSparseRepeatedIndices (Adagrad with lr 3.0)
    factory = (lambda: v1.AdagradOptimizer(3.0)) if cls == "AdagradOptimizer" else v1.AdamOptimizer
    repeated, aggregated = var([[1.0], [2.0]], dtype, "repeated"), var([[1.0], [2.0]], dtype, "aggregated")
    g_repeated = slices([[0.1], [0.1]], [1, 1], [2, 1], dtype)
    g_aggregated = slices([[0.2]], [1], [2, 1], dtype)
    opt_r, opt_a = factory(), factory()
    for _ in range(3):
        opt_r.apply_gradients([(g_repeated, repeated)])
        opt_a.apply_gradients([(g_aggregated, aggregated)])
        close(repeated, aggregated.detach().double().numpy())


def test_adam_slots_unique():
    # tensorflow/python/training/adam_test.py: testSlotsUniqueEager (two non-slot and four slot variables)
    w1, w2 = var(1.0, name="v1"), var(1.0, name="v2")
    opt = v1.AdamOptimizer(1.0)
    opt.minimize(lambda: w1 + w2, var_list=[w1, w2])
    assert len({id(v) for v in opt.variables()}) == 6


# ========================================================================================= adagrad_test.py
@pytest.mark.parametrize("how", ["plain", "locked", "tensor", "sharing"],
                         ids=["testBasic", "testBasicLocked", "testTensorLearningRate", "testSharing"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_adagrad_basic(dtype, how):
    # tensorflow/python/training/adagrad_test.py: <id>
    var0, var1 = two_vars(dtype)
    grads = [const([0.1, 0.1], dtype), const([0.01, 0.01], dtype)]
    lr = torch.tensor(3.0) if how == "tensor" else 3.0
    opt = v1.AdagradOptimizer(lr, initial_accumulator_value=0.1, use_locking=how == "locked")
    for _ in range(3):
        opt.apply_gradients(zip(grads, [var0, var1]))
    if how == "sharing":
        assert opt.get_slot_names() == ["accumulator"]
        assert opt.get_slot(var0, "accumulator").shape == var0.shape
    close_by_type(var0, [-1.6026098728179932, -0.6026098728179932])
    close_by_type(var1, [2.715679168701172, 3.715679168701172])


@pytest.mark.parametrize("dtype", DTYPES)
def test_adagrad_sparse_basic(dtype):
    # tensorflow/python/training/adagrad_test.py: testSparseBasic
    var0, var1 = var([[1.0], [2.0]], dtype, "var0"), var([[3.0], [4.0]], dtype, "var1")
    grads = [slices([[0.1]], [0], [2, 1], dtype), slices([[0.01]], [1], [2, 1], dtype)]
    opt = v1.AdagradOptimizer(3.0, initial_accumulator_value=0.1)
    for _ in range(3):
        opt.apply_gradients(zip(grads, [var0, var1]))
    close_by_type(var0, [[-1.6026098728179932], [2.0]])
    close_by_type(var1, [[3.0], [3.715679168701172]])


@pytest.mark.parametrize("dtype", DTYPES)
def test_adagrad_sparse_stability(dtype):
    # tensorflow/python/training/adagrad_test.py: testSparseStability
    var0 = var([[0.00872496, -0.106952, 0.110467, 0.226505, -0.0147257, -0.0105945]], dtype, "var0")
    grads0 = slices([[-5.91278e-05, 5.31673e-05, -2.5779e-06, 4.29153e-05, -8.4877e-05, -9.48906e-05]], [0], [1, 6],
                    dtype)
    opt = v1.AdagradOptimizer(1.0, initial_accumulator_value=0.1)
    opt.apply_gradients(zip([grads0], [var0]))
    assert opt.get_slot_names() == ["accumulator"]
    close_by_type(opt.get_slot(var0, "accumulator"), [[0.1] * 6])
    close_by_type(var0, [[0.00891194, -0.10712013, 0.11047515, 0.22636929, -0.0144573, -0.01029443]])


# ====================================================================================== adagrad_da_test.py
ADAGRAD_DA = {
    "testAdagradDAWithoutRegularizationBasic1": ([0.0, 0.0], [0.0, 0.0], 0.0, 0.0,
                                                 [-0.904534, -1.603567], [-0.094821, -0.189358]),
    "testAdagradDAwithoutRegularizationBasic2": ([1.0, 2.0], [4.0, 3.0], 0.0, 0.0,
                                                 [-0.904534, -1.603567], [-0.094821, -0.189358]),
    "testAdagradDAWithL1": ([1.0, 2.0], [4.0, 3.0], 0.001, 0.0, [-0.895489, -1.59555], [-0.085339, -0.17989]),
    "testAdagradDAWithL1_L2": ([1.0, 2.0], [4.0, 3.0], 0.001, 2.0, [-0.046907, -0.093659], [-0.004275, -0.009023]),
}


@pytest.mark.parametrize("upstream", list(ADAGRAD_DA))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_adagrad_da(upstream, dtype):
    # tensorflow/python/training/adagrad_da_test.py: <upstream> (testResourceAdagradDAWithoutRegularizationBasic1 is
    # the same case)
    init0, init1, l1, l2, expected0, expected1 = ADAGRAD_DA[upstream]
    global_step = torch.zeros((), dtype=torch.int64)
    var0, var1 = var(init0, dtype, "var0"), var(init1, dtype, "var1")
    opt = v1.AdagradDAOptimizer(3.0, global_step, initial_gradient_squared_accumulator_value=0.1,
                                l1_regularization_strength=l1, l2_regularization_strength=l2)
    opt.apply_gradients(zip([const([0.1, 0.2], dtype), const([0.01, 0.02], dtype)], [var0, var1]),
                        global_step=global_step)
    close_by_type(var0, expected0)
    close_by_type(var1, expected1)


@pytest.mark.parametrize("dtype", FLOATS)
def test_adagrad_da_minimize_sparse(dtype):
    # tensorflow/python/training/adagrad_da_test.py: testMinimizeSparseResourceVariable
    var0 = var([[1.0, 2.0]], dtype, "var0")
    global_step = torch.zeros((), dtype=torch.int64)
    x = const([[4.0], [5.0]], dtype)
    v1.AdagradDAOptimizer(1.0, global_step).minimize(lambda: (lookup_row0(var0) @ x) ** 2, var_list=[var0])
    close_by_type(var0, [[-1, -1]], rtol=0.01)


# ======================================================================================== adadelta_test.py
@pytest.mark.parametrize("dtype", HALF_FLOAT)
def test_adadelta_basic(dtype):
    # tensorflow/python/training/adadelta_test.py: doTestBasic (testBasic, testResourceBasic), rtol=1e-3
    rho, epsilon = 0.95, 1e-8
    for grad in [0.2, 0.1, 0.01]:
        for lr in [1.0, 0.5, 0.1]:
            var0, var1 = two_vars(dtype)
            grads = const([grad, grad], dtype)
            opt = v1.AdadeltaOptimizer(lr, rho, epsilon)
            opt.apply_gradients(zip([grads, grads], [var0, var1]))
            opt_vars = opt.variables()
            assert len(opt_vars) == 4
            assert opt.get_slot_names() == ["accum", "accum_update"]
            for v in (var0, var1):
                for name in ("accum", "accum_update"):
                    slot = opt.get_slot(v, name)
                    assert slot.shape == v.shape and not slot.requires_grad
            # the first step above is step 0 of the reference loop
            accum = accum_update = 0.0
            total = 0.0
            for step in range(4):
                if step > 0:
                    opt.apply_gradients(zip([grads, grads], [var0, var1]))
                accum = accum * rho + (grad**2) * (1 - rho)
                update = np.sqrt(accum_update + epsilon) * (1.0 / np.sqrt(accum + epsilon)) * grad
                accum_update = accum_update * rho + (update**2) * (1.0 - rho)
                total += update * lr
                for v in (var0, var1):
                    close_by_type(opt.get_slot(v, "accum"), [accum, accum], rtol=1e-3)
                    close_by_type(opt.get_slot(v, "accum_update"), [accum_update, accum_update], rtol=1e-3)
                close_by_type(var0, [1.0 - total, 2.0 - total], rtol=1e-3)
                close_by_type(var1, [3.0 - total, 4.0 - total], rtol=1e-3)


@pytest.mark.parametrize("dtype", DTYPES)
def test_adadelta_minimize_sparse(dtype):
    # tensorflow/python/training/adadelta_test.py: testMinimizeSparseResourceVariable
    var0 = var([[1.0, 2.0]], dtype, "var0")
    x = const([[4.0], [5.0]], dtype)
    v1.AdadeltaOptimizer(1.0, 1.0, 1.0).minimize(lambda: (lookup_row0(var0) @ x) ** 2, var_list=[var0])
    close_by_type(var0, [[-111, -138]])


# ========================================================================================= rmsprop_test.py
TF1_RMSPROP_PARAMS = [  # learning_rate, decay, momentum, epsilon, centered
    (0.5, 0.9, 0.0, 1e-3, True), (0.5, 0.9, 0.0, 1e-3, False), (0.1, 0.9, 0.0, 1e-3, True),
    (0.5, 0.95, 0.0, 1e-3, False), (0.5, 0.95, 0.0, 1e-5, True), (0.5, 0.95, 0.9, 1e-5, True),
]


def tf1_rmsprop_np(var_, g, mg, rms, mom, lr, decay, momentum, epsilon, centered):
    rms_t = rms * decay + (1 - decay) * g * g
    denom = rms_t + epsilon
    if centered:
        mg_t = mg * decay + (1 - decay) * g
        denom = denom - mg_t * mg_t
    else:
        mg_t = mg
    mom_t = momentum * mom + lr * g / np.sqrt(denom, dtype=denom.dtype)
    return var_ - mom_t, mg_t, rms_t, mom_t


def tf1_rmsprop_sparse_np(var_, indices, values, mg, rms, mom, lr, decay, momentum, epsilon, centered):
    mg_t, rms_t, mom_t, var_t = (np.copy(a) for a in (mg, rms, mom, var_))
    for i, gv in zip(indices, values):
        rms_t[i] = rms[i] * decay + (1 - decay) * gv * gv
        denom = rms_t[i] + epsilon
        if centered:
            mg_t[i] = mg_t[i] * decay + (1 - decay) * gv
            denom = denom - mg_t[i] * mg_t[i]
        mom_t[i] = momentum * mom[i] + lr * gv / np.sqrt(denom)
        var_t[i] = var_[i] - mom_t[i]
    return var_t, mg_t, rms_t, mom_t


@pytest.mark.parametrize("sparse", [False, True], ids=["testDense", "testSparse"])
@pytest.mark.parametrize("params", TF1_RMSPROP_PARAMS)
@pytest.mark.parametrize("dtype", HALF_FLOAT)
def test_rmsprop(dtype, params, sparse):
    # tensorflow/python/training/rmsprop_test.py: testDense / testSparse (4 steps; the mean square starts at 1).
    # testSparse's dense_shape is [1] for [2] variables upstream; the port passes [2] (issue 11 part 3).
    lr, decay, momentum, epsilon, centered = params
    n = NP[dtype]
    var0_np, var1_np = np.array([1.0, 2.0], n), np.array([3.0, 4.0], n)
    var0, var1 = var(var0_np, dtype, "var0"), var(var1_np, dtype, "var1")
    if sparse:
        g0_np, g1_np = np.array([0.1], n), np.array([0.01], n)
        grads = [slices(g0_np, [0], [2], dtype), slices(g1_np, [1], [2], dtype)]
    else:
        g0_np, g1_np = np.array([0.1, 0.2], n), np.array([0.01, 0.2], n)
        grads = [const(g0_np, dtype), const(g1_np, dtype)]
    opt = v1.RMSPropOptimizer(learning_rate=lr, decay=decay, momentum=momentum, epsilon=epsilon, centered=centered)
    state = [[np.zeros(2, n), np.ones(2, n), np.zeros(2, n)] for _ in range(2)]
    for _ in range(4):
        opt.apply_gradients(zip(grads, [var0, var1]))
        if sparse:
            var0_np, *state[0] = tf1_rmsprop_sparse_np(var0_np, [0], g0_np, *state[0], lr, decay, momentum, epsilon,
                                                       centered)
            var1_np, *state[1] = tf1_rmsprop_sparse_np(var1_np, [1], g1_np, *state[1], lr, decay, momentum, epsilon,
                                                       centered)
        else:
            var0_np, *state[0] = tf1_rmsprop_np(var0_np, g0_np, *state[0], lr, decay, momentum, epsilon, centered)
            var1_np, *state[1] = tf1_rmsprop_np(var1_np, g1_np, *state[1], lr, decay, momentum, epsilon, centered)
        for v, (mg_np, rms_np, mom_np) in zip((var0, var1), state):
            assert (opt.get_slot(v, "mg") is not None) == centered
            if centered:
                close_by_type(opt.get_slot(v, "mg"), mg_np)
            close_by_type(opt.get_slot(v, "rms"), rms_np)
            close_by_type(opt.get_slot(v, "momentum"), mom_np)
        close_by_type(var0, var0_np)
        close_by_type(var1, var1_np)


@pytest.mark.parametrize("dtype", HALF_FLOAT)
def test_rmsprop_without_momentum(dtype):
    # tensorflow/python/training/rmsprop_test.py: testWithoutMomentum
    var0, var1 = two_vars(dtype)
    grads = [const([0.1, 0.1], dtype), const([0.01, 0.01], dtype)]
    opt = v1.RMSPropOptimizer(learning_rate=2.0, decay=0.9, momentum=0.0, epsilon=1.0)
    opt.apply_gradients(zip(grads, [var0, var1]))
    rms0, rms1 = opt.get_slot(var0, "rms"), opt.get_slot(var1, "rms")
    assert opt.get_slot(var0, "momentum") is not None and opt.get_slot(var1, "momentum") is not None
    close_by_type(rms0, [0.901, 0.901])
    close_by_type(rms1, [0.90001, 0.90001])
    s0, s1 = 0.1 * 2.0 / math.sqrt(0.901 + 1.0), 0.01 * 2.0 / math.sqrt(0.90001 + 1.0)
    close_by_type(var0, [1.0 - s0, 2.0 - s0])
    close_by_type(var1, [3.0 - s1, 4.0 - s1])
    opt.apply_gradients(zip(grads, [var0, var1]))
    close_by_type(rms0, [0.901 * 0.9 + 0.001] * 2)
    close_by_type(rms1, [0.90001 * 0.9 + 1e-5] * 2)
    t0 = 0.1 * 2.0 / math.sqrt(0.901 * 0.9 + 0.001 + 1.0)
    t1 = 0.01 * 2.0 / math.sqrt(0.90001 * 0.9 + 1e-5 + 1.0)
    close_by_type(var0, [1.0 - s0 - t0, 2.0 - s0 - t0])
    close_by_type(var1, [3.0 - s1 - t1, 4.0 - s1 - t1])


@pytest.mark.parametrize("dtype", HALF_FLOAT)
def test_rmsprop_with_momentum(dtype):
    # tensorflow/python/training/rmsprop_test.py: testWithMomentum
    var0, var1 = two_vars(dtype)
    grads = [const([0.1, 0.1], dtype), const([0.01, 0.01], dtype)]
    opt = v1.RMSPropOptimizer(learning_rate=2.0, decay=0.9, momentum=0.5, epsilon=1e-5)
    opt.apply_gradients(zip(grads, [var0, var1]))
    rms0, rms1 = opt.get_slot(var0, "rms"), opt.get_slot(var1, "rms")
    mom0, mom1 = opt.get_slot(var0, "momentum"), opt.get_slot(var1, "momentum")
    close_by_type(rms0, [0.901, 0.901])
    close_by_type(rms1, [0.90001, 0.90001])
    a0, a1 = 0.1 * 2.0 / math.sqrt(0.901 + 1e-5), 0.01 * 2.0 / math.sqrt(0.90001 + 1e-5)
    close_by_type(mom0, [a0, a0])
    close_by_type(mom1, [a1, a1])
    close_by_type(var0, [1.0 - a0, 2.0 - a0])
    close_by_type(var1, [3.0 - a1, 4.0 - a1])
    opt.apply_gradients(zip(grads, [var0, var1]))
    close_by_type(rms0, [0.901 * 0.9 + 0.001] * 2)
    close_by_type(rms1, [0.90001 * 0.9 + 1e-5] * 2)
    b0 = 0.5 * a0 + 0.1 * 2.0 / math.sqrt(0.901 * 0.9 + 0.001 + 1e-5)
    b1 = 0.5 * a1 + 0.01 * 2.0 / math.sqrt(0.90001 * 0.9 + 2e-5)
    close_by_type(mom0, [b0, b0])
    close_by_type(mom1, [b1, b1])
    close_by_type(var0, [1.0 - a0 - b0, 2.0 - a0 - b0])
    close_by_type(var1, [3.0 - a1 - b1, 4.0 - a1 - b1])


# ============================================================================================ ftrl_test.py
TF1_FTRL = {
    # upstream test: (init0, init1, kwargs, steps, expected0, expected1, half_rtol for var0)
    "testFtrlWithoutRegularization": ([0.0, 0.0], [0.0, 0.0],
                                      dict(l1_regularization_strength=0.0, l2_regularization_strength=0.0), 3,
                                      [-2.60260963, -4.29698515], [-0.28432083, -0.56694895], 1e-2),
    "testFtrlwithoutRegularization2": ([1.0, 2.0], [4.0, 3.0],
                                       dict(l1_regularization_strength=0.0, l2_regularization_strength=0.0), 3,
                                       [-2.55607247, -3.98729396], [-0.28232238, -0.56096673], None),
    "testFtrlWithL1": ([1.0, 2.0], [4.0, 3.0], dict(l1_regularization_strength=0.001, l2_regularization_strength=0.0),
                       10, [-7.66718769, -10.91273689], [-0.93460727, -1.86147261], None),
    "testFtrlWithL1_L2": ([1.0, 2.0], [4.0, 3.0],
                          dict(l1_regularization_strength=0.001, l2_regularization_strength=2.0), 10,
                          [-0.24059935, -0.46829352], [-0.02406147, -0.04830509], None),
    "testFtrlWithL1_L2_L2Shrinkage": ([1.0, 2.0], [4.0, 3.0],
                                      dict(l1_regularization_strength=0.001, l2_regularization_strength=2.0,
                                           l2_shrinkage_regularization_strength=0.1), 10,
                                      [-0.22578995, -0.44345796], [-0.14378493, -0.13229476], None),
}


@pytest.mark.parametrize("upstream", list(TF1_FTRL))
@pytest.mark.parametrize("dtype", HALF_FLOAT)
def test_ftrl_literal(upstream, dtype):
    # tensorflow/python/training/ftrl_test.py: <upstream> (testResourceFtrlWithoutRegularization: the same case)
    init0, init1, kwargs, steps, expected0, expected1, half_rtol = TF1_FTRL[upstream]
    var0, var1 = var(init0, dtype, "var0"), var(init1, dtype, "var1")
    grads = [const([0.1, 0.2], dtype), const([0.01, 0.02], dtype)]
    opt = v1.FtrlOptimizer(3.0, initial_accumulator_value=0.1, **kwargs)
    for _ in range(steps):
        opt.apply_gradients(zip(grads, [var0, var1]))
    rtol0 = half_rtol if (half_rtol and dtype == torch.float16) else 1e-6
    close_by_type(var0, expected0, rtol=rtol0)
    close_by_type(var1, expected1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_ftrl_minimize_sparse(dtype):
    # tensorflow/python/training/ftrl_test.py: testMinimizeSparseResourceVariable
    var0 = var([[1.0, 2.0]], dtype, "var0")
    x = const([[4.0], [5.0]], dtype)
    v1.FtrlOptimizer(1.0).minimize(lambda: (lookup_row0(var0) @ x) ** 2, var_list=[var0])
    close_by_type(var0, [[0, 1]], atol=0.01)


@pytest.mark.parametrize("dtype", HALF_FLOAT)
def test_ftrl_l1_l2_l2_shrinkage_sparse(dtype):
    # tensorflow/python/training/ftrl_test.py: testFtrlWithL1_L2_L2ShrinkageSparse
    var0, var1 = var([[1.0], [2.0]], dtype, "var0"), var([[4.0], [3.0]], dtype, "var1")
    grads = [slices([[0.1]], [0], [2, 1], dtype), slices([[0.02]], [1], [2, 1], dtype)]
    opt = v1.FtrlOptimizer(3.0, initial_accumulator_value=0.1, l1_regularization_strength=0.001,
                           l2_regularization_strength=2.0, l2_shrinkage_regularization_strength=0.1)
    for _ in range(10):
        opt.apply_gradients(zip(grads, [var0, var1]))
    close_by_type(var0, [[-0.22578995], [2.0]])
    close_by_type(var1, [[4.0], [-0.13229476]])


@pytest.mark.parametrize("dtype", HALF_FLOAT)
def test_ftrl_l2_shrinkage_does_not_change_lr_schedule(dtype):
    # tensorflow/python/training/ftrl_test.py: testFtrlWithL2ShrinkageDoesNotChangeLrSchedule
    var0, var1 = var([1.0, 2.0], dtype, "var0"), var([1.0, 2.0], dtype, "var1")
    common = dict(initial_accumulator_value=0.1, l1_regularization_strength=0.001, l2_regularization_strength=2.0)
    opt0 = v1.FtrlOptimizer(3.0, l2_shrinkage_regularization_strength=0.1, **common)
    opt1 = v1.FtrlOptimizer(3.0, **common)
    for _ in range(10):
        opt0.apply_gradients([(const([0.1, 0.2], dtype), var0)])
        opt1.apply_gradients([(const([0.1, 0.2], dtype), var1)])
    assert bool((var0.detach() ** 2 < var1.detach() ** 2).all())
    close_by_type(opt0.get_slot(var0, "accum"), opt1.get_slot(var1, "accum").detach().double().numpy(), dtype=dtype)


def _apply_a_few(opt, dtype, sparse, init=((0.0, 0.0), (0.0, 0.0)), g_sparse=(0.1, 0.02), g_dense=None, steps=5):
    if sparse:
        var0 = var([[init[0][0]], [init[0][1]]], dtype, "var0")
        var1 = var([[init[1][0]], [init[1][1]]], dtype, "var1")
        grads = [slices([[g_sparse[0]]], [0], [2, 1], dtype), slices([[g_sparse[1]]], [1], [2, 1], dtype)]
    else:
        var0, var1 = var(init[0], dtype, "var0"), var(init[1], dtype, "var1")
        grads = [const(g_dense[0], dtype), const(g_dense[1], dtype)]
    for _ in range(steps):
        opt.apply_gradients(zip(grads, [var0, var1]))
    return var0, var1


EQUIV = [
    # (upstream file: test, factory, reference factory, sparse, dtypes, init)
    ("ftrl_test.py: testEquivAdagradwithoutRegularization",
     lambda: v1.FtrlOptimizer(3.0, learning_rate_power=-0.5, initial_accumulator_value=0.1,
                              l1_regularization_strength=0.0, l2_regularization_strength=0.0),
     lambda: v1.AdagradOptimizer(3.0, initial_accumulator_value=0.1), False, "ftrl"),
    ("ftrl_test.py: testEquivSparseAdagradwithoutRegularization",
     lambda: v1.FtrlOptimizer(3.0, learning_rate_power=-0.5, initial_accumulator_value=0.1,
                              l1_regularization_strength=0.0, l2_regularization_strength=0.0),
     lambda: v1.AdagradOptimizer(3.0, initial_accumulator_value=0.1), True, "ftrl"),
    ("ftrl_test.py: testEquivSparseGradientDescentwithoutRegularization",
     lambda: v1.FtrlOptimizer(3.0, learning_rate_power=-0.0, initial_accumulator_value=0.1,
                              l1_regularization_strength=0.0, l2_regularization_strength=0.0),
     lambda: v1.GradientDescentOptimizer(3.0), True, "ftrl"),
    ("ftrl_test.py: testEquivGradientDescentwithoutRegularization",
     lambda: v1.FtrlOptimizer(3.0, learning_rate_power=-0.0, initial_accumulator_value=0.1,
                              l1_regularization_strength=0.0, l2_regularization_strength=0.0),
     lambda: v1.GradientDescentOptimizer(3.0), False, "ftrl"),
    ("proximal_gradient_descent_test.py: testEquivSparseGradientDescentwithoutRegularization",
     lambda: v1.ProximalGradientDescentOptimizer(3.0, l1_regularization_strength=0.0, l2_regularization_strength=0.0),
     lambda: v1.GradientDescentOptimizer(3.0), True, "proximal"),
    ("proximal_gradient_descent_test.py: testEquivGradientDescentwithoutRegularization",
     lambda: v1.ProximalGradientDescentOptimizer(3.0, l1_regularization_strength=0.0, l2_regularization_strength=0.0),
     lambda: v1.GradientDescentOptimizer(3.0), False, "proximal"),
    ("proximal_adagrad_test.py: testEquivAdagradwithoutRegularization",
     lambda: v1.ProximalAdagradOptimizer(3.0, initial_accumulator_value=0.1, l1_regularization_strength=0.0,
                                         l2_regularization_strength=0.0),
     lambda: v1.AdagradOptimizer(3.0, initial_accumulator_value=0.1), False, "proximal"),
    ("proximal_adagrad_test.py: testEquivSparseAdagradwithoutRegularization",
     lambda: v1.ProximalAdagradOptimizer(3.0, initial_accumulator_value=0.1, l1_regularization_strength=0.0,
                                         l2_regularization_strength=0.0),
     lambda: v1.AdagradOptimizer(3.0, initial_accumulator_value=0.1), True, "proximal"),
]


@pytest.mark.parametrize("upstream,factory,reference,sparse,kind", EQUIV, ids=[e[0] for e in EQUIV])
def test_equivalences(upstream, factory, reference, sparse, kind):
    # tensorflow/python/training/<upstream>. FTRL: from zeros, float16 and float32; the proximal files: float32
    # from [1, 2] / [3, 4] (sparse [[1], [2]] / [[3], [4]]) with dense gradients [0.1, 0.2] / [0.01, 0.02].
    if kind == "ftrl":
        cases = [(dt, ((0.0, 0.0), (0.0, 0.0))) for dt in HALF_FLOAT]
    else:
        cases = [(torch.float32, ((1.0, 2.0), (3.0, 4.0)))]
    for dtype, init in cases:
        kwargs = dict(init=init, g_dense=((0.1, 0.2), (0.01, 0.02)))
        val0, val1 = _apply_a_few(factory(), dtype, sparse, **kwargs)
        val2, val3 = _apply_a_few(reference(), dtype, sparse, **kwargs)
        close_by_type(val0, val2.detach().double().numpy(), dtype=dtype)
        close_by_type(val1, val3.detach().double().numpy(), dtype=dtype)


# =============================================================== proximal_gradient_descent / proximal_adagrad
PROXIMAL = {
    # upstream: (factory, init0, init1, steps, expected0, expected1)
    "proximal_gradient_descent_test.py: testProximalGradientDescentwithoutRegularization":
        (lambda: v1.ProximalGradientDescentOptimizer(3.0, l1_regularization_strength=0.0,
                                                     l2_regularization_strength=0.0),
         [0.0, 0.0], [0.0, 0.0], 3, [-0.9, -1.8], [-0.09, -0.18]),
    "proximal_gradient_descent_test.py: testProximalGradientDescentwithoutRegularization2":
        (lambda: v1.ProximalGradientDescentOptimizer(3.0, l1_regularization_strength=0.0,
                                                     l2_regularization_strength=0.0),
         [1.0, 2.0], [4.0, 3.0], 3, [0.1, 0.2], [3.91, 2.82]),
    "proximal_gradient_descent_test.py: testProximalGradientDescentWithL1_L2":
        (lambda: v1.ProximalGradientDescentOptimizer(3.0, l1_regularization_strength=0.001,
                                                     l2_regularization_strength=2.0),
         [1.0, 2.0], [4.0, 3.0], 10, [-0.0495, -0.0995], [-0.0045, -0.0095]),
    "proximal_adagrad_test.py: testProximalAdagradwithoutRegularization":
        (lambda: v1.ProximalAdagradOptimizer(3.0, initial_accumulator_value=0.1, l1_regularization_strength=0.0,
                                             l2_regularization_strength=0.0),
         [0.0, 0.0], [0.0, 0.0], 3, [-2.60260963, -4.29698515], [-0.28432083, -0.56694895]),
    "proximal_adagrad_test.py: testProximalAdagradwithoutRegularization2":
        (lambda: v1.ProximalAdagradOptimizer(3.0, initial_accumulator_value=0.1, l1_regularization_strength=0.0,
                                             l2_regularization_strength=0.0),
         [1.0, 2.0], [4.0, 3.0], 3, [-1.60261, -2.296985], [3.715679, 2.433051]),
    "proximal_adagrad_test.py: testProximalAdagradWithL1":
        (lambda: v1.ProximalAdagradOptimizer(3.0, initial_accumulator_value=0.1, l1_regularization_strength=0.001,
                                             l2_regularization_strength=0.0),
         [1.0, 2.0], [4.0, 3.0], 10, [-6.663634, -9.190331], [2.959304, 1.029232]),
    "proximal_adagrad_test.py: testProximalAdagradWithL1_L2":
        (lambda: v1.ProximalAdagradOptimizer(3.0, initial_accumulator_value=0.1, l1_regularization_strength=0.001,
                                             l2_regularization_strength=2.0),
         [1.0, 2.0], [4.0, 3.0], 10, [-0.0495, -0.0995], [-0.0045, -0.0095]),
}


@pytest.mark.parametrize("upstream", list(PROXIMAL))
def test_proximal_literal(upstream):
    # tensorflow/python/training/<upstream> (the Resource* variants are the same cases); float32, assertAllClose
    factory, init0, init1, steps, expected0, expected1 = PROXIMAL[upstream]
    var0, var1 = var(init0, name="var0"), var(init1, name="var1")
    opt = factory()
    for _ in range(steps):
        opt.apply_gradients(zip([const([0.1, 0.2]), const([0.01, 0.02])], [var0, var1]))
    close(var0, expected0)
    close(var1, expected1)


@pytest.mark.parametrize("cls,expected,kw", [
    ("ProximalGradientDescentOptimizer", [[-111, -138]], {}),   # proximal_gradient_descent_test.py
    ("ProximalAdagradOptimizer", [[0, 1]], {}),                 # proximal_adagrad_test.py
])
@pytest.mark.parametrize("dtype", FLOATS)
def test_proximal_minimize_sparse(cls, expected, kw, dtype):
    # tensorflow/python/training/{proximal_gradient_descent,proximal_adagrad}_test.py: testMinimizeSparseResourceVariable
    var0 = var([[1.0, 2.0]], dtype, "var0")
    x = const([[4.0], [5.0]], dtype)
    getattr(v1, cls)(1.0, **kw).minimize(lambda: (lookup_row0(var0) @ x) ** 2, var_list=[var0])
    close_by_type(var0, expected, atol=0.01)
