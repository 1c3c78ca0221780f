"""The device check's ``launch`` section (issue 48; ``benchmarks/gpu_check.py`` runs it): the prepared Triton
launch (``slotopt.kernels.triton.launcher``) against Triton's normal route, ``kernel[grid](...)``.

For the first case of every dense Triton rule (the compiled rules' test cases), float32 and float64, on a group
of four tensors (1, 7, 1,500 and 40,000 elements):

* bits: two copies of the same group step ``--kernel-steps`` times (at least 3) through ``triton.apply``, one with
  the prepared route off (``launcher.configure(False)``), one with it on; every tensor must have the same bits,
  and the second copy's launches after its first must have taken the prepared route (counted by
  ``launcher.stats``);
* host time: one launch of the rule recorded (``triton.recording``) on a group of two tensors (1,024 and 7
  elements: the device keeps up with the host), then issued again and again both ways in interleaved rounds, host
  microseconds per launch (median of the rounds, the device synchronised between rounds, not inside); and the
  whole ``triton.apply`` call both ways (its checks, table lookup and pins included).

On the CPU (``--device cpu --dry``) the interpreter runs: every launch takes the normal route (the prepared one
is for compiled kernels), so the bits compare the normal route with itself and the times are the interpreter's;
the section says so.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent


def _rounds_us(fns: dict[str, tuple[Callable[[], Any], Callable[[], Any]]], rounds: int, steps: int,
               sync: Callable[[], None]) -> dict[str, float]:
    """Median host microseconds per call of each function (after its setup, untimed), the functions interleaved
    round by round."""
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, (setup, fn) in fns.items():
            setup()
            sync()
            began = time.perf_counter()
            for _ in range(steps):
                fn()
            samples[name].append((time.perf_counter() - began) * 1e6 / steps)
    sync()
    return {name: statistics.median(values) for name, values in samples.items()}


def _host_times(rule: str, recorded: tuple[Any, ...], lists: list[Any], values: Any, rounds: int, per_round: int,
                sync: Callable[[], None]) -> dict[str, float]:
    """Host microseconds per launch and per ``triton.apply`` call, the prepared route off and on, interleaved."""
    from slotopt.kernels import triton as triton_path
    from slotopt.kernels.triton import launcher

    jit, grid, arguments, options = recorded

    def route(on: bool) -> Callable[[], None]:
        return lambda: launcher.configure(on, forget=False)  # (the prepared launches kept for the next round)

    def launch() -> None:
        launcher.launch(jit, grid, arguments, options)

    def step() -> None:
        triton_path.apply(rule, lists, values)

    return _rounds_us({"normal_us": (route(False), launch), "prepared_us": (route(True), launch),
                       "apply_normal_us": (route(False), step), "apply_prepared_us": (route(True), step)},
                      rounds, per_round, sync)


def _same_bits(a: Any, b: Any) -> bool:
    import torch

    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    view = {4: torch.int32, 8: torch.int64}[a.element_size()]
    return bool(torch.equal(a.detach().cpu().view(view), b.detach().cpu().view(view)))


def section_launch(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    sys.path[:0] = [str(ROOT / "tests" / "kernels"), str(ROOT / "tests")]  # the cases, and the helpers they import
    import test_native_kernels as cases

    from slotopt.kernels import triton as triton_path
    from slotopt.kernels.triton import launcher

    device = torch.device(args.device)
    on_device = args.device == "cuda"
    sync = torch.cuda.synchronize if on_device else (lambda: None)
    firsts = list({c[1].rule: c for c in reversed(cases.CASES) if c[1].rule in triton_path.RULES}.values())
    firsts.sort(key=lambda c: triton_path.RULES.index(c[1].rule))
    dtypes = (torch.float32, torch.float64)
    steps = max(3, args.kernel_steps)
    rounds, per_round = (7, 300) if on_device else (1, 1)
    # (the timed group: two tensors, as the compared one, not 16-aligned in size either, so that the kernel the
    # comparison compiled serves: no compile of its own; one tensor would be T == 1, another specialisation)
    sizes, timed_sizes = [1, 7, 1500, 40_000], [1024, 7]
    if args.dry:  # every line of the section, in a second or two under the interpreter
        firsts, dtypes, steps, sizes, timed_sizes = firsts[:2], (torch.float32,), 3, [1, 7, 33], [64, 7]
    rows, bad = [], []
    try:
        for name, kernel, roles, kwargs in firsts:
            for dtype in dtypes:
                row: dict[str, Any] = {"rule": kernel.rule, "case": name, "dtype": str(dtype)[6:]}
                cases.SIZES = sizes
                start = cases._make_lists(roles, dtype, seed=len(name))
                copies = {route: [None if ts is None else [t.to(device) for t in ts] for ts in start]
                          for route in ("normal", "prepared")}
                taken = True
                for route, lists in copies.items():
                    launcher.configure(route == "prepared")
                    values = kernel.scalar_vector(*lists, **kwargs)
                    before = launcher.stats()
                    for _ in range(steps):
                        taken = taken and triton_path.apply(kernel.rule, lists, values)
                    sync()
                    if route == "prepared":
                        row["prepared_launches"] = launcher.stats()["prepared"] - before["prepared"]
                if not taken:
                    bad.append(f"{name}/{row['dtype']}: the Triton rule declined the case")
                    continue
                row["identical"] = all(_same_bits(a, b) for xs, ys in zip(copies["normal"], copies["prepared"])
                                       if xs is not None for a, b in zip(xs, ys))
                if not row["identical"]:
                    bad.append(f"{name}/{row['dtype']}: the prepared route's bits differ from the normal route's")
                if on_device and row["prepared_launches"] != steps - 1:
                    bad.append(f"{name}/{row['dtype']}: {row['prepared_launches']} of {steps - 1} launches "
                               "took the prepared route")
                # host time per launch, both ways, on a group the device keeps up with
                cases.SIZES = timed_sizes
                small = [None if ts is None else [t.to(device) for t in ts]
                         for ts in cases._make_lists(roles, dtype, seed=1)]
                values = kernel.scalar_vector(*small, **kwargs)
                launcher.configure(True)
                with triton_path.recording() as recorded:
                    triton_path.apply(kernel.rule, small, values)
                (jit, grid, arguments, options), = recorded
                launcher.launch(jit, grid, arguments, options)  # (prepared, where it can be, from here on)

                timed = _host_times(kernel.rule, (jit, grid, arguments, options), small, values, rounds, per_round,
                                    sync)
                row.update({k: round(v, 2) for k, v in timed.items()})
                rows.append(row)
    finally:
        launcher.configure(None)
    identical = sum(1 for r in rows if r["identical"])
    if rows:
        normal = statistics.median(r["normal_us"] for r in rows)
        prepared = statistics.median(r["prepared_us"] for r in rows)
        times = (f"host us per launch (median over rules): normal {normal:.1f}, prepared {prepared:.1f} "
                 f"({normal / prepared:.1f}x)")
    else:
        times = "no rows"
    where = ("" if on_device else "; interpreter: the normal route both ways (the prepared route needs a device), "
             "times are the interpreter's")
    return {"ok": not bad, "summary": f"{identical}/{len(rows)} rule variants bit-identical prepared vs normal; "
            f"{times}{where}", "failures": bad, "rows": rows}


def markdown(results: dict[str, dict[str, Any]]) -> list[str]:
    rows = results.get("launch", {}).get("rows", [])
    if not rows:
        return []
    lines = ["", "Triton launch: the prepared route (the compiled kernel's launcher called directly) against "
             "`kernel[grid](...)`, host us per launch and per `triton.apply` call (two tensors, 1,031 elements):", "",
             "| rule | dtype | bit-identical | prepared launches | normal us | prepared us | apply normal us | "
             "apply prepared us |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['rule']} | {r['dtype']} | {r['identical']} | {r['prepared_launches']} | "
                     f"{r['normal_us']:.1f} | {r['prepared_us']:.1f} | {r['apply_normal_us']:.1f} | "
                     f"{r['apply_prepared_us']:.1f} |")
    return lines
