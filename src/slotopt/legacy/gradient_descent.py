"""tf.keras legacy ``SGD``: gradient descent with optional (Nesterov) momentum."""

from __future__ import annotations

from typing import Any, Optional

import torch

from ..engine import registry
from ..kernels import sgd as kernels
from .hyperparameters import floats, momentum_enabled
from .optimizer import ApplyState, Hyperparameter, Optimizer, grouped_dense

__all__ = ["SGD"]


@registry.register("legacy")
class SGD(Optimizer):
    """Gradient descent with momentum (tf.keras legacy numerics).

    Without momentum: ``w <- w - g * lr``. With momentum ``mu``: ``m <- m * mu - g * lr``, then
    ``w <- w + m`` (or, with ``nesterov``, ``w <- w + (m * mu - g * lr)``). Momentum is on when ``momentum`` is
    a tensor, a callable or a number > 0; it then adds one slot ``momentum`` per variable.

    Sparse gradients: without momentum, each row is added as it comes (``w[i] += (-g) * lr``, duplicate indices
    added one at a time); with momentum, duplicates are summed and only the touched rows of ``m`` and ``w``
    change (untouched rows keep their momentum undecayed).

    Example:
        >>> import torch, slotopt
        >>> w = slotopt.Variable(torch.tensor([1.0, 2.0]), name="w")
        >>> opt = slotopt.legacy.SGD(learning_rate=0.5, momentum=0.5)
        >>> for _ in range(2):
        ...     _ = opt.apply_gradients([(torch.tensor([1.0, -1.0]), w)])
        >>> w.tolist(), opt.get_slot_names()
        ([-0.25, 3.25], ['momentum'])
    """

    _capture_rules = ("sgd", "keras_momentum")  # capturable: the rate its only per-step scalar

    _supports_complex = True  # TensorFlow trains complex64/complex128 variables with it (item 8, issue 24)

    _HAS_AGGREGATE_GRAD = True

    def __init__(self, learning_rate: Hyperparameter = 0.01, momentum: Hyperparameter = 0.0, nesterov: bool = False,
                 name: Optional[str] = "SGD", **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self._set_hyper("learning_rate", kwargs.get("lr", learning_rate))
        self._set_hyper("decay", self._initial_decay)
        self._momentum = momentum_enabled(momentum)
        self._set_hyper("momentum", momentum)
        self.nesterov = nesterov

    def _create_slots(self, var_list: list[torch.Tensor]) -> None:
        if self._momentum:
            for var in var_list:
                self.add_slot(var, "momentum")

    def _hyperparameters_changed(self) -> None:
        # A momentum written into a parameter group after a build without momentum: the slots are created at
        # zeros, as tf.keras creates them when built with momentum (SGD's only slot: the weight order holds).
        if self._momentum or not any(g.get("momentum") for g in self.param_groups):
            return
        self._momentum = True
        self._create_slots([p for g in self.param_groups for p in g["params"]])
        self._plan = None

    def _prepare_local(self, var_device: torch.device, var_dtype: torch.dtype, apply_state: ApplyState) -> None:
        super()._prepare_local(var_device, var_dtype, apply_state)
        apply_state[(var_device, var_dtype)]["momentum"] = self._get_hyper("momentum", var_dtype)

    def _apply_dense_group(self, params, grads, positions, coefficients) -> None:
        lr, momentum = floats(coefficients, "lr_t", "momentum")
        if self._momentum:
            kernels.keras_momentum(params, grads, self._slot_lists(("momentum",), positions)["momentum"], lr=lr,
                                   momentum=momentum, nesterov=self.nesterov)
        else:
            kernels.sgd(params, grads, lr=lr)

    @grouped_dense
    def _resource_apply_dense(self, grad, var, apply_state=None):
        self._apply_dense_group([var], [grad], [self._position(var)], self._coefficients(var, apply_state))

    def _resource_apply_sparse_duplicate_indices(self, grad, handle, indices, **kwargs):
        if self._momentum:
            return super()._resource_apply_sparse_duplicate_indices(grad, handle, indices, **kwargs)
        (lr,) = floats(self._coefficients(handle, kwargs.get("apply_state")), "lr_t")
        kernels.scatter_sgd(handle, indices, grad, lr=lr)
        return None

    def _resource_apply_sparse(self, grad, var, indices, apply_state=None):
        coefficients = self._coefficients(var, apply_state)
        lr, momentum = floats(coefficients, "lr_t", "momentum")
        if not self._momentum:
            kernels.scatter_sgd(var, indices, grad, lr=lr)
            return
        self._lazy_rows(var, grad, indices, [self.get_slot(var, "momentum")],
                        lambda p, g, s: kernels.keras_momentum(p, g, s, lr=lr, momentum=momentum,
                                                               nesterov=self.nesterov))

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update({
            "learning_rate": self._serialize_hyperparameter("learning_rate"),
            "decay": self._initial_decay,
            "momentum": self._serialize_hyperparameter("momentum"),
            "nesterov": self.nesterov,
        })
        return config
