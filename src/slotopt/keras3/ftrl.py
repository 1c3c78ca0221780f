"""Keras 3 Ftrl."""

from __future__ import annotations

from typing import Any

from ..engine import checks, registry
from ..engine import constants as K
from ..kernels import ftrl as kernels
from .adam import square_terms
from .optimizer import LearningRate, Optimizer


@registry.register("keras3")
class Ftrl(Optimizer):
    """FTRL-Proximal with L1, L2, L2-shrinkage, ``beta`` and a learning-rate power (Keras 3 numerics).

    With ``p = learning_rate_power``, accumulator ``n`` (starts at ``initial_accumulator_value``) and linear ``z``:
    ``g' = g + 2 * l2_shrinkage * w``; ``n' = n + g*g``; ``z += g' - ((n'^-p - n^-p) / lr) * w``;
    ``q = n'^-p / lr + 2 * (l2 + beta / (2 * lr))``; ``w = (clip(z, -l1, l1) - z) / q`` (0 where ``|z| <= l1``);
    ``n = n'``. State: ``[accumulator, linear]`` per variable.

    Example:
        >>> import torch, slotopt
        >>> w = slotopt.Variable(torch.tensor([0.0]), name="w")
        >>> opt = slotopt.Ftrl(learning_rate=0.5, initial_accumulator_value=0.0)
        >>> _ = opt.apply_gradients([(torch.tensor([2.0]), w)])
        >>> w.item()
        -0.5
    """

    _kernel_slots = ("accumulator", "linear")
    # TensorFlow's pow takes Eigen's packet form on each variable's whole packets and the C library's on the
    # rest: the rule needs whole variables (neither packed together nor cut into blocks).
    _elementwise_update = False
    _sparse_layout = "whole"
    #: The update divides by the learning rate: 0 gives NaN at the first step.
    _hyperparameter_ranges = {"learning_rate": checks.POSITIVE}

    def __init__(self, learning_rate: LearningRate = 0.001, learning_rate_power: float = -0.5,
                 initial_accumulator_value: float = 0.1, l1_regularization_strength: float = 0.0,
                 l2_regularization_strength: float = 0.0, l2_shrinkage_regularization_strength: float = 0.0,
                 beta: float = 0.0, weight_decay: Any = None, clipnorm: Any = None, clipvalue: Any = None,
                 global_clipnorm: Any = None, use_ema: bool = False, ema_momentum: float = 0.99,
                 ema_overwrite_frequency: Any = None, loss_scale_factor: Any = None,
                 gradient_accumulation_steps: Any = None, name: Any = None, **kwargs: Any) -> None:
        for arg, value in (("initial_accumulator_value", initial_accumulator_value),
                           ("learning_rate_power", learning_rate_power),
                           ("l1_regularization_strength", l1_regularization_strength),
                           ("l2_regularization_strength", l2_regularization_strength),
                           ("l2_shrinkage_regularization_strength", l2_shrinkage_regularization_strength),
                           ("beta", beta)):
            checks.check_number(arg, value, checks.ANY)
        if initial_accumulator_value < 0.0:
            raise ValueError("`initial_accumulator_value` needs to be positive or zero. Received: "
                             f"initial_accumulator_value={initial_accumulator_value}.")
        if learning_rate_power > 0.0:
            raise ValueError("`learning_rate_power` needs to be negative or zero. Received: "
                             f"learning_rate_power={learning_rate_power}.")
        for arg, value in (("l1_regularization_strength", l1_regularization_strength),
                           ("l2_regularization_strength", l2_regularization_strength),
                           ("l2_shrinkage_regularization_strength", l2_shrinkage_regularization_strength)):
            if value < 0.0:
                raise ValueError(f"`{arg}` needs to be positive or zero. Received: {arg}={value}.")
        super().__init__(learning_rate, weight_decay, clipnorm, clipvalue, global_clipnorm, use_ema, ema_momentum,
                         ema_overwrite_frequency, loss_scale_factor, gradient_accumulation_steps, name, **kwargs)
        self.learning_rate_power = learning_rate_power
        self.initial_accumulator_value = initial_accumulator_value
        self.l1_regularization_strength = l1_regularization_strength
        self.l2_regularization_strength = l2_regularization_strength
        self.l2_shrinkage_regularization_strength = l2_shrinkage_regularization_strength
        self.beta = beta

    def build(self, variables: Any) -> None:
        if self.built:
            return
        super().build(variables)
        self._accumulators, self._linears = self.add_optimizer_variables(
            self._trainable_variables, ["accumulator", "linear"], [self.initial_accumulator_value, "zeros"])

    def _update_group(self, params, grads, slots, learning_rate, **terms) -> None:
        dtype = params[0].dtype
        lr = self._lr_for(learning_rate, dtype)
        # l2 + beta / (2 * lr), with the Python hyperparameters rounded once to the variable's dtype.
        two_l2 = K.evaluate(lambda l2, beta, lr: 2 * (l2 + beta / (2.0 * lr)), dtype,
                            K.literal(self.l2_regularization_strength, dtype), K.literal(self.beta, dtype), lr)
        kernels.ftrl(params, grads, slots["accumulator"], slots["linear"], terms.get("squares"), lr=lr,
                     power=K.literal(-self.learning_rate_power, dtype),
                     l1=K.literal(self.l1_regularization_strength, dtype), two_l2=two_l2,
                     shrinkage=K.literal(2 * self.l2_shrinkage_regularization_strength, dtype))

    def _slice_terms(self, param, grad, learning_rate):
        return square_terms(param, grad)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "learning_rate_power": self.learning_rate_power,
                "initial_accumulator_value": self.initial_accumulator_value,
                "l1_regularization_strength": self.l1_regularization_strength,
                "l2_regularization_strength": self.l2_regularization_strength,
                "l2_shrinkage_regularization_strength": self.l2_shrinkage_regularization_strength,
                "beta": self.beta}


__all__ = ["Ftrl"]
