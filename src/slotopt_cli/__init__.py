"""The ``slotopt`` console script's entry point, outside the ``slotopt`` package on purpose.

Importing ``slotopt`` imports PyTorch, which takes a second or more; a Ctrl-C in that time would end the
program with a traceback from the import machinery. This module imports only ``sys`` itself, so it can catch
the interrupt around the start-up and exit as an interrupted command does (message, exit code 130).
"""

from __future__ import annotations

import sys
from typing import Optional, Sequence

__all__ = ["main", "EXIT_INTERRUPTED"]

#: 128 + SIGINT, the shell's code for a command ended by Ctrl-C.
EXIT_INTERRUPTED = 130


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs ``slotopt.cli.main`` (importing it first); a Ctrl-C at any point prints ``interrupted``."""
    # A Ctrl-C during the imports is recorded, not raised, and acted on once they are done: raised inside them, it
    # can land in an ``except ImportError`` of torch's or numpy's (an extension module interrupted while it loads
    # turns the interrupt into an ImportError), which swallows it, and the command then ran on with exit code 0.
    interrupted: list[int] = []
    previous = None
    try:
        try:
            previous = _record_sigint(interrupted)
            import numpy  # noqa: F401

            from slotopt.cli import main as run
        except ImportError as err:
            if not _interrupted(err):
                raise
            interrupted.append(2)  # a Ctrl-C inside an extension module's import (numpy's)
        finally:
            _restore_sigint(previous)
        if interrupted:
            raise KeyboardInterrupt
        return run(argv)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _record_sigint(interrupted: list[int]) -> object:
    """Makes SIGINT append to ``interrupted`` instead of raising, where its handler is Python's default (one that
    raises ``KeyboardInterrupt``); returns what ``_restore_sigint`` puts back (None: nothing was changed: an
    ignored SIGINT stays ignored, and only the main thread can set a handler)."""
    import signal

    try:
        if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
            return None
        return signal.signal(signal.SIGINT, lambda signum, frame: interrupted.append(signum))
    except ValueError:  # not the main thread
        return None


def _restore_sigint(previous: object) -> None:
    if previous is not None:
        import signal

        signal.signal(signal.SIGINT, previous)  # type: ignore[arg-type]


def _interrupted(err: BaseException) -> bool:
    """Whether a Ctrl-C caused ``err``: an extension module interrupted while it loads turns the interrupt
    into an ``ImportError`` (and the next import of it fails with another), with the interrupt in its chain."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, KeyboardInterrupt):
            return True
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return False


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
