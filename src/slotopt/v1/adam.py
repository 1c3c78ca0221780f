"""TF1 ``AdamOptimizer``."""

from __future__ import annotations

from typing import Any

import torch

from .. import numerics
from ..engine import checks, registry, step_recipes
from ..engine import constants as K
from ..kernels import adam as kernels
from .optimizer import BuiltinOptimizer, cast


@registry.register("v1")
class AdamOptimizer(BuiltinOptimizer):
    """Adam with TF1's bias correction through two float32 "beta power" variables (TF ``ApplyAdam``).

    ``alpha = (lr * sqrt(1 - b2p)) / (1 - b1p)``; ``m <- m + (g - m) * (1 - b1)``;
    ``v <- v + (g*g - v) * (1 - b2)``; ``w <- w - (m * alpha) / (sqrt(v) + eps)``. ``b1p``/``b2p`` are the
    non-slot variables ``beta1_power``/``beta2_power``: they start at ``beta1``/``beta2`` (float32 for Python
    floats, even for float64 models), are shared by all variables and are multiplied by the betas once per
    ``apply_gradients`` call, after the updates (``_finish``).

    Sparse gradients (duplicates summed): ``m <- m * b1`` and ``v <- v * b2`` on ALL rows, then
    ``m[u] += g * (1 - b1)``, ``v[u] += (g*g) * (1 - b2)``, and ``w`` moves on all rows. TF1 programs run in a
    Session (or ``tf.function``) get ``v[u] += g * (g * (1 - b2))`` from Grappler: pass
    ``graph_mode_sparse=True`` to reproduce those bits (the default is the eager form).

    Hyperparameters may be numbers, scalar tensors or no-argument callables. Slots ``"m"`` and ``"v"``.

    Example:
        >>> import torch, slotopt
        >>> w = slotopt.Variable(torch.tensor([1.0, -1.0]), name="w")
        >>> opt = slotopt.v1.AdamOptimizer(0.1)
        >>> opt.apply_gradients([(torch.tensor([0.5, -0.5]), w)])
        >>> [round(x, 4) for x in w.tolist()]
        [0.9, -0.9]
        >>> [v.name for v in opt.variables()]
        ['beta1_power', 'beta2_power', 'w/Adam', 'w/Adam_1']
    """

    #: Capturable (engine/capture.py): the beta powers (host variables) copied into each group's device state,
    #: alpha computed from them there and each multiplied by its beta after, as ``_finish`` does on the host.
    _capture_rules = ("adam",)

    def _capture_powers(self) -> list[Any]:
        powers = self._get_beta_accumulators()
        return [step_recipes.state(k, float(p), p.dtype) for k, p in enumerate(powers)]

    def _capture_terms(self, rule, dtype, t, lr):
        """``_constants``' alpha over the group's device copies of the beta powers."""
        if rule != "adam":
            return super()._capture_terms(rule, dtype, t, lr)
        b1p, b2p = (step_recipes.cast(p, dtype) for p in self._capture_powers())
        return {"alpha": (lr * step_recipes.sqrt(1 - b2p)) / (1 - b1p)}

    def _capture_updates(self, rule, dtype):
        """``_finish``: each power times its beta, in the power's dtype."""
        if rule != "adam":
            return {}
        powers = self._capture_powers()
        betas = [float(self._prepared[key].to(p.dtype)) for key, p in zip(("beta1", "beta2"), powers)]
        return {k: p * step_recipes.const(b, p.dtype) for k, (p, b) in enumerate(zip(powers, betas))}

    _kernel_slots = ("m", "v")

    #: No TF1 kernel checks the betas, and ``1 - beta ** t`` divides the update: 1 gives NaN at step 1.
    _hyperparameter_ranges = {"beta1": checks.UNIT_OPEN, "beta2": checks.UNIT_OPEN}

    def __init__(self, learning_rate: Any = 0.001, beta1: Any = 0.9, beta2: Any = 0.999, epsilon: Any = 1e-8,
                 use_locking: bool = False, name: str = "Adam", use_own_namescope_for_non_slot_vars: bool = False,
                 *, graph_mode_sparse: bool = False) -> None:
        super().__init__(use_locking, name, {"learning_rate": learning_rate, "beta1": beta1, "beta2": beta2,
                                             "epsilon": epsilon},
                         use_own_namescope_for_non_slot_vars=use_own_namescope_for_non_slot_vars)
        self._lr = learning_rate
        self._beta1 = beta1
        self._beta2 = beta2
        self._epsilon = epsilon
        self._graph_mode_sparse = graph_mode_sparse

    def _get_beta_accumulators(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._get_non_slot_variable("beta1_power"), self._get_non_slot_variable("beta2_power")

    def _create_slots(self, var_list) -> None:
        first = min(var_list, key=lambda v: self._var_names[self._register_variable(v)])
        self._create_non_slot_variable(self._call_if_callable(self._beta1), "beta1_power", first)
        self._create_non_slot_variable(self._call_if_callable(self._beta2), "beta2_power", first)
        for v in var_list:
            self._zeros_slot(v, "m", self._name)
            self._zeros_slot(v, "v", self._name)

    def _constants(self, dtype: torch.dtype) -> dict[str, float]:
        beta1_power, beta2_power = self._get_beta_accumulators()
        lr, b1, b2 = self._t("learning_rate", dtype), self._t("beta1", dtype), self._t("beta2", dtype)
        alpha = K.evaluate(lambda lr, b1p, b2p: (lr * numerics.sqrt(1 - b2p)) / (1 - b1p), dtype, lr,
                         cast(beta1_power, dtype), cast(beta2_power, dtype))
        return {"alpha": alpha, "one_minus_beta_1": K.evaluate(lambda b: 1 - b, dtype, b1),
                "one_minus_beta_2": K.evaluate(lambda b: 1 - b, dtype, b2), "epsilon": self._t("epsilon", dtype),
                "beta_1": b1, "beta_2": b2}

    def _dense_update(self, params, grads, slots) -> None:
        c = self._constants(params[0].dtype)
        kernels.adam(params, grads, slots["m"], slots["v"], None, alpha=c["alpha"],
                     one_minus_beta_1=c["one_minus_beta_1"], one_minus_beta_2=c["one_minus_beta_2"],
                     epsilon=c["epsilon"])

    def _resource_apply_sparse(self, grad, handle, indices) -> None:
        c = self._constants(handle.dtype)
        kernels.sparse_apply_adam([handle], [indices], [grad.to(handle.dtype)], [self.get_slot(handle, "m")],
                                  [self.get_slot(handle, "v")], graph_form=self._graph_mode_sparse, **c)

    def _apply_sparse(self, grad, var) -> None:
        self._resource_apply_sparse(grad.values, var, grad.indices)

    def _finish(self, update_ops, name_scope) -> None:
        for power, key in zip(self._get_beta_accumulators(), ("beta1", "beta2")):
            power.mul_(self._prepared[key].to(power.dtype))
        return None


__all__ = ["AdamOptimizer"]
