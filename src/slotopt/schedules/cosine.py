"""The cosine decays of ``keras.optimizers.schedules``: ``CosineDecay`` (with its optional warm-up) and
``CosineDecayRestarts`` (SGDR)."""

from __future__ import annotations

import math
from typing import Any, Dict, Optional

import torch

from .. import numerics
from .base import LearningRateSchedule, Number, ScalarLike, Step, _check_config
from .tensors import (
    _cached,
    _cast,
    _device_of,
    _initial_lr,
    _literal,
    _step_tensor,
)


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

    def _recipe(self, step_of: Any) -> Any:
        # ``__call__``'s arithmetic over recipes (engine/step_recipes.py), ``numerics.cos`` the C library's cos
        from ..engine import step_recipes as R

        raw = (self.initial_learning_rate, self.decay_steps, self.alpha, self.warmup_target, self.warmup_steps)
        c = {k: R.const(float(v), v.dtype) for k, v in _cached(self, torch.device("cpu"), raw,
                                                                self._constants).items()}
        if c["lr0"].dtype not in (torch.float32, torch.float64):
            return None

        def decay(x: Any, start: Any) -> Any:
            cosine = c["half"] * (c["one"] + R.cos(c["pi"] * (x / c["decay_steps"])))
            return start * (c["one_minus_alpha"] * cosine + c["alpha"])

        s = step_of(c["lr0"].dtype)
        if self.warmup_target is None:
            return decay(R.minimum(s, c["decay_steps"]), c["lr0"])
        lr0, target, warmup_steps = c["lr0"], c["target"], c["warmup_steps"]
        s = R.minimum(s, c["clip"])
        warming = (target - lr0) * (s / warmup_steps) + lr0
        return R.where(R.greater(warmup_steps, s, s.dtype), warming, decay(s - warmup_steps, target))

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


CosineDecay._recipe_of = CosineDecay  # (its device form: ``_recipe``; CosineDecayRestarts has none yet)
