"""The per-tensor cost of Keras 3 Adam ``step()`` with the C++ step checks and with the Python ones, against torch's
fused Adam, in one process.

Per-tensor cost: the slope of a step's time over its tensor count (100, 1,000 and 2,000 tensors of 256 floats,
as ``slotopt bench --workload faces``). The contenders (C++ checks, Python checks, ``torch.optim.Adam(fused=True)``
and a copy floor) run interleaved step by step, each step timed in CPU time of this thread
(``time.thread_time``: on a shared machine the wall clock counts other processes' time); each repetition gives a
slope per contender from the median step at each count, and the report is the median over repetitions, with the
range. ``python benchmarks/python_checks.py [steps] [repetitions]``.
"""

from __future__ import annotations

import gc
import os
import statistics
import sys
import time
from typing import Any, Callable

import torch

import slotopt
from slotopt.cli import bench_faces
from slotopt.kernels.native import tensor_table

COUNTS = (100, 1000, 2000)
NAMES = ("C++", "Python", "torch fused", "floor")


def _slotopt(n: int, on: bool, generator: torch.Generator) -> Callable[[], Any]:
    params = [torch.nn.Parameter(torch.randn(256, generator=generator)) for _ in range(n)]
    for p in params:
        p.grad = torch.randn(256, generator=generator) * 0.01
    opt = slotopt.Adam(learning_rate=1e-3, params=params)

    def step() -> None:
        previous = tensor_table.use(on)
        try:
            opt.step()
        finally:
            tensor_table.use(previous)

    for _ in range(3):
        step()
    return step


def _fused(n: int, generator: torch.Generator) -> Callable[[], Any]:
    params = [torch.nn.Parameter(torch.randn(256, generator=generator)) for _ in range(n)]
    for p in params:
        p.grad = torch.randn(256, generator=generator) * 0.01
    opt = torch.optim.Adam(params, lr=1e-3, fused=True)
    for _ in range(3):
        opt.step()
    return opt.step


def _repetition(steps: int) -> dict[str, float]:
    """One slope per contender (us per tensor), every contender of every count made first and kept to the end (see
    ``bench_faces.measure_faces``: memory freed by one round would be handed to the next in scattered pieces)."""
    medians: dict[str, list[float]] = {name: [] for name in NAMES}
    kept = []
    for n in COUNTS:
        generator = torch.Generator().manual_seed(n)
        contenders = {"C++": _slotopt(n, True, generator), "Python": _slotopt(n, False, generator),
                      "torch fused": _fused(n, generator),
                      "floor": bench_faces._copy(n * 256 * bench_faces.ADAM_TRAFFIC)}
        times: dict[str, list[float]] = {name: [] for name in contenders}
        order = list(contenders)
        for r in range(steps):
            for name in order[r % len(order):] + order[:r % len(order)]:  # (a rotating order)
                started = time.thread_time()
                contenders[name]()
                times[name].append(time.thread_time() - started)
        for name, seconds in times.items():
            medians[name].append(statistics.median(seconds))
        kept.append(contenders)
    kept.clear()
    gc.collect()
    return {name: bench_faces._slope_us(COUNTS, seconds) for name, seconds in medians.items()}


def main(steps: int = 20, repetitions: int = 5) -> dict[str, float]:
    torch.set_num_threads(1)
    if not tensor_table.status()["active"]:
        print(f"the C++ checks are not active here ({tensor_table.status()['reason']}): both columns are Python")
    slopes: dict[str, list[float]] = {name: [] for name in NAMES}
    ratios: dict[str, list[float]] = {"Python / C++": [], "Python / torch fused": [], "C++ / torch fused": []}
    for _ in range(repetitions):
        one = _repetition(steps)
        for name, slope in one.items():
            slopes[name].append(slope)
        ratios["Python / C++"].append(one["Python"] / one["C++"])
        ratios["Python / torch fused"].append(one["Python"] / one["torch fused"])
        ratios["C++ / torch fused"].append(one["C++"] / one["torch fused"])
    print(f"load {os.getloadavg()[0]:.1f} (1 min); us per tensor (CPU time), median [min-max] of {repetitions}")
    for name, values in {**slopes, **ratios}.items():
        print(f"  {name:22s} {statistics.median(values):6.2f}  [{min(values):.2f}-{max(values):.2f}]")
    return {name: statistics.median(values) for name, values in {**slopes, **ratios}.items()}


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20, int(sys.argv[2]) if len(sys.argv) > 2 else 5)
