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
    try:
        # numpy first, on its own: torch imports it under ``except ImportError`` and carries on without it, so a
        # Ctrl-C landing in numpy's import (which an extension module turns into an ImportError) was swallowed
        # there and the command ran to the end with exit code 0.
        import numpy  # noqa: F401

        from slotopt.cli import main as run

        return run(argv)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except ImportError as err:
        if not _interrupted(err):
            raise
        print("interrupted", file=sys.stderr)  # a Ctrl-C inside an extension module's import (numpy's)
        return EXIT_INTERRUPTED


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
