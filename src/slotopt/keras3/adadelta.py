"""Keras 3 Adadelta."""

from __future__ import annotations

from typing import Any, Optional

import torch

from ..engine import checks, registry
from ..engine import constants as K
from ..kernels import adadelta as kernels
from .optimizer import LearningRate, Optimizer


@registry.register("keras3")
class Adadelta(Optimizer):
    """Adadelta (Keras 3 numerics).

    ``Eg = rho * Eg + (1 - rho) * g*g``; ``delta = -(sqrt(Ed + epsilon) * g) / sqrt(Eg + epsilon)`` (new ``Eg``,
    old ``Ed``); ``Ed = rho * Ed + (1 - rho) * delta*delta``; ``w += lr * delta``. ``1 - rho`` is rounded once
    (D-form). State: ``[accumulated_grad, accumulated_delta_var]`` per variable.

    Example:
        >>> import torch, slotopt
        >>> w = slotopt.Variable(torch.tensor([1.0]), name="w")
        >>> opt = slotopt.Adadelta(learning_rate=0.75, rho=0.5, epsilon=1.0)
        >>> _ = opt.apply_gradients([(torch.tensor([4.0]), w)])  # delta = -(1 * 4) / sqrt(8 + 1)
        >>> w.item()
        0.0
    """

    _supports_complex = True  # TensorFlow trains complex64/complex128 variables with it (item 8, issue 24)

    _kernel_slots = ("accumulated_grad", "accumulated_delta_var")
    _capture_rules = ("adadelta",)  # capturable: the rate its only per-step scalar

    def __init__(self, learning_rate: LearningRate = 0.001, rho: float = 0.95, epsilon: float = 1e-7,
                 weight_decay: Any = None, clipnorm: Any = None, clipvalue: Any = None, global_clipnorm: Any = None,
                 use_ema: bool = False, ema_momentum: float = 0.99, ema_overwrite_frequency: Any = None,
                 loss_scale_factor: Any = None, gradient_accumulation_steps: Any = None, name: Any = None,
                 **kwargs: Any) -> None:
        checks.check_values({"rho": rho, "epsilon": epsilon})
        super().__init__(learning_rate, weight_decay, clipnorm, clipvalue, global_clipnorm, use_ema, ema_momentum,
                         ema_overwrite_frequency, loss_scale_factor, gradient_accumulation_steps, name, **kwargs)
        self.rho = rho
        self.epsilon = epsilon

    def build(self, variables: Any) -> None:
        if self.built:
            return
        super().build(variables)
        self._accumulated_grads, self._accumulated_delta_vars = self.add_optimizer_variables(
            self._trainable_variables, ["accumulated_grad", "accumulated_delta_var"])

    @property
    def _sparse_layout(self) -> Optional[str]:  # type: ignore[override]
        # Slices are divided by sqrt(Eg + eps) per row; with eps = 0 Keras divides densely (see RMSprop).
        return "blocks" if K.literal(self.epsilon, torch.float16) > 0 else None

    def _constants(self, learning_rate: Any, dtype: torch.dtype) -> dict[str, float]:
        return dict(lr=self._lr_for(learning_rate, dtype), rho=K.literal(self.rho, dtype),
                    one_minus_rho=K.d_form(self.rho, dtype), epsilon=K.literal(self.epsilon, dtype))

    def _update_group(self, params, grads, slots, learning_rate) -> None:
        kernels.adadelta(params, grads, slots["accumulated_grad"], slots["accumulated_delta_var"],
                         **self._constants(learning_rate, params[0].dtype))

    def _update_slices(self, param, grad, slots, learning_rate) -> None:
        kernels.adadelta_slices(param, grad, slots["accumulated_grad"][0], slots["accumulated_delta_var"][0],
                                **self._constants(learning_rate, param.dtype))

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "rho": self.rho, "epsilon": self.epsilon}


__all__ = ["Adadelta"]
