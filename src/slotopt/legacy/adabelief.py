"""tf.keras legacy-style AdaBelief (slotopt's own: tf.keras does not have it; it serializes as ``slotopt.legacy``)."""

from __future__ import annotations

from typing import Any, Optional

import torch

from .. import numerics
from ..engine import registry
from ..kernels import adabelief as kernels
from ..kernels import rows as sparse_rows
from ..variables import IndexedSlices
from .adam import _AdamBase
from .hyperparameters import floats, literal_scalar
from .optimizer import ApplyState, Hyperparameter, grouped_dense

__all__ = ["AdaBelief"]


@registry.register("legacy", keras=False, files=False)
class AdaBelief(_AdamBase):
    """AdaBelief (Zhuang et al. 2020) with tf.keras legacy's roundings: float32 hyperparameters, ``1 - beta`` and
    ``beta^t`` computed in the variable's dtype from them.

    ``m = b1 * m + (1 - b1) * g``; ``s = b2 * s + (1 - b2) * (g - m)^2 + eps``;
    ``w -= lr * (m / (1 - b1^t)) / (sqrt(s / (1 - b2^t)) + eps)``. Slots: ``m`` for every variable, then ``s``.
    A sparse gradient is densified (every row moves, as in the dense rule).

    Example:
        >>> import torch, slotopt
        >>> w = slotopt.Variable(torch.tensor([1.0]), name="w")
        >>> opt = slotopt.legacy.AdaBelief(learning_rate=0.5)
        >>> _ = opt.apply_gradients([(torch.tensor([2.0]), w)])
        >>> round(w.item(), 4), [v.path for v in opt.weights]
        (0.4444, ['AdaBelief/iter', 'AdaBelief/w/m', 'AdaBelief/w/s'])
    """

    def __init__(self, learning_rate: Hyperparameter = 0.001, beta_1: Hyperparameter = 0.9,
                 beta_2: Hyperparameter = 0.999, epsilon: Optional[float] = 1e-16,
                 name: Optional[str] = "AdaBelief", **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self._set_adam_hypers(learning_rate, beta_1, beta_2, epsilon, kwargs)

    def _create_slots(self, var_list: list[torch.Tensor]) -> None:
        for var in var_list:
            self.add_slot(var, "m")
        for var in var_list:
            self.add_slot(var, "s")

    def _prepare_local(self, var_device: torch.device, var_dtype: torch.dtype, apply_state: ApplyState) -> None:
        super()._prepare_local(var_device, var_dtype, apply_state)
        local_step, beta_1, beta_2 = self._betas(var_dtype)
        apply_state[(var_device, var_dtype)].update(
            epsilon=literal_scalar(self.epsilon, var_dtype), beta_1_t=beta_1, one_minus_beta_1_t=1 - beta_1,
            beta_2_t=beta_2, one_minus_beta_2_t=1 - beta_2,
            bias_correction_1=1 - numerics.libm.pow(beta_1, local_step),
            bias_correction_2=1 - numerics.libm.pow(beta_2, local_step))

    def _apply_dense_group(self, params, grads, positions, coefficients) -> None:
        lr, b1, omb1, b2, omb2, eps, bc1, bc2 = floats(
            coefficients, "lr_t", "beta_1_t", "one_minus_beta_1_t", "beta_2_t", "one_minus_beta_2_t", "epsilon",
            "bias_correction_1", "bias_correction_2")
        slots = self._slot_lists(("m", "s"), positions)
        kernels.adabelief(params, grads, slots["m"], slots["s"], lr=lr, beta_1=b1, one_minus_beta_1=omb1,
                          beta_2=b2, one_minus_beta_2=omb2, epsilon=eps, bias_correction_1=bc1,
                          bias_correction_2=bc2)

    @grouped_dense
    def _resource_apply_dense(self, grad, var, apply_state=None):
        self._apply_dense_group([var], [grad], [self._position(var)], self._coefficients(var, apply_state))

    def _resource_apply_sparse(self, grad, var, indices, apply_state=None):
        dense = sparse_rows.densify(IndexedSlices(grad, indices, tuple(var.shape)), var)
        self._apply_dense_group([var], [dense], [self._position(var)], self._coefficients(var, apply_state))

    def get_config(self) -> dict[str, Any]:
        return self._config()
