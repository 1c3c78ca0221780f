"""The ``slotopt`` command: ``command.py`` parses and dispatches; ``demo.py`` (``slotopt demo``), ``bench.py``
(``slotopt bench``) and ``reference.py`` (``slotopt parity``: replay of the recorded Keras trajectories) are its
programs. The library never imports this package."""

from .command import main

__all__ = ["main"]
