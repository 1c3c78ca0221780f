"""Keras 3 Adamax."""

from __future__ import annotations

from typing import Any

from ..engine import checks, registry
from ..engine import constants as K
from ..engine import step_recipes as R
from ..kernels import adam as kernels
from ..kernels import rows as sparse_rows
from .adam import MomentOptimizer


@registry.register("keras3")
class Adamax(MomentOptimizer):
    """Adamax: Adam with the infinity norm in place of the second moment (Keras 3 numerics).

    With ``t`` the 1-based step: ``m += (g - m) * (1 - beta_1)``; ``u = max(beta_2 * u, |g|)``;
    ``w -= (lr * m) / ((1 - beta_1^t) * (u + epsilon))``. ``1 - beta_1`` is rounded once to the variable's
    dtype (D-form); state is ``[momentum, norm]`` per variable.

    Example:
        >>> import torch, slotopt
        >>> w = slotopt.Variable(torch.tensor([1.0, -1.0]), name="w")
        >>> opt = slotopt.Adamax(learning_rate=0.5, name="adamax")
        >>> _ = opt.apply_gradients([(torch.tensor([2.0, -2.0]), w)])
        >>> [round(x, 4) for x in w.tolist()]
        [0.5, -0.5]
        >>> [v.path for v in opt.variables][2:]
        ['adamax/w_momentum', 'adamax/w_norm']
    """

    _update_kernels = (kernels.adamax,)  # compiled: slices take one pass (engine/sparse_pass.py)

    _kernel_slots = ("momentum", "norm")
    _capture_rules = ("adamax",)

    def _capture_terms(self, rule, dtype, t, lr):
        """A capturable step's bias correction on the device: ``1 - beta_1 ** t`` as ``_update_group``'s."""
        if rule != "adamax":
            return super()._capture_terms(rule, dtype, t, lr)
        return {"one_minus_beta_1_power": 1 - R.pow(R.const(K.cast(self.beta_1, dtype), dtype), t)}
    _sparse_layout = "blocks"
    _hyperparameter_ranges = {"beta_1": checks.UNIT_OPEN}  # beta_2 = 1 keeps the running maximum: legitimate

    def build(self, variables: Any) -> None:
        if self.built:
            return
        super().build(variables)
        self._m, self._u = self.add_optimizer_variables(self._trainable_variables, ["momentum", "norm"])

    def _update_group(self, params, grads, slots, learning_rate, **terms) -> None:
        dtype = params[0].dtype
        beta_1_power = K.power(K.cast(self.beta_1, dtype), float(self._step_count()), dtype)
        kernels.adamax(params, grads, slots["momentum"], slots["norm"], terms.get("abs_grads"),
                       lr=self._lr_for(learning_rate, dtype),
                       one_minus_beta_1=K.d_form(self.beta_1, dtype), beta_2=K.literal(self.beta_2, dtype),
                       epsilon=K.literal(self.epsilon, dtype),
                       one_minus_beta_1_power=K.evaluate(lambda p: 1 - p, dtype, beta_1_power))

    def _slice_terms(self, param, grad, learning_rate):
        return {"abs_grads": [sparse_rows.summed(grad, param, grad.values.abs())]}



__all__ = ["Adamax"]
