"""The documentation site builds without a warning (a broken link or API reference fails), and every Python
example on its pages runs."""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted(p for p in (ROOT / "docs").rglob("*.md") if "_hooks" not in p.parts)
EXAMPLES = {page: re.findall(r"^```python\n(.*?)^```", page.read_text(), flags=re.S | re.M) for page in PAGES}


def test_the_site_builds_in_strict_mode(tmp_path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
                            cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, ("mkdocs build failed (install the docs extra: pip install -e '.[docs]'):\n"
                                    + result.stdout + result.stderr)
    assert (tmp_path / "api" / "keras3" / "index.html").read_text().count("doc-heading") > 20


def test_every_page_is_in_the_navigation():
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in PAGES:
        assert str(page.relative_to(ROOT / "docs")) in nav, page


@pytest.mark.parametrize("page", [p for p in PAGES if EXAMPLES[p]], ids=lambda p: str(p.relative_to(ROOT / "docs")))
def test_every_python_block_runs(page, monkeypatch):
    """A page's blocks run in order in one namespace, as a reader would type them (a later block may use what an
    earlier one defined)."""
    monkeypatch.chdir(ROOT)  # examples may name files shipped in the repository (tests/data/...)
    namespace = {"__name__": "docs_example"}
    for index, code in enumerate(EXAMPLES[page]):
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(code, f"{page}:block{index}", "exec"), namespace)
