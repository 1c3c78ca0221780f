"""HDF5 read as untrusted data: nothing outside the file is followed and nothing larger than declared is allocated.

An HDF5 file can point outside itself: an external link (another file's object), external raw storage (a
dataset whose bytes are any local file), a virtual dataset (a view of other files' datasets). A reader that
follows them fills weights with bytes it was never given. :func:`scan` walks the file without following any link
and refuses all of these, soft links too (Keras writes none), and any dataset whose dtype is not a plain number or
whose declared size exceeds what its storage can hold (a fill-value dataset declaring gigabytes in a few bytes).
"""

from __future__ import annotations

import tempfile
import zipfile
from typing import Any

import numpy as np

from .errors import CheckpointFormatError

__all__ = ["scan", "read_array", "zip_member_to_tempfile", "MAX_BYTES"]

#: Default bound on what a file may make the reader allocate (its weights file, and the arrays read from it).
MAX_BYTES = 2 ** 32

# Keras writes raw, uncompressed datasets; a compressed one may be smaller on disk, but not by more than this.
_MAX_COMPRESSION = 64
_NUMERIC_KINDS = "fiub"


def scan(path: str, h5file: Any, h5py: Any, max_bytes: int) -> dict[str, Any]:
    """Every dataset of ``h5file`` by its path (``"layers/dense/vars/0"``), checked; groups walked without
    following links. Refuses (``CheckpointFormatError``) external/soft links, external storage, virtual
    datasets, non-numeric dtypes and declared sizes past the storage or ``max_bytes`` in total."""
    found: dict[str, Any] = {}
    total = 0

    def walk(group: Any, prefix: str) -> None:
        nonlocal total
        for key in group.keys():
            entry = f"{prefix}{key}"
            link = group.get(key, getlink=True)
            if not isinstance(link, h5py.HardLink):
                kind = type(link).__name__
                raise CheckpointFormatError(path, entry, f"is an HDF5 {kind}, which points outside the file's own "
                                            "objects; Keras writes none, so the file is refused.")
            obj = group.get(key)
            if isinstance(obj, h5py.Group):
                walk(obj, entry + "/")
                continue
            if not isinstance(obj, h5py.Dataset):
                raise CheckpointFormatError(path, entry, f"is an HDF5 {type(obj).__name__}, not a dataset or group.")
            if obj.external:
                raise CheckpointFormatError(path, entry, "stores its data in external file(s) "
                                            f"{[e[0] for e in obj.external]}: refused (a file is read as data only).")
            if obj.is_virtual:
                raise CheckpointFormatError(path, entry, "is a virtual dataset (a view of other files): refused.")
            dtype = obj.dtype
            if dtype.kind not in _NUMERIC_KINDS or dtype.fields is not None or dtype.subdtype is not None:
                raise CheckpointFormatError(path, entry, f"has dtype {dtype}; only numbers are read.")
            nbytes = int(np.prod(obj.shape, dtype=np.int64)) * dtype.itemsize if obj.shape is not None else 0
            stored = int(obj.id.get_storage_size())
            if nbytes > _MAX_COMPRESSION * stored + 4096:
                raise CheckpointFormatError(
                    path, entry, f"declares {nbytes} bytes (shape {obj.shape}, {dtype}) but stores {stored}: refused.")
            total += nbytes
            if total > max_bytes:
                raise CheckpointFormatError(path, entry, f"the datasets declare more than max_bytes={max_bytes} bytes.")
            found[entry] = obj

    walk(h5file, "")
    return found


def read_array(path: str, entry: str, dataset: Any) -> np.ndarray:
    """The dataset's values (a fresh array), errors named after ``entry``."""
    try:
        return np.array(dataset[()], copy=True)
    except (OSError, ValueError, TypeError, RuntimeError, MemoryError) as err:
        raise CheckpointFormatError(path, entry, f"cannot be read ({type(err).__name__}: {err}).") from err


def zip_member_to_tempfile(path: str, archive: zipfile.ZipFile, member: str, max_bytes: int) -> Any:
    """Streams zip ``member`` to a temporary file (never whole in memory), refusing a declared size past
    ``max_bytes`` and stopping at the declared size (the zip's CRC check catches a lie). The caller closes it."""
    info = archive.getinfo(member)
    if info.file_size > max_bytes:
        raise CheckpointFormatError(path, member, f"declares {info.file_size} bytes uncompressed, over "
                                    f"max_bytes={max_bytes}: refused.")
    if info.compress_type == zipfile.ZIP_DEFLATED and info.file_size > 1100 * max(info.compress_size, 1):
        raise CheckpointFormatError(path, member, "declares a size its compressed data cannot hold: refused.")
    out = tempfile.TemporaryFile()
    try:
        with archive.open(info) as src:
            copied = 0
            while True:
                chunk = src.read(1 << 20)
                if not chunk:
                    break
                copied += len(chunk)
                if copied > info.file_size:
                    raise CheckpointFormatError(path, member, "holds more data than it declares: refused.")
                out.write(chunk)
        out.seek(0)
        return out
    except BaseException:
        out.close()
        raise


