"""The device check's sections for issue 48 (``benchmarks/gpu_check.py`` runs them; kept apart for its size):

* ``host``: the host's time of one quiet step split into its parts, each measured inside that step
  (``section_host``): the step's checks and bookkeeping (the step's time less its rule call), the scalars (the
  rule's generated marshalling), the launch table (found by the plan's proven addresses) and the launch (pins,
  version counters, the launch itself), against the issue's target of 30 us + 0.3 us per tensor; and the same
  step with ``capturable=True`` (the device scalars' launch and their host checks added);
* ``graph``: CUDA graph capture and replay: torch's fused optimizer with ``capturable=True`` captured and replayed
  (ms per replay) against a captured device copy of the same bytes (the floor), and slotopt's step with
  ``capturable=True`` (``engine/capture.py``) captured after warm-up steps and replayed with new gradients written
  in place, against a twin optimizer stepping uncaptured: ms per replay and whether every parameter has the same
  bits after ``--graph-steps``, and the same identity for one configuration of each other capturable face, option
  and schedule (:func:`wider_capturable`, on the device only); a refused configuration (Adam with ``clipnorm``)
  names itself. On the CPU
  (``--dry``) the capture is the interpreter's stand-in (``kernels.triton.recording``/``replay``);
* ``sync-all``: every optimizer of the parity section (and clipping by a global norm) stepping under
  ``torch.cuda.set_sync_debug_mode("error")``, on tensors of whole packets (the device ``pow``/sums apply) and
  with a ragged tensor (``pow`` then takes its host copy: a synchronisation, reported as such).

On the CPU (``--device cpu --dry``) each runs its code with the interpreter and tiny sizes; ``graph`` and
``sync-all`` report "n/a" there after building their optimizers.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, Callable

#: The host time target of a quiet step (issue 48): microseconds, fixed and per tensor.
TARGET_US, TARGET_PER_TENSOR_US = 30.0, 0.3


def _median_us(fn: Callable[[], Any], repeats: int, steps: int, sync: Callable[[], None]) -> float:
    samples = []
    for _ in range(repeats):
        sync()
        began = time.perf_counter()
        for _ in range(steps):
            fn()
        samples.append((time.perf_counter() - began) * 1e6 / steps)
        sync()
    return statistics.median(samples)


class _Parts:
    """Times spent inside the calls a quiet step makes (wrapped for a block, put back after it): the Adam rule's
    compiled wrapper (``kernels.adam.adam``: its generated scalar marshalling and the call), the Triton call
    (``native._triton_apply``), the launch table (``table.launch_table``) and the pins (``pins.pin``)."""

    def __init__(self) -> None:
        self.us = {"rule": 0.0, "triton": 0.0, "table": 0.0, "pins": 0.0}

    def _timed(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        us = self.us

        def timed(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                us[name] += (time.perf_counter() - began) * 1e6

        return timed

    def __enter__(self) -> _Parts:
        from slotopt.kernels import adam as adam_kernels
        from slotopt.kernels import native
        from slotopt.kernels.native import pins
        from slotopt.kernels.triton import table

        self.wrapped = [(adam_kernels, "adam", "rule"), (native, "_triton_apply", "triton"),
                        (table, "launch_table", "table"), (pins, "pin", "pins")]
        self.saved = [(module, name, getattr(module, name)) for module, name, _ in self.wrapped]
        for module, name, part in self.wrapped:
            setattr(module, name, self._timed(part, getattr(module, name)))
        return self

    def __exit__(self, *exc: object) -> None:
        for module, name, function in self.saved:
            setattr(module, name, function)


def section_host(args: argparse.Namespace, workloads: dict[str, list[tuple[int, ...]]],
                 factory: Callable[[str], Callable[..., Any]]) -> dict[str, Any]:
    """The host's time of one quiet Adam step, and its parts measured inside that very step (``_Parts``):
    ``checks`` the step less its rule call (the plan's proof of the step in one C++ pass, the stages'
    bookkeeping), ``scalars`` the rule call less its Triton call (the generated marshalling of the scalars),
    ``table`` the launch table found by the plan's proven addresses, ``launch`` the Triton call less its table
    (the pins, the version counters and the launch itself; ``pins`` of it on its own). On the CPU (``--dry``) the
    step takes the Triton route under the interpreter (``native.use("triton")``), the kernel's own time included
    in ``launch``."""
    import torch

    from slotopt.kernels import native

    device = args.device
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    steps, repeats = (2, 1) if args.dry else (50, 5)
    rows, bad = [], []
    route = native.use("triton") if device == "cpu" else None  # (CPU tensors through Triton's interpreter)
    try:
        for workload, shapes in workloads.items():
            try:
                params = [torch.nn.Parameter(torch.randn(s, device=device)) for s in shapes]
                for p in params:
                    p.grad = torch.randn_like(p)
                opt = factory("Adam")(params)
                for _ in range(3):  # state, compile, the plan proven, the table made: a quiet step from here on
                    opt.step()
                step_us = _median_us(opt.step, repeats, steps, sync)
                with _Parts() as parts:
                    began = time.perf_counter()
                    for _ in range(steps):
                        opt.step()
                    sync()
                    wrapped_us = (time.perf_counter() - began) * 1e6 / steps
                us = {name: value / steps for name, value in parts.us.items()}
                table_us, pins_us = us["table"], us["pins"]
                scalars_us = max(0.0, us["rule"] - us["triton"])
                launch_us = max(0.0, us["triton"] - table_us)
                checks_us = max(0.0, wrapped_us - us["rule"])
                target = TARGET_US + TARGET_PER_TENSOR_US * len(shapes)
                # the same step with capturable=True: its host adds the device scalars' launch and their checks
                captured = factory("Adam")(params, capturable=True)
                for _ in range(3):
                    captured.step()
                capturable_us = _median_us(captured.step, repeats, steps, sync)
                rows.append({"workload": workload, "tensors": len(shapes), "step_us": step_us,
                             "checks_us": checks_us, "table_us": table_us, "scalars_us": scalars_us,
                             "launch_us": launch_us, "pins_us": pins_us, "capturable_step_us": capturable_us,
                             "target_us": target, "meets": step_us <= target})
                print(f"  {workload:6} step {step_us:.1f} us: checks {checks_us:.1f}, table {table_us:.1f}, "
                      f"scalars {scalars_us:.1f}, launch {launch_us:.1f} (pins {pins_us:.1f}) (target "
                      f"{target:.1f}); capturable step {capturable_us:.1f} us", flush=True)
                del opt, captured, params
            except Exception as error:
                bad.append(f"{workload}: {type(error).__name__}: {error}"[:300])
    finally:
        if route is not None:
            native.use(route)
    summary = "; ".join(f"{r['workload']}: {r['step_us']:.1f} us ({'meets' if r['meets'] else 'misses'} "
                        f"{r['target_us']:.1f})" for r in rows)
    return {"ok": bool(rows) and not bad, "summary": summary or "nothing timed", "failures": bad, "rows": rows}


def _replay_ms(graph: Any, steps: int) -> float:
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    graph.replay()
    torch.cuda.synchronize()
    start.record()
    for _ in range(steps):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / steps


def section_graph(args: argparse.Namespace, workloads: dict[str, list[tuple[int, ...]]],
                  factory: Callable[[str], Callable[..., Any]], rules: tuple[str, ...],
                  traffic: dict[str, int]) -> dict[str, Any]:
    import torch

    import slotopt
    from slotopt.engine import capture

    device = args.device
    rows, bad = [], []
    refused = capture.refusal(slotopt.Adam([torch.nn.Parameter(torch.ones(2))], clipnorm=1.0)) or "(none)"
    if device != "cuda":  # the interpreter's stand-in for a graph: the replayed launches against steps run anew
        for rule in rules:
            row = {"workload": "tiny", "rule": rule, **_slotopt_replay(factory(rule), [(5,), (33,)], device, 3)}
            rows.append(row)
            if not row["identical"]:
                bad.append(f"{rule}: a replayed slotopt step differs from the step run anew")
        return {"ok": not bad, "summary": f"n/a on the CPU (no CUDA graph); replayed launches under the "
                f"interpreter: {sum(r['identical'] for r in rows)}/{len(rows)} identical; a refusal: {refused[:80]}",
                "failures": bad, "rows": rows, "refused": refused}
    steps = args.graph_steps
    for workload, shapes in workloads.items():
        elements = sum(torch.Size(s).numel() for s in shapes)
        for rule in rules:
            try:
                row: dict[str, Any] = {"workload": workload, "rule": rule}
                # torch, capturable, captured and replayed
                params = [torch.nn.Parameter(torch.randn(s, device=device)) for s in shapes]
                for p in params:
                    p.grad = torch.randn_like(p)
                makers = {"Adam": lambda ps: torch.optim.Adam(ps, lr=1e-3, capturable=True),
                          "AdamW": lambda ps: torch.optim.AdamW(ps, lr=1e-3, weight_decay=0.01, capturable=True),
                          "SGD momentum": lambda ps: torch.optim.SGD(ps, lr=0.01, momentum=0.9),
                          "RMSprop": lambda ps: torch.optim.RMSprop(ps, lr=1e-3, capturable=True),
                          "Adagrad": lambda ps: torch.optim.Adagrad(ps, lr=0.01)}
                opt = makers[rule](params)
                stream = torch.cuda.Stream()
                stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(stream):
                    for _ in range(3):
                        opt.step()
                torch.cuda.current_stream().wait_stream(stream)
                graph = torch.cuda.CUDAGraph()
                try:
                    with torch.cuda.graph(graph):
                        opt.step()
                    row["torch_replay_ms"] = _replay_ms(graph, steps)
                except Exception as error:
                    row["torch_replay_ms"] = None
                    row["torch_error"] = f"{type(error).__name__}: {error}"[:160]
                del graph, opt, params
                # the floor: a captured copy of the bytes the update moves
                moved = traffic[rule] * elements // 2
                source, target = torch.randn(moved, device=device), torch.empty(moved, device=device)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    target.copy_(source)
                row["copy_replay_ms"] = _replay_ms(graph, steps)
                del graph, source, target
                # slotopt: capturable, captured, replayed against uncaptured steps
                row.update(_slotopt_replay(factory(rule), shapes, device, steps))
                if not row["identical"]:
                    bad.append(f"{workload}/{rule}: a replayed slotopt step differs from the step run anew")
                torch.cuda.synchronize()
                rows.append(row)
                print(f"  {workload:6} {rule:13} torch replay {row.get('torch_replay_ms')} ms, copy replay "
                      f"{row['copy_replay_ms']:.4f} ms; slotopt replay {row['slotopt_replay_ms']:.4f} ms, "
                      f"identical {row['identical']}", flush=True)
            except Exception as error:
                bad.append(f"{workload}/{rule}: {type(error).__name__}: {error}"[:300])
            finally:
                torch.cuda.empty_cache()
    same = sum(bool(r.get("identical")) for r in rows)
    wider = []  # every other capturable configuration (faces, options, schedules, float64): captured, replayed
    for name, make in wider_capturable().items():
        try:
            wider.append({"config": name, **_slotopt_replay(make, [(4096,), (33,), (1000,)], device, steps)})
            if not wider[-1]["identical"]:
                bad.append(f"capturable {name}: a replayed slotopt step differs from the step run anew")
        except Exception as error:
            bad.append(f"capturable {name}: {type(error).__name__}: {error}"[:300])
        finally:
            torch.cuda.empty_cache()
    wide = sum(bool(r["identical"]) for r in wider)
    print(f"  other capturable configurations captured and replayed: {wide}/{len(wider)} bit-identical", flush=True)
    return {"ok": not bad, "summary": f"{len(rows)} captures timed; slotopt captured and replayed: {same}/{len(rows)} "
            f"bit-identical to uncaptured steps over {steps} steps (other capturable configurations: "
            f"{wide}/{len(wider)}); a refusal: {refused[:80]}", "failures": bad, "rows": rows, "wider": wider,
            "refused": refused}


def wider_capturable() -> dict[str, Callable[..., Any]]:
    """One configuration of each other capturable face, option and schedule (engine/capture.py), by name: a
    factory ``make(params, capturable=...)``."""
    import torch

    import slotopt

    s = slotopt.schedules
    f64 = torch.float64
    configs: dict[str, tuple[Any, dict[str, Any], Any]] = {
        "Adamax": (slotopt.Adamax, {"learning_rate": 0.01}, None),
        "Nadam": (slotopt.Nadam, {"learning_rate": 0.01}, None),
        "Lion decay": (slotopt.Lion, {"learning_rate": 1e-3, "weight_decay": 0.01}, None),
        "Adadelta": (slotopt.Adadelta, {"learning_rate": 0.5}, None),
        "legacy Adam decay": (slotopt.legacy.Adam, {"learning_rate": 0.01, "decay": 0.1}, None),
        "legacy SGD nesterov": (slotopt.legacy.SGD, {"learning_rate": 0.1, "momentum": 0.9, "nesterov": True}, None),
        "legacy RMSprop momentum": (slotopt.legacy.RMSprop, {"learning_rate": 0.01, "momentum": 0.5}, None),
        "legacy Adagrad": (slotopt.legacy.Adagrad, {"learning_rate": 0.1}, None),
        "v1 GradientDescent": (slotopt.v1.GradientDescentOptimizer, {"learning_rate": 0.1}, None),
        "v1 Momentum": (slotopt.v1.MomentumOptimizer, {"learning_rate": 0.1, "momentum": 0.9}, None),
        "v1 RMSProp centered": (slotopt.v1.RMSPropOptimizer, {"learning_rate": 0.01, "centered": True}, None),
        "v1 Adagrad": (slotopt.v1.AdagradOptimizer, {"learning_rate": 0.1}, None),
        "Adam maximize": (slotopt.Adam, {"learning_rate": 0.01, "maximize": True}, None),
        "Adam ExponentialDecay": (slotopt.Adam, {"learning_rate": s.ExponentialDecay(0.01, 3, 0.5)}, None),
        "RMSprop PiecewiseConstantDecay": (slotopt.RMSprop, {"learning_rate": s.PiecewiseConstantDecay(
            [3, 10], [0.1, 0.05, 0.01])}, None),
        "SGD momentum float64": (slotopt.SGD, {"learning_rate": 0.1, "momentum": 0.9}, f64),
    }

    def factory(cls: Any, kwargs: dict[str, Any], dtype: Any) -> Callable[..., Any]:
        def make(params: Any, **flags: Any) -> Any:
            if dtype is not None:
                for p in params:
                    p.data = p.data.to(dtype)
                    p.grad = p.grad.to(dtype)
            return cls(params, **kwargs, **flags)
        return make

    return {name: factory(*config) for name, config in configs.items()}


def _slotopt_replay(make: Callable[..., Any], shapes: list[tuple[int, ...]], device: str,
                    steps: int) -> dict[str, Any]:
    """slotopt's capturable step captured after two warm-up steps, then replayed ``steps`` times with new gradients
    written in place, against a twin stepping uncaptured: ``identical`` (every parameter's bits) and the replay's
    ms per step (CUDA). On the CPU the capture is ``kernels.triton.recording`` (the recorded step runs once, so
    the twin takes one step more)."""
    import torch

    from slotopt.kernels import triton as triton_path

    generator = torch.Generator().manual_seed(0)
    start = [torch.randn(s, generator=generator) for s in shapes]
    a = [torch.nn.Parameter(t.clone().to(device)) for t in start]
    b = [torch.nn.Parameter(t.clone().to(device)) for t in start]
    for p in (*a, *b):
        p.grad = torch.zeros_like(p)

    def gradients(k: int) -> None:
        g = torch.Generator().manual_seed(1000 + k)
        for x, y in zip(a, b):
            new = torch.randn(x.shape, generator=g).to(device)
            x.grad.copy_(new)
            y.grad.copy_(new)

    captured, twin = make(a, capturable=True), make(b)
    if device == "cuda":
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for k in range(2):  # warm-up: the device scalars are made
                gradients(k)
                captured.step()
                twin.step()
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured.step()
        replay, ms = graph.replay, None
    else:
        for k in range(2):
            gradients(k)
            captured.step()
            twin.step()
        with triton_path.recording() as launches:
            captured.step()
        twin.step()
        replay, ms = (lambda: triton_path.replay(launches)), 0.0
    for k in range(steps):
        gradients(2 + k)
        replay()
        twin.step()
    identical = all(torch.equal(x.detach().cpu().view(torch.int32), y.detach().cpu().view(torch.int32))
                    for x, y in zip(a, b))
    if device == "cuda":
        ms = _replay_ms(graph, 20)
    return {"identical": identical, "slotopt_replay_ms": ms, "compared_steps": steps}


def section_sync_all(args: argparse.Namespace, optimizers: dict[str, Callable[..., Any]]) -> dict[str, Any]:
    import torch

    import slotopt

    device = args.device
    everything = dict(optimizers)
    everything["keras3 Adam global_clipnorm"] = lambda p: slotopt.Adam(learning_rate=1e-3, global_clipnorm=1.0,
                                                                       params=p)
    everything["keras3 SGD clipnorm"] = lambda p: slotopt.SGD(learning_rate=0.01, clipnorm=1.0, params=p)
    for name, cls, kwargs in (("Adam", slotopt.Adam, {}), ("AdamW", slotopt.AdamW, {"weight_decay": 0.01}),
                              ("SGD momentum", slotopt.SGD, {"momentum": 0.9}), ("RMSprop", slotopt.RMSprop, {}),
                              ("Adagrad", slotopt.Adagrad, {})):  # capturable steps: their scalars on the device
        everything[f"keras3 {name} capturable"] = lambda p, c=cls, kw=kwargs: c(params=p, capturable=True, **kw)
    if device == "cuda":  # every other capturable configuration too
        for name, make in wider_capturable().items():
            everything[f"capturable {name}"] = lambda p, m=make: m(p, capturable=True)
    layouts = {"whole packets": [(64, 32), (1024,), (8, 16)], "ragged": [(64, 32), (7,), (33, 45)]}
    bad, clean, total = [], 0, 0
    for name, make in everything.items():
        for layout, shapes in layouts.items():
            total += 1
            params = [torch.nn.Parameter(torch.randn(s, device=device)) for s in shapes]
            for p in params:
                p.grad = torch.randn_like(p)
            try:
                opt = make(params)
                opt.step()  # the first step builds the state (allowed to synchronise)
                if device == "cuda":
                    torch.cuda.synchronize()
                    torch.cuda.set_sync_debug_mode("error")
                try:
                    for _ in range(1 if args.dry else 3):
                        opt.step()
                    clean += 1
                finally:
                    if device == "cuda":
                        torch.cuda.set_sync_debug_mode("default")
            except Exception as error:
                bad.append(f"{name} ({layout}): {type(error).__name__}: {str(error).splitlines()[0][:160]}")
    summary = (f"{clean}/{total} optimizer x layout runs step without a host synchronisation" if device == "cuda"
               else f"n/a on the CPU ({clean}/{total} stepped)")
    return {"ok": device != "cuda" or not bad, "summary": summary, "failures": bad}


def markdown(results: dict[str, dict[str, Any]]) -> list[str]:
    """The report's tables of these sections."""
    lines: list[str] = []
    host = results.get("host", {}).get("rows", [])
    if host:
        lines += ["", "Host time of one quiet step (Adam), us, by part (each measured inside the step: checks, the "
                  "step less its rule call; scalars, the rule call less its Triton call; table, the launch table "
                  "found by the plan's addresses; launch, the Triton call less its table, pins included):", "",
                  "| workload | tensors | step | checks | table | scalars | launch | target | capturable step | "
                  "pins |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in host:
            lines.append(f"| {r['workload']} | {r['tensors']} | {r['step_us']:.1f} | {r['checks_us']:.1f} | "
                         f"{r['table_us']:.1f} | {r['scalars_us']:.1f} | {r['launch_us']:.1f} | "
                         f"{r['target_us']:.1f} ({'met' if r['meets'] else 'missed'}) | "
                         f"{r['capturable_step_us']:.1f} | {r['pins_us']:.1f} |")
    graph = results.get("graph", {}).get("rows", [])
    if graph:
        lines += ["", "CUDA graph replay, ms per step (slotopt: capturable=True, replayed against uncaptured "
                  "steps):", "",
                  "| workload | rule | torch capturable replay | copy floor replay | slotopt replay | vs floor | "
                  "bit-identical |", "| --- | --- | --- | --- | --- | --- | --- |"]
        for r in graph:
            torch_ms = f"{r['torch_replay_ms']:.4f}" if r.get("torch_replay_ms") is not None else \
                r.get("torch_error", "–")
            copy_ms = r.get("copy_replay_ms")
            ratio = f"{r['slotopt_replay_ms'] / copy_ms:.2f}" if copy_ms else "–"
            lines.append(f"| {r['workload']} | {r['rule']} | {torch_ms} | "
                         f"{copy_ms if copy_ms is None else f'{copy_ms:.4f}'} | {r['slotopt_replay_ms']:.4f} | "
                         f"{ratio} | {r['identical']} ({r['compared_steps']} steps) |")
        lines += ["", f"Refused by name: {results['graph'].get('refused', '')}"]
    return lines
