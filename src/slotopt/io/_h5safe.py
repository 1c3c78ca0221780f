"""HDF5 read as untrusted data: nothing outside the file is followed, nothing larger than declared is allocated,
and the HDF5 library never runs in the caller's process on a hostile file.

An HDF5 file can point outside itself: an external link (another file's object), external raw storage (a
dataset whose bytes are any local file), a virtual dataset (a view of other files' datasets). A reader that
follows them fills weights with bytes it was never given. :func:`snapshot` walks the file without following any
link and refuses all of these, soft links too (Keras writes none), any dataset whose dtype is not a plain number,
and declared sizes past what the storage holds or past ``max_bytes`` (a fill-value dataset declaring gigabytes in
a few bytes). The HDF5 C library is not hardened against corrupted files (a flipped byte can make it crash or
loop), so on platforms with ``fork`` the walk runs in a child process with a memory and time limit: a crash, a
hang or an exhausted limit there becomes a :class:`CheckpointFormatError` here. The result is plain Python data.

The child reads metadata only: for each dataset stored as Keras stores it (contiguous, unfiltered, numbers) it
reports where its bytes lie, and this process reads them itself, straight from the file into the array it
returns, after checking the extent against the file: one copy, no pickled arrays through a pipe, no temporary
file for a ``.keras`` member stored uncompressed (read in place in the zip, see :func:`snapshot_member`).
Such a member is read once, in file order, so its zip CRC-32 is checked on the same pass: each dataset's bytes
are read straight into their array and checksummed there while in cache, the bytes between them (HDF5
metadata) into a small scratch buffer. Datasets stored otherwise (chunked, compressed, compact) are read by
the child and sent. ``metadata_only`` (``slotopt inspect``) reads no dataset of more than one element: each
becomes a read-only placeholder of its shape and dtype that holds no memory, and no checksum is computed. Since the walk does
not grow with the weights, its time limit is one no loaded machine reaches on a sound file, and the size bound
is the file's own (``max_bytes`` defaults to 16 TiB: it bounds what a caller chooses to allow).
"""

from __future__ import annotations

import multiprocessing
import os
import struct
import tempfile
import traceback
import zipfile
import zlib
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from .errors import CheckpointFormatError
from .region import Region

__all__ = ["H5Snapshot", "snapshot", "snapshot_member", "zip_member_to_tempfile", "MAX_BYTES"]

#: Default bound on what a file may make the reader allocate, past the file's own bound (every dataset's size is
#: checked against the storage it holds): large enough for any real model.
MAX_BYTES = 2 ** 44
#: Seconds the isolated HDF5 walk (metadata, and datasets not stored contiguously) may take, plus one per GiB.
TIMEOUT_SECONDS = 300.0
_CHUNK = 1 << 24

# Keras writes raw, uncompressed datasets; a compressed one may be smaller on disk, but not by more than this.
_MAX_COMPRESSION = 64
_MAX_ATTRIBUTE_BYTES = 64 * 2 ** 20
_NUMERIC_KINDS = "fiub"


@dataclass
class H5Snapshot:
    """The checked content of an HDF5 file: every dataset by path (a fresh array), and the attributes of every
    group and dataset by path (``""`` the root), as ``str``, ``list[str]`` or numbers."""

    datasets: dict[str, np.ndarray] = field(default_factory=dict)
    attrs: dict[str, dict[str, Any]] = field(default_factory=dict)
    groups: set[str] = field(default_factory=set)
    #: datasets whose bytes this process reads itself: path → (offset in the HDF5 file, shape, dtype string)
    located: dict[str, tuple[int, tuple[int, ...], str]] = field(default_factory=dict)
    #: metadata_only: the datasets left unread (in ``datasets`` as placeholders: zero strides, no memory)
    unread: set[str] = field(default_factory=set)


def _attribute_value(path: str, entry: str, obj: Any, name: str) -> Any:
    try:
        size = obj.attrs.get_id(name).get_storage_size()
    except RuntimeError:  # h5py reports an empty attribute's size 0 as an error
        size = 0
    if size > _MAX_ATTRIBUTE_BYTES:
        raise CheckpointFormatError(path, f"{entry}@{name}", "attribute larger than 64 MiB: refused.")
    value = obj.attrs[name]
    if isinstance(value, bytes):
        return value.decode("utf8")
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "SUO":
            return [v.decode("utf8") if isinstance(v, bytes) else str(v) for v in value.reshape(-1)]
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value if isinstance(value, (str, int, float)) else str(value)


def _contiguous_offset(obj: Any, nbytes: int) -> Optional[int]:
    """Where a dataset's bytes start in its file when they lie there as they are (contiguous, unfiltered, plain
    little- or big-endian numbers, fully stored), else None."""
    import h5py

    try:
        plist = obj.id.get_create_plist()
        if plist.get_layout() != h5py.h5d.CONTIGUOUS or plist.get_nfilters() != 0:
            return None
        offset = obj.id.get_offset()
    except (RuntimeError, ValueError, TypeError, OSError):
        return None
    if offset is None or obj.dtype.kind not in "fiu" or int(obj.id.get_storage_size()) != nbytes:
        return None
    # The bytes are numpy's only when the HDF5 type is exactly the standard one of the dtype h5py reports: h5py
    # names a float by its size (a 32-bit float without IEEE's implied mantissa bit, or with another exponent
    # bias, is still `<f4`), so such a dataset is read through the HDF5 library's conversion, as Keras reads it.
    try:
        if obj.id.get_type() != h5py.h5t.py_create(obj.dtype):
            return None
    except (RuntimeError, ValueError, TypeError):
        return None
    return int(offset)


def _placeholder(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An array of ``shape`` and ``dtype`` that holds one element (zero strides, read-only): a dataset listed but
    not read."""
    return np.broadcast_to(np.zeros((), dtype=dtype.newbyteorder("=")), shape)


def _object_address(obj: Any) -> Any:
    """What identifies an HDF5 object in its file whatever name reached it (its object header's address, or its
    token in HDF5 1.12+)."""
    import h5py

    info = h5py.h5o.get_info(obj.id)
    return getattr(info, "token", None) or info.addr


def _walk(path: str, source: Any, max_bytes: int, metadata_only: bool = False) -> H5Snapshot:
    import h5py

    snap = H5Snapshot()
    total = 0
    # Every object once: a second hard link to a group or dataset is refused where it is met, so the walk's work
    # and what it allocates are bounded by the file's objects, not by its paths (25 groups each linking the next
    # twice are 2**24 paths in a 50 KB file; one dataset under 100 names would be read 100 times).
    seen: dict[Any, str] = {}

    def attributes(obj: Any, entry: str) -> None:
        snap.attrs[entry] = {_name: _attribute_value(path, entry, obj, _name) for _name in obj.attrs.keys()}

    def walk(group: Any, prefix: str) -> None:
        nonlocal total
        for key in group.keys():
            entry = f"{prefix}{key}"
            link = group.get(key, getlink=True)
            if not isinstance(link, h5py.HardLink):
                raise CheckpointFormatError(path, entry, f"is an HDF5 {type(link).__name__}, which points outside the "
                                            "file's own objects; Keras writes none, so the file is refused.")
            obj = group.get(key)
            first = seen.setdefault(_object_address(obj), entry)
            if first != entry:
                raise CheckpointFormatError(path, entry, f"is the HDF5 object {first!r} again (a second hard link): "
                                            "Keras writes each group and dataset once; refused (each object is "
                                            "read once, whatever links the file has).")
            if isinstance(obj, h5py.Group):
                snap.groups.add(entry)
                attributes(obj, entry)
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
            if dtype.kind == "f" and dtype.itemsize not in (2, 4, 8):  # (an extended float h5py maps to longdouble)
                raise CheckpointFormatError(path, entry, f"has dtype {dtype} ({dtype.itemsize * 8}-bit float); only "
                                            "16-, 32- and 64-bit floats are read (what torch holds and Keras writes).")
            shape = obj.shape if obj.shape is not None else ()
            nbytes = int(np.prod(shape, dtype=np.float64)) * dtype.itemsize
            stored = int(obj.id.get_storage_size())
            if nbytes > _MAX_COMPRESSION * stored + 4096:
                raise CheckpointFormatError(
                    path, entry, f"declares {nbytes} bytes (shape {shape}, {dtype}) but stores {stored}: refused.")
            total += nbytes
            if total > max_bytes:
                raise CheckpointFormatError(path, entry, f"the datasets declare more than max_bytes={max_bytes} bytes.")
            attributes(obj, entry)
            if metadata_only and nbytes > dtype.itemsize:  # listed, not read (its shape and dtype only)
                snap.unread.add(entry)
                snap.located[entry] = (-1, tuple(int(d) for d in shape), dtype.str)
                continue
            offset = _contiguous_offset(obj, nbytes) if nbytes else None
            if offset is not None:
                snap.located[entry] = (offset, tuple(int(d) for d in shape), dtype.str)
                continue
            try:
                snap.datasets[entry] = np.array(obj[()], copy=True)
            except (OSError, ValueError, TypeError, RuntimeError) as err:
                raise CheckpointFormatError(path, entry, f"cannot be read ({type(err).__name__}: {err}).") from err

    file_name, (base, size) = source  # the HDF5 file is bytes [base, base + size) of file_name
    with open(file_name, "rb") as raw, h5py.File(Region(raw, base, size), "r") as f:
        attributes(f, "")
        walk(f, "")
    return snap


def _fill(path: str, snap: H5Snapshot, file_name: str, base: int, size: int,
          checksum: Optional[tuple[str, int]] = None) -> H5Snapshot:
    """Reads every located dataset straight from the file into its array, its extent checked against the HDF5
    file's bytes (the child's word is not trusted for it). ``checksum`` = (zip member, its CRC-32): the HDF5 file
    is a stored zip member, read whole in one pass with its CRC-32 checked (:func:`_read_checked`)."""
    for entry in snap.unread:  # metadata_only: a placeholder, nothing read
        _, shape, dtype_str = snap.located.pop(entry)
        snap.datasets[entry] = _placeholder(shape, np.dtype(dtype_str))
    spans = sorted((offset, offset + int(np.prod(shape, dtype=np.float64)) * np.dtype(dtype_str).itemsize, entry)
                   for entry, (offset, shape, dtype_str) in snap.located.items())
    for (_, end, first), (start, _, second) in zip(spans, spans[1:]):
        if start < end:  # two datasets on the same bytes: one stored tensor would be allocated once per name
            raise CheckpointFormatError(path, second, f"shares bytes [{start}, {end}) of the file with {first!r}: "
                                        "refused.")
    for start, end, entry in spans:
        if start < 0 or end > size:
            raise CheckpointFormatError(path, entry, f"declares bytes [{start}, {end}) past the end of its HDF5 "
                                        f"file ({size} bytes): refused.")
    arrays = {entry: np.empty(shape, dtype=np.dtype(dtype_str).newbyteorder("="))
              for entry, (_, shape, dtype_str) in snap.located.items()}
    with open(file_name, "rb", buffering=0) as f:
        if checksum is not None:
            _read_checked(path, f, base, size, [(s, e, arrays[entry]) for s, e, entry in spans], *checksum)
        else:
            for start, _end, entry in spans:
                f.seek(base + start)
                _read_into(path, entry, f, memoryview(arrays[entry].reshape(-1).view(np.uint8)), None)
    for entry, (_, _, dtype_str) in snap.located.items():
        array = arrays[entry]
        if not np.dtype(dtype_str).isnative and array.dtype.itemsize > 1:
            array.byteswap(inplace=True)  # stored big-endian: swapped in place
        snap.datasets[entry] = array
    snap.located = {}
    return snap


def _read_into(path: str, entry: str, f: Any, view: memoryview, crc: Optional[int]) -> Optional[int]:
    """Fills ``view`` from ``f`` (at its position) in chunks; with ``crc``, continues it over each chunk while
    it is in cache and returns it."""
    done = 0
    while done < len(view):
        got = f.readinto(view[done:done + _CHUNK])
        if not got:
            raise CheckpointFormatError(path, entry, "is truncated: the file ends inside it.")
        if crc is not None:
            crc = zlib.crc32(view[done:done + got], crc)
        done += got
    return crc


def _read_checked(path: str, f: Any, base: int, size: int, spans: list[tuple[int, int, np.ndarray]],
                  member: str, expected: int) -> None:
    """One sequential pass over a stored zip member (bytes [base, base + size) of ``f``): the datasets' bytes
    straight into their arrays, the rest into a scratch buffer, all of it through the zip's CRC-32 as it is
    read. One copy and one pass (not a second read of a multi-gigabyte file to check it)."""
    scratch = memoryview(bytearray(min(_CHUNK, max(size, 1))))
    crc, position = 0, 0
    f.seek(base)

    def skip_to(stop: int) -> None:
        nonlocal crc, position
        while position < stop:
            crc = _read_into(path, member, f, scratch[:min(len(scratch), stop - position)], crc)
            position = min(stop, position + len(scratch))

    for start, end, array in spans:
        skip_to(start)
        crc = _read_into(path, member, f, memoryview(array.reshape(-1).view(np.uint8)), crc)
        position = end
    skip_to(size)
    if crc != expected:
        raise CheckpointFormatError(path, member, f"fails its zip CRC-32 check (computed {crc:#010x}, the zip "
                                    f"records {expected:#010x}): the file is corrupted.")


def _walk_guarded(path: str, source: Any, max_bytes: int, metadata_only: bool = False) -> H5Snapshot:
    try:
        return _walk(path, source, max_bytes, metadata_only)
    except CheckpointFormatError:
        raise
    except (OSError, KeyError, IndexError, ValueError, TypeError, AttributeError, RuntimeError, MemoryError,
            OverflowError, UnicodeError, RecursionError, SystemError) as err:
        raise CheckpointFormatError(path, None, f"malformed HDF5 ({type(err).__name__}: {err})") from err


def _child(conn: Any, path: str, source: Any, max_bytes: int, metadata_only: bool) -> None:  # pragma: no cover - runs in the child
    try:
        import resource

        with open("/proc/self/statm") as statm:
            virtual = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        # The child holds metadata and the datasets not stored contiguously (at most _MAX_COMPRESSION times
        # their storage): bounded by the file, not by max_bytes.
        limit = virtual + 3 * min(max_bytes, _MAX_COMPRESSION * source[1][1] + 4096) + 2 ** 30
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, OSError, ValueError):
        pass
    try:
        conn.send(("ok", _walk_guarded(path, source, max_bytes, metadata_only)))
    except CheckpointFormatError as err:
        conn.send(("error", (err.path, err.entry, err.reason)))
    except BaseException as err:  # noqa: BLE001 - everything is reported to the parent as a format error
        conn.send(("error", (path, None, f"malformed HDF5 ({type(err).__name__}: {err}) "
                                          f"{traceback.format_exc(limit=1)[-200:]}")))
    finally:
        conn.close()


def snapshot(path: str, source: str, max_bytes: int, isolate: Optional[bool] = None,
             region: Optional[tuple[int, int]] = None, *, metadata_only: bool = False,
             checksum: Optional[tuple[str, int]] = None) -> H5Snapshot:
    """The checked content of the HDF5 file at ``source`` (errors name ``path``, the file the user gave), or of
    the bytes ``region`` = (offset, size) of ``source``. ``isolate`` (default: where ``fork`` exists) runs the
    HDF5 library in a child process. ``metadata_only``: datasets of more than one element are placeholders
    (listed in ``unread``), nothing else is read. ``checksum`` = (zip member, CRC-32): the region is that stored
    member, checked as it is read (not with ``metadata_only``, which reads too little to check it)."""
    if isolate is None:
        isolate = "fork" in multiprocessing.get_all_start_methods()
    base, size = region if region is not None else (0, os.path.getsize(source))
    where = (source, (base, size))
    checksum = None if metadata_only else checksum
    if not isolate:
        return _fill(path, _walk_guarded(path, where, max_bytes, metadata_only), source, base, size, checksum)
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(send, path, where, max_bytes, metadata_only),
                            daemon=True)
    child.start()
    send.close()
    timeout = TIMEOUT_SECONDS + size / 2 ** 30
    try:
        if not receive.poll(timeout):
            raise CheckpointFormatError(path, None, f"reading its HDF5 content took over {timeout:.0f} s: refused.")
        try:
            status, payload = receive.recv()
        except (EOFError, OSError) as err:
            child.join(5)
            raise CheckpointFormatError(path, None, "the HDF5 library crashed reading it (exit code "
                                        f"{child.exitcode}): the file is corrupted or hostile.") from err
    finally:
        receive.close()
        if child.is_alive():
            child.kill()
        child.join(5)
    if status == "error":
        raise CheckpointFormatError(*payload)
    return _fill(path, payload, source, base, size, checksum)


def snapshot_member(path: str, archive: zipfile.ZipFile, member: str, max_bytes: int,
                    isolate: Optional[bool] = None, *, metadata_only: bool = False) -> H5Snapshot:
    """:func:`snapshot` of the HDF5 file stored as zip ``member`` of ``path``: read in place when the member is
    stored uncompressed (as Keras writes it; its zip CRC-32 checked on the one pass that reads it), else through
    a temporary file (decompressed, its CRC-32 checked by ``zipfile``, as it is written there)."""
    info = archive.getinfo(member)
    if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 1 or info.file_size != info.compress_size:
        with zip_member_to_tempfile(path, archive, member, max_bytes) as blob:
            return snapshot(path, blob.name, max_bytes, isolate, metadata_only=metadata_only)
    if info.file_size > max_bytes:
        raise CheckpointFormatError(path, member, f"declares {info.file_size} bytes, over max_bytes={max_bytes}: "
                                    "refused.")
    with open(path, "rb") as f:
        f.seek(info.header_offset)
        header = f.read(30)
        if len(header) != 30 or header[:4] != b"PK\x03\x04":
            raise CheckpointFormatError(path, member, "has no valid local zip header: refused.")
        name_length, extra_length = struct.unpack("<HH", header[26:30])
        base = info.header_offset + 30 + name_length + extra_length
        total = os.fstat(f.fileno()).st_size
    if base + info.file_size > total:
        raise CheckpointFormatError(path, member, f"declares {info.file_size} bytes from byte {base}; the file has "
                                    f"{total}: refused.")
    return snapshot(path, path, max_bytes, isolate, region=(base, info.file_size), metadata_only=metadata_only,
                    checksum=(member, info.CRC))


def zip_member_to_tempfile(path: str, archive: zipfile.ZipFile, member: str, max_bytes: int) -> Any:
    """Streams zip ``member`` to a named temporary file (never whole in memory), refusing a declared size past
    ``max_bytes`` and stopping at the declared size (the zip's CRC check catches a lie). The caller closes it."""
    info = archive.getinfo(member)
    if info.file_size > max_bytes:
        raise CheckpointFormatError(path, member, f"declares {info.file_size} bytes uncompressed, over "
                                    f"max_bytes={max_bytes}: refused.")
    if info.compress_type == zipfile.ZIP_DEFLATED and info.file_size > 1100 * max(info.compress_size, 1):
        raise CheckpointFormatError(path, member, "declares a size its compressed data cannot hold: refused.")
    out = tempfile.NamedTemporaryFile(suffix=".h5")
    try:
        with archive.open(info) as src:  # zipfile checks the CRC-32 when the member's end is read
            copied = 0
            while True:
                chunk = src.read(1 << 20)
                if not chunk:
                    break
                copied += len(chunk)
                if copied > info.file_size:
                    raise CheckpointFormatError(path, member, "holds more data than it declares: refused.")
                out.write(chunk)
        out.flush()
        return out
    except (zipfile.BadZipFile, zlib.error) as err:  # a bad CRC-32, or a deflate stream that does not decode
        out.close()
        raise CheckpointFormatError(path, member, f"fails its zip check ({err}): the file is corrupted.") from err
    except BaseException:
        out.close()
        raise
