"""``slotopt bench``: optimizer step time, slotopt against ``torch.optim``, in one run.

Dense workloads (float32):

* ``large``: one 4096x4096 tensor (16.8M parameters);
* ``model``: 150 tensors, 31.5M parameters, shaped like a small transformer (24x[512,512], 12x[2048,512],
  12x[512,2048], 90x[512], 12x[2048]);
* ``small``: 2000 tensors of 1024 elements (per-tensor overhead dominates).

Also ``faces`` (the per-tensor cost of a step in every face and API) and ``keras3-sparse`` (Keras 3 optimizers on
slices, as multiples of a whole-table pass and of a touched-rows pass): see ``cli/bench_faces.py``.

For Adam, AdamW, SGD with momentum, RMSprop and Adagrad it times one step of the slotopt Keras 3 class
(``build`` once, then ``apply(grads)``) and of ``torch.optim`` with ``foreach=False`` (a Python loop over
tensors), ``foreach=True`` and ``fused=True`` (where torch supports it), with the same hyperparameters.
Each number is the median over N timed steps after a warm-up. slotopt's kernels keep Keras's evaluation order
(separate multiply and add, no fused multiply-add) to match Keras bit for bit, so they do more memory passes
than torch's; the ratio columns show the price.

Sparse workload: a 1,000,000 x 64 embedding table with 1,024 rows (drawn with repetition, like a batch of
lookups) touched per step, gradients as torch sparse COO tensors (what ``nn.Embedding(sparse=True)`` gives).
Each optimizer runs in a fresh subprocess, which reports the median step time and the peak memory growth:
on the CPU the growth of the process's resident-set high-water mark (``VmHWM`` in ``/proc/self/status`` on
Linux, ``resource.getrusage(...).ru_maxrss`` elsewhere) from the moment the table and gradients exist, i.e.
optimizer state plus step temporaries. On Linux the high-water mark is first reset to the current RSS
(``/proc/self/clear_refs``), so that a peak from import or set-up time cannot hide the optimizer's; where that is
not possible, a growth smaller than the earlier peak reads as 0. Memory allocated but never written
(zero-filled pages) does not count in RSS. On CUDA
``torch.cuda.max_memory_allocated`` minus the memory allocated before the optimizer is created.

Benchmarks measure the machine they run on; numbers move with other load. They are never part of the tests.
"""

from __future__ import annotations

import gc
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Optional, TextIO

import torch

from .bench_setup import (
    FULL,
    IMPLEMENTATIONS,
    OPTIMIZERS,
    QUICK,
    SPARSE_DIM,
    SPARSE_OPTIMIZERS,
    SPARSE_ROWS,
    SPARSE_TOUCHED,
    TRAFFIC_ELEMENTS,
    WORKLOADS,
    Measurement,
    OptimizerSpec,
    Setting,
    Shapes,
)

# (the definitions live in bench_setup.py; named here too, for the callers of this module)
__all__ = ["WORKLOADS", "OPTIMIZERS", "SPARSE_OPTIMIZERS", "SPARSE_ROWS", "IMPLEMENTATIONS", "Measurement",
           "Setting", "FULL", "QUICK", "time_steps", "run_bench"]


def _slotopt_class(name: str, module: str = "slotopt") -> Optional[type]:
    import importlib

    try:
        return getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None



def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def time_steps(step: Callable[[], Any], steps: int, warmup: int, device: str = "cpu") -> list[float]:
    """Runs ``warmup`` untimed steps, then returns the duration of each of ``steps`` steps in milliseconds."""
    for _ in range(warmup):
        step()
    _sync(device)
    samples = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        _sync(device)
        samples.append((time.perf_counter() - start) * 1000.0)
    return samples


def _make_tensors(shapes: Shapes, device: str, seed: int = 0) -> tuple[list[torch.nn.Parameter], list[torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    params = [torch.nn.Parameter(torch.randn(s, generator=g).to(device)) for s in shapes]
    grads = [(torch.randn(s, generator=g) * 0.01).to(device) for s in shapes]
    return params, grads


def _torch_optimizer(spec: OptimizerSpec, params: list[torch.nn.Parameter], impl: str) -> Any:
    cls = getattr(torch.optim, spec.torch_name)
    flags = {"torch loop": {"foreach": False}, "torch foreach": {"foreach": True}, "torch fused": {"fused": True}}[impl]
    return cls(params, **spec.torch_kwargs, **flags)


def _step_function(spec: OptimizerSpec, impl: str, params: list[torch.nn.Parameter],
                   grads: list[torch.Tensor]) -> Callable[[], None]:
    """One optimizer step of ``impl``, set up (state built) but not yet run."""
    if impl.startswith("slotopt"):
        from ..kernels import native

        cls = _slotopt_class(spec.slotopt_name)
        if cls is None:
            raise LookupError(f"slotopt.{spec.slotopt_name} not available")
        opt = cls(**spec.slotopt_kwargs)
        opt.build(params)
        # "slotopt foreach": the same slotopt step with the compiled kernels switched off, for comparison.
        mode = "foreach" if impl == "slotopt foreach" else native.status()["mode"]

        def step() -> None:
            previous = native.use(mode)
            try:
                opt.apply(grads, params)
            finally:
                native.use(previous)

        return step
    opt = _torch_optimizer(spec, params, impl)

    def torch_step() -> None:
        opt.step()

    return torch_step


def _malloc_trim() -> None:
    """Returns freed heap memory to the system (glibc), so that re-touching it shows in the resident set."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _current_rss_kb() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


def step_peak_extra_mb(step: Callable[[], None], device: str = "cpu") -> float:
    """Peak memory one step allocates beyond what exists before it (temporaries), in MB; NaN if unmeasurable.

    CPU (Linux): freed heap memory is returned to the system first, the resident-set high-water mark is reset,
    and the growth of the mark during the step is what the step touched anew. CUDA: the growth of
    ``torch.cuda.max_memory_allocated``.
    """
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        step()
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - base) / 2**20
    _malloc_trim()
    if not _reset_peak_rss():
        return math.nan
    base = _current_rss_kb()
    if base < 0:
        return math.nan
    step()
    return max(_peak_rss_kb() - base, 0) / 1024


def _copy_floor_step(elements: int, device: str) -> Callable[[], Any]:
    """The memory-bandwidth floor as a step: a copy moving ``elements`` float32 through memory.

    A copy of k elements moves 3k: it reads the source, and writing the destination first reads each cache
    line into the cache (write-allocate). An in-place update writes lines it has just read, so it moves only
    its reads and writes: the copy is k = elements / 3.
    """
    count = max(elements // 3, 1)
    src = torch.ones(count, device=device)
    dst = torch.empty(count, device=device)
    return lambda: dst.copy_(src)


def _measure_dense_group(workload: str, spec: OptimizerSpec, params: list[torch.nn.Parameter],
                         grads: list[torch.Tensor], steps: int, warmup: int, device: str) -> list[Measurement]:
    """Every implementation of one (workload, optimizer) and the copy floor, interleaved step by step: each
    round times one step of each in turn (in a rotating order), so that a change of machine load during the run
    (this machine is shared) shifts all of them alike. Then each implementation's peak extra memory per step."""
    from ..kernels import native

    implementations = [i for i in IMPLEMENTATIONS if i != "slotopt foreach" or native.active()]
    results = {impl: Measurement(workload, spec.label, impl) for impl in implementations}
    step_of: dict[str, Callable[[], None]] = {}
    for p, g in zip(params, grads):
        p.grad = g
    try:
        for impl in implementations:
            try:
                step_of[impl] = _step_function(spec, impl, params, grads)
                time_steps(step_of[impl], 0, warmup, device)
            except Exception as err:  # e.g. no fused kernel for this optimizer/device
                step_of.pop(impl, None)
                m = results[impl]
                m.note = "n/a" if impl == "torch fused" else f"{type(err).__name__}: {err}"
                m.failed = impl != "torch fused" and not isinstance(err, LookupError)
        elements = sum(p.numel() for p in params) * TRAFFIC_ELEMENTS.get(spec.label, 7)
        floor = Measurement(workload, spec.label, "copy floor")
        copy = _copy_floor_step(elements, device)
        time_steps(copy, 0, 2, device)
        # Each step leaves the cache full of the lines it wrote, which the next one pays to write back: the
        # order rotates every round, so that each implementation follows each other one equally often.
        timed = [(results[impl], step) for impl, step in step_of.items()] + [(floor, copy)]
        for r in range(steps):
            for m, step in timed[r % len(timed):] + timed[:r % len(timed)]:
                m.samples += time_steps(step, 1, 0, device)
        for impl, step in step_of.items():
            m = results[impl]
            m.ms = statistics.median(m.samples)
            m.peak_mb = step_peak_extra_mb(step, device)
        floor.ms = statistics.median(floor.samples)
    finally:
        for p in params:
            p.grad = None
        step_of.clear()
        gc.collect()
    return [*results.values(), floor]


# ------------------------------------------------------------------------------------------- sparse worker
def _reset_peak_rss() -> bool:
    """Resets this process's resident-set high-water mark to its current RSS (Linux >= 4.0), if allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_rss_kb() -> int:
    """This process's resident-set high-water mark in KiB: ``VmHWM`` on Linux, else ``ru_maxrss``.

    ``ru_maxrss`` survives ``execve`` (a subprocess starts with its parent's peak), ``VmHWM`` does not.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak // 1024 if sys.platform == "darwin" else peak  # macOS reports bytes


def _sparse_worker(spec: dict[str, Any]) -> dict[str, Any]:
    """Runs one sparse measurement in this (fresh) process and returns step times and peak memory growth."""
    device, steps, warmup = spec["device"], spec["steps"], spec["warmup"]
    torch.manual_seed(0)
    rows, dim, touched = spec["rows"], spec["dim"], spec["touched"]
    table = torch.nn.Parameter(torch.empty(rows, dim, device=device).normal_(0.0, 0.01))  # in place: no temporary
    grads = []
    for _ in range(4):
        indices = torch.randint(0, rows, (1, touched), device=device)
        values = torch.randn(touched, dim, device=device) * 0.01
        grads.append(torch.sparse_coo_tensor(indices, values, (rows, dim), check_invariants=False))
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        gc.collect()
        _reset_peak_rss()
        base = _peak_rss_kb()
    kind, name, kwargs = spec["kind"], spec["name"], spec["kwargs"]
    counter = [0]
    if kind == "torch":
        opt = getattr(torch.optim, name)([table], **kwargs)

        def step() -> None:
            table.grad = grads[counter[0] % len(grads)]
            counter[0] += 1
            opt.step()
    else:
        cls = _slotopt_class(name, kind)
        if cls is None:
            return {"error": f"{kind}.{name} not available"}
        opt = cls(**kwargs)

        def step() -> None:
            opt.apply_gradients([(grads[counter[0] % len(grads)], table)])
            counter[0] += 1
    samples = time_steps(step, steps, warmup, device)
    if device == "cuda":
        peak_mb = (torch.cuda.max_memory_allocated() - base) / 2**20
    else:
        peak_mb = (_peak_rss_kb() - base) / 1024
    return {"samples": samples, "peak_mb": peak_mb}


def in_fresh_process(flag: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Runs ``python -m slotopt.cli.bench FLAG SPEC`` (a worker of this module) and returns the JSON object it
    prints last, or ``{"failed": reason}``. A fresh process starts from a fresh heap: what an earlier workload
    freed, in scattered pieces, cannot slow one contender more than another."""
    env = dict(os.environ)
    src = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.run([sys.executable, "-m", "slotopt.cli.bench", flag, json.dumps(spec)],
                          capture_output=True, text=True, env=env, timeout=1800)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"failed": f"failed: {tail}"}
    return json.loads(lines[-1])


def run_worker(flag: str, spec: dict[str, Any], fresh: bool = True) -> dict[str, Any]:
    """A worker's result: from a fresh process (``in_fresh_process``), or from this one, a failure as
    ``{"failed": reason}`` either way."""
    if fresh:
        return in_fresh_process(flag, spec)
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (as in a worker process: torch's notes on sparse tensors)
            return _WORKERS[flag](spec)
    except Exception as err:  # (reported in the table, as a worker's failure is)
        return {"failed": f"failed: {type(err).__name__}: {err}"}


def _measure_sparse(entry: tuple[str, str, str, dict[str, Any], str], steps: int, warmup: int, device: str,
                    rows: int, fresh: bool = True) -> Measurement:
    label, kind, name, kwargs, note = entry
    m = Measurement("sparse", label, kind, note=note)
    if kind != "torch" and _slotopt_class(name, kind) is None:
        m.note = f"{kind}.{name} not available yet"
        return m
    spec = {"device": device, "steps": steps, "warmup": warmup, "rows": rows, "dim": SPARSE_DIM,
            "touched": SPARSE_TOUCHED, "kind": kind, "name": name, "kwargs": kwargs}
    result = run_worker("--sparse-worker", spec, fresh)
    if "failed" in result:
        m.note, m.failed = result["failed"], True
        return m
    if "error" in result:
        m.note = result["error"]
        return m
    m.samples = result["samples"]
    m.ms = statistics.median(m.samples)
    m.peak_mb = result["peak_mb"]
    return m


# ------------------------------------------------------------------------------------------- entry point
def run_bench(quick: bool = False, png: Optional[str] = "slotopt-bench.png", device: str = "cpu",
              workloads: Optional[list[str]] = None, steps: Optional[int] = None,
              stream: TextIO = sys.stdout) -> int:
    """Runs the benchmark, prints the tables and writes the chart; returns 0, or 1 if a measurement raised."""
    if png:
        from .demo import check_writable, require

        require("matplotlib", "the benchmark chart (skip it with --no-png)")  # fail before measuring
        png = check_writable(png, "--png")
    setting = QUICK if quick else FULL
    steps = steps or setting.steps
    warmup = setting.warmup
    chosen = workloads or ["large", "model", "small", "sparse", "faces", "keras3-sparse"]
    sparse_rows = setting.sparse_rows
    print(f"slotopt bench: torch {torch.__version__}, {device}, {torch.get_num_threads()} threads, "
          f"{os.cpu_count()} CPUs, {platform.python_implementation()} {platform.python_version()}; "
          f"median of {steps} steps after {warmup} warm-up{' (quick: smaller workloads)' if quick else ''}",
          file=stream, flush=True)
    from ..kernels import native

    kernels = native.status()
    print(f"slotopt kernels: {kernels['path']} ({kernels['reason']})", file=stream, flush=True)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    if load > 0.5:
        print(f"note: the 1-minute load average is {load:.1f} before starting: other processes compete for the "
              f"{os.cpu_count()} CPUs, so expect noisy numbers", file=stream, flush=True)
    dense: list[Measurement] = []
    for workload in (w for w in chosen if w in WORKLOADS):
        params, grads = _make_tensors(setting.workloads[workload], device)
        for spec in OPTIMIZERS:
            dense += _measure_dense_group(workload, spec, params, grads, steps, warmup, device)
            print(f"  {workload:<6} {spec.label:<13} done", file=sys.stderr, flush=True)
        del params, grads
        gc.collect()
    sparse: list[Measurement] = []
    if "sparse" in chosen:
        for entry in SPARSE_OPTIMIZERS:
            sparse.append(_measure_sparse(entry, steps, warmup, device, sparse_rows, setting.fresh))
            print(f"  sparse {entry[0]:<24} done", file=sys.stderr, flush=True)
    from .bench_report import format_dense, format_sparse, plot
    if dense:
        print("\nDense step time, milliseconds per step (lower is better)", file=stream)
        print(format_dense(dense), file=stream)
        print("copy floor: a copy moving as many bytes through memory as a one-pass step must read and write "
              "(variable, gradient, state; a copy's destination is also read, write-allocate); slotopt/torch best: against torch fused, or foreach where torch has no fused kernel; "
              "MB: peak memory a step touches beyond what exists before it (temporaries), "
              + ("torch.cuda.max_memory_allocated" if device == "cuda" else "resident-set growth") + ".",
              file=stream)
    if sparse:
        print("\n" + format_sparse(sparse, sparse_rows), file=stream)
        print("peak extra MB: " + ("growth of torch.cuda.max_memory_allocated" if device == "cuda" else
              "growth of the peak resident set size (VmHWM / ru_maxrss) of "
              + ("a fresh subprocess" if setting.fresh else "this process")) +
              " once the table and gradients exist: optimizer state plus step temporaries.", file=stream)
    # These two run in fresh processes too (after the dense workloads, this process's heap is in pieces), but
    # for --quick.
    if "faces" in chosen:
        from .bench_faces import format_faces

        faces = run_worker("--faces-worker", {"steps": steps, "warmup": warmup,
                                              "counts": list(setting.face_counts)}, setting.fresh)
        print("\n" + (format_faces(faces["results"], setting.face_counts) if "results" in faces
                       else f"faces: {faces['failed']}"),
              file=stream, flush=True)
    if "keras3-sparse" in chosen:
        from .bench_faces import format_keras3_sparse

        sliced = run_worker("--keras3-sparse-worker", {"rows": sparse_rows, "steps": max(steps // 2, 3),
                                                       "warmup": min(warmup, 2)}, setting.fresh)
        print("\n" + (format_keras3_sparse(sliced["results"], sparse_rows) if "results" in sliced
                       else f"keras3-sparse: {sliced['failed']}"), file=stream, flush=True)
    if "options" in chosen:  # (asked for by name: each option of each face against its plain step, issue 46)
        from .bench_options import format_options, measure_options

        rows = measure_options(("small",) if quick else ("small", "model"), steps=steps, warmup=warmup)
        print("\nEach option against the same face's plain step (median per call; torch rows against torch's "
              "fused Adam)\n" + format_options(rows), file=stream, flush=True)
    if png and (dense or sparse):
        path = os.path.abspath(png)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        plot(dense, sparse, path, f"slotopt vs torch.optim step time ({device}, torch {torch.__version__})",
             sparse_rows, setting.workloads)
        print(f"\nChart written to {path}", file=stream, flush=True)
    return 1 if any(m.failed for m in dense + sparse) else 0


def _faces_worker(spec: dict[str, Any]) -> dict[str, Any]:
    from .bench_faces import measure_faces

    counts = tuple(spec.get("counts", ())) or None  # (the tests ask for a few tiny counts)
    return {"results": measure_faces(steps=spec["steps"], warmup=spec["warmup"], **({"counts": counts} if counts else {}))}


def _keras3_sparse_worker(spec: dict[str, Any]) -> dict[str, Any]:
    from .bench_faces import measure_keras3_sparse

    return {"results": measure_keras3_sparse(spec["rows"], touched=spec.get("touched", 1024), steps=spec["steps"],
                                             warmup=spec["warmup"])}


_WORKERS = {"--sparse-worker": _sparse_worker, "--faces-worker": _faces_worker,
            "--keras3-sparse-worker": _keras3_sparse_worker}

if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] in _WORKERS:
        import warnings

        warnings.simplefilter("ignore")  # (the worker's output is its JSON line; a warning would only be noise)
        print(json.dumps(_WORKERS[sys.argv[1]](json.loads(sys.argv[2]))))
    else:  # the command is ``slotopt bench`` (cli/command.py), which imports this module, not the reverse
        sys.exit(run_bench(quick="--quick" in sys.argv[1:]))
