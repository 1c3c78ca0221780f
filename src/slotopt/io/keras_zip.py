"""A ``.keras`` zip written as Keras writes it (members stored, not deflated), with the HDF5 weights member written
by h5py straight into its place in the zip: the model's bytes go to disk once, then are read back once (from the
page cache) for the member's CRC-32, which is patched into its local header. No temporary HDF5 file, no copy.

Example:
    >>> import os, tempfile, zipfile
    >>> from slotopt.io.keras_zip import StoredZip
    >>> path = os.path.join(tempfile.mkdtemp(), "a.zip")
    >>> with open(path, "w+b") as raw:
    ...     z = StoredZip(raw)
    ...     z.add("a.txt", b"hello", (1980, 1, 1, 0, 0, 0))
    ...     with z.member("b.bin", (2026, 1, 1, 0, 0, 0), 3) as f:
    ...         _ = f.write(b"xyz")
    ...     z.finish()
    >>> with zipfile.ZipFile(path) as z:
    ...     [(i.filename, z.read(i.filename)) for i in z.infolist()], z.testzip()
    ([('a.txt', b'hello'), ('b.bin', b'xyz')], None)
"""

from __future__ import annotations

import struct
import zlib
from contextlib import contextmanager
from typing import BinaryIO, Iterator

from .region import Region

__all__ = ["StoredZip"]

_CHUNK = 1 << 24
_LIMIT = 0xFFFFFFFF
_ZIP64_SLACK = 1 << 26  # HDF5 metadata on top of the datasets' bytes: far less than this


def _dos_time(date_time: tuple[int, ...]) -> tuple[int, int]:
    y, mo, d, h, mi, s = date_time[:6]
    return (h << 11) | (mi << 5) | (s // 2), ((max(y, 1980) - 1980) << 9) | (mo << 5) | d


class StoredZip:
    """Writes a zip of stored members into ``raw`` (opened ``w+b``), in order; zip64 where a member's size calls
    for it (declared beforehand, so the local header is laid out once)."""

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self._central: list[bytes] = []
        self._offset = 0

    def _local(self, name: bytes, date_time: tuple[int, ...], crc: int, size: int, zip64: bool) -> bytes:
        t, d = _dos_time(date_time)
        extra = struct.pack("<HHQQ", 1, 16, size, size) if zip64 else b""
        small = _LIMIT if zip64 else size
        return struct.pack("<IHHHHHIIIHH", 0x04034B50, 45 if zip64 else 20, 0, 0, t, d, crc, small, small,
                           len(name), len(extra)) + name + extra

    def _record(self, name: bytes, date_time: tuple[int, ...], crc: int, size: int, offset: int) -> None:
        t, d = _dos_time(date_time)
        zip64 = size >= _LIMIT or offset >= _LIMIT
        extra = struct.pack("<HH", 1, 8 * 3) + struct.pack("<QQQ", size, size, offset) if zip64 else b""
        small = _LIMIT if zip64 else size
        self._central.append(struct.pack(
            "<IHHHHHHIIIHHHHHII", 0x02014B50, (3 << 8) | (45 if zip64 else 20), 45 if zip64 else 20, 0, 0, t, d,
            crc, small, small, len(name), len(extra), 0, 0, 0, 0o600 << 16, _LIMIT if zip64 else offset
        ) + name + extra)

    def add(self, name: str, data: bytes, date_time: tuple[int, ...]) -> None:
        """A small member, whole."""
        encoded, crc = name.encode("ascii"), zlib.crc32(data)
        zip64 = len(data) >= _LIMIT
        header = self._local(encoded, date_time, crc, len(data), zip64)
        self._raw.seek(self._offset)
        self._raw.write(header)
        self._raw.write(data)
        self._record(encoded, date_time, crc, len(data), self._offset)
        self._offset += len(header) + len(data)

    @contextmanager
    def member(self, name: str, date_time: tuple[int, ...], expected: int) -> Iterator[Region]:
        """A member written in place through a :class:`~slotopt.io.region.Region` (h5py writes, seeks, reads back); ``expected``: about
        how many bytes it will hold (zip64 is chosen from it). On leaving, the member's CRC-32 (``window.crc`` where
        the writer computed it as it wrote, else computed from the bytes on disk) is patched into its local header."""
        encoded = name.encode("ascii")
        zip64 = expected + _ZIP64_SLACK >= _LIMIT
        header_size = len(self._local(encoded, date_time, 0, 0, zip64))
        window = Region(self._raw, self._offset + header_size, writable=True)
        yield window
        size = window.size
        if size >= _LIMIT and not zip64:
            raise ValueError(f"zip member {name!r} grew to {size} bytes, past the size declared for it")
        crc = window.crc if window.crc is not None else 0
        buffer = bytearray(min(_CHUNK, max(size, 1)) if window.crc is None else 1)
        view = memoryview(buffer)
        self._raw.seek(self._offset + header_size)
        done = size if window.crc is not None else 0  # (else read back: a writer that did not compute it)
        while done < size:
            got = self._raw.readinto(view[:min(len(view), size - done)])  # type: ignore[attr-defined]
            if not got:
                raise ValueError(f"zip member {name!r} is shorter on disk than written")
            crc = zlib.crc32(view[:got], crc)
            done += got
        self._raw.seek(self._offset)
        self._raw.write(self._local(encoded, date_time, crc, size, zip64))
        self._record(encoded, date_time, crc, size, self._offset)
        self._offset += header_size + size

    def finish(self) -> None:
        """The central directory and its end records."""
        self._raw.seek(self._offset)
        self._raw.truncate(self._offset)
        start = self._offset
        for record in self._central:
            self._raw.write(record)
        size = sum(len(r) for r in self._central)
        count = len(self._central)
        end = start + size
        if start >= _LIMIT or size >= _LIMIT or count >= 0xFFFF:
            self._raw.write(struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, count, count, size, start))
            self._raw.write(struct.pack("<IIQI", 0x07064B50, 0, end, 1))
        self._raw.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, min(count, 0xFFFF), min(count, 0xFFFF),
                                    min(size, _LIMIT), min(start, _LIMIT), 0))
        self._raw.flush()
