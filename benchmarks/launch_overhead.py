#!/usr/bin/env python3
"""The host's Python per Triton launch, both routes, on the CPU: ``python benchmarks/launch_overhead.py``.

No GPU is needed: the rule kernels are compiled for a Hopper target and launched through Triton's own
``JITFunction.run`` with a stand-in driver (``tests/_hopper_driver.py``) whose launcher does nothing. So the
figures are the Python a launch costs before the launcher (Triton's binding, specialisation and cache lookup on
the normal route; slotopt's key and dict lookup on the prepared one), without the C launcher's own work
(argument extraction and ``cuLaunchKernel``, a few microseconds on a device, the same on both routes). The
routes alternate round by round (same-run ratios), each timed by the wall clock and by the process's CPU time
(less sensitive to a shared machine); ``uptime`` is printed with them.

    python benchmarks/launch_overhead.py [--rules sgd adam ...] [--rounds 7] [--launches 2000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rules", nargs="*", default=["sgd", "keras_momentum", "adam", "apply_rmsprop", "adagrad"])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--launches", type=int, default=2000)
    args = parser.parse_args(argv)
    os.environ["TRITON_INTERPRET"] = "1"  # (to record apply's real arguments first)
    sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests" / "kernels"), str(ROOT / "tests")]
    import test_native_kernels as cases
    import torch
    from _hopper_driver import HopperWithoutADevice, Launcher
    from triton.runtime.driver import driver

    from slotopt.kernels import triton as triton_path
    from slotopt.kernels.triton import launcher, rules

    cases.SIZES = [1024, 7, 1500]
    recorded = {}
    for name, kernel, roles, kwargs in cases.CASES:
        if name in args.rules and name not in recorded:
            lists = cases._make_lists(roles, torch.float32, seed=1)
            with triton_path.recording() as launches:
                assert triton_path.apply(kernel.rule, lists, kernel.scalar_vector(*lists, **kwargs)), name
            recorded[name] = (kernel.rule, *launches[0][1:])
    os.environ["TRITON_INTERPRET"] = "0"
    built = rules.build()
    driver.set_active(HopperWithoutADevice(loaded=True))  # (kept to the end: Triton unloads its modules through it)
    Launcher.record = False
    print(f"load: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    print("| rule | kernel[grid](...) us | prepared us | ratio | CPU us normal | CPU us prepared | ratio |\n"
          "| --- | --- | --- | --- | --- | --- | --- |")
    try:
        for name, (rule, grid, arguments, options) in recorded.items():
            kernel = rules.generated(rule, built)
            launcher.launch(kernel, grid, arguments, options)  # compiles for Hopper (once: Triton's disk cache)
            wall: dict[bool, list[float]] = {False: [], True: []}
            cpu: dict[bool, list[float]] = {False: [], True: []}
            for _ in range(args.rounds):
                for route in (False, True):
                    launcher.configure(route, forget=False)
                    began, began_cpu = time.perf_counter(), time.process_time()
                    for _ in range(args.launches):
                        launcher.launch(kernel, grid, arguments, options)
                    cpu[route].append((time.process_time() - began_cpu) * 1e6 / args.launches)
                    wall[route].append((time.perf_counter() - began) * 1e6 / args.launches)
            normal, prepared = (statistics.median(wall[r]) for r in (False, True))
            normal_cpu, prepared_cpu = (statistics.median(cpu[r]) for r in (False, True))
            print(f"| {name} | {normal:.2f} | {prepared:.2f} | {normal / prepared:.1f}x | {normal_cpu:.2f} | "
                  f"{prepared_cpu:.2f} | {normal_cpu / prepared_cpu:.1f}x |")
    finally:
        launcher.configure(None)
    print(f"load: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
