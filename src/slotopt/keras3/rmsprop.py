"""Keras 3 RMSprop."""

from __future__ import annotations

from typing import Any, Optional

import torch

from ..engine import checks, registry
from ..engine import constants as K
from ..kernels import rmsprop as kernels
from .optimizer import LearningRate, Optimizer


@registry.register("keras3")
class RMSprop(Optimizer):
    """RMSprop, optionally centered and with momentum (Keras 3 numerics: epsilon inside the square root).

    ``v = rho * v + (1 - rho) * g*g``; centered: ``a = rho * a + (1 - rho) * g`` and
    ``inc = (lr * g) / sqrt((v - a*a) + epsilon)``, else ``inc = (lr * g) / sqrt(v + epsilon)``;
    with ``momentum > 0``: ``mom = momentum * mom + inc``, ``w -= mom``; else ``w -= inc``.
    ``1 - rho`` is rounded once (D-form). State (grouped, not interleaved): ``velocity`` for every variable, then
    ``momentum`` for every variable (momentum > 0), then ``average_gradient`` for every variable (centered).

    Example:
        >>> import torch, slotopt
        >>> w = slotopt.Variable(torch.tensor([1.0]), name="w")
        >>> opt = slotopt.RMSprop(learning_rate=0.1, rho=0.75, epsilon=1e-12, name="rm_sprop")
        >>> _ = opt.apply_gradients([(torch.tensor([2.0]), w)])
        >>> round(w.item(), 4)
        0.8
        >>> [v.path for v in opt.variables][2:]
        ['rm_sprop/w_velocity']
    """

    _supports_complex = True  # TensorFlow trains complex64/complex128 variables with it (item 8, issue 24)
    _capture_rules = ("rmsprop",)  # capturable: the rate its only per-step scalar
    _update_kernels = (kernels.rmsprop,)  # compiled: slices take one pass (engine/sparse_pass.py)

    #: Keras 3 refuses epsilon <= 0 (the square root of a zero second moment would divide by zero).
    _hyperparameter_ranges = {"epsilon": checks.Range(0.0, low_open=True, label="positive")}

    def __init__(self, learning_rate: LearningRate = 0.001, rho: float = 0.9, momentum: float = 0.0,
                 epsilon: float = 1e-7, centered: bool = False, weight_decay: Any = None, clipnorm: Any = None,
                 clipvalue: Any = None, global_clipnorm: Any = None, use_ema: bool = False,
                 ema_momentum: float = 0.99, ema_overwrite_frequency: Any = None, loss_scale_factor: Any = None,
                 gradient_accumulation_steps: Any = None, name: Any = None, **kwargs: Any) -> None:
        checks.check_callable_allowed("momentum", momentum, self._decided_at_build)  # (``momentum > 0`` below)
        checks.check_values({"rho": rho, "momentum": momentum, "epsilon": epsilon, "centered": centered},
                            self._hyperparameter_ranges)
        super().__init__(learning_rate, weight_decay, clipnorm, clipvalue, global_clipnorm, use_ema, ema_momentum,
                         ema_overwrite_frequency, loss_scale_factor, gradient_accumulation_steps, name, **kwargs)
        self.rho = rho
        self.momentum = momentum
        self.epsilon = epsilon
        self.centered = centered
        self._kernel_slots = self._slot_names()

    @property
    def _sparse_layout(self) -> Optional[str]:  # type: ignore[override]
        # Keras divides the slices by sqrt(v + eps) gathered per row; with a zero divisor possible (eps = 0)
        # it takes a dense path, which for unique indices is the dense result: densify then.
        return "blocks" if K.literal(self.epsilon, torch.float16) > 0 else None

    def _check_hyperparameter(self, key: str, value: Any) -> None:
        super()._check_hyperparameter(key, value)
        if key == "momentum" and value and self.built and self.centered and "momentum" not in self._slots:
            raise ValueError(
                f"`momentum` cannot become non-zero: {type(self).__name__} was built centered without momentum "
                "(a momentum slot now would come after `average_gradient`, out of Keras's weight order). Create "
                f"it with momentum > 0 to let a scheduler cycle it. Received: momentum={value!r}")

    def _hyperparameters_changed(self) -> None:
        # A momentum written into a parameter group after a build without it: the slot is created at zeros, as
        # Keras creates it when built with momentum (appended right after `velocity`: Keras's order, uncentered).
        if not self.built or "momentum" in self._slots or not any(g.get("momentum") for g in self.param_groups):
            return
        self._momentums = self.add_optimizer_variables(self._trainable_variables, "momentum")
        self._kernel_slots = ("velocity", "momentum")
        self._plan = None

    def _slot_names(self) -> tuple[str, ...]:
        momentum = self.momentum > 0 or any(g.get("momentum") for g in self.param_groups)  # (or a group's own)
        return ("velocity",) + (("momentum",) if momentum else ()) + (
            ("average_gradient",) if self.centered else ())

    def build(self, variables: Any) -> None:
        if self.built:
            return
        super().build(variables)
        trainable = self._trainable_variables
        # The variants present are fixed at build time, as the slots are.
        self._kernel_slots = self._slot_names()
        self._velocities = self.add_optimizer_variables(trainable, "velocity")
        self._momentums = self.add_optimizer_variables(trainable, "momentum") if "momentum" in self._kernel_slots \
            else []
        self._average_gradients = (
            self.add_optimizer_variables(trainable, "average_gradient") if self.centered else [])

    def _update_slices(self, param, grad, slots, learning_rate) -> None:
        dtype = param.dtype
        kernels.rmsprop_slices(param, grad, slots["velocity"][0], (slots.get("momentum") or [None])[0],
                               (slots.get("average_gradient") or [None])[0], **self._constants(learning_rate, dtype))

    def _constants(self, learning_rate: Any, dtype: torch.dtype) -> dict[str, float]:
        return dict(lr=self._lr_for(learning_rate, dtype), rho=K.literal(self.rho, dtype),
                    one_minus_rho=K.d_form(self.rho, dtype), momentum_decay=K.literal(self.momentum, dtype),
                    epsilon=K.literal(self.epsilon, dtype))

    def _update_group(self, params, grads, slots, learning_rate) -> None:
        kernels.rmsprop(params, grads, slots["velocity"], slots.get("momentum"), slots.get("average_gradient"),
                        **self._constants(learning_rate, params[0].dtype))

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "rho": self.rho, "momentum": self.momentum, "epsilon": self.epsilon,
                "centered": self.centered}


__all__ = ["RMSprop"]
