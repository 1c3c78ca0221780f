"""CRC-32C (Castagnoli), the checksum of TensorFlow checkpoints and LevelDB tables, with TensorFlow's masking.

``google-crc32c`` (the optional extra ``slotopt[tf]``) computes it in C when installed; otherwise a table-driven
numpy version runs: the data is cut into equal lanes whose CRC registers advance together, one byte of every
lane per numpy operation, and the lanes are then joined with the linear "append n zero bytes" operator of the
CRC register (a CRC is linear over GF(2), so ``R(s, A+B) = Z_len(B)(R(s, A)) xor R(0, B)``).

Example:
    >>> from slotopt.io.crc32c import crc32c, mask, unmask
    >>> hex(crc32c(b"123456789"))
    '0xe3069283'
    >>> unmask(mask(0xE3069283)) == 0xE3069283
    True
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

__all__ = ["crc32c", "crc32c_python", "mask", "unmask"]

_POLY = 0x82F63B78  # Castagnoli, reflected
_MASK_DELTA = 0xA282EAD8


def _make_table() -> np.ndarray:
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(_POLY), table >> 1).astype(np.uint32)
    return table


_TABLE = _make_table()
_TABLE_LIST = [int(v) for v in _TABLE]


def _native() -> Optional[Any]:
    try:
        import google_crc32c
    except ImportError:
        return None
    return google_crc32c if getattr(google_crc32c, "implementation", "") == "c" else None


_NATIVE = _native()


def _register_bytes(state: int, data: bytes) -> int:
    table = _TABLE_LIST
    for byte in data:
        state = table[(state ^ byte) & 0xFF] ^ (state >> 8)
    return state


def _zeros_operator(n: int) -> list[list[int]]:
    """Four byte tables applying "advance the register over ``n`` zero bytes" to a 32-bit state."""
    basis = np.left_shift(np.uint32(1), np.arange(32, dtype=np.uint32))
    for _ in range(n):
        basis = _TABLE[basis & 0xFF] ^ (basis >> 8)
    images = [int(v) for v in basis]
    tables = []
    for k in range(4):
        table = [0] * 256
        for b in range(1, 256):
            low = b & -b
            table[b] = table[b ^ low] ^ images[8 * k + low.bit_length() - 1]
        tables.append(table)
    return tables


def crc32c_python(data: bytes, lanes: int = 4096) -> int:
    """CRC-32C without the C extension (numpy lanes for long inputs, a byte loop for short ones)."""
    view = memoryview(data).cast("B")
    size = len(view)
    if size < 16 * lanes:
        return _register_bytes(0xFFFFFFFF, view) ^ 0xFFFFFFFF
    length = size // lanes
    block = np.frombuffer(view[: lanes * length], dtype=np.uint8).reshape(lanes, length)
    states = np.zeros(lanes, dtype=np.uint32)
    for i in range(length):
        states = _TABLE[(states ^ block[:, i]) & 0xFF] ^ (states >> 8)
    t0, t1, t2, t3 = _zeros_operator(length)
    # The first lane starts from the initial register 0xFFFFFFFF, the others from 0 (their share is added).
    state = 0xFFFFFFFF
    for lane_state in states.tolist():
        state = (t0[state & 0xFF] ^ t1[(state >> 8) & 0xFF] ^ t2[(state >> 16) & 0xFF] ^ t3[state >> 24]) ^ lane_state
    return _register_bytes(state, view[lanes * length:]) ^ 0xFFFFFFFF


def crc32c(data: bytes) -> int:
    """CRC-32C of ``data`` (bytes, bytearray or memoryview)."""
    if _NATIVE is not None:
        return int(_NATIVE.value(bytes(data)))
    return crc32c_python(data)


def mask(crc: int) -> int:
    """TensorFlow's and LevelDB's stored form of a CRC (rotated right by 15 bits plus a constant), so that the CRC
    of data holding CRCs does not degenerate."""
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _MASK_DELTA) & 0xFFFFFFFF


def unmask(masked: int) -> int:
    rot = (masked - _MASK_DELTA) & 0xFFFFFFFF
    return ((rot >> 17) | (rot << 15)) & 0xFFFFFFFF
