"""Writes ``src/slotopt/kernels/native/rules_scalars.h`` from the scalar descriptions of the compiled rules.

Each compiled rule's scalar vector is described once, next to its foreach kernel (``@native.compiled(...,
scalars=(...))``, ``native.slices(...)``; ``slotopt/kernels/native/scalars.py``). The C rules read their scalars
through this header, by name; it is derived, never edited by hand: ``python tools/write_rules_scalars.py``
rewrites it (then ``pip install -e .`` rebuilds the library), and ``tests/kernels/test_rule_scalars.py`` fails while it
differs from the descriptions (after a rule's scalars change, run this script).
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEADER = ROOT / "src" / "slotopt" / "kernels" / "native" / "rules_scalars.h"


def text() -> str:
    """The header for every rule described in ``slotopt.kernels`` (each of its modules imported first: a
    description is registered when its kernel module is imported)."""
    import slotopt.kernels as kernels
    from slotopt.kernels.native import scalars

    for module in pkgutil.walk_packages(kernels.__path__, "slotopt.kernels."):
        importlib.import_module(module.name)
    return scalars.header()


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    HEADER.write_text(text())
    print(f"{HEADER.relative_to(ROOT)}: written")
