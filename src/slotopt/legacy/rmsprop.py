"""tf.keras legacy ``RMSprop`` (alias ``RMSProp``): plain or centered, with or without momentum."""

from __future__ import annotations

from typing import Any, Optional

import torch

from ..engine import registry
from ..kernels import rmsprop as kernels
from .hyperparameters import epsilon_or_default, floats, literal_scalar, momentum_enabled
from .optimizer import ApplyState, Hyperparameter, Optimizer, grouped_dense

__all__ = ["RMSprop", "RMSProp"]


@registry.register("legacy", aliases=("RMSProp",))
class RMSprop(Optimizer):
    """RMSprop (tf.keras legacy numerics: where epsilon goes depends on whether momentum is on).

    Momentum off (``momentum`` = 0): ``rms = rho * rms + (1 - rho) * g*g``; centered also
    ``mg = rho * mg + (1 - rho) * g`` and ``d = rms - mg*mg`` (else ``d = rms``);
    ``w -= (lr * g) / (sqrt(d) + epsilon)`` (epsilon OUTSIDE the root).
    Momentum on (a number > 0, a tensor or a callable): ``rms += (g*g - rms) * (1 - rho)``; centered
    ``mg += (g - mg) * (1 - rho)``; ``mom = mom * momentum + (g * lr) / sqrt(d + epsilon)`` (epsilon INSIDE);
    ``w -= mom``. Slots: ``rms`` for every variable, then ``momentum`` (momentum on), then ``mg`` (centered).

    Sparse gradients (duplicates summed): with momentum, only the touched rows change (TensorFlow's sparse
    kernel, ``rsqrt(d + eps) * lr * g``); without momentum ``rms`` (and ``mg``) decay on every row and ``w``
    moves on the touched rows only.

    Example:
        >>> import torch, slotopt
        >>> w = slotopt.Variable(torch.tensor([10.0]), name="w")
        >>> opt = slotopt.legacy.RMSprop(learning_rate=0.1)
        >>> _ = opt.minimize(lambda: (w ** 2).sum() / 2.0, [w])
        >>> round(w.item(), 6)
        9.683772
    """

    _capture_rules = ("rmsprop", "apply_rmsprop")  # capturable: the rate its only per-step scalar

    _supports_complex = True  # TensorFlow trains complex64/complex128 variables with it (item 8, issue 24)

    _HAS_AGGREGATE_GRAD = True

    def __init__(self, learning_rate: Hyperparameter = 0.001, rho: Hyperparameter = 0.9,
                 momentum: Hyperparameter = 0.0, epsilon: Optional[float] = 1e-7, centered: bool = False,
                 name: Optional[str] = "RMSprop", **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self._set_hyper("learning_rate", kwargs.get("lr", learning_rate))
        self._set_hyper("decay", self._initial_decay)
        self._set_hyper("rho", rho)
        self._momentum = momentum_enabled(momentum)
        self._set_hyper("momentum", momentum)
        self.epsilon = epsilon_or_default(epsilon)
        self.centered = centered

    def _create_slots(self, var_list: list[torch.Tensor]) -> None:
        for var in var_list:
            self.add_slot(var, "rms")
        if self._momentum:
            for var in var_list:
                self.add_slot(var, "momentum")
        if self.centered:
            for var in var_list:
                self.add_slot(var, "mg")

    def _prepare_local(self, var_device: torch.device, var_dtype: torch.dtype, apply_state: ApplyState) -> None:
        super()._prepare_local(var_device, var_dtype, apply_state)
        coefficients = apply_state[(var_device, var_dtype)]
        rho = self._get_hyper("rho", var_dtype)
        coefficients.update(
            neg_lr_t=-coefficients["lr_t"], epsilon=literal_scalar(self.epsilon, var_dtype), rho=rho,
            momentum=self._get_hyper("momentum", var_dtype), one_minus_rho=1.0 - rho,
        )

    def _check_hyperparameter(self, key: str, value: Any) -> None:
        super()._check_hyperparameter(key, value)
        if key == "momentum" and value and not self._momentum:
            raise ValueError(
                f"`momentum` cannot become non-zero: {type(self).__name__} was built without momentum, and its "
                "slots are fixed at the build (a momentum slot would change the order of its weights). Create it "
                f"with momentum > 0 to let a scheduler cycle it. Received: momentum={value!r}")

    def _slot_names_used(self) -> tuple[str, ...]:
        return ("rms",) + (("momentum",) if self._momentum else ()) + (("mg",) if self.centered else ())

    def _apply_dense_group(self, params, grads, positions, coefficients) -> None:
        lr, rho, omr, momentum, eps = floats(coefficients, "lr_t", "rho", "one_minus_rho", "momentum", "epsilon")
        slots = self._slot_lists(self._slot_names_used(), positions)
        if self._momentum:
            kernels.apply_rmsprop(params, grads, slots["rms"], slots["momentum"], slots.get("mg"), lr=lr,
                                  one_minus_rho=omr, momentum=momentum, epsilon=eps)
        else:
            kernels.rmsprop(params, grads, slots["rms"], None, slots.get("mg"), lr=lr, rho=rho, one_minus_rho=omr,
                            momentum_decay=0.0, epsilon=eps, epsilon_inside_root=False)

    @grouped_dense
    def _resource_apply_dense(self, grad, var, apply_state=None):
        self._apply_dense_group([var], [grad], [self._position(var)], self._coefficients(var, apply_state))

    def _resource_apply_sparse(self, grad, var, indices, apply_state=None):
        lr, rho, omr, momentum, eps = floats(self._coefficients(var, apply_state), "lr_t", "rho", "one_minus_rho",
                                             "momentum", "epsilon")
        mg = self.get_slot(var, "mg") if self.centered else None
        if not self._momentum:
            kernels.sparse_rmsprop([var], [indices], [grad], [self.get_slot(var, "rms")],
                                   [mg] if mg is not None else None, lr=lr, rho=rho, one_minus_rho=omr, epsilon=eps)
            return
        slots = [self.get_slot(var, "rms"), self.get_slot(var, "momentum")] + ([mg] if mg is not None else [])
        self._lazy_rows(var, grad, indices, slots,
                        lambda p, g, s: kernels.sparse_apply_rmsprop(
                            p, g, [s[0]], [s[1]], [s[2]] if len(s) > 2 else None, lr=lr, rho=rho,
                            one_minus_rho=omr, momentum=momentum, epsilon=eps))

    def set_weights(self, weights) -> None:
        """Also accepts the weights of an old optimizer without the leading ``iter`` (iterations become 0)."""
        if isinstance(weights, (list, tuple)) and len(self._weights) == len(weights) + 1:
            weights = [0] + list(weights)
        super().set_weights(weights)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update({
            "learning_rate": self._serialize_hyperparameter("learning_rate"),
            "decay": self._initial_decay,
            "rho": self._serialize_hyperparameter("rho"),
            "momentum": self._serialize_hyperparameter("momentum"),
            "epsilon": self.epsilon,
            "centered": self.centered,
        })
        return config


#: tf.keras's other spelling.
RMSProp = RMSprop
