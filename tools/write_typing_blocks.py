"""Writes each face package's ``if TYPE_CHECKING:`` block of imports from the registry.

The faces export their classes at run time from ``engine/registry.py`` (one registration point), which type
checkers and IDEs do not run; this block names the same classes statically. It is derived, never edited by hand:
``python tools/write_typing_blocks.py`` rewrites it (then ``ruff check --fix`` wraps its lines), and
``tests/engine/test_registered.py`` fails while the names it binds differ from the registry's (after a class is added, run
this script).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BEGIN = "if TYPE_CHECKING:  # derived from the registry by tools/write_typing_blocks.py; do not edit\n"
END = "# end of the derived block\n"
FACES = {"keras3": "src/slotopt/keras3/__init__.py", "legacy": "src/slotopt/legacy/__init__.py",
         "v1": "src/slotopt/v1/__init__.py", "slotopt": "src/slotopt/__init__.py"}


def block(face: str) -> str:
    """The block for ``face`` (``slotopt``: the top level, which re-exports the Keras 3 face)."""
    from slotopt.engine import registry

    generation = "keras3" if face == "slotopt" else face
    by_module: dict[str, list[str]] = {}
    aliases = []
    for name, cls in registry.exported_classes(generation).items():
        source = ".keras3" if face == "slotopt" else "." + cls.__module__.rsplit(".", 1)[-1]
        if name == cls.__name__:
            by_module.setdefault(source, []).append(f"{name} as {name}")
        else:
            aliases.append(f"    {name} = {cls.__name__}\n")
    lines = [f"    from {source} import {', '.join(sorted(names))}\n" for source, names in sorted(by_module.items())]
    lines += sorted(aliases)
    return BEGIN + "".join(lines) + END


def current(face: str) -> str:
    text = (ROOT / FACES[face]).read_text()
    if BEGIN not in text:
        return ""
    start = text.index(BEGIN)
    return text[start:text.index(END, start) + len(END)]


def write(face: str) -> None:
    path = ROOT / FACES[face]
    text = path.read_text()
    old = current(face)
    if old:
        text = text.replace(old, block(face))
    else:  # first time: after the registry's own imports
        anchor = "from ..engine import registry\n" if face != "slotopt" else "from .variables import IndexedSlices, Variable\n"
        text = text.replace(anchor, anchor + "\n" + block(face), 1)
        if "TYPE_CHECKING" not in text.split(BEGIN)[0]:
            text = text.replace(anchor, "from typing import TYPE_CHECKING\n\n" + anchor, 1) if face == "slotopt" \
                else text.replace(anchor, "from typing import TYPE_CHECKING\n\n" + anchor, 1)
    path.write_text(text)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    for face in FACES:
        write(face)
        print(f"{FACES[face]}: {len(block(face).splitlines()) - 2} names")
