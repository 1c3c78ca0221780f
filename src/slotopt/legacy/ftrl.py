"""tf.keras legacy ``Ftrl`` (FTRL-Proximal with l1, l2, l2 shrinkage and beta)."""

from __future__ import annotations

import math
from typing import Any, Optional

import torch

from ..engine import checks, registry
from ..kernels import ftrl as kernels
from .hyperparameters import as_scalar, floats, is_number
from .optimizer import ApplyState, Hyperparameter, Optimizer, grouped_dense

__all__ = ["Ftrl"]


@registry.register("legacy")
class Ftrl(Optimizer):
    """FTRL-Proximal (tf.keras legacy; TensorFlow's ``ApplyFtrl`` / ``ApplyFtrlV2`` kernels).

    With ``p = learning_rate_power``, ``n`` the ``accumulator`` slot (starts at ``initial_accumulator_value``),
    ``z`` the ``linear`` slot and ``l2' = l2 + beta / (2 * lr)``:
    ``g' = g + 2 * l2_shrinkage * w`` (shrinkage > 0 only); ``n' = n + g*g``;
    ``z += g' - ((n'^-p - n^-p) / lr) * w``; ``w = (l1 * sign(z) - z) / (n'^-p / lr + 2 * l2')`` where
    ``|z| > l1``, else 0; ``n = n'``. Slots ``accumulator`` and ``linear``, interleaved per variable.
    Sparse gradients update the touched rows only. The ``lr`` keyword is ignored (as in tf.keras).

    Example:
        >>> import torch, slotopt
        >>> w = slotopt.Variable(torch.tensor([0.0]), name="w")
        >>> opt = slotopt.legacy.Ftrl(learning_rate=0.5, initial_accumulator_value=0.0)
        >>> _ = opt.apply_gradients([(torch.tensor([2.0]), w)])
        >>> w.item()
        -0.5
    """

    #: The update divides by the learning rate: 0 gives NaN at the first step.
    _hyperparameter_ranges = {"learning_rate": checks.POSITIVE}

    def __init__(self, learning_rate: Hyperparameter = 0.001, learning_rate_power: Hyperparameter = -0.5,
                 initial_accumulator_value: float = 0.1, l1_regularization_strength: Hyperparameter = 0.0,
                 l2_regularization_strength: Hyperparameter = 0.0, name: Optional[str] = "Ftrl",
                 l2_shrinkage_regularization_strength: float = 0.0, beta: Hyperparameter = 0.0,
                 **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        rules = (
            ("initial_accumulator_value", initial_accumulator_value, "positive or zero", lambda x: x < 0.0),
            ("learning_rate_power", learning_rate_power, "negative or zero", lambda x: x > 0.0),
            ("l1_regularization_strength", l1_regularization_strength, "positive or zero", lambda x: x < 0.0),
            ("l2_regularization_strength", l2_regularization_strength, "positive or zero", lambda x: x < 0.0),
            ("l2_shrinkage_regularization_strength", l2_shrinkage_regularization_strength, "positive or zero",
             lambda x: x < 0.0),
        )
        for key, value, wanted, bad in rules:
            number_only = key in ("initial_accumulator_value", "l2_shrinkage_regularization_strength")
            if number_only and not is_number(value):
                raise TypeError(f"Argument `{key}` must be a number. Received: {key}={value!r}")
            if is_number(value) and (bad(value) or not math.isfinite(value)):
                raise ValueError(f"`{key}` needs to be {wanted}. Received: {key}={value}.")
        self._set_hyper("learning_rate", learning_rate)
        self._set_hyper("decay", self._initial_decay)
        self._set_hyper("learning_rate_power", learning_rate_power)
        self._set_hyper("l1_regularization_strength", l1_regularization_strength)
        self._set_hyper("l2_regularization_strength", l2_regularization_strength)
        self._set_hyper("beta", beta)
        self._initial_accumulator_value = initial_accumulator_value
        self._l2_shrinkage_regularization_strength = l2_shrinkage_regularization_strength

    def _create_slots(self, var_list: list[torch.Tensor]) -> None:
        for var in var_list:
            self.add_slot(var, "accumulator", self._initial_accumulator_value)
            self.add_slot(var, "linear")

    def _prepare_local(self, var_device: torch.device, var_dtype: torch.dtype, apply_state: ApplyState) -> None:
        super()._prepare_local(var_device, var_dtype, apply_state)
        apply_state[(var_device, var_dtype)].update(
            learning_rate_power=self._get_hyper("learning_rate_power", var_dtype),
            l1_regularization_strength=self._get_hyper("l1_regularization_strength", var_dtype),
            l2_regularization_strength=self._get_hyper("l2_regularization_strength", var_dtype),
            beta=self._get_hyper("beta", var_dtype),
            l2_shrinkage_regularization_strength=as_scalar(self._l2_shrinkage_regularization_strength, var_dtype),
        )

    def _kernel_constants(self, c: dict[str, Any]) -> dict[str, float]:
        lr_t = c["lr_t"]
        adjusted_l2 = c["l2_regularization_strength"] + c["beta"] / (2.0 * lr_t)
        shrinking = self._l2_shrinkage_regularization_strength > 0.0
        lr, l1, power = floats(c, "lr_t", "l1_regularization_strength", "learning_rate_power")
        # TensorFlow's ApplyFtrl takes an IEEE sqrt for learning_rate_power == -0.5, Eigen's pow otherwise.
        return dict(lr=lr, l1=l1, power=-power, root=power == -0.5, two_l2=float(2 * adjusted_l2),
                    shrinkage=float(2 * c["l2_shrinkage_regularization_strength"]) if shrinking else 0.0)

    def _apply_dense_group(self, params, grads, positions, coefficients) -> None:
        slots = self._slot_lists(("accumulator", "linear"), positions)
        kernels.ftrl(params, grads, slots["accumulator"], slots["linear"], **self._kernel_constants(coefficients))

    @grouped_dense
    def _resource_apply_dense(self, grad, var, apply_state=None):
        self._apply_dense_group([var], [grad], [self._position(var)], self._coefficients(var, apply_state))

    def _resource_apply_sparse(self, grad, var, indices, apply_state=None):
        constants = self._kernel_constants(self._coefficients(var, apply_state))
        scalar_rows = var.dim() <= 1 or math.prod(var.shape[1:]) == 1
        self._lazy_rows(var, grad, indices, [self.get_slot(var, "accumulator"), self.get_slot(var, "linear")],
                        lambda p, g, s: kernels.ftrl(p, g, [s[0]], [s[1]], scalar_rows=scalar_rows, rows=True,
                                                     **constants))

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update({
            "learning_rate": self._serialize_hyperparameter("learning_rate"),
            "decay": self._initial_decay,
            "initial_accumulator_value": self._initial_accumulator_value,
            "learning_rate_power": self._serialize_hyperparameter("learning_rate_power"),
            "l1_regularization_strength": self._serialize_hyperparameter("l1_regularization_strength"),
            "l2_regularization_strength": self._serialize_hyperparameter("l2_regularization_strength"),
            "beta": self._serialize_hyperparameter("beta"),
            "l2_shrinkage_regularization_strength": self._l2_shrinkage_regularization_strength,
        })
        return config
