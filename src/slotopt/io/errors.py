"""The one error type the file readers raise for a malformed or hostile input file.

Every reader in ``slotopt.io`` (Keras ``.keras``/``.h5`` files, TensorFlow checkpoints) turns whatever goes wrong
while reading a file (a broken zip, bad JSON, a missing or mis-shaped entry, an HDF5 link to another file, a size
past the bound) into a :class:`CheckpointFormatError` that names the file and the entry, so a caller catches one
documented type instead of ``BadZipFile``, ``JSONDecodeError``, ``KeyError``, ``OSError``...
"""

from __future__ import annotations

from typing import Optional

__all__ = ["CheckpointFormatError"]


class CheckpointFormatError(ValueError):
    """A checkpoint file is malformed, truncated, inconsistent or refused (it reaches outside itself).

    A ``ValueError`` subclass: ``path`` is the file, ``entry`` the part of it at fault (a zip member, an HDF5
    dataset, a JSON key, a checkpoint key), ``None`` when the file as a whole is at fault.

    Example:
        >>> from slotopt.io import CheckpointFormatError
        >>> err = CheckpointFormatError("model.keras", "config.json", "not valid JSON")
        >>> str(err)
        "model.keras: entry 'config.json': not valid JSON"
        >>> isinstance(err, ValueError), err.path, err.entry
        (True, 'model.keras', 'config.json')
    """

    def __init__(self, path: str, entry: Optional[str], reason: str) -> None:
        self.path = str(path)
        self.entry = entry
        self.reason = reason
        where = f"{self.path}: entry {entry!r}: " if entry is not None else f"{self.path}: "
        super().__init__(where + reason)

    def __reduce__(self):  # pickles (multiprocessing) with its three arguments
        return (type(self), (self.path, self.entry, self.reason))
