#!/usr/bin/env python3
"""Optimizer step-time benchmark: slotopt against torch.optim (for-loop, foreach, fused), plus a sparse row.

A thin wrapper around ``slotopt.cli.bench`` (the same as ``slotopt bench``); see that module for the workloads and
the measurement method. Examples:

    python benchmarks/step_time.py --quick
    python benchmarks/step_time.py --workload model --steps 50 --png model.png
"""

import sys

from slotopt.cli.command import main

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
