"""Every Python example in the README runs and prints what its comments promise."""

import contextlib
import io
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def _promised_outputs(code: str) -> list[str]:
    """The text after ``# `` on each ``print(...)`` line, up to the first colon (the rest is prose)."""
    promised = []
    for line in code.splitlines():
        if line.lstrip().startswith("print(") and "#" in line:
            promised.append(line.split("#", 1)[1].strip().split(":", 1)[0].strip())
    return promised


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_readme_example_runs(code):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(README), "exec"), {"__name__": "readme_example"})
    printed = [line.strip() for line in out.getvalue().splitlines()]
    for promised, actual in zip(_promised_outputs(code), printed):
        assert actual.startswith(promised.split(" (")[0]), f"printed {actual!r}, README says {promised!r}"


def test_readme_has_examples():
    assert len(BLOCKS) >= 3  # the rest of the examples are on the documentation pages (tests/test_docs.py)
