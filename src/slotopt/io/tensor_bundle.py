"""TensorFlow's checkpoint container, the TensorBundle, read from its specification (no TensorFlow).

A checkpoint with prefix ``P`` is ``P.index`` and the data shards ``P.data-00000-of-0000N``. The index is a
LevelDB-format sorted table (data blocks of prefix-compressed keys with restart points, an index block of block
handles, a 48-byte footer ending in a magic number; every block followed by its compression type and masked
CRC-32C) mapping each tensor's key to a serialized ``BundleEntryProto`` (dtype, shape, shard, offset, size,
masked CRC-32C of the bytes); the empty key holds the ``BundleHeaderProto`` (number of shards, endianness,
format version). A tensor's bytes are ``size`` bytes at ``offset`` of its shard, in C order.

Everything read is checked before it is used: block handles and entries against the file sizes, every CRC,
every varint, the byte count of a tensor against its dtype and shape, keys as strict UTF-8 (a key that is not
is refused, never guessed), no two entries sharing bytes of a shard (one tensor read under many names would
allocate it many times), at most :data:`MAX_DIMS` dimensions, and the index and data files inside the
checkpoint's directory (a symbolic link leading out of it is refused). A malformed checkpoint raises
:class:`TFCheckpointError` naming the file and the entry; nothing is allocated beyond what the files hold.

A tensor is read once, straight into its torch tensor (``readinto`` its bytes, in chunks, each chunk's CRC-32C
computed as it arrives, while it is in cache), then byte-swapped in place when the file is big-endian.

Example:
    >>> from slotopt.io.tensor_bundle import TensorBundle
    >>> bundle = TensorBundle("tests/data/migration/m_tf1_saver_adam/model.ckpt-5")
    >>> bundle.entries["layer1/w"].shape, bundle.entries["layer1/w"].dtype
    ((8, 16), 'float32')
    >>> bundle.read("global_step").item()
    5
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

import numpy as np
import torch

from . import protowire as pw
from .crc32c import crc32c, crc32c_extend, unmask
from .errors import CheckpointFormatError

__all__ = ["TFCheckpointError", "BundleEntry", "TensorBundle", "MetadataBundle", "DTYPES", "shard_path", "string_lengths",
           "MAX_DIMS", "inside_directory"]

_TABLE_MAGIC = 0xDB4775248B80FB57
_FOOTER_SIZE = 48
_BLOCK_TRAILER = 5  # compression type byte + masked CRC-32C
_NO_COMPRESSION, _SNAPPY = 0, 1
_MAX_SHARDS = 1 << 20
_FORMAT_VERSION = 1  # kTensorBundleVersion: the newest format this reader knows
#: The most dimensions an entry may have (torch's limit; TensorFlow allows 254).
MAX_DIMS = 64
_CHUNK = 1 << 22  # bytes read (and checksummed while in cache) at a time

#: TensorFlow ``DataType`` enum value → (name, numpy dtype of the stored bytes (little-endian), torch dtype).
#: bfloat16 is read as its 16 bits and reinterpreted by torch, since numpy has no bfloat16.
DTYPES: dict[int, tuple[str, str, torch.dtype]] = {
    1: ("float32", "<f4", torch.float32),
    2: ("float64", "<f8", torch.float64),
    3: ("int32", "<i4", torch.int32),
    4: ("uint8", "<u1", torch.uint8),
    5: ("int16", "<i2", torch.int16),
    6: ("int8", "<i1", torch.int8),
    8: ("complex64", "<c8", torch.complex64),
    9: ("int64", "<i8", torch.int64),
    10: ("bool", "<u1", torch.bool),
    14: ("bfloat16", "<i2", torch.bfloat16),
    17: ("uint16", "<u2", torch.uint16),
    18: ("complex128", "<c16", torch.complex128),
    19: ("float16", "<f2", torch.float16),
    22: ("uint32", "<u4", torch.uint32),
    23: ("uint64", "<u8", torch.uint64),
}
_STRING = 7
_OTHER_DTYPES = {0: "invalid", 7: "string", 11: "qint8", 12: "quint8", 13: "qint32", 15: "qint16", 16: "quint16",
                 20: "resource", 21: "variant"}


class TFCheckpointError(CheckpointFormatError):
    """A TensorFlow checkpoint is malformed, truncated, corrupt or of a kind slotopt cannot read: the readers' one
    error type (:class:`~slotopt.io.errors.CheckpointFormatError`, a ``ValueError``) for TensorFlow files. The
    message starts with the file at fault and names the entry where there is one; ``path`` is that file."""

    def __init__(self, message: str, path: Optional[str] = None, entry: Optional[str] = None) -> None:
        ValueError.__init__(self, message)
        self.path = path if path is not None else message.split(": ", 1)[0]
        self.entry = entry
        self.reason = message

    def __reduce__(self):  # pickles with its arguments
        return (type(self), (self.reason, self.path, self.entry))


@dataclass(frozen=True)
class BundleEntry:
    """One tensor of a bundle, as its ``BundleEntryProto`` describes it.

    ``dtype`` is TensorFlow's name (``"float32"``, ``"bfloat16"``, ``"string"``...); ``crc32c`` is the stored
    (masked) checksum; ``slices`` is non-empty for a partitioned variable (``(start, length)`` per dimension,
    length ``-1`` for the whole dimension), which this reader lists but does not read.
    """

    key: str
    dtype: str
    dtype_code: int
    shape: tuple[int, ...]
    shard_id: int
    offset: int
    size: int
    crc32c: int
    slices: tuple[tuple[tuple[int, int], ...], ...] = ()


def shard_path(prefix: str, shard: int, num_shards: int) -> str:
    return f"{prefix}.data-{shard:05d}-of-{num_shards:05d}"


def inside_directory(path: str, prefix: str) -> None:
    """Refuses ``path`` (a file of the checkpoint ``prefix``) when it resolves outside the prefix's directory: a
    symbolic link may not make the reader read another file of the machine."""
    directory = os.path.realpath(os.path.dirname(os.path.abspath(prefix)))
    real = os.path.realpath(path)
    if not real.startswith(directory.rstrip(os.sep) + os.sep):
        raise TFCheckpointError(f"{path}: resolves to {real}, outside the checkpoint's directory {directory}: a "
                                "symbolic link is not followed out of it", path)


# ------------------------------------------------------------------------------------------------ sorted table
def _snappy_decompress(data: bytes, where: str) -> bytes:
    """Snappy's raw format (a varint length, then literals and back-references); the output is bounded by the
    declared length, itself bounded by the largest expansion a valid stream can have."""
    try:
        size, pos = pw.read_varint(data, 0)
    except pw.WireFormatError as err:
        raise TFCheckpointError(f"{where}: bad snappy length: {err}") from None
    if size > 22 * len(data) + 64:  # a 3-byte copy tag yields at most 64 bytes
        raise TFCheckpointError(f"{where}: snappy block declares {size} bytes from {len(data)}")
    out = bytearray()
    end = len(data)
    while pos < end:
        tag = data[pos]
        pos += 1
        kind = tag & 3
        if kind == 0:
            length = tag >> 2
            if length >= 60:
                extra = length - 59
                if pos + extra > end:
                    raise TFCheckpointError(f"{where}: truncated snappy literal length")
                length = int.from_bytes(data[pos:pos + extra], "little")
                pos += extra
            length += 1
            if pos + length > end or len(out) + length > size:
                raise TFCheckpointError(f"{where}: snappy literal past the end")
            out += data[pos:pos + length]
            pos += length
            continue
        if kind == 1:
            if pos + 1 > end:
                raise TFCheckpointError(f"{where}: truncated snappy copy")
            length, offset = ((tag >> 2) & 7) + 4, ((tag >> 5) << 8) | data[pos]
            pos += 1
        else:
            width = 2 if kind == 2 else 4
            if pos + width > end:
                raise TFCheckpointError(f"{where}: truncated snappy copy")
            length, offset = (tag >> 2) + 1, int.from_bytes(data[pos:pos + width], "little")
            pos += width
        if offset == 0 or offset > len(out) or len(out) + length > size:
            raise TFCheckpointError(f"{where}: snappy copy out of range (offset {offset}, length {length})")
        start = len(out) - offset
        for i in range(length):  # the source may overlap what is being written (a repeated pattern)
            out.append(out[start + i])
    if len(out) != size:
        raise TFCheckpointError(f"{where}: snappy block holds {len(out)} bytes; it declares {size}")
    return bytes(out)


def _block(data: bytes, handle: bytes, where: str) -> bytes:
    """The contents of the block ``handle`` points at (offset and size varints), checked and decompressed."""
    try:
        offset, pos = pw.read_varint(handle, 0)
        size, pos = pw.read_varint(handle, pos)
    except pw.WireFormatError as err:
        raise TFCheckpointError(f"{where}: bad block handle: {err}") from None
    limit = len(data) - _FOOTER_SIZE
    if offset + size + _BLOCK_TRAILER > limit:
        raise TFCheckpointError(f"{where}: block [{offset}, {offset + size}) lies past the table's data ({limit} bytes)")
    contents = data[offset:offset + size]
    kind = data[offset + size]
    stored = int.from_bytes(data[offset + size + 1:offset + size + 5], "little")
    if crc32c(data[offset:offset + size + 1]) != unmask(stored):
        raise TFCheckpointError(f"{where}: block at byte {offset} fails its CRC-32C check (the file is corrupt)")
    if kind == _NO_COMPRESSION:
        return contents
    if kind == _SNAPPY:
        return _snappy_decompress(contents, where)
    raise TFCheckpointError(f"{where}: block at byte {offset} has unknown compression type {kind}")


def _block_entries(block: bytes, where: str) -> list[tuple[bytes, bytes]]:
    if len(block) < 4:
        raise TFCheckpointError(f"{where}: block of {len(block)} bytes has no restart count")
    restarts = int.from_bytes(block[-4:], "little")
    limit = len(block) - 4 - 4 * restarts
    if restarts == 0 or limit < 0:
        raise TFCheckpointError(f"{where}: block declares {restarts} restart points in {len(block)} bytes")
    entries: list[tuple[bytes, bytes]] = []
    key, pos = b"", 0
    try:
        while pos < limit:
            shared, pos = pw.read_varint(block, pos)
            unshared, pos = pw.read_varint(block, pos)
            value_size, pos = pw.read_varint(block, pos)
            if shared > len(key) or pos + unshared + value_size > limit:
                raise TFCheckpointError(f"{where}: block entry at byte {pos} runs past its block")
            key = key[:shared] + block[pos:pos + unshared]
            pos += unshared
            entries.append((key, block[pos:pos + value_size]))
            pos += value_size
    except pw.WireFormatError as err:
        raise TFCheckpointError(f"{where}: bad block entry: {err}") from None
    return entries


def read_table(data: bytes, where: str) -> list[tuple[bytes, bytes]]:
    """Every ``(key, value)`` of a LevelDB-format table held in ``data``, in key order."""
    if len(data) < _FOOTER_SIZE:
        raise TFCheckpointError(f"{where}: {len(data)} bytes is too short for a table (footer of {_FOOTER_SIZE})")
    footer = data[-_FOOTER_SIZE:]
    if int.from_bytes(footer[-8:], "little") != _TABLE_MAGIC:
        raise TFCheckpointError(f"{where}: not a TensorFlow checkpoint index (bad table magic number)")
    try:
        _, pos = pw.read_varint(footer, 0)  # metaindex handle: TensorFlow writes an empty metaindex
        _, pos = pw.read_varint(footer, pos)
    except pw.WireFormatError as err:
        raise TFCheckpointError(f"{where}: bad table footer: {err}") from None
    index = _block_entries(_block(data, footer[pos:40], f"{where} (index block)"), f"{where} (index block)")
    out: list[tuple[bytes, bytes]] = []
    for _, handle in index:
        out.extend(_block_entries(_block(data, handle, where), where))
    for (a, _), (b, _) in zip(out, out[1:]):
        if not a < b:
            raise TFCheckpointError(f"{where}: keys out of order ({a!r} then {b!r}): the index is corrupt")
    return out


# ------------------------------------------------------------------------------------------------ the bundle
def _parse_entry(key: str, value: bytes, where: str) -> BundleEntry:
    try:
        fields = pw.decode(value)
        code = pw.get_int(fields, 1, bits=32)
        shape_fields = pw.get_message(fields, 2)
        if pw.get_bool(shape_fields, 3):
            raise TFCheckpointError(f"{where}: entry {key!r} has a shape of unknown rank")
        shape = tuple(pw.get_int(d, 1) for d in pw.get_messages(shape_fields, 2))
        slices = tuple(
            tuple((pw.get_int(e, 1), pw.get_int(e, 2, default=-1)) for e in pw.get_messages(s, 1))
            for s in pw.get_messages(fields, 7))
        entry = BundleEntry(
            key=key, dtype=DTYPES[code][0] if code in DTYPES else _OTHER_DTYPES.get(code, f"dtype {code}"),
            dtype_code=code, shape=shape, shard_id=pw.get_int(fields, 3, bits=32), offset=pw.get_int(fields, 4),
            size=pw.get_int(fields, 5), crc32c=pw.get_fixed32(fields, 6), slices=slices)
    except pw.WireFormatError as err:
        raise TFCheckpointError(f"{where}: entry {key!r} is not a valid BundleEntryProto: {err}") from None
    if len(shape) > MAX_DIMS:
        raise TFCheckpointError(f"{where}: entry {key!r} has {len(shape)} dimensions; torch (and so slotopt) holds "
                                f"at most {MAX_DIMS}", where, key)
    if any(d < 0 for d in shape):
        raise TFCheckpointError(f"{where}: entry {key!r} has an invalid shape {shape}", where, key)
    if entry.offset < 0 or entry.size < 0 or entry.shard_id < 0:
        raise TFCheckpointError(f"{where}: entry {key!r} has a negative shard, offset or size")
    return entry


class TensorBundle:
    """A TensorBundle checkpoint opened by its prefix: ``entries`` (key → :class:`BundleEntry`, the header
    excluded) and :meth:`read`. The index is read and checked at once; tensors are read on demand, each checked
    against its CRC-32C."""

    def __init__(self, prefix: Union[str, Path]) -> None:
        self.prefix = str(prefix)
        self.index_path = f"{self.prefix}.index"
        if not os.path.isfile(self.index_path):
            raise FileNotFoundError(f"No TensorFlow checkpoint at prefix {self.prefix!r}: {self.index_path} is not a file.")
        inside_directory(self.index_path, self.prefix)
        with open(self.index_path, "rb") as f:
            data = f.read()
        table = read_table(data, self.index_path)
        if not table or table[0][0] != b"":
            raise TFCheckpointError(f"{self.index_path}: no header entry (the empty key)")
        try:
            header = pw.decode(table[0][1])
            self.num_shards = pw.get_int(header, 1, bits=32)
            self.big_endian = pw.get_int(header, 2, bits=32) == 1
            version = pw.get_message(header, 3)
            min_consumer = pw.get_int(version, 2, bits=32)
            bad_consumers = pw.get_packed_ints(version, 3)
        except pw.WireFormatError as err:
            raise TFCheckpointError(f"{self.index_path}: header entry is not a BundleHeaderProto: {err}") from None
        if not 1 <= self.num_shards <= _MAX_SHARDS:
            raise TFCheckpointError(f"{self.index_path}: header declares {self.num_shards} data shards")
        if min_consumer > _FORMAT_VERSION or _FORMAT_VERSION in bad_consumers:
            raise TFCheckpointError(
                f"{self.index_path}: written in bundle format needing a reader of version {min_consumer}; this reader "
                f"is version {_FORMAT_VERSION}")
        self.entries: dict[str, BundleEntry] = {}
        for raw_key, value in table[1:]:
            try:
                key = raw_key.decode("utf-8")
            except UnicodeDecodeError:
                if not raw_key.startswith(b"\x00"):
                    raise TFCheckpointError(
                        f"{self.index_path}: key {raw_key[:64]!r} is not UTF-8 text: refused (TensorFlow names "
                        "variables in UTF-8; a guessed decoding could give another entry's name)",
                        self.index_path, repr(raw_key[:64])) from None
                # A partitioned variable's slice key (binary OrderedCode after a NUL): kept apart by its
                # surrogate escapes, which no strictly decoded name holds.
                key = raw_key.decode("utf-8", "surrogateescape")
            self.entries[key] = _parse_entry(key, value, self.index_path)
        self._check_extents()
        # What the reader may hold of this file: its data bytes, each entry once (issue 50 item 2). An entry read
        # again (one object-graph node behind many references, in one optimizer or in several) counts again, so
        # no structure of references makes a read allocate more than the file holds.
        self._budget = sum(e.size for e in self.entries.values() if not e.slices)
        self._held = 0

    def _check_extents(self) -> None:
        sizes: dict[int, int] = {}
        spans: list[tuple[int, int, int, str]] = []
        for entry in self.entries.values():
            if entry.slices:
                continue  # a partitioned variable's full entry: offset and size are unused
            if entry.shard_id >= self.num_shards:
                raise TFCheckpointError(
                    f"{self.index_path}: entry {entry.key!r} is in shard {entry.shard_id}; the bundle has "
                    f"{self.num_shards}")
            if entry.shard_id not in sizes:
                path = shard_path(self.prefix, entry.shard_id, self.num_shards)
                if not os.path.isfile(path):
                    raise TFCheckpointError(f"{path}: data shard missing (needed by entry {entry.key!r})")
                inside_directory(path, self.prefix)
                sizes[entry.shard_id] = os.path.getsize(path)
            if entry.offset + entry.size > sizes[entry.shard_id]:
                raise TFCheckpointError(
                    f"{shard_path(self.prefix, entry.shard_id, self.num_shards)}: entry {entry.key!r} declares bytes "
                    f"[{entry.offset}, {entry.offset + entry.size}) past the end of the shard "
                    f"({sizes[entry.shard_id]} bytes)")
            if entry.dtype_code in DTYPES:
                itemsize = np.dtype(DTYPES[entry.dtype_code][1]).itemsize
                if math.prod(entry.shape) * itemsize != entry.size:
                    raise TFCheckpointError(
                        f"{self.index_path}: entry {entry.key!r} ({entry.dtype}, shape {entry.shape}) declares "
                        f"{entry.size} bytes; it needs {math.prod(entry.shape) * itemsize}")
            if entry.size:
                spans.append((entry.shard_id, entry.offset, entry.offset + entry.size, entry.key))
        spans.sort()
        for (shard, _, end, first), (next_shard, start, _, second) in zip(spans, spans[1:]):
            if shard == next_shard and start < end:
                raise TFCheckpointError(
                    f"{shard_path(self.prefix, shard, self.num_shards)}: entries {first!r} and {second!r} share bytes "
                    f"[{start}, {end}) of the shard: refused (TensorFlow writes each tensor once; a tensor read "
                    "under many names would make the reader allocate it many times)", self.index_path, second)

    def keys(self) -> list[str]:
        return list(self.entries)

    def _entry(self, key: str) -> BundleEntry:
        if key not in self.entries:
            raise KeyError(f"{self.prefix} has no tensor {key!r}")
        entry = self.entries[key]
        if entry.slices:
            raise TFCheckpointError(
                f"{self.index_path}: entry {key!r} is a partitioned variable stored in {len(entry.slices)} slices; "
                "slotopt does not read partitioned variables (restore it in TensorFlow and save it unpartitioned)")
        return entry

    def _spend(self, entry: BundleEntry) -> None:
        self._held += entry.size
        if self._held > self._budget:
            raise TFCheckpointError(
                f"{self.index_path}: entry {entry.key!r} is read again past the file's {self._budget} data bytes (the "
                f"reader would hold {self._held}): an entry reached through many references is refused, so a read "
                "never allocates more than the file holds", self.index_path, entry.key)

    def _bytes(self, entry: BundleEntry) -> bytes:
        self._spend(entry)
        path = shard_path(self.prefix, entry.shard_id, self.num_shards)
        with open(path, "rb") as f:
            f.seek(entry.offset)
            data = f.read(entry.size)
        if len(data) != entry.size:
            raise TFCheckpointError(f"{path}: entry {entry.key!r} is truncated ({len(data)} of {entry.size} bytes)")
        if entry.dtype_code != _STRING and crc32c(data) != unmask(entry.crc32c):
            raise TFCheckpointError(f"{path}: entry {entry.key!r} fails its CRC-32C check (the data is corrupt)")
        return data

    def _read_into(self, entry: BundleEntry, out: torch.Tensor) -> None:
        """The entry's bytes into ``out`` (a new contiguous CPU tensor of exactly ``entry.size`` bytes), read in
        chunks straight into its storage, each chunk checksummed as it arrives."""
        self._spend(entry)
        path = shard_path(self.prefix, entry.shard_id, self.num_shards)
        view = memoryview(out.reshape(-1).view(torch.uint8).numpy()) if entry.size else memoryview(b"")
        crc, done = 0, 0
        with open(path, "rb", buffering=0) as f:
            f.seek(entry.offset)
            while done < entry.size:
                got = f.readinto(view[done:done + _CHUNK])
                if not got:
                    raise TFCheckpointError(f"{path}: entry {entry.key!r} is truncated ({done} of {entry.size} bytes)")
                crc = crc32c_extend(crc, view[done:done + got])
                done += got
        if crc != unmask(entry.crc32c):
            raise TFCheckpointError(f"{path}: entry {entry.key!r} fails its CRC-32C check (the data is corrupt)")

    def read(self, key: str) -> torch.Tensor:
        """The tensor ``key`` as a new torch tensor of its stored dtype and shape (its bytes read once, into it)."""
        entry = self._entry(key)
        if entry.dtype_code not in DTYPES:
            raise TFCheckpointError(
                f"{self.index_path}: entry {key!r} has dtype {entry.dtype}, which is not a numeric variable dtype "
                f"(supported: {sorted(name for name, _, _ in DTYPES.values())})")
        _, stored, dtype = DTYPES[entry.dtype_code]
        out = torch.empty(entry.shape, dtype=dtype)
        raw = out.view(torch.uint8) if dtype == torch.bool else out
        self._read_into(entry, raw)
        if dtype == torch.bool:
            if raw.numel() and int(raw.max()) > 1:
                raise TFCheckpointError(f"{self.index_path}: entry {key!r} holds bool bytes other than 0 and 1")
            return out
        if self.big_endian and np.dtype(stored).itemsize > 1:  # swapped in place (complex: each half)
            width = np.dtype(stored).itemsize // (2 if dtype.is_complex else 1)
            flat = raw.reshape(-1).view(torch.uint8).numpy().view(f"u{width}")
            flat.byteswap(inplace=True)
        return out

    def read_strings(self, key: str) -> list[bytes]:
        """A string tensor's elements (flattened), its length checksum and CRC-32C verified."""
        entry = self._entry(key)
        if entry.dtype_code != _STRING:
            raise TFCheckpointError(f"{self.index_path}: entry {key!r} is {entry.dtype}, not a string tensor")
        data = self._bytes(entry)
        where = f"{self.index_path}: string entry {key!r}"
        count = math.prod(entry.shape)
        if count > len(data):  # every element takes at least one length byte
            raise TFCheckpointError(f"{where} declares {count} elements in {len(data)} bytes")
        lengths, pos, length_bytes = string_lengths(data, count, where)
        if pos + 4 > len(data) or pos + 4 + sum(lengths) != len(data):
            raise TFCheckpointError(f"{where}: lengths {lengths[:8]} do not fit its {len(data)} bytes")
        stored_length_crc = data[pos:pos + 4]
        if unmask(int.from_bytes(stored_length_crc, "little")) != crc32c(length_bytes):
            raise TFCheckpointError(f"{where} fails its length checksum (the data is corrupt)")
        if crc32c(length_bytes + stored_length_crc + data[pos + 4:]) != unmask(entry.crc32c):
            raise TFCheckpointError(f"{where} fails its CRC-32C check (the data is corrupt)")
        out, pos = [], pos + 4
        for length in lengths:
            out.append(data[pos:pos + length])
            pos += length
        return out


class MetadataBundle(TensorBundle):
    """A :class:`TensorBundle` for listing (``slotopt inspect``): the index is read and checked as always, but a
    tensor of more than one element is not read: :meth:`read` gives an empty tensor of its shape and dtype on the
    ``meta`` device. Scalars (iteration counts, beta powers, learning rates) are read and checked."""

    def read(self, key: str) -> torch.Tensor:
        entry = self._entry(key)
        if entry.dtype_code in DTYPES and math.prod(entry.shape) > 1:
            return torch.empty(entry.shape, dtype=DTYPES[entry.dtype_code][2], device="meta")
        return super().read(key)


def string_lengths(data: bytes, count: int, where: str) -> tuple[list[int], int, bytes]:
    """The ``count`` varint lengths a string entry's bytes start with, where its length checksum starts, and the
    bytes its checksums cover for them (each length as a little-endian uint32, uint64 past 2**32: TensorFlow's
    ``WriteStringTensor``); ``TFCheckpointError`` naming ``where`` for a bad varint. The reader's checks and the
    writer's verification (``bundle_writer.py``) read a string entry through this one function."""
    lengths, pos = [], 0
    try:
        for _ in range(count):
            length, pos = pw.read_varint(data, pos)
            lengths.append(length)
    except pw.WireFormatError as err:
        raise TFCheckpointError(f"{where}: bad length: {err}") from None
    return lengths, pos, b"".join(n.to_bytes(4 if n <= 0xFFFFFFFF else 8, "little") for n in lengths)
