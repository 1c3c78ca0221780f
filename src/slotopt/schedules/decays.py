"""The step-based decays of ``keras.optimizers.schedules``: exponential, inverse-time, piecewise-constant and
polynomial."""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

import torch

from .. import numerics
from ..engine import checks
from ..engine import step_recipes as R
from .base import LearningRateSchedule, Number, ScalarLike, Step, _check_config
from .tensors import (
    _cached,
    _cast,
    _device_of,
    _initial_lr,
    _literal,
    _step_tensor,
    _to_tensor,
)


class _ClassDefaultName:
    """Default of ``name``: the schedule's own name (``None`` is a valid, different choice)."""

    def __repr__(self) -> str:
        return "<the schedule's default name>"


_CLASS_NAME: Any = _ClassDefaultName()


class _StepDecay(LearningRateSchedule):
    """Shared by the schedules of ``initial_learning_rate``, ``decay_steps``, ``decay_rate`` and ``staircase``:
    they differ only in how the exponent ``p = step / decay_steps`` (floored with ``staircase``) is used."""

    _default_name = ""

    def __init__(
        self,
        initial_learning_rate: ScalarLike,
        decay_steps: Number,
        decay_rate: ScalarLike,
        staircase: bool = False,
        name: Optional[str] = _CLASS_NAME,  # type: ignore[assignment]
    ) -> None:
        self.initial_learning_rate = initial_learning_rate
        self.decay_steps = decay_steps
        self.decay_rate = decay_rate
        self.staircase = staircase
        self.name = self._default_name if name is _CLASS_NAME else name
        _check_config(self)

    def _constants(self, device: torch.device) -> Dict[str, Any]:
        lr0 = _initial_lr(self.initial_learning_rate, device)
        return {
            "lr0": lr0,
            "decay_steps": _cast(self.decay_steps, lr0.dtype, device),
            "decay_rate": _cast(self.decay_rate, lr0.dtype, device),
            "one": _cast(1, lr0.dtype, device),
        }

    def __call__(self, step: Step) -> torch.Tensor:
        device = _device_of(step)
        raw = (self.initial_learning_rate, self.decay_steps, self.decay_rate)
        c = _cached(self, device, raw, self._constants)
        s = _step_tensor(step, device).to(c["lr0"].dtype)
        p = s / c["decay_steps"]
        if self.staircase:
            p = torch.floor(p)
        return self._decay(c, p)

    def _decay(self, c: Dict[str, Any], p: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _recipe(self, step_of: Any) -> Any:
        # ``__call__``'s arithmetic over recipes (engine/step_recipes.py): the same constants, the same order
        c = {k: R.const(float(v), v.dtype) for k, v in _cached(
            self, torch.device("cpu"), (self.initial_learning_rate, self.decay_steps, self.decay_rate),
            self._constants).items()}
        if c["lr0"].dtype not in (torch.float32, torch.float64):
            return None
        p = step_of(c["lr0"].dtype) / c["decay_steps"]
        if self.staircase:
            p = R.floor(p)
        return self._decay_recipe(c, p)

    def _decay_recipe(self, c: Dict[str, Any], p: Any) -> Any:
        return self._decay(c, p)  # (operators only: the host form itself, on recipes)

    def get_config(self) -> Dict[str, Any]:
        return {
            "initial_learning_rate": self.initial_learning_rate,
            "decay_steps": self.decay_steps,
            "decay_rate": self.decay_rate,
            "staircase": self.staircase,
            "name": self.name,
        }


class ExponentialDecay(_StepDecay):
    """Exponential decay: ``lr = initial_learning_rate * decay_rate ** (step / decay_steps)``.

    With ``staircase=True`` the exponent is ``floor(step / decay_steps)``, so the rate drops in discrete jumps
    every ``decay_steps`` steps.

    >>> s = ExponentialDecay(0.1, 10, 0.5)
    >>> float(s(10))
    0.05000000074505806
    >>> float(ExponentialDecay(1.0, 10, 0.5, staircase=True)(19))
    0.5
    """


    _default_name = "ExponentialDecay"

    def _decay(self, c: Dict[str, Any], p: torch.Tensor) -> torch.Tensor:
        return c["lr0"] * numerics.libm.pow(c["decay_rate"], p)

    def _decay_recipe(self, c: Dict[str, Any], p: Any) -> Any:
        return c["lr0"] * R.pow(c["decay_rate"], p)


class PiecewiseConstantDecay(LearningRateSchedule):
    """Piecewise-constant learning rate defined by ``boundaries`` and ``values``.

    ``lr = values[0]`` for ``step <= boundaries[0]``, ``values[i]`` for ``boundaries[i-1] < step <=
    boundaries[i]`` and ``values[-1]`` for ``step > boundaries[-1]``. ``len(values)`` must be
    ``len(boundaries) + 1``.

    The boundaries are cast to the step's dtype before comparing (an integer step truncates float boundaries).
    The result has the dtype of ``values[0]`` (Python float -> float32, Python int -> int32). For an integer
    step the value is built as Keras 3 does, ``sum(indicator_i * values_i)``; for a floating step (the legacy
    optimizers) the matching value is selected as tf.keras' ``tf.case`` does. Both agree for finite values.

    >>> s = PiecewiseConstantDecay([10, 20], [1.0, 0.5, 0.25])
    >>> [float(s(k)) for k in (10, 11, 20, 21)]
    [1.0, 0.5, 0.5, 0.25]
    """


    def __init__(
        self,
        boundaries: Sequence[ScalarLike],
        values: Sequence[ScalarLike],
        name: Optional[str] = "PiecewiseConstant",
    ) -> None:
        if len(boundaries) != len(values) - 1:
            raise ValueError(
                "The length of boundaries should be 1 less than the length of values. "
                f"Received: boundaries={boundaries} of length {len(boundaries)}, "
                f"and values={values} of length {len(values)}."
            )
        for i, boundary in enumerate(boundaries):
            checks.check_number(f"boundaries[{i}]", boundary)
        for i, value in enumerate(values):
            checks.as_number(f"values[{i}]", value)
        bounds = [float(b) for b in boundaries]
        if any(b >= nxt for b, nxt in zip(bounds, bounds[1:])):
            raise ValueError(f"Argument `boundaries` must be strictly increasing. Received: boundaries={boundaries}")
        self.boundaries = boundaries
        self.values = values
        self.name = name

    def _constants(self, device: torch.device, step_dtype: torch.dtype) -> Dict[str, Any]:
        # Each boundary becomes a tensor as Keras converts it (float -> float32, int -> int32), then takes the
        # step's dtype; each value is converted the same way and takes the dtype of values[0].
        first = _to_tensor(self.values[0], device)
        return {
            "bounds": [_to_tensor(b, device).to(step_dtype) for b in self.boundaries],
            "values": [first] + [_to_tensor(v, device).to(first.dtype) for v in self.values[1:]],
            "zero": torch.zeros((), dtype=first.dtype, device=device),
        }

    def __call__(self, step: Step) -> torch.Tensor:
        device = _device_of(step)
        s = _step_tensor(step, device)
        raw = (*self.boundaries, *self.values)
        c = _cached(
            self, device, raw, lambda dev: self._constants(dev, s.dtype), (s.dtype, len(self.boundaries))
        )
        bounds, vals, out_dtype = c["bounds"], c["values"], c["values"][0].dtype
        if not bounds:
            return vals[0].expand(s.shape).clone()

        above_last = s > bounds[-1]
        middles = [(s > lo) & (s <= hi) for lo, hi in zip(bounds[:-1], bounds[1:])]

        if s.is_floating_point():
            # Selection (tf.case with values[0] as the default): only the chosen value reaches the result.
            out = torch.where(above_last, vals[-1], vals[0])
            for cond, value in zip(middles, vals[1:-1]):
                out = torch.where(cond, value, out)
            return out

        # Keras 3: a sum of indicator * value, starting from a zero of the result dtype.
        out = c["zero"] + (s <= bounds[0]).to(out_dtype) * vals[0]
        out = out + above_last.to(out_dtype) * vals[-1]
        for cond, value in zip(middles, vals[1:-1]):
            out = out + cond.to(out_dtype) * value
        return out

    def _recipe(self, step_of: Any) -> Any:
        # Keras 3's integer step (int64): the boundaries as integers, the value a sum of indicator * value
        # (``__call__``'s order); the comparisons exact in float64 (steps and boundaries below 2**53)
        c = self._constants(torch.device("cpu"), torch.int64)
        out_dtype = c["values"][0].dtype
        if out_dtype not in (torch.float32, torch.float64) or not c["bounds"] \
                or any(abs(int(b)) >= 2 ** 53 for b in c["bounds"]):
            return None
        s = step_of(torch.float64)
        bounds = [R.const(float(int(b)), torch.float64) for b in c["bounds"]]
        values = [R.const(float(v), out_dtype) for v in c["values"]]
        out = R.const(0.0, out_dtype) + R.less_equal(s, bounds[0], out_dtype) * values[0]
        out = out + R.greater(s, bounds[-1], out_dtype) * values[-1]
        for lo, hi, value in zip(bounds[:-1], bounds[1:], values[1:-1]):
            out = out + (R.greater(s, lo, out_dtype) * R.less_equal(s, hi, out_dtype)) * value
        return out

    def get_config(self) -> Dict[str, Any]:
        return {"boundaries": self.boundaries, "values": self.values, "name": self.name}


class PolynomialDecay(LearningRateSchedule):
    """Polynomial decay from ``initial_learning_rate`` to ``end_learning_rate`` over ``decay_steps`` steps.

    ``p = min(step, decay_steps) / decay_steps`` and
    ``lr = (initial_learning_rate - end_learning_rate) * (1 - p) ** power + end_learning_rate``.

    With ``cycle=True`` the step is not clipped; instead the horizon grows to the first multiple of
    ``decay_steps`` that is ``>= step``: ``decay_steps * ceil(step / decay_steps)`` (``decay_steps`` itself at
    step 0), and ``p = step / horizon``.

    >>> s = PolynomialDecay(1.0, 10, end_learning_rate=0.0, power=1.0)
    >>> [float(s(k)) for k in (0, 5, 10, 15)]
    [1.0, 0.5, 0.0, 0.0]
    >>> float(PolynomialDecay(1.0, 10, end_learning_rate=0.0, cycle=True)(15))
    0.25
    """


    def __init__(
        self,
        initial_learning_rate: ScalarLike,
        decay_steps: Number,
        end_learning_rate: ScalarLike = 0.0001,
        power: ScalarLike = 1.0,
        cycle: bool = False,
        name: Optional[str] = "PolynomialDecay",
    ) -> None:
        self.initial_learning_rate = initial_learning_rate
        self.decay_steps = decay_steps
        self.end_learning_rate = end_learning_rate
        self.power = power
        self.cycle = cycle
        self.name = name
        _check_config(self)

    def _constants(self, device: torch.device) -> Dict[str, Any]:
        lr0 = _initial_lr(self.initial_learning_rate, device)
        dtype = lr0.dtype
        return {
            "lr0": lr0,
            "end": _cast(self.end_learning_rate, dtype, device),
            "power": _cast(self.power, dtype, device),
            "decay_steps": _cast(self.decay_steps, dtype, device),
            "decay_steps_literal": _literal(self.decay_steps, dtype, device),
            "one": _literal(1.0, dtype, device),
        }

    def __call__(self, step: Step) -> torch.Tensor:
        device = _device_of(step)
        raw = (self.initial_learning_rate, self.decay_steps, self.end_learning_rate, self.power)
        c = _cached(self, device, raw, self._constants)
        s = _step_tensor(step, device).to(c["lr0"].dtype)
        horizon = c["decay_steps"]
        if self.cycle:
            # ceil(step / decay_steps) divides by decay_steps used as a plain number (rounded once to dtype);
            # the horizon itself uses the cast decay_steps.
            periods = torch.ceil(s / c["decay_steps_literal"])
            horizon = horizon * torch.where(s == 0, c["one"], periods)
        else:
            s = torch.minimum(s, horizon)
        p = s / horizon
        return (c["lr0"] - c["end"]) * numerics.libm.pow(c["one"] - p, c["power"]) + c["end"]

    def _recipe(self, step_of: Any) -> Any:
        c = {k: R.const(float(v), v.dtype) for k, v in _cached(
            self, torch.device("cpu"), (self.initial_learning_rate, self.decay_steps, self.end_learning_rate,
                                        self.power), self._constants).items()}
        if c["lr0"].dtype not in (torch.float32, torch.float64):
            return None
        horizon, s = c["decay_steps"], step_of(c["lr0"].dtype)
        if self.cycle:  # (``__call__``'s order: ceil of the step over the literal, selected at step 0)
            periods = R.ceil(s / c["decay_steps_literal"])
            horizon = horizon * R.where(R.equal(s, 0.0, s.dtype), c["one"], periods)
        else:
            s = R.minimum(s, horizon)
        p = s / horizon
        return (c["lr0"] - c["end"]) * R.pow(c["one"] - p, c["power"]) + c["end"]

    def get_config(self) -> Dict[str, Any]:
        return {
            "initial_learning_rate": self.initial_learning_rate,
            "decay_steps": self.decay_steps,
            "end_learning_rate": self.end_learning_rate,
            "power": self.power,
            "cycle": self.cycle,
            "name": self.name,
        }


class InverseTimeDecay(_StepDecay):
    """Inverse-time decay: ``lr = initial_learning_rate / (1 + decay_rate * step / decay_steps)``.

    With ``staircase=True``, ``step / decay_steps`` is floored first.

    >>> s = InverseTimeDecay(1.0, 10, 0.5)
    >>> [float(s(k)) for k in (0, 10, 30)]
    [1.0, 0.6666666865348816, 0.4000000059604645]
    >>> float(InverseTimeDecay(1.0, 10, 1.0, staircase=True)(19))
    0.5
    """


    _default_name = "InverseTimeDecay"

    def _decay(self, c: Dict[str, Any], p: torch.Tensor) -> torch.Tensor:
        return c["lr0"] / (c["one"] + c["decay_rate"] * p)


for _cls in (ExponentialDecay, PiecewiseConstantDecay, PolynomialDecay, InverseTimeDecay):
    _cls._recipe_of = _cls  # (their device forms: ``_recipe``)
del _cls
