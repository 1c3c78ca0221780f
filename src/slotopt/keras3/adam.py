from __future__ import annotations

from typing import Any

import torch

from .. import numerics
from ..engine import checks, registry
from ..engine import constants as K
from ..engine import step_recipes as R
from ..kernels import adam as kernels
from ..kernels import rows as sparse_rows
from .optimizer import LearningRate, Optimizer


def adam_alpha(lr: float, beta_1: float, beta_2: float, t: int, dtype: torch.dtype) -> float:
    """``(lr * sqrt(1 - b2^t)) / (1 - b1^t)`` with ``b^t`` and every step evaluated in ``dtype``."""
    b1p = K.power(beta_1, float(t), dtype)
    b2p = K.power(beta_2, float(t), dtype)
    return K.evaluate(lambda lr, b1p, b2p: (lr * numerics.sqrt(1 - b2p)) / (1 - b1p), dtype, lr, b1p, b2p)


def square_terms(param: torch.Tensor, grad: Any) -> dict[str, Any]:
    """Keras 3 on slices: ``square(g)`` is taken per slice, then the repeats are summed (``Σ_j g_j²``)."""
    return {"squares": [sparse_rows.summed(grad, param, grad.values * grad.values)]}


class MomentOptimizer(Optimizer):
    """Base of the Keras 3 optimizers configured by ``beta_1``, ``beta_2`` and ``epsilon`` (Adam, AdamW, Adamax,
    Nadam, Lamb): their constructor, validation and config keys, written once. The base ``Optimizer``
    arguments (``weight_decay``, ``clipnorm``, ``use_ema``, ...) are passed by keyword.

    Example:
        >>> import slotopt
        >>> opt = slotopt.Adamax(learning_rate=0.01, beta_2=0.99, clipnorm=1.0)
        >>> isinstance(opt, slotopt.keras3.adam.MomentOptimizer), opt.beta_2, opt.clipnorm
        (True, 0.99, 1.0)
    """

    #: ``1 - beta ** t`` divides the update (bias correction): a beta of 1 gives NaN or no movement at step 1.
    _hyperparameter_ranges = {"beta_1": checks.UNIT_OPEN, "beta_2": checks.UNIT_OPEN}

    def __init__(self, learning_rate: LearningRate = 0.001, beta_1: float = 0.9, beta_2: float = 0.999,
                 epsilon: float = 1e-7, **kwargs: Any) -> None:
        checks.check_values({"beta_1": beta_1, "beta_2": beta_2, "epsilon": epsilon}, self._hyperparameter_ranges)
        super().__init__(learning_rate, **kwargs)
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "beta_1": self.beta_1, "beta_2": self.beta_2, "epsilon": self.epsilon}


@registry.register("keras3")
class Adam(MomentOptimizer):
    """Adam, optionally AMSGrad (Keras 3 numerics: ``1 - beta`` rounded once, epsilon outside the root).

    Example:
        >>> import torch, slotopt
        >>> w = slotopt.Variable(torch.tensor([1.0, -1.0]), name="w")
        >>> opt = slotopt.Adam(learning_rate=0.1, name="adam")
        >>> _ = opt.apply_gradients([(torch.tensor([0.5, -0.5]), w)])
        >>> [round(x, 4) for x in w.tolist()]
        [0.9, -0.9]
        >>> [v.path for v in opt.variables][2:]
        ['adam/w_momentum', 'adam/w_velocity']
    """

    _supports_complex = True  # TensorFlow trains complex64/complex128 variables with it (item 8, issue 24)
    _update_kernels = (kernels.adam,)  # compiled: slices take one pass (engine/sparse_pass.py)

    _kernel_slots = ("momentum", "velocity")
    _sparse_layout = "blocks"
    _fused_weight_decay = True  # AdamW's decay runs in the Adam kernel's pass

    def __init__(self, learning_rate: LearningRate = 0.001, beta_1: float = 0.9, beta_2: float = 0.999,
                 epsilon: float = 1e-7, amsgrad: bool = False, **kwargs: Any) -> None:
        super().__init__(learning_rate, beta_1, beta_2, epsilon, **kwargs)
        self.amsgrad = amsgrad
        if amsgrad:
            self._kernel_slots = ("momentum", "velocity", "velocity_hat")

    def build(self, variables: Any) -> None:
        if self.built:
            return
        super().build(variables)
        self._momentums, self._velocities = self.add_optimizer_variables(
            self._trainable_variables, ["momentum", "velocity"])
        if self.amsgrad:
            self._velocity_hats = self.add_optimizer_variables(self._trainable_variables, "velocity_hat")

    _capture_rules = ("adam",)

    def _capture_terms(self, rule, dtype, t, lr):
        """A capturable step's alpha on the device: ``adam_alpha``'s arithmetic over the step count."""
        if rule != "adam":
            return super()._capture_terms(rule, dtype, t, lr)
        return {"alpha": R.adam_alpha(lr, K.cast(self.beta_1, dtype), K.cast(self.beta_2, dtype), t)}

    def _update_group(self, params, grads, slots, learning_rate, **terms) -> None:
        dtype = params[0].dtype
        alpha = adam_alpha(self._lr_for(learning_rate, dtype), K.cast(self.beta_1, dtype),
                           K.cast(self.beta_2, dtype), self._step_count(), dtype)
        kernels.adam(params, grads, slots["momentum"], slots["velocity"], slots.get("velocity_hat"),
                     terms.get("squares"), alpha=alpha,
                     one_minus_beta_1=K.d_form(self.beta_1, dtype), one_minus_beta_2=K.d_form(self.beta_2, dtype),
                     epsilon=K.literal(self.epsilon, dtype), weight_decay=terms.get("weight_decay"),
                     weight_decay_lr=terms.get("weight_decay_lr", 0.0))

    def _slice_terms(self, param, grad, learning_rate):
        return square_terms(param, grad)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "amsgrad": self.amsgrad}


@registry.register("keras3")
class AdamW(Adam):
    """Adam with decoupled weight decay ``w -= w * weight_decay * lr`` (default 0.004) before each update.

    Example:
        >>> import torch, slotopt
        >>> w = slotopt.Variable(torch.tensor([1.0]), name="w")
        >>> opt = slotopt.AdamW(learning_rate=0.1, weight_decay=0.5)
        >>> _ = opt.apply_gradients([(torch.tensor([0.0]), w)])
        >>> round(w.item(), 4)
        0.95
    """

    def __init__(self, learning_rate: LearningRate = 0.001, weight_decay: Any = 0.004, beta_1: float = 0.9,
                 beta_2: float = 0.999, epsilon: float = 1e-7, amsgrad: bool = False, **kwargs: Any) -> None:
        if weight_decay is None:
            raise ValueError(f"Argument `weight_decay` must be a float. Received: weight_decay={weight_decay}")
        super().__init__(learning_rate=learning_rate, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon,
                         amsgrad=amsgrad, weight_decay=weight_decay, **kwargs)


__all__ = ["MomentOptimizer", "Adam", "AdamW", "adam_alpha", "square_terms"]
