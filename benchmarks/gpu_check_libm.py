"""gpu_check's ``libm`` section (issue 48): the device C-library functions (``kernels/triton/libm.py``: expf,
logf, cosf, powf, exp, pow) compiled for the device and checked there against the host's C library, bit for bit,
over many inputs (special values, subnormals, huge and tiny values, near-integers, near multiples of pi/4, random
bit patterns). A function that differs on the device is not offered there (numerics keeps the host copy)."""

from __future__ import annotations

import argparse
import time
from typing import Any


def section_libm(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from slotopt.kernels.triton import libm

    if not libm.available():
        return {"ok": True, "summary": "n/a: the C library's tables were not found (no glibc)", "rows": []}
    device = torch.device(args.device)
    rounds, count = (1, 64) if args.dry else (2, 65536)
    rows, bad = [], []
    for name in libm.FUNCTIONS:
        began, total, differ = time.perf_counter(), 0, 0
        for seed in range(rounds):
            inputs = libm.verification_inputs(name, count, seed=500 + seed)
            total += inputs[0].size
            differ += libm.differences(name, device, inputs)
        rows.append({"function": name, "dtype": str(libm.FUNCTIONS[name]).replace("torch.", ""), "inputs": total,
                     "differing": differ, "seconds": round(time.perf_counter() - began, 1)})
        if differ:
            bad.append(f"{name}: {differ} of {total} inputs differ from the C library")
    offered = libm.prepare(device)
    return {"ok": not bad and all(offered.values()), "rows": rows, "offered": offered, "failures": bad,
            "summary": f"{len(rows) - len(bad)}/{len(rows)} device C-library functions bit-identical to the host's "
                       f"({sum(r['inputs'] for r in rows)} inputs)"}
