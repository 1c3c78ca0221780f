"""Every Python example in the README runs and prints what its comments promise."""

import contextlib
import io
import re
from pathlib import Path

import pytest
from _examples import check_output

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_readme_example_prints_what_it_promises(code):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(README), "exec"), {"__name__": "readme_example"})
    check_output(code, out.getvalue(), "README")


def test_readme_has_examples():
    assert len(BLOCKS) >= 3  # the rest of the examples are on the documentation pages (tests/project/test_docs.py)
