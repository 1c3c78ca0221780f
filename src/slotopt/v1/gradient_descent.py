"""TF1 ``GradientDescentOptimizer`` and ``ProximalGradientDescentOptimizer``."""

from __future__ import annotations

from typing import Any

import torch

from ..engine import constants as K
from ..engine import registry
from ..kernels import sgd as kernels
from ..variables import IndexedSlices
from .optimizer import BuiltinOptimizer


@registry.register("v1")
class GradientDescentOptimizer(BuiltinOptimizer):
    """Plain gradient descent: ``w <- w - g * lr`` (TF ``ApplyGradientDescent``).

    Sparse gradients are NOT de-duplicated: each row ``k`` is added in order,
    ``w[i_k] <- w[i_k] + (-g_k) * lr`` (TF's ``resource_scatter_add``), so repeated indices round differently
    from the summed form. ``learning_rate`` may be a number, a scalar tensor or a no-argument callable.

    Example:
        >>> import torch, slotopt
        >>> w = slotopt.Variable(torch.tensor([1.0, 2.0]), name="w")
        >>> opt = slotopt.v1.GradientDescentOptimizer(0.5)
        >>> opt.apply_gradients([(torch.tensor([1.0, 1.0]), w)])
        >>> w.tolist()
        [0.5, 1.5]
    """

    _capture_rules = ("sgd",)  # capturable: the rate its only per-step scalar

    def __init__(self, learning_rate: Any, use_locking: bool = False, name: str = "GradientDescent") -> None:
        super().__init__(use_locking, name, {"learning_rate": learning_rate})
        self._learning_rate = learning_rate

    def _dense_update(self, params, grads, slots) -> None:
        kernels.sgd(params, grads, lr=self._t("learning_rate", params[0].dtype))

    def _scatter(self, values: torch.Tensor, var: torch.Tensor, indices: torch.Tensor) -> None:
        kernels.scatter_sgd(var, indices, values.to(var.dtype), lr=self._t("learning_rate", var.dtype))

    def _resource_apply_sparse_duplicate_indices(self, grad, handle, indices) -> None:
        self._scatter(grad, handle, indices)

    def _apply_sparse_duplicate_indices(self, grad: IndexedSlices, var) -> None:
        self._scatter(grad.values, var, grad.indices)

    def _resource_apply_sparse(self, grad, handle, indices) -> None:
        self._scatter(grad, handle, indices)

    def _apply_sparse(self, grad: IndexedSlices, var) -> None:
        self._scatter(grad.values, var, grad.indices)


@registry.register("v1")
class ProximalGradientDescentOptimizer(BuiltinOptimizer):
    """FOBOS proximal gradient descent (TF ``ApplyProximalGradientDescent``), float32/float64 only.

    ``prox = w - g * lr``; ``w <- sign(prox) * max(|prox| - lr * l1, 0) / (1 + l2 * lr)`` when ``l1 > 0``,
    else ``w <- prox / (1 + l2 * lr)``. Sparse gradients update only the touched rows (duplicates summed);
    for rows of one element the denominator and the division are evaluated in float64, as TF does.
    Hyperparameters are numbers or scalar tensors (no callables).

    TF1 fails on float64 variables with Python-float hyperparameters on the dense path (the kernel receives
    float32 scalars); here both paths cast them (``float64(float32(x))``), as TF's sparse path does.

    Example:
        >>> import torch, slotopt
        >>> w = slotopt.Variable(torch.tensor([1.0, -0.25]), name="w")
        >>> opt = slotopt.v1.ProximalGradientDescentOptimizer(0.5, l1_regularization_strength=0.5)
        >>> opt.apply_gradients([(torch.tensor([0.5, 0.5]), w)])
        >>> w.tolist()
        [0.5, -0.25]
    """

    _capture_rules = ("proximal_gradient_descent",)  # capturable: no per-step scalar

    _callable_hypers = False
    _supported_dtypes = (torch.float32, torch.float64)

    def __init__(self, learning_rate: Any, l1_regularization_strength: Any = 0.0,
                 l2_regularization_strength: Any = 0.0, use_locking: bool = False,
                 name: str = "ProximalGradientDescent") -> None:
        super().__init__(use_locking, name, {"learning_rate": learning_rate, "l1": l1_regularization_strength,
                                             "l2": l2_regularization_strength})
        self._learning_rate = learning_rate
        self._l1_regularization_strength = l1_regularization_strength
        self._l2_regularization_strength = l2_regularization_strength

    def _update(self, params, grads, widen: bool) -> None:
        dtype = params[0].dtype
        lr, l1, l2 = self._t("learning_rate", dtype), self._t("l1", dtype), self._t("l2", dtype)
        l2_lr = K.evaluate(lambda a, b: a * b, dtype, l2, lr)
        denominator = 1.0 + l2_lr if widen else K.evaluate(lambda x: 1 + x, dtype, l2_lr)
        kernels.proximal_gradient_descent(params, grads, lr=lr, lr_l1=K.evaluate(lambda a, b: a * b, dtype, lr, l1),
                                          denominator=denominator, l1_positive=l1 > 0, widen=widen)

    def _dense_update(self, params, grads, slots) -> None:
        self._update(params, grads, widen=False)

    def _sparse_update(self, params, grads, slots, scalar_rows: bool) -> None:
        self._update(params, grads, widen=scalar_rows)


__all__ = ["GradientDescentOptimizer", "ProximalGradientDescentOptimizer"]
