"""A griffe extension for the documentation site: the interactive examples in slotopt's docstrings
(``>>>`` lines and their output, run by ``tests/project/test_docstrings.py``) are shown as Python console blocks instead of
being read as Markdown prose (where ``[1.0, 0.5]`` would be taken for a link)."""

from __future__ import annotations

from typing import Any

from griffe import Extension, Object


def fence_doctests(text: str) -> str:
    """``text`` with every run of ``>>>`` lines (with their ``...`` continuations and output, up to a blank line)
    wrapped in a ```` ```pycon ```` fence at the run's indentation."""
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        stripped = lines[i].lstrip()
        if not stripped.startswith(">>>"):
            out.append(lines[i])
            i += 1
            continue
        indent = lines[i][: len(lines[i]) - len(stripped)]
        block = []
        while i < len(lines) and lines[i].strip():
            block.append(lines[i])
            i += 1
        out += [f"{indent}```pycon", *block, f"{indent}```"]
    return "\n".join(out)


class DoctestBlocks(Extension):
    """Fences the doctest runs of every docstring griffe loads."""

    def on_instance(self, *, obj: Object, **kwargs: Any) -> None:
        if obj.docstring is not None and ">>>" in obj.docstring.value:
            obj.docstring.value = fence_doctests(obj.docstring.value)
