"""TensorFlow's checkpoint container, the TensorBundle, written from its specification (no TensorFlow): the way
back of ``tensor_bundle.py``.

:func:`write_bundle` writes one data shard and its index. Each entry is either a torch tensor, streamed to the
data file from its own memory in chunks of at most 4 MiB (a non-contiguous view, such as a Dense kernel seen in
Keras layout through a transposed torch weight, is made contiguous one block of rows at a time: the model is never
copied whole), its CRC-32C computed on each chunk as it is written, or an entry of a bundle read earlier, whose
bytes are copied as they are, chunk by chunk, checked against the CRC-32C the original index gives (a variant
``ITERATOR_STATE``, a string, the object graph: written back exactly as read). :func:`verify_bundle` reads the
written files back and checks every block and entry checksum before a writer renames them into place.

The index is a LevelDB-format table (prefix-compressed keys with restart points every 16 entries, 4 KiB data
blocks, no compression, an index block of shortest separators, the 48-byte footer), as TensorFlow's
``BundleWriter`` writes it.

Example:
    >>> import os, tempfile, torch
    >>> from slotopt.io.bundle_writer import write_bundle
    >>> from slotopt.io.tensor_bundle import TensorBundle
    >>> prefix = os.path.join(tempfile.mkdtemp(), "ckpt-1")
    >>> with open(prefix + ".data-00000-of-00001", "wb") as data, open(prefix + ".index", "wb") as index:
    ...     _ = write_bundle(index, data, [("w", torch.arange(6.0).view(2, 3).T)])
    >>> TensorBundle(prefix).read("w").tolist()
    [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import BinaryIO, Union

import torch

from . import protowire as pw
from .crc32c import crc32c, crc32c_extend, mask, unmask
from .tensor_bundle import (
    _STRING,
    DTYPES,
    BundleEntry,
    TensorBundle,
    TFCheckpointError,
    _parse_entry,
    read_table,
    shard_path,
    string_lengths,
)

__all__ = ["write_bundle", "verify_bundle", "Source", "CODES"]

#: torch dtype → TensorFlow ``DataType`` code (the inverse of the reader's table).
CODES: dict[torch.dtype, int] = {dtype: code for code, (_, _, dtype) in DTYPES.items()}
_CHUNK = 1 << 22
_BLOCK_SIZE = 4096
_RESTART_INTERVAL = 16
_MAGIC = 0xDB4775248B80FB57
_VARIANT = 21

#: What an entry is written from: a tensor (its values), or ``(bundle, entry)`` of a bundle read before (its bytes).
Source = Union[torch.Tensor, tuple[TensorBundle, BundleEntry]]


# ------------------------------------------------------------------------------------------------ protobuf
def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _f_varint(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def _f_bytes(number: int, value: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(value)) + value


def _entry_proto(code: int, shape: Sequence[int], offset: int, size: int, crc: int) -> bytes:
    # BundleEntryProto: dtype 1, shape 2 (TensorShapeProto: dim 2 {size 1}), shard_id 3 (always 0), offset 4,
    # size 5, crc32c 6 (fixed32, masked).
    shape_proto = b"".join(_f_bytes(2, _f_varint(1, d) if d else b"") for d in shape)
    out = _f_varint(1, code) + _f_bytes(2, shape_proto)
    if offset:
        out += _f_varint(4, offset)
    return out + _f_varint(5, size) + _varint(6 << 3 | 5) + mask(crc).to_bytes(4, "little")


_HEADER = _f_varint(1, 1) + _f_bytes(3, _f_varint(1, 1))  # one shard, little-endian, version {producer: 1}


# ------------------------------------------------------------------------------------------------ the table
class _Table:
    """LevelDB's TableBuilder, for keys added in increasing order."""

    def __init__(self, out: BinaryIO) -> None:
        self._out, self._offset = out, 0
        self._index: list[tuple[bytes, bytes]] = []
        self._block, self._restarts, self._count, self._last = bytearray(), [0], 0, b""
        self._pending: tuple[bytes, bytes] | None = None  # (last key of the block just cut, its handle)

    def _emit(self, contents: bytes) -> bytes:
        trailer = b"\x00" + mask(crc32c(contents + b"\x00")).to_bytes(4, "little")  # type 0: no compression
        self._out.write(contents)
        self._out.write(trailer)
        handle = _varint(self._offset) + _varint(len(contents))
        self._offset += len(contents) + len(trailer)
        return handle

    @staticmethod
    def _finish(block: bytearray, restarts: list[int]) -> bytes:
        return bytes(block) + b"".join(r.to_bytes(4, "little") for r in restarts) + len(restarts).to_bytes(4, "little")

    def add(self, key: bytes, value: bytes) -> None:
        if self._pending is not None:
            self._index.append((_separator(self._pending[0], key), self._pending[1]))
            self._pending = None
        shared = 0
        if self._count % _RESTART_INTERVAL == 0:
            if self._count:
                self._restarts.append(len(self._block))
        else:
            limit = min(len(key), len(self._last))
            while shared < limit and key[shared] == self._last[shared]:
                shared += 1
        self._block += _varint(shared) + _varint(len(key) - shared) + _varint(len(value)) + key[shared:] + value
        self._count += 1
        self._last = key
        if len(self._block) + 4 * len(self._restarts) + 4 >= _BLOCK_SIZE:
            self._cut()

    def _cut(self) -> None:
        if not self._count:
            return
        self._pending = (self._last, self._emit(self._finish(self._block, self._restarts)))
        self._block, self._restarts, self._count = bytearray(), [0], 0

    def close(self) -> None:
        self._cut()
        if self._pending is not None:
            self._index.append((_successor(self._pending[0]), self._pending[1]))
        meta = self._emit(self._finish(bytearray(), [0]))
        block = bytearray()
        restarts = []
        for key, handle in self._index:  # restart interval 1, as LevelDB's index block
            restarts.append(len(block))
            block += _varint(0) + _varint(len(key)) + _varint(len(handle)) + key + handle
        index = self._emit(self._finish(block, restarts or [0]))
        self._out.write((meta + index).ljust(40, b"\x00") + _MAGIC.to_bytes(8, "little"))


def _separator(start: bytes, limit: bytes) -> bytes:
    n = 0
    while n < min(len(start), len(limit)) and start[n] == limit[n]:
        n += 1
    if n < min(len(start), len(limit)) and start[n] < 0xFF and start[n] + 1 < limit[n]:
        return start[:n] + bytes([start[n] + 1])
    return start


def _successor(key: bytes) -> bytes:
    for i, byte in enumerate(key):
        if byte != 0xFF:
            return key[:i] + bytes([byte + 1])
    return key


# ------------------------------------------------------------------------------------------------ the data
def _pieces(tensor: torch.Tensor) -> Iterator[torch.Tensor]:
    """``tensor``'s elements in C order as contiguous CPU tensors: itself when it is one, else blocks of rows
    made contiguous one at a time (each at most about a chunk, so a view is never copied whole)."""
    if tensor.device.type == "cpu" and tensor.is_contiguous():
        yield tensor
        return
    if tensor.dim() == 0 or tensor.numel() * tensor.element_size() <= _CHUNK:
        yield tensor.contiguous().cpu()
        return
    row = tensor[0].numel() * tensor.element_size()
    if row > _CHUNK:
        for i in range(tensor.shape[0]):
            yield from _pieces(tensor[i])
        return
    step = max(1, _CHUNK // max(row, 1))
    for i in range(0, tensor.shape[0], step):
        yield tensor[i:i + step].contiguous().cpu()


def _write_tensor(out: BinaryIO, tensor: torch.Tensor) -> tuple[int, int]:
    """Streams ``tensor``'s bytes (little-endian, C order) to ``out``: (bytes written, CRC-32C)."""
    crc, size = 0, 0
    if tensor.numel() == 0:
        return 0, 0
    for piece in _pieces(tensor.detach()):
        flat = piece.reshape(-1)
        if flat.stride(0) != 1:  # "contiguous" with a stride on a dimension of size 1: one element, copied
            flat = flat.clone(memory_format=torch.contiguous_format)
        raw = memoryview(flat.view(torch.uint8).numpy())
        for start in range(0, len(raw), _CHUNK):
            chunk = raw[start:start + _CHUNK]
            out.write(chunk)
            crc = crc32c_extend(crc, chunk)
            size += len(chunk)
    return size, crc


def _copy_entry(out: BinaryIO, bundle: TensorBundle, entry: BundleEntry) -> None:
    """Copies an entry's bytes from ``bundle`` to ``out`` in chunks; a numeric entry's CRC-32C is checked on the
    way (a string's or a variant's covers its decoded lengths: :func:`verify_bundle` checks it in the written
    file)."""
    path = shard_path(bundle.prefix, entry.shard_id, bundle.num_shards)
    crc, done = 0, 0
    with open(path, "rb") as f:
        f.seek(entry.offset)
        while done < entry.size:
            chunk = f.read(min(_CHUNK, entry.size - done))
            if not chunk:
                raise TFCheckpointError(f"{path}: entry {entry.key!r} is truncated ({done} of {entry.size} bytes)",
                                        path, entry.key)
            out.write(chunk)
            crc = crc32c_extend(crc, chunk)
            done += len(chunk)
    if entry.dtype_code in DTYPES and crc != unmask(entry.crc32c):
        raise TFCheckpointError(f"{path}: entry {entry.key!r} fails its CRC-32C check (the data is corrupt); "
                                "it is not written back", path, entry.key)


def write_bundle(index: BinaryIO, data: BinaryIO, entries: Sequence[tuple[str, Source]]) -> list[BundleEntry]:
    """Writes ``entries`` (key → tensor, or ``(bundle, entry)`` to copy) as one TensorBundle: the bytes to
    ``data`` in key order, then the index to ``index``. Returns the entries as the index describes them."""
    keys = [key for key, _ in entries]
    if len(set(keys)) != len(keys):
        raise ValueError(f"write_bundle: a key is given twice ({sorted(k for k in keys if keys.count(k) > 1)[:4]})")
    written: list[tuple[bytes, BundleEntry]] = []
    offset = 0
    for key, source in sorted(entries, key=lambda item: item[0].encode("utf-8", "surrogateescape")):
        if isinstance(source, torch.Tensor):
            if source.dtype not in CODES:
                raise ValueError(f"write_bundle: entry {key!r} has dtype {source.dtype}, which a TensorBundle of "
                                 "variables does not hold")
            size, crc = _write_tensor(data, source)
            entry = BundleEntry(key=key, dtype=DTYPES[CODES[source.dtype]][0], dtype_code=CODES[source.dtype],
                                shape=tuple(source.shape), shard_id=0, offset=offset, size=size, crc32c=mask(crc),
                                slices=())
        else:
            bundle, original = source
            _copy_entry(data, bundle, original)
            entry = BundleEntry(key=key, dtype=original.dtype, dtype_code=original.dtype_code, shape=original.shape,
                                shard_id=0, offset=offset, size=original.size, crc32c=original.crc32c, slices=())
        offset += entry.size
        written.append((key.encode("utf-8", "surrogateescape"), entry))
    table = _Table(index)
    table.add(b"", _HEADER)
    for raw_key, entry in written:
        table.add(raw_key, _entry_proto(entry.dtype_code, entry.shape, entry.offset, entry.size,
                                        unmask(entry.crc32c)))
    table.close()
    return [entry for _, entry in written]


# ------------------------------------------------------------------------------------------------ verification
def _string_crc(data: bytes, count: int, where: str) -> int:
    _, pos, length_bytes = string_lengths(data, count, where)
    return crc32c(length_bytes + data[pos:])


def _variant_crc(data: bytes, count: int, where: str) -> int:
    # Each element: varint length, a serialized VariantTensorDataProto, a 4-byte checksum; the entry's CRC-32C
    # covers the length as a little-endian uint64 instead of its varint (TensorFlow's WriteVariantTensor).
    pos, crc = 0, 0
    try:
        for _ in range(count):
            n, start = pw.read_varint(data, pos)
            if start + n + 4 > len(data):
                raise pw.WireFormatError("an element runs past the entry")
            crc = crc32c_extend(crc, n.to_bytes(8, "little"))
            crc = crc32c_extend(crc, data[start:start + n + 4])
            pos = start + n + 4
    except pw.WireFormatError as err:
        raise TFCheckpointError(f"{where}: bad variant element: {err}") from None
    return crc if pos == len(data) else -1


def verify_bundle(index_path: str, data_path: str, expected: Sequence[BundleEntry]) -> None:
    """Reads a written bundle back: its table (every block's CRC-32C), each entry as ``expected`` says, and every
    entry's bytes against its CRC-32C. Raises :class:`TFCheckpointError` on the first difference."""
    with open(index_path, "rb") as f:
        table = read_table(f.read(), index_path)
    if not table or table[0] != (b"", _HEADER):
        raise TFCheckpointError(f"{index_path}: the written index has no header entry", index_path)
    found = [_parse_entry(k.decode("utf-8", "surrogateescape"), v, index_path) for k, v in table[1:]]
    if found != list(expected):
        raise TFCheckpointError(f"{index_path}: the written index does not read back as written", index_path)
    with open(data_path, "rb", buffering=0) as f:
        for entry in found:
            f.seek(entry.offset)
            if entry.dtype_code == _STRING or entry.dtype_code not in DTYPES:
                data = f.read(entry.size)
                check = _string_crc if entry.dtype_code == _STRING else _variant_crc if \
                    entry.dtype_code == _VARIANT else (lambda d, n, w: crc32c(d))
                ok = len(data) == entry.size and check(data, _count(entry.shape), data_path) == unmask(entry.crc32c)
            else:
                crc, done = 0, 0
                while done < entry.size:
                    chunk = f.read(min(_CHUNK, entry.size - done))
                    if not chunk:
                        break
                    crc = crc32c_extend(crc, chunk)
                    done += len(chunk)
                ok = done == entry.size and crc == unmask(entry.crc32c)
            if not ok:
                raise TFCheckpointError(f"{data_path}: entry {entry.key!r} does not read back as written (a short "
                                        "write or a damaged disk): nothing is renamed into place", data_path,
                                        entry.key)


def _count(shape: Sequence[int]) -> int:
    out = 1
    for d in shape:
        out *= d
    return out

