"""Keras 3 AdaBelief (slotopt's own: Keras does not have it, so it serializes under ``slotopt.keras3``)."""

from __future__ import annotations

from typing import Any

from ..engine import constants as K
from ..engine import registry
from ..kernels import adabelief as kernels
from .adam import MomentOptimizer


@registry.register("keras3", keras=False, files=False)
class AdaBelief(MomentOptimizer):
    """AdaBelief (Zhuang et al. 2020): Adam with the second moment of ``g - m``, the belief in the gradient.

    With ``t`` the 1-based step: ``m = b1 * m + (1 - b1) * g``; ``s = b2 * s + (1 - b2) * (g - m)^2 + eps``;
    ``w -= lr * (m / (1 - b1^t)) / (sqrt(s / (1 - b2^t)) + eps)``. Keras 3's roundings: ``1 - beta`` once in the
    variable's dtype (D-form). State: ``[momentum, belief]`` per variable. Sparse gradients are densified first.

    Example:
        >>> import torch, slotopt
        >>> w = slotopt.Variable(torch.tensor([1.0, -1.0]), name="w")
        >>> opt = slotopt.keras3.AdaBelief(learning_rate=0.5, name="adabelief")
        >>> _ = opt.apply_gradients([(torch.tensor([2.0, -2.0]), w)])
        >>> [round(x, 4) for x in w.tolist()]
        [0.4444, -0.4444]
        >>> [v.path for v in opt.variables][2:]
        ['adabelief/w_momentum', 'adabelief/w_belief']
    """

    _update_kernels = (kernels.adabelief,)  # foreach only: no one-pass sparse update (derived, not flagged)
    _kernel_slots = ("momentum", "belief")

    def __init__(self, learning_rate: Any = 0.001, beta_1: float = 0.9, beta_2: float = 0.999,
                 epsilon: float = 1e-16, **kwargs: Any) -> None:
        super().__init__(learning_rate, beta_1, beta_2, epsilon, **kwargs)

    def build(self, variables: Any) -> None:
        if self.built:
            return
        super().build(variables)
        self._momentums, self._beliefs = self.add_optimizer_variables(self._trainable_variables,
                                                                      ["momentum", "belief"])

    def _update_group(self, params, grads, slots, learning_rate, **terms) -> None:
        dtype = params[0].dtype
        t = float(self._step_count())
        beta_1, beta_2 = K.cast(self.beta_1, dtype), K.cast(self.beta_2, dtype)
        kernels.adabelief(
            params, grads, slots["momentum"], slots["belief"], lr=self._lr_for(learning_rate, dtype),
            beta_1=beta_1, one_minus_beta_1=K.d_form(self.beta_1, dtype), beta_2=beta_2,
            one_minus_beta_2=K.d_form(self.beta_2, dtype), epsilon=K.literal(self.epsilon, dtype),
            bias_correction_1=K.evaluate(lambda p: 1 - p, dtype, K.power(beta_1, t, dtype)),
            bias_correction_2=K.evaluate(lambda p: 1 - p, dtype, K.power(beta_2, t, dtype)))


__all__ = ["AdaBelief"]
