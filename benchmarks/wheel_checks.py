"""The per-tensor cost of Keras 3 Adam ``step()`` with each build of the C++ step checks that loads here, in one
process: the source install's (built against this very torch) and the wheel's (built once for this torch minor
version, tools/build_wheel_checks.py), with the Python checks for scale.

Slopes over 100, 1,000 and 3,000 tensors of 256 floats (as benchmarks/python_checks.py), the contenders
interleaved step by step (in an order that turns each step), timed in CPU time of this thread (``time.thread_time``: on a shared machine the wall
clock counts other processes' time). Each contender's optimizer is made and stepped under its own build (a plan
is read by the build that made it). Where one of the two builds is missing (a wheel install has no source build)
only the others are timed. It also compares the two builds' machine code (the SHA-256 of each library's ``.text``
section): built from the same source with the same compiler and flags, they are byte for byte the same, and the
ratio then shows only the machine's noise (about ±10 % on this shared machine; an A/A run, the source build
timed as both, gave 0.94). ``python benchmarks/wheel_checks.py [steps]``; the last line is JSON.
"""

from __future__ import annotations

import hashlib
import json
import statistics
import struct
import sys
import time
from typing import Any, Callable, Optional

import torch

import slotopt
from slotopt.cli import bench_faces
from slotopt.kernels.native import tensor_table

COUNTS = (100, 1000, 3000)


def text_digest(path: str) -> str:
    """SHA-256 of the ``.text`` section of an ELF64 little-endian library (its machine code): two builds with the
    same digest run the same instructions, so any difference in their timings is the machine's noise."""
    with open(path, "rb") as library:
        data = library.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return "not an ELF64 little-endian file"
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)

    def section(index: int) -> tuple[int, int, int]:  # (name offset, file offset, size)
        base = shoff + index * shentsize
        name, = struct.unpack_from("<I", data, base)
        offset, size = struct.unpack_from("<QQ", data, base + 0x18)
        return name, offset, size

    _, names, _ = section(shstrndx)
    for index in range(shnum):
        name, offset, size = section(index)
        if data[names + name:names + name + 6] == b".text\0":
            return hashlib.sha256(data[offset:offset + size]).hexdigest()
    return "no .text section"


def _contender(n: int, build: Optional[str], generator: torch.Generator) -> Callable[[], Any]:
    """A step of Adam over ``n`` tensors under ``build`` (None: the Python checks)."""

    def under(action: Callable[[], Any]) -> Any:
        previous_on = tensor_table.use(build is not None)
        previous = tensor_table.choose(build) if build is not None else None
        try:
            return action()
        finally:
            if previous is not None:
                tensor_table.choose(previous)
            tensor_table.use(previous_on)

    params = [torch.nn.Parameter(torch.randn(256, generator=generator)) for _ in range(n)]
    for p in params:
        p.grad = torch.randn(256, generator=generator) * 0.01
    opt = under(lambda: slotopt.Adam(learning_rate=1e-3, params=params))

    def step() -> None:
        under(opt.step)

    for _ in range(3):
        step()
    return step


def main(steps: int = 20) -> dict[str, float]:
    torch.set_num_threads(1)
    names = [*tensor_table.builds(), "Python"]
    medians: dict[str, list[float]] = {name: [] for name in names}
    kept = []  # (every round's tensors alive to the end: see bench_faces.measure_faces)
    for n in COUNTS:  # (the contenders of a round are made one after another, each under its own build)
        generator = torch.Generator().manual_seed(n)
        contenders = {name: _contender(n, None if name == "Python" else name, generator) for name in names}
        times: dict[str, list[float]] = {name: [] for name in contenders}
        order = list(contenders)
        for _ in range(steps):
            for name in order:  # (the order turns each step: no contender always runs after the same one)
                started = time.thread_time()
                contenders[name]()
                times[name].append(time.thread_time() - started)
            order.append(order.pop(0))
        for name, seconds in times.items():
            medians[name].append(statistics.median(seconds))
        kept.append(contenders)
    slopes = {name: bench_faces._slope_us(COUNTS, seconds) for name, seconds in medians.items()}
    line = ", ".join(f"{name} {slope:.2f}" for name, slope in slopes.items())
    ratio = slopes["wheel"] / slopes["source"] if {"wheel", "source"} <= set(slopes) else None
    code = {name: text_digest(tensor_table._builds[name][0].__file__) for name in tensor_table.builds()}
    same = len(set(code.values())) == 1 if len(code) > 1 else None
    print(f"torch {torch.__version__}: us per tensor (CPU time): {line}"
          + (f"; wheel / source = {ratio:.3f}" if ratio is not None else "")
          + ("" if same is None else f"; machine code (.text) {'identical' if same else 'DIFFERENT'}"))
    print(json.dumps({"torch": torch.__version__, "slopes_us": slopes, "wheel_over_source": ratio,
                      "same_text": same}))
    return slopes


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
