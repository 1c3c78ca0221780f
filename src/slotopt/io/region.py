"""Bytes of an open file as a file of their own: an HDF5 file stored in a zip member, read in place (the Keras
reader, ``_h5safe.py``; the writer's verification, ``keras_write.py``) or written in place (``keras_zip.py``,
what h5py writes the weights member into). One class, so that reading and writing a window share one set of bounds."""

from __future__ import annotations

import io
from typing import Any, Optional


class Region(io.RawIOBase):
    # Not subclassed (keras_zip writes through a Region itself): h5py calls these methods from its file driver with
    # the exception of a failed write still pending, and CPython's lookup of a method inherited from a base class
    # then fails (a miss in the first class's dict sees the pending error) as an AttributeError that hides the
    # OSError; methods in the object's own class's dict are found.
    """Bytes ``[base, base + size)`` of the open file ``raw``; ``writable``: writes go to ``raw`` at the same place
    and grow ``size`` (a window opened empty, ``size=0``). Reads never go past ``size``."""

    def __init__(self, raw: Any, base: int, size: int = 0, writable: bool = False) -> None:
        super().__init__()
        self._raw, self._base, self.size, self._pos, self._writable = raw, base, size, 0, writable
        self.crc: Optional[int] = None  # a written window: the CRC-32 of what was written, where the writer computed it

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return self._writable

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self._pos = max(0, offset if whence == 0 else self._pos + offset if whence == 1 else self.size + offset)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        count = max(0, min(len(view), self.size - self._pos))
        self._raw.seek(self._base + self._pos)
        done = 0
        while done < count:  # (a raw file may return fewer bytes than asked: read until the count or the end)
            got = self._raw.readinto(view[done:count])
            if not got:
                break
            done += got
        self._pos += done
        return done

    def write(self, buffer: Any) -> int:
        if not self._writable:
            raise io.UnsupportedOperation("write: a read-only region of the file")
        view = memoryview(buffer).cast("B")
        self._raw.seek(self._base + self._pos)
        done = 0
        while done < len(view):
            done += self._raw.write(view[done:]) or 0
        self._pos += done
        self.size = max(self.size, self._pos)
        return done

    def truncate(self, size: Any = None) -> int:
        if not self._writable:
            raise io.UnsupportedOperation("truncate: a read-only region of the file")
        size = self._pos if size is None else int(size)
        self._raw.truncate(self._base + size)
        self.size = size
        return size

    def flush(self) -> None:
        if self._writable:
            self._raw.flush()
