"""The tables and coefficients the loaded C library's ``expf``, ``logf``, ``exp`` and ``pow`` evaluate with, read
from the library this process has loaded, so that device kernels (``kernels/triton/libm.py``) compute TensorFlow's
scalar ``exp``/``log``/``pow`` with its bits (as ``powf_tables`` does for ``powf``).

glibc's (2.28 and later) ``expf``, ``logf``, ``exp`` and ``pow`` are table-driven: a small table of ``2**(i/N)``
or of ``(1/c, log c)`` pairs and a short polynomial, evaluated in double precision. Their results depend on those
tables, so they are found in the library's bytes by their anchors (a constant each glibc release has kept, such as
``N/ln 2`` or the split ``ln 2``) and read at the offsets of glibc's structures; each group is checked for shape
(the anchors' neighbours, the table entries' relation to their index). Finding them proves nothing about the
evaluation order: the device kernel that uses them is checked against the C library itself on first use
(``kernels/triton/libm.py``), and is not offered where it differs.

Each function returns a float64 array (integers stored as their bit patterns in float64 slots are avoided: tables
of bit patterns are int64 arrays), or None where the tables are not found (no glibc, another layout).
"""

from __future__ import annotations

import functools
import math
import struct
from typing import NamedTuple, Optional

import numpy as np

from .powf_tables import _exp2_entries, _library_bytes

__all__ = ["Exp2f", "Logf", "ExpData", "PowLog", "Sincosf", "LogData", "exp2f", "logf", "exp_data", "pow_log",
           "sincosf", "log_data"]

_SHIFT52 = 0x4338000000000000  # 0x1.8p52, the rounding shift every one of these functions adds


class Exp2f(NamedTuple):
    """``expf``'s data: ``doubles`` = (32/ln 2, C0, C1, C2, shift), ``tab`` the 32 int64 ``2**(i/32)`` entries."""
    doubles: np.ndarray
    tab: np.ndarray


class Logf(NamedTuple):
    """``logf``'s data: ``doubles`` = the 16 (1/c, log c) pairs, then ln 2 and the 3 coefficients (36 float64)."""
    doubles: np.ndarray


class ExpData(NamedTuple):
    """``exp``'s (and ``pow``'s exponential's) data: ``doubles`` = (128/ln 2, -ln2hi/128, -ln2lo/128, C2..C5,
    shift) and ``tab``: the 256 int64 entries (tail, scale bits) of ``2**(k/128)``."""
    doubles: np.ndarray
    tab: np.ndarray


class PowLog(NamedTuple):
    """``pow``'s logarithm's data: ``doubles`` = (ln2hi, ln2lo, A0..A6), then 128 rows (1/c, pad, log c, tail)."""
    doubles: np.ndarray


def _data() -> Optional[bytes]:
    return _library_bytes()


def _doubles(data: bytes, at: int, count: int) -> np.ndarray:
    return np.frombuffer(data, dtype="<f8", count=count, offset=at).astype(np.float64)


def _anchors(data: bytes, value: float) -> list[int]:
    key, found, start = struct.pack("<d", value), [], 0
    while True:
        at = data.find(key, start)
        if at < 0:
            return found
        if at % 8 == 0:
            found.append(at)
        start = at + 1


@functools.lru_cache(maxsize=1)
def exp2f() -> Optional[Exp2f]:
    """glibc's ``__exp2f_data`` (the ``2**(i/32)`` table ``powf`` uses too, then ``expf``'s scaled constants)."""
    data = _data()
    if data is None:
        return None
    at = data.find(struct.pack("<32Q", *_exp2_entries()))
    if at < 0 or at + 0x148 > len(data):
        return None
    d = _doubles(data, at + 0x120, 5)
    n = 32.0
    ln2 = math.log(2.0)
    if d[0] != float.fromhex("0x1.71547652b82fep+5") or struct.unpack("<Q", struct.pack("<d", d[4]))[0] != _SHIFT52:
        return None
    if not (abs(d[3] / (ln2 / n) - 1) < 1e-6 and abs(d[2] / ((ln2 / n) ** 2 / 2) - 1) < 1e-3
            and abs(d[1] / ((ln2 / n) ** 3 / 6) - 1) < 1e-2):
        return None
    tab = np.frombuffer(data, dtype="<i8", count=32, offset=at).astype(np.int64)
    return Exp2f(d, tab)


@functools.lru_cache(maxsize=1)
def logf() -> Optional[Logf]:
    """glibc's ``__logf_data``: 16 (1/c, log c) pairs, ln 2 (the anchor), 3 coefficients."""
    data = _data()
    if data is None:
        return None
    for at in _anchors(data, math.log(2.0)):
        if at < 256 or at + 32 > len(data):
            continue
        d = _doubles(data, at - 256, 36)
        invc, logc = d[0:32:2], d[1:32:2]
        if not (np.all((invc > 0.6) & (invc < 1.5)) and np.all(np.abs(logc + np.log(invc)) < 1e-3)):
            continue
        if not (abs(d[35] + 0.5) < 1e-3 and abs(d[34] - 1 / 3) < 1e-2 and abs(d[33] + 0.25) < 1e-2):
            continue
        return Logf(d)
    return None


@functools.lru_cache(maxsize=1)
def exp_data() -> Optional[ExpData]:
    """glibc's ``__exp_data``: 128/ln 2 (the anchor), the split ln 2 / 128, C2..C5, the shift, then (at 0x70) the
    256 entries of the table of ``2**(k/128)``."""
    data = _data()
    if data is None:
        return None
    for at in _anchors(data, float.fromhex("0x1.71547652b82fep+7")):
        if at + 0x70 + 256 * 8 > len(data):
            continue
        d = _doubles(data, at, 8)
        if struct.unpack("<Q", struct.pack("<d", d[7]))[0] != _SHIFT52:
            continue
        if abs(d[1] * -128 / math.log(2.0) - 1) > 1e-9 or abs(d[2]) > 1e-13 or abs(d[3] - 0.5) > 1e-6:
            continue
        tab = np.frombuffer(data, dtype="<i8", count=256, offset=at + 0x70).astype(np.int64)
        scale = (tab[1::2].astype(np.uint64) + (np.arange(128, dtype=np.uint64) << np.uint64(45))).view(np.float64)
        if not np.all(np.abs(scale / np.exp2(np.arange(128) / 128.0) - 1) < 1e-15):
            continue
        return ExpData(d, tab)
    return None


@functools.lru_cache(maxsize=1)
def pow_log() -> Optional[PowLog]:
    """glibc's ``__pow_log_data``: ln2hi (the anchor) and ln2lo, A0..A6, then 128 rows (1/c, pad, log c, tail)."""
    data = _data()
    if data is None:
        return None
    for at in _anchors(data, float.fromhex("0x1.62e42fefa3800p-1")):
        if at + (9 + 4 * 128) * 8 > len(data):
            continue
        d = _doubles(data, at, 9 + 4 * 128)
        if d[1] != float.fromhex("0x1.ef35793c76730p-45") or d[2] != -0.5:
            continue
        rows = d[9:].reshape(128, 4)
        if not (np.all((rows[:, 0] > 0.6) & (rows[:, 0] < 1.5)) and np.all(np.abs(rows[:, 2] + np.log(rows[:, 0]))
                                                                           < 1e-12)):
            continue
        return PowLog(d)
    return None


class Sincosf(NamedTuple):
    """``cosf``'s data: ``doubles`` = glibc's two ``sincos_t`` rows of 14 (the signs of the 4 quadrants, 2/pi *
    2**24, pi/2, then c0, c1, s1, c2, s2, c3, s3, c4 as they lie in memory), ``inv_pio4`` the 24 words of 4/pi."""
    doubles: np.ndarray
    inv_pio4: np.ndarray


_INV_PIO4_HEAD = (0xA2, 0xA2F9, 0xA2F983, 0xA2F9836E, 0xF9836E4E)  # 4/pi's bits, as glibc's table starts


@functools.lru_cache(maxsize=1)
def sincosf() -> Optional[Sincosf]:
    """glibc's ``__sincosf_table`` (anchored at 2/pi * 2**24, four quadrant signs before it) and ``__inv_pio4``."""
    data = _data()
    if data is None:
        return None
    at = data.find(struct.pack("<5I", *_INV_PIO4_HEAD))
    if at < 0 or at + 96 > len(data):
        return None
    inv_pio4 = np.frombuffer(data, dtype="<u4", count=24, offset=at).astype(np.int64)
    for anchor in _anchors(data, float.fromhex("0x1.45f306dc9c883p+23")):
        if anchor < 32 or anchor - 32 + 28 * 8 > len(data):
            continue
        d = _doubles(data, anchor - 32, 28)
        if list(d[0:4]) != [1.0, -1.0, -1.0, 1.0] or d[5] != float.fromhex("0x1.921fb54442d18p+0") \
                or d[18] != d[4] or d[6] != 1.0 or abs(d[7] + 0.5) > 1e-6 or abs(d[8] + 1 / 6) > 1e-5:
            continue
        return Sincosf(d, inv_pio4)
    return None


class LogData(NamedTuple):
    """``log``'s data: ``doubles`` = (ln2hi, ln2lo, A0..A4, B0..B10), then 128 pairs (1/c, log c): 274 float64."""
    doubles: np.ndarray


@functools.lru_cache(maxsize=1)
def log_data() -> Optional[LogData]:
    """glibc's ``__log_data``: ln2hi (the anchor ``pow``'s data shares) and ln2lo, the 5 coefficients near
    ``log c``, the 11 of the polynomial near 1 (B0 = -0.5), then 128 (1/c, log c) pairs."""
    data = _data()
    if data is None:
        return None
    for at in _anchors(data, float.fromhex("0x1.62e42fefa3800p-1")):
        if at + 274 * 8 > len(data):
            continue
        d = _doubles(data, at, 274)
        if d[1] != float.fromhex("0x1.ef35793c76730p-45") or d[7] != -0.5 or abs(d[2] + 0.5) > 1e-9:
            continue
        invc, logc = d[18::2], d[19::2]
        if not (np.all((invc > 0.6) & (invc < 1.5)) and np.all(np.abs(logc + np.log(invc)) < 1e-12)):
            continue
        return LogData(d)
    return None
