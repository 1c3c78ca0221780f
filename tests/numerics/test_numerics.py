"""slotopt.numerics against the rules it implements, and the two kernel paths against each other over long runs.

The recorded long trajectories (test_long_reference.py) cover float32 and default hyperparameters. Here the same
rules are checked where no recording exists: Eigen's summation order and ``pow`` on other sizes and float64, the
schedules' C-library transcendentals, flush-to-zero, and then random configurations (float64, non-default
hyperparameters, EMA, accumulation, clipping, every schedule, a composite) run for hundreds of steps on the
compiled and the foreach path, which must agree to the bit (200 steps, 8 random configurations per run: the
recorded cases already run 1000 steps).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import os

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import slotopt
from slotopt import numerics, schedules
from slotopt.kernels import native
from slotopt.numerics import eigen

LIBM = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
LIBM.cosf.argtypes = [ctypes.c_float]
LIBM.cosf.restype = ctypes.c_float
LIBM.powf.argtypes = [ctypes.c_float, ctypes.c_float]
LIBM.powf.restype = ctypes.c_float
LIBM.pow.argtypes = [ctypes.c_double, ctypes.c_double]
LIBM.pow.restype = ctypes.c_double
NATIVE = native._library is not None


def _bits(x) -> np.ndarray:
    a = np.asarray(x.detach().numpy() if isinstance(x, torch.Tensor) else x)
    return a.view(np.uint32 if a.dtype == np.float32 else np.uint64)


# ---------------------------------------------------------------------------------------------- reductions
def _eigen_sum_by_hand(values: list[float], dtype) -> float:
    """Eigen's order written out for fewer than 4 packets: packets lane-wise from 0, leftovers one by one from 0,
    then ``leftover + ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))`` (the 4-lane analogue for doubles)."""
    f = np.dtype(dtype).type
    width = 8 if f is np.float32 else 4
    whole = len(values) // width * width
    lanes = [f(0)] * width
    for start in range(0, whole, width):
        lanes = [lanes[i] + f(values[start + i]) for i in range(width)]
    leftover = f(0)
    for v in values[whole:]:
        leftover = leftover + f(v)
    if width == 8:
        return leftover + (((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7])))
    return leftover + ((lanes[0] + lanes[2]) + (lanes[1] + lanes[3]))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("size", [0, 1, 7, 8, 15, 16, 23, 31])
def test_sum_follows_eigens_packet_order(dtype, size):
    rng = np.random.default_rng(size)
    values = (rng.standard_normal(size) * 10.0 ** rng.integers(-6, 6, size)).astype(dtype)
    expected = _eigen_sum_by_hand(values.tolist(), dtype)
    assert _bits(numerics.sum(torch.from_numpy(values))) == _bits(np.array(expected, dtype=dtype))


def test_sum_of_many_uses_four_accumulators_and_halves():
    """From 4 packets on, Eigen keeps four packet accumulators; above 1024 packets it sums halves (a tree)."""
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(32) * 10.0 ** rng.integers(-6, 6, 32)).astype(np.float32)
    acc = [x[0:8], x[8:16], x[16:24], x[24:32]]
    lanes = ((acc[0] + acc[1]) + acc[2]) + acc[3]
    expected = _eigen_sum_by_hand(lanes.tolist(), np.float32)
    assert _bits(eigen.full_sum(x)) == _bits(np.array(expected, dtype=np.float32))
    big = rng.standard_normal(8 * 1024 * 3 + 5).astype(np.float32)
    split = 8 * math.ceil(math.ceil(big.size / 2) / 8)  # the split point, on a packet boundary
    halves = np.float32(0) + eigen.full_sum(big[:split])
    assert _bits(eigen.full_sum(big)) == _bits(halves + eigen.full_sum(big[split:]))


def test_mean_over_rows_and_columns():
    x = torch.tensor(np.random.default_rng(2).standard_normal((3, 17)).astype(np.float32))
    rows = numerics.mean(x, dim=-1)
    for i in range(3):
        assert _bits(rows[i]) == _bits(numerics.sum(x[i]) / np.float32(17))
    columns = numerics.mean(x, dim=-2, keepdim=True)
    by_hand = ((np.float32(0) + x[0].numpy()) + x[1].numpy()) + x[2].numpy()
    assert columns.shape == (1, 17) and (_bits(columns[0]) == _bits(by_hand / np.float32(3))).all()


# -------------------------------------------------------------------------------------------- roots, pow, cos
def test_sqrt_is_correctly_rounded_where_torch_is_not():
    x = torch.from_numpy(np.random.default_rng(3).uniform(0, 4, 100_000).astype(np.float32))
    ours = numerics.sqrt(x).numpy().astype(np.float64)
    exact = np.sqrt(x.numpy().astype(np.float64))
    # correctly rounded: no float32 is nearer to the true root than ours
    error = np.abs(ours - exact)
    assert (error <= np.abs(np.nextafter(ours.astype(np.float32), np.float32(np.inf)) - ours) / 2 + 0).all()
    scalar = torch.tensor(2.0, dtype=torch.float32)
    assert numerics.sqrt(scalar).item() == float(np.sqrt(np.float32(2.0)))


def test_pow_takes_eigens_form_on_whole_packets_and_libm_on_the_tail():
    x = torch.tensor(np.random.default_rng(4).uniform(0.01, 3.0, 15).astype(np.float32))
    result = numerics.pow(x, 0.5)
    tail = [LIBM.powf(v, 0.5) for v in x[8:].tolist()]
    assert result[8:].tolist() == tail
    packet = eigen.generic_pow(x[:8].numpy(), np.float32(0.5))
    assert (_bits(result[:8]) == _bits(packet)).all()
    # rows: packets start at each row
    rows = numerics.pow(x[:14].reshape(2, 7), 2.0, rows=True)
    assert rows.flatten().tolist() == [LIBM.powf(v, 2.0) for v in x[:14].tolist()]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_generic_pow_special_values_and_accuracy(dtype):
    x = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 2.0, 0.5, 3.0, -2.0, 1e-3], dtype=dtype)
    for y in (2.0, -2.0, 0.5, 3.0, 0.0, 1.0, -0.5):
        padded = np.concatenate([x, np.ones((-x.size) % eigen.PACKET[np.dtype(dtype)], dtype=dtype)])
        got = eigen.generic_pow(padded, dtype(y))[:x.size]
        want = np.array([LIBM.pow(v, y) for v in x.tolist()])  # C's pow: its special values are IEEE's
        finite = np.isfinite(want)
        assert (np.isnan(got) == np.isnan(want)).all()
        assert (got[~finite & ~np.isnan(want)] == want[~finite & ~np.isnan(want)]).all()
        rel = np.abs(got[finite] - want[finite]) / np.maximum(np.abs(want[finite]), np.finfo(dtype).tiny)
        assert (rel <= 8 * np.finfo(dtype).eps).all(), (y, got, want)


def test_cosine_and_scalar_powers_are_the_c_librarys():
    x = torch.tensor(np.random.default_rng(5).uniform(0, 3.2, 200).astype(np.float32))
    assert numerics.cos(x).tolist() == [LIBM.cosf(v) for v in x.tolist()]
    assert numerics.cos(x.double()).tolist() == [math.cos(v) for v in x.double().tolist()]
    assert numerics.scalar_pow(0.9, 829.0, single=True) == 0.0  # 0.9f ** 829 is subnormal: flushed
    assert numerics.scalar_pow(0.9, 828.0, single=True) == LIBM.powf(0.9, 828.0) > 0.0


def test_flush_to_zero_flushes_subnormal_results_and_restores_the_mode():
    tiny = torch.tensor([1e-38], dtype=torch.float32)
    with numerics.flush_to_zero():
        assert (tiny * 0.5).item() == 0.0
    assert (tiny * 0.5).item() > 0.0


@pytest.mark.skipif(not NATIVE, reason="the rsqrtps estimate comes from the compiled library")
def test_fused_rsqrt_uses_the_estimate_on_whole_packets_only():
    x = torch.tensor(np.random.default_rng(6).uniform(0.01, 100.0, 15).astype(np.float32))
    result = numerics.rsqrt([x])[0]
    exact = 1.0 / np.sqrt(x.numpy())
    assert (_bits(result[8:]) == _bits(exact[8:])).all()
    assert np.allclose(result[:8].numpy(), exact[:8], rtol=3e-7)
    rows = numerics.rsqrt([x[:14].reshape(2, 7)], rows=True)[0]  # rows of 7: no whole packet
    assert (_bits(rows.flatten()) == _bits(exact[:14])).all()


def test_schedules_take_cosf():
    """CosineDecay as Keras computes it in float32, with the C library's cosf (not torch.cos)."""
    schedule = schedules.CosineDecay(0.1, decay_steps=1000, alpha=0.05)
    f = np.float32
    for step in (0, 1, 333, 467, 999, 1000, 1500):
        fraction = f(min(step, 1000)) / f(1000)
        cosine = f(0.5) * (f(1) + f(LIBM.cosf(f(math.pi) * fraction)))
        expected = f(0.1) * ((f(1) - f(0.05)) * cosine + f(0.05))
        assert float(schedule(step)) == float(expected), step


# ---------------------------------------------------------------------------- compiled == foreach, long runs
def _configurations():
    keras3, legacy, v1 = slotopt, slotopt.legacy, slotopt.v1
    return {
        "adam_amsgrad_clip_ema": lambda: keras3.Adam(0.003, amsgrad=True, clipnorm=0.3, use_ema=True,
                                                     ema_overwrite_frequency=7),
        "adamw_accumulate_global_clip": lambda: keras3.AdamW(0.002, weight_decay=0.01, global_clipnorm=0.5,
                                                             gradient_accumulation_steps=3),
        "nadam_polynomial": lambda: keras3.Nadam(schedules.PolynomialDecay(0.01, 300, 0.001, power=1.7)),
        "rmsprop_centered_exponential": lambda: keras3.RMSprop(
            schedules.ExponentialDecay(0.01, 50, 0.9), centered=True, momentum=0.5),
        "ftrl_power": lambda: keras3.Ftrl(0.05, learning_rate_power=-0.3, l1_regularization_strength=0.001,
                                          l2_regularization_strength=0.01, l2_shrinkage_regularization_strength=0.01),
        "lamb_restarts": lambda: keras3.Lamb(schedules.CosineDecayRestarts(0.01, 40, t_mul=1.5, m_mul=0.8)),
        "adafactor": lambda: keras3.Adafactor(0.01),
        "adagrad_inverse_time": lambda: keras3.Adagrad(schedules.InverseTimeDecay(0.05, 20, 0.5)),
        "sgd_piecewise": lambda: keras3.SGD(schedules.PiecewiseConstantDecay([50, 150], [0.1, 0.05, 0.01]),
                                            momentum=0.9, nesterov=True),
        "legacy_ftrl_power": lambda: legacy.Ftrl(0.05, learning_rate_power=-0.7, l1_regularization_strength=0.01),
        "legacy_adadelta": lambda: legacy.Adadelta(1.0, rho=0.9),
        "legacy_adam_amsgrad": lambda: legacy.Adam(0.003, amsgrad=True),
        "v1_proximal_adagrad": lambda: v1.ProximalAdagradOptimizer(0.05, l1_regularization_strength=0.001,
                                                                   l2_regularization_strength=0.01),
        "v1_ftrl_power": lambda: v1.FtrlOptimizer(0.05, learning_rate_power=-0.6),
        "v1_adagrad": lambda: v1.AdagradOptimizer(0.05),
        "v1_adadelta": lambda: v1.AdadeltaOptimizer(1.0),
    }


CONFIGURATIONS = _configurations()
SHAPES = [(3, 5), (7,), (17,), (4, 9)]  # whole packets and tails, in both dtypes


def _run(config: str, dtype: torch.dtype, grads: list[list[np.ndarray]], path: str, composite: bool):
    previous = native.use(path)
    try:
        torch.manual_seed(0)
        variables = [slotopt.Variable(torch.linspace(-1, 1, math.prod(s), dtype=dtype).reshape(s), name=f"v{i}")
                     for i, s in enumerate(SHAPES)]
        if composite:
            opt = slotopt.CompositeOptimizer([(slotopt.legacy.Adam(0.003), lambda: variables[:2]),
                                              (slotopt.legacy.Ftrl(0.05, learning_rate_power=-0.4),
                                               lambda: variables[2:])])
        else:
            opt = CONFIGURATIONS[config]()
        is_v1 = not composite and type(opt).__module__.startswith("slotopt.v1")
        step = slotopt.Variable(torch.zeros((), dtype=torch.int64), name="global_step")
        for row in grads:
            pairs = [(torch.tensor(g, dtype=dtype), v) for g, v in zip(row, variables)]
            opt.apply_gradients(pairs, global_step=step) if is_v1 else opt.apply_gradients(pairs)
        return [v.detach().clone() for v in variables]
    finally:
        native.use(previous)


@pytest.mark.skipif(not NATIVE, reason="compares the compiled path with the foreach path")
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=st.sampled_from(sorted(CONFIGURATIONS) + ["composite"]),
       dtype=st.sampled_from([torch.float32, torch.float64]), seed=st.integers(0, 2**16))
def test_compiled_and_foreach_paths_agree_bit_for_bit_over_long_runs(config, dtype, seed):
    rng = np.random.default_rng(seed)
    steps = 200
    grads = [[rng.standard_normal(s) * 10.0 ** rng.integers(-3, 1) for s in SHAPES] for _ in range(steps)]
    composite = config == "composite"
    compiled = _run(config, dtype, grads, "native", composite)
    foreach = _run(config, dtype, grads, "foreach", composite)
    for a, b in zip(compiled, foreach):
        assert (_bits(a) == _bits(b)).all(), config


def test_the_vendor_is_the_processors_and_the_estimate_guard_names_it():
    """``numerics.cpu.vendor()`` is the CPUID vendor Linux reports; the estimate's bits are TensorFlow's for that
    vendor only (docs/exactness.md: the same bits as TensorFlow on the same vendor's processors)."""
    from slotopt.numerics import cpu

    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as cpuinfo:
            lines = [line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("vendor_id")]
        assert cpu.vendor() == (lines[0] if lines else "unknown")
    assert numerics.fused_rsqrt_exact(cpu.vendor()) == numerics.fused_rsqrt_exact() == NATIVE
    assert not numerics.fused_rsqrt_exact(cpu.INTEL if cpu.vendor() != cpu.INTEL else cpu.AMD)
