"""The documentation site builds without a warning (a broken link or API reference fails), its API pages show no
argument with a default as required, and every Python example on its pages runs and prints exactly what its
comments promise (``tests/_examples.py``)."""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _examples import check_output

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted(p for p in (ROOT / "docs").rglob("*.md") if "_hooks" not in p.parts)
EXAMPLES = {page: re.findall(r"^```python\n(.*?)^```", page.read_text(), flags=re.S | re.M) for page in PAGES}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site, built once for the tests that read it."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                            cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, ("mkdocs build failed (install the docs extra: pip install -e '.[docs]'):\n"
                                    + result.stdout + result.stderr)
    return out


def test_the_site_builds_in_strict_mode(site):
    keras3 = (site / "api" / "keras3" / "index.html").read_text()
    assert keras3.count("doc-heading") > 20
    assert "optimizer_variables.py" not in keras3  # a human introduction, not the package's list of files


def _shown_as_required(page: str) -> list[tuple[str, str]]:
    """``(object path, argument)`` for each row of an API page's parameter tables whose default is shown as
    "required", with the object whose heading comes before it."""
    rows = []
    for chunk in re.split(r'(?=<h\d id="slotopt\.)', page):
        heading = re.match(r'<h\d id="(slotopt\.[\w.]+)"', chunk)
        if heading is None:
            continue
        for row in re.findall(r'<tr class="doc-section-item">(.*?)</tr>', chunk, flags=re.S):
            name = re.search(r"<code>(.*?)</code>", row, flags=re.S)
            if name and "<em>required</em>" in row:
                rows.append((heading.group(1), re.sub(r"<[^>]+>", "", name.group(1)).strip()))
    return rows


def _resolve(path: str):
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(path)


def test_no_argument_with_a_default_is_shown_as_required(site):
    pages = sorted((site / "api").rglob("index.html"))
    assert len(pages) >= 8
    checked = 0
    for page in pages:
        for path, name in _shown_as_required(page.read_text()):
            obj = _resolve(path)
            signature = inspect.signature(obj.__init__ if inspect.isclass(obj) else obj)
            parameter = signature.parameters.get(name)
            assert parameter is not None and parameter.default is inspect.Parameter.empty, (
                f"{page.parent.name}: {path} shows `{name}` as required, but "
                + ("it has a default" if parameter is not None else "it is not in the signature (taken by keyword)"))
            checked += 1
    assert checked > 5  # (the truly required ones: learning_rate of a base class, inner optimizers...)


def test_every_page_is_in_the_navigation():
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in PAGES:
        assert str(page.relative_to(ROOT / "docs")) in nav, page


@pytest.mark.parametrize("page", [p for p in PAGES if EXAMPLES[p]], ids=lambda p: str(p.relative_to(ROOT / "docs")))
def test_every_python_block_runs(page, monkeypatch, capfd):
    """A page's blocks run in order in one namespace, as a reader would type them (a later block may use what an
    earlier one defined), and print nothing on stderr (a reader would see it before the documented output: the
    torch.compile example once printed a warning of Dynamo's)."""
    monkeypatch.chdir(ROOT)  # examples may name files shipped in the repository (tests/data/...)
    namespace = {"__name__": "docs_example"}
    for index, code in enumerate(EXAMPLES[page]):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, f"{page}:block{index}", "exec"), namespace)
        check_output(code, out.getvalue(), f"{page.name} block {index}")
    assert capfd.readouterr().err == ""
