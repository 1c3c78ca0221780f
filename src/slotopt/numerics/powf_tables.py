"""The C library's ``powf`` as data: the tables and coefficients glibc's ``powf`` evaluates with, read from the
library this process has loaded, so that a device kernel can compute TensorFlow's scalar ``pow`` with its bits.

TensorFlow's ``Pow`` of a 0-d float32 tensor (Adam's ``beta ** t``, a schedule's ``decay_rate ** p``) is the C
library's ``powf`` (``libm.scalar_pow``). glibc's ``powf`` (2.28 and later) is table-driven: ``log2(x)`` from a
16-entry table of ``(1/c, log2 c)`` and a degree-5 polynomial, in double precision; ``2**(y log2 x)`` from a
32-entry table of ``2**(i/32)`` and a degree-3 polynomial; the double rounded once to float. Its result depends
on those tables, so they are read from the loaded ``libm`` rather than written here: the exponential's table is
recognised by its values (each entry is ``2**(i/32)`` less ``i << 47``, computable here), the logarithm's as the
16 pairs ``(a, b)`` with ``b ~ -log2 a`` followed by five coefficients; a candidate is taken only if
:func:`model` with it gives ``powf``'s bits on every verification input (the betas and steps optimizers use and
a spread of other values). Without glibc, or with tables not found, :func:`tables` is None and no device
``powf`` is offered (a capture that needs one is refused by name).

glibc's x86-64 build may take a variant compiled with fused multiply-adds; the model (and the device kernel)
round every product and sum once, which differs from it only far below float's rounding (none of the
verification inputs differs).
"""

from __future__ import annotations

import functools
import math
import struct
from typing import NamedTuple, Optional

import numpy as np

from . import libm

__all__ = ["Tables", "tables", "model"]

_TOP = 0x3F330000  # glibc's OFF: the subintervals of [0x1.66p-1, 0x1.66p0) the log table covers
_FLOAT32_TINY = float(np.finfo(np.float32).tiny)
_OVERFLOW = float.fromhex("0x1.fffffffd1d571p+6")  # glibc: y log2 x above this overflows


class Tables(NamedTuple):
    """``doubles``: the 16 ``(1/c, log2 c)`` pairs, then the log polynomial's 5 coefficients, the exponential's 3
    its rounding shift (``1.5 * 2**52 / 32``) and the overflow bound of ``y log2 x``: 42 float64. ``exp2``: the 32 uint64 entries of ``2**(i/32)``."""
    doubles: np.ndarray
    exp2: np.ndarray


def _exp2_entries() -> list[int]:
    entries = []
    for i in range(32):
        # 2**(i/32) correctly rounded to a double: math.pow(2, i/32) is, for these 32 values (checked by finding
        # the whole table in the library: a wrong entry finds nothing)
        bits = struct.unpack("<Q", struct.pack("<d", 2.0 ** (i / 32)))[0]
        entries.append((bits - (i << 47)) & 0xFFFFFFFFFFFFFFFF)
    return entries


def _library_bytes() -> Optional[bytes]:
    """The file of the ``libm`` this process loaded (its mapping), or None."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "/libm.so" in line or "/libm-" in line}
    except OSError:
        return None
    for path in sorted(paths):
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError:
            continue
    return None


def _as_float(u: int) -> float:
    return struct.unpack("<f", struct.pack("<I", u & 0xFFFFFFFF))[0]


def model(x: float, y: float, t: Tables) -> float:
    """glibc's ``powf(x, y)`` for a positive normal float32 ``x`` and a finite float32 ``y``, as the device kernel
    computes it (``kernels/triton/step_scalars.py``), flushed to zero when subnormal."""
    ix = struct.unpack("<I", struct.pack("<f", x))[0]
    d = [float(v) for v in t.doubles]
    tmp = (ix - _TOP) & 0xFFFFFFFF
    i = (tmp >> 19) % 16
    top = tmp & 0xFF800000
    k = (top - (1 << 32) if top >= 1 << 31 else top) >> 23
    z = float(np.float32(_as_float(ix - top)))
    r = z * d[2 * i] - 1.0
    y0 = d[2 * i + 1] + float(k)
    a = d[32:37]
    r2 = r * r
    q = (a[2] * r + a[3]) * r2 + (a[4] * r + y0)
    log2x = (a[0] * r + a[1]) * (r2 * r2) + q
    ylogx = y * log2x
    if ylogx <= -150.0:
        return 0.0
    if ylogx > _OVERFLOW:
        return math.inf
    shift = d[40]
    kd = ylogx + shift
    ki = struct.unpack("<Q", struct.pack("<d", kd))[0]
    rr = ylogx - (kd - shift)
    s = struct.unpack("<d", struct.pack("<Q", (int(t.exp2[ki % 32]) + (ki << 47)) & 0xFFFFFFFFFFFFFFFF))[0]
    c = d[37:40]
    value = ((c[0] * rr + c[1]) * (rr * rr) + (c[2] * rr + 1.0)) * s
    result = float(np.float32(value))
    return 0.0 if abs(result) < _FLOAT32_TINY else result


def _inputs() -> list[tuple[float, float]]:
    f = lambda v: float(np.float32(v))  # noqa: E731
    cases = [(f(b), float(s)) for b in (0.9, 0.99, 0.999, 0.9999, 0.95, 0.5, 0.8, 0.96)
             for s in (1, 2, 3, 7, 10, 100, 999, 1000, 4097, 65536, 123457)]
    cases += [(f(1.0 + k / 37.0), f(0.37 * k - 3.0)) for k in range(-30, 40)]
    cases += [(f(2.0 ** k * 1.2345), f(-0.5 + k / 64.0)) for k in range(-60, 60, 3)]
    return cases


def _verified(t: Tables) -> bool:
    for x, y in _inputs():
        expected = libm.scalar_pow(x, y, single=True)
        if struct.pack("<f", model(x, y, t)) != struct.pack("<f", expected):
            return False
    return True


@functools.lru_cache(maxsize=1)
def tables() -> Optional[Tables]:
    """The loaded C library's ``powf`` tables (verified against it), or None."""
    data = _library_bytes()
    if data is None:
        return None
    at = data.find(struct.pack("<32Q", *_exp2_entries()))
    if at < 0:
        return None
    exp2 = np.frombuffer(data, dtype="<u8", count=32, offset=at).astype(np.uint64)
    shift = struct.unpack_from("<d", data, at + 256)[0]
    poly_exp = struct.unpack_from("<3d", data, at + 264)
    values = np.frombuffer(data[:len(data) // 8 * 8], dtype="<f8")
    with np.errstate(all="ignore"):
        pair = (values[:-1] > 0.6) & (values[:-1] < 1.5) & (np.abs(values[1:] + np.log2(values[:-1])) < 1e-3)
    starts = np.flatnonzero(pair)
    ok = set(starts.tolist())
    for s in starts:
        if not all(int(s) + 2 * j in ok for j in range(16)) or int(s) + 37 > len(values):
            continue
        doubles = np.concatenate([values[s:s + 37], np.asarray([*poly_exp, shift, _OVERFLOW])]).astype(np.float64)
        candidate = Tables(doubles, exp2)
        if _verified(candidate):
            return candidate
    return None
