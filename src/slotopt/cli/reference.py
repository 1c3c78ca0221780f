"""Replays the bundled Keras reference trajectories through slotopt (used by ``slotopt parity`` and the tests).

Each case of ``data/keras_reference.json`` was recorded from the real Keras 3, tf.keras legacy, TF1 and TFRS
optimizers. ``replay(case)`` rebuilds the case with slotopt's public API and returns the largest deviation from
the recorded values, per quantity.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Callable, Optional

import numpy as np
import torch

__all__ = ["load_cases", "replay", "Result", "TOLERANCES", "OPTIMIZER_TOLERANCES"]

TOLERANCES = {"float32": (2e-5, 2e-6), "float64": (1e-10, 1e-12)}
#: Per-optimizer (rtol, atol) where bit parity is impossible: Muon's Newton–Schulz matrix products follow the BLAS
#: library's summation order (the reference README's tolerance for Muon).
OPTIMIZER_TOLERANCES = {"Muon": {"float32": (1e-4, 1e-5), "float64": (1e-9, 1e-11)}}
_DTYPES = {"float32": torch.float32, "float64": torch.float64}


def load_cases() -> list[dict[str, Any]]:
    text = resources.files("slotopt").joinpath("data/keras_reference.json").read_text()
    return json.loads(text)


@dataclass
class Result:
    """Outcome of one replayed case: ``failures`` lists every value outside tolerance."""

    case_id: str
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    failures: list[str] = field(default_factory=list)
    tolerances: dict[str, tuple[float, float]] = field(default_factory=lambda: dict(TOLERANCES))

    @property
    def ok(self) -> bool:
        return not self.failures

    def compare(self, what: str, actual: Any, expected: Any, dtype: str) -> None:
        rtol, atol = self.tolerances[dtype]
        a = np.asarray(actual.detach().cpu().numpy() if isinstance(actual, torch.Tensor) else actual, dtype=np.float64)
        e = np.asarray(expected, dtype=np.float64)
        if a.shape != e.shape:
            self.failures.append(f"{what}: shape {a.shape} != expected {e.shape}")
            return
        diff = np.abs(a - e)
        if diff.size:
            self.max_abs_error = max(self.max_abs_error, float(np.nanmax(diff)))
            rel = diff / np.maximum(np.abs(e), 1e-30)
            self.max_rel_error = max(self.max_rel_error, float(np.nanmax(np.where(diff > atol, rel, 0.0))))
        if not np.allclose(a, e, rtol=rtol, atol=atol, equal_nan=True):
            self.failures.append(f"{what}: max |diff| {float(np.max(diff)):.3g}")


def _learning_rate(value: Any) -> Any:
    from .. import schedules

    if isinstance(value, dict) and "schedule" in value:
        return getattr(schedules, value["schedule"])(**value["config"])
    return value


def _kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    out = dict(kwargs)
    if "learning_rate" in out:
        out["learning_rate"] = _learning_rate(out["learning_rate"])
    return out


def _gradient(spec: Optional[dict[str, Any]], var: torch.Tensor) -> Any:
    from ..variables import IndexedSlices

    if spec is None:
        return None
    if "dense" in spec:
        return torch.tensor(spec["dense"], dtype=var.dtype, device=var.device)
    values = torch.tensor(spec["values"], dtype=var.dtype, device=var.device)
    return IndexedSlices(values, torch.tensor(spec["indices"], device=var.device), tuple(var.shape))


def _build(case: dict[str, Any], device: str) -> tuple[Any, list[torch.Tensor]]:
    import slotopt

    dtype = _DTYPES[case["dtype"]]
    variables = [
        slotopt.Variable(torch.tensor(init, dtype=dtype, device=device), name=name)
        for name, init in zip(case["names"], case["init"])
    ]
    api = case["api"]
    if api == "keras3":
        module: Any = slotopt
    elif api == "legacy":
        module = slotopt.legacy
    elif api == "v1":
        module = slotopt.v1
    else:
        parts = []
        for part in case["parts"]:
            chosen = [variables[i] for i in part["vars"]]
            parts.append((getattr(slotopt.legacy, part["optimizer"])(**_kwargs(part["kwargs"])),
                          (lambda chosen=chosen: chosen)))
        return slotopt.CompositeOptimizer(parts), variables
    if "map" in case:  # MultiOptimizer(OptimizerMap(default, {pattern: optimizer}))
        default = getattr(module, case["default"]["optimizer"])(**_kwargs(case["default"]["kwargs"]))
        mapping = {pattern: getattr(module, spec["optimizer"])(**_kwargs(spec["kwargs"]))
                   for pattern, spec in case["map"].items()}
        return getattr(module, case["optimizer"])(slotopt.OptimizerMap(default, mapping), **case["kwargs"]), variables
    if "inner" in case:
        inner = getattr(module, case["inner"]["optimizer"])(**_kwargs(case["inner"]["kwargs"]))
        return getattr(module, case["optimizer"])(inner, **case["kwargs"]), variables
    return getattr(module, case["optimizer"])(**_kwargs(case["kwargs"])), variables


def replay(case: dict[str, Any], device: str = "cpu", on_step: Optional[Callable[[int], None]] = None) -> Result:
    """Runs one reference case and compares every recorded quantity."""
    result = Result(case["id"])
    result.tolerances.update(OPTIMIZER_TOLERANCES.get(case["optimizer"], {}))
    dtype = case["dtype"]
    opt, variables = _build(case, device)
    if case.get("exclude_from_weight_decay"):
        opt.exclude_from_weight_decay(var_names=case["exclude_from_weight_decay"])
    global_step = None
    if case["api"] == "v1":
        import slotopt

        global_step = slotopt.Variable(torch.zeros((), dtype=torch.int64, device=device), name="global_step")
    for step, (grads, expected) in enumerate(zip(case["grads"], case["expect"])):
        pairs = [(_gradient(g, v), v) for g, v in zip(grads, variables)]
        if global_step is not None:
            opt.apply_gradients(pairs, global_step=global_step)
        else:
            opt.apply_gradients(pairs)
        for name, var, exp in zip(case["names"], variables, expected):
            result.compare(f"step {step + 1} {name}", var, exp, dtype)
        if on_step is not None:
            on_step(step)
    _compare_state(case, opt, variables, global_step, result)
    return result


def _compare_state(case: dict[str, Any], opt: Any, variables: list[torch.Tensor], global_step: Any,
                   result: Result) -> None:
    dtype = case["dtype"]
    if "iterations" in case:
        if case["api"] == "composite":
            actual = [int(o.iterations) for o in opt.optimizers]
        else:
            actual = int(opt.iterations)
        if actual != case["iterations"]:
            result.failures.append(f"iterations {actual} != {case['iterations']}")
    if "sub_iterations" in case:
        actual = [int(o.iterations) for o in opt.optimizers]
        if actual != case["sub_iterations"]:
            result.failures.append(f"sub-optimizer iterations {actual} != {case['sub_iterations']}")
    if "optimizer_variables" in case:
        own = opt.variables
        if len(own) != len(case["optimizer_variables"]):
            result.failures.append(f"{len(own)} optimizer variables, expected {len(case['optimizer_variables'])}")
        for var, (path, value) in zip(own, case["optimizer_variables"]):
            suffix = path.split("/", 1)[-1]
            actual_path = getattr(var, "path", None) or ""
            if not actual_path.endswith(suffix):
                result.failures.append(f"optimizer variable {actual_path!r} where Keras has {path!r}")
            result.compare(f"optimizer variable {path}", var, value, dtype)
    if "after_finalize" in case:
        opt.finalize_variable_values(variables)
        for name, var, exp in zip(case["names"], variables, case["after_finalize"]):
            result.compare(f"after finalize {name}", var, exp, dtype)
    if "dynamic_scale" in case:
        result.compare("dynamic_scale", torch.as_tensor(float(opt.dynamic_scale)), case["dynamic_scale"], dtype)
    if "weights" in case:
        weights = opt.get_weights()
        if len(weights) != len(case["weights"]):
            result.failures.append(f"{len(weights)} weights, expected {len(case['weights'])}")
        for i, (w, e) in enumerate(zip(weights, case["weights"])):
            result.compare(f"weight {i}", np.asarray(w), e, dtype)
    if "slot_names" in case and list(opt.get_slot_names()) != case["slot_names"]:
        result.failures.append(f"slot names {opt.get_slot_names()} != {case['slot_names']}")
    if case["api"] == "v1":
        if "global_step" in case and int(global_step) != case["global_step"]:
            result.failures.append(f"global_step {int(global_step)} != {case['global_step']}")
        for slot_name, values in case.get("slots", {}).items():
            for name, var, exp in zip(case["names"], variables, values):
                slot = opt.get_slot(var, slot_name)
                if exp is None:
                    if slot is not None:
                        result.failures.append(f"slot {slot_name} of {name} exists, Keras has none")
                elif slot is None:
                    result.failures.append(f"slot {slot_name} of {name} missing")
                else:
                    result.compare(f"slot {slot_name} of {name}", slot, exp, dtype)
    if "config" in case and hasattr(opt, "get_config"):
        try:
            config = opt.get_config()
        except NotImplementedError:
            config = None
        if config is not None:
            for key, value in case["config"].items():
                if key not in config:
                    result.failures.append(f"config has no {key!r}")
                elif isinstance(value, (int, float)) and not isinstance(value, bool):
                    result.compare(f"config {key}", np.asarray(float(config[key])), value, "float32")
                elif config[key] != value:
                    result.failures.append(f"config {key}={config[key]!r}, Keras has {value!r}")
