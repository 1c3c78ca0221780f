"""TF1 ``AdadeltaOptimizer``."""

from __future__ import annotations

from typing import Any

from ..engine import constants as K
from ..engine import registry
from ..kernels import adadelta as kernels
from .optimizer import BuiltinOptimizer


@registry.register("v1")
class AdadeltaOptimizer(BuiltinOptimizer):
    """Adadelta (TF ``ApplyAdadelta``), with ``rsqrt(x) = 1 / sqrt(x)``.

    ``accum <- accum * rho + (g*g) * (1 - rho)``;
    ``upd = (sqrt(accum_update + eps) * rsqrt(accum + eps)) * g``; ``w <- w - upd * lr``;
    ``accum_update <- accum_update * rho + (upd*upd) * (1 - rho)``. Sparse gradients update the touched rows
    only. Slots ``"accum"`` and ``"accum_update"``. The paper's method is ``learning_rate=1.0``.
    Hyperparameters may be numbers, scalar tensors or no-argument callables.

    Example:
        >>> import torch, slotopt
        >>> w = slotopt.Variable(torch.tensor([1.0]), name="w")
        >>> opt = slotopt.v1.AdadeltaOptimizer(1.0, rho=0.25, epsilon=1.0)
        >>> opt.apply_gradients([(torch.tensor([2.0]), w)])
        >>> w.tolist(), opt.get_slot(w, "accum").tolist()
        ([0.0], [3.0])
    """

    _capture_rules = ("apply_adadelta",)  # capturable: the rate its only per-step scalar

    _kernel_slots = ("accum", "accum_update")

    def __init__(self, learning_rate: Any = 0.001, rho: Any = 0.95, epsilon: Any = 1e-8, use_locking: bool = False,
                 name: str = "Adadelta") -> None:
        super().__init__(use_locking, name, {"learning_rate": learning_rate, "rho": rho, "epsilon": epsilon})
        self._lr = learning_rate
        self._rho = rho
        self._epsilon = epsilon

    def _create_slots(self, var_list) -> None:
        for v in var_list:
            self._zeros_slot(v, "accum", self._name)
            self._zeros_slot(v, "accum_update", self._name)

    def _dense_update(self, params, grads, slots, rows: bool = False) -> None:
        dtype = params[0].dtype
        rho = self._t("rho", dtype)
        kernels.apply_adadelta(params, grads, slots["accum"], slots["accum_update"],
                               lr=self._t("learning_rate", dtype), rho=rho,
                               one_minus_rho=K.evaluate(lambda r: 1 - r, dtype, rho), epsilon=self._t("epsilon", dtype),
                               rows=rows)

    def _sparse_update(self, params, grads, slots, scalar_rows: bool) -> None:
        self._dense_update(params, grads, slots, rows=True)


__all__ = ["AdadeltaOptimizer"]
