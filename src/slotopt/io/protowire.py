"""A small decoder of the protocol-buffer wire format, for the few TensorFlow messages a checkpoint holds.

TensorFlow writes its checkpoint metadata (``BundleEntryProto``, ``TrackableObjectGraph``, ``MetaGraphDef``) as
serialized protocol buffers. Reading them needs only the wire format (varints, fixed 32/64-bit words and
length-delimited fields), not the ``protobuf`` package with generated classes: :func:`decode` turns one message
into ``{field number: [values]}`` and the typed getters below read a field the way the schema declares it.
Every length is checked against the bytes at hand, so a malformed message raises :class:`WireFormatError`
and never makes the decoder allocate or read past its input.

Example:
    >>> from slotopt.io.protowire import decode, get_int, get_str
    >>> fields = decode(bytes([0x08, 0x96, 0x01, 0x12, 0x02]) + b"hi")
    >>> get_int(fields, 1), get_str(fields, 2)
    (150, 'hi')
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Union

__all__ = ["WireFormatError", "decode", "iter_fields", "read_varint", "get_int", "get_sint", "get_bool", "get_str", "get_bytes",
           "get_fixed32", "get_bytes_list", "get_strs", "get_messages", "get_message", "get_packed_ints", "get_floats"]

#: A decoded field value: an int (varint, fixed32, fixed64) or bytes (length-delimited: string, bytes, message,
#: packed repeated numbers).
Value = Union[int, bytes]
Fields = dict[int, list[tuple[int, Value]]]

VARINT, FIXED64, LENGTH_DELIMITED, FIXED32 = 0, 1, 2, 5


class WireFormatError(ValueError):
    """The bytes are not a well-formed protocol-buffer message (or a field has the wrong wire type)."""


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The unsigned varint at ``data[pos:]`` and the position after it (at most 10 bytes, 64 bits)."""
    result = shift = 0
    end = len(data)
    for _ in range(10):
        if pos >= end:
            raise WireFormatError(f"truncated varint at byte {pos}")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            if result >= 1 << 64:
                raise WireFormatError(f"varint longer than 64 bits ending at byte {pos}")
            return result, pos
        shift += 7
    raise WireFormatError(f"varint longer than 10 bytes ending at byte {pos}")


def iter_fields(data: Union[bytes, memoryview]) -> Iterator[tuple[int, int, Union[int, memoryview]]]:
    """The fields of one message, one at a time: ``(field number, wire type, value)``, a length-delimited value
    as a ``memoryview`` of ``data`` (no copy). A reader that walks a large message this way keeps only what it
    needs: :func:`decode` holds every field at once, tens of bytes of Python objects per byte of a message made
    of tiny fields."""
    view = data if isinstance(data, memoryview) else memoryview(data)
    pos, end = 0, len(view)
    while pos < end:
        tag, pos = read_varint(view, pos)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise WireFormatError(f"field number 0 at byte {pos}")
        value: Union[int, memoryview]
        if wire == VARINT:
            value, pos = read_varint(view, pos)
        elif wire == FIXED64:
            if pos + 8 > end:
                raise WireFormatError(f"truncated fixed64 field {number} at byte {pos}")
            value = int.from_bytes(view[pos:pos + 8], "little")
            pos += 8
        elif wire == FIXED32:
            if pos + 4 > end:
                raise WireFormatError(f"truncated fixed32 field {number} at byte {pos}")
            value = int.from_bytes(view[pos:pos + 4], "little")
            pos += 4
        elif wire == LENGTH_DELIMITED:
            length, pos = read_varint(view, pos)
            if length > end - pos:
                raise WireFormatError(f"field {number} declares {length} bytes at byte {pos}; {end - pos} remain")
            value = view[pos:pos + length]
            pos += length
        else:
            raise WireFormatError(f"unsupported wire type {wire} for field {number} at byte {pos}")
        yield number, wire, value


def decode(data: bytes) -> Fields:
    """One message: ``{field number: [(wire type, value), ...]}`` in the order the fields appear."""
    fields: Fields = {}
    pos, end = 0, len(data)
    while pos < end:
        tag, pos = read_varint(data, pos)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise WireFormatError(f"field number 0 at byte {pos}")
        value: Value
        if wire == VARINT:
            value, pos = read_varint(data, pos)
        elif wire == FIXED64:
            if pos + 8 > end:
                raise WireFormatError(f"truncated fixed64 field {number} at byte {pos}")
            value = int.from_bytes(data[pos:pos + 8], "little")
            pos += 8
        elif wire == FIXED32:
            if pos + 4 > end:
                raise WireFormatError(f"truncated fixed32 field {number} at byte {pos}")
            value = int.from_bytes(data[pos:pos + 4], "little")
            pos += 4
        elif wire == LENGTH_DELIMITED:
            length, pos = read_varint(data, pos)
            if length > end - pos:
                raise WireFormatError(f"field {number} declares {length} bytes at byte {pos}; {end - pos} remain")
            value = bytes(data[pos:pos + length])
            pos += length
        else:  # groups (3, 4) are not used by any message read here; 6 and 7 do not exist
            raise WireFormatError(f"unsupported wire type {wire} for field {number} at byte {pos}")
        fields.setdefault(number, []).append((wire, value))
    return fields


def _values(fields: Fields, number: int, wire: int) -> list[Value]:
    out = []
    for got, value in fields.get(number, []):
        if got != wire:
            raise WireFormatError(f"field {number} has wire type {got}; expected {wire}")
        out.append(value)
    return out


def _last(fields: Fields, number: int, wire: int) -> Value | None:
    values = _values(fields, number, wire)
    return values[-1] if values else None  # proto3: the last occurrence of a scalar wins


def get_int(fields: Fields, number: int, default: int = 0, bits: int = 64) -> int:
    """A varint field as a signed ``int32``/``int64`` (two's complement), or an enum."""
    value = _last(fields, number, VARINT)
    if value is None:
        return default
    value = int(value) & ((1 << 64) - 1)
    if value >= 1 << 63:
        value -= 1 << 64
    if bits == 32 and not -(1 << 31) <= value < (1 << 31):
        raise WireFormatError(f"field {number} holds {value}, outside int32")
    return value


def get_sint(fields: Fields, number: int, default: int = 0) -> int:
    """A ``sint32``/``sint64`` (zigzag) field."""
    value = _last(fields, number, VARINT)
    if value is None:
        return default
    value = int(value)
    return (value >> 1) ^ -(value & 1)


def get_bool(fields: Fields, number: int) -> bool:
    return bool(get_int(fields, number))


def get_fixed32(fields: Fields, number: int, default: int = 0) -> int:
    value = _last(fields, number, FIXED32)
    return default if value is None else int(value)


def get_bytes(fields: Fields, number: int, default: bytes = b"") -> bytes:
    value = _last(fields, number, LENGTH_DELIMITED)
    return default if value is None else bytes(value)  # type: ignore[arg-type]


def get_str(fields: Fields, number: int, default: str = "") -> str:
    value = _last(fields, number, LENGTH_DELIMITED)
    if value is None:
        return default
    try:
        return bytes(value).decode("utf-8")  # type: ignore[arg-type]
    except UnicodeDecodeError as err:
        raise WireFormatError(f"field {number} is not UTF-8 text") from err


def get_strs(fields: Fields, number: int) -> list[str]:
    """A ``repeated string`` field."""
    try:
        return [bytes(v).decode("utf-8") for v in _values(fields, number, LENGTH_DELIMITED)]  # type: ignore[arg-type]
    except UnicodeDecodeError as err:
        raise WireFormatError(f"field {number} is not UTF-8 text") from err


def get_bytes_list(fields: Fields, number: int) -> list[bytes]:
    """A ``repeated bytes`` field."""
    return [bytes(v) for v in _values(fields, number, LENGTH_DELIMITED)]  # type: ignore[arg-type]


def get_messages(fields: Fields, number: int) -> list[Fields]:
    """A ``repeated`` message field, each decoded."""
    return [decode(v) for v in _values(fields, number, LENGTH_DELIMITED)]  # type: ignore[arg-type]


def get_message(fields: Fields, number: int) -> Fields:
    """A message field (empty when absent; proto merges repeated occurrences, the last one is enough here)."""
    value = _last(fields, number, LENGTH_DELIMITED)
    return {} if value is None else decode(value)  # type: ignore[arg-type]


def get_packed_ints(fields: Fields, number: int) -> list[int]:
    """A ``repeated int32/int64/enum`` field, packed (proto3's default) or not."""
    out: list[int] = []
    for wire, value in fields.get(number, []):
        if wire == VARINT:
            out.append(int(value))
        elif wire == LENGTH_DELIMITED:
            data, pos = bytes(value), 0  # type: ignore[arg-type]
            while pos < len(data):
                item, pos = read_varint(data, pos)
                out.append(item)
        else:
            raise WireFormatError(f"field {number} has wire type {wire}; expected a varint list")
    return [v - (1 << 64) if v >= 1 << 63 else v for v in out]


def get_floats(fields: Fields, number: int, double: bool = False) -> list[float]:
    """A ``repeated float`` (or ``double``) field, packed or not."""
    size, wire_one, fmt = (8, FIXED64, "<d") if double else (4, FIXED32, "<f")
    out: list[float] = []
    for wire, value in fields.get(number, []):
        if wire == wire_one:
            out.append(struct.unpack(fmt, int(value).to_bytes(size, "little"))[0])
        elif wire == LENGTH_DELIMITED:
            data = bytes(value)  # type: ignore[arg-type]
            if len(data) % size:
                raise WireFormatError(f"packed field {number} has {len(data)} bytes, not a multiple of {size}")
            out.extend(v[0] for v in struct.iter_unpack(fmt, data))
        else:
            raise WireFormatError(f"field {number} has wire type {wire}; expected packed numbers")
    return out
