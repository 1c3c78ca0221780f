"""TF1 ``AdagradOptimizer`` and ``ProximalAdagradOptimizer``."""

from __future__ import annotations

from typing import Any

import torch

from ..engine import registry
from ..kernels import adagrad as kernels
from .optimizer import BuiltinOptimizer


@registry.register("v1")
class AdagradOptimizer(BuiltinOptimizer):
    """Adagrad without epsilon (TF ``ApplyAdagrad``).

    ``acc <- acc + g*g``; ``w <- w - (g * lr) * rsqrt(acc)`` with ``rsqrt(a) = 1 / sqrt(a)``. Sparse gradients
    update the touched rows only; for rows of one element the step is ``(lr * g) / sqrt(acc)``. The slot
    ``"accumulator"`` starts at ``initial_accumulator_value`` (exact in the variable dtype; must be > 0).
    ``learning_rate`` may be a number, a scalar tensor or a no-argument callable.

    Example:
        >>> import torch, slotopt
        >>> w = slotopt.Variable(torch.tensor([1.0]), name="w")
        >>> opt = slotopt.v1.AdagradOptimizer(0.5, initial_accumulator_value=3.0)
        >>> opt.apply_gradients([(torch.tensor([1.0]), w)])
        >>> w.tolist(), opt.get_slot(w, "accumulator").tolist()
        ([0.75], [4.0])
    """

    _capture_rules = ("apply_adagrad",)  # capturable: the rate its only per-step scalar

    _kernel_slots = ("accumulator",)

    def __init__(self, learning_rate: Any, initial_accumulator_value: Any = 0.1, use_locking: bool = False,
                 name: str = "Adagrad") -> None:
        if initial_accumulator_value <= 0.0:
            raise ValueError(f"initial_accumulator_value must be positive: {initial_accumulator_value}")
        super().__init__(use_locking, name, {"learning_rate": learning_rate})
        self._learning_rate = learning_rate
        self._initial_accumulator_value = initial_accumulator_value

    def _create_slots(self, var_list) -> None:
        for v in var_list:
            self._get_or_make_slot_with_initializer(v, self._initial_accumulator_value, v.shape, v.dtype,
                                                    "accumulator", self._name)

    def _dense_update(self, params, grads, slots) -> None:
        kernels.apply_adagrad(params, grads, slots["accumulator"], lr=self._t("learning_rate", params[0].dtype))

    def _sparse_update(self, params, grads, slots, scalar_rows: bool) -> None:
        kernels.apply_adagrad(params, grads, slots["accumulator"], lr=self._t("learning_rate", params[0].dtype),
                              scalar_rows=scalar_rows, rows=True)


@registry.register("v1")
class ProximalAdagradOptimizer(BuiltinOptimizer):
    """Adagrad step followed by the FOBOS proximal step (TF ``ApplyProximalAdagrad``), float32/float64 only.

    ``acc <- acc + g*g``; ``eta = lr * rsqrt(acc)``; ``prox = w - g * eta``;
    ``w <- sign(prox) * max(|prox| - eta * l1, 0) / (1 + l2 * eta)`` when ``l1 > 0``, else
    ``w <- prox / (1 + l2 * eta)``. Sparse gradients update the touched rows only; for rows of one element
    ``eta = lr / sqrt(acc)`` and the final division is done in float64. The kernel requires ``lr > 0``,
    ``l1 >= 0``, ``l2 >= 0`` (``InvalidArgumentError`` otherwise). No callables.

    Example:
        >>> import torch, slotopt
        >>> w = slotopt.Variable(torch.tensor([1.0]), name="w")
        >>> opt = slotopt.v1.ProximalAdagradOptimizer(0.5, initial_accumulator_value=3.0)
        >>> opt.apply_gradients([(torch.tensor([1.0]), w)])
        >>> w.tolist()
        [0.75]
    """

    _capture_rules = ("apply_proximal_adagrad",)  # capturable: no per-step scalar

    _callable_hypers = False
    _supported_dtypes = (torch.float32, torch.float64)
    _kernel_slots = ("accumulator",)

    def __init__(self, learning_rate: Any, initial_accumulator_value: Any = 0.1,
                 l1_regularization_strength: Any = 0.0, l2_regularization_strength: Any = 0.0,
                 use_locking: bool = False, name: str = "ProximalAdagrad") -> None:
        if initial_accumulator_value <= 0.0:
            raise ValueError(f"initial_accumulator_value must be positive: {initial_accumulator_value}")
        super().__init__(use_locking, name, {"learning_rate": learning_rate, "l1": l1_regularization_strength,
                                             "l2": l2_regularization_strength})
        self._learning_rate = learning_rate
        self._initial_accumulator_value = initial_accumulator_value
        self._l1_regularization_strength = l1_regularization_strength
        self._l2_regularization_strength = l2_regularization_strength

    def _create_slots(self, var_list) -> None:
        for v in var_list:
            self._get_or_make_slot(v, torch.full(tuple(v.shape), float(self._initial_accumulator_value),
                                                 dtype=v.dtype), "accumulator", self._name)

    def _check_prepared(self, pairs) -> None:
        self._check_positive(pairs, (
            ("learning_rate", "positive", "lr is not a positive scalar: "),
            ("l1", "non-negative", "l1 regularization strength is not a non-negative scalar: "),
            ("l2", "non-negative", "l2 regularization strength is not a non-negative scalar: ")))

    def _update(self, params, grads, slots, scalar_rows: bool, rows: bool = False) -> None:
        dtype = params[0].dtype
        l1 = self._t("l1", dtype)
        kernels.apply_proximal_adagrad(params, grads, slots["accumulator"], lr=self._t("learning_rate", dtype),
                                       l1=l1, l2=self._t("l2", dtype), l1_positive=l1 > 0,
                                       scalar_rows=scalar_rows, rows=rows)

    def _dense_update(self, params, grads, slots) -> None:
        self._update(params, grads, slots, scalar_rows=False)

    def _sparse_update(self, params, grads, slots, scalar_rows: bool) -> None:
        self._update(params, grads, slots, scalar_rows=scalar_rows, rows=True)


__all__ = ["AdagradOptimizer", "ProximalAdagradOptimizer"]
