"""Eigen's packet arithmetic as TensorFlow's CPU kernels run it, reproduced operation by operation in NumPy.

TensorFlow's pip wheels are built for AVX without FMA: a packet holds 8 floats or 4 doubles, and Eigen's
``pmadd(a, b, c)`` is a multiply and an add, each rounded. Every function below performs, on NumPy arrays of the
packet's dtype, exactly the rounded operations Eigen performs on a packet (NumPy rounds each float32/float64
operation once, as the hardware does), so the results carry the same bits.

* :func:`generic_pow` is Eigen's ``generic_pow`` (``GenericPacketMathPow.h``): a double-word ``log2`` of the
  mantissa, a double-word product with the exponent, ``exp2`` of the remainder. It differs from the C library's
  ``pow`` on about a quarter of float32 inputs, even for an exponent of 2.
* :func:`full_sum` is Eigen's full reduction (``TensorReduction.h``, ``InnerMostDimReducer``): trees of halves
  above 1024 packets; below, four packet accumulators over blocks of four packets, then whole packets into the
  first, the leftover elements one by one from 0, then ``leftover + predux(packet)``, where ``predux`` adds the
  upper half of the packet to the lower half until one lane is left.
* :func:`newton_rsqrt` is the Newton step Eigen's ``prsqrt`` applies to the CPU's ``rsqrtps`` estimate.
"""

from __future__ import annotations

import numpy as np

__all__ = ["PACKET", "generic_pow", "full_sum", "newton_rsqrt", "packet_end"]

#: Elements per AVX packet.
PACKET = {np.dtype(np.float32): 8, np.dtype(np.float64): 4}
_LEAF = 1024  # Eigen's LeafSize for float and double: packets per leaf of the reduction tree
_UINT = {np.dtype(np.float32): np.uint32, np.dtype(np.float64): np.uint64}
_INT = {np.dtype(np.float32): np.int32, np.dtype(np.float64): np.int64}


def packet_end(count: int, dtype: np.dtype) -> int:
    """How many of ``count`` elements (from the tensor's element 0) fall in whole packets."""
    width = PACKET[np.dtype(dtype)]
    return count // width * width


# ---------------------------------------------------------------------------------------------- double words
def _split(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Veltkamp's splitting (no FMA): ``x = hi + lo`` with each half holding half the mantissa."""
    f = x.dtype.type
    shift = (np.finfo(x.dtype).nmant + 2) // 2  # (digits + 1) / 2: 12 for float32, 27 for float64
    gamma = f(2.0 ** shift + 1.0) * x
    rho = x - gamma
    hi = rho + gamma
    return hi, x - hi


def _two_prod(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x_hi, x_lo = _split(x)
    y_hi, y_lo = _split(y)
    p_hi = x * y
    p_lo = x_hi * y_hi + (-p_hi)
    p_lo = x_hi * y_lo + p_lo
    p_lo = x_lo * y_hi + p_lo
    p_lo = x_lo * y_lo + p_lo
    return p_hi, p_lo


def _fast_two_sum(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s_hi = x + y
    return s_hi, y - (s_hi - x)


def _sum_ww(x_hi, x_lo, y_hi, y_lo):
    r_hi, r_lo = _fast_two_sum(x_hi, y_hi)
    return _fast_two_sum(r_hi, (y_lo + r_lo) + x_lo)


def _sum_fw(x, y_hi, y_lo):
    r_hi, r_lo = _fast_two_sum(x, y_hi)
    return _fast_two_sum(r_hi, y_lo + r_lo)


def _prod_wf(x_hi, x_lo, y):
    c_hi, c_lo1 = _two_prod(x_hi, y)
    t_hi, t_lo1 = _fast_two_sum(c_hi, x_lo * y)
    return _fast_two_sum(t_hi, t_lo1 + c_lo1)


def _prod_ww(x_hi, x_lo, y_hi, y_lo):
    hh, hl = _prod_wf(x_hi, x_lo, y_hi)
    lh, ll = _prod_wf(x_hi, x_lo, y_lo)
    return _sum_ww(hh, hl, lh, ll)


def _div_wf(x_hi, x_lo, y):
    t_hi = x_hi / y
    pi_hi, pi_lo = _two_prod(t_hi, y)
    delta = ((x_hi - pi_hi) - pi_lo) + x_lo
    return _fast_two_sum(t_hi, delta / y)


# ------------------------------------------------------------------------------------------------ log2, exp
_LOG2_FLOAT_C = [9.7010828554630279541015625e-02, -1.6896486282348632812500000e-01, 1.7200836539268493652343750e-01,
                 -1.7892272770404815673828125e-01, 2.0505344867706298828125000e-01,
                 -2.4046677350997924804687500e-01, 2.8857553005218505859375000e-01,
                 -3.6067414283752441406250000e-01, 4.8089790344238281250000000e-01]
_LOG2_FLOAT_C0 = 1.442695041742110273474963832995854318141937255859375e+00
_LOG2_FLOAT_C1 = -7.2134751588268664068692714863573201000690460205078125e-01


def _hi_lo(c: float) -> tuple[np.float32, np.float32]:
    hi = np.float32(c)
    return hi, np.float32(c - float(hi))


def _log2_float(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    f = np.float32
    x = z - f(1)
    p = np.full_like(x, f(_LOG2_FLOAT_C[0]))
    for c in _LOG2_FLOAT_C[1:]:
        p = p * x + f(c)
    p_hi, p_lo = _two_prod(x, p)
    c1_hi, c1_lo = _hi_lo(_LOG2_FLOAT_C1)
    p_hi, p_lo = _sum_ww(np.full_like(x, c1_hi), np.full_like(x, c1_lo), p_hi, p_lo)
    p_hi, p_lo = _prod_wf(p_hi, p_lo, x)
    c0_hi, c0_lo = _hi_lo(_LOG2_FLOAT_C0)
    p_hi, p_lo = _sum_ww(np.full_like(x, c0_hi), np.full_like(x, c0_lo), p_hi, p_lo)
    return _prod_wf(p_hi, p_lo, x)


def _log2_double(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    d = np.float64
    one = d(1.0)
    full = lambda c: np.full_like(x, d(c))  # noqa: E731
    t_hi, t_lo = _prod_wf(full(2.88539008177792677), full(4.07660016854549667e-17), x - one)
    r_hi, r_lo = _div_wf(t_hi, t_lo, x + one)
    r2_hi, r2_lo = _prod_ww(r_hi, r_lo, r_hi, r_lo)
    r4_hi, _ = _prod_ww(r2_hi, r2_lo, r2_hi, r2_lo)
    q_even = d(2.87074255468000586e-9) * r4_hi + d(2.31032094540014656e-7)
    q_odd = d(2.38957980901884082e-8) * r4_hi + d(2.27279857398537278e-6)
    q_even = q_even * r4_hi + d(2.31271023278625638e-5)
    q_odd = q_odd * r4_hi + d(2.47556738444535513e-4)
    q_even = q_even * r4_hi + d(2.88543873228900172e-3)
    q = q_odd * r2_hi + q_even
    p_hi, p_lo = _prod_wf(r2_hi, r2_lo, q)
    p1_hi, p1_lo = _sum_ww(full(0.0400377511598501157), full(-4.77726582251425391e-19), p_hi, p_lo)
    p2_hi, p2_lo = _prod_ww(r2_hi, r2_lo, p1_hi, p1_lo)
    p3_hi, p3_lo = _sum_fw(np.full_like(x, one), p2_hi, p2_lo)
    return _prod_ww(p3_hi, p3_lo, r_hi, r_lo)


def _from_exponent_bits(biased: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``2 ** (biased - bias)`` from integer biased exponents (in range)."""
    mantissa = np.finfo(dtype).nmant
    return (biased.astype(_UINT[dtype]) << _UINT[dtype](mantissa)).view(dtype)


def _rint(x: np.ndarray) -> np.ndarray:
    return np.rint(x)  # round half to even, as _mm256_round_ps in the default rounding mode


def _round_half_away(x: np.ndarray) -> np.ndarray:
    """Eigen's AVX ``pround``: ``trunc(x + copysign(prev(0.5), x))``, the addition rounded in the dtype."""
    prev_half = np.nextafter(x.dtype.type(0.5), x.dtype.type(0))
    return np.trunc(x + np.copysign(prev_half, x))


def _exp_float(x0: np.ndarray) -> np.ndarray:
    f = np.float32
    x = np.minimum(np.maximum(x0, f(-104.0)), f(88.723))
    m = _rint(x * f(1.44269504088896341))
    r = m * f(-0.693359375) + x
    r = m * f(2.12194440e-4) + r
    r2 = r * r
    p_even = r2 * f(1.37449637986719608306884765625e-3) + f(4.166965186595916748046875e-2)
    p_odd = r2 * f(8.36894474923610687255859375e-3) + f(0.16666518151760101318359375)
    p_even = r2 * p_even + f(0.49999988079071044921875)
    p_low = r + f(1.0)
    y = r * p_odd + p_even
    y = r2 * y + p_low
    biased_sum = m.astype(np.int32) + 254
    biased_hi = biased_sum >> 1
    biased_lo = biased_sum - biased_hi
    y = (y * _from_exponent_bits(biased_hi, np.dtype(np.float32))) * _from_exponent_bits(biased_lo,
                                                                                          np.dtype(np.float32))
    return np.where(np.isnan(x0), x0, y)


def _exp_double(x0: np.ndarray) -> np.ndarray:
    d = np.float64
    zero_mask = x0 < d(-745.519)
    x = np.minimum(x0, d(709.784))
    fx = _rint(x * d(1.4426950408889634073599))
    x = x - fx * d(0.693145751953125)
    x = x - fx * d(1.42860682030941723212e-6)
    x2 = x * x
    px = d(1.26177193074810590878e-4)
    px = px * x2 + d(3.02994407707441961300e-2)
    px = px * x2 + d(9.99999999999999999910e-1)
    px = px * x
    qx = d(3.00198505138664455042e-6)
    qx = qx * x2 + d(2.52448340349684104192e-3)
    qx = qx * x2 + d(2.27265548208155028766e-1)
    qx = qx * x2 + d(2.00000000000000000009e0)
    x = px / (qx - px)
    x = d(2.0) * x + d(1.0)
    y = np.where(np.isnan(x0), x0, np.maximum(_ldexp_generic(x, fx), x0))
    return np.where(zero_mask, d(0.0), y)


def _exp2(x0: np.ndarray) -> np.ndarray:
    dtype = x0.dtype
    info = np.finfo(dtype)
    max_exponent, digits = info.maxexp, info.nmant + 1
    x = np.maximum(np.minimum(x0, dtype.type(max_exponent + 1)), dtype.type(-(max_exponent + digits - 1)))
    p_hi, p_lo = _two_prod(np.full_like(x, dtype.type(0.693147180559945309417232121458176568)), x)
    exp_hi = _exp_float(p_hi) if dtype == np.float32 else _exp_double(p_hi)
    return exp_hi * (dtype.type(1) + p_lo)


def _frexp(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eigen's ``pfrexp_generic``: ``a = m * 2^e`` with ``m`` in [0.5, 1); zero and non-finite keep ``a``, e = 0."""
    dtype = a.dtype
    f = dtype.type
    info = np.finfo(dtype)
    mant = info.nmant
    uint = _UINT[dtype]
    denormal = np.abs(a) < f(info.tiny)
    normalized = np.where(denormal, a * f(2.0 ** (mant + 1)), a)
    offset = np.where(denormal, f(-(info.maxexp - 2) - (mant + 1)), f(-(info.maxexp - 2)))
    biased = (np.abs(normalized).view(uint) >> uint(mant)).astype(dtype)
    exponent_all_ones = f(2 * info.maxexp - 1)
    special = (a == 0) | (biased == exponent_all_ones)
    sign_mantissa = ~(uint(2 * info.maxexp - 1) << uint(mant))
    half_bits = np.array(0.5, dtype=dtype).view(uint)
    m = ((normalized.view(uint) & sign_mantissa) | half_bits).view(dtype)
    return np.where(special, a, m), np.where(special, f(0), biased + offset)


def _ldexp_fast(a: np.ndarray, exponent: np.ndarray) -> np.ndarray:
    dtype = a.dtype
    info = np.finfo(dtype)
    bias, limit = info.maxexp - 1, 2 * info.maxexp - 1
    e = np.minimum(np.maximum(exponent + dtype.type(bias), dtype.type(0)), dtype.type(limit)).astype(_INT[dtype])
    return a * _from_exponent_bits(e, dtype)


def _ldexp_generic(a: np.ndarray, exponent: np.ndarray) -> np.ndarray:
    dtype = a.dtype
    info = np.finfo(dtype)
    mant = info.nmant
    bias = info.maxexp - 1
    max_exp = 2 * info.maxexp + mant - 1  # (1 << ExponentBits) + MantissaBits - 1
    e = np.minimum(np.maximum(exponent, dtype.type(-max_exp)), dtype.type(max_exp)).astype(_INT[dtype])
    b = e >> 2
    c1 = _from_exponent_bits(b + bias, dtype)
    c2 = _from_exponent_bits(e - 3 * b + bias, dtype)
    return (((a * c1) * c1) * c1) * c2


def _pow_impl(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    dtype = x.dtype
    f = dtype.type
    m_x, e_x = _frexp(x)
    scale = m_x < f(0.70710678118654752440)
    m_x = np.where(scale, f(2) * m_x, m_x)
    e_x = np.where(scale, e_x - f(1), e_x)
    rx_hi, rx_lo = _log2_float(m_x) if dtype == np.float32 else _log2_double(m_x)
    f1_hi, f1_lo = _two_prod(e_x, y)
    f2_hi, f2_lo = _prod_wf(rx_hi, rx_lo, y)
    f_hi, f_lo = _sum_ww(f1_hi, f1_lo, f2_hi, f2_lo)
    n_z = _round_half_away(f_hi)
    r_z = (f_hi - n_z) + f_lo
    n_r = _round_half_away(r_z)
    r_z = r_z - n_r
    n_z = n_z + n_r
    e_r = _exp2(r_z)
    # pldexp when any lane of the packet could over/underflow the fast form, else pldexp_fast
    width = PACKET[dtype]
    unsafe = (np.abs(n_z) > f(np.finfo(dtype).maxexp - 2)).reshape(-1, width).any(axis=1)
    unsafe = np.repeat(unsafe, width).reshape(n_z.shape)
    return np.where(unsafe, _ldexp_generic(e_r, n_z), _ldexp_fast(e_r, n_z))


def generic_pow(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Eigen's packet ``pow(x, y)`` on whole packets: ``x.size`` must be a multiple of the packet width, ``y``
    broadcastable to ``x``. Special values (zeros, infinities, NaN, negative bases) follow IEEE ``pow``."""
    dtype = x.dtype
    f = dtype.type
    y = np.broadcast_to(np.asarray(y, dtype=dtype), x.shape)
    with np.errstate(all="ignore"):
        x_abs = np.abs(x)
        result = _pow_impl(x_abs, y)
        x_neg = x < 0
        x_zero = x == 0
        x_one = x == 1
        x_signbit = np.signbit(x)
        x_abs_gt_one = x_abs > 1
        x_abs_inf = np.isinf(x_abs)
        y_abs = np.abs(y)
        y_neg = y < 0
        y_int = (np.floor(y) == y) & ~np.isinf(y_abs)
        y_half = y * f(0.5)
        y_even = _round_half_away(y_half) == y_half
        y_odd_int = y_int & ~y_even
        info = np.finfo(dtype)
        huge = f((f(info.maxexp) * f(0.693147180559945309417232121458176568)) / f(info.eps))
        result = np.where(x_neg & ~y_int, f(np.nan), result)
        result = np.where(x_zero, np.where(y_neg, f(np.inf), f(0)), result)
        result = np.where(x_signbit & y_odd_int, -result, result)
        inf_y = np.where(y_neg ^ x_abs_gt_one, f(np.inf), f(0))
        inf_y = np.where(x == f(-1), f(1), inf_y)
        result = np.where(huge <= y_abs, inf_y, result)
        pos_inf_value = np.where(y_neg, f(0), f(np.inf))
        neg_inf_value = np.where(y_odd_int, -pos_inf_value, pos_inf_value)
        result = np.where(x_abs_inf, np.where(x_neg, neg_inf_value, pos_inf_value), result)
        result = np.where(np.isnan(x) | np.isnan(y), f(np.nan), result)
        result = np.where(y == 1, x, np.where(x_one | (y == 0), f(1), result))
    return result


# ------------------------------------------------------------------------------------------------ reductions
def _predux(lanes: np.ndarray) -> np.generic:
    """Adds the upper half of a packet to its lower half until one lane is left."""
    while lanes.size > 1:
        half = lanes.size // 2
        lanes = lanes[:half] + lanes[half:]
    return lanes[0]


def _leaf_sum(x: np.ndarray, first: int, count: int, width: int) -> np.generic:
    f = x.dtype.type
    start = 0
    acc0 = np.zeros(width, dtype=x.dtype)
    if count >= 4 * width:
        blocks = count // (4 * width) * (4 * width)
        four = x[first:first + blocks].reshape(-1, 4, width)
        # each accumulator adds its packets in order (a reduction over the outer axis is sequential in NumPy)
        accumulators = np.zeros((4, width), dtype=x.dtype) + np.add.reduce(four, axis=0)
        acc0 = ((accumulators[0] + accumulators[1]) + accumulators[2]) + accumulators[3]
        start = blocks
    if start <= count - width:
        whole = count // width * width
        for j in range(start, whole, width):
            acc0 = acc0 + x[first + j:first + j + width]
        start = whole
    leftover = f(0)
    for value in x[first + start:first + count]:
        leftover = leftover + value
    return leftover + _predux(acc0)


def _tree_sum(x: np.ndarray, first: int, count: int, width: int) -> np.generic:
    if count > width * _LEAF:
        split = width * -(-(first + -(-count // 2)) // width)
        left = min(split - first, count)
        total = x.dtype.type(0) + _tree_sum(x, first, left, width)
        if left < count:
            total = total + _tree_sum(x, split, count - left, width)
        return total
    return _leaf_sum(x, first, count, width)


def full_sum(x: np.ndarray) -> np.generic:
    """The sum of all of ``x``'s elements (row-major) in Eigen's full-reduction order."""
    flat = np.ascontiguousarray(x).reshape(-1)
    with np.errstate(all="ignore"):
        return _tree_sum(flat, 0, flat.size, PACKET[flat.dtype])


def newton_rsqrt(a: np.ndarray, estimate: np.ndarray) -> np.ndarray:
    """Eigen's ``generic_rsqrt_newton_step<Packet, 1>``: one Newton step from the CPU's estimate, each multiply
    and add rounded (no FMA); where the step gives NaN (zero, infinity, NaN input) the estimate is kept."""
    f = a.dtype.type
    with np.errstate(all="ignore"):
        r2 = a * estimate
        half_r = estimate * f(-0.5)
        h = r2 * estimate + f(-1)
        refined = half_r * h + estimate
    return np.where(np.isnan(refined), estimate, refined)
