"""TF1 ``RMSPropOptimizer``."""

from __future__ import annotations

from typing import Any

from ..engine import constants as K
from ..engine import registry
from ..kernels import rmsprop as kernels
from .optimizer import BuiltinOptimizer


@registry.register("v1")
class RMSPropOptimizer(BuiltinOptimizer):
    """RMSProp with TF1's fused kernels (TF ``ApplyRMSProp`` / ``ApplyCenteredRMSProp``).

    ``ms <- ms + (g*g - ms) * (1 - rho)``; centered: ``mg <- mg + (g - mg) * (1 - rho)``,
    ``den = (ms - mg*mg) + eps``, else ``den = ms + eps``; ``mom <- mom * mu + (g * lr) / sqrt(den)``;
    ``w <- w - mom``. Epsilon is always inside the root. The ``"rms"`` slot starts at ONE; ``"momentum"`` is
    always created, ``"mg"`` only when ``centered``. Sparse gradients update the touched rows of every slot
    and of ``w`` with the sparse kernel's forms: ``ms <- ms * rho + (g*g) * (1 - rho)``,
    ``mg <- mg * rho + g * (1 - rho)``, ``den = (ms + eps) - mg*mg``, ``mom <- mom * mu + (rsqrt(den) * lr) * g``.
    Hyperparameters may be numbers, scalar tensors or no-argument callables.

    Note the argument order: ``centered`` comes before ``name``.

    Example:
        >>> import torch, slotopt
        >>> w = slotopt.Variable(torch.tensor([1.0]), name="w")
        >>> opt = slotopt.v1.RMSPropOptimizer(0.5, decay=0.5, epsilon=0.0)
        >>> opt.apply_gradients([(torch.tensor([1.0]), w)])
        >>> w.tolist(), opt.get_slot_names()
        ([0.5], ['momentum', 'rms'])
    """

    _capture_rules = ("apply_rmsprop",)  # capturable: the rate its only per-step scalar

    def __init__(self, learning_rate: Any, decay: Any = 0.9, momentum: Any = 0.0, epsilon: Any = 1e-10,
                 use_locking: bool = False, centered: bool = False, name: str = "RMSProp") -> None:
        super().__init__(use_locking, name, {"learning_rate": learning_rate, "decay": decay, "momentum": momentum,
                                             "epsilon": epsilon})
        self._learning_rate = learning_rate
        self._decay = decay
        self._momentum = momentum
        self._epsilon = epsilon
        self._centered = centered
        self._kernel_slots = ("rms", "momentum", "mg") if centered else ("rms", "momentum")

    def _create_slots(self, var_list) -> None:
        for v in var_list:
            self._get_or_make_slot_with_initializer(v, 1.0, v.shape, v.dtype, "rms", self._name)
            if self._centered:
                self._zeros_slot(v, "mg", self._name)
            self._zeros_slot(v, "momentum", self._name)

    def _constants(self, dtype) -> dict[str, float]:
        rho = self._t("decay", dtype)
        return {"lr": self._t("learning_rate", dtype), "one_minus_rho": K.evaluate(lambda r: 1 - r, dtype, rho),
                "momentum": self._t("momentum", dtype), "epsilon": self._t("epsilon", dtype)}

    def _dense_update(self, params, grads, slots) -> None:
        kernels.apply_rmsprop(params, grads, slots["rms"], slots["momentum"], slots.get("mg"),
                              **self._constants(params[0].dtype))

    def _sparse_update(self, params, grads, slots, scalar_rows: bool) -> None:
        dtype = params[0].dtype
        kernels.sparse_apply_rmsprop(params, grads, slots["rms"], slots["momentum"], slots.get("mg"),
                                     rho=self._t("decay", dtype), **self._constants(dtype))


__all__ = ["RMSPropOptimizer"]
