"""Learning-rate schedules with the numerics of ``keras.optimizers.schedules``.

A schedule is a callable ``schedule(step)``. The optimizers call it with their iteration counter: Keras 3 style
optimizers pass the raw int64 counter tensor, the tf.keras legacy optimizers pass the counter cast to the
variable's dtype. Plain Python numbers are accepted too.

Every schedule (except :class:`PiecewiseConstantDecay`) computes in one dtype, the dtype Keras would give
``initial_learning_rate`` as a tensor: float32 for a Python number, the tensor's own dtype for a floating torch
tensor. The step and every hyperparameter are cast to that dtype before any arithmetic, and each operation is a
separate op on 0-dim tensors, in the order Keras uses. That is what makes the results agree bit for bit.

Two rounding rules for Python constants are reproduced (they only differ for float64 schedules):

* a hyperparameter that Keras passes through ``ops.cast`` (``decay_rate``, ``decay_steps``, ``power``, ...) is
  turned into a float32 tensor first and then cast, as TensorFlow does;
* a Python number used directly in an op (``1 - p``, ``0.5 * ...``, ``pi``) is rounded once to the dtype.

The result is a tensor on the step's device (CPU for a Python step) and never requires grad. The constant
tensors of a call are cached per (device, hyperparameter values) while the hyperparameters are plain Python
values, so an optimizer step pays only for the few ops that involve the step.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Type, Union

import torch

from . import numerics
from .engine import checks
from .engine.limits import check_depth

__all__ = [
    "LearningRateSchedule",
    "ExponentialDecay",
    "PiecewiseConstantDecay",
    "PolynomialDecay",
    "InverseTimeDecay",
    "CosineDecay",
    "CosineDecayRestarts",
    "serialize",
    "deserialize",
    "get",
]

Number = Union[int, float]
Step = Union[int, float, torch.Tensor]
ScalarLike = Union[int, float, bool, torch.Tensor]

_MODULE = "keras.optimizers.schedules"


# ---------------------------------------------------------------------------------------------------------------
# Tensor helpers mirroring Keras' convert_to_tensor / ops.cast / scalar-in-op behaviour.
# ---------------------------------------------------------------------------------------------------------------


def _device_of(step: Any) -> torch.device:
    if isinstance(step, torch.Tensor):
        return step.device
    return torch.device("cpu")


def _to_tensor(value: Any, device: torch.device) -> torch.Tensor:
    """``convert_to_tensor`` without a dtype: Python float -> float32, Python int -> int32, bool -> bool.

    Torch tensors keep their dtype; other array-likes (numpy scalars) keep theirs through ``torch.as_tensor``.
    """
    if isinstance(value, torch.Tensor):
        return value.detach().to(device=device)
    if hasattr(value, "dtype"):  # numpy scalar or array: its own dtype, like TensorFlow
        return torch.as_tensor(value, device=device)
    if isinstance(value, bool):
        return torch.tensor(value, dtype=torch.bool, device=device)
    if isinstance(value, int):
        dtype = torch.int32 if -(2**31) <= value < 2**31 else torch.int64
        return torch.tensor(value, dtype=dtype, device=device)
    if isinstance(value, float):
        return torch.tensor(value, dtype=torch.float32, device=device)
    return torch.as_tensor(value, device=device)


def _cast(value: Any, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``ops.cast(value, dtype)`` on the TF backend: a Python float goes through float32 first."""
    return _to_tensor(value, device).to(dtype)


def _literal(value: Any, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A Python number used directly in an op: rounded once to ``dtype``."""
    if isinstance(value, torch.Tensor):
        return value.detach().to(device=device, dtype=dtype)
    return torch.tensor(value, dtype=dtype, device=device)


def _initial_lr(value: Any, device: torch.device) -> torch.Tensor:
    """``initial_learning_rate`` as a tensor; a non-floating value computes in float32."""
    lr0 = _to_tensor(value, device)
    if not lr0.is_floating_point():
        lr0 = lr0.to(torch.float32)
    return lr0


def _step_tensor(step: Step, device: torch.device) -> torch.Tensor:
    """The step as Keras sees it (a Python int is an integer tensor, a Python float a float32 one)."""
    if isinstance(step, bool):
        raise TypeError(
            f"A learning-rate schedule step must be a number or a tensor. Received: step={step!r}"
        )
    if isinstance(step, int):
        return torch.tensor(step, dtype=torch.int64, device=device)
    tensor = _to_tensor(step, device)
    # A complex step (tf.keras casts iterations to a complex variable's dtype): TensorFlow's cast to the schedule's
    # real dtype keeps the real part.
    return tensor.real if tensor.is_complex() else tensor


_CACHE_ATTR = "_slotopt_constants"
_CACHE_SIZE = 8


def _cache_key(value: Any) -> Optional[Tuple[str, str]]:
    if value is None or isinstance(value, (bool, int, float, str)):
        return (type(value).__name__, repr(value))
    return None  # tensors and other objects can change in place: never cached


def _cached(
    schedule: LearningRateSchedule,
    device: torch.device,
    raw: Sequence[Any],
    build: Callable[[torch.device], Dict[str, Any]],
    extra: Any = None,
) -> Dict[str, Any]:
    """The constant tensors of one call, built by ``build(device)``.

    They only depend on the hyperparameters, so they are reused while those are the same Python values (the key
    is read on every call, so reassigning an attribute is seen at once). The cached tensors are only ever read.
    """
    parts = [_cache_key(v) for v in raw]
    if any(p is None for p in parts):
        return build(device)
    key = (device, extra, tuple(parts))
    cache: Dict[Any, Dict[str, Any]] = schedule.__dict__.setdefault(_CACHE_ATTR, {})
    found = cache.get(key)
    if found is None:
        if len(cache) >= _CACHE_SIZE:
            cache.clear()
        found = cache[key] = build(device)
    return found


# ---------------------------------------------------------------------------------------------------------------
# Base class
# ---------------------------------------------------------------------------------------------------------------


class LearningRateSchedule:
    """Base class of every learning-rate schedule.

    A subclass implements ``__call__(step)``, returning the learning rate for that optimizer step, and
    ``get_config()``, returning the constructor arguments as a dict so that ``cls.from_config(config)``
    (which is ``cls(**config)``) rebuilds an equal schedule.

    >>> class Halving(LearningRateSchedule):
    ...     def __init__(self, lr: float) -> None:
    ...         self.lr = lr
    ...     def __call__(self, step):
    ...         return torch.tensor(self.lr) / 2 ** torch.as_tensor(step)
    ...     def get_config(self):
    ...         return {"lr": self.lr}
    >>> float(Halving.from_config({"lr": 1.0})(3))
    0.125
    """

    def __call__(self, step: Step) -> torch.Tensor:
        raise NotImplementedError(
            f"Learning rate schedule '{type(self).__name__}' must override `__call__(self, step)`."
        )

    def get_config(self) -> Dict[str, Any]:
        raise NotImplementedError(
            f"Learning rate schedule '{type(self).__name__}' must override `get_config()` in order to be "
            "serializable."
        )

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> LearningRateSchedule:
        """Builds a schedule from the dict returned by :meth:`get_config`."""
        return cls(**config)


def _check_config(schedule: LearningRateSchedule, **in_range: Any) -> None:
    """Every argument of a built-in schedule against the shared table (``engine/checks.py``): finite numbers of
    their range (``decay_steps > 0``, rates, powers and ``t_mul`` not negative...) and boolean flags.
    ``in_range``: stand-ins for values the schedule takes outside the table's range (checked by itself)."""
    checks.check_values({**schedule.get_config(), **in_range})


# ---------------------------------------------------------------------------------------------------------------
# Schedules
# ---------------------------------------------------------------------------------------------------------------


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


class CosineDecay(LearningRateSchedule):
    """Cosine decay (SGDR without restarts), with an optional linear warmup.

    Without warmup (``warmup_target=None``), with ``x = min(step, decay_steps)``::

        lr = initial_learning_rate * ((1 - alpha) * 0.5 * (1 + cos(pi * x / decay_steps)) + alpha)

    so the rate falls from ``initial_learning_rate`` to ``alpha * initial_learning_rate`` and stays there.

    With ``warmup_target`` set, the step is first clipped to ``decay_steps + warmup_steps``. For
    ``step < warmup_steps`` the rate rises linearly,
    ``lr = (warmup_target - initial_learning_rate) * step / warmup_steps + initial_learning_rate``; afterwards it
    is the cosine decay above started from ``warmup_target`` at ``step - warmup_steps``.
    ``1 - alpha`` is computed in Python float64 and rounded once to the dtype.

    >>> s = CosineDecay(1.0, 10)
    >>> [float(s(k)) for k in (0, 5, 10, 20)]  # float32: cos(pi/2) is -4.4e-8, not 0
    [1.0, 0.4999999701976776, 0.0, 0.0]
    >>> w = CosineDecay(0.0, 10, warmup_target=1.0, warmup_steps=4)
    >>> [float(w(k)) for k in (0, 2, 4, 9)]
    [0.0, 0.5, 1.0, 0.4999999701976776]
    """

    def __init__(
        self,
        initial_learning_rate: ScalarLike,
        decay_steps: Number,
        alpha: float = 0.0,
        name: Optional[str] = "CosineDecay",
        warmup_target: Optional[ScalarLike] = None,
        warmup_steps: Number = 0,
    ) -> None:
        self.initial_learning_rate = initial_learning_rate
        self.decay_steps = decay_steps
        self.alpha = alpha
        self.name = name
        self.warmup_target = warmup_target
        self.warmup_steps = warmup_steps
        # tf-keras takes ``decay_steps=0`` with a warm-up (a warm-up alone, as its tests use it); the decay after
        # it is then 0/0, NaN, as in TensorFlow (and a step refuses that learning rate).
        warmup_only = (warmup_target is not None and isinstance(decay_steps, (int, float))
                       and not isinstance(decay_steps, bool) and decay_steps == 0)
        _check_config(self, **({"decay_steps": 1} if warmup_only else {}))

    def _constants(self, device: torch.device) -> Dict[str, Any]:
        lr0 = _initial_lr(self.initial_learning_rate, device)
        dtype = lr0.dtype
        c = {
            "lr0": lr0,
            "decay_steps": _cast(self.decay_steps, dtype, device),
            "pi": _literal(math.pi, dtype, device),
            "half": _literal(0.5, dtype, device),
            "one": _literal(1.0, dtype, device),
            "one_minus_alpha": _literal(1 - self.alpha, dtype, device),  # D-form: 1 - alpha in Python
            "alpha": _literal(self.alpha, dtype, device),
        }
        if self.warmup_target is not None:
            c["target"] = _cast(self.warmup_target, dtype, device)
            c["warmup_steps"] = _cast(self.warmup_steps, dtype, device)
            c["clip"] = c["decay_steps"] + c["warmup_steps"]
        return c

    @staticmethod
    def _decay(c: Dict[str, Any], x: torch.Tensor, start: torch.Tensor) -> torch.Tensor:
        fraction = x / c["decay_steps"]
        cosine = c["half"] * (c["one"] + numerics.cos(c["pi"] * fraction))
        return start * (c["one_minus_alpha"] * cosine + c["alpha"])

    def __call__(self, step: Step) -> torch.Tensor:
        device = _device_of(step)
        raw = (
            self.initial_learning_rate,
            self.decay_steps,
            self.alpha,
            self.warmup_target,
            self.warmup_steps,
        )
        c = _cached(self, device, raw, self._constants)
        s = _step_tensor(step, device).to(c["lr0"].dtype)
        if self.warmup_target is None:
            return self._decay(c, torch.minimum(s, c["decay_steps"]), c["lr0"])

        lr0, target, warmup_steps = c["lr0"], c["target"], c["warmup_steps"]
        s = torch.minimum(s, c["clip"])
        # Both branches are cheap; torch.where avoids a host sync. The unused branch may hold inf/nan
        # (e.g. warmup_steps == 0) but is never selected.
        warming = (target - lr0) * (s / warmup_steps) + lr0
        decaying = self._decay(c, s - warmup_steps, target)
        return torch.where(s < warmup_steps, warming, decaying)

    def get_config(self) -> Dict[str, Any]:
        return {
            "initial_learning_rate": self.initial_learning_rate,
            "decay_steps": self.decay_steps,
            "alpha": self.alpha,
            "name": self.name,
            "warmup_target": self.warmup_target,
            "warmup_steps": self.warmup_steps,
        }


class CosineDecayRestarts(LearningRateSchedule):
    """Cosine decay with warm restarts (SGDR, Loshchilov & Hutter).

    ``f = step / first_decay_steps`` counts periods. Period ``i`` is ``t_mul ** i`` times longer than the first
    and its peak is ``m_mul ** i`` times the first one. With ``t_mul == 1``: ``i = floor(f)``, ``f = f - i``.
    Otherwise ``i = floor(log(1 - f * (1 - t_mul)) / log(t_mul))`` and
    ``f = (f - (1 - t_mul ** i) / (1 - t_mul)) / t_mul ** i``. Then::

        lr = initial_learning_rate * ((1 - alpha) * (0.5 * m_mul ** i * (1 + cos(pi * f))) + alpha)

    Here ``alpha`` is cast to the dtype before ``1 - alpha`` is taken.

    >>> s = CosineDecayRestarts(1.0, 10, t_mul=1.0, m_mul=0.5)
    >>> [float(s(k)) for k in (0, 5, 10, 15)]
    [1.0, 0.4999999701976776, 0.5, 0.2499999850988388]
    >>> float(CosineDecayRestarts(1.0, 10, t_mul=2.0)(20))  # half-way through the second, 20-step period
    0.4999999701976776
    """

    def __init__(
        self,
        initial_learning_rate: ScalarLike,
        first_decay_steps: Number,
        t_mul: ScalarLike = 2.0,
        m_mul: ScalarLike = 1.0,
        alpha: ScalarLike = 0.0,
        name: Optional[str] = "SGDRDecay",
    ) -> None:
        self.initial_learning_rate = initial_learning_rate
        self.first_decay_steps = first_decay_steps
        self.t_mul = t_mul
        self.m_mul = m_mul
        self.alpha = alpha
        self.name = name
        _check_config(self)

    def _constants(self, device: torch.device) -> Dict[str, Any]:
        lr0 = _initial_lr(self.initial_learning_rate, device)
        dtype = lr0.dtype
        t_mul = _cast(self.t_mul, dtype, device)
        return {
            "lr0": lr0,
            "first_decay_steps": _cast(self.first_decay_steps, dtype, device),
            "alpha": _cast(self.alpha, dtype, device),  # F-form: 1 - alpha is taken in dtype
            "t_mul": t_mul,
            "m_mul": _cast(self.m_mul, dtype, device),
            "log_t_mul": numerics.log(t_mul),
            # The branch depends only on constants, so it is decided here, once, on the host.
            "t_mul_is_one": bool(_cast(self.t_mul, dtype, torch.device("cpu")) == 1),
            "one": _literal(1.0, dtype, device),
            "half": _literal(0.5, dtype, device),
            "pi": _literal(math.pi, dtype, device),
        }

    def __call__(self, step: Step) -> torch.Tensor:
        device = _device_of(step)
        raw = (self.initial_learning_rate, self.first_decay_steps, self.t_mul, self.m_mul, self.alpha)
        c = _cached(self, device, raw, self._constants)
        one, t_mul = c["one"], c["t_mul"]
        fraction = _step_tensor(step, device).to(c["lr0"].dtype) / c["first_decay_steps"]
        if c["t_mul_is_one"]:
            restart = torch.floor(fraction)
            fraction = fraction - restart
        else:
            restart = torch.floor(numerics.log(one - fraction * (one - t_mul)) / c["log_t_mul"])
            t_pow = numerics.libm.pow(t_mul, restart)
            done = (one - t_pow) / (one - t_mul)  # length of the finished periods, in first periods
            fraction = (fraction - done) / t_pow
        cosine = c["half"] * numerics.libm.pow(c["m_mul"], restart) * (one + numerics.cos(c["pi"] * fraction))
        return c["lr0"] * ((one - c["alpha"]) * cosine + c["alpha"])

    def get_config(self) -> Dict[str, Any]:
        return {
            "initial_learning_rate": self.initial_learning_rate,
            "first_decay_steps": self.first_decay_steps,
            "t_mul": self.t_mul,
            "m_mul": self.m_mul,
            "alpha": self.alpha,
            "name": self.name,
        }


# ---------------------------------------------------------------------------------------------------------------
# (De)serialization
# ---------------------------------------------------------------------------------------------------------------

_BUILTINS: Dict[str, Type[LearningRateSchedule]] = {
    cls.__name__: cls
    for cls in (
        ExponentialDecay,
        PiecewiseConstantDecay,
        PolynomialDecay,
        InverseTimeDecay,
        CosineDecay,
        CosineDecayRestarts,
    )
}


def serialize(schedule: LearningRateSchedule) -> Dict[str, Any]:
    """Returns the Keras 3 serialized form of ``schedule``.

    Built-in schedules give ``{"module": "keras.optimizers.schedules", "class_name": ..., "config": ...,
    "registered_name": None}``. Any other class gives its Python module and its class name as
    ``registered_name``, as Keras does for custom objects.

    >>> serialize(ExponentialDecay(0.5, 2, 0.25))["class_name"]
    'ExponentialDecay'
    """
    cls = type(schedule)
    config = schedule.get_config()
    if _BUILTINS.get(cls.__name__) is cls:
        return {"module": _MODULE, "class_name": cls.__name__, "config": config, "registered_name": None}
    return {
        "module": cls.__module__,
        "class_name": cls.__name__,
        "config": config,
        "registered_name": cls.__name__,
    }


def deserialize(
    config: Mapping[str, Any], custom_objects: Optional[Mapping[str, Callable[..., Any]]] = None
) -> LearningRateSchedule:
    """Rebuilds a schedule from :func:`serialize` output (or a ``{"class_name", "config"}`` dict).

    ``custom_objects`` maps names to extra classes; it is searched first, by ``registered_name`` and then by
    ``class_name``, before the six built-in schedules.

    >>> s = deserialize({"class_name": "InverseTimeDecay",
    ...                  "config": {"initial_learning_rate": 1.0, "decay_steps": 1, "decay_rate": 1.0}})
    >>> float(s(1))
    0.5
    """
    if not isinstance(config, Mapping):
        raise TypeError(
            f"A serialized learning rate schedule must be a dict with `class_name` and `config`. "
            f"Received: config={config!r}"
        )
    check_depth(config, "A serialized learning rate schedule")  # before anything recurses into it
    if "class_name" not in config:
        raise ValueError(
            f"A serialized learning rate schedule needs a `class_name` key. Received: config={config}"
        )
    class_name = config["class_name"]
    inner = config.get("config") or {}
    if not isinstance(inner, Mapping):
        raise TypeError(f"The `config` of a serialized learning rate schedule must be a dict of arguments. "
                        f"Received: config={inner!r} (class_name={class_name!r})")
    custom = dict(custom_objects or {})
    cls: Optional[Any] = None
    registered_name = config.get("registered_name")
    if registered_name is not None and registered_name in custom:
        cls = custom[registered_name]
    elif class_name in custom:
        cls = custom[class_name]
    elif class_name in _BUILTINS:
        cls = _BUILTINS[class_name]
    if cls is None:
        valid: List[str] = sorted(_BUILTINS) + sorted(k for k in custom if k not in _BUILTINS)
        raise ValueError(
            f"Unknown learning rate schedule (decay): '{class_name}'. Valid names are {valid}; pass other "
            "classes through `custom_objects`."
        )
    if hasattr(cls, "from_config"):
        return cls.from_config(dict(inner))
    return cls(**inner)


def get(identifier: Union[LearningRateSchedule, Mapping[str, Any], None]) -> Optional[LearningRateSchedule]:
    """Returns a schedule from an instance (returned as is), a serialized dict, or ``None`` (returns ``None``).

    >>> get(None) is None
    True
    >>> type(get({"class_name": "CosineDecay", "config": {"initial_learning_rate": 1.0, "decay_steps": 5}})).__name__
    'CosineDecay'
    """
    if identifier is None or isinstance(identifier, LearningRateSchedule):
        return identifier
    if isinstance(identifier, Mapping):
        return deserialize(identifier)
    raise ValueError(f"Could not interpret learning rate schedule identifier: {identifier!r}")
