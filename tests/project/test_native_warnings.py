"""The C kernels compile without a warning under -Wall -Wextra -Werror, with the flags of each variant setup.py
builds (the baseline x86-64, x86-64-v3, x86-64-v4) and OpenMP: setup.py builds them with warnings on but without
-Werror (a user's newer compiler must still build the library), so this is where a new warning fails."""

from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NATIVE = ROOT / "src" / "slotopt" / "kernels" / "native"
GCC = shutil.which("gcc")

pytestmark = pytest.mark.skipif(GCC is None or platform.machine() not in ("x86_64", "AMD64"),
                                reason="needs gcc on x86-64 (the variants' -march flags)")


def _setup_flags() -> tuple[list[str], dict[str, list[str]]]:
    """FLAGS and VARIANTS as setup.py defines them (read from its text: importing it would run setup())."""
    text = (ROOT / "setup.py").read_text()
    namespace: dict[str, object] = {"os": __import__("os"), "X86_64": True}
    for name in ("WARNINGS", "FLAGS", "VARIANTS"):
        start = text.index(f"\n{name} = ") + 1
        end = text.index("\n\n", start) if name == "VARIANTS" else text.index("\n", start)
        exec(text[start:end], namespace)  # noqa: S102 (the project's own setup.py, a literal)
    return list(namespace["FLAGS"]), dict(namespace["VARIANTS"])  # type: ignore[arg-type]


@pytest.mark.parametrize("source", ["slotopt_kernels.c", "crc32c.c"])
def test_the_c_sources_compile_without_a_warning_in_every_variant(source: str) -> None:
    flags, variants = _setup_flags()
    assert "-Wall" in flags and "-Wextra" in flags
    for name, isa in variants.items():
        base = flags if source == "slotopt_kernels.c" else ["-O3", "-std=gnu11", "-Wall", "-Wextra"]
        command = [GCC, "-fsyntax-only", "-fopenmp", "-Werror", *base, *isa, str(NATIVE / source)]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, f"variant {name or 'baseline'}: {' '.join(command)}\n{result.stderr[-3000:]}"
