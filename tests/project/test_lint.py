"""The code stays ``ruff`` clean (the rules in pyproject.toml), checked by the same command CI runs."""

import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _ruff() -> list[str]:
    beside = os.path.join(os.path.dirname(sys.executable), "ruff")
    if os.path.exists(beside):
        return [beside]
    found = shutil.which("ruff")
    if found is None:
        pytest.fail("ruff is not installed: `pip install -e '.[test]'` installs it")
    return [found]


def test_the_code_is_ruff_clean():
    dirs = [d for d in ("src", "tests", "benchmarks", "tools", "examples") if os.path.isdir(os.path.join(ROOT, d))]
    result = subprocess.run(_ruff() + ["check", *dirs], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
