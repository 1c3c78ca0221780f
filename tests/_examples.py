"""What a documentation example promises to print: the whole output, compared line for line.

A ``print(...)`` line's trailing comment is the line it prints, exactly. A block whose output is not one line per
``print`` (a loop, a multi-line value) ends with a ``# prints:`` comment followed by one comment line per printed
line; that list is then the block's whole output. Explanations go on their own comment lines.
"""

from __future__ import annotations

import io
import tokenize


def promised_output(code: str) -> list[str]:
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(code).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = (tok.string[2:] if tok.string.startswith("# ") else tok.string[1:]).rstrip()
    lines = code.splitlines()
    for number, line in enumerate(lines, 1):
        if line.strip() == "# prints:":
            return [comments.get(n, "") for n in range(number + 1, len(lines) + 1) if lines[n - 1].strip()]
    return [comments[n] for n, line in enumerate(lines, 1)
            if "print(" in line and not line.lstrip().startswith("#") and n in comments]


def check_output(code: str, printed: str, where: str) -> None:
    """Raises AssertionError unless ``printed`` is exactly what ``code``'s comments promise."""
    promised = promised_output(code)
    actual = [line.rstrip() for line in printed.splitlines()]
    assert actual == promised, f"{where} prints:\n" + "\n".join(actual) + "\nits comments promise:\n" + "\n".join(
        promised)
