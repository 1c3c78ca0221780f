"""``slotopt bench --workload options``: what each of Keras's conveniences costs, as a multiple of the same face's
plain step (issue 46), and Adam with ``global_clipnorm=1.0`` against torch's ``clip_grad_norm_(foreach=True)`` and
fused Adam.

Every contender of a workload steps in one process, interleaved step by step in an order that rotates every round;
the figure is the median step time over the same face's plain median. ``small`` is 500 tensors of 256 floats, each
contender with its own variables; ``model`` is the 150 tensors of ``slotopt bench``'s model workload (31.5M
parameters), Keras 3 ``Adam`` only, every contender stepping the same variables (each with its own state), so that
memory holds one copy of the weights and gradients. ``gradient_accumulation_steps=2`` is timed per call (one call
in two accumulates only).

This module imports only slotopt's public API and torch, so ``benchmarks/options_bench.py`` can load it by path and
time another source tree of slotopt (the code before a change) the same way."""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Optional

import torch

__all__ = ["FACE_OPTIONS", "measure_options", "format_options", "clock"]


def clock() -> str:
    """What the figures measure: the step's CPU time on one thread, else its wall time."""
    return "CPU time of the one thread" if torch.get_num_threads() == 1 else "wall time"

_KERAS3 = {"clipnorm=1.0": {"clipnorm": 1.0}, "global_clipnorm=1.0": {"global_clipnorm": 1.0},
           "clipvalue=0.5": {"clipvalue": 0.5}, "loss_scale_factor=2.0": {"loss_scale_factor": 2.0},
           "use_ema=True": {"use_ema": True}, "weight_decay=0.01": {"weight_decay": 0.01},
           "amsgrad=True": {"amsgrad": True}, "gradient_accumulation_steps=2": {"gradient_accumulation_steps": 2}}
_INNER = {k: v for k, v in _KERAS3.items() if "loss_scale_factor" not in k}
_LEGACY = {"clipnorm=1.0": {"clipnorm": 1.0}, "global_clipnorm=1.0": {"global_clipnorm": 1.0},
           "clipvalue=0.5": {"clipvalue": 0.5}, "amsgrad=True": {"amsgrad": True}}


def _makers() -> dict[str, tuple[dict[str, dict[str, Any]], Callable[[dict[str, Any]], Callable[[Any], Any]]]]:
    import slotopt

    return {
        "Keras 3 Adam": (_KERAS3, lambda kw: lambda p: slotopt.Adam(p, learning_rate=1e-3, **kw)),
        "legacy Adam": (_LEGACY, lambda kw: lambda p: slotopt.legacy.Adam(p, learning_rate=1e-3, **kw)),
        "Keras 3 LossScaleOptimizer": (_INNER, lambda kw: lambda p: slotopt.LossScaleOptimizer(
            slotopt.Adam(p, learning_rate=1e-3, **kw))),
        "legacy LossScaleOptimizer": (_LEGACY, lambda kw: lambda p: slotopt.legacy.LossScaleOptimizer(
            slotopt.legacy.Adam(p, learning_rate=1e-3, **kw))),
        "MultiOptimizer": (_INNER, lambda kw: lambda p: slotopt.MultiOptimizer(
            slotopt.OptimizerMap(slotopt.Adam(learning_rate=1e-3, **kw)), params=p)),
    }


#: The faces and the options each has (names only: what the table lists).
FACE_OPTIONS = {"Keras 3 Adam": list(_KERAS3), "legacy Adam": list(_LEGACY),
                "Keras 3 LossScaleOptimizer": list(_INNER), "legacy LossScaleOptimizer": list(_LEGACY),
                "MultiOptimizer": list(_INNER)}

MODEL = [(512, 512)] * 24 + [(2048, 512)] * 12 + [(512, 2048)] * 12 + [(512,)] * 90 + [(2048,)] * 12


def _params(shapes: list[tuple[int, ...]], seed: int) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    params = [torch.nn.Parameter(torch.randn(s, generator=g) * 0.02) for s in shapes]
    for p in params:
        p.grad = torch.randn(p.shape, generator=g) * 0.01
    return params


def _interleaved(steppers: dict[str, Callable[[], Any]], steps: int, warmup: int) -> dict[str, float]:
    """Median seconds per call of each stepper, all of them interleaved, the order rotating every round. On one
    thread (``torch.set_num_threads(1)``), the calling thread's CPU time: on a machine shared with other work a
    step's wall time mostly measures how long the process waited for a CPU (see ``clock``)."""
    names = list(steppers)
    clock = time.thread_time if torch.get_num_threads() == 1 else time.perf_counter
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(warmup + steps):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            start = clock()
            steppers[name]()
            elapsed = clock() - start
            if r >= warmup:
                times[name].append(elapsed)
    return {n: statistics.median(t) for n, t in times.items()}


def measure_options(workloads: tuple[str, ...] = ("small", "model"), steps: int = 40, warmup: int = 5,
                    faces: Optional[list[str]] = None) -> list[dict[str, Any]]:
    """Rows ``{"workload", "face", "option", "ms", "ratio"}`` (``ratio``: to the face's plain step; the torch rows
    to torch's fused Adam)."""
    makers = _makers()
    rows: list[dict[str, Any]] = []
    for workload in workloads:
        steppers: dict[str, Callable[[], Any]] = {}
        labels: dict[str, tuple[str, str]] = {}
        chosen = (faces or list(makers)) if workload == "small" else ["Keras 3 Adam"]
        shared = _params(MODEL, 0) if workload == "model" else None
        for face in chosen:
            options, maker = makers[face]
            for option, kw in {"plain": {}, **options}.items():
                params = shared if shared is not None else _params([(256,)] * 500, len(steppers))
                steppers[f"{face}|{option}"] = maker(kw)(params).step
                labels[f"{face}|{option}"] = (face, option)
        torch_params = shared if shared is not None else _params([(256,)] * 500, 999)
        fused = torch.optim.Adam(torch_params, lr=1e-3, eps=1e-7, fused=True)

        def clipped(params: list[torch.nn.Parameter] = torch_params, opt: Any = fused) -> None:
            torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
            opt.step()

        steppers["torch|fused Adam"] = fused.step
        steppers["torch|clip_grad_norm_(foreach=True) + fused Adam"] = clipped
        labels["torch|fused Adam"] = ("torch", "fused Adam")
        labels["torch|clip_grad_norm_(foreach=True) + fused Adam"] = ("torch", "clip_grad_norm_(foreach=True) + fused Adam")
        medians = _interleaved(steppers, steps, warmup)
        for key, seconds in medians.items():
            face, option = labels[key]
            base = medians[f"{face}|plain"] if face != "torch" else medians["torch|fused Adam"]
            rows.append({"workload": workload, "face": face, "option": option, "ms": seconds * 1e3,
                         "ratio": seconds / base})
        del steppers, shared
    return rows


def format_options(rows: list[dict[str, Any]]) -> str:
    """A markdown table: one row per (face, option), one column per workload (milliseconds and × plain)."""
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    keys = list(dict.fromkeys((r["face"], r["option"]) for r in rows))
    cell = {(r["workload"], r["face"], r["option"]): r for r in rows}
    head = "| face | option | " + " | ".join(f"{w}: ms, × plain" for w in workloads) + " |"
    lines = [head, "|" + "---|" * (2 + len(workloads))]
    for face, option in keys:
        parts = []
        for w in workloads:
            r = cell.get((w, face, option))
            parts.append("–" if r is None else f"{r['ms']:.3f} ms, {r['ratio']:.2f}×")
        lines.append(f"| {face} | {option} | " + " | ".join(parts) + " |")
    return "\n".join(lines) + "\n(torch rows: × torch fused Adam)"
