"""Eigen's packet ``pow`` on the device: ``numerics.eigen.generic_pow`` operation for operation as a Triton kernel
(issue 48: Keras 3 Ftrl and Lamb waited for a host copy of TensorFlow's ``pow``).

Every function here is its namesake in ``numerics/eigen.py`` on Triton tensors, each operation rounded once in the
tensor's dtype: no fused multiply-add (``enable_fp_fusion=False``; the double-word products rely on it), correctly
rounded division, every constant made in the dtype with ``tl.full`` (a bare Python float would be a float32
constant), ``rint`` and ``trunc`` from exact operations (the 2**p trick, floor and ceil), NaN propagated where
NumPy's ``minimum``/``maximum`` propagate it. The choice of the slow ``ldexp`` for a whole packet when any of its
lanes could over- or underflow is made per packet of the block (a block starts on a packet).

TensorFlow takes the C library's ``pow`` for the elements after the last whole packet: this kernel takes glibc's
``powf`` there for float32 (``step_scalars.py``, its tables read from the C library) and glibc's ``pow`` for float64
(``libm.py``, where it gives this C library's bits), so a tensor of any size is computed on the device;
``numerics.pow`` uses this kernel there and where the tensor (or each row) is whole packets, and a host copy
otherwise (rows with partial packets, no glibc, a C library whose ``pow`` the device kernel does not reproduce).
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch

from . import libm, step_scalars

__all__ = ["applies", "pow_packets", "WIDTH"]

WIDTH = {torch.float32: 8, torch.float64: 4}
_BLOCK = 512
_kernels: Optional[dict[str, Any]] = None


def _constants() -> dict[str, float]:
    f = np.float32
    c0_hi = f(1.442695041742110273474963832995854318141937255859375e+00)
    c1_hi = f(-7.2134751588268664068692714863573201000690460205078125e-01)
    return {
        "C0_HI": float(c0_hi), "C0_LO": float(f(1.442695041742110273474963832995854318141937255859375e+00
                                                - float(c0_hi))),
        "C1_HI": float(c1_hi), "C1_LO": float(f(-7.2134751588268664068692714863573201000690460205078125e-01
                                                - float(c1_hi))),
        "HUGE32": float(f((f(128) * f(0.693147180559945309417232121458176568)) / f(np.finfo(f).eps))),
        "HUGE64": float(np.float64((np.float64(1024) * np.float64(0.693147180559945309417232121458176568))
                                   / np.float64(np.finfo(np.float64).eps))),
        "PREV_HALF32": float(np.nextafter(f(0.5), f(0))),
        "PREV_HALF64": float(np.nextafter(np.float64(0.5), np.float64(0))),
    }


def _build() -> dict[str, Any]:  # noqa: C901 - one function per Eigen helper, defined together
    import triton
    import triton.language as tl

    k = _constants()

    @triton.jit
    def _c(x, value: tl.constexpr):  # a constant in x's dtype (a bare float would be a float32 constant)
        return tl.full(x.shape, value, x.dtype)

    @triton.jit
    def _min(a, b):  # NumPy's minimum and maximum: a NaN operand gives NaN
        return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)

    @triton.jit
    def _max(a, b):
        return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)

    @triton.jit
    def _div(a, b):
        if a.dtype == tl.float32:
            return tl.math.div_rn(a, b)
        else:
            return a / b

    @triton.jit
    def _uint(x):
        if x.dtype == tl.float32:
            return x.to(tl.uint32, bitcast=True)
        else:
            return x.to(tl.uint64, bitcast=True)

    @triton.jit
    def _float_of(bits, like):
        return bits.to(like.dtype, bitcast=True)

    @triton.jit
    def _split(x):
        if x.dtype == tl.float32:
            gamma = _c(x, 4097.0) * x
        else:
            gamma = _c(x, 134217729.0) * x
        rho = x - gamma
        hi = rho + gamma
        return hi, x - hi

    @triton.jit
    def _two_prod(x, y):
        x_hi, x_lo = _split(x)
        y_hi, y_lo = _split(y)
        p_hi = x * y
        p_lo = x_hi * y_hi + (-p_hi)
        p_lo = x_hi * y_lo + p_lo
        p_lo = x_lo * y_hi + p_lo
        p_lo = x_lo * y_lo + p_lo
        return p_hi, p_lo

    @triton.jit
    def _fast_two_sum(x, y):
        s_hi = x + y
        return s_hi, y - (s_hi - x)

    @triton.jit
    def _sum_ww(x_hi, x_lo, y_hi, y_lo):
        r_hi, r_lo = _fast_two_sum(x_hi, y_hi)
        return _fast_two_sum(r_hi, (y_lo + r_lo) + x_lo)

    @triton.jit
    def _sum_fw(x, y_hi, y_lo):
        r_hi, r_lo = _fast_two_sum(x, y_hi)
        return _fast_two_sum(r_hi, y_lo + r_lo)

    @triton.jit
    def _prod_wf(x_hi, x_lo, y):
        c_hi, c_lo1 = _two_prod(x_hi, y)
        t_hi, t_lo1 = _fast_two_sum(c_hi, x_lo * y)
        return _fast_two_sum(t_hi, t_lo1 + c_lo1)

    @triton.jit
    def _prod_ww(x_hi, x_lo, y_hi, y_lo):
        hh, hl = _prod_wf(x_hi, x_lo, y_hi)
        lh, ll = _prod_wf(x_hi, x_lo, y_lo)
        return _sum_ww(hh, hl, lh, ll)

    @triton.jit
    def _div_wf(x_hi, x_lo, y):
        t_hi = _div(x_hi, y)
        pi_hi, pi_lo = _two_prod(t_hi, y)
        delta = ((x_hi - pi_hi) - pi_lo) + x_lo
        return _fast_two_sum(t_hi, _div(delta, y))

    @triton.jit
    def _log2_float(z):
        x = z - _c(z, 1.0)
        p = _c(x, 9.7010828554630279541015625e-02)
        p = p * x + _c(x, -1.6896486282348632812500000e-01)
        p = p * x + _c(x, 1.7200836539268493652343750e-01)
        p = p * x + _c(x, -1.7892272770404815673828125e-01)
        p = p * x + _c(x, 2.0505344867706298828125000e-01)
        p = p * x + _c(x, -2.4046677350997924804687500e-01)
        p = p * x + _c(x, 2.8857553005218505859375000e-01)
        p = p * x + _c(x, -3.6067414283752441406250000e-01)
        p = p * x + _c(x, 4.8089790344238281250000000e-01)
        p_hi, p_lo = _two_prod(x, p)
        p_hi, p_lo = _sum_ww(_c(x, C1_HI), _c(x, C1_LO), p_hi, p_lo)  # noqa: F821 (a constexpr global, set by _build)
        p_hi, p_lo = _prod_wf(p_hi, p_lo, x)
        p_hi, p_lo = _sum_ww(_c(x, C0_HI), _c(x, C0_LO), p_hi, p_lo)  # noqa: F821 (a constexpr global, set by _build)
        return _prod_wf(p_hi, p_lo, x)

    @triton.jit
    def _log2_double(x):
        one = _c(x, 1.0)
        t_hi, t_lo = _prod_wf(_c(x, 2.88539008177792677), _c(x, 4.07660016854549667e-17), x - one)
        r_hi, r_lo = _div_wf(t_hi, t_lo, x + one)
        r2_hi, r2_lo = _prod_ww(r_hi, r_lo, r_hi, r_lo)
        r4_hi, _r4_lo = _prod_ww(r2_hi, r2_lo, r2_hi, r2_lo)
        q_even = _c(x, 2.87074255468000586e-9) * r4_hi + _c(x, 2.31032094540014656e-7)
        q_odd = _c(x, 2.38957980901884082e-8) * r4_hi + _c(x, 2.27279857398537278e-6)
        q_even = q_even * r4_hi + _c(x, 2.31271023278625638e-5)
        q_odd = q_odd * r4_hi + _c(x, 2.47556738444535513e-4)
        q_even = q_even * r4_hi + _c(x, 2.88543873228900172e-3)
        q = q_odd * r2_hi + q_even
        p_hi, p_lo = _prod_wf(r2_hi, r2_lo, q)
        p1_hi, p1_lo = _sum_ww(_c(x, 0.0400377511598501157), _c(x, -4.77726582251425391e-19), p_hi, p_lo)
        p2_hi, p2_lo = _prod_ww(r2_hi, r2_lo, p1_hi, p1_lo)
        p3_hi, p3_lo = _sum_fw(one, p2_hi, p2_lo)
        return _prod_ww(p3_hi, p3_lo, r_hi, r_lo)

    @triton.jit
    def _from_exponent_bits(biased, like):  # 2 ** (biased - bias), from integer biased exponents in range
        if like.dtype == tl.float32:
            return (biased.to(tl.uint32) << 23).to(tl.float32, bitcast=True)
        else:
            return (biased.to(tl.uint64) << 52).to(tl.float64, bitcast=True)

    @triton.jit
    def _rint(x):  # round half to even: (|x| + 2**p) - 2**p is exact for |x| < 2**p
        if x.dtype == tl.float32:
            big = _c(x, 8388608.0)
        else:
            big = _c(x, 4503599627370496.0)
        t = tl.abs(x)
        r = (t + big) - big
        r = tl.where(x < 0, -r, r)
        return tl.where((t >= big) | (x == 0), x, r)

    @triton.jit
    def _trunc(x):
        return tl.where(x < 0, tl.math.ceil(x), tl.math.floor(x))

    @triton.jit
    def _round_half_away(x):  # Eigen's AVX pround: trunc(x + copysign(prev(0.5), x))
        if x.dtype == tl.float32:
            half = _c(x, PREV_HALF32)  # noqa: F821 (a constexpr global, set by _build)
        else:
            half = _c(x, PREV_HALF64)  # noqa: F821 (a constexpr global, set by _build)
        signed = tl.where((_uint(x) >> (x.dtype.primitive_bitwidth - 1)) != 0, -half, half)
        return _trunc(x + signed)

    @triton.jit
    def _exp_float(x0):
        x = _min(_max(x0, _c(x0, -104.0)), _c(x0, 88.723))
        m = _rint(x * _c(x, 1.44269504088896341))
        r = m * _c(x, -0.693359375) + x
        r = m * _c(x, 2.12194440e-4) + r
        r2 = r * r
        p_even = r2 * _c(x, 1.37449637986719608306884765625e-3) + _c(x, 4.166965186595916748046875e-2)
        p_odd = r2 * _c(x, 8.36894474923610687255859375e-3) + _c(x, 0.16666518151760101318359375)
        p_even = r2 * p_even + _c(x, 0.49999988079071044921875)
        p_low = r + _c(x, 1.0)
        y = r * p_odd + p_even
        y = r2 * y + p_low
        biased_sum = tl.where(m == m, m, _c(m, 0.0)).to(tl.int32) + 254
        biased_hi = biased_sum >> 1
        biased_lo = biased_sum - biased_hi
        y = (y * _from_exponent_bits(biased_hi, y)) * _from_exponent_bits(biased_lo, y)
        return tl.where(x0 != x0, x0, y)

    @triton.jit
    def _ldexp_generic(a, exponent):
        if a.dtype == tl.float32:
            e = tl.minimum(tl.maximum(exponent, _c(a, -278.0)), _c(a, 278.0))
            e = tl.where(e == e, e, _c(a, 0.0)).to(tl.int32)
            bias = 127
        else:
            e = tl.minimum(tl.maximum(exponent, _c(a, -2099.0)), _c(a, 2099.0))
            e = tl.where(e == e, e, _c(a, 0.0)).to(tl.int64)
            bias = 1023
        b = e >> 2
        c1 = _from_exponent_bits(b + bias, a)
        c2 = _from_exponent_bits(e - 3 * b + bias, a)
        return (((a * c1) * c1) * c1) * c2

    @triton.jit
    def _ldexp_fast(a, exponent):
        if a.dtype == tl.float32:
            e = tl.minimum(tl.maximum(exponent + _c(a, 127.0), _c(a, 0.0)), _c(a, 255.0))
            e = tl.where(e == e, e, _c(a, 0.0)).to(tl.int32)
        else:
            e = tl.minimum(tl.maximum(exponent + _c(a, 1023.0), _c(a, 0.0)), _c(a, 2047.0))
            e = tl.where(e == e, e, _c(a, 0.0)).to(tl.int64)
        return a * _from_exponent_bits(e, a)

    @triton.jit
    def _exp_double(x0):
        zero_mask = x0 < _c(x0, -745.519)
        x = _min(x0, _c(x0, 709.784))
        fx = _rint(x * _c(x, 1.4426950408889634073599))
        x = x - fx * _c(x, 0.693145751953125)
        x = x - fx * _c(x, 1.42860682030941723212e-6)
        x2 = x * x
        px = _c(x, 1.26177193074810590878e-4)
        px = px * x2 + _c(x, 3.02994407707441961300e-2)
        px = px * x2 + _c(x, 9.99999999999999999910e-1)
        px = px * x
        qx = _c(x, 3.00198505138664455042e-6)
        qx = qx * x2 + _c(x, 2.52448340349684104192e-3)
        qx = qx * x2 + _c(x, 2.27265548208155028766e-1)
        qx = qx * x2 + _c(x, 2.00000000000000000009e0)
        x = px / (qx - px)
        x = _c(x, 2.0) * x + _c(x, 1.0)
        y = tl.where(x0 != x0, x0, _max(_ldexp_generic(x, fx), x0))
        return tl.where(zero_mask, _c(x0, 0.0), y)

    @triton.jit
    def _exp2(x0):
        if x0.dtype == tl.float32:
            x = _max(_min(x0, _c(x0, 129.0)), _c(x0, -151.0))
        else:
            x = _max(_min(x0, _c(x0, 1025.0)), _c(x0, -1076.0))
        p_hi, p_lo = _two_prod(_c(x, 0.693147180559945309417232121458176568), x)
        if x0.dtype == tl.float32:
            exp_hi = _exp_float(p_hi)
        else:
            exp_hi = _exp_double(p_hi)
        return exp_hi * (_c(x, 1.0) + p_lo)

    @triton.jit
    def _frexp(a):
        if a.dtype == tl.float32:
            denormal = tl.abs(a) < _c(a, 1.1754943508222875e-38)
            normalized = tl.where(denormal, a * _c(a, 16777216.0), a)
            offset = tl.where(denormal, _c(a, -150.0), _c(a, -126.0))
            biased = (_uint(tl.abs(normalized)) >> 23).to(tl.float32)
            special = (a == 0) | (biased == _c(a, 255.0))
            m = ((_uint(normalized) & 0x807FFFFF) | 0x3F000000).to(tl.float32, bitcast=True)
        else:
            denormal = tl.abs(a) < _c(a, 2.2250738585072014e-308)
            normalized = tl.where(denormal, a * _c(a, 9007199254740992.0), a)
            offset = tl.where(denormal, _c(a, -1075.0), _c(a, -1022.0))
            biased = (_uint(tl.abs(normalized)) >> 52).to(tl.float64)
            special = (a == 0) | (biased == _c(a, 2047.0))
            m = ((_uint(normalized) & 0x800FFFFFFFFFFFFF) | 0x3FE0000000000000).to(tl.float64, bitcast=True)
        return tl.where(special, a, m), tl.where(special, _c(a, 0.0), biased + offset)

    @triton.jit
    def _any_in_packet(flag, BLOCK: tl.constexpr, W: tl.constexpr):  # each lane: whether any of its packet is set
        v = tl.reshape(flag.to(tl.int32), (BLOCK // W, W))
        if W == 8:
            a, b = tl.split(tl.permute(tl.reshape(v, (BLOCK // W, 2, 4)), (0, 2, 1)))
            v = tl.maximum(a, b)
        a, b = tl.split(tl.permute(tl.reshape(v, (BLOCK // W, 2, 2)), (0, 2, 1)))
        v = tl.maximum(a, b)
        a, b = tl.split(v)
        v = tl.maximum(a, b)
        return tl.reshape(tl.broadcast_to(tl.reshape(v, (BLOCK // W, 1)), (BLOCK // W, W)), (BLOCK,)) != 0

    @triton.jit
    def _pow_impl(x, y, BLOCK: tl.constexpr, W: tl.constexpr):
        m_x, e_x = _frexp(x)
        scale = m_x < _c(x, 0.70710678118654752440)
        m_x = tl.where(scale, _c(x, 2.0) * m_x, m_x)
        e_x = tl.where(scale, e_x - _c(x, 1.0), e_x)
        if x.dtype == tl.float32:
            rx_hi, rx_lo = _log2_float(m_x)
        else:
            rx_hi, rx_lo = _log2_double(m_x)
        f1_hi, f1_lo = _two_prod(e_x, y)
        f2_hi, f2_lo = _prod_wf(rx_hi, rx_lo, y)
        f_hi, f_lo = _sum_ww(f1_hi, f1_lo, f2_hi, f2_lo)
        n_z = _round_half_away(f_hi)
        r_z = (f_hi - n_z) + f_lo
        n_r = _round_half_away(r_z)
        r_z = r_z - n_r
        n_z = n_z + n_r
        e_r = _exp2(r_z)
        if x.dtype == tl.float32:
            limit = _c(x, 126.0)
        else:
            limit = _c(x, 1022.0)
        unsafe = _any_in_packet(tl.abs(n_z) > limit, BLOCK, W)
        return tl.where(unsafe, _ldexp_generic(e_r, n_z), _ldexp_fast(e_r, n_z))

    @triton.jit
    def _generic_pow(x, y, BLOCK: tl.constexpr, W: tl.constexpr):
        x_abs = tl.abs(x)
        result = _pow_impl(x_abs, y, BLOCK, W)
        x_neg = x < 0
        x_zero = x == 0
        x_one = x == 1
        x_signbit = (_uint(x) >> (x.dtype.primitive_bitwidth - 1)) != 0
        x_abs_gt_one = x_abs > 1
        nan, inf, zero, one = _c(x, float("nan")), _c(x, float("inf")), _c(x, 0.0), _c(x, 1.0)
        x_abs_inf = x_abs == inf
        y_abs = tl.abs(y)
        y_neg = y < 0
        y_int = (tl.math.floor(y) == y) & (y_abs != inf)
        y_half = y * _c(y, 0.5)
        y_even = _round_half_away(y_half) == y_half
        y_odd_int = y_int & (not_(y_even))
        if x.dtype == tl.float32:
            huge = _c(x, HUGE32)  # noqa: F821 (a constexpr global, set by _build)
        else:
            huge = _c(x, HUGE64)  # noqa: F821 (a constexpr global, set by _build)
        result = tl.where(x_neg & (not_(y_int)), nan, result)
        result = tl.where(x_zero, tl.where(y_neg, inf, zero), result)
        result = tl.where(x_signbit & y_odd_int, -result, result)
        inf_y = tl.where(y_neg ^ x_abs_gt_one, inf, zero)
        inf_y = tl.where(x == -1, one, inf_y)
        result = tl.where(huge <= y_abs, inf_y, result)
        pos_inf_value = tl.where(y_neg, zero, inf)
        neg_inf_value = tl.where(y_odd_int, -pos_inf_value, pos_inf_value)
        result = tl.where(x_abs_inf, tl.where(x_neg, neg_inf_value, pos_inf_value), result)
        result = tl.where((x != x) | (y != y), nan, result)
        return tl.where(y == 1, x, tl.where(x_one | (y == 0), one, result))

    @triton.jit
    def not_(b):
        return b == 0

    helpers = {name: value for name, value in locals().items() if name.startswith("_") or name == "not_"}
    # (the kernels read these among the module's globals: Triton takes constexpr globals only)
    globals().update(tl=tl, **{name: tl.constexpr(value) for name, value in k.items()}, **helpers)

    if step_scalars.available():  # the C library's powf, for the elements after the last whole packet
        step_scalars._kernels = step_scalars._build()  # (defined anew with these: the same Triton mode)
        globals().update(_u32=step_scalars._u32, _core=step_scalars._core, _powf=step_scalars._powf)
    if libm.available():  # and its pow, for a float64 tensor's
        libm._kernels = libm._build()
        globals().update(_pow64=libm._kernels["pow"])

    @triton.jit
    def pow_packets(x_ptr, y_ptr, out_ptr, n, whole, d_ptr, e_ptr, Y_SCALAR: tl.constexpr, W: tl.constexpr,
                    TAIL: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask, other=1.0)
        if Y_SCALAR:
            y = tl.load(y_ptr + offs * 0)  # (the one exponent in every lane, its bits kept)
        else:
            y = tl.load(y_ptr + offs, mask=mask, other=1.0)
        result = _generic_pow(x, y, BLOCK, W)
        if TAIL:  # the last, partial packet: the C library's powf/pow, as TensorFlow's scalar loop takes it
            if x.dtype == tl.float32:
                result = tl.where(offs >= whole, _powf(x, y, d_ptr, e_ptr), result)  # noqa: F821
            else:
                result = tl.where(offs >= whole, _pow64(x, y, d_ptr, e_ptr), result)  # noqa: F821
        tl.store(out_ptr + offs, result, mask=mask)

    return {"pow_packets": pow_packets}


def _kernel() -> Any:
    global _kernels
    if _kernels is None:
        _kernels = _build()
    return _kernels["pow_packets"]


def applies(x: torch.Tensor, exponent: object, rows: bool) -> bool:
    """Whether ``numerics.pow(x, exponent, rows)`` is whole packets here (so this kernel has all of its bits):
    float32/float64 on a CUDA device (the CPU under the interpreter), a number or a tensor of ``x``'s shape, dtype
    and device as the exponent, and every element (each row's, with ``rows``) in a whole packet."""
    from . import _on_triton_device, available

    if x.dtype not in WIDTH or not _on_triton_device(x) or not available() or x.numel() == 0:
        return False
    if isinstance(exponent, torch.Tensor):
        if exponent.shape != x.shape or exponent.dtype != x.dtype or exponent.device != x.device:
            return False
    elif not isinstance(exponent, (int, float)):
        return False
    row = x.numel() // x.shape[0] if (rows and x.dim() > 1) else x.numel()
    if row % WIDTH[x.dtype] == 0:
        return True
    # A partial packet at the end of the tensor: glibc's powf/pow on the device, where it has the C library's bits
    if row != x.numel():
        return False
    if x.dtype == torch.float32:
        return step_scalars.available()
    return libm._ready("pow", x) is not None


def pow_packets(x: torch.Tensor, exponent: Any) -> torch.Tensor:
    """Eigen's packet ``pow`` of every element of ``x`` (whole packets: see ``applies``), a new tensor on its
    device, without a host synchronisation (a number exponent travels as one small non-blocking copy)."""
    from . import _count_launch, table
    from .reductions import _on

    x = x.detach().contiguous()
    if isinstance(exponent, torch.Tensor):
        y, scalar = exponent.detach().contiguous(), False
    else:
        y, scalar = table.scalar_vector([float(exponent)], x.dtype, x.device), True
    out = torch.empty_like(x)
    n, width = x.numel(), WIDTH[x.dtype]
    whole = n - n % width  # (a tensor of rows here is whole packets: applies)
    tail = whole < n
    if not tail:
        d, e = x, x  # (unread without a tail)
    elif x.dtype == torch.float32:
        d, e = step_scalars._tables(x.device)
    else:
        held = libm.tables(x.device)
        assert held is not None  # (applies checked it)
        d, e = held
    with _on(x.device):
        _kernel()[(-(-n // _BLOCK),)](x, y, out, n, whole, d, e, Y_SCALAR=scalar, W=width, TAIL=tail,
                                      BLOCK=_BLOCK, num_warps=4, enable_fp_fusion=False)
    _count_launch()
    return out
