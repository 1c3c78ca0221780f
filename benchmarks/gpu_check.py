#!/usr/bin/env python3
"""The device check of slotopt's CUDA path, in one command (issue 41): ``python benchmarks/gpu_check.py``.

On a machine with a CUDA GPU, torch and Triton installed and no network, in the repository's root:

1. ``info``: torch, Triton, the device, and ``slotopt info``'s CUDA line;
3. ``cuda tests``: the ``cuda``-marked tests (``pytest -m cuda``);
4. ``kernels``: every Triton rule on the device against the foreach rule on the CPU, bit for bit;
5. ``parity``: every optimizer (Keras 3, tf.keras legacy, TF1) stepping on the device against the CPU foreach
   path, bit for bit, over ``--parity-steps`` steps (100), float32 and float64;
6. ``sync``: ``step()`` under ``torch.cuda.set_sync_debug_mode("error")``;
7. ``tune``: a few Triton chunk/warps choices (``kernels.triton.configure``) for Adam and SGD momentum on the
   large and model workloads, by device time (at most ``--tune-seconds``, 60);
8. ``timing``: Adam, AdamW, SGD momentum, RMSprop and Adagrad on one 4096x4096 tensor, a 150-tensor model of
   ~30M parameters and 2,000 tensors of 1,024, each against torch's fused CUDA optimizer (its foreach one where
   torch has no fused form) and a device copy moving the bytes the update must move (the floor), as same-run
   ratios, with kernel launches per step counted by the profiler; each also by device time alone (the steps
   queued behind a sleeping kernel, so the host's time per step is hidden) and by the host's time per step;
4b. ``launch`` (issue 48, ``gpu_check_launch.py``): the prepared Triton launch (the compiled kernel's launcher
   called directly) against ``kernel[grid](...)`` for every dense rule: bit-identical results, host us per launch;
9. ``host``, ``graph``, ``sync-all`` (issue 48, ``gpu_check_host.py``): the host's time of a quiet step by part,
   CUDA graph capture and replay (torch capturable, the copy floor, slotopt's capturable step replayed against
   uncaptured steps bit for bit, and a refusal by name), every optimizer under ``set_sync_debug_mode("error")``;
10. ``layout`` (issue 48, ``gpu_check_layout.py``): the launch table's layouts and chunking on 2,000 tensors of
   1,024 (and on the large tensor and the model), slotopt's step and its kernel alone against torch fused;
11. ``install``: ``pip install --no-deps --no-build-isolation -e .`` last (the sections above import the tree's
   ``src`` whether installed or not; a failed build of an optional extension is tolerated).

Each section runs on its own: one that fails prints its error and the others still run. One table at the end;
with ``$OUT`` set, ``gpu_check.md`` and ``gpu_check.json`` are written there. ``--quick`` cuts steps and sizes;
``--device cpu --dry`` runs every section's code on the CPU in seconds (Triton's interpreter for the kernels),
which is how the test suite checks this script.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
#: In the order they run: the cheapest answers first, so that a run cut short still says the most.
SECTIONS = ("info", "kernels", "launch", "libm", "sync", "layout", "host", "graph", "sync-all", "tune", "timing",
            "parity", "cuda-tests", "install")


def _log(message: str) -> None:
    print(message, flush=True)


# ------------------------------------------------------------------------------------------ install, info
def section_install(args: argparse.Namespace) -> dict[str, Any]:
    command = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", "-e", "."]
    left = args.budget + 60 - (time.perf_counter() - args.started)  # last: whatever time the run has left
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                          timeout=max(10.0, min(args.install_timeout, left)))
    tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
    # A failed install still leaves the tree importable from src (the compiled kernels may then be missing).
    return {"ok": done.returncode == 0, "summary": f"pip rc={done.returncode}: {' / '.join(tail)}"}


def section_info(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from slotopt.kernels import native
    from slotopt.kernels import triton as triton_path

    try:
        import triton

        triton_version = triton.__version__
    except Exception as error:  # a missing or broken Triton is what this line reports
        triton_version = f"not importable ({error})"
    device = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    state = native.status()
    summary = (f"torch {torch.__version__}, triton {triton_version}, {device}; cpu kernels: {state['path']}; "
               f"cuda: {triton_path.status()}")
    return {"ok": True, "summary": summary}


def section_cuda_tests(args: argparse.Namespace) -> dict[str, Any]:
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_triton_*.py"))
    command = [sys.executable, "-m", "pytest", "-rfEs", "-p", "no:cacheprovider", "-m", "cuda", *files]
    if args.dry:  # no device: the marker's own behaviour (reported as skipped with a reason) is what runs
        command += ["-k", "launch_table or every_rule"]
    # The tree's src first: the tests run on this tree even where the install failed.
    path = os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=args.tests_timeout,
                          env={**os.environ, "PYTHONPATH": path})
    lines = (done.stdout + done.stderr).strip().splitlines()
    failures = [line for line in lines if line.startswith(("FAILED", "ERROR"))]
    return {"ok": done.returncode in (0, 5), "summary": f"pytest rc={done.returncode}: {lines[-1] if lines else ''}",
            "failures": failures[:20]}


# ------------------------------------------------------------------------------------------ helpers
def _bits(t: Any) -> Any:
    import torch

    return t.contiguous().view({4: torch.int32, 8: torch.int64, 2: torch.int16}[t.element_size()])


def _differences(expected: Any, actual: Any) -> int:
    """Elements whose bits differ (two NaNs count as equal)."""
    import torch

    actual = actual.detach().cpu()
    expected = expected.detach().cpu()
    both_nan = torch.isnan(expected) & torch.isnan(actual)
    return int(((_bits(expected) != _bits(actual)) & ~both_nan).sum())


class _gpu_form:
    """The CPU foreach rules as they run on a GPU: TensorFlow's fused float32 Adagrad/ProximalAdagrad/Adadelta take
    the CPU's rsqrtps estimate on the CPU only (``slotopt.numerics.ops``), so the reference turns it off."""

    def __enter__(self) -> None:
        from slotopt.numerics import ops

        self.saved = ops._estimate_function
        ops._estimate_function = lambda: None  # type: ignore[assignment]

    def __exit__(self, *exc: object) -> None:
        from slotopt.numerics import ops

        ops._estimate_function = self.saved  # type: ignore[assignment]


# ------------------------------------------------------------------------------------------ kernels
def section_kernels(args: argparse.Namespace) -> dict[str, Any]:
    """Every Triton rule (each case of the compiled rules' tests) on the device vs the CPU foreach rule."""
    import torch

    sys.path[:0] = [str(ROOT / "tests" / "kernels"), str(ROOT / "tests")]  # the cases, and the helpers they import
    import test_native_kernels as cases

    from slotopt.kernels import native
    from slotopt.kernels import triton as triton_path

    sizes = [1, 7, 1500] if args.dry else [1, 7, 1500, 40_000, 1 << 20]
    cases.SIZES = sizes
    device = torch.device(args.device)
    rows, bad = 0, []
    chosen = [c for c in cases.CASES if c[1].rule in triton_path.RULES]
    dtypes = (torch.float32, torch.float64)
    if args.dry:  # the test suite checks every case under the interpreter: a dry run only exercises this code
        chosen, dtypes = chosen[::4], (torch.float32,)
    # Then the first case of each rule again in the large tensors' chunking (table.LARGE: 4,096 elements in 8
    # warps), which the sizes above do not reach by themselves.
    from slotopt.kernels.triton import table

    firsts = list({c[1].rule: c for c in reversed(chosen)}.values())
    passes = [(c, None) for c in chosen] + [(c, table.LARGE) for c in firsts]
    for (name, kernel, roles, kwargs), config in passes:
        if config is not None:
            name = f"{name}@{config[0]}x{config[1]}"
        for dtype in dtypes:
            triton_path.configure(*config) if config else triton_path.configure(None)
            reference = cases._make_lists(roles, dtype, seed=len(name))
            candidate = [None if ts is None else [t.to(device) for t in ts] for ts in reference]
            previous = native.use("foreach")
            try:
                with _gpu_form():
                    for _ in range(args.kernel_steps):
                        kernel(*reference, **kwargs)
            finally:
                native.use(previous)
            values = kernel.scalar_vector(*candidate, **kwargs)
            for _ in range(args.kernel_steps):
                if not triton_path.apply(kernel.rule, candidate, values):
                    bad.append(f"{name}/{dtype}: not taken")
                    break
            differing = sum(_differences(e, a) for es, as_ in zip(reference, candidate) if es is not None
                            for e, a in zip(es, as_))
            rows += 1
            if differing:
                bad.append(f"{name}/{str(dtype)[6:]}: {differing} elements differ")
    triton_path.configure(None)
    return {"ok": not bad, "summary": f"{rows - len(bad)}/{rows} rule variants bit-identical to CPU foreach "
            f"({len(firsts) * len(dtypes)} of them in {table.LARGE[0]}x{table.LARGE[1]} chunks)",
            "failures": bad}


# ------------------------------------------------------------------------------------------ parity
def _optimizers() -> dict[str, Callable[..., Any]]:
    import torch

    import slotopt
    from slotopt import legacy, v1

    def adagrad_da(params: Any) -> Any:
        step = slotopt.Variable(torch.zeros((), dtype=torch.int64, device=params[0].device), name="global_step")
        return v1.AdagradDAOptimizer(learning_rate=0.1, global_step=step, params=params)

    return {
        "keras3 SGD": lambda p: slotopt.SGD(learning_rate=0.01, params=p),
        "keras3 SGD momentum": lambda p: slotopt.SGD(learning_rate=0.01, momentum=0.9, params=p),
        "keras3 SGD nesterov": lambda p: slotopt.SGD(learning_rate=0.01, momentum=0.9, nesterov=True, params=p),
        "keras3 Adam": lambda p: slotopt.Adam(learning_rate=1e-3, params=p),
        "keras3 Adam amsgrad": lambda p: slotopt.Adam(learning_rate=1e-3, amsgrad=True, params=p),
        "keras3 AdamW": lambda p: slotopt.AdamW(learning_rate=1e-3, weight_decay=0.01, params=p),
        "keras3 RMSprop": lambda p: slotopt.RMSprop(learning_rate=1e-3, params=p),
        "keras3 RMSprop centered momentum": lambda p: slotopt.RMSprop(learning_rate=1e-3, momentum=0.9, centered=True,
                                                                      params=p),
        "keras3 Adagrad": lambda p: slotopt.Adagrad(learning_rate=0.01, params=p),
        "keras3 Adadelta": lambda p: slotopt.Adadelta(learning_rate=1.0, params=p),
        "keras3 Adamax": lambda p: slotopt.Adamax(learning_rate=1e-3, params=p),
        "keras3 Nadam": lambda p: slotopt.Nadam(learning_rate=1e-3, params=p),
        "keras3 Ftrl": lambda p: slotopt.Ftrl(learning_rate=0.01, params=p),
        "keras3 Lion": lambda p: slotopt.Lion(learning_rate=1e-4, params=p),
        "keras3 Lamb": lambda p: slotopt.Lamb(learning_rate=1e-3, params=p),
        "keras3 Adafactor": lambda p: slotopt.Adafactor(learning_rate=1e-3, params=p),
        "keras3 Muon": lambda p: slotopt.Muon(learning_rate=1e-3, params=p),
        "keras3 ScheduleFreeAdamW": lambda p: slotopt.ScheduleFreeAdamW(learning_rate=1e-3, params=p),
        "legacy SGD momentum": lambda p: legacy.SGD(learning_rate=0.01, momentum=0.9, params=p),
        "legacy Adam": lambda p: legacy.Adam(learning_rate=1e-3, params=p),
        "legacy RMSprop centered": lambda p: legacy.RMSprop(learning_rate=1e-3, centered=True, momentum=0.5,
                                                            params=p),
        "legacy Adagrad": lambda p: legacy.Adagrad(learning_rate=0.01, params=p),
        "legacy Adadelta": lambda p: legacy.Adadelta(learning_rate=1.0, params=p),
        "legacy Adamax": lambda p: legacy.Adamax(learning_rate=1e-3, params=p),
        "legacy Nadam": lambda p: legacy.Nadam(learning_rate=1e-3, params=p),
        "legacy Ftrl": lambda p: legacy.Ftrl(learning_rate=0.01, params=p),
        "v1 GradientDescent": lambda p: v1.GradientDescentOptimizer(learning_rate=0.01, params=p),
        "v1 Momentum nesterov": lambda p: v1.MomentumOptimizer(learning_rate=0.01, momentum=0.9, use_nesterov=True,
                                                               params=p),
        "v1 Adam": lambda p: v1.AdamOptimizer(learning_rate=1e-3, params=p),
        "v1 Adagrad": lambda p: v1.AdagradOptimizer(learning_rate=0.01, params=p),
        "v1 Adadelta": lambda p: v1.AdadeltaOptimizer(learning_rate=1.0, params=p),
        "v1 RMSProp": lambda p: v1.RMSPropOptimizer(learning_rate=1e-3, momentum=0.5, centered=True, params=p),
        "v1 Ftrl": lambda p: v1.FtrlOptimizer(learning_rate=0.01, params=p),
        "v1 ProximalGradientDescent": lambda p: v1.ProximalGradientDescentOptimizer(
            learning_rate=0.01, l1_regularization_strength=1e-3, l2_regularization_strength=1e-3, params=p),
        "v1 ProximalAdagrad": lambda p: v1.ProximalAdagradOptimizer(
            learning_rate=0.01, l1_regularization_strength=1e-3, l2_regularization_strength=1e-3, params=p),
        "v1 AdagradDA": adagrad_da,
    }


def _run_steps(make: Callable[..., Any], shapes: list[tuple[int, ...]], dtype: Any, device: Any, steps: int,
               seed: int) -> list[Any]:
    import torch

    generator = torch.Generator().manual_seed(seed)
    params = [torch.nn.Parameter(torch.randn(s, generator=generator, dtype=dtype).to(device)) for s in shapes]
    opt = make(params)
    for _ in range(steps):
        for p in params:  # the same gradients on both sides: drawn on the CPU
            p.grad = torch.randn(p.shape, generator=generator, dtype=dtype).to(device)
        opt.step()
    return [p.detach().cpu() for p in params]


def section_parity(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from slotopt.kernels import native
    from slotopt.kernels import triton as triton_path

    # Small tensors (packed into one group buffer by the engine) and larger ones (the multi-tensor table).
    shapes = [(1,), (7,), (33, 45)] if args.dry else [(1,), (7,), (33, 45), (300, 200), (64, 1024)]
    steps = 2 if args.dry else args.parity_steps
    bad, rows, table = [], 0, []
    for name, make in _optimizers().items():
        for dtype in (torch.float32,) if args.dry else (torch.float32, torch.float64):
            rows += 1
            label = f"{name}/{str(dtype)[6:]}"
            try:
                previous = native.use("foreach")
                try:
                    with _gpu_form():
                        expected = _run_steps(make, shapes, dtype, "cpu", steps, seed=len(name))
                finally:
                    native.use(previous)
                before = triton_path.launches()
                if args.device == "cpu":  # (a dry run: the same path twice, to exercise this code)
                    previous = native.use("foreach")
                    try:
                        with _gpu_form():
                            actual = _run_steps(make, shapes, dtype, "cpu", steps, seed=len(name))
                    finally:
                        native.use(previous)
                else:
                    actual = _run_steps(make, shapes, dtype, args.device, steps, seed=len(name))
                path = "triton" if triton_path.launches() > before else "foreach"
                differing = sum(_differences(e, a) for e, a in zip(expected, actual))
            except Exception as error:
                bad.append(f"{label}: {type(error).__name__}: {error}"[:300])
                continue
            table.append({"optimizer": name, "dtype": str(dtype)[6:], "path": path, "differing": differing})
            if differing:
                bad.append(f"{label} ({path}): {differing} elements differ after {steps} steps")
    return {"ok": not bad, "summary": f"{rows - len(bad)}/{rows} optimizer runs bit-identical to CPU foreach "
            f"over {steps} steps", "failures": bad, "rows": table}


# ------------------------------------------------------------------------------------------ sync
TIMED_RULES = ("Adam", "AdamW", "SGD momentum", "RMSprop", "Adagrad")


def _slotopt_factory(rule: str) -> Callable[..., Any]:
    import slotopt

    return {  # (keywords: torch's flags, ``capturable=True`` for the graph section)
        "Adam": lambda p, **kw: slotopt.Adam(learning_rate=1e-3, params=p, **kw),
        "AdamW": lambda p, **kw: slotopt.AdamW(learning_rate=1e-3, weight_decay=0.01, params=p, **kw),
        "SGD momentum": lambda p, **kw: slotopt.SGD(learning_rate=0.01, momentum=0.9, params=p, **kw),
        "RMSprop": lambda p, **kw: slotopt.RMSprop(learning_rate=1e-3, params=p, **kw),
        "Adagrad": lambda p, **kw: slotopt.Adagrad(learning_rate=0.01, params=p, **kw),
    }[rule]


def section_sync(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    if args.device != "cuda":
        return {"ok": True, "summary": "n/a on the CPU"}
    bad = []
    for rule in TIMED_RULES:
        params = [torch.nn.Parameter(torch.randn(s, device="cuda")) for s in [(1000,), (64, 1024), (10,)]]
        opt = _slotopt_factory(rule)(params)
        for p in params:
            p.grad = torch.randn_like(p)
        opt.step()  # the first step builds the state (allowed to synchronise)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            for _ in range(3):
                opt.step()
        except Exception as error:
            bad.append(f"{rule}: {type(error).__name__}: {str(error).splitlines()[0][:200]}")
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return {"ok": not bad, "summary": f"{len(TIMED_RULES) - len(bad)}/{len(TIMED_RULES)} rules step without a "
            "host-device synchronisation", "failures": bad}


# ------------------------------------------------------------------------------------------ timing
#: Elements each update moves per parameter element (reads + writes): its memory floor.
TRAFFIC = {"Adam": 7, "AdamW": 7, "SGD momentum": 5, "RMSprop": 5, "Adagrad": 5}


def _workloads(args: argparse.Namespace) -> dict[str, list[tuple[int, ...]]]:
    if args.dry:
        return {"large": [(256, 256)], "model": [(64, 64)] * 3 + [(64,)] * 3, "small": [(1024,)] * 20}
    scale = 4 if args.quick else 1
    # The model: 25 blocks of a transformer-ish stack (~30M parameters in 150 tensors).
    block = [(768, 768), (768,), (768, 768), (768,), (256, 768), (256,)]
    return {"large": [(4096 // scale, 4096)], "model": block * 25, "small": [(1024,)] * (2000 // scale)}


def _torch_optimizer(rule: str, params: list[Any]) -> tuple[str, Any]:
    import torch

    makers = {
        "Adam": lambda **k: torch.optim.Adam(params, lr=1e-3, **k),
        "AdamW": lambda **k: torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, **k),
        "SGD momentum": lambda **k: torch.optim.SGD(params, lr=0.01, momentum=0.9, **k),
        "RMSprop": lambda **k: torch.optim.RMSprop(params, lr=1e-3, **k),
        "Adagrad": lambda **k: torch.optim.Adagrad(params, lr=0.01, **k),
    }
    try:
        opt = makers[rule](fused=True)
        opt.step()  # some accept fused=True and refuse it at the first step on this device
        return "fused", opt
    except Exception:
        return "foreach", makers[rule](foreach=True)


def _timer(device: str) -> Callable[[Callable[[], Any], int], float]:
    import torch

    def time_it(fn: Callable[[], Any], steps: int) -> float:
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(steps):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / steps
        began = time.perf_counter()
        for _ in range(steps):
            fn()
        return (time.perf_counter() - began) * 1e3 / steps

    return time_it


def _device_time(fn: Callable[[], Any], steps: int) -> float:
    """Milliseconds per step on the device alone: the steps are queued behind a kernel that sleeps long enough
    for the host to queue them all, so the events time the device's work and not the host's pace (a step that
    waited for the device would show here as the host's time)."""
    import torch

    torch.cuda.synchronize()
    began = time.perf_counter()
    fn()  # the host's time for one step, to size the sleep (twice what queuing the steps takes, at 2 GHz)
    host = time.perf_counter() - began
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(int((2 * host * steps + 0.005) * 2e9))
    start.record()
    for _ in range(steps):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / steps


def _host_time(fn: Callable[[], Any], steps: int, device: str) -> float:
    """Milliseconds of the host per step (the calls alone, the device not waited for)."""
    import torch

    if device == "cuda":
        torch.cuda.synchronize()
    began = time.perf_counter()
    for _ in range(steps):
        fn()
    elapsed = time.perf_counter() - began
    if device == "cuda":
        torch.cuda.synchronize()
    return elapsed * 1e3 / steps


def _launches_per_step(fn: Callable[[], Any], device: str, steps: int = 3) -> tuple[float, float]:
    """Kernels and copies on the device per step, as the profiler counts them."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CUDA] if device == "cuda" else [ProfilerActivity.CPU]
    with profile(activities=activities) as prof:
        for _ in range(steps):
            fn()
        if device == "cuda":
            torch.cuda.synchronize()
    if device != "cuda":
        return 0.0, 0.0
    on_device = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    copies = [e for e in on_device if e.name.lower().startswith(("memcpy", "memset"))]
    return (len(on_device) - len(copies)) / steps, len(copies) / steps


#: The (elements per program, warps) choices the tune section times.
TUNE_CONFIGS = ((1024, 4), (2048, 4), (4096, 4), (4096, 8), (8192, 8), (8192, 16))


def section_tune(args: argparse.Namespace) -> dict[str, Any]:
    """Each choice of ``TUNE_CONFIGS`` for Adam and SGD momentum on the large and model workloads, by device time
    alone (every choice gives the same bits: the kernels' tests check that; this is speed only). Fresh variables
    for each: no update is applied twice to anything that matters."""
    import torch

    from slotopt.kernels import triton as triton_path
    from slotopt.kernels.triton import table

    device = args.device
    configs = TUNE_CONFIGS[:3] if args.dry else TUNE_CONFIGS
    steps = 2 if args.dry else 10
    workloads = _workloads(args)
    rows, bad, cut = [], [], ""
    began = time.perf_counter()
    try:
        for workload in ("large", "model"):
            shapes = workloads[workload]
            elements = sum(torch.Size(s).numel() for s in shapes)
            for rule in ("Adam", "SGD momentum"):
                if cut:
                    break
                triton_path.configure(None)  # the size-based choice, not the last one timed
                chosen = "x".join(map(str, table.choose(elements, len(shapes))))
                measured = []
                for block, warps in configs:
                    if time.perf_counter() - began > args.tune_seconds:
                        cut = f"stopped at {args.tune_seconds:g} s, before {workload}/{rule} {block}x{warps}"
                        break
                    triton_path.configure(block, warps)
                    params = [torch.nn.Parameter(torch.randn(s, device=device)) for s in shapes]
                    for p in params:
                        p.grad = torch.randn_like(p)
                    opt = _slotopt_factory(rule)(params)
                    for _ in range(3):  # state, compile
                        opt.step()
                    if device == "cuda":
                        ms = min(_device_time(opt.step, steps) for _ in range(3))
                    else:
                        ms = _host_time(opt.step, steps, device)
                    measured.append({"config": f"{block}x{warps}", "ms": ms})
                    del opt, params
                if measured:
                    best = min(measured, key=lambda c: c["ms"])
                    rows.append({"workload": workload, "rule": rule, "chosen": chosen, "best": best["config"],
                                 "configs": measured})
                    _log(f"  {workload:6} {rule:13} " + ", ".join(f"{c['config']} {c['ms']:.4f}" for c in measured)
                         + f"; best {best['config']}, chosen {chosen}")
    finally:
        triton_path.configure(None)
        if device == "cuda":
            torch.cuda.empty_cache()
    summary = "; ".join(f"{r['workload']}/{r['rule']}: best {r['best']} "
                        f"({min(c['ms'] for c in r['configs']):.4f} ms), chosen {r['chosen']} "
                        f"({next((c['ms'] for c in r['configs'] if c['config'] == r['chosen']), float('nan')):.4f})"
                        for r in rows)
    if cut:  # (not a failure: the choices timed so far are the answer)
        summary = f"{summary}; {cut}"
    return {"ok": bool(rows) and not bad, "summary": summary or "nothing timed", "failures": bad, "rows": rows}


def section_timing(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    device = args.device
    time_it = _timer(device)
    steps = 2 if args.dry else (10 if args.quick else args.timed_steps)
    repeats = 1 if args.dry else 5
    rows, bad = [], []
    for workload, shapes in _workloads(args).items():
        elements = sum(torch.Size(s).numel() for s in shapes)
        for rule in TIMED_RULES:
            try:
                contenders: dict[str, Callable[[], Any]] = {}
                for who in ("slotopt", "torch"):
                    params = [torch.nn.Parameter(torch.randn(s, device=device)) for s in shapes]
                    for p in params:
                        p.grad = torch.randn_like(p)
                    if who == "slotopt":
                        opt = _slotopt_factory(rule)(params)
                        kind = "slotopt"
                    else:
                        kind, opt = _torch_optimizer(rule, params)
                    contenders[who] = opt.step
                    if who == "torch":
                        torch_kind = kind
                # The floor: a copy moving the bytes the update must move (half read, half written).
                moved = TRAFFIC[rule] * elements // 2
                source = torch.randn(moved, device=device)
                target = torch.empty_like(source)
                contenders["copy"] = lambda s=source, t=target: t.copy_(s)
                for fn in contenders.values():  # warm-up: state, compiles, caches
                    for _ in range(2 if args.dry else 5):
                        fn()
                times: dict[str, list[float]] = {k: [] for k in contenders}
                for _ in range(repeats):  # interleaved: the same clocks and the same neighbours for all
                    for k, fn in contenders.items():
                        times[k].append(time_it(fn, steps))
                ms = {k: statistics.median(v) for k, v in times.items()}
                launches, copies = _launches_per_step(contenders["slotopt"], device)
                torch_launches, _ = _launches_per_step(contenders["torch"], device)
                alone = {k: ms[k] for k in contenders}
                if device == "cuda":  # no more steps queued than the device's launch queue holds (~1,000)
                    queued = max(2, min(steps, int(600 // max(launches + copies, torch_launches, 1))))
                    alone = {k: statistics.median(_device_time(fn, queued) for _ in range(repeats))
                             for k, fn in contenders.items()}
                host = _host_time(contenders["slotopt"], steps, device)
                rows.append({"workload": workload, "tensors": len(shapes), "elements": elements, "rule": rule,
                             "slotopt_ms": ms["slotopt"], "torch_ms": ms["torch"], "torch_kind": torch_kind,
                             "copy_ms": ms["copy"], "vs_torch": ms["slotopt"] / ms["torch"],
                             "vs_copy": ms["slotopt"] / ms["copy"], "launches": launches, "copies": copies,
                             "torch_launches": torch_launches, "slotopt_device_ms": alone["slotopt"],
                             "torch_device_ms": alone["torch"], "copy_device_ms": alone["copy"],
                             "device_vs_torch": alone["slotopt"] / alone["torch"],
                             "device_vs_copy": alone["slotopt"] / alone["copy"], "host_ms": host})
                _log(f"  {workload:6} {rule:13} slotopt {ms['slotopt']:.4f} ms, torch {torch_kind} "
                     f"{ms['torch']:.4f} ms, copy {ms['copy']:.4f} ms, launches {launches:g}/{torch_launches:g}; "
                     f"device alone {alone['slotopt']:.4f}/{alone['torch']:.4f}/{alone['copy']:.4f} ms, "
                     f"host {host:.4f} ms")
            except Exception as error:
                bad.append(f"{workload}/{rule}: {type(error).__name__}: {error}"[:300])
            finally:
                contenders = {}
                if device == "cuda":
                    torch.cuda.empty_cache()
    return {"ok": not bad, "summary": f"{len(rows)} timings", "failures": bad, "rows": rows}


# ------------------------------------------------------------------------------------------ report
def _markdown(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [f"## slotopt GPU check ({args.device}{', quick' if args.quick else ''}{', dry' if args.dry else ''})",
             "", "| section | ok | summary |", "| --- | --- | --- |"]
    for name, result in results.items():
        lines.append(f"| {name} | {'yes' if result.get('ok') else 'NO'} | {result.get('summary', '')} |")
    timing = results.get("timing", {}).get("rows", [])
    if timing:
        lines += ["", "| workload | rule | slotopt ms | torch ms (kind) | copy floor ms | vs torch | vs floor | "
                  "kernels/step slotopt (+ copies) / torch |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in timing:
            lines.append(f"| {r['workload']} ({r['tensors']} tensors, {r['elements']:,}) | {r['rule']} | "
                         f"{r['slotopt_ms']:.4f} | {r['torch_ms']:.4f} ({r['torch_kind']}) | {r['copy_ms']:.4f} | "
                         f"{r['vs_torch']:.2f}x | {r['vs_copy']:.2f}x | {r['launches']:g} (+{r['copies']:g}) / "
                         f"{r['torch_launches']:g} |")
    if timing and "slotopt_device_ms" in timing[0]:
        lines += ["", "Device time alone (steps queued ahead of the device; the host's pace hidden) and the host's "
                  "time per step:", "", "| workload | rule | slotopt device ms | torch device ms | copy device ms | "
                  "vs torch | vs floor | slotopt host ms/step |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in timing:
            lines.append(f"| {r['workload']} | {r['rule']} | {r['slotopt_device_ms']:.4f} | "
                         f"{r['torch_device_ms']:.4f} | {r['copy_device_ms']:.4f} | {r['device_vs_torch']:.2f}x | "
                         f"{r['device_vs_copy']:.2f}x | {r['host_ms']:.4f} |")
    tune = results.get("tune", {}).get("rows", [])
    if tune:
        names = list(dict.fromkeys(c["config"] for r in tune for c in r["configs"]))
        lines += ["", "Triton chunk x warps (device time alone, ms per step; * the size-based choice):", "",
                  "| workload | rule | " + " | ".join(names) + " |", "| --- | --- | " + " | ".join("---" for _ in names)
                  + " |"]
        for r in tune:
            ms = {c["config"]: c["ms"] for c in r["configs"]}
            lines.append(f"| {r['workload']} | {r['rule']} | " + " | ".join(
                f"{ms[n]:.4f}{'*' if n == r['chosen'] else ''}" if n in ms else "–" for n in names) + " |")
    import gpu_check_host

    lines += gpu_check_host.markdown(results)
    import gpu_check_layout

    lines += gpu_check_layout.markdown(results)
    import gpu_check_launch

    lines += gpu_check_launch.markdown(results)
    for name, result in results.items():
        for failure in result.get("failures", [])[:40]:
            lines.append(f"- {name}: {failure}")
    return "\n".join(lines) + "\n"


def _write(out: Path, results: dict[str, dict[str, Any]], args: argparse.Namespace) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_check.md").write_text(_markdown(results, args))
    (out / "gpu_check.json").write_text(json.dumps(results, indent=1, default=str))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--dry", action="store_true", help="tiny sizes, every code path, in seconds")
    parser.add_argument("--quick", action="store_true", help="fewer steps and smaller workloads")
    parser.add_argument("--only", nargs="*", choices=SECTIONS, help="run these sections only")
    parser.add_argument("--skip", nargs="*", default=[], choices=SECTIONS, help="skip these sections")
    parser.add_argument("--parity-steps", type=int, default=100)
    parser.add_argument("--graph-steps", type=int, default=100, help="replays compared bit for bit (graph)")
    parser.add_argument("--kernel-steps", type=int, default=3)
    parser.add_argument("--timed-steps", type=int, default=20)
    parser.add_argument("--install-timeout", type=int, default=300)
    parser.add_argument("--tests-timeout", type=int, default=240)
    parser.add_argument("--budget", type=float, default=420, help="seconds; later sections are skipped past it")
    parser.add_argument("--tune-seconds", type=float, default=60)
    parser.add_argument("--layout-seconds", type=float, default=45, help="the layout section's time (issue 48)")
    args = parser.parse_args(argv)
    if args.quick:
        args.parity_steps = min(args.parity_steps, 20)
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before Triton is first imported
    sections = [s for s in (args.only or SECTIONS) if s not in args.skip]
    if args.dry and not args.only:
        sections = [s for s in sections if s != "install"]
    sys.path.insert(0, str(ROOT / "src"))  # the tree itself, installed or not
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gpu_check_host as issue48  # (this folder: the sections of issue 48)
    import gpu_check_launch
    import gpu_check_layout as layouts
    import gpu_check_libm

    runners = {"install": section_install, "info": section_info, "cuda-tests": section_cuda_tests,
               "kernels": section_kernels, "parity": section_parity, "sync": section_sync, "timing": section_timing,
               "tune": section_tune, "launch": gpu_check_launch.section_launch,
               "host": lambda a: issue48.section_host(a, _workloads(a), _slotopt_factory),
               "graph": lambda a: issue48.section_graph(a, _workloads(a), _slotopt_factory, TIMED_RULES, TRAFFIC),
               "sync-all": lambda a: issue48.section_sync_all(a, _optimizers()),
               "layout": lambda a: layouts.section_layout(a, _workloads(a), _slotopt_factory, _torch_optimizer,
                                                          _device_time, _host_time),
               "libm": gpu_check_libm.section_libm}
    results: dict[str, dict[str, Any]] = {}
    out = os.environ.get("OUT")
    started = args.started = time.perf_counter()
    for name in sections:
        _log(f"== {name}")
        began = time.perf_counter()
        if began - started > args.budget:
            results[name] = {"ok": False, "summary": f"skipped: past the {args.budget:g} s budget", "seconds": 0}
            _log(f"   {results[name]['summary']}")
            continue
        try:
            result = runners[name](args)
        except Exception as error:  # one failing section must not stop the others
            traceback.print_exc()
            result = {"ok": False, "summary": f"{type(error).__name__}: {error}"[:300]}
        result["seconds"] = round(time.perf_counter() - began, 1)
        results[name] = result
        _log(f"   {'ok' if result.get('ok') else 'FAILED'} in {result['seconds']} s: {result.get('summary', '')}")
        for failure in result.get("failures", [])[:40]:
            _log(f"   - {failure}")
        if out:  # after every section: a run cut short keeps what it found
            _write(Path(out), results, args)
    report = _markdown(results, args)
    _log("\n" + report)
    if out:
        _write(Path(out), results, args)
    return 0 if all(r.get("ok") for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
