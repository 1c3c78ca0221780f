"""CRC-32C (Castagnoli), the checksum of TensorFlow checkpoints and LevelDB tables, with TensorFlow's masking.

slotopt builds it in C at install time (``kernels/native/crc32c.c``: the SSE4.2 instruction where the processor
has it, tables elsewhere; several GB/s), loaded with ctypes; :func:`crc32c_extend` continues a CRC over more
bytes, so a reader checks each chunk as it reads it. Without that library, ``google-crc32c`` (the optional extra
``slotopt[tf]``) is used when installed; otherwise a table-driven numpy version runs: the data is cut into equal lanes whose CRC registers advance together, one byte of every
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

import ctypes
import os
from typing import Any, Optional

import numpy as np

__all__ = ["crc32c", "crc32c_extend", "crc32c_python", "mask", "unmask", "implementation"]

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


def _library() -> Optional[Any]:
    """slotopt's own C CRC-32C (a plain library next to the update kernels', loaded by path: the readers do not
    import the kernels' package), or None where it was not built or the host is big-endian."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "kernels", "native",
                        "libslotopt_crc32c.so.1")
    if os.environ.get("SLOTOPT_CRC32C", "").strip() == "python" or not os.path.isfile(path):
        return None
    try:
        library = ctypes.CDLL(path)
        extend = library.slotopt_crc32c_extend
        extend.argtypes, extend.restype = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t], ctypes.c_uint32
        table = library.slotopt_crc32c_extend_table
        table.argtypes, table.restype = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t], ctypes.c_uint32
        if not library.slotopt_crc32c_little_endian() or extend(0, b"123456789", 9) != 0xE3069283:
            return None
    except (OSError, AttributeError):
        return None
    return library


_LIBRARY = _library()


def implementation() -> str:
    """Which CRC-32C runs: ``"sse4.2"``, ``"c-table"`` (slotopt's library), ``"google-crc32c"`` or ``"numpy"``."""
    if _LIBRARY is not None:
        return "sse4.2" if _LIBRARY.slotopt_crc32c_hardware() else "c-table"
    return "google-crc32c" if _NATIVE is not None else "numpy"


def _address(data: Any) -> tuple[Any, int]:
    """A pointer ctypes accepts for ``data`` (bytes, bytearray, memoryview, numpy array, torch CPU tensor), with
    its length in bytes, without copying it."""
    if isinstance(data, bytes):
        return data, len(data)
    if hasattr(data, "data_ptr") and hasattr(data, "untyped_storage"):  # a torch CPU tensor
        if not data.is_contiguous() or data.device.type != "cpu":
            raise ValueError("crc32c needs a contiguous CPU tensor")
        return data.data_ptr(), data.numel() * data.element_size()
    array = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data.reshape(-1).view(np.uint8)
    return array.ctypes.data, array.nbytes


def crc32c_extend(crc: int, data: Any, table_only: bool = False) -> int:
    """The CRC-32C of (the bytes whose CRC is ``crc``) followed by ``data`` (``crc32c_extend(0, d) ==
    crc32c(d)``). ``table_only`` (tests) takes the C library's table path even where SSE4.2 is there."""
    if _LIBRARY is not None:
        pointer, size = _address(data)
        function = _LIBRARY.slotopt_crc32c_extend_table if table_only else _LIBRARY.slotopt_crc32c_extend
        return int(function(crc, pointer, size))
    if hasattr(data, "untyped_storage"):
        data = data.numpy()
    view = memoryview(data).cast("B") if not isinstance(data, np.ndarray) else data.reshape(-1).view(np.uint8)
    if _NATIVE is not None:
        return int(_NATIVE.extend(crc, bytes(view)))
    if crc == 0:
        return crc32c_python(view)
    return _register_bytes(crc ^ 0xFFFFFFFF, bytes(view)) ^ 0xFFFFFFFF if len(view) < 65536 else \
        _join(crc, crc32c_python(view), len(view))


def _register_bytes(state: int, data: bytes) -> int:
    table = _TABLE_LIST
    for byte in data:
        state = table[(state ^ byte) & 0xFF] ^ (state >> 8)
    return state


def _apply(images: list[int], state: int) -> int:
    out, bit = 0, 0
    while state:
        if state & 1:
            out ^= images[bit]
        state >>= 1
        bit += 1
    return out


def _zero_images(n: int) -> list[int]:
    """The images of the 32 unit states under "advance over ``n`` zero bytes", by repeated squaring of the
    one-byte map (log n compositions, so joining CRCs of gigabytes costs microseconds, not a loop per byte)."""
    step = [int(_TABLE[(1 << i) & 0xFF]) ^ ((1 << i) >> 8) for i in range(32)]
    result = [1 << i for i in range(32)]
    while n:
        if n & 1:
            result = [_apply(step, r) for r in result]
        step = [_apply(step, s) for s in step]
        n >>= 1
    return result


def _zeros_operator(n: int) -> list[list[int]]:
    """Four byte tables applying "advance the register over ``n`` zero bytes" to a 32-bit state."""
    images = _zero_images(n)
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


def _join(crc_a: int, crc_b: int, length_b: int) -> int:
    """The CRC of A+B from the CRCs of A and of B (B of ``length_b`` bytes): linear over GF(2)."""
    t0, t1, t2, t3 = _zeros_operator(length_b)
    # crc_b = R(~0, B)^~0; R(s, B) = Z(s) ^ R(0, B) and R(0, B) = crc_b ^ ~0 ^ Z(~0)
    def z(s: int) -> int:
        return t0[s & 0xFF] ^ t1[(s >> 8) & 0xFF] ^ t2[(s >> 16) & 0xFF] ^ t3[s >> 24]
    return (z(crc_a ^ 0xFFFFFFFF) ^ crc_b ^ 0xFFFFFFFF ^ z(0xFFFFFFFF)) ^ 0xFFFFFFFF


def crc32c(data: Any) -> int:
    """CRC-32C of ``data`` (bytes, bytearray, memoryview, a numpy array or a contiguous torch CPU tensor)."""
    if _LIBRARY is not None:
        return crc32c_extend(0, data)
    if _NATIVE is not None:
        return int(_NATIVE.value(bytes(memoryview(data).cast("B")) if not isinstance(data, bytes) else data))
    return crc32c_python(data)


def mask(crc: int) -> int:
    """TensorFlow's and LevelDB's stored form of a CRC (rotated right by 15 bits plus a constant), so that the CRC
    of data holding CRCs does not degenerate."""
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _MASK_DELTA) & 0xFFFFFFFF


def unmask(masked: int) -> int:
    rot = (masked - _MASK_DELTA) & 0xFFFFFFFF
    return ((rot >> 17) | (rot << 15)) & 0xFFFFFFFF
