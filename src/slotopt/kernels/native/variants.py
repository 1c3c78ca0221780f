"""Which build of the compiled kernels to load: setup.py compiles ``slotopt_kernels.c`` once per instruction set,
each into its own library, and the loader takes the best one this processor runs.

Every variant computes the same bits (each operation rounded separately: ``-ffp-contract=off``, no fast-math), so
the choice changes speed only. ``slotopt_cpu_supported`` and ``slotopt_abi_version`` are compiled for the x86-64
baseline in every variant (slotopt_kernels.c, ``BASELINE_``), so asking a variant never executes an instruction
the processor lacks; tests/kernels/test_native_portable.py reads the machine code to check it.
"""

from __future__ import annotations

import ctypes
import os
from typing import NamedTuple, Optional

#: The variants, best first: name -> file.
VARIANTS = {"avx512": "libslotopt_kernels_avx512.so.1", "avx2": "libslotopt_kernels_avx2.so.1",
            "baseline": "libslotopt_kernels.so.1"}


class Loaded(NamedTuple):
    library: Optional[ctypes.CDLL]
    variant: Optional[str]  # a key of VARIANTS, "custom" (SLOTOPT_KERNELS_LIBRARY), or None
    path: Optional[str]  # the file loaded, or the last one tried
    error: Optional[str]  # why none loaded
    skipped: list[str]  # the better variants not loaded, and why


def candidates(folder: str) -> list[tuple[str, str]]:
    """The variants to try, best first: ``SLOTOPT_KERNELS_ISA`` names one (tests compare them this way; a name
    not in ``VARIANTS`` gives none)."""
    wanted = os.environ.get("SLOTOPT_KERNELS_ISA", "").strip()
    names = [wanted] if wanted else list(VARIANTS)
    return [(name, os.path.join(folder, VARIANTS[name])) for name in names if name in VARIANTS]


def load(folder: str, abi_version: int) -> Loaded:
    """The best variant in ``folder`` that loads, runs on this processor and has ``abi_version``."""
    override = os.environ.get("SLOTOPT_KERNELS_LIBRARY")
    tries = [("custom", override)] if override else [c for c in candidates(folder) if os.path.exists(c[1])]
    wanted = os.environ.get("SLOTOPT_KERNELS_ISA", "").strip()
    if not tries and wanted not in ("", *VARIANTS):
        return Loaded(None, None, None, f"SLOTOPT_KERNELS_ISA must be one of {sorted(VARIANTS)}. "
                                        f"Received: {wanted!r}", [])
    if not tries:
        return Loaded(None, None, None, "compiled library not built (pip install -e . compiles it with the "
                                        "machine's C compiler)", [])
    skipped: list[str] = []
    error = None
    for name, path in tries:
        try:
            library = ctypes.CDLL(path)
            supported = library.slotopt_cpu_supported()  # first: baseline code in every variant
            version = library.slotopt_abi_version()
        except (OSError, AttributeError) as caught:
            error = f"cannot load {path}: {caught}"
            skipped.append(f"{name}: cannot load ({caught})")
            continue
        if not supported:
            error = f"{path} was built for instructions this processor lacks"
            skipped.append(f"{name}: this processor lacks its instructions")
            continue
        if version != abi_version:
            error = f"{path} has ABI version {version}, this slotopt needs {abi_version}: rebuild it"
            skipped.append(f"{name}: ABI version {version}")
            continue
        return Loaded(library, name, path, None, skipped)
    return Loaded(None, None, tries[-1][1], error, skipped)
