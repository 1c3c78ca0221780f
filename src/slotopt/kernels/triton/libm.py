"""The C library's ``expf``, ``logf``, ``cosf``, ``exp``, ``log`` and ``pow`` on the device, with the loaded library's bits
(issue 48: ``numerics.libm`` computed a GPU tensor's from a host copy, and refused during a CUDA graph capture).

Each function is glibc's (2.28 and later) algorithm on its own tables, read from the loaded C library
(``numerics/libm_tables.py``), operation for operation in double precision as the variant this machine's glibc
selects computes it: on x86-64 with FMA, glibc runs its ``-mfma`` builds (``e_expf-fma``, ``e_exp-fma``,
``s_cosf-fma``...), in which GCC has fused the multiply-adds; the fused ones here are ``tl.fma`` exactly where that
build's machine code has a ``vfmadd``/``vfmsub``/``vfnmadd`` (read from its disassembly, glibc 2.36), every other
product and sum rounded on its own (``enable_fp_fusion=False``). Results are flushed to zero when subnormal, as
``numerics.libm`` does (TensorFlow's kernels run with flush-to-zero). ``powf`` is ``step_scalars.py``'s kernel,
checked here like the others.

A function is offered on a device only after its kernel has given the C library's bits there on
:func:`verification inputs <verification_inputs>` (special values, subnormals, huge and tiny, near-integers, near
multiples of pi/4, random bits): a C library of another build (no FMA, another glibc) gives other bits, and then
the host copy serves. That check runs once per device and function, never during a capture (:func:`prepare` runs
it ahead). ``tools/libm_device_sweep.py`` runs the longer sweep.

Not here: ``cos`` of float64 (glibc's IBM ``cos``, with its own range reductions and tables: not done):
``numerics.libm`` keeps the host copy for it, refused during a capture.

Scalar-in-kernel forms: :func:`helpers` returns the ``@triton.jit`` functions ``expf(x, d_ptr, e_ptr)``,
``logf(x, d_ptr, e_ptr)``, ``cosf(x, d_ptr, e_ptr)`` (float32 in and out), ``exp(x, d_ptr, e_ptr)``,
``log(x, d_ptr, e_ptr)`` and ``pow(x, y, d_ptr, e_ptr)`` (float64), exact as above, for another kernel's module globals; :func:`tables` the two
table tensors to pass as ``d_ptr``, ``e_ptr``; kernels calling them must be launched with
``enable_fp_fusion=False``. (float32 ``powf`` in a kernel: ``step_scalars._powf`` with its own tables.)
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch

from ...numerics import libm_tables

__all__ = ["available", "helpers", "tables", "unary", "pow", "prepare", "verify", "FUNCTIONS"]

#: The device functions: name -> dtype.
FUNCTIONS = {"expf": torch.float32, "logf": torch.float32, "cosf": torch.float32, "powf": torch.float32,
             "exp": torch.float64, "log": torch.float64, "pow": torch.float64}
_BLOCK = 512
_UNARY = ("expf", "logf", "exp", "cosf", "log")  # (the unary kernel's FN)
# Offsets of each function's data in the two table tensors (float64 ``d``, int64 ``e``).
_D_EXPF, _D_LOGF, _D_EXP, _D_POW, _D_COSF, _D_LOG = 0, 5, 41, 49, 570, 598
_E_EXPF, _E_EXP, _E_PIO4 = 0, 32, 288
_kernels: Optional[dict[str, Any]] = None
_device_tables: dict[Any, tuple[torch.Tensor, torch.Tensor]] = {}
_verified: dict[tuple[Any, str], bool] = {}


def _host_tables() -> Optional[tuple[np.ndarray, np.ndarray]]:
    expf, logf, exp, powlog = libm_tables.exp2f(), libm_tables.logf(), libm_tables.exp_data(), libm_tables.pow_log()
    cosf, log = libm_tables.sincosf(), libm_tables.log_data()
    if expf is None or logf is None or exp is None or powlog is None or cosf is None or log is None:
        return None
    d = np.concatenate([expf.doubles, logf.doubles, exp.doubles, powlog.doubles, cosf.doubles, log.doubles])
    e = np.concatenate([expf.tab, exp.tab, cosf.inv_pio4]).astype(np.int64)
    assert d.size == _D_LOG + 274 and e.size == _E_PIO4 + 24
    return d, e


def available() -> bool:
    """Whether the loaded C library's tables were all found (glibc)."""
    return _host_tables() is not None


def _build() -> dict[str, Any]:  # noqa: C901 - the functions and their kernels, defined together
    import triton
    import triton.language as tl

    @triton.jit
    def _f64(x, value: tl.constexpr):  # a float64 constant of x's shape (a bare float is a float32 constant)
        return tl.full(x.shape, value, tl.float64)

    @triton.jit
    def _u64(x, value: tl.constexpr):
        return tl.full(x.shape, value, tl.uint64)

    @triton.jit
    def _bits(x):
        return x.to(tl.uint64, bitcast=True)

    @triton.jit
    def _double(u):
        return u.to(tl.float64, bitcast=True)

    @triton.jit
    def _flush64(v):
        return tl.where(tl.abs(v) < _f64(v, 2.2250738585072014e-308), v * _f64(v, 0.0), v)

    @triton.jit
    def expf(x, d_ptr, e_ptr):
        xd = x.to(tl.float64)
        ix = x.to(tl.uint32, bitcast=True)
        abstop = (ix >> 20) & 0x7FF
        invln2 = tl.load(d_ptr + _D_EXPF)
        shift = tl.load(d_ptr + _D_EXPF + 4)
        kd = tl.fma(xd, invln2, shift)  # z = InvLn2N * x; kd = z + shift: one fused operation in the build
        ki = _bits(kd)
        kd = kd - shift
        r = tl.fma(xd, invln2, -kd)
        t = tl.load(e_ptr + _E_EXPF + (ki % 32).to(tl.int32)).to(tl.uint64, bitcast=True) + (ki << 47)
        z = tl.fma(r, tl.load(d_ptr + _D_EXPF + 1), tl.load(d_ptr + _D_EXPF + 2))
        r2 = r * r
        y = tl.fma(r, tl.load(d_ptr + _D_EXPF + 3), _f64(r, 1.0))
        y = tl.fma(z, r2, y)
        result = (y * _double(t)).to(tl.float32)
        inf = tl.full(x.shape, 0x7F800000, tl.uint32).to(tl.float32, bitcast=True)
        special = tl.where(ix == 0xFF800000, 0.0, tl.where(abstop >= 0x7F8, x + x, tl.where(
            x > 88.72283172607421875, inf, tl.where(x < -103.972076416015625, 0.0, result))))
        result = tl.where(abstop > 0x42A, special, result)
        return tl.where(tl.abs(result) < 1.1754943508222875e-38, result * 0.0, result)  # flushed to zero

    @triton.jit
    def logf(x, d_ptr, e_ptr):
        ix0 = x.to(tl.uint32, bitcast=True)
        normalized = (x * 8388608.0).to(tl.uint32, bitcast=True) - (23 << 23)
        ix = tl.where(ix0 < 0x00800000, normalized, ix0)  # a subnormal x, normalised
        tmp = ix - 0x3F330000
        i = ((tmp >> 19) % 16).to(tl.int32)
        k = tmp.to(tl.int32, bitcast=True) >> 23
        iz = ix - (tmp & 0xFF800000)
        invc = tl.load(d_ptr + _D_LOGF + 2 * i)
        logc = tl.load(d_ptr + _D_LOGF + 2 * i + 1)
        z = iz.to(tl.float32, bitcast=True).to(tl.float64)
        r = tl.fma(z, invc, _f64(z, -1.0))
        y0 = tl.fma(k.to(tl.float64), tl.load(d_ptr + _D_LOGF + 32), logc)
        y = tl.fma(r, tl.load(d_ptr + _D_LOGF + 34), tl.load(d_ptr + _D_LOGF + 35))
        r2 = r * r
        y = tl.fma(r2, tl.load(d_ptr + _D_LOGF + 33), y)
        result = tl.fma(r2, y, r + y0).to(tl.float32)
        inf = tl.full(x.shape, 0x7F800000, tl.uint32).to(tl.float32, bitcast=True)
        nan = tl.full(x.shape, 0x7FC00000, tl.uint32).to(tl.float32, bitcast=True)
        bad = ((ix0 >> 31) != 0) | (ix0 * 2 >= 0xFF000000)
        special = tl.where(ix0 * 2 == 0, -inf, tl.where(ix0 == 0x7F800000, x, tl.where(bad, tl.where(
            x != x, x + x, nan), result)))
        result = tl.where(ix0 - 0x00800000 > 0x7EFFFFFF, special, result)
        return tl.where(ix0 == 0x3F800000, 0.0, result)

    @triton.jit
    def _cos_poly(x2, p):  # glibc's sinf_poly, cosine branch; p: the sincos_t row
        x4 = x2 * x2
        c1 = tl.fma(x2, tl.load(p + 7), tl.load(p + 6))
        c2 = tl.fma(x2, tl.load(p + 13), tl.load(p + 11))
        x6 = x2 * x4
        c = tl.fma(x4, tl.load(p + 9), c1)
        return tl.fma(x6, c2, c).to(tl.float32)

    @triton.jit
    def _sin_poly(x, x2, p):  # glibc's sinf_poly, sine branch
        s1 = tl.fma(x2, tl.load(p + 12), tl.load(p + 10))
        x3 = x2 * x
        x5 = x2 * x3
        s = tl.fma(x3, tl.load(p + 8), x)
        return tl.fma(x5, s1, s).to(tl.float32)

    @triton.jit
    def cosf(x, d_ptr, e_ptr):
        xd = x.to(tl.float64)
        ix = x.to(tl.uint32, bitcast=True)
        abstop = (ix >> 20) & 0x7FF
        table = d_ptr + _D_COSF
        small = tl.where(abstop <= 0x397, 1.0, _cos_poly(xd * xd, table))  # |x| < pi/4
        # reduce_fast (|x| < 120): n = round(x * 2/pi), by a truncation of x * 2/pi * 2**24
        nf = ((xd * tl.load(table + 4)).to(tl.int32) + 0x800000) >> 24
        fast = tl.fma(-nf.to(tl.float64), tl.load(table + 5), xd)
        # reduce_large: x * 4/pi from the 4/pi words, in 64-bit fixed point
        idx = ((ix >> 26) & 15).to(tl.int32)
        m = ((ix & 0x7FFFFF) | 0x800000) << ((ix >> 23) & 7)
        w0 = tl.load(e_ptr + _E_PIO4 + idx).to(tl.uint32)
        w4 = tl.load(e_ptr + _E_PIO4 + idx + 4).to(tl.uint64)
        w8 = tl.load(e_ptr + _E_PIO4 + idx + 8).to(tl.uint64)
        low = (m * w0).to(tl.uint64)
        m64 = m.to(tl.uint64)
        res = ((m64 * w8) >> 32) | (low << 32)
        res = res + m64 * w4
        nl = (res + (1 << 61)) >> 62
        res = res - (nl << 62)
        large = res.to(tl.int64, bitcast=True).to(tl.float64) * _f64(xd, 3.4061215800865545e-19)
        is_fast = abstop <= 0x42E
        xr = tl.where(is_fast, fast, large)
        n = tl.where(is_fast, nf, nl.to(tl.int32))
        q = tl.where(is_fast, nf, nl.to(tl.int32) + (ix >> 31).to(tl.int32))  # the quadrant, x's sign included
        row = table + tl.where((q & 2) != 0, 14, 0)
        xs = xr * tl.load(table + (q & 3))
        x2 = xr * xr
        result = tl.where((n & 1) != 0, _sin_poly(xs, x2, row), _cos_poly(x2, row))
        nan = tl.full(x.shape, 0x7FC00000, tl.uint32).to(tl.float32, bitcast=True)
        result = tl.where(abstop <= 0x7F7, result, tl.where(x != x, x + x, nan))
        return tl.where(abstop <= 0x3F3, small, result)

    @triton.jit
    def _exp_core(x, xtail, sign_bias, d_ptr, e_ptr, TAIL: tl.constexpr):
        """glibc's ``exp_inline``: sign * exp(x + xtail), the large-|x| special case (``specialcase``) taken
        where ``abstop`` is 0x408; the caller handles tiny, huge and non-finite x."""
        abstop = ((_bits(x) >> 52) & 0x7FF).to(tl.int32)
        shift = tl.load(d_ptr + _D_EXP + 7)
        kd = tl.fma(x, tl.load(d_ptr + _D_EXP), shift)
        ki = _bits(kd)
        kd = kd - shift
        r = tl.fma(kd, tl.load(d_ptr + _D_EXP + 1), x)
        r = tl.fma(kd, tl.load(d_ptr + _D_EXP + 2), r)
        if TAIL:
            r = r + xtail
        idx = (2 * (ki % 128)).to(tl.int32)
        top = (ki + sign_bias) << 45
        tail = tl.load(e_ptr + _E_EXP + idx).to(tl.float64, bitcast=True)
        sbits = tl.load(e_ptr + _E_EXP + idx + 1).to(tl.uint64, bitcast=True) + top
        p23 = tl.fma(r, tl.load(d_ptr + _D_EXP + 4), tl.load(d_ptr + _D_EXP + 3))
        tr = r + tail
        r2 = r * r
        p45 = tl.fma(r, tl.load(d_ptr + _D_EXP + 6), tl.load(d_ptr + _D_EXP + 5))
        tmp = tl.fma(p23, r2, tr)
        tmp = tl.fma(p45, r2 * r2, tmp)
        scale = _double(sbits)
        result = tl.fma(scale, tmp, scale)
        # specialcase: k > 0, the scale's exponent may have overflowed
        up = _double(sbits - _u64(sbits, 1009 << 52))
        big = tl.fma(up, tmp, up) * _f64(x, 2.0 ** 1009)
        # k < 0: the subnormal range, rounded once before the scaling
        down = _double(sbits + _u64(sbits, 1022 << 52))
        st = down * tmp
        y = down + st
        one = tl.where(y < 0, _f64(y, -1.0), _f64(y, 1.0))
        lo = (down - y) + st
        hi = one + y
        lo = ((one - hi) + y) + lo
        rounded = (lo + hi) - one
        rounded = tl.where(rounded == 0, _double(sbits + _u64(sbits, 1022 << 52) & _u64(sbits, 1 << 63)), rounded)
        y = tl.where(tl.abs(y) < 1.0, rounded, y) * _f64(y, 2.2250738585072014e-308)
        special = tl.where((ki & 0x80000000) == 0, big, y)
        return tl.where(abstop == 0x408, special, result)

    @triton.jit
    def exp(x, d_ptr, e_ptr):
        abstop = ((_bits(x) >> 52) & 0x7FF).to(tl.int32)
        result = _exp_core(x, x, _u64(x, 0), d_ptr, e_ptr, False)
        inf = _double(_u64(x, 0x7FF0000000000000))
        huge = tl.where(x == -inf, 0.0, tl.where(abstop >= 0x7FF, 1.0 + x, tl.where(x < 0, 0.0, inf)))
        result = tl.where(abstop >= 0x409, huge, result)
        result = tl.where(abstop < 0x3C9, 1.0 + x, result)
        return _flush64(result)

    @triton.jit
    def log(x, d_ptr, e_ptr):
        ix0 = _bits(x)
        top = (ix0 >> 48).to(tl.int32)
        t = d_ptr + _D_LOG  # ln2hi, ln2lo, A0..A4 (t + 2..), B0..B10 (t + 7..), 128 (1/c, log c) from t + 18
        normalized = _bits(x * _f64(x, 4503599627370496.0)) - (52 << 52)
        ix = tl.where(top < 0x10, normalized, ix0)  # a subnormal x, normalised
        tmp = ix - 0x3FE6000000000000
        i = ((tmp >> 45) % 128).to(tl.int32)
        kd = (tmp.to(tl.int64, bitcast=True) >> 52).to(tl.float64)
        z = _double(ix - (tmp & 0xFFF0000000000000))
        r = tl.fma(z, tl.load(t + 18 + 2 * i), _f64(z, -1.0))
        w = tl.fma(kd, tl.load(t), tl.load(t + 19 + 2 * i))
        p12 = tl.fma(r, tl.load(t + 4), tl.load(t + 3))
        hi = r + w
        r2 = r * r
        lo = tl.fma(kd, tl.load(t + 1), (w - hi) + r)
        r3 = r * r2
        p34 = tl.fma(r, tl.load(t + 6), tl.load(t + 5))
        lo = tl.fma(r2, tl.load(t + 2), lo)
        result = tl.fma(r3, tl.fma(p34, r2, p12), lo) + hi
        # near 1: the polynomial of r = x - 1, its leading terms in double-double
        r = x - 1.0
        a = tl.fma(r, tl.load(t + 9), tl.load(t + 8))
        b = tl.fma(r, tl.load(t + 12), tl.load(t + 11))
        c = tl.fma(r, tl.load(t + 15), tl.load(t + 14))
        r2 = r * r
        a = tl.fma(r2, tl.load(t + 10), a)
        b = tl.fma(r2, tl.load(t + 13), b)
        r3 = r * r2
        c = tl.fma(r2, tl.load(t + 16), c)
        c = tl.fma(r3, tl.load(t + 17), c)
        inner = tl.fma(tl.fma(c, r3, b), r3, a)
        b0 = tl.load(t + 7)
        two27 = _f64(r, 134217728.0)
        rhi = tl.fma(-r, two27, tl.fma(r, two27, r))  # r + r * 2**27 - r * 2**27, as the build fuses it
        rhi2 = rhi * rhi
        rlo = r - rhi
        near_hi = tl.fma(rhi2, b0, r)
        near_lo = tl.fma(rhi2, b0, r - near_hi)
        near_lo = tl.fma(b0 * rlo, r + rhi, near_lo)
        near = near_hi + tl.fma(inner, r3, near_lo)
        near = tl.where(ix0 == 0x3FF0000000000000, _f64(x, 0.0), near)
        inf = _double(_u64(x, 0x7FF0000000000000))
        nan = _double(_u64(x, 0x7FF8000000000000))
        bad = ((top & 0x8000) != 0) | ((top & 0x7FF0) == 0x7FF0)
        special = tl.where(ix0 * 2 == 0, -inf, tl.where(ix0 == 0x7FF0000000000000, x, tl.where(x != x, x + x,
                                                                                                     nan)))
        result = tl.where((ix0 * 2 == 0) | bad, special, result)
        return tl.where(ix0 - 0x3FEE000000000000 < 0x3090000000000, near, result)

    @triton.jit
    def _checkint(iy):  # 0: not an integer, 1: odd, 2: even (glibc's checkint, iy finite and not zero)
        e = ((iy >> 52) & 0x7FF).to(tl.int32)
        bits = tl.minimum(tl.maximum(0x3FF + 52 - e, 0), 63).to(tl.uint64)
        below = iy & ((_u64(iy, 1) << bits) - 1)
        at = (iy >> bits) & 1
        return tl.where(e < 0x3FF, 0, tl.where(e > 0x3FF + 52, 2, tl.where(below != 0, 0, tl.where(at != 0, 1,
                                                                                                       2))))

    @triton.jit
    def pow(x, y, d_ptr, e_ptr):
        ix0 = _bits(x)
        iy = _bits(y)
        topy = (iy >> 52).to(tl.int32)
        ay = topy & 0x7FF
        negative = (ix0 >> 63) != 0
        yint = _checkint(iy)
        sign_bias = tl.where(negative & (yint == 1), 0x40000, 0).to(tl.uint64)
        ax = ix0 & 0x7FFFFFFFFFFFFFFF
        normalized = (_bits(tl.abs(x) * _f64(x, 4503599627370496.0)) & 0x7FFFFFFFFFFFFFFF) - (52 << 52)
        ix = tl.where((ax >> 52) == 0, normalized, ax)  # a subnormal x, normalised (its exponent negative)
        # glibc's log_inline: log(x) = hi + lo, with about 15 bits more than a double
        tmp = ix - 0x3FE6955500000000
        i = ((tmp >> 45) % 128).to(tl.int32)
        kd = (tmp.to(tl.int64, bitcast=True) >> 52).to(tl.float64)
        z = _double(ix - (tmp & 0xFFF0000000000000))
        row = d_ptr + _D_POW + 9 + 4 * i
        r = tl.fma(z, tl.load(row), _f64(z, -1.0))
        t1 = tl.fma(kd, tl.load(d_ptr + _D_POW), tl.load(row + 2))
        t2 = t1 + r
        lo1 = tl.fma(kd, tl.load(d_ptr + _D_POW + 1), tl.load(row + 3))
        lo2 = (t1 - t2) + r
        ar = r * tl.load(d_ptr + _D_POW + 2)
        ar2 = r * ar
        ar3 = r * ar2
        hi = t2 + ar2
        lo3 = tl.fma(ar, r, -ar2)
        lo4 = (t2 - hi) + ar2
        a = d_ptr + _D_POW + 2
        q = tl.fma(ar2, tl.fma(ar2, tl.fma(r, tl.load(a + 6), tl.load(a + 5)), tl.fma(r, tl.load(a + 4),
                                                                                        tl.load(a + 3))),
                   tl.fma(r, tl.load(a + 2), tl.load(a + 1)))
        lo = tl.fma(ar3, q, ((lo1 + lo2) + lo3) + lo4)
        log_hi = hi + lo
        log_lo = (hi - log_hi) + lo
        ehi = y * log_hi
        elo = tl.fma(y, log_lo, tl.fma(log_hi, y, -ehi))
        result = _exp_core(ehi, elo, sign_bias, d_ptr, e_ptr, True)
        # exp_inline's own special cases: a tiny, a huge product
        etop = ((_bits(ehi) >> 52) & 0x7FF).to(tl.int32)
        inf = _double(_u64(x, 0x7FF0000000000000))
        signed_one = tl.where(sign_bias != 0, -(1.0 + ehi), 1.0 + ehi)
        flow = tl.where((_bits(ehi) >> 63) != 0, _f64(x, 0.0), inf)
        flow = tl.where(sign_bias != 0, -flow, flow)
        result = tl.where(etop >= 0x409, flow, result)
        result = tl.where(etop < 0x3C9, signed_one, result)
        # |y| below 2**-65 or from 2**63 (the base finite, not zero)
        one = _f64(x, 1.0)
        above_one = ax > 0x3FF0000000000000
        tiny_y = tl.where(above_one, 1.0 + y, 1.0 - y)
        huge_y = tl.where(above_one == (topy < 0x800), inf, _f64(x, 0.0))
        extreme = tl.where(ax == 0x3FF0000000000000, one, tl.where(ay < 0x3BE, tiny_y, huge_y))
        result = tl.where((ay < 0x3BE) | (ay >= 0x43E), extreme, result)
        # a negative finite base: a non-integer power is NaN
        nan = _double(_u64(x, 0x7FF8000000000000))
        result = tl.where(negative & (yint == 0), nan, result)
        # x zero, infinite or NaN
        x2 = x * x
        x2 = tl.where(negative & (yint == 1), -x2, x2)
        x_special = (ix0 * 2 - 1) >= 0xFFDFFFFFFFFFFFFF
        result = tl.where(x_special, tl.where((iy >> 63) != 0, one / x2, x2), result)
        # y zero, infinite or NaN
        y_inf = tl.where((ix0 * 2 < 0x7FE0000000000000) == ((iy >> 63) == 0), _f64(x, 0.0), y * y)
        y_inf = tl.where(ix0 * 2 == 0x7FE0000000000000, one, y_inf)  # x = -1
        y_inf = tl.where((ix0 * 2 > 0xFFE0000000000000) | (iy * 2 > 0xFFE0000000000000), x + y, y_inf)
        y_inf = tl.where((iy * 2 == 0) | (ix0 == 0x3FF0000000000000), one, y_inf)
        result = tl.where((iy * 2 - 1) >= 0xFFDFFFFFFFFFFFFF, y_inf, result)
        return _flush64(result)

    # (Triton resolves a jit function's callees and constexpr globals among its module's globals)
    offsets = {"_D_EXPF": _D_EXPF, "_D_LOGF": _D_LOGF, "_D_EXP": _D_EXP, "_D_POW": _D_POW, "_D_COSF": _D_COSF,
               "_D_LOG": _D_LOG, "_E_EXPF": _E_EXPF, "_E_EXP": _E_EXP, "_E_PIO4": _E_PIO4}
    globals().update(tl=tl, _f64=_f64, _u64=_u64, _bits=_bits, _double=_double, _flush64=_flush64,
                     _exp_core=_exp_core, _checkint=_checkint, _cos_poly=_cos_poly, _sin_poly=_sin_poly, **{k: tl.constexpr(v) for k, v in offsets.items()})
    jit = {"expf": expf, "logf": logf, "cosf": cosf, "exp": exp, "log": log, "pow": pow}
    globals().update({f"_jit_{name}": fn for name, fn in jit.items()})

    @triton.jit
    def unary_kernel(x_ptr, out_ptr, n, d_ptr, e_ptr, FN: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask, other=1.0)
        if FN == 0:
            result = _jit_expf(x, d_ptr, e_ptr)  # noqa: F821 (set above)
        elif FN == 1:
            result = _jit_logf(x, d_ptr, e_ptr)  # noqa: F821
        elif FN == 3:
            result = _jit_cosf(x, d_ptr, e_ptr)  # noqa: F821
        elif FN == 4:
            result = _jit_log(x, d_ptr, e_ptr)  # noqa: F821
        else:
            result = _jit_exp(x, d_ptr, e_ptr)  # noqa: F821
        tl.store(out_ptr + offs, result, mask=mask)

    @triton.jit
    def pow_kernel(x_ptr, y_ptr, out_ptr, n, d_ptr, e_ptr, Y_SCALAR: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask, other=1.0)
        if Y_SCALAR:
            y = tl.load(y_ptr + offs * 0)
        else:
            y = tl.load(y_ptr + offs, mask=mask, other=1.0)
        tl.store(out_ptr + offs, _jit_pow(x, y, d_ptr, e_ptr), mask=mask)  # noqa: F821

    return {**jit, "unary": unary_kernel, "pow_kernel": pow_kernel}


def helpers() -> dict[str, Any]:
    """The ``@triton.jit`` functions ``expf``, ``logf``, ``exp``, ``pow`` (and what they call, by their names
    here) for another kernel module's globals; built in the current Triton mode (interpreter or compiler)."""
    global _kernels
    if _kernels is None:
        _kernels = _build()
    names = ("_f64", "_u64", "_bits", "_double", "_flush64", "_exp_core", "_checkint", "_cos_poly", "_sin_poly",
             "_D_EXPF", "_D_LOGF", "_D_EXP", "_D_POW", "_D_COSF", "_D_LOG", "_E_EXPF", "_E_EXP", "_E_PIO4")
    return {**{name: _kernels[name] for name in ("expf", "logf", "cosf", "exp", "log", "pow")},
            **{name: globals()[name] for name in names}}


def _kernel(name: str) -> Any:
    global _kernels
    if _kernels is None:
        _kernels = _build()
    return _kernels[name]


def tables(device: torch.device) -> Optional[tuple[torch.Tensor, torch.Tensor]]:
    """The C library's tables on ``device`` (float64 ``d``, int64 ``e``), copied there once; None where they are
    not found or a capture is under way on that device before the first copy."""
    held = _device_tables.get(device)
    if held is None:
        host = _host_tables()
        if host is None or (device.type == "cuda" and torch.cuda.is_current_stream_capturing()):
            return None
        held = (torch.tensor(host[0], dtype=torch.float64, device=device),
                torch.tensor(host[1], dtype=torch.int64, device=device))
        _device_tables[device] = held
    return held


def _launch_unary(name: str, x: torch.Tensor, d: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    from .reductions import _on

    x = x.detach().contiguous()
    out = torch.empty_like(x)
    if x.numel():
        with _on(x.device):
            _kernel("unary")[(-(-x.numel() // _BLOCK),)](x, out, x.numel(), d, e, FN=_UNARY.index(name),
                                                         BLOCK=_BLOCK, enable_fp_fusion=False)
    return out


def _launch_pow(x: torch.Tensor, y: Any, d: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    from . import step_scalars, table
    from .reductions import _on

    x = x.detach().contiguous()
    if x.dtype == torch.float32:  # glibc's powf: step_scalars' kernel (its own tables)
        yt = y.detach().contiguous() if isinstance(y, torch.Tensor) else torch.full_like(x, float(y))
        out = step_scalars.powf(x, yt)
        assert out is not None
        return out
    if isinstance(y, torch.Tensor):
        yt, scalar = y.detach().contiguous(), False
    elif x.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        yt, scalar = torch.full((1,), float(y), dtype=x.dtype, device=x.device), True  # (a fill the graph keeps)
    else:
        yt, scalar = table.scalar_vector([float(y)], x.dtype, x.device), True  # (sent once per value)
    out = torch.empty_like(x)
    if x.numel():
        with _on(x.device):
            _kernel("pow_kernel")[(-(-x.numel() // _BLOCK),)](x, yt, out, x.numel(), d, e, Y_SCALAR=scalar,
                                                              BLOCK=_BLOCK, enable_fp_fusion=False)
    return out


def _on_device_here(t: torch.Tensor) -> bool:
    from . import _on_triton_device
    from . import available as triton_available

    return _on_triton_device(t) and triton_available()


def _ready(name: str, t: torch.Tensor) -> Optional[tuple[torch.Tensor, torch.Tensor]]:
    """The tables on ``t``'s device where ``name`` gives the C library's bits there (checked on first use)."""
    from . import step_scalars

    if t.dtype != FUNCTIONS[name] or not _on_device_here(t) or (name == "powf" and not step_scalars.available()):
        return None
    key = (t.device, name)
    if key not in _verified:
        if t.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            return None  # (the check reads back: never during a capture; prepare() runs it ahead)
        _verified[key] = verify(name, t.device) == 0
    return tables(t.device) if _verified[key] else None


def unary(name: str, x: torch.Tensor) -> Optional[torch.Tensor]:
    """``expf``/``logf`` (float32) or ``exp`` (float64) of every element of ``x`` on its device (a new tensor),
    or None where the device function is not offered (other dtypes or devices, tables not found, not verified)."""
    held = _ready(name, x)
    return None if held is None else _launch_unary(name, x, *held)


def pow(x: torch.Tensor, y: Any) -> Optional[torch.Tensor]:  # noqa: A001 - the C library's name
    """The C library's ``pow`` (float64) or ``powf`` (float32) of every element of ``x`` and ``y`` (a number, or
    a tensor of ``x``'s shape, dtype and device), or None where it is not offered."""
    if isinstance(y, torch.Tensor) and (y.shape != x.shape or y.dtype != x.dtype or y.device != x.device):
        return None
    if not isinstance(y, (torch.Tensor, int, float)):
        return None
    held = _ready("powf" if x.dtype == torch.float32 else "pow", x)
    return None if held is None else _launch_pow(x, y, *held)


def verification_inputs(name: str, count: int = 4096, seed: int = 0) -> tuple[np.ndarray, ...]:
    """Inputs on which a device function must give the C library's bits: special values, subnormals, huge and
    tiny values, values near the over- and underflow bounds and near 1 and integers, and random bit patterns."""
    rng = np.random.default_rng(seed)
    single = FUNCTIONS[name] == torch.float32
    dtype, uint = (np.float32, np.uint32) if single else (np.float64, np.uint64)
    info = np.finfo(dtype)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 2.0, 0.5, info.tiny, -info.tiny,
                        info.tiny / 4, info.max, -info.max, info.eps, 88.72, 88.73, -87.3, -103.3, -104.0, 709.78,
                        709.79, -708.4, -745.1, -746.0, 1e-30, 3e-8, 0.69314718, -0.69314718], dtype=np.float64)
    quadrants = np.arange(-count // 16, count // 16) * (np.pi / 4)  # (cos: near the reductions' boundaries)
    values = np.concatenate([special, quadrants, np.nextafter(quadrants, np.inf), quadrants * 1e4,
                             np.round(rng.uniform(-60, 60, count // 16)) + rng.choice([0.0, 0.5], count // 16)])
    random_bits = rng.integers(0, np.iinfo(uint).max, size=count, dtype=uint, endpoint=True).view(dtype)
    spread = (rng.standard_normal(count) * np.exp(rng.uniform(-8, 6, count))).astype(dtype)
    near_one = (1 + rng.standard_normal(count) * np.exp(rng.uniform(-40, -2, count))).astype(dtype)
    ranges = rng.uniform(-750 if not single else -105, 750 if not single else 90, count).astype(dtype)
    near_one = np.concatenate([near_one, rng.uniform(0.9, 1.1, count // 4).astype(dtype)])  # (log's two paths)
    with np.errstate(all="ignore"):
        x = np.concatenate([values.astype(dtype), random_bits, spread, near_one, ranges])
    if name not in ("pow", "powf"):
        return (x,)
    exponents = np.concatenate([np.array([0.0, -0.0, 1.0, -1.0, 2.0, 3.0, -0.5, 0.5, 1e-20, 1e20, 2.0 ** 63,
                                          -2.0 ** 63, np.inf, -np.inf, np.nan, 1023.0, -1074.0, 7.0, 1e-300])])
    bases = np.concatenate([x, -np.abs(spread), rng.uniform(0.99, 1.01, count)])
    ys = np.concatenate([rng.choice(exponents, bases.size // 2),
                         (rng.standard_normal(bases.size - bases.size // 2) * 30).round(rng.integers(0, 3))])
    pairs_x = np.concatenate([bases, np.repeat(special, exponents.size), rng.uniform(0, 3, count)])
    pairs_y = np.concatenate([ys, np.tile(exponents, special.size), rng.uniform(-2000, 2000, count)])
    return pairs_x.astype(dtype), pairs_y.astype(dtype)


def reference(name: str, *inputs: np.ndarray) -> np.ndarray:
    """The C library's values (``numerics.libm``, flushed to zero) of ``name`` on the inputs."""
    from ...numerics import libm

    dtype = FUNCTIONS[name]
    tensors = [torch.from_numpy(np.ascontiguousarray(a)).to(dtype) for a in inputs]
    if name in ("pow", "powf"):
        return libm.c_library("pow", tensors[0], tensors[1]).numpy()
    return libm.c_library({"expf": "exp", "logf": "log", "cosf": "cos", "exp": "exp", "log": "log"}[name],
                          tensors[0]).numpy()


def differences(name: str, device: torch.device, inputs: tuple[np.ndarray, ...]) -> int:
    """How many of ``inputs`` the device kernel gives other bits than the C library on (NaN = NaN)."""
    held = tables(device)
    if held is None:
        return -1
    dtype = FUNCTIONS[name]
    tensors = [torch.from_numpy(np.ascontiguousarray(a)).to(dtype).to(device) for a in inputs]
    if name in ("pow", "powf"):
        got = _launch_pow(tensors[0], tensors[1], *held)
    else:
        got = _launch_unary(name, tensors[0], *held)
    got_np = got.cpu().numpy()
    want = reference(name, *inputs)
    uint = np.uint32 if dtype == torch.float32 else np.uint64
    same = (got_np.view(uint) == want.view(uint)) | (np.isnan(got_np) & np.isnan(want))
    return int(np.count_nonzero(~same))


def verify(name: str, device: torch.device) -> int:
    """Runs ``name``'s kernel on ``device`` on the verification inputs against the C library: the number of
    inputs that differ (0: the device function is offered), -1 where the tables are missing."""
    return differences(name, device, verification_inputs(name, 1024))


def prepare(device: torch.device) -> dict[str, bool]:
    """Copies the tables to ``device`` and checks every function there (reads back: call before a capture)."""
    result = {}
    for name, dtype in FUNCTIONS.items():
        result[name] = _ready(name, torch.empty(0, dtype=dtype, device=device)) is not None
    return result
