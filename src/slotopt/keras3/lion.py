"""Keras 3 Lion."""

from __future__ import annotations

import math
from typing import Any

from ..engine import checks, registry
from ..engine import constants as K
from ..kernels import lion as kernels
from ..kernels import rows as sparse_rows
from .optimizer import LearningRate, Optimizer


@registry.register("keras3")
class Lion(Optimizer):
    """Lion (evolved sign momentum; Keras 3 numerics, ``1 - beta`` computed in the variable's dtype, F-form).

    ``w -= lr * sign(m * beta_1 + g * (1 - beta_1))``; then ``m = m * beta_2 + g * (1 - beta_2)``.
    ``beta_1`` must be in (0, 1]. State: ``momentum`` per variable.

    Example:
        >>> import torch, slotopt
        >>> w = slotopt.Variable(torch.tensor([1.0, 1.0, 1.0]), name="w")
        >>> opt = slotopt.Lion(learning_rate=0.25)
        >>> _ = opt.apply_gradients([(torch.tensor([3.0, 0.0, -0.5]), w)])
        >>> w.tolist()
        [0.75, 1.0, 1.25]
    """

    _supports_complex = True  # TensorFlow trains complex64/complex128 variables with it (item 8, issue 24)
    _capture_rules = ("lion",)  # capturable: the rate its only per-step scalar
    _update_kernels = (kernels.lion,)  # compiled: slices take one pass (engine/sparse_pass.py)

    _kernel_slots = ("momentum",)
    _sparse_layout = "blocks"

    def __init__(self, learning_rate: LearningRate = 0.001, beta_1: float = 0.9, beta_2: float = 0.99,
                 weight_decay: Any = None, clipnorm: Any = None, clipvalue: Any = None, global_clipnorm: Any = None,
                 use_ema: bool = False, ema_momentum: float = 0.99, ema_overwrite_frequency: Any = None,
                 loss_scale_factor: Any = None, gradient_accumulation_steps: Any = None, name: Any = None,
                 **kwargs: Any) -> None:
        if not isinstance(beta_1, (int, float)) or isinstance(beta_1, bool) or not math.isfinite(beta_1) \
                or beta_1 <= 0 or beta_1 > 1:
            raise ValueError(
                "Argument `beta_1` must be in the [0, 1] range. Otherwise, the optimizer degenerates to SignSGD. "
                f"Received: beta_1={beta_1}."
            )
        checks.check_values({"beta_2": beta_2})
        super().__init__(learning_rate, weight_decay, clipnorm, clipvalue, global_clipnorm, use_ema, ema_momentum,
                         ema_overwrite_frequency, loss_scale_factor, gradient_accumulation_steps, name, **kwargs)
        self.beta_1 = beta_1
        self.beta_2 = beta_2

    def build(self, variables: Any) -> None:
        if self.built:
            return
        super().build(variables)
        self._momentums = self.add_optimizer_variables(self._trainable_variables, "momentum")

    def _update_group(self, params, grads, slots, learning_rate, **terms) -> None:
        dtype = params[0].dtype
        kernels.lion(params, grads, slots["momentum"], terms.get("scaled_1"), terms.get("scaled_2"),
                     lr=self._lr_for(learning_rate, dtype),
                     beta_1=K.cast(self.beta_1, dtype), one_minus_beta_1=K.f_form(self.beta_1, dtype),
                     beta_2=K.cast(self.beta_2, dtype), one_minus_beta_2=K.f_form(self.beta_2, dtype))

    def _update_slices(self, param, grad, slots, learning_rate) -> None:
        # The kernel reads only the two Σ(g * (1 - beta)) terms: no densified gradient needed.
        terms = self._slice_terms(param, grad, learning_rate)
        self._update_group([param], terms["scaled_1"], slots, learning_rate, **terms)

    def _slice_terms(self, param, grad, learning_rate):
        dtype = param.dtype
        return {name: [sparse_rows.summed(grad, param, grad.values * K.f_form(beta, dtype))]
                for name, beta in (("scaled_1", self.beta_1), ("scaled_2", self.beta_2))}

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "beta_1": self.beta_1, "beta_2": self.beta_2}


__all__ = ["Lion"]
