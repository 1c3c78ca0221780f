"""The device check's ``layout`` section (issue 48, small tensors; ``benchmarks/gpu_check.py`` runs it): which launch
table layout and chunking the multi-tensor Triton kernels should take, by device time alone.

On 2,000 tensors of 1,024 (SGD momentum and Adam), and on one 4096x4096 tensor and the 150-tensor model (Adam and
SGD momentum, so that no choice loses the large tensors' speed), each of these against torch's fused optimizer and
a device copy of the bytes the update moves (the floor), interleaved in one run:

* ``step rows`` / ``step table``: slotopt's ``opt.step()`` with the launch table in each layout
  (``kernels.triton.table``: ``rows``, each program's row holding its count and its operands' addresses, one
  memory round trip before the data; ``table``, a meta row then the address table, two);
* ``step staged`` (small tensors only): the step as it was before issue 48's fix, the packed small variables
  staged through flat buffers (three multi-tensor copies a step) before the one launch;
* ``kernel <layout> <block>x<warps>`` (small tensors only): the rule's launch alone (``kernels.triton.apply`` on
  prepared lists), in each layout and a few chunk x warps choices: the kernel's device time without the step's
  other work.

Each row also gives the kernels and copies per step the profiler counts (a staged step shows its copies there).
The default (``table.layout()``, rows) is justified in ``kernels/triton/table.py``; this section says whether it
was the fastest on this device (``best`` per case, and ``default_vs_best``). Every choice gives the same bits (the
interpreter tests, and the ``kernels`` section on the device). On the CPU (``--dry``) every contender runs once
under the interpreter (the steps take the compiled CPU rules there) and times the host.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter
from typing import Any, Callable

#: The (workload, rule) cases, the small tensors first (the question of the section).
CASES = (("small", "SGD momentum"), ("small", "Adam"), ("large", "Adam"), ("large", "SGD momentum"),
         ("model", "Adam"), ("model", "SGD momentum"))
#: The kernel-alone choices on small tensors: (layout, block, warps).
KERNEL_CHOICES = (("rows", 1024, 4), ("rows", 512, 4), ("rows", 1024, 8), ("rows", 2048, 4), ("table", 1024, 4))
#: Elements each update moves per parameter element (reads + writes): the floor's bytes.
TRAFFIC = {"Adam": 7, "SGD momentum": 5}


def _kernel_lists(rule: str, shapes: list[tuple[int, ...]], device: str) -> tuple[str, list[Any], list[float]]:
    """The compiled rule's lists and scalar vector for ``rule`` on fresh tensors (what the step hands the kernel:
    the variables, the gradients and the state)."""
    import torch

    from slotopt.kernels.adam import adam
    from slotopt.kernels.sgd import keras_momentum

    def fresh() -> list[Any]:
        return [torch.randn(s, device=device) for s in shapes]

    if rule == "Adam":
        lists = [fresh(), fresh(), fresh(), [t.abs() for t in fresh()], None]
        values = adam.scalar_vector(*lists, alpha=1e-3, one_minus_beta_1=0.1, one_minus_beta_2=0.001, epsilon=1e-7)
        return adam.rule, lists, values
    lists = [fresh(), fresh(), fresh()]
    values = keras_momentum.scalar_vector(*lists, lr=0.01, momentum=0.9, nesterov=False)
    return keras_momentum.rule, lists, values


def _kernels(fn: Callable[[], Any], device: str, steps: int = 3) -> tuple[float, dict[str, float]]:
    """Kernels and copies on the device per step, in all and by name (the most frequent), as the profiler sees
    them (none on the CPU)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    if device != "cuda":
        return 0.0, {}
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()
    names = Counter(e.name[:60] for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    return sum(names.values()) / steps, {name: count / steps for name, count in names.most_common(6)}


def section_layout(args: argparse.Namespace, workloads: dict[str, list[tuple[int, ...]]],
                   factory: Callable[[str], Callable[..., Any]], torch_optimizer: Callable[..., tuple[str, Any]],
                   device_time: Callable[[Callable[[], Any], int], float],
                   host_time: Callable[[Callable[[], Any], int, str], float]) -> dict[str, Any]:
    import torch

    from slotopt.kernels import triton as triton_path
    from slotopt.kernels.triton import table

    device = args.device
    steps, repeats = (2, 1) if args.dry else (20, 3)
    rows, bad, cut = [], [], ""
    began = time.perf_counter()
    default = table.layout()

    def chosen(layout: str, block: Any, warps: int, fn: Callable[[], Any]) -> Callable[[], Any]:
        def run() -> Any:  # (the layout is read when a table is made or looked up: set for each call)
            table.configure(block, warps, layout=layout)
            return fn()
        return run

    try:
        for workload, rule in CASES:
            if time.perf_counter() - began > args.layout_seconds:
                cut = f"stopped at {args.layout_seconds:g} s, before {workload}/{rule}"
                break
            shapes = workloads[workload]
            elements = sum(torch.Size(s).numel() for s in shapes)
            contenders: dict[str, Callable[[], Any]] = {}
            try:
                for layout in table.LAYOUTS:
                    params = [torch.nn.Parameter(torch.randn(s, device=device)) for s in shapes]
                    for p in params:
                        p.grad = torch.randn_like(p)
                    contenders[f"step {layout}"] = chosen(layout, None, 4, factory(rule)(params).step)
                if workload == "small":
                    params = [torch.nn.Parameter(torch.randn(s, device=device)) for s in shapes]
                    for p in params:
                        p.grad = torch.randn_like(p)
                    opt = factory(rule)(params)

                    def staged(opt: Any = opt) -> None:  # forgets, each step, that Triton took the rule
                        flat = opt.__dict__.get("_flat_state")
                        if flat is not None:
                            flat.__dict__.pop("_direct", None)
                        opt.step()

                    contenders["step staged"] = chosen(default, None, 4, staged)
                    name, lists, values = _kernel_lists(rule, shapes, device)
                    for layout, block, warps in KERNEL_CHOICES:
                        contenders[f"kernel {layout} {block}x{warps}"] = chosen(
                            layout, block, warps,
                            lambda n=name, ls=lists, vs=values: triton_path.apply(n, ls, vs) or bad.append(n))
                params = [torch.nn.Parameter(torch.randn(s, device=device)) for s in shapes]
                for p in params:
                    p.grad = torch.randn_like(p)
                kind, opt = torch_optimizer(rule, params)
                contenders[f"torch {kind}"] = opt.step
                source = torch.randn(TRAFFIC[rule] * elements // 2, device=device)
                target = torch.empty_like(source)
                contenders["copy"] = lambda s=source, t=target: t.copy_(s)
                for fn in contenders.values():  # warm-up: state, compiles, tables, the first (staged) step
                    for _ in range(1 if args.dry else 3):
                        fn()
                # (profiled on the small tensors only: there the launches per step differ; elsewhere a step is a
                # few launches, and each profile costs a second)
                profiled = {k: _kernels(fn, device) if workload == "small" else (0.0, {})
                            for k, fn in contenders.items()}
                names = {k: p[1] for k, p in profiled.items() if k.startswith("step") and workload == "small"}
                # no more steps queued than the device's launch queue holds (~1,000 launches): a staged step or
                # torch's fused one on 2,000 tensors launches tens of kernels
                queued = {k: max(2, min(steps, int(600 // max(p[0], 1)))) for k, p in profiled.items()}
                times: dict[str, list[float]] = {k: [] for k in contenders}
                for _ in range(repeats):  # interleaved: the same clocks for all
                    for k, fn in contenders.items():
                        times[k].append(device_time(fn, queued[k]) if device == "cuda"
                                        else host_time(fn, steps, device))
                ms = {k: statistics.median(v) for k, v in times.items()}
            finally:
                table.configure(None)
            torch_ms = next(v for k, v in ms.items() if k.startswith("torch"))
            ours = {k: v for k, v in ms.items() if k.startswith(("step", "kernel"))}
            steps_only = {k: v for k, v in ours.items() if k in ("step rows", "step table")}
            best = min(steps_only, key=steps_only.__getitem__)
            kernels_only = {k: v for k, v in ours.items() if k.startswith("kernel")}
            best_kernel = min(kernels_only, key=kernels_only.__getitem__) if kernels_only else None
            row = {"workload": workload, "rule": rule, "tensors": len(shapes), "ms": ms, "torch_ms": torch_ms,
                   "copy_ms": ms["copy"], "vs_torch": {k: v / torch_ms for k, v in ours.items()},
                   "best_step": best, "best_kernel": best_kernel, "default": f"step {default}",
                   "default_vs_best": ms[f"step {default}"] / ms[best], "kernels_per_step": names,
                   "launches": {k: p[0] for k, p in profiled.items()}}
            rows.append(row)
            print(f"  {workload:6} {rule:13} " + ", ".join(f"{k} {v:.4f}" for k, v in ms.items())
                  + f"; best step: {best}", flush=True)
            del contenders
            if device == "cuda":
                torch.cuda.empty_cache()
    except Exception as error:  # (one failing case: reported, the rows so far kept)
        bad.append(f"{type(error).__name__}: {error}"[:300])
    summary = "; ".join(f"{r['workload']}/{r['rule']}: step rows {r['vs_torch']['step rows']:.2f}x torch, "
                        f"table {r['vs_torch']['step table']:.2f}x, best {r['best_step']}"
                        + (f" (kernel alone: {r['best_kernel']})" if r["best_kernel"] else "") for r in rows)
    if cut:
        summary = f"{summary}; {cut}"
    return {"ok": bool(rows) and not bad, "summary": summary or "nothing timed", "failures": bad, "rows": rows}


def markdown(results: dict[str, dict[str, Any]]) -> list[str]:
    """The section's table for ``gpu_check.md``: ms per step (device time alone) of each contender."""
    rows = results.get("layout", {}).get("rows", [])
    if not rows:
        return []
    names = list(dict.fromkeys(k for r in rows for k in r["ms"]))
    default = rows[0]["default"]
    lines = ["", f"Launch table layouts and chunking (device time alone, ms per step; x: against torch; the default: "
             f"{default}):", "", "| workload | rule | " + " | ".join(names) + " |",
             "| --- | --- | " + " | ".join("---" for _ in names) + " |"]
    for r in rows:
        cells = []
        for n in names:
            if n not in r["ms"]:
                cells.append("–")
                continue
            ratio = f" ({r['vs_torch'][n]:.2f}x)" if n in r["vs_torch"] else ""
            cells.append(f"{r['ms'][n]:.4f}{ratio}")
        lines.append(f"| {r['workload']} | {r['rule']} | " + " | ".join(cells) + " |")
    for r in rows:
        for step, kernels in r["kernels_per_step"].items():
            if not kernels:  # (the CPU: no device kernels)
                continue
            lines.append(f"- {r['workload']}/{r['rule']} {step}: kernels per step "
                         + ", ".join(f"{k} x{v:g}" for k, v in kernels.items()))
    return lines
