"""Tests for slotopt.schedules.

Every expected value is recomputed here from the formula with numpy float32 (or float64) scalars, one rounding
per operation, in the order Keras uses. Arithmetic-only results must match bit for bit. Results that go through
cos/log are compared within a couple of float32 ulps of the schedule's scale, because torch's float32 cos and
log are not always correctly rounded (the reference uses correctly rounded float64 math, rounded to float32).
"""

from __future__ import annotations

import doctest
import math
from typing import Any, Callable, List

import numpy as np
import pytest
import torch

from slotopt import schedules
from slotopt.schedules import (
    CosineDecay,
    CosineDecayRestarts,
    ExponentialDecay,
    InverseTimeDecay,
    LearningRateSchedule,
    PiecewiseConstantDecay,
    PolynomialDecay,
)

f32 = np.float32
f64 = np.float64


def cos32(x: Any) -> np.float32:
    return f32(math.cos(float(x)))


def log32(x: Any) -> np.float32:
    return f32(math.log(float(x)))


PI32 = f32(math.pi)


def value(t: torch.Tensor) -> float:
    assert isinstance(t, torch.Tensor)
    assert t.shape == ()
    return t.item()


def assert_exact(got: torch.Tensor, want: Any, dtype: torch.dtype = torch.float32) -> None:
    assert got.dtype == dtype
    assert value(got) == float(want), (value(got), float(want))


def assert_near(got: torch.Tensor, want: Any, scale: float, ulps: int = 2) -> None:
    """Within ``ulps`` float32 ulps of ``scale`` (the schedule's magnitude)."""
    assert got.dtype == torch.float32
    tol = ulps * float(np.spacing(f32(abs(scale))))
    assert abs(value(got) - float(want)) <= tol, (value(got), float(want), tol)


# Every way an optimizer (or a user) passes the same step.
STEP_KINDS: List[Callable[[int], Any]] = [
    lambda k: k,
    lambda k: float(k),
    lambda k: torch.tensor(k, dtype=torch.int64),
    lambda k: torch.tensor(k, dtype=torch.int32),
    lambda k: torch.tensor(k, dtype=torch.float32),
    lambda k: torch.tensor(k, dtype=torch.float64),
]
STEP_IDS = ["py_int", "py_float", "int64", "int32", "float32", "float64"]


# ---------------------------------------------------------------------------------------------------------------
# ExponentialDecay
# ---------------------------------------------------------------------------------------------------------------


def _exp_ref(lr0: float, d: float, rate: float, k: int, staircase: bool) -> np.float32:
    p = f32(k) / f32(d)
    if staircase:
        p = np.floor(p)
    return f32(lr0) * f32(rate) ** p


@pytest.mark.parametrize("kind", STEP_KINDS, ids=STEP_IDS)
@pytest.mark.parametrize("staircase", [False, True])
def test_exponential_decay_values(kind: Callable[[int], Any], staircase: bool) -> None:
    s = ExponentialDecay(0.1, 7, 0.96, staircase=staircase)
    for k in (0, 1, 3, 7, 10, 14, 100, 12345):
        assert_exact(s(kind(k)), _exp_ref(0.1, 7, 0.96, k, staircase))


def test_exponential_decay_known_numbers() -> None:
    s = ExponentialDecay(1.0, 10, 0.5)
    assert value(s(10)) == 0.5
    assert value(s(20)) == 0.25
    assert value(s(5)) == float(f32(0.5) ** f32(0.5))  # sqrt(0.5) rounded to float32
    stair = ExponentialDecay(1.0, 10, 0.5, staircase=True)
    assert [value(stair(k)) for k in (0, 9, 10, 19, 20)] == [1.0, 1.0, 0.5, 0.5, 0.25]
    # The learning rate itself is float32: 0.1 is not 0.1.
    assert value(ExponentialDecay(0.1, 10, 0.5)(10)) == 0.05000000074505806


# ---------------------------------------------------------------------------------------------------------------
# PiecewiseConstantDecay
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", STEP_KINDS, ids=STEP_IDS)
def test_piecewise_constant_values(kind: Callable[[int], Any]) -> None:
    s = PiecewiseConstantDecay([10, 20, 30], [1.0, 0.5, 0.1, 0.01])
    expected = {0: 1.0, 10: 1.0, 11: 0.5, 20: 0.5, 21: 0.1, 30: 0.1, 31: 0.01, 1000: 0.01}
    for k, v in expected.items():
        assert_exact(s(kind(k)), f32(v))


def test_piecewise_constant_single_boundary_and_int_values() -> None:
    s = PiecewiseConstantDecay([5], [3, 7])
    for k, v in ((0, 3), (5, 3), (6, 7)):
        out = s(torch.tensor(k))
        assert out.dtype == torch.int32  # Python ints become int32 tensors, as in Keras
        assert out.item() == v
    assert s(5.5).item() == 7  # a float step (legacy) selects with a float comparison


def test_piecewise_constant_result_dtype_follows_first_value() -> None:
    s = PiecewiseConstantDecay([1], [torch.tensor(0.1, dtype=torch.float64), 0.2])
    assert_exact(s(0), f64(0.1), torch.float64)
    # Later Python floats become float32 tensors first, then take values[0]'s dtype.
    assert_exact(s(2), f64(f32(0.2)), torch.float64)


def test_piecewise_constant_boundaries_take_the_step_dtype() -> None:
    s = PiecewiseConstantDecay([2.5], [1.0, 2.0])
    # Integer step: the boundary is truncated to 2, so step 2 is still in the first piece and 3 is not.
    assert value(s(torch.tensor(2))) == 1.0
    assert value(s(torch.tensor(3))) == 2.0
    # Float step: the boundary stays 2.5.
    assert value(s(torch.tensor(2.0))) == 1.0
    assert value(s(torch.tensor(2.6))) == 2.0
    assert value(s(torch.tensor(2.5, dtype=torch.float64))) == 1.0


def test_piecewise_constant_indicator_sum_vs_selection_with_inf() -> None:
    s = PiecewiseConstantDecay([3], [math.inf, 1.0])
    # Keras 3 sums indicator * value: 0 * inf is nan, so the int-step path gives nan past the boundary.
    assert value(s(torch.tensor(2))) == math.inf
    assert math.isnan(value(s(torch.tensor(4))))
    # The float-step path selects the value, as tf.keras' tf.case does.
    assert value(s(torch.tensor(2.0))) == math.inf
    assert value(s(torch.tensor(4.0))) == 1.0


def test_piecewise_constant_int_and_float_paths_agree_on_finite_values() -> None:
    s = PiecewiseConstantDecay([0, 4, 9], [0.75, -0.0, 1e-30, 3.0e38])
    for k in range(-2, 14):
        a, b = s(torch.tensor(k)), s(torch.tensor(float(k)))
        assert a.dtype == b.dtype == torch.float32
        assert a.item() == b.item()


# ---------------------------------------------------------------------------------------------------------------
# PolynomialDecay
# ---------------------------------------------------------------------------------------------------------------


def _poly_ref(lr0: float, d: int, end: float, power: float, k: int, cycle: bool) -> np.float32:
    s, dd = f32(k), f32(d)
    if cycle:
        mult = f32(1.0) if s == 0 else np.ceil(s / f32(d))
        dd = dd * mult
    else:
        s = min(s, dd)
    p = s / dd
    return (f32(lr0) - f32(end)) * (f32(1.0) - p) ** f32(power) + f32(end)


@pytest.mark.parametrize("kind", STEP_KINDS, ids=STEP_IDS)
@pytest.mark.parametrize("cycle", [False, True])
@pytest.mark.parametrize("power", [1.0, 0.5, 2.0])
def test_polynomial_decay_values(kind: Callable[[int], Any], cycle: bool, power: float) -> None:
    s = PolynomialDecay(0.1, 7, end_learning_rate=0.001, power=power, cycle=cycle)
    for k in (0, 1, 3, 6, 7, 8, 13, 14, 15, 50):
        assert_exact(s(kind(k)), _poly_ref(0.1, 7, 0.001, power, k, cycle))


def test_polynomial_decay_known_numbers() -> None:
    s = PolynomialDecay(1.0, 10, end_learning_rate=0.0, power=1.0)
    assert [value(s(k)) for k in (0, 5, 10, 15)] == [1.0, 0.5, 0.0, 0.0]
    c = PolynomialDecay(1.0, 10, end_learning_rate=0.0, power=1.0, cycle=True)
    # Horizons: 10 for steps 0..10, 20 for 11..20, 30 for 21..30.
    assert [value(c(k)) for k in (0, 10, 15, 20, 25)] == [1.0, 0.0, 0.25, 0.0, float(f32(1) - f32(25) / 30)]
    assert value(c(30)) == 0.0
    # Default end_learning_rate is 1e-4 (as float32).
    assert value(PolynomialDecay(1.0, 10)(10)) == float(f32(0.0001))


# ---------------------------------------------------------------------------------------------------------------
# InverseTimeDecay
# ---------------------------------------------------------------------------------------------------------------


def _inv_ref(lr0: float, d: float, rate: float, k: int, staircase: bool) -> np.float32:
    p = f32(k) / f32(d)
    if staircase:
        p = np.floor(p)
    return f32(lr0) / (f32(1) + f32(rate) * p)


@pytest.mark.parametrize("kind", STEP_KINDS, ids=STEP_IDS)
@pytest.mark.parametrize("staircase", [False, True])
def test_inverse_time_decay_values(kind: Callable[[int], Any], staircase: bool) -> None:
    s = InverseTimeDecay(0.1, 3, 0.7, staircase=staircase)
    for k in (0, 1, 2, 3, 4, 9, 10, 1000):
        assert_exact(s(kind(k)), _inv_ref(0.1, 3, 0.7, k, staircase))


def test_inverse_time_decay_known_numbers() -> None:
    s = InverseTimeDecay(1.0, 10, 1.0)
    assert [value(s(k)) for k in (0, 10, 30)] == [1.0, 0.5, 0.25]
    stair = InverseTimeDecay(1.0, 10, 1.0, staircase=True)
    assert [value(stair(k)) for k in (9, 10, 19, 20)] == [1.0, 0.5, 0.5, float(f32(1) / f32(3))]


# ---------------------------------------------------------------------------------------------------------------
# CosineDecay
# ---------------------------------------------------------------------------------------------------------------


def _cos_decay32(x: np.float32, d: np.float32, start: np.float32, alpha: float) -> np.float32:
    frac = x / d
    cosine = f32(0.5) * (f32(1.0) + cos32(PI32 * frac))
    return start * (f32(1 - alpha) * cosine + f32(alpha))  # 1 - alpha in Python, rounded once


def _cosine_ref(lr0: float, d: int, alpha: float, k: int, target: Any = None, warmup: int = 0) -> np.float32:
    s, dd, start = f32(k), f32(d), f32(lr0)
    if target is None:
        return _cos_decay32(min(s, dd), dd, start, alpha)
    tt, ww = f32(target), f32(warmup)
    s = min(s, dd + ww)
    if s < ww:
        return (tt - start) * (s / ww) + start
    return _cos_decay32(s - ww, dd, tt, alpha)


@pytest.mark.parametrize("kind", STEP_KINDS, ids=STEP_IDS)
@pytest.mark.parametrize("alpha", [0.0, 0.2])
def test_cosine_decay_values(kind: Callable[[int], Any], alpha: float) -> None:
    s = CosineDecay(0.1, 9, alpha=alpha)
    for k in (0, 1, 4, 5, 8, 9, 10, 100):
        assert_near(s(kind(k)), _cosine_ref(0.1, 9, alpha, k), 0.1)


def test_cosine_decay_known_numbers() -> None:
    s = CosineDecay(2.0, 10, alpha=0.25)
    assert value(s(0)) == 2.0
    assert value(s(10)) == 0.5  # alpha * initial_learning_rate
    assert value(s(1000)) == 0.5
    # Half-way: 2 * (0.75 * 0.5 * (1 + cos(pi/2)) + 0.25) ~= 1.25; float32 cos(pi/2) is -4.4e-8.
    assert abs(value(s(5)) - 1.25) < 1e-6


@pytest.mark.parametrize("kind", STEP_KINDS, ids=STEP_IDS)
def test_cosine_decay_warmup(kind: Callable[[int], Any]) -> None:
    s = CosineDecay(0.01, 8, alpha=0.1, warmup_target=0.2, warmup_steps=5)
    for k in range(0, 5):  # linear warmup: arithmetic only, must match bit for bit
        assert_exact(s(kind(k)), _cosine_ref(0.01, 8, 0.1, k, 0.2, 5))
    for k in (5, 6, 9, 12, 13, 14, 40):  # cosine part, starting from warmup_target, clipped at 8 + 5
        assert_near(s(kind(k)), _cosine_ref(0.01, 8, 0.1, k, 0.2, 5), 0.2)
    assert value(s(5)) == float(f32(0.2))
    assert value(s(13)) == value(s(40)) == float(f32(0.2) * f32(0.1))


def test_cosine_decay_warmup_known_numbers_and_zero_warmup_steps() -> None:
    w = CosineDecay(0.0, 10, warmup_target=1.0, warmup_steps=4)
    assert [value(w(k)) for k in (0, 1, 2, 3, 4)] == [0.0, 0.25, 0.5, 0.75, 1.0]
    # warmup_steps == 0: no warmup, the decay starts from warmup_target (the unused branch divides by 0).
    z = CosineDecay(0.5, 10, warmup_target=1.0, warmup_steps=0)
    assert value(z(0)) == 1.0
    assert value(z(10)) == 0.0
    assert not math.isnan(value(z(3)))


# ---------------------------------------------------------------------------------------------------------------
# CosineDecayRestarts
# ---------------------------------------------------------------------------------------------------------------


def _restarts_ref(lr0: float, first: int, t_mul: float, m_mul: float, alpha: float, k: int) -> np.float32:
    one = f32(1.0)
    frac = f32(k) / f32(first)
    tm, a = f32(t_mul), f32(alpha)
    if tm == one:
        i = np.floor(frac)
        frac = frac - i
    else:
        i = np.floor(log32(one - frac * (one - tm)) / log32(tm))
        done = (one - tm**i) / (one - tm)
        frac = (frac - done) / tm**i
    cosine = f32(0.5) * f32(m_mul) ** i * (one + cos32(PI32 * frac))
    return f32(lr0) * ((one - a) * cosine + a)  # alpha cast first, 1 - alpha in float32


@pytest.mark.parametrize("kind", STEP_KINDS, ids=STEP_IDS)
def test_cosine_decay_restarts_t_mul_one(kind: Callable[[int], Any]) -> None:
    s = CosineDecayRestarts(0.1, 6, t_mul=1.0, m_mul=0.5, alpha=0.1)
    for k in (0, 1, 3, 5, 6, 7, 9, 12, 13, 20):
        assert_near(s(kind(k)), _restarts_ref(0.1, 6, 1.0, 0.5, 0.1, k), 0.1)


@pytest.mark.parametrize("kind", STEP_KINDS, ids=STEP_IDS)
@pytest.mark.parametrize("t_mul,m_mul", [(2.0, 1.0), (2.0, 0.8), (1.5, 0.9)])
def test_cosine_decay_restarts_geometric(kind: Callable[[int], Any], t_mul: float, m_mul: float) -> None:
    s = CosineDecayRestarts(0.1, 4, t_mul=t_mul, m_mul=m_mul, alpha=0.05)
    for k in (0, 1, 2, 3, 5, 7, 9, 11, 13, 15, 17, 23, 29, 37):
        assert_near(s(kind(k)), _restarts_ref(0.1, 4, t_mul, m_mul, 0.05, k), 0.1)


def test_cosine_decay_restarts_known_numbers() -> None:
    # t_mul = 2: periods of 10, 20, 40 steps start at 0, 10, 30; each peak is m_mul times the previous.
    s = CosineDecayRestarts(1.0, 10, t_mul=2.0, m_mul=0.5)
    assert value(s(0)) == 1.0
    assert value(s(10)) == 0.5
    assert value(s(30)) == 0.25
    assert abs(value(s(20)) - 0.25) < 1e-7  # middle of the second period
    assert abs(value(s(29)) - 0.5 * 0.5 * (1 + math.cos(math.pi * 19 / 20))) < 1e-7
    # t_mul = 1: every period is 10 steps.
    p = CosineDecayRestarts(1.0, 10, t_mul=1.0, m_mul=1.0, alpha=0.5)
    assert [value(p(k)) for k in (0, 10, 20)] == [1.0, 1.0, 1.0]
    assert abs(value(p(5)) - 0.75) < 1e-7


# ---------------------------------------------------------------------------------------------------------------
# dtype, device, constants
# ---------------------------------------------------------------------------------------------------------------


ALL_SCHEDULES = [
    ExponentialDecay(0.1, 10, 0.5),
    PiecewiseConstantDecay([3, 6], [0.1, 0.05, 0.01]),
    PolynomialDecay(0.1, 10, cycle=True),
    InverseTimeDecay(0.1, 10, 0.5),
    CosineDecay(0.1, 10, alpha=0.1, warmup_target=0.2, warmup_steps=2),
    CosineDecayRestarts(0.1, 10),
]


@pytest.mark.parametrize("s", ALL_SCHEDULES, ids=lambda s: type(s).__name__)
def test_every_step_kind_gives_the_same_float32_scalar(s: LearningRateSchedule) -> None:
    for k in (0, 1, 2, 5, 11, 31):
        results = [s(kind(k)) for kind in STEP_KINDS]
        for r in results:
            assert isinstance(r, torch.Tensor)
            assert r.dtype == torch.float32 and r.shape == () and r.device.type == "cpu"
            assert not r.requires_grad
        assert len({r.item() for r in results}) == 1


def test_float64_schedule_casts_hyperparameters_through_float32() -> None:
    lr0 = torch.tensor(1.0, dtype=torch.float64)
    # decay_rate goes through ops.cast: float64(float32(0.1)), not float64 0.1.
    out = ExponentialDecay(lr0, 10, 0.1)(10)
    assert_exact(out, f64(f32(0.1)), torch.float64)
    out = InverseTimeDecay(lr0, 1, 0.1)(torch.tensor(1.0, dtype=torch.float64))
    assert_exact(out, f64(1.0) / (f64(1.0) + f64(f32(0.1))), torch.float64)
    out = PolynomialDecay(lr0, 10, end_learning_rate=0.1, power=1.0)(5)
    end = f64(f32(0.1))
    assert_exact(out, (f64(1.0) - end) * (f64(1) - f64(5) / f64(10)) ** f64(1.0) + end, torch.float64)


def test_float64_cosine_decay_uses_float64_pi_and_python_one_minus_alpha() -> None:
    lr0 = torch.tensor(1.0, dtype=torch.float64)
    s = CosineDecay(lr0, 10, alpha=0.1)
    for k in (0, 3, 7):
        frac = f64(k) / f64(10)
        want = f64(1.0) * (f64(1 - 0.1) * (f64(0.5) * (f64(1.0) + np.cos(f64(math.pi) * frac))) + f64(0.1))
        got = s(k)
        assert got.dtype == torch.float64
        assert abs(got.item() - float(want)) <= 2 * np.spacing(1.0)


def test_integer_or_numpy_initial_learning_rate() -> None:
    # A Python int computes in float32 (not in an integer dtype).
    assert_exact(ExponentialDecay(1, 10, 0.5)(10), f32(0.5))
    # A numpy float64 scalar keeps float64, like tf.convert_to_tensor.
    assert ExponentialDecay(np.float64(1.0), 10, 0.5)(10).dtype == torch.float64


def test_tensor_hyperparameters_and_requires_grad_step() -> None:
    lr0 = torch.tensor(0.5)
    s = InverseTimeDecay(lr0, 2, torch.tensor(1.0))
    assert value(s(2)) == 0.25
    lr0.fill_(1.0)  # tensors are read on each call, never cached
    assert value(s(2)) == 0.5
    step = torch.tensor(2.0, requires_grad=True)
    assert not s(step).requires_grad


def test_attribute_changes_are_seen() -> None:
    s = ExponentialDecay(1.0, 10, 0.5)
    assert value(s(10)) == 0.5
    s.decay_rate = 0.25
    assert value(s(10)) == 0.25
    s.initial_learning_rate = 2.0
    assert value(s(10)) == 0.5
    p = PiecewiseConstantDecay([1], [1.0, 2.0])
    assert value(p(2)) == 2.0
    p.values[1] = 3.0
    assert value(p(2)) == 3.0


def test_broadcast_over_a_vector_of_steps() -> None:
    s = ExponentialDecay(1.0, 1, 0.5)
    assert s(torch.arange(4)).tolist() == [1.0, 0.5, 0.25, 0.125]
    p = PiecewiseConstantDecay([1], [1.0, 2.0])
    assert p(torch.arange(3)).tolist() == [1.0, 1.0, 2.0]
    assert p(torch.arange(3.0)).tolist() == [1.0, 1.0, 2.0]


def test_bool_step_is_rejected() -> None:
    with pytest.raises(TypeError, match="step=True"):
        ExponentialDecay(1.0, 1, 0.5)(True)


# ---------------------------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [ExponentialDecay, InverseTimeDecay])
@pytest.mark.parametrize("bad", [0, -3])
def test_decay_steps_must_be_positive(cls: Any, bad: int) -> None:
    with pytest.raises(ValueError) as err:
        cls(0.1, bad, 0.5)
    assert str(err.value) == f"Argument `decay_steps` must be > 0. Received: decay_steps={bad}"


@pytest.mark.parametrize("bad", [0, -1.5])
def test_polynomial_and_cosine_decay_steps_must_be_positive(bad: float) -> None:
    for build in (lambda: PolynomialDecay(0.1, bad), lambda: CosineDecay(0.1, bad)):
        with pytest.raises(ValueError, match=r"Argument `decay_steps` must be > 0\. Received: decay_steps="):
            build()
        with pytest.raises(ValueError) as err:
            build()
        assert f"decay_steps={bad}" in str(err.value)


@pytest.mark.parametrize("bad", [0, -10])
def test_first_decay_steps_must_be_positive(bad: int) -> None:
    with pytest.raises(ValueError) as err:
        CosineDecayRestarts(0.1, bad)
    assert str(err.value) == f"Argument `first_decay_steps` must be > 0. Received: first_decay_steps={bad}"


@pytest.mark.parametrize("boundaries,values", [([1, 2], [1.0, 2.0]), ([1], [1.0, 2.0, 3.0]), ([], [])])
def test_piecewise_constant_length_check(boundaries: List[int], values: List[float]) -> None:
    with pytest.raises(ValueError) as err:
        PiecewiseConstantDecay(boundaries, values)
    msg = str(err.value)
    assert msg.startswith("The length of boundaries should be 1 less than the length of values.")
    assert f"boundaries={boundaries} of length {len(boundaries)}" in msg
    assert f"values={values} of length {len(values)}" in msg


def test_piecewise_constant_without_boundaries_is_constant() -> None:
    s = PiecewiseConstantDecay([], [0.5])
    assert value(s(0)) == 0.5 and value(s(torch.tensor(99))) == 0.5 and value(s(3.0)) == 0.5


# ---------------------------------------------------------------------------------------------------------------
# Base class, config, (de)serialization
# ---------------------------------------------------------------------------------------------------------------


def test_base_class_messages() -> None:
    class Bare(LearningRateSchedule):
        pass

    with pytest.raises(NotImplementedError) as err:
        Bare()(0)
    assert str(err.value) == "Learning rate schedule 'Bare' must override `__call__(self, step)`."
    with pytest.raises(NotImplementedError) as err:
        Bare().get_config()
    assert (
        str(err.value)
        == "Learning rate schedule 'Bare' must override `get_config()` in order to be serializable."
    )
    with pytest.raises(NotImplementedError, match="'LearningRateSchedule' must override `__call__"):
        LearningRateSchedule()(1)


CONFIG_CASES = [
    (
        ExponentialDecay(0.1, 10, 0.96, staircase=True),
        "ExponentialDecay",
        {
            "initial_learning_rate": 0.1,
            "decay_steps": 10,
            "decay_rate": 0.96,
            "staircase": True,
            "name": "ExponentialDecay",
        },
    ),
    (
        PiecewiseConstantDecay([10, 20], [1.0, 0.5, 0.1]),
        "PiecewiseConstantDecay",
        {"boundaries": [10, 20], "values": [1.0, 0.5, 0.1], "name": "PiecewiseConstant"},
    ),
    (
        PolynomialDecay(0.1, 100, power=0.5, cycle=True),
        "PolynomialDecay",
        {
            "initial_learning_rate": 0.1,
            "decay_steps": 100,
            "end_learning_rate": 0.0001,
            "power": 0.5,
            "cycle": True,
            "name": "PolynomialDecay",
        },
    ),
    (
        InverseTimeDecay(0.1, 5, 0.5),
        "InverseTimeDecay",
        {
            "initial_learning_rate": 0.1,
            "decay_steps": 5,
            "decay_rate": 0.5,
            "staircase": False,
            "name": "InverseTimeDecay",
        },
    ),
    (
        CosineDecay(0.1, 100, alpha=0.1, warmup_target=0.5, warmup_steps=10),
        "CosineDecay",
        {
            "initial_learning_rate": 0.1,
            "decay_steps": 100,
            "alpha": 0.1,
            "name": "CosineDecay",
            "warmup_target": 0.5,
            "warmup_steps": 10,
        },
    ),
    (
        CosineDecayRestarts(0.1, 20, t_mul=1.5, m_mul=0.9, alpha=0.01),
        "CosineDecayRestarts",
        {
            "initial_learning_rate": 0.1,
            "first_decay_steps": 20,
            "t_mul": 1.5,
            "m_mul": 0.9,
            "alpha": 0.01,
            "name": "SGDRDecay",
        },
    ),
]


@pytest.mark.parametrize("s,class_name,config", CONFIG_CASES, ids=[c[1] for c in CONFIG_CASES])
def test_config_and_round_trip(s: LearningRateSchedule, class_name: str, config: dict) -> None:
    got = s.get_config()
    assert got == config
    assert list(got) == list(config)  # key order as in Keras
    data = schedules.serialize(s)
    assert data == {
        "module": "keras.optimizers.schedules",
        "class_name": class_name,
        "config": config,
        "registered_name": None,
    }
    for form in (data, {"class_name": class_name, "config": config}):
        back = schedules.deserialize(form)
        assert type(back) is type(s)
        assert back.get_config() == config
        for k in (0, 3, 15, 57, 250):
            assert value(back(k)) == value(s(k))
    assert type(s).from_config(config).get_config() == config
    assert schedules.get(data).get_config() == config


def test_default_names() -> None:
    names = [type(s).__name__ + ":" + s.get_config()["name"] for s, _, _ in CONFIG_CASES]
    assert names == [
        "ExponentialDecay:ExponentialDecay",
        "PiecewiseConstantDecay:PiecewiseConstant",
        "PolynomialDecay:PolynomialDecay",
        "InverseTimeDecay:InverseTimeDecay",
        "CosineDecay:CosineDecay",
        "CosineDecayRestarts:SGDRDecay",
    ]
    assert CosineDecay(0.1, 5).get_config()["warmup_target"] is None
    assert CosineDecay(0.1, 5).get_config()["warmup_steps"] == 0


class StepDecay(LearningRateSchedule):
    """A custom schedule: halves every ``every`` steps."""

    def __init__(self, lr: float, every: int) -> None:
        self.lr = lr
        self.every = every

    def __call__(self, step: Any) -> torch.Tensor:
        s = torch.as_tensor(step).to(torch.float32)
        return torch.tensor(self.lr) * torch.pow(torch.tensor(0.5), torch.floor(s / self.every))

    def get_config(self) -> dict:
        return {"lr": self.lr, "every": self.every}


def test_custom_schedule_via_custom_objects() -> None:
    s = StepDecay(1.0, 3)
    data = schedules.serialize(s)
    assert data == {
        "module": __name__,
        "class_name": "StepDecay",
        "config": {"lr": 1.0, "every": 3},
        "registered_name": "StepDecay",
    }
    with pytest.raises(ValueError) as err:
        schedules.deserialize(data)
    msg = str(err.value)
    assert "'StepDecay'" in msg
    for name in (
        "CosineDecay",
        "CosineDecayRestarts",
        "ExponentialDecay",
        "InverseTimeDecay",
        "PiecewiseConstantDecay",
        "PolynomialDecay",
    ):
        assert name in msg
    back = schedules.deserialize(data, custom_objects={"StepDecay": StepDecay})
    assert isinstance(back, StepDecay) and back.get_config() == {"lr": 1.0, "every": 3}
    assert value(back(7)) == 0.25
    # Legacy-style dict, and a custom name that shadows nothing.
    back = schedules.deserialize(
        {"class_name": "Mine", "config": {"lr": 2.0, "every": 1}}, custom_objects={"Mine": StepDecay}
    )
    assert value(back(1)) == 1.0


def test_deserialize_errors() -> None:
    with pytest.raises(ValueError, match="Unknown learning rate schedule.*'Nope'.*ExponentialDecay"):
        schedules.deserialize({"class_name": "Nope", "config": {}})
    with pytest.raises(ValueError, match="class_name"):
        schedules.deserialize({"config": {}})
    with pytest.raises(TypeError, match="config='ExponentialDecay'"):
        schedules.deserialize("ExponentialDecay")  # type: ignore[arg-type]


def test_get() -> None:
    s = ExponentialDecay(0.1, 10, 0.5)
    assert schedules.get(s) is s
    assert schedules.get(None) is None
    got = schedules.get(
        {
            "class_name": "InverseTimeDecay",
            "config": {"initial_learning_rate": 1.0, "decay_steps": 1, "decay_rate": 1.0},
        }
    )
    assert isinstance(got, InverseTimeDecay) and value(got(1)) == 0.5
    with pytest.raises(ValueError, match="Could not interpret"):
        schedules.get("ExponentialDecay")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Could not interpret"):
        schedules.get(0.1)  # type: ignore[arg-type]


def test_docstring_examples() -> None:
    failures, tried = doctest.testmod(schedules, optionflags=doctest.ELLIPSIS)
    assert tried >= 10
    assert failures == 0


def test_every_public_class_has_a_formula_docstring() -> None:
    for name in schedules.__all__:
        obj = getattr(schedules, name)
        assert obj.__doc__ and ">>>" in obj.__doc__, name
