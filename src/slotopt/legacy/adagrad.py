"""tf.keras legacy ``Adagrad`` and ``Adadelta``."""

from __future__ import annotations

from typing import Any, Optional

import torch

from ..engine import registry
from ..kernels import adadelta as adadelta_kernels
from ..kernels import adagrad as adagrad_kernels
from .hyperparameters import epsilon_or_default, floats, is_number, literal_scalar
from .optimizer import ApplyState, Hyperparameter, Optimizer, grouped_dense

__all__ = ["Adagrad", "Adadelta"]


def _prepend_iterations(optimizer: Optimizer, weights: Any) -> Any:
    """Old optimizers saved their weights without ``iter``: a list one short gets iterations 0 in front."""
    if isinstance(weights, (list, tuple)) and len(optimizer._weights) == len(weights) + 1:
        return [0] + list(weights)
    return weights


@registry.register("legacy")
class Adagrad(Optimizer):
    """Adagrad (tf.keras legacy numerics: epsilon outside the square root).

    ``acc += g*g``; ``w -= (g * lr) / (sqrt(acc) + epsilon)``. The slot ``accumulator`` starts at
    ``initial_accumulator_value`` (default 0.1). Sparse gradients (duplicates summed) update the touched rows
    only, which gives the dense result since a zero gradient leaves a row unchanged.

    Example:
        >>> import torch, slotopt
        >>> w = slotopt.Variable(torch.tensor([1.0]), name="w")
        >>> opt = slotopt.legacy.Adagrad(learning_rate=0.5, initial_accumulator_value=0.0, epsilon=1e-7)
        >>> _ = opt.apply_gradients([(torch.tensor([2.0]), w)])
        >>> round(w.item(), 5)
        0.5
    """

    _capture_rules = ("adagrad",)  # capturable: the rate its only per-step scalar

    _supports_complex = True  # TensorFlow trains complex64/complex128 variables with it (item 8, issue 24)

    _HAS_AGGREGATE_GRAD = True

    def __init__(self, learning_rate: Hyperparameter = 0.001, initial_accumulator_value: float = 0.1,
                 epsilon: Optional[float] = 1e-7, name: Optional[str] = "Adagrad", **kwargs: Any) -> None:
        if not is_number(initial_accumulator_value):
            raise TypeError(
                "Argument `initial_accumulator_value` must be a number >= 0. "
                f"Received: initial_accumulator_value={initial_accumulator_value!r}"
            )
        if initial_accumulator_value < 0.0:
            raise ValueError(f"initial_accumulator_value must be non-negative: {initial_accumulator_value}")
        epsilon = epsilon_or_default(epsilon)
        super().__init__(name, **kwargs)
        self._set_hyper("learning_rate", kwargs.get("lr", learning_rate))
        self._set_hyper("decay", self._initial_decay)
        self._initial_accumulator_value = initial_accumulator_value
        self.epsilon = epsilon

    def _create_slots(self, var_list: list[torch.Tensor]) -> None:
        for var in var_list:
            self.add_slot(var, "accumulator", self._initial_accumulator_value)

    def _prepare_local(self, var_device: torch.device, var_dtype: torch.dtype, apply_state: ApplyState) -> None:
        super()._prepare_local(var_device, var_dtype, apply_state)
        coefficients = apply_state[(var_device, var_dtype)]
        coefficients.update(epsilon=literal_scalar(self.epsilon, var_dtype), neg_lr_t=-coefficients["lr_t"])

    def _apply_dense_group(self, params, grads, positions, coefficients) -> None:
        lr, eps = floats(coefficients, "lr_t", "epsilon")
        adagrad_kernels.adagrad(params, grads, self._slot_lists(("accumulator",), positions)["accumulator"], lr=lr,
                                epsilon=eps, epsilon_inside_root=False)

    @grouped_dense
    def _resource_apply_dense(self, grad, var, apply_state=None):
        self._apply_dense_group([var], [grad], [self._position(var)], self._coefficients(var, apply_state))

    def _resource_apply_sparse(self, grad, var, indices, apply_state=None):
        lr, eps = floats(self._coefficients(var, apply_state), "lr_t", "epsilon")
        self._lazy_rows(var, grad, indices, [self.get_slot(var, "accumulator")],
                        lambda p, g, s: adagrad_kernels.adagrad(p, g, s, lr=lr, epsilon=eps,
                                                                epsilon_inside_root=False))

    def set_weights(self, weights) -> None:
        """Also accepts the weights of an old optimizer without the leading ``iter`` (iterations become 0)."""
        super().set_weights(_prepend_iterations(self, weights))

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: Optional[dict[str, Any]] = None) -> Adagrad:
        config = dict(config)
        config.setdefault("initial_accumulator_value", 0.1)
        return super().from_config(config, custom_objects)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update({
            "learning_rate": self._serialize_hyperparameter("learning_rate"),
            "decay": self._initial_decay,
            "initial_accumulator_value": self._initial_accumulator_value,
            "epsilon": self.epsilon,
        })
        return config


@registry.register("legacy")
class Adadelta(Optimizer):
    """Adadelta (tf.keras legacy numerics, TensorFlow's ``ApplyAdadelta`` kernel).

    ``acc = acc * rho + g*g * (1 - rho)``; ``upd = sqrt(acc_var + epsilon) * rsqrt(acc + epsilon) * g``;
    ``w -= upd * lr``; ``acc_var = acc_var * rho + upd*upd * (1 - rho)``. Slots: ``accum_grad`` for every
    variable, then ``accum_var``. Sparse gradients update the touched rows only (untouched rows do not decay).

    Example:
        >>> import torch, slotopt
        >>> w = slotopt.Variable(torch.tensor([1.0]), name="w")
        >>> opt = slotopt.legacy.Adadelta(learning_rate=1.0, rho=0.0, epsilon=1e-7)
        >>> _ = opt.apply_gradients([(torch.tensor([1.0]), w)])
        >>> f"{w.item():.6f}"
        '0.999684'
    """

    _capture_rules = ("apply_adadelta",)  # capturable: the rate its only per-step scalar

    _supports_complex = True  # TensorFlow trains complex64/complex128 variables with it (item 8, issue 24)

    _HAS_AGGREGATE_GRAD = True

    def __init__(self, learning_rate: Hyperparameter = 0.001, rho: Hyperparameter = 0.95,
                 epsilon: Optional[float] = 1e-7, name: Optional[str] = "Adadelta", **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self._set_hyper("learning_rate", kwargs.get("lr", learning_rate))
        self._set_hyper("decay", self._initial_decay)
        self._set_hyper("rho", rho)
        self.epsilon = epsilon_or_default(epsilon)

    def _create_slots(self, var_list: list[torch.Tensor]) -> None:
        for var in var_list:
            self.add_slot(var, "accum_grad")
        for var in var_list:
            self.add_slot(var, "accum_var")

    def _prepare_local(self, var_device: torch.device, var_dtype: torch.dtype, apply_state: ApplyState) -> None:
        super()._prepare_local(var_device, var_dtype, apply_state)
        rho = self._get_hyper("rho", var_dtype)
        apply_state[(var_device, var_dtype)].update(epsilon=literal_scalar(self.epsilon, var_dtype), rho=rho,
                                                    one_minus_rho=1 - rho)

    def _apply_dense_group(self, params, grads, positions, coefficients) -> None:
        lr, rho, omr, eps = floats(coefficients, "lr_t", "rho", "one_minus_rho", "epsilon")
        slots = self._slot_lists(("accum_grad", "accum_var"), positions)
        adadelta_kernels.apply_adadelta(params, grads, slots["accum_grad"], slots["accum_var"], lr=lr, rho=rho,
                                        one_minus_rho=omr, epsilon=eps)

    @grouped_dense
    def _resource_apply_dense(self, grad, var, apply_state=None):
        self._apply_dense_group([var], [grad], [self._position(var)], self._coefficients(var, apply_state))

    def _resource_apply_sparse(self, grad, var, indices, apply_state=None):
        lr, rho, omr, eps = floats(self._coefficients(var, apply_state), "lr_t", "rho", "one_minus_rho", "epsilon")
        self._lazy_rows(var, grad, indices, [self.get_slot(var, "accum_grad"), self.get_slot(var, "accum_var")],
                        lambda p, g, s: adadelta_kernels.apply_adadelta(p, g, [s[0]], [s[1]], lr=lr, rho=rho,
                                                                        one_minus_rho=omr, epsilon=eps, rows=True))

    def set_weights(self, weights) -> None:
        """Also accepts the weights of an old optimizer without the leading ``iter`` (iterations become 0)."""
        super().set_weights(_prepend_iterations(self, weights))

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update({
            "learning_rate": self._serialize_hyperparameter("learning_rate"),
            "decay": self._initial_decay,
            "rho": self._serialize_hyperparameter("rho"),
            "epsilon": self.epsilon,
        })
        return config
