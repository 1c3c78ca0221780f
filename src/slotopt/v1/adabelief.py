"""TF1-style ``AdaBeliefOptimizer`` (slotopt's own: TensorFlow does not have it)."""

from __future__ import annotations

from typing import Any

from ..engine import checks, registry
from ..engine import constants as K
from ..kernels import adabelief as kernels
from ..kernels import rows as sparse_rows
from ..variables import IndexedSlices
from .optimizer import BuiltinOptimizer, cast


@registry.register("v1", keras=False)
class AdaBeliefOptimizer(BuiltinOptimizer):
    """AdaBelief (Zhuang et al. 2020) in TF1's Adam style: bias correction through the non-slot variables
    ``beta1_power``/``beta2_power`` (float32 for Python floats), multiplied by the betas once per
    ``apply_gradients`` call, after the updates.

    ``m = b1 * m + (1 - b1) * g``; ``s = b2 * s + (1 - b2) * (g - m)^2 + eps``;
    ``w -= lr * (m / (1 - b1p)) / (sqrt(s / (1 - b2p)) + eps)``. Slots ``"m"`` and ``"s"``. A sparse gradient
    is densified (every row moves, as in the dense rule).

    Example:
        >>> import torch, slotopt
        >>> w = slotopt.Variable(torch.tensor([1.0]), name="w")
        >>> opt = slotopt.v1.AdaBeliefOptimizer(0.5)
        >>> opt.apply_gradients([(torch.tensor([2.0]), w)])
        >>> round(w.item(), 4), [v.name for v in opt.variables()]
        (0.4444, ['beta1_power', 'beta2_power', 'w/AdaBelief', 'w/AdaBelief_1'])
    """

    _kernel_slots = ("m", "s")
    #: ``1 - beta ** t`` divides the update: a beta of 1 gives NaN at step 1.
    _hyperparameter_ranges = {"beta1": checks.UNIT_OPEN, "beta2": checks.UNIT_OPEN}

    def __init__(self, learning_rate: Any = 0.001, beta1: Any = 0.9, beta2: Any = 0.999, epsilon: Any = 1e-16,
                 use_locking: bool = False, name: str = "AdaBelief") -> None:
        super().__init__(use_locking, name, {"learning_rate": learning_rate, "beta1": beta1, "beta2": beta2,
                                             "epsilon": epsilon})
        self._beta1 = beta1
        self._beta2 = beta2

    def _create_slots(self, var_list) -> None:
        first = min(var_list, key=lambda v: self._var_names[self._register_variable(v)])
        self._create_non_slot_variable(self._call_if_callable(self._beta1), "beta1_power", first)
        self._create_non_slot_variable(self._call_if_callable(self._beta2), "beta2_power", first)
        for v in var_list:
            self._zeros_slot(v, "m", self._name)
            self._zeros_slot(v, "s", self._name)

    def _dense_update(self, params, grads, slots) -> None:
        dtype = params[0].dtype
        beta1_power, beta2_power = (self._get_non_slot_variable(n) for n in ("beta1_power", "beta2_power"))
        b1, b2 = self._t("beta1", dtype), self._t("beta2", dtype)
        kernels.adabelief(
            params, grads, slots["m"], slots["s"], lr=self._t("learning_rate", dtype), beta_1=b1,
            one_minus_beta_1=K.evaluate(lambda b: 1 - b, dtype, b1), beta_2=b2,
            one_minus_beta_2=K.evaluate(lambda b: 1 - b, dtype, b2), epsilon=self._t("epsilon", dtype),
            bias_correction_1=K.evaluate(lambda p: 1 - p, dtype, cast(beta1_power, dtype)),
            bias_correction_2=K.evaluate(lambda p: 1 - p, dtype, cast(beta2_power, dtype)))

    def _resource_apply_sparse(self, grad, handle, indices) -> None:
        dense = sparse_rows.densify(IndexedSlices(grad.to(handle.dtype), indices, tuple(handle.shape)), handle)
        pos = self._position(handle)
        self._dense_update([handle], [dense], {n: [self._slots[n][pos]] for n in self._kernel_slots})

    def _apply_sparse(self, grad, var) -> None:
        self._resource_apply_sparse(grad.values, var, grad.indices)

    def _finish(self, update_ops, name_scope) -> None:
        for key in ("beta1", "beta2"):
            power = self._get_non_slot_variable(f"{key}_power")
            power.mul_(self._prepared[key].to(power.dtype))
        return None


__all__ = ["AdaBeliefOptimizer"]
