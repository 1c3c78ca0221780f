#!/usr/bin/env python3
"""Per-option step time (issue 46): each of clipnorm, global_clipnorm, clipvalue, loss_scale_factor, use_ema,
weight_decay, amsgrad and gradient_accumulation_steps as a multiple of the same face's plain step, on 500 tensors of
256 floats (every face) and on the 150-tensor model (Keras 3 Adam), and Adam with ``global_clipnorm=1.0`` against
torch's ``clip_grad_norm_(foreach=True)`` + fused Adam. The measurement is ``slotopt.cli.bench_options`` (also
``slotopt bench --workload options``), loaded from this tree by path, so that the slotopt it times is whichever
``PYTHONPATH`` gives: run it once on the code before a change and once after, alternately, on the same machine:

    PYTHONPATH=/path/to/main/src python benchmarks/options_bench.py --threads 1 --label before
    PYTHONPATH=$PWD/src python benchmarks/options_bench.py --threads 1 --label after
"""

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parents[1] / "src" / "slotopt" / "cli" / "bench_options.py"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", action="append", choices=("small", "model"), default=None)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--label", default="", help="a name for this run, printed with the table")
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the rows as JSON")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    spec = importlib.util.spec_from_file_location("bench_options", HERE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    import logging

    import slotopt

    logging.disable(logging.WARNING)  # (the legacy LossScaleOptimizer's reminder to scale the loss, once a step)

    load = os.getloadavg()[0]
    rows = module.measure_options(tuple(args.workload or ("small", "model")), args.steps, args.warmup)
    print(f"{args.label} slotopt from {Path(slotopt.__file__).parent}; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads ({module.clock()}); load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
    print(module.format_options(rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"label": args.label, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
