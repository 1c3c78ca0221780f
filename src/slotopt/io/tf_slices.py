"""TF1 partitioned variables (``fixed_size_partitioner``...): one variable saved as several slices, read whole.

A ``Saver`` saves a partitioned variable (and each of its optimizer slots) under its full name with the list of
its slices, and each slice's bytes under a binary key: TensorFlow's ``EncodeTensorNameSlice``, an OrderedCode of
``(0, name, rank, start_0, length_0, ...)``. The key of each slice is computed from the entry (never guessed from
the keys present), each slice is read (CRC-checked) and copied into its place, and the slices must tile the
variable exactly: a hole or an overlap refuses the file.
"""

from __future__ import annotations

import torch

from .tensor_bundle import BundleEntry, TensorBundle, TFCheckpointError

__all__ = ["slice_key", "read_partitioned"]


def _num_increasing(value: int) -> bytes:
    body = value.to_bytes((value.bit_length() + 7) // 8, "big") if value else b""
    return bytes([len(body)]) + body


def _signed_num_increasing(value: int) -> bytes:
    magnitude = ~value if value < 0 else value
    length = 1
    while magnitude >= 1 << (7 * length - 1):
        length += 1
        if length > 7:
            raise ValueError(f"slice bound {value} is too large")
    raw = bytearray((value & ((1 << (8 * length)) - 1)).to_bytes(length, "big"))
    raw[0] ^= (0xFF << (8 - length)) & 0xFF  # the length as leading ones (of the sign-flipped first byte)
    return bytes(raw)


def _string(text: str) -> bytes:
    return text.encode("utf-8").replace(b"\xff", b"\xff\x00").replace(b"\x00", b"\x00\xff") + b"\x00\x01"


def slice_key(name: str, extents: tuple[tuple[int, int], ...]) -> str:
    """The bundle key of slice ``extents`` (``(start, length)`` per dimension, length -1 for all) of ``name``,
    as TensorFlow's ``checkpoint::EncodeTensorNameSlice`` writes it (the index's keys are read as UTF-8 with
    surrogate escapes)."""
    out = _num_increasing(0) + _string(name) + _num_increasing(len(extents))
    for start, length in extents:
        out += _signed_num_increasing(start) + _signed_num_increasing(length)
    return out.decode("utf-8", "surrogateescape")


def read_partitioned(bundle: TensorBundle, entry: BundleEntry) -> torch.Tensor:
    """The whole variable of partitioned ``entry``, from its slices."""
    where = bundle.index_path
    from .tensor_bundle import DTYPES  # (the dtype table; the entry says its code)

    if entry.dtype_code not in DTYPES:
        raise TFCheckpointError(f"{where}: partitioned entry {entry.key!r} has dtype {entry.dtype}", where, entry.key)
    if any(len(s) != len(entry.shape) for s in entry.slices):
        raise TFCheckpointError(f"{where}: a slice of {entry.key!r} does not have its rank {len(entry.shape)}",
                                where, entry.key)
    metadata = type(bundle).__name__ == "MetadataBundle"
    out = torch.empty(entry.shape, dtype=DTYPES[entry.dtype_code][2], device="meta" if metadata else "cpu")
    covered = torch.zeros(entry.shape, dtype=torch.bool, device="meta" if metadata else "cpu")
    for extents in entry.slices:
        key = slice_key(entry.key, extents)
        index = []
        for (start, length), size in zip(extents, entry.shape):
            stop = size if length == -1 else start + length
            if not 0 <= start <= stop <= size:
                raise TFCheckpointError(f"{where}: slice {extents} of {entry.key!r} lies outside its shape "
                                        f"{entry.shape}", where, entry.key)
            index.append(slice(start, stop))
        part_entry = bundle.entries.get(key)
        shape = tuple(s.stop - s.start for s in index)
        if part_entry is None or part_entry.slices or part_entry.shape != shape or \
                part_entry.dtype_code != entry.dtype_code:
            raise TFCheckpointError(f"{where}: slice {extents} of partitioned {entry.key!r} has no entry of shape "
                                    f"{shape} and dtype {entry.dtype}", where, entry.key)
        if metadata:
            continue
        region = covered[tuple(index)]
        if bool(region.any()):
            raise TFCheckpointError(f"{where}: slices of {entry.key!r} overlap", where, entry.key)
        out[tuple(index)] = bundle.read(key)
        covered[tuple(index)] = True
    if not metadata and not bool(covered.all()):
        raise TFCheckpointError(f"{where}: the slices of {entry.key!r} do not cover its shape {entry.shape}",
                                where, entry.key)
    return out
