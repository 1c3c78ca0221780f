"""keras/src/optimizers/schedules/learning_rate_schedule_test.py (keras-team/keras), ported to slotopt.schedules.

Steps are plain ints or int64/float32 tensors, as Keras passes python ints or backend variables. Tolerance:
upstream's ``assertAllClose(actual, expected, 1e-6)`` (rtol=1e-6, and Keras's default atol=1e-6).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import slotopt
from slotopt import schedules


def close(actual, expected, rtol=1e-6, atol=1e-6):
    np.testing.assert_allclose(float(actual), expected, rtol=rtol, atol=atol)


def round_trip(schedule):
    # Keras's run_class_serialization_test: config survives from_config and serialize/deserialize.
    config = schedule.get_config()
    assert type(schedule).from_config(config).get_config() == config
    assert schedules.deserialize(schedules.serialize(schedule)).get_config() == config


def test_fit_lr_correctness():
    # learning_rate_schedule_test.py: TestFitLRSchedulesFlow.test_fit_lr_correctness. Dense(2) with ones, mse,
    # x = y = arange(32).reshape(16, 2), 3 epochs of 4 batches, no shuffle; the fit loop written out (the epoch loss
    # Keras reports is the running mean of the batch losses).
    optimizer = slotopt.Adam(learning_rate=schedules.ExponentialDecay(initial_learning_rate=0.05, decay_steps=1,
                                                                      decay_rate=0.9))
    assert len(optimizer.variables) == 1
    assert int(optimizer.variables[0]) == 0
    kernel = slotopt.Variable(torch.ones(2, 2), name="kernel")
    bias = slotopt.Variable(torch.ones(2), name="bias")
    x = torch.arange(32, dtype=torch.float32).reshape(16, 2)
    y = torch.arange(32, dtype=torch.float32).reshape(16, 2)
    history = []
    for _ in range(3):
        losses = []
        for b in range(4):
            xb, yb = x[4 * b:4 * b + 4], y[4 * b:4 * b + 4]
            loss = ((xb @ kernel + bias - yb) ** 2).mean()
            grads = torch.autograd.grad(loss, [kernel, bias])
            optimizer.apply_gradients(zip(grads, [kernel, bias]))
            losses.append(loss.item())
        history.append(np.mean(losses))
    assert int(optimizer.variables[0]) == 4 * 3
    np.testing.assert_allclose(history, [230.79457092285156, 128.30319213867188, 79.33648681640625], rtol=5e-5)


# ------------------------------------------------------------------------------------ ExponentialDecayTest
def test_exponential_config():
    # learning_rate_schedule_test.py: ExponentialDecayTest.test_config
    round_trip(schedules.ExponentialDecay(initial_learning_rate=0.05, decay_steps=10, decay_rate=0.96,
                                          staircase=True, name="my_ed"))


def test_exponential_continuous():
    # learning_rate_schedule_test.py: ExponentialDecayTest.test_continuous
    close(schedules.ExponentialDecay(0.05, 10, 0.96)(5), 0.05 * 0.96 ** (5.0 / 10.0))


@pytest.mark.parametrize("test", ["test_staircase", "test_variables"])
def test_exponential_staircase(test):
    # learning_rate_schedule_test.py: ExponentialDecayTest.test_staircase and .test_variables (a float step
    # variable assigned 1, 2, 100)
    decayed_lr = schedules.ExponentialDecay(0.1, 3, 0.96, staircase=True)
    step = torch.tensor(1.0)
    close(decayed_lr(step), 0.1)
    step.fill_(2)
    close(decayed_lr(step), 0.1)
    step.fill_(100)
    close(decayed_lr(step), 0.1 * 0.96 ** (100 // 3))


# ------------------------------------------------------------------------------ PiecewiseConstantDecayTest
def test_piecewise_config():
    # learning_rate_schedule_test.py: PiecewiseConstantDecayTest.test_config
    round_trip(schedules.PiecewiseConstantDecay(boundaries=[10, 20], values=[1, 2, 3], name="my_pcd"))


def test_piecewise_values():
    # learning_rate_schedule_test.py: PiecewiseConstantDecayTest.test_piecewise_values
    decayed_lr = schedules.PiecewiseConstantDecay([100, 110, 120], [1.0, 0.1, 0.01, 0.001])
    for step, expected in [(-999.0, 1.0), (100, 1.0), (105, 0.1), (110, 0.1), (120, 0.01), (999, 0.001)]:
        close(decayed_lr(torch.tensor(float(step))), expected)


def test_piecewise_boundary_values():
    # learning_rate_schedule_test.py: PiecewiseConstantDecayTest.test_boundary_values (int64 step)
    decayed_lr = schedules.PiecewiseConstantDecay([1, 2, 3], [0.4, 0.5, 0.6, 0.7])
    for step, expected in [(0, 0.4), (1, 0.4), (2, 0.5), (3, 0.6), (4, 0.7)]:
        close(decayed_lr(torch.tensor(step, dtype=torch.int64)), expected)


# ------------------------------------------------------------------------ LinearDecayTest / SqrtDecayTest
def test_linear_config():
    # learning_rate_schedule_test.py: LinearDecayTest.test_config
    round_trip(schedules.PolynomialDecay(initial_learning_rate=0.1, decay_steps=100, end_learning_rate=0.005,
                                         power=1.0, cycle=False, name="my_ld"))


LR, END = 0.05, 0.001
POLYNOMIAL = {
    # (upstream class.test, step, end_lr, power, cycle, expected)
    "LinearDecayTest.test_halfway": (5, 0.0, 1.0, False, LR * 0.5),
    "LinearDecayTest.test_end": (10, END, 1.0, False, END),
    "LinearDecayTest.test_halfway_with_end": (5, END, 1.0, False, (LR + END) * 0.5),
    "LinearDecayTest.test_beyond_end": (15, END, 1.0, False, END),
    "LinearDecayTest.test_beyond_end_with_cycle": (15, END, 1.0, True, (LR - END) * 0.25 + END),
    "SqrtDecayTest.test_halfway": (5, 0.0, 0.5, False, LR * 0.5**0.5),
    "SqrtDecayTest.test_end": (10, END, 0.5, False, END),
    "SqrtDecayTest.test_halfway_with_end": (5, END, 0.5, False, (LR - END) * 0.5**0.5 + END),
    "SqrtDecayTest.test_beyond_end": (15, END, 0.5, False, END),
    "SqrtDecayTest.test_beyond_end_with_cycle": (15, END, 0.5, True, (LR - END) * 0.25**0.5 + END),
}


@pytest.mark.parametrize("upstream", list(POLYNOMIAL))
def test_polynomial(upstream):
    # learning_rate_schedule_test.py: <upstream>
    step, end_lr, power, cycle, expected = POLYNOMIAL[upstream]
    close(schedules.PolynomialDecay(LR, 10, end_lr, power=power, cycle=cycle)(step), expected)


def test_polynomial_begin_with_cycle():
    # learning_rate_schedule_test.py: SqrtDecayTest.test_begin_with_cycle
    close(schedules.PolynomialDecay(0.001, 10, cycle=True)(0), 0.001)


# ------------------------------------------------------------------------------------ InverseTimeDecayTest
def test_inverse_time_config():
    # learning_rate_schedule_test.py: InverseTimeDecayTest.test_config
    round_trip(schedules.InverseTimeDecay(initial_learning_rate=0.05, decay_steps=10, decay_rate=0.96,
                                          staircase=True, name="my_itd"))


@pytest.mark.parametrize("staircase", [False, True], ids=["test_decay", "test_staircase"])
def test_inverse_time(staircase):
    # learning_rate_schedule_test.py: InverseTimeDecayTest.test_decay / test_staircase (float step variable)
    k, decay_rate = 10, 0.96
    decayed_lr = schedules.InverseTimeDecay(0.1, k, decay_rate, staircase=staircase)
    for i in range(k + 1):
        expected = 0.1 / (1 + decay_rate * (i // k)) if staircase else 0.1 / (1 + i / k * decay_rate)
        close(decayed_lr(torch.tensor(float(i))), expected)


# ------------------------------------------------------------------------------------------ CosineDecayTest
def np_cosine_decay(step, decay_steps, alpha=0.0):
    step = min(step, decay_steps)
    decay = 0.5 * (1.0 + math.cos(math.pi * step / decay_steps))
    return (1.0 - alpha) * decay + alpha


def linear_warmup(step, warmup_steps, initial_lr, target_lr):
    return step / warmup_steps * (target_lr - initial_lr)


def test_cosine_config():
    # learning_rate_schedule_test.py: CosineDecayTest.test_config
    round_trip(schedules.CosineDecay(initial_learning_rate=0.05, decay_steps=10, alpha=0.1, warmup_target=0.2,
                                     warmup_steps=2, name="my_cd"))


@pytest.mark.parametrize("alpha,initial", [(0.0, 1.0), (0.1, 1.0), (0.0, np.float64(1.0))],
                         ids=["test_decay", "test_alpha", "test_float64"])
def test_cosine_decay(alpha, initial):
    # learning_rate_schedule_test.py: CosineDecayTest.test_decay / test_alpha / test_float64
    for step in range(0, 1500, 250):
        close(schedules.CosineDecay(initial, 1000, alpha)(step), np_cosine_decay(step, 1000, alpha))


def test_cosine_warmup():
    # learning_rate_schedule_test.py: CosineDecayTest.test_warmup (default assertAllClose tolerance)
    for step in range(0, 1500, 250):
        lr = schedules.CosineDecay(0.0, 10, warmup_target=10.0, warmup_steps=1500)
        close(lr(step), linear_warmup(step, 1500, 0.0, 10.0))


def test_cosine_warmup_decay():
    # learning_rate_schedule_test.py: CosineDecayTest.test_warmup_decay
    for step in range(0, 3000, 250):
        lr = schedules.CosineDecay(0.0, 1000, warmup_target=10.0, warmup_steps=2000)
        if step < 2001:
            expected = linear_warmup(step, 2000, 0.0, 10.0)
        else:
            expected = 10.0 * np_cosine_decay(step - 2000, 1000)
        close(lr(step), expected)


# ---------------------------------------------------------------------------------- CosineDecayRestartsTest
def np_cosine_decay_restarts(step, decay_steps, t_mul=2.0, m_mul=1.0, alpha=0.0):
    fac = 1.0
    while step >= decay_steps:
        step -= decay_steps
        decay_steps *= t_mul
        fac *= m_mul
    decay = fac * 0.5 * (1.0 + math.cos(math.pi * step / decay_steps))
    return (1.0 - alpha) * decay + alpha


def test_cosine_restarts_config():
    # learning_rate_schedule_test.py: CosineDecayRestartsTest.test_config
    round_trip(schedules.CosineDecayRestarts(initial_learning_rate=0.05, first_decay_steps=10, alpha=0.1,
                                             t_mul=3.0, m_mul=4.0, name="my_cdr"))


@pytest.mark.parametrize("initial,kwargs", [(1.0, {}), (np.float64(1.0), {}), (1.0, {"alpha": 0.1}),
                                            (1.0, {"m_mul": 0.9}), (1.0, {"t_mul": 1.0})],
                         ids=["test_decay", "test_float64", "test_alpha", "test_mmul", "test_tmul"])
def test_cosine_restarts(initial, kwargs):
    # learning_rate_schedule_test.py: CosineDecayRestartsTest.<id>
    for step in range(0, 1500, 250):
        close(schedules.CosineDecayRestarts(initial, 1000, **kwargs)(step),
              np_cosine_decay_restarts(step, 1000, **kwargs))
