"""The device C-library functions (``kernels/triton/libm.py``) against the loaded C library over many inputs.

Run under Triton's interpreter on the CPU (or on a GPU, where the kernels compile):

    TRITON_INTERPRET=1 PYTHONPATH=src python tools/libm_device_sweep.py [rounds] [count] [function ...]

Each round draws ``libm.verification_inputs(name, count, seed=round)`` (special values, subnormals, huge and
tiny values, values near the bounds, near 1 and integers, random bit patterns) and counts the inputs whose bits
differ from ``numerics.libm`` (the C library, flushed to zero). Prints one line per function; exits 1 if any differ.
"""

from __future__ import annotations

import sys
import time
import warnings

import torch

from slotopt.kernels.triton import libm


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 16384
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    failed = False
    warnings.simplefilter("ignore")
    for name in sys.argv[3:] or libm.FUNCTIONS:
        start, total, differ = time.time(), 0, 0
        for seed in range(rounds):
            inputs = libm.verification_inputs(name, count, seed=1000 + seed)
            total += inputs[0].size
            differ += libm.differences(name, device, inputs)
        failed |= differ != 0
        print(f"{name:5s} ({libm.FUNCTIONS[name]}): {differ} of {total} inputs differ ({time.time() - start:.0f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
