"""TF1 ``MomentumOptimizer``."""

from __future__ import annotations

from typing import Any

from ..engine import constants as K
from ..engine import registry
from ..kernels import sgd as kernels
from .optimizer import BuiltinOptimizer


@registry.register("v1")
class MomentumOptimizer(BuiltinOptimizer):
    """Momentum with the learning rate applied to the whole history (TF ``ApplyMomentum``).

    ``a <- a * mu + g``; ``w <- w - a * lr``; with ``use_nesterov``: ``w <- w - (g * lr + (a * mu) * lr)``
    (the new ``a``). Sparse gradients update the touched rows only (``a`` of other rows does not decay); the
    sparse Nesterov step is ``g * lr + a * (lr * mu)``. ``learning_rate`` and ``momentum`` may be numbers,
    scalar tensors or no-argument callables. Slot: ``"momentum"`` (the unscaled sum ``a``).

    Note the argument order: ``use_nesterov`` comes after ``name``.

    Example:
        >>> import torch, slotopt
        >>> w = slotopt.Variable(torch.tensor([1.0]), name="w")
        >>> opt = slotopt.v1.MomentumOptimizer(0.5, 0.5)
        >>> for _ in range(2):
        ...     opt.apply_gradients([(torch.tensor([1.0]), w)])
        >>> w.tolist(), opt.get_slot(w, "momentum").tolist()
        ([-0.25], [1.5])
    """

    _capture_rules = ("momentum",)  # capturable: the rate its only per-step scalar

    _kernel_slots = ("momentum",)

    def __init__(self, learning_rate: Any, momentum: Any, use_locking: bool = False, name: str = "Momentum",
                 use_nesterov: bool = False) -> None:
        super().__init__(use_locking, name, {"learning_rate": learning_rate, "momentum": momentum})
        self._learning_rate = learning_rate
        self._momentum = momentum
        self._use_nesterov = use_nesterov

    def _create_slots(self, var_list) -> None:
        for v in var_list:
            self._zeros_slot(v, "momentum", self._name)

    def _dense_update(self, params, grads, slots) -> None:
        dtype = params[0].dtype
        kernels.momentum(params, grads, slots["momentum"], lr=self._t("learning_rate", dtype),
                         momentum=self._t("momentum", dtype), nesterov=self._use_nesterov)

    def _sparse_update(self, params, grads, slots, scalar_rows: bool) -> None:
        dtype = params[0].dtype
        lr, mu = self._t("learning_rate", dtype), self._t("momentum", dtype)
        kernels.momentum(params, grads, slots["momentum"], lr=lr, momentum=mu, nesterov=self._use_nesterov,
                         lr_times_momentum=K.evaluate(lambda a, b: a * b, dtype, lr, mu))


__all__ = ["MomentumOptimizer"]
