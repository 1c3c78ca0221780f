"""Writing files so that an existing one is never half-overwritten: every writer of the way back (``ck.save``)
stages what it writes under temporary names in the target's own folder, verifies it, then renames each file into
place. A write that fails at any point (an exception, a full disk, Ctrl-C) removes the temporary files and leaves
whatever was at the target before.

Example:
    >>> import os, tempfile
    >>> from slotopt.io.staging import Staging
    >>> folder = tempfile.mkdtemp()
    >>> with Staging() as stage:
    ...     with open(stage.path(os.path.join(folder, "a.bin")), "wb") as f:
    ...         _ = f.write(b"abc")
    >>> sorted(os.listdir(folder)), open(os.path.join(folder, "a.bin"), "rb").read()
    (['a.bin'], b'abc')
"""

from __future__ import annotations

import os
import secrets
from types import TracebackType
from typing import Callable, Optional

__all__ = ["Staging"]


class Staging:
    """Temporary names for the files of one save, committed together.

    ``path(target)`` gives the temporary file to write for ``target`` (in the same folder, so that the final rename
    stays on one file system and is atomic). Leaving the ``with`` block normally fsyncs each staged file, runs the
    verifiers registered with ``verify`` and renames every file into place, in the order they were staged (a
    writer stages the file that names the others, such as TensorFlow's ``checkpoint`` state file, last). Leaving
    it with an exception, or a verifier raising, removes every staged file and renames nothing.
    """

    def __init__(self) -> None:
        self._staged: list[tuple[str, str]] = []
        self._verifiers: list[Callable[[], None]] = []
        self._tag = secrets.token_hex(4)

    def path(self, target: str) -> str:
        target = os.path.abspath(target)
        folder, name = os.path.split(target)
        os.makedirs(folder, exist_ok=True)
        temporary = os.path.join(folder, f".{name}.slotopt-{self._tag}.tmp")
        self._staged.append((temporary, target))
        return temporary

    def staged(self, target: str) -> str:
        """The temporary path already given for ``target`` (a verifier reads the staged bytes through it)."""
        target = os.path.abspath(target)
        for temporary, final in self._staged:
            if final == target:
                return temporary
        raise KeyError(target)

    def verify(self, check: Callable[[], None]) -> None:
        """Run ``check`` on the staged files before anything is renamed into place; it raises to refuse."""
        self._verifiers.append(check)

    def __enter__(self) -> Staging:
        return self

    def __exit__(self, kind: Optional[type], value: Optional[BaseException],
                 traceback: Optional[TracebackType]) -> None:
        if kind is None:
            try:
                for temporary, _ in self._staged:
                    _fsync(temporary)
                for check in self._verifiers:
                    check()
            except BaseException:
                self._discard()
                raise
            try:
                for temporary, target in self._staged:
                    os.replace(temporary, target)
            except BaseException:
                # A rename that failed (or an interrupt between two) leaves no temporary file behind; the files
                # renamed before it stay (a save that names a new prefix, as the writers do by default, then
                # leaves only unreferenced files: the state file naming them is staged last).
                self._discard()
                raise
            _fsync_folders({os.path.dirname(target) for _, target in self._staged})
        else:
            self._discard()

    def _discard(self) -> None:
        for temporary, _ in self._staged:
            try:
                os.unlink(temporary)
            except FileNotFoundError:
                pass


def _fsync(path: str) -> None:
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: a staged file was never written")
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_folders(folders: set[str]) -> None:
    # The renames themselves made durable (POSIX: a directory's entries are synced through the directory).
    for folder in folders:
        try:
            fd = os.open(folder, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.fsync(fd)
        except OSError:
            pass
        finally:
            os.close(fd)
