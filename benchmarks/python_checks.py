"""The per-tensor cost of Keras 3 Adam ``step()`` with the C++ step checks and with the Python ones, in one process.

Slopes over 100, 1,000 and 3,000 tensors of 256 floats (as ``slotopt bench --workload faces``), the two check
paths and the copy floor interleaved step by step, timed in CPU time of this thread (``time.thread_time``): on a
shared machine the wall clock counts other processes' time. ``python benchmarks/python_checks.py [steps]``.
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any, Callable

import torch

import slotopt
from slotopt.cli import bench_faces
from slotopt.kernels.native import tensor_table

COUNTS = (100, 1000, 3000)


def _contender(n: int, on: bool, generator: torch.Generator) -> Callable[[], Any]:
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


def main(steps: int = 20) -> dict[str, float]:
    torch.set_num_threads(1)
    medians: dict[str, list[float]] = {"C++": [], "Python": [], "floor": []}
    kept = []  # (every round's tensors alive to the end: see bench_faces.measure_faces)
    for n in COUNTS:
        generator = torch.Generator().manual_seed(n)
        contenders = {"C++": _contender(n, True, generator), "Python": _contender(n, False, generator),
                      "floor": bench_faces._copy(n * 256 * bench_faces.ADAM_TRAFFIC)}
        times: dict[str, list[float]] = {name: [] for name in contenders}
        for _ in range(steps):
            for name, run in contenders.items():
                started = time.thread_time()
                run()
                times[name].append(time.thread_time() - started)
        for name, seconds in times.items():
            medians[name].append(statistics.median(seconds))
        kept.append(contenders)
    slopes = {name: bench_faces._slope_us(COUNTS, seconds) for name, seconds in medians.items()}
    print(f"us per tensor (CPU time): C++ checks {slopes['C++']:.2f}, Python checks {slopes['Python']:.2f}, "
          f"copy floor {slopes['floor']:.2f}; Python / C++ = {slopes['Python'] / slopes['C++']:.2f}"
          f" (checks {'C++' if tensor_table.status()['active'] else 'Python'} by default here)")
    return slopes


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
